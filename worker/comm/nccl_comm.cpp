// worker::Comm over NCCL. The unique id is brokered through the launcher's store; the
// communicator is created non-blocking so that start-up and every later wait can be abandoned;
// collectives run on a communication stream ordered against the compute stream by events (no
// host synchronisation); a watchdog thread turns a dead peer into an abort within seconds.
#include "worker/comm/nccl_comm.h"

#include <array>
#include <atomic>
#include <deque>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "proto/client.h"
#include "proto/peer_lost.h"
#include "proto/rendezvous.h"
#include "worker/core/knobs.h"
#include "worker/gpu/check.h"
#include "worker/gpu/gpu_ops.h"

namespace worker {
namespace gpu {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After the watchdog aborts the communicator, the main thread gets this long to notice (its
// next collective or wait throws) before the process is ended from the watchdog: a rank stuck
// in a driver call must not outlive its peer by more than the 5 s the launcher allows.
constexpr auto kGraceAfterAbort = milliseconds(2000);
constexpr auto kPollInterval = milliseconds(100);
constexpr auto kStorePollInterval = milliseconds(500);

class NcclComm final : public Comm {
 public:
  NcclComm(GpuOps& ops, proto::Client* store, int rank, int size, const std::string& name,
           int generation, milliseconds timeout)
      : ops_(ops), rank_(rank), size_(size), timeout_(timeout) {
    CUDA_CHECK(cudaSetDevice(ops.device_ordinal()));
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&async_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&host_done_, cudaEventDisableTiming));
    for (TimingSlot& t : slots_)
      for (cudaEvent_t* e : {&t.start, &t.compute_done, &t.end}) CUDA_CHECK(cudaEventCreate(e));

    // --- The unique id, from rank 0 through the store.
    ncclUniqueId id;
    const double init_timeout = process_knobs().nccl_init_timeout_s;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (size > 1) {
      if (!store)
        throw GpuError(GpuError::Kind::Invalid,
                       "NCCL with " + std::to_string(size) +
                           " ranks needs the launcher's store (LAUNCH_STORE_ADDR): start the "
                           "workers with launch");
      const std::string blob = proto::share_unique_id(
          *store, rank, name, uint64_t(generation),
          rank == 0 ? std::string_view(id.internal, sizeof id.internal) : std::string_view(),
          sizeof id.internal, milliseconds(int64_t(init_timeout * 1000)));
      std::memcpy(id.internal, blob.data(), sizeof id.internal);
    }

    // --- Non-blocking creation, bounded by a deadline and by the job's failure record.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NCCL_CHECK(ncclCommInitRankConfig(&comm_, size, id, rank, &config));
    const auto deadline = Clock::now() + milliseconds(int64_t(init_timeout * 1000));
    auto next_store_poll = Clock::now() + kStorePollInterval;
    for (;;) {
      ncclResult_t st = ncclInProgress;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &st));
      if (st == ncclSuccess) break;
      if (st != ncclInProgress) {
        abort_comm();
        throw_nccl(st, "ncclCommInitRankConfig (asynchronous)", __FILE__, __LINE__);
      }
      if (store && Clock::now() >= next_store_poll) {
        next_store_poll = Clock::now() + kStorePollInterval;
        if (auto f = store->job_failure(milliseconds(2000))) {
          abort_comm();
          throw GpuError(GpuError::Kind::PeerFailed,
                         "NCCL set-up abandoned, the job failed: " + *f + " (" + where() + ")");
        }
      }
      if (Clock::now() > deadline) {
        abort_comm();
        throw GpuError(GpuError::Kind::Nccl,
                       "NCCL communicator of " + std::to_string(size) + " ranks not ready after " +
                           std::to_string(int(init_timeout)) + " s (" + where() +
                           "): some rank did not join; raise WORKER_NCCL_INIT_TIMEOUT_S if the "
                           "machine is slow");
      }
      std::this_thread::sleep_for(milliseconds(1));
    }

    // The watchdog has its own store connection: the main thread's client is not shared.
    if (size > 1 && store) {
      try {
        watch_store_ = std::make_unique<proto::Client>(store->options());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[%s] warning: NCCL watchdog without the store (%s)\n",
                     where().c_str(), e.what());
      }
    }
    if (size > 1) watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (!aborted_.load()) {
      cudaStreamSynchronize(comm_stream_);
      ncclCommFinalize(comm_);
      ncclResult_t st = ncclInProgress;
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st == ncclInProgress &&
             Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(1));
      if (st == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaEventDestroy(async_done_);
    cudaEventDestroy(host_done_);
    if (async_host_) cudaFreeHost(async_host_);
    for (const InFlight& f : in_flight_) cudaEventDestroy(f.done);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (TimingSlot& t : slots_)
      for (cudaEvent_t e : {t.start, t.compute_done, t.end}) cudaEventDestroy(e);
    cudaStreamDestroy(comm_stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool overlaps_compute() const override { return true; }

  void allreduce_sum(float* data, size_t count) override {
    order_after_compute();
    start_timing();
    enqueued(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, comm_stream_),
             "ncclAllReduce", __LINE__);
  }

  // ZeRO (issue 15). Blocks of equal size: NCCL's in-place reduce-scatter / all-gather (rank r's
  // block at data + r * block). Otherwise (a bucket that does not divide by the world size) one
  // ncclReduce / ncclBroadcast per block in a group, as PyTorch does for uneven sizes.
  // Reduce-scatters are timed as the step's gradient collectives, as all-reduces are.
  void reduce_scatter_sum(float* data, size_t count) override {
    order_after_compute();
    start_timing();
    if (count % size_t(size_) == 0) {
      const size_t b = count / size_t(size_);
      enqueued(ncclReduceScatter(data, data + size_t(rank_) * b, b, ncclFloat, ncclSum, comm_, comm_stream_),
               "ncclReduceScatter", __LINE__);
      return;
    }
    grouped(data, count, "ncclReduce (uneven reduce-scatter)", [&](float* p, size_t n, int root) {
      return ncclReduce(p, p, n, ncclFloat, ncclSum, root, comm_, comm_stream_);
    });
  }

  void allgather(float* data, size_t count) override {
    order_after_compute();
    if (count % size_t(size_) == 0) {
      const size_t b = count / size_t(size_);
      enqueued(ncclAllGather(data + size_t(rank_) * b, data, b, ncclFloat, comm_, comm_stream_), "ncclAllGather",
               __LINE__);
      return;
    }
    grouped(data, count, "ncclBroadcast (uneven all-gather)", [&](float* p, size_t n, int root) {
      return ncclBroadcast(p, p, n, ncclFloat, root, comm_, comm_stream_);
    });
  }

  void broadcast(void* data, size_t bytes, int root) override {
    order_after_compute();
    enqueued(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, comm_stream_),
             "ncclBroadcast", __LINE__);
    wait();
  }

  void wait() override {
    check_failed();
    if (in_step_) {
      TimingSlot& t = slots_[next_slot_];
      CUDA_CHECK(cudaEventRecord(t.compute_done, ops_.stream()));
      CUDA_CHECK(cudaEventRecord(t.end, comm_stream_));
      t.pending = true;
      in_step_ = false;
      next_slot_ = (next_slot_ + 1) % slots_.size();
    }
    CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(ops_.stream(), done_, 0));
    track("the collectives of a step");
  }

  bool timing(Timing* out) override {
    for (TimingSlot& t : slots_)
      if (t.pending) harvest(t);
    *out = timing_;
    return true;
  }

  void allgather_host(const void* send, void* recv, size_t bytes) override {
    gather_host(send, recv, bytes, "ncclAllGather", /*timed=*/true);
  }

  // The barrier's wait is tracked untimed: the watchdog leaves it alone (its store poll and
  // NCCL's own errors still end it).
  void barrier_untimed() override {
    const char mine = 0;
    std::vector<char> all(static_cast<size_t>(size_));
    gather_host(&mine, all.data(), 1, "barrier (untimed)", /*timed=*/false);
  }

  // The exchange's bytes travel through pinned host memory (a pageable copy would wait for the
  // stream) and need nothing from the compute stream: it runs as soon as the communication
  // stream is free, and finish() usually finds it done.
  void allgather_host_start(const void* send, void* recv, size_t bytes) override {
    if (async_recv_) throw std::logic_error("allgather_host_start: the previous exchange is not finished");
    const size_t need = bytes * size_t(size_ + 1);
    if (need > async_bytes_) {
      if (async_host_) CUDA_CHECK(cudaFreeHost(async_host_));
      async_host_ = nullptr;
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&async_host_), need));
      async_dev_ = static_cast<char*>(ops_.alloc(need));
      async_bytes_ = need;
    }
    check_failed();
    std::memcpy(async_host_, send, bytes);
    CUDA_CHECK(cudaMemcpyAsync(async_dev_, async_host_, bytes, cudaMemcpyHostToDevice, comm_stream_));
    enqueued(ncclAllGather(async_dev_, async_dev_ + bytes, bytes, ncclChar, comm_, comm_stream_),
             "ncclAllGather (step requests)", __LINE__);
    CUDA_CHECK(cudaMemcpyAsync(async_host_ + bytes, async_dev_ + bytes, bytes * size_, cudaMemcpyDeviceToHost,
                               comm_stream_));
    CUDA_CHECK(cudaEventRecord(async_done_, comm_stream_));
    track("ncclAllGather (step requests)");
    async_recv_ = recv;
    async_len_ = bytes;
  }

  void allgather_host_finish() override {
    if (!async_recv_) throw std::logic_error("allgather_host_finish: no exchange started");
    poll_until_done(async_done_);
    std::memcpy(async_recv_, async_host_ + async_len_, async_len_ * size_t(size_));
    async_recv_ = nullptr;
  }

 private:
  // Events of one step's all-reduces; a few slots in flight so that reading one never waits
  // on the step being enqueued.
  struct TimingSlot {
    cudaEvent_t start = nullptr, compute_done = nullptr, end = nullptr;
    bool pending = false;
  };

  void harvest(TimingSlot& t) {
    CUDA_CHECK(cudaEventSynchronize(t.end));
    CUDA_CHECK(cudaEventSynchronize(t.compute_done));
    float span = 0.f, exposed = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&span, t.start, t.end));
    CUDA_CHECK(cudaEventElapsedTime(&exposed, t.compute_done, t.end));
    timing_.steps += 1;
    timing_.allreduce_ms += double(span);
    timing_.exposed_ms += double(exposed > 0.f ? exposed : 0.f);
    t.pending = false;
  }

  // The first gradient collective of a step: its start, after the compute it waits for.
  void start_timing() {
    if (in_step_) return;
    TimingSlot& t = slots_[next_slot_];
    if (t.pending) harvest(t);
    CUDA_CHECK(cudaEventRecord(t.start, comm_stream_));
    in_step_ = true;
  }

  void gather_host(const void* send, void* recv, size_t bytes, const char* what, bool timed) {
    const size_t need = bytes * size_t(size_ + 1);
    if (need > gather_bytes_) {
      gather_ = static_cast<char*>(ops_.alloc(need));
      gather_bytes_ = need;
    }
    order_after_compute();
    CUDA_CHECK(cudaMemcpyAsync(gather_, send, bytes, cudaMemcpyHostToDevice, comm_stream_));
    enqueued(ncclAllGather(gather_, gather_ + bytes, bytes, ncclChar, comm_, comm_stream_), what, __LINE__);
    CUDA_CHECK(cudaMemcpyAsync(recv, gather_ + bytes, bytes * size_, cudaMemcpyDeviceToHost,
                               comm_stream_));
    CUDA_CHECK(cudaEventRecord(host_done_, comm_stream_));
    track(what, timed);
    poll_until_done(host_done_);
  }

  // Polls rather than blocks, so a peer's death surfaces here as an error, not a hang.
  void poll_until_done(cudaEvent_t e) {
    for (;;) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) CUDA_CHECK(q);
      check_failed();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    check_failed();
  }

  // One collective per block of comm_block(), rooted at the block's owner, in one NCCL group.
  template <typename Op>
  void grouped(float* data, size_t count, const char* call, Op op) {
    enqueued(ncclGroupStart(), "ncclGroupStart", __LINE__);
    for (int r = 0; r < size_; ++r) {
      const auto [off, n] = comm_block(count, size_, r);
      if (n > 0) enqueued(op(data + off, n, r), call, __LINE__);
    }
    enqueued(ncclGroupEnd(), "ncclGroupEnd", __LINE__);
  }

  void order_after_compute() {
    check_failed();
    ops_.join_side_work();  // the weight gradients may still be on the side stream
    CUDA_CHECK(cudaEventRecord(ready_, ops_.stream()));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
  }

  // A non-blocking communicator may answer ncclInProgress while the call is being enqueued.
  void enqueued(ncclResult_t r, const char* call, int line) {
    while (r == ncclInProgress) {
      check_failed();
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &r));
      if (r == ncclInProgress) std::this_thread::yield();
    }
    if (r != ncclSuccess) {
      check_failed();
      throw_nccl(r, call, __FILE__, line);
    }
  }

  void check_failed() {
    if (failed_.load()) {
      std::lock_guard<std::mutex> g(mu_);
      // A peer that vanished or stopped is reported as such (the launcher then names it); a
      // failure the launcher recorded already is just that.
      if (peer_lost_) throw CommFailure(failure_, /*peer_lost=*/true);
      throw GpuError(GpuError::Kind::PeerFailed, failure_);
    }
  }

  // --- Collectives in flight, for the watchdog's timeout: one event after the work of each
  // step (and each all-gather) on the communication stream, with the time it was enqueued.
  struct InFlight {
    cudaEvent_t done;
    Clock::time_point enqueued;
    uint64_t seq;
    const char* what;
    bool timed;  // false: barrier_untimed(), exempt from the timeout
  };

  void track(const char* what, bool timed = true) {
    if (size_ < 2) return;
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> g(flight_mu_);
      if (!free_events_.empty()) {
        e = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (!e) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, comm_stream_));
    std::lock_guard<std::mutex> g(flight_mu_);
    in_flight_.push_back({e, Clock::now(), ++enqueued_, what, timed});
  }

  // The oldest unfinished collective when it has waited longer than the timeout: why to give up.
  std::string overdue() {
    std::lock_guard<std::mutex> g(flight_mu_);
    while (!in_flight_.empty()) {
      const cudaError_t q = cudaEventQuery(in_flight_.front().done);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) return "";  // a CUDA error: the main thread reports it itself
      free_events_.push_back(in_flight_.front().done);
      in_flight_.pop_front();
    }
    // Behind an untimed barrier nothing is enqueued until it ends: nothing can be late.
    if (in_flight_.empty() || !in_flight_.front().timed || Clock::now() - in_flight_.front().enqueued < timeout_)
      return "";
    const InFlight& f = in_flight_.front();
    char text[160];
    std::snprintf(text, sizeof text, "NCCL made no progress for %.1f s (--comm-timeout %g s): ",
                  std::chrono::duration<double>(Clock::now() - f.enqueued).count(), timeout_.count() / 1000.0);
    return text + std::string(f.what) + " #" + std::to_string(f.seq) +
           " has not finished; a rank is stopped, hung or gone";
  }

  void abort_comm() {
    if (!aborted_.exchange(true) && comm_) ncclCommAbort(comm_);
  }

  // --- Watchdog: NCCL's asynchronous error, the store's failure record, and collectives that
  // do not finish within the timeout (NCCL has no timeout of its own: a stopped peer leaves
  // the others' kernels spinning).
  void watch() {
    cudaSetDevice(ops_.device_ordinal());  // the events' device, for cudaEventQuery
    auto next_store_poll = Clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, kPollInterval, [this] { return stop_; });
      if (stop_) break;
      lk.unlock();
      std::string why;
      bool peer_lost = false;
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st != ncclSuccess &&
          st != ncclInProgress) {
        why = std::string("NCCL reported ") + ncclGetErrorString(st);
        // A remote or system error mid-run is a peer (or the link to it) gone.
        peer_lost = st == ncclRemoteError || st == ncclSystemError;
        // The launcher usually knows which rank died: give its record a moment.
        if (watch_store_) {
          try {
            if (auto f = watch_store_->job_failure(milliseconds(1000))) why = *f + "; " + why;
          } catch (const std::exception&) {
          }
        }
      } else if (std::string late = overdue(); !late.empty()) {
        why = late;
        peer_lost = true;
      } else if (watch_store_ && Clock::now() >= next_store_poll) {
        next_store_poll = Clock::now() + kStorePollInterval;
        try {
          if (auto f = watch_store_->job_failure(milliseconds(1000))) why = *f;
        } catch (const proto::StoreError& e) {
          // The store is the launcher: if it is gone, so is the job.
          if (e.kind() == proto::StoreError::Kind::JobFailed) why = e.what();
          if (e.kind() == proto::StoreError::Kind::Connection)
            why = std::string("lost the launcher's store: ") + e.what();
        }
      }
      if (!why.empty()) {
        fail(why, peer_lost);
        return;
      }
      lk.lock();
    }
  }

  void fail(const std::string& why, bool peer_lost) {
    {
      std::lock_guard<std::mutex> g(mu_);
      failure_ = (peer_lost ? "" : "another rank failed: ") + why + "; aborted the NCCL communicator (" +
                 where() + ")";
      peer_lost_ = peer_lost;
    }
    failed_ = true;
    std::fprintf(stderr, "[%s] %s\n", where().c_str(), failure_.c_str());
    std::fflush(stderr);
    abort_comm();
    // The main thread now fails at its next collective; if it is stuck inside the driver
    // instead, end the process here (the only exit below main: the alternative is a hang).
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, kGraceAfterAbort, [this] { return stop_; })) {
      std::fprintf(stderr, "[%s] exiting: %s\n", where().c_str(), failure_.c_str());
      if (peer_lost_) std::fprintf(stderr, "%s\n", proto::format_peer_lost({std::nullopt, failure_}).c_str());
      std::fflush(stderr);
      std::_Exit(peer_lost_ ? proto::kPeerLostExitCode : 1);
    }
  }

  GpuOps& ops_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  std::array<TimingSlot, 4> slots_{};
  size_t next_slot_ = 0;
  bool in_step_ = false;
  Timing timing_;
  char* gather_ = nullptr;
  size_t gather_bytes_ = 0;
  cudaEvent_t host_done_ = nullptr;  // after a blocking host all-gather's copy back
  // allgather_host_start/finish: pinned host bytes (send, then every rank's), their device copy.
  char* async_host_ = nullptr;
  char* async_dev_ = nullptr;
  size_t async_bytes_ = 0;
  cudaEvent_t async_done_ = nullptr;
  void* async_recv_ = nullptr;  // non-null: an exchange in flight
  size_t async_len_ = 0;

  std::unique_ptr<proto::Client> watch_store_;
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> failed_{false};
  std::atomic<bool> aborted_{false};
  std::string failure_;
  bool peer_lost_ = false;  // under mu_: the failure is a peer that vanished or stopped

  milliseconds timeout_;  // --comm-timeout: a collective unfinished this long fails the rank
  std::mutex flight_mu_;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
  uint64_t enqueued_ = 0;
};

}  // namespace
}  // namespace gpu

std::unique_ptr<Comm> make_nccl_comm(Ops& gpu_ops, proto::Client* store, int rank, int size,
                                     const std::string& name, int generation, std::chrono::milliseconds timeout) {
  auto* ops = dynamic_cast<gpu::GpuOps*>(&gpu_ops);
  if (!ops)
    throw gpu::GpuError(gpu::GpuError::Kind::Invalid,
                        "make_nccl_comm needs the GPU backend's Ops (got " + gpu_ops.describe() + ")");
  return std::make_unique<gpu::NcclComm>(*ops, store, rank, size, name, generation, timeout);
}

}  // namespace worker
