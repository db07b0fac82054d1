// Collective communication between the ranks of a job. CPU: a TCP ring (worker/train);
// GPU: NCCL (worker/gpu). Pointers passed to the collectives live in the backend's memory.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace worker {

// A collective that failed. peer_lost(): because a peer vanished -- it closed its connection,
// or made no progress for the communication timeout (--comm-timeout) -- and lost_peer() names
// it when the communicator can tell. train_resnet then tells the launcher so
// (proto/peer_lost.h), which puts that peer's failure first in its report.
class CommFailure : public std::runtime_error {
 public:
  explicit CommFailure(const std::string& what, bool peer_lost = false, std::optional<int> lost_peer = std::nullopt)
      : std::runtime_error(what), peer_lost_(peer_lost), lost_peer_(lost_peer) {}
  bool peer_lost() const { return peer_lost_; }
  std::optional<int> lost_peer() const { return lost_peer_; }

 private:
  bool peer_lost_;
  std::optional<int> lost_peer_;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum over all ranks. On the GPU this is enqueued on the communication stream,
  // ordered after the work already enqueued on the compute stream; call wait() before
  // the compute stream uses the result. On the CPU it completes before returning.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  // True where collectives run beside the compute (NCCL on its own stream): the trainer then
  // reduces gradient buckets during backward; elsewhere (the ring) after it.
  virtual bool overlaps_compute() const { return false; }
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void wait() = 0;

  // ZeRO's halves of an all-reduce (issue 15), over `count` floats cut into size() blocks by
  // comm_block(): in place and asynchronous like allreduce_sum (wait() before using results).
  // reduce_scatter_sum: rank r ends with the sum over ranks of its block r; the other blocks
  // hold unspecified partial sums. allgather: every rank ends with every rank's block r.
  // Blocks may differ in size by one element (count need not divide by size()).
  virtual void reduce_scatter_sum(float* data, size_t count) = 0;
  virtual void allgather(float* data, size_t count) = 0;

  // Host-memory all-gather: recv holds size() * bytes, rank r's contribution at r * bytes.
  // Blocking. Used for checksums and metrics.
  virtual void allgather_host(const void* send, void* recv, size_t bytes) = 0;

  // The same, split in two so that the exchange overlaps the work between (the ranks' stop and
  // checkpoint requests, agreed one step late: worker/train/requests.h). start copies `send`
  // and begins; finish blocks until `recv` (valid until then) holds every rank's bytes. One at
  // a time; other collectives may run between the two. NCCL runs it on the communication
  // stream without waiting for the compute stream; the CPU ring, which has no thread of its
  // own, does the whole exchange in start (a round trip per rank, microseconds beside a step).
  virtual void allgather_host_start(const void* send, void* recv, size_t bytes) {
    allgather_host(send, recv, bytes);
  }
  virtual void allgather_host_finish() {}

  // Blocks until every rank has called it, with the communication timeout (--comm-timeout)
  // suspended: the ranks wait here while rank 0 writes a checkpoint, however long its file
  // system takes. A peer that exits is still noticed (the ring: its connection closes; NCCL:
  // the launcher's failure record); one that hangs is left to the launcher and its signals.
  virtual void barrier_untimed() = 0;

  // Device-side timing of the gradient all-reduces, summed since the start, where the
  // communicator can measure it (NCCL: CUDA events; false elsewhere). A "step" is the run of
  // allreduce_sum calls up to a wait(): allreduce_ms spans from its first all-reduce's start
  // to its last one's end on the communication stream; exposed_ms is how long after the
  // compute stream reached wait() the all-reduces still ran (what overlap did not hide).
  struct Timing {
    long long steps = 0;
    double allreduce_ms = 0.0, exposed_ms = 0.0;
  };
  virtual bool timing(Timing* t) {
    (void)t;
    return false;
  }
};

// Block r of `count` elements shared by `world` ranks: [r * count / world, (r + 1) * count / world)
// as {offset, length}. The one split reduce_scatter_sum and allgather use, on every backend.
std::pair<size_t, size_t> comm_block(size_t count, int world, int r);

// A Comm for a single process (size 1): every collective is a no-op.
std::unique_ptr<Comm> make_single_process_comm();

}  // namespace worker
