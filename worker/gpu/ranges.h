// The pure half of the backend's two streams: memory-range bookkeeping with no CUDA call, so that
// its rules are tested without a GPU (tests/worker/gpu/test_ranges.cpp, in CI).
//   - PendingRanges: the side stream's pending tasks and the ranges each reads and writes; which
//     task a main-stream write must wait for (SideStream).
//   - WorkspaceRanges: which piece of the one cuDNN workspace each stream takes, the main stream
//     from its start and the side stream from its end, and when a side task must wait for the
//     main-stream work beside it (Workspace).
//   - UnwrittenRanges: the outputs a fused forward left unwritten, until a write covers them or a
//     read needs them written (GpuOps::bn_relu_conv_forward_train, materialize).
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace worker {
namespace gpu {

struct Range {
  const void* p = nullptr;
  size_t bytes = 0;
};

// True when [r.p, r.p + r.bytes) and [p, p + bytes) share a byte (empty ranges share none).
bool overlaps(const Range& r, const void* p, size_t bytes);

class PendingRanges {
 public:
  void push(std::vector<Range> reads, std::vector<Range> writes);
  // The latest pending task that reads or writes a byte of [p, p + bytes): waiting for it covers
  // the earlier ones (the side stream runs its tasks in order). None when nothing conflicts.
  std::optional<size_t> latest_conflict(const void* p, size_t bytes) const;
  void drop_through(size_t k);  // tasks [0, k] are done
  size_t size() const { return tasks_.size(); }

 private:
  struct Task {
    std::vector<Range> reads, writes;
  };
  std::deque<Task> tasks_;
};

class WorkspaceRanges {
 public:
  // Side ranges start on this boundary (cuDNN's workspace alignment).
  static constexpr size_t kSideAlign = 256;

  // The buffer ranges are cut from; again when it grew (work in flight keeps the old buffer,
  // which the device pool never hands out again).
  void place(char* base, size_t bytes);
  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }

  // The main stream takes [base, base + bytes).
  Range main(size_t bytes);
  // A side task is being enqueued from here: what the main stream takes until end_task() may
  // run beside it (backward's data gradient, enqueued after the task's fork).
  void fork();
  // The side task takes `bytes` from the buffer's end (the piece starts at the pointer returned,
  // kSideAlign-aligned). *refork: the piece reaches into what the main stream took since the
  // fork, so the task must fork again, after that work (it may still be running: the race fixed
  // in 259d62f).
  char* side(size_t bytes, bool* refork);
  // The task is enqueued: the piece of the workspace it used (empty if none), which its record
  // must hold as written until it is done.
  Range end_task();
  bool forking() const { return forking_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  bool forking_ = false;
  // Since the fork: the buffer the main stream took from and how much of it.
  const char* main_base_ = nullptr;
  size_t main_used_ = 0;
  // The piece the task being enqueued uses.
  char* side_lo_ = nullptr;
  char* side_hi_ = nullptr;
};

// Tensors that hold nothing yet although the model expects them written (a batch norm's output the
// fused prologue skipped), each with what writes it (Info, the caller's), by address. A write over any
// byte of one drops it: it holds what was written now. A read of any byte makes it due: take() removes
// it and hands it to the caller, which writes it before the read.
template <typename Info>
class UnwrittenRanges {
 public:
  void add(const void* p, size_t bytes, Info info) {  // (replaces one at p)
    written(p, bytes);
    map_[p] = Entry{bytes, std::move(info)};
  }
  // The one at exactly p, if any.
  const Info* find(const void* p) const {
    const auto it = map_.find(p);
    return it == map_.end() ? nullptr : &it->second.info;
  }
  void written(const void* p, size_t bytes) { take(p, bytes); }  // (what was written holds now)
  // Those [p, p + bytes) reads a byte of, removed.
  std::vector<std::pair<Range, Info>> take(const void* p, size_t bytes) {
    std::vector<std::pair<Range, Info>> due;
    for (auto it = map_.begin(); it != map_.end();) {
      if (overlaps({it->first, it->second.bytes}, p, bytes)) {
        due.emplace_back(Range{it->first, it->second.bytes}, std::move(it->second.info));
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
    return due;
  }
  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    size_t bytes = 0;
    Info info;
  };
  std::map<const void*, Entry> map_;
};

}  // namespace gpu
}  // namespace worker
