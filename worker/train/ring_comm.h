// The CPU communicator: a ring of TCP connections between the ranks of a job.
//
// Each rank listens on an ephemeral port of its own host, publishes "ip:port" through a
// Rendezvous (the launcher's store in production, a map in tests), connects to its right
// neighbour (rank + 1) and accepts its left neighbour (rank - 1). Every connection opens with
// a handshake (magic, version, job id, rank, world) answered by the acceptor; every message is
// a 16-byte header (magic, sequence number, payload length) and its payload; a peer that
// closes, sends garbage or stays silent past the timeout is a CommError naming its rank
// (except in barrier_untimed(), where only a closed connection is).
//
// allreduce_sum is a ring reduce-scatter followed by a ring all-gather, chunked, with sends
// and receives interleaved by one poll loop (full duplex). Each element's sum is computed on
// exactly one rank and then copied, so every rank ends with bit-identical results.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/core/comm.h"

namespace proto {
class Client;
}

namespace worker {

// The ring's errors; a peer that vanished (closed its connection, went silent past
// RingConfig::timeout, refused the connection after publishing its address) is peer_lost().
class CommError : public CommFailure {
 public:
  using CommFailure::CommFailure;
};

// Where ranks find each other's listening addresses.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual void publish(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists; `writer` names who should have written it (for the error).
  virtual std::string lookup(const std::string& key, std::chrono::milliseconds timeout,
                             const std::string& writer) = 0;
};

// A Rendezvous over the launcher's store (the client must outlive it).
std::unique_ptr<Rendezvous> make_store_rendezvous(proto::Client& client);
// Without a store: rank r is at endpoints[r] (listen there with RingConfig::bind_port set and
// retry_connect on, since nobody says when a peer has started listening).
std::unique_ptr<Rendezvous> make_endpoint_rendezvous(const std::vector<std::string>& endpoints,
                                                     const std::string& key_prefix);

struct RingConfig {
  int rank = 0;
  int world = 1;
  std::string job_id = "default";
  std::string bind_host = "127.0.0.1";  // this rank's host (PADDLE_CURRENT_ENDPOINT's host)
  uint16_t bind_port = 0;               // 0: an ephemeral port, published through the rendezvous
  bool retry_connect = false;           // retry a refused connection until the timeout
  std::string key_prefix = "ring/0";    // store keys: <prefix>/addr/<rank>
  // Silence of a neighbour before giving up on it (train_resnet --comm-timeout, 300 s): the
  // CPU analogue of NCCL's watchdog. Bounds the set-up as well.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  size_t chunk_bytes = size_t(4) << 20;  // pipelining unit of the ring
};

// Builds the ring (blocks until both neighbours are connected, bounded by cfg.timeout).
std::unique_ptr<Comm> make_ring_comm(const RingConfig& cfg, Rendezvous& rendezvous);

}  // namespace worker
