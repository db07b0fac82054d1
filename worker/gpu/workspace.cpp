#include "worker/gpu/workspace.h"

#include <algorithm>
#include <utility>

#include "worker/gpu/side_stream.h"

namespace worker {
namespace gpu {

void Workspace::note_plan(size_t workspace_bytes, size_t half_weight_bytes) {
  largest_plan_ = std::max(largest_plan_, workspace_bytes);
  largest_weight_ = std::max(largest_weight_, half_weight_bytes);
}

void Workspace::grow(size_t bytes) {
  if (bytes > ranges_.bytes()) {
    // Sized for every plan known so far at once, so the workspace is carved once.
    const size_t need = std::max(bytes, largest_plan_);
    ranges_.place(static_cast<char*>(pool_.alloc(need)), need);
    carved_ += need;
  }
}

void* Workspace::main(size_t bytes) {
  if (bytes == 0) return nullptr;
  grow(bytes);
  const Range r = ranges_.main(bytes);
  if (side_) side_->guard_write(r.p, r.bytes);
  return ranges_.base();
}

void Workspace::begin_side_task() {
  side_->begin();  // before the data gradient: the two may overlap as well
  ranges_.fork();
}

void* Workspace::side(size_t bytes) {
  if (bytes == 0) return nullptr;
  grow(bytes);
  bool refork = false;
  char* p = ranges_.side(bytes, &refork);
  if (refork) side_->begin();
  return p;
}

void* Workspace::side_scratch(size_t bytes) {
  if (bytes > side_half_bytes_) {
    // The largest weight of the model at once (backward reaches the convolutions in reverse).
    const size_t b = std::max(bytes, largest_weight_);
    side_half_ = pool_.alloc(b);
    side_half_bytes_ = b;
    side_scratch_carved_ += b;
  }
  return side_half_;
}

void Workspace::end_side_task(std::vector<Range> reads, std::vector<Range> writes) {
  writes.push_back(ranges_.end_task());
  side_->end(std::move(reads), std::move(writes));
}

}  // namespace gpu
}  // namespace worker
