// The cuDNN workspace, one buffer that both streams share: the main stream takes it from its start,
// the side stream (side_stream.h: backward's weight gradients) from its end, so that a weight
// gradient beside a data gradient shares the one buffer when their two needs fit in it. This class
// hands out every piece of it and keeps them apart in time (the rule is WorkspaceRanges', ranges.h):
//   - a main-stream piece that a pending side task uses waits for that task (SideStream's guard);
//   - a side task's piece that reaches into what the main stream took since the task's fork (the
//     data gradient enqueued just before it, which may still be running) forks the task again,
//     after that work (the race fixed in 259d62f).
// It also owns the side stream's half-precision dW scratch. Nothing is freed: the buffer grows
// (between steps, never in the loop after the first) and the pool keeps the old one.
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

#include "worker/gpu/pool.h"
#include "worker/gpu/ranges.h"

namespace worker {
namespace gpu {

class SideStream;

class Workspace {
 public:
  // side: null when the weight gradients stay on the main stream.
  Workspace(DevicePool& pool, SideStream* side) : pool_(pool), side_(side) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A convolution plan's needs, noted when it is made: its largest workspace, and its weight's
  // bytes in the compute dtype (a side task's dW). The buffers are carved for every plan so far.
  void note_plan(size_t workspace_bytes, size_t half_weight_bytes);

  // At least `bytes` for the main stream (null for 0).
  void* main(size_t bytes);

  // --- A side task: begin, then side() / side_scratch() for its kernels, then end().
  void begin_side_task();  // its fork: after everything enqueued on the main stream so far
  void* side(size_t bytes);  // at least `bytes` at the buffer's end (null for 0)
  void* side_scratch(size_t bytes);  // the task's dW in the compute dtype
  // The task is enqueued: SideStream records it with what it reads and writes, and the piece of
  // the workspace it used.
  void end_side_task(std::vector<Range> reads, std::vector<Range> writes);

  size_t bytes() const { return ranges_.bytes(); }
  size_t carved() const { return carved_; }  // workspaces carved, outgrown ones included
  size_t side_scratch_carved() const { return side_scratch_carved_; }

 private:
  void grow(size_t bytes);

  DevicePool& pool_;
  SideStream* side_;
  WorkspaceRanges ranges_;
  size_t largest_plan_ = 0;    // the largest workspace of any plan noted
  size_t largest_weight_ = 0;  // the largest half-precision weight of any plan noted
  void* side_half_ = nullptr;
  size_t side_half_bytes_ = 0;
  size_t carved_ = 0, side_scratch_carved_ = 0;
};

}  // namespace gpu
}  // namespace worker
