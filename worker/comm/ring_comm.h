// The CPU communicator: a ring of TCP connections between the ranks of a job.
//
// Each rank listens on an ephemeral port of its own host, publishes "ip:port" through a
// Rendezvous (the launcher's store in production, a map in tests), connects to its right
// neighbour (rank + 1) and accepts its left neighbour (rank - 1). Every connection opens with the
// authenticated set-up of proto/ring_hello.h (RING_PROTOCOL.md): HELLO, CHALLENGE, PROOF, VERDICT,
// the MACs keyed with the job's token, both halves of this rank's set-up and every stranger's
// connection driven by one poll loop; every message is then a 16-byte header (magic, sequence
// number, payload length) and its payload; a peer that closes, sends garbage or stays silent past
// the timeout is a CommError naming its rank (except in barrier_untimed(), where only a closed
// connection is).
//
// Connections to this rank's port that are not its left neighbour's (a stranger's, one of
// another job, world size or rank, one without the token, an idle one) are refused or dropped
// without ending the rank: they are named in RingConfig::warn, an idle one is dropped
// RingConfig::handshake_timeout after it was accepted, and the real neighbour is accepted
// meanwhile.
//
// allreduce_sum is a ring reduce-scatter followed by a ring all-gather, chunked, with sends
// and receives interleaved by one poll loop (full duplex). Each element's sum is computed on
// exactly one rank and then copied, so every rank ends with bit-identical results.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/comm/comm.h"

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

// A Rendezvous over the launcher's store (the client must outlive it); `timeout` bounds each
// publish (train_resnet: --comm-timeout), as RingConfig::timeout bounds each lookup.
std::unique_ptr<Rendezvous> make_store_rendezvous(proto::Client& client, std::chrono::milliseconds timeout);
// Without a store: rank r is at endpoints[r] (listen there with RingConfig::bind_port set and
// retry_connect on, since nobody says when a peer has started listening).
std::unique_ptr<Rendezvous> make_endpoint_rendezvous(const std::vector<std::string>& endpoints,
                                                     const std::string& key_prefix);

struct RingConfig {
  int rank = 0;
  int world = 1;
  std::string job_id = "default";
  // The key of the set-up's MACs: the job's token (LAUNCH_STORE_TOKEN). Empty where the ranks
  // have none (paddle's launcher, fixed endpoints): the set-up then checks job id, world and
  // rank only, which keeps strays out but no one who means harm.
  std::string token;
  std::string bind_host = "127.0.0.1";  // this rank's host (PADDLE_CURRENT_ENDPOINT's host)
  uint16_t bind_port = 0;               // 0: an ephemeral port, published through the rendezvous
  bool retry_connect = false;           // retry a refused connection until the timeout
  std::string key_prefix = "ring/0";    // store keys: <prefix>/addr/<rank>
  // Silence of a neighbour before giving up on it (train_resnet --comm-timeout, 300 s): the
  // CPU analogue of NCCL's watchdog. Bounds the set-up as well.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // A connection to this rank's port that has not completed its set-up this long after it was
  // accepted is dropped (the real neighbour's takes milliseconds). Bounded by `timeout`.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  size_t chunk_bytes = size_t(4) << 20;  // pipelining unit of the ring
  // One line per connection refused or dropped during the set-up (train_resnet: a warning on
  // stderr); the first 10 are named, the rest counted in the set-up's timeout error. May be empty.
  std::function<void(const std::string&)> warn;
};

// Builds the ring (blocks until both neighbours are connected, bounded by cfg.timeout).
std::unique_ptr<Comm> make_ring_comm(const RingConfig& cfg, Rendezvous& rendezvous);

}  // namespace worker
