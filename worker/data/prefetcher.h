// A pool of worker threads that works through a pass's micro-batches ahead of the consumer,
// at most `depth` batches ahead (bounded memory): each batch has a slot (batch % depth), each
// sample of it is one work item, and the consumer takes the batches in order.
//
// A pass may be followed by the next one (follow(): the next epoch's order, which the trainer knows
// ahead): once every item of the current pass is handed out the threads go on into it, still at
// most `depth` batches past the consumer, so an epoch's first batches are ready when it starts.
//
// The work function fills the sample's place in the slot (the image source decodes into host
// buffers there). It is called from the pool's threads; `thread` (0 .. threads-1) lets it keep
// per-thread state. An exception it throws is handed to the consumer when take() reaches
// that item's batch.
//
// `nice` > 0 lowers the threads' scheduling priority by that much (setpriority on each thread):
// beside a GPU they are background work, and the thread that launches the GPU's work must not
// wait for a core behind them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/data/batch_source.h"

namespace worker {

class Prefetcher {
 public:
  using Work = std::function<void(int slot, int pos, int64_t sample, int64_t epoch, int thread)>;
  Prefetcher(int threads, int depth, Work work, int nice = 0);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Begins this pass. If it is the one follow() announced (the same epoch and order) and the
  // current pass has been taken to its end, the work already done for it is kept; otherwise the
  // current pass and a followed one are abandoned (waits for the items in flight).
  void start(int64_t epoch, std::vector<BatchIndices> order);
  // The pass after the current one, at most once per pass (throws std::logic_error otherwise): the
  // threads go on into it once the current pass's items are all handed out.
  void follow(int64_t epoch, std::vector<BatchIndices> order);
  // Waits until the next batch is complete; returns its slot, or -1 at the end of the pass.
  // wait_ms receives the time blocked. Rethrows a work item's exception.
  int take(double* wait_ms);
  // The consumer is done with the slot take() returned: its batch's samples may be reused.
  void release();
  const BatchIndices& batch(int64_t b) const { return order_[size_t(b)]; }
  int64_t current() const { return consumed_; }  // the batch take() returns next
  int depth() const { return depth_; }
  int threads() const { return int(threads_.size()); }

 private:
  void loop(int thread, int nice);
  // Moves the claim past batches whose items are all handed out (under mu_).
  void skip_handed_out();
  // Batches over the current pass and the followed one: b >= order_.size() is next_'s b - order_.size().
  int64_t batches() const { return int64_t(order_.size() + next_.size()); }
  const BatchIndices& at(int64_t b) const {
    return b < int64_t(order_.size()) ? order_[size_t(b)] : next_[size_t(b) - order_.size()];
  }
  // Batch b of the current pass lives in slot (shift_ + b) % depth_, so that a followed pass's
  // batches keep their slots when it becomes the current one.
  int slot_of(int64_t b) const { return int((shift_ + b) % depth_); }

  Work work_;
  int depth_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  bool stop_ = false;
  int64_t epoch_ = 0;
  std::vector<BatchIndices> order_;
  int64_t next_epoch_ = 0;
  std::vector<BatchIndices> next_;           // follow()'s pass; empty: none
  int64_t shift_ = 0;                        // batches of the passes before the current one, since the last abandon
  int64_t claim_batch_ = 0, claim_pos_ = 0;  // the next item to hand out
  int64_t consumed_ = 0;                     // batches released by the consumer
  bool taken_ = false;                       // take() returned consumed_ and release() is due
  int in_flight_ = 0;
  std::vector<int> done_;                    // per slot: samples finished
  std::exception_ptr error_;                 // the first failed item's, of batch error_batch_ (counted as shift_ is)
  int64_t error_batch_ = 0;
};

}  // namespace worker
