// Started by torchrun (or anything that sets only RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT) there is no LAUNCH_STORE_ADDR: the ranks meet in a store that rank 0 serves
// itself on MASTER_ADDR:MASTER_PORT, as torch's TCPStore does when TORCHELASTIC_USE_AGENT_STORE
// is False (torchrun's c10d rendezvous, --standalone). Every rank, rank 0 included, is then a
// client of it, so the CPU ring and NCCL's id exchange work as under `launch`.
//
// Not possible: TORCHELASTIC_USE_AGENT_STORE=True (torchrun's static rendezvous), where
// torchrun's agent already serves its own TCPStore on MASTER_PORT: refused with a message.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "proto/client.h"
#include "worker/train/env.h"

namespace worker {

class TorchrunStore {
 public:
  // Rank 0 binds MASTER_ADDR:MASTER_PORT (an address of this host) and serves there; every rank
  // waits up to `connect_timeout` (train_resnet's --comm-timeout) for it to accept. Throws
  // EnvError when the environment cannot work (agent store, MASTER_ADDR not local) and
  // std::runtime_error when the port cannot be bound.
  TorchrunStore(const WorkerEnv& env, std::chrono::milliseconds connect_timeout);
  // Every rank marks itself done; rank 0 keeps serving until all have (bounded), so that a
  // peer's last store calls are answered, unless an exception is unwinding.
  ~TorchrunStore();
  TorchrunStore(const TorchrunStore&) = delete;
  TorchrunStore& operator=(const TorchrunStore&) = delete;

  proto::Client& client() { return *client_; }
  // This host's address on the way to MASTER_ADDR: where the rank's ring listens.
  const std::string& local_host() const { return local_host_; }

 private:
  int rank_ = 0, world_ = 1;
  std::string local_host_;
  std::shared_ptr<void> server_;  // rank 0 only
  std::optional<proto::Client> client_;
};

}  // namespace worker
