#include "worker/data/prefetcher.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>

namespace worker {

Prefetcher::Prefetcher(int threads, int depth, Work work, int nice) : work_(std::move(work)), depth_(depth) {
  if (threads < 1 || depth < 1) throw std::invalid_argument("prefetcher: threads and depth must be positive");
  if (nice < 0) throw std::invalid_argument("prefetcher: nice must not be negative");
  done_.assign(size_t(depth), 0);
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t, nice] { loop(t, nice); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

void Prefetcher::start(int64_t epoch, std::vector<BatchIndices> order) {
  std::unique_lock<std::mutex> lk(mu_);
  skip_handed_out();
  const bool followed = !next_.empty() && epoch == next_epoch_ && order == next_ && !taken_ &&
                        consumed_ >= int64_t(order_.size());
  if (followed) {  // every item of the current pass is done: its claims are past it
    shift_ += int64_t(order_.size());
    claim_batch_ -= int64_t(order_.size());
    order_ = std::move(next_);
    next_.clear();
    epoch_ = epoch;
    consumed_ = 0;
    lk.unlock();
    cv_work_.notify_all();
    return;
  }
  order_.clear();  // no new items are handed out; the ones in flight finish into the old pass
  next_.clear();
  cv_done_.wait(lk, [&] { return in_flight_ == 0; });
  order_ = std::move(order);
  epoch_ = epoch;
  claim_batch_ = claim_pos_ = 0;
  consumed_ = 0;
  shift_ = 0;
  taken_ = false;
  done_.assign(size_t(depth_), 0);
  error_ = nullptr;
  lk.unlock();
  cv_work_.notify_all();
}

void Prefetcher::skip_handed_out() {
  while (claim_batch_ < batches() && claim_pos_ >= int64_t(at(claim_batch_).size())) {
    ++claim_batch_;
    claim_pos_ = 0;
  }
}

void Prefetcher::follow(int64_t epoch, std::vector<BatchIndices> order) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!next_.empty()) throw std::logic_error("prefetcher: follow() twice for one pass");
    next_ = std::move(order);
    next_epoch_ = epoch;
  }
  cv_work_.notify_all();
}

void Prefetcher::loop(int thread, int nice) {
  if (nice > 0) {
    // On Linux a thread's nice value is its own (PRIO_PROCESS with the thread's id). Raising it needs
    // no privilege; should it fail, the thread runs at the process's priority, as it would with 0.
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, tid);
    if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(19, now + nice));
  }
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    // An item may start when its batch's slot is free: at most depth_ batches past the consumer.
    cv_work_.wait(lk, [&] {
      if (stop_) return true;
      skip_handed_out();
      return claim_batch_ < batches() && claim_batch_ < consumed_ + depth_;
    });
    if (stop_) return;
    const int64_t b = claim_batch_, pos = claim_pos_++;
    const int64_t counted = shift_ + b;  // the batch's number whichever pass is current when it is done
    const int slot = slot_of(b);
    const int64_t sample = at(b)[size_t(pos)], epoch = b < int64_t(order_.size()) ? epoch_ : next_epoch_;
    ++in_flight_;
    lk.unlock();
    std::exception_ptr err;
    try {
      work_(slot, int(pos), sample, epoch, thread);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    --in_flight_;
    if (err && (!error_ || counted < error_batch_)) {
      error_ = err;
      error_batch_ = counted;
    }
    ++done_[size_t(slot)];
    // Waking the consumer for every image costs it a futex wake-up each (thousands a second
    // with many threads): only what a waiter waits for is signalled, a complete batch (take),
    // a failed item (take), no item in flight (start).
    const int64_t now = counted - shift_;  // its index in the current pass now (a followed pass may have become it)
    const bool complete = now >= 0 && now < batches() && done_[size_t(slot)] >= int(at(now).size());
    if (complete || err || in_flight_ == 0) cv_done_.notify_all();
  }
}

int Prefetcher::take(double* wait_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  if (taken_) throw std::logic_error("prefetcher: take() twice without release()");
  if (consumed_ >= int64_t(order_.size())) return -1;
  const int slot = slot_of(consumed_);
  const int need = int(order_[size_t(consumed_)].size());
  const auto failed = [&] { return error_ && error_batch_ <= shift_ + consumed_; };
  cv_done_.wait(lk, [&] { return done_[size_t(slot)] >= need || failed(); });
  if (wait_ms) *wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (failed()) std::rethrow_exception(error_);
  taken_ = true;
  return slot;
}

void Prefetcher::release() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!taken_) throw std::logic_error("prefetcher: release() without take()");
    taken_ = false;
    done_[size_t(slot_of(consumed_))] = 0;
    ++consumed_;
  }
  cv_work_.notify_all();
}

}  // namespace worker
