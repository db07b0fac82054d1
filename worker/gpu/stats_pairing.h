// The pure half of fp16's fused convolution + batch-norm statistics (conv+genstats, docs/gpu.md): host
// bookkeeping over pointers with no CUDA call, tested without a GPU (tests/worker/gpu/test_stats_pairing.cpp).
//
// A convolution may write, beside its output y, the per-channel fp32 sum and sum of squares of y into its
// statistics slot (a small device buffer, one per shape and output: ConvPlanner::stats_slot). A training
// batch norm may then skip its statistics pass, but only when what it reads is exactly that y with nothing
// written over any byte of it since, and the slot still holds y's sums (another call writing y may have
// written it again). Every
// main-stream write of the backend is reported here (GpuOps::writes), so the pairing cannot outlive the
// data it describes.
//
// Whether a convolution should write the sums at all is predicted: the model's calls repeat every step, so
// a call (its slot, x, y and whether backward has begun: --recompute block runs a block's convolutions
// again inside backward, where its last ones feed no batch norm) writes them when the same call's output
// was read by a training batch norm the last time (a call not seen in its phase yet: as in the other
// phase). A call never seen, or whose output was overwritten unread last time, runs the plain
// convolution; an output read by an evaluation batch norm only leaves the prediction as it was (a
// validation pass between training steps changes nothing).
//
// The slots: an engine's sums are only trusted in a slot that was zero before it ran (whether cuDNN's
// genstats adds into its outputs or writes them is not documented). The finalize that takes a slot's sums
// zeroes it again; a slot written and never taken is dirty, and the backend zeroes it before the next
// convolution writes there (needs_zero) and at the end of a captured step (drop_untaken), so that every
// replay of a CUDA graph starts from zeroed slots as the capture did.
#pragma once

#include <cstddef>
#include <map>
#include <tuple>
#include <vector>

#include "worker/gpu/ranges.h"

namespace worker {
namespace gpu {

class StatsPairing {
 public:
  // One convolution call: its statistics slot, its input, its output, and whether backward
  // has begun (the call is a recomputation).
  struct Conv {
    Range slot;
    const void* x = nullptr;
    Range y;
    bool backward = false;
  };

  // Whether this call should write its output's sums: its output fed a training batch norm last time.
  bool predicted(const Conv& c) const;
  // The slot holds sums that nobody took: zero it before a convolution writes sums there again.
  bool needs_zero(const void* slot) const { return dirty_.count(slot) != 0; }
  void zeroed(const void* slot) { dirty_.erase(slot); }
  // The convolution wrote c.y, with its sums in c.slot or (stats false) without.
  void conv_wrote(const Conv& c, bool stats);
  // Anything else writes [p, p + bytes): an output it touches loses its sums (and its call's outcome is
  // recorded for the prediction).
  void written(const void* p, size_t bytes);
  // A training batch norm reads x (bytes): the slot holding x's sums, which the caller's finalize takes
  // and zeroes; null when there are none (the batch norm computes its own statistics).
  const void* train_reads(const void* x, size_t bytes);
  // Whether train_reads(x, bytes) would return sums now (nothing is taken or recorded).
  bool holds_sums(const void* x, size_t bytes) const;
  // An evaluation batch norm reads x: the call that wrote it keeps its prediction.
  void eval_reads(const void* x, size_t bytes);
  // Every dirty slot, to be zeroed now; the outputs whose sums they held lose them.
  std::vector<Range> drop_untaken();

  size_t live() const { return live_.size(); }  // outputs tracked (tests)

 private:
  using Key = std::tuple<const void*, const void*, const void*, size_t, bool>;
  static Key key(const Conv& c) { return {c.slot.p, c.x, c.y.p, c.y.bytes, c.backward}; }
  struct Output {
    Conv conv;
    bool has_stats = false;  // its slot holds its sums
    bool fed_train = false;  // a training batch norm read it
    bool read_eval = false;  // an evaluation batch norm read it
  };
  // The outputs of convolutions not written over since, at most one per address.
  std::vector<Output> live_;
  std::map<Key, bool> fed_;  // per call: its output fed a training batch norm last time
  std::map<const void*, size_t> dirty_;  // slot -> its bytes
};

}  // namespace gpu
}  // namespace worker
