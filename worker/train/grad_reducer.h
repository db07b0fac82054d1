// Gradient all-reduce in buckets while backward runs (worth it where the communicator is
// asynchronous, i.e. NCCL on its own stream). The model reports finished ranges of the flat
// gradient buffer from its end towards its start (Model::on_grads_ready); contiguous ranges are
// merged into buckets of at least `bucket` floats and all-reduced as they fill. Whatever was not
// reduced during backward (a gap, an out-of-order range, no callbacks at all) is reduced by
// finish(), so every element is reduced exactly once whatever the callbacks were.
#pragma once

#include <cstddef>

#include "worker/core/comm.h"

namespace worker {

class GradReducer {
 public:
  GradReducer(Comm& comm, float* grads, size_t count, size_t bucket)
      : comm_(comm), grads_(grads), count_(count), bucket_(bucket) {}

  void begin() { low_ = pending_end_ = count_; }
  // [b, e) of the buffer is final for this backward.
  void ready(size_t b, size_t e) {
    if (e != low_ || b >= e) return;  // not contiguous with what we hold: finish() covers it
    low_ = b;
    if (pending_end_ - low_ >= bucket_) flush();
  }
  // After backward: reduces the rest and waits for every reduction.
  void finish() {
    flush();
    if (low_ > 0) comm_.allreduce_sum(grads_, low_);
    low_ = 0;
    comm_.wait();
  }

 private:
  void flush() {
    if (pending_end_ > low_) comm_.allreduce_sum(grads_ + low_, pending_end_ - low_);
    pending_end_ = low_;
  }

  Comm& comm_;
  float* grads_;
  size_t count_, bucket_;
  size_t low_ = 0;          // [low_, count_) is reduced or pending
  size_t pending_end_ = 0;  // [low_, pending_end_) is pending
};

}  // namespace worker
