#include "worker/gpu/ranges.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace worker {
namespace gpu {

bool overlaps(const Range& r, const void* p, size_t bytes) {
  const char* a = static_cast<const char*>(r.p);
  const char* b = static_cast<const char*>(p);
  return r.bytes != 0 && bytes != 0 && a < b + bytes && b < a + r.bytes;
}

// --- PendingRanges

void PendingRanges::push(std::vector<Range> reads, std::vector<Range> writes) {
  tasks_.push_back({std::move(reads), std::move(writes)});
}

std::optional<size_t> PendingRanges::latest_conflict(const void* p, size_t bytes) const {
  for (size_t k = tasks_.size(); k-- > 0;) {
    const Task& t = tasks_[k];
    bool hit = false;
    for (const Range& r : t.reads) hit = hit || overlaps(r, p, bytes);
    for (const Range& r : t.writes) hit = hit || overlaps(r, p, bytes);
    if (hit) return k;
  }
  return std::nullopt;
}

void PendingRanges::drop_through(size_t k) { tasks_.erase(tasks_.begin(), tasks_.begin() + std::ptrdiff_t(k + 1)); }

// --- WorkspaceRanges

void WorkspaceRanges::place(char* base, size_t bytes) {
  base_ = base;
  bytes_ = bytes;
}

Range WorkspaceRanges::main(size_t bytes) {
  if (forking_) {
    if (main_base_ != base_) {  // the buffer grew: the data gradient has a new one
      main_base_ = base_;
      main_used_ = 0;
    }
    main_used_ = std::max(main_used_, bytes);
  }
  return {base_, bytes};
}

void WorkspaceRanges::fork() {
  forking_ = true;
  main_base_ = base_;
  main_used_ = 0;
}

char* WorkspaceRanges::side(size_t bytes, bool* refork) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(base_) + bytes_;
  char* p = reinterpret_cast<char*>((end - bytes) & ~uintptr_t(kSideAlign - 1));
  // The main stream's work since the fork used [base, base + main_used): on an overlap the task
  // forks again, after it (so it waits for that data gradient).
  *refork = forking_ && main_base_ == base_ && base_ + main_used_ > p;
  if (!side_lo_ || p < side_lo_) side_lo_ = p;
  side_hi_ = reinterpret_cast<char*>(end);
  return p;
}

Range WorkspaceRanges::end_task() {
  const Range used{side_lo_, side_lo_ ? size_t(side_hi_ - side_lo_) : 0};
  side_lo_ = side_hi_ = nullptr;
  forking_ = false;
  return used;
}

}  // namespace gpu
}  // namespace worker
