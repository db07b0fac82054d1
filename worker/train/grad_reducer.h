// Gradient reduction bucket by bucket while backward runs (worth it where the communicator is
// asynchronous, i.e. NCCL on its own stream; on the CPU ring the same buckets are reduced after
// backward). The buckets are fixed (ShardLayout, worker/train/shard.h): the model reports
// finished ranges of the flat gradient buffer from its end towards its start
// (Model::on_grads_ready), and each bucket is all-reduced -- or, under ZeRO-1, reduce-scattered
// -- as soon as all of it is final. Whatever was not reduced during backward (a gap, an
// out-of-order range, no callbacks at all) is reduced by finish(), so every bucket is reduced
// exactly once, in the same order, whatever the callbacks were.
#pragma once

#include <cstddef>
#include <cstdint>

#include "worker/comm/comm.h"
#include "worker/train/shard.h"

namespace worker {

enum class Reduction : uint8_t { AllReduce, ReduceScatter };

class GradReducer {
 public:
  // `layout` must outlive the reducer.
  GradReducer(Comm& comm, float* grads, const ShardLayout& layout, Reduction how)
      : comm_(comm), grads_(grads), layout_(layout), how_(how) {}

  void begin() {
    next_ = 0;
    low_ = layout_.buckets.empty() ? 0 : layout_.buckets.front().end;
  }
  // [b, e) of the buffer is final for this backward.
  void ready(size_t b, size_t e) {
    if (e != low_ || b >= e) return;  // not contiguous with what we hold: finish() covers it
    low_ = b;
    while (next_ < layout_.buckets.size() && layout_.buckets[next_].begin >= low_) launch(next_++);
  }
  // After backward: reduces the rest and waits for every reduction.
  void finish() {
    while (next_ < layout_.buckets.size()) launch(next_++);
    comm_.wait();
  }

 private:
  void launch(size_t k) {
    const Bucket& b = layout_.buckets[k];
    if (how_ == Reduction::AllReduce)
      comm_.allreduce_sum(grads_ + b.begin, b.size());
    else
      comm_.reduce_scatter_sum(grads_ + b.begin, b.size());
  }

  Comm& comm_;
  float* grads_;
  const ShardLayout& layout_;
  Reduction how_;
  size_t next_ = 0;  // buckets [0, next_) are launched
  size_t low_ = 0;   // [low_, end) of the buffer is final
};

}  // namespace worker
