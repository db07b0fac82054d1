// The GPU back end of the image pipeline (gpu_image_source.h).
//
// Three stages, each ahead of the next:
//   1. reader threads (worker/data/prefetcher.h): read the files of a micro-batch into host
//      buffers, parse their headers, draw the crop and flip (the CPU path's plan_train /
//      plan_eval), and decode on the CPU what nvJPEG cannot take; the positions of the batch's
//      CPU share (loader_choice.h) they decode, crop, resize and normalise themselves, as the CPU
//      loader does, into a pinned batch buffer;
//   2. a GPU stage thread: nvjpegDecodeBatched (hardware JPEG engine, else GPU hybrid) of the
//      batch's JPEGs into one device slab (with WORKER_NVJPEG_ROI=1 the engine decodes only the
//      region each image's crop reads: nvjpegDecodeBatchedEx, a region of interest per image), the
//      CPU-decoded images copied beside them, labels and the per-image plans copied from pinned
//      buffers, all on the loader's own stream, then our resize kernel writes the batch in the
//      compute dtype into one of two device batch buffers (the CPU share's images copied into their
//      places beside it), and an event marks it ready;
//   3. next() on the training thread: the compute stream waits for that event and copies the
//      batch into the model's input (device to device, ~25 us for bf16 b256 224px).
// So the batch after the current one is being decoded while the current step computes.
#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker/data/data_error.h"
#include "worker/data/decode.h"
#include "worker/data/gpu/gpu_image_source.h"
#include "worker/data/gpu/jpeg_resize.h"
#include "worker/data/loader_choice.h"
#include "worker/data/prefetcher.h"
#include "worker/data/transform.h"
#include "worker/core/knobs.h"
#include "worker/gpu/check.h"
#include "worker/gpu/gpu_ops.h"

namespace worker {

namespace {

const char* nvjpeg_status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "INCOMPLETE_BITSTREAM";
  }
  return "unknown";
}

#define NVJPEG_CHECK(call)                                                                                   \
  do {                                                                                                       \
    nvjpegStatus_t s_ = (call);                                                                              \
    if (s_ != NVJPEG_STATUS_SUCCESS) {                                                                       \
      throw gpu::GpuError(gpu::GpuError::Kind::Cuda, std::string(#call) + " failed: NVJPEG_STATUS_" +        \
                                                         nvjpeg_status_name(s_) + " at " + __FILE__ + ":" +  \
                                                         std::to_string(__LINE__) + " (" + gpu::where() + ")"); \
    }                                                                                                        \
  } while (0)

template <typename T>
T* pinned(size_t count) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocDefault));
  return static_cast<T*>(p);
}

// nvJPEG's device and pinned buffers, kept once made. Its default allocators call cudaFree and
// cudaFreeHost whenever a batch needs larger buffers than the one before, and both synchronize
// the whole device, training stream included. A buffer nvJPEG gives back is reused only after
// the loader's stream has been synchronized (settle()), so work still queued on it never sees
// the buffer change hands.
class BufferCache {
 public:
  using Make = cudaError_t (*)(void**, size_t);
  using Drop = cudaError_t (*)(void*);
  BufferCache(Make make, Drop drop) : make_(make), drop_(drop) {}
  ~BufferCache() {
    for (const auto& [p, n] : size_) drop_(p);
  }
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  int take(void** p, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.lower_bound(n);
    if (it != free_.end() && it->first <= 2 * n) {  // not a much larger block for a small ask
      *p = it->second;
      free_.erase(it);
      return 0;
    }
    if (make_(p, n) != cudaSuccess) return 1;
    size_[*p] = n;
    return 0;
  }
  int give(void* p) {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back(p);
    return 0;
  }
  void settle() {
    std::lock_guard<std::mutex> lk(mu_);
    for (void* p : pending_) free_.emplace(size_[p], p);
    pending_.clear();
  }

  static int take_v2(void* self, void** p, size_t n, cudaStream_t) { return static_cast<BufferCache*>(self)->take(p, n); }
  static int give_v2(void* self, void* p, size_t, cudaStream_t) { return static_cast<BufferCache*>(self)->give(p); }

 private:
  Make make_;
  Drop drop_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::vector<void*> pending_;
  std::unordered_map<void*, size_t> size_;
};

cudaError_t device_make(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t device_drop(void* p) { return cudaFree(p); }
cudaError_t pinned_make(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
cudaError_t pinned_drop(void* p) { return cudaFreeHost(p); }

// The part of a w x h image that decoding must produce for a crop box (plan.box_*): the box, its
// corner moved back to a multiple of 16 pixels, the size of the largest JPEG block (MCU), so that the
// region starts where the engine's blocks do.
Region decode_region_for(const SamplePlan& plan, int w, int h) {
  return Region{std::max(0, plan.box_x0) & ~15, std::max(0, plan.box_y0) & ~15, std::min(w, plan.box_x1),
                std::min(h, plan.box_y1)};
}

// What the reader threads leave for the GPU stage, per sample of a host slot.
struct HostSample {
  std::vector<uint8_t> file;
  ImageHeader header;
  SamplePlan plan;
  bool on_gpu = false;   // nvJPEG decodes it; else `rgb` holds the CPU decode (or, rendered, ...)
  Region roi;            // the part of the image in the decode slab: nvJPEG's region, else the whole image
  bool rendered = false; // ... the reader thread wrote the finished image into its slot's pinned buffer
  RgbRegion rgb;
  bool bad = false;
  std::string error;
  int32_t label = 0;
};

class GpuImageSource final : public BatchSource {
 public:
  GpuImageSource(std::shared_ptr<const DatasetIndex> index, SplitInfo info, const LoaderConfig& cfg, gpu::GpuOps& ops,
                 std::string describe)
      : index_(std::move(index)), info_(std::move(info)), cfg_(cfg), ops_(ops), bad_(cfg.read.strict, "unreadable image") {
    CUDA_CHECK(cudaSetDevice(ops_.device_ordinal()));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const bool want_hw = process_knobs().nvjpeg_backend == NvjpegBackend::Hardware;
    nvjpegDevAllocatorV2_t dev_alloc{BufferCache::take_v2, BufferCache::give_v2, &device_cache_};
    nvjpegPinnedAllocatorV2_t pinned_alloc{BufferCache::take_v2, BufferCache::give_v2, &pinned_cache_};
    if (want_hw && nvjpegCreateExV2(NVJPEG_BACKEND_HARDWARE, &dev_alloc, &pinned_alloc, NVJPEG_FLAGS_DEFAULT,
                                    &handle_) == NVJPEG_STATUS_SUCCESS) {
      hardware_ = true;
    } else {
      NVJPEG_CHECK(nvjpegCreateExV2(NVJPEG_BACKEND_GPU_HYBRID, &dev_alloc, &pinned_alloc, NVJPEG_FLAGS_DEFAULT, &handle_));
    }
    // Room to grow in every allocation, so that a batch of larger images rarely needs new ones.
    NVJPEG_CHECK(nvjpegSetDeviceMemoryPadding(size_t(16) << 20, handle_));
    NVJPEG_CHECK(nvjpegSetPinnedMemoryPadding(size_t(16) << 20, handle_));
    NVJPEG_CHECK(nvjpegJpegStateCreate(handle_, &state_));
    describe_ = describe + (hardware_ ? " [nvJPEG hardware engine]" : " [nvJPEG GPU hybrid: no hardware engine]");

    const DType dt = ops_.compute_dtype();
    image_bytes_ = size_t(cfg.tf.size) * size_t(cfg.tf.size) * 3 * dtype_size(dt);
    for (int s = 0; s < kDeviceSlots; ++s) {
      DeviceSlot& d = dev_[s];
      CUDA_CHECK(cudaMalloc(&d.images, image_bytes_ * size_t(cfg.batch)));
      CUDA_CHECK(cudaMalloc(&d.labels, sizeof(int32_t) * size_t(cfg.batch)));
      CUDA_CHECK(cudaMalloc(&d.jobs, sizeof(gpu::ResizeJob) * size_t(cfg.batch)));
      d.host_jobs = pinned<gpu::ResizeJob>(size_t(cfg.batch));
      d.host_labels = pinned<int32_t>(size_t(cfg.batch));
      CUDA_CHECK(cudaEventCreateWithFlags(&d.ready, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&d.consumed, cudaEventDisableTiming));
    }
    for (int c = 0; c < 3; ++c) {
      norm_.scale[c] = 1.0f / (255.0f * cfg.tf.std[c]);
      norm_.shift[c] = -cfg.tf.mean[c] / cfg.tf.std[c];
    }
    host_.resize(size_t(cfg.read.prefetch));
    for (auto& h : host_) h.resize(size_t(cfg.batch));
    cpu_share_ = std::max(0.0, std::min(1.0, cfg.read.gpu_cpu_share));
    if (cpu_share_ > 0) {
      rendered_.resize(host_.size());
      for (auto& r : rendered_) r = pinned<uint8_t>(image_bytes_ * size_t(cfg.batch));
      scratch_.resize(size_t(cfg.read.threads));
    }
    streams_.resize(size_t(cfg.read.threads), nullptr);
    for (auto& s : streams_) NVJPEG_CHECK(nvjpegJpegStreamCreate(handle_, &s));
    // Regions of interest: nvjpegDecodeBatchedEx, which takes them, is the hardware engine's.
    roi_ = hardware_ && (cfg.read.nvjpeg_roi >= 0 ? cfg.read.nvjpeg_roi > 0 : process_knobs().nvjpeg_roi);
    if (roi_) {
      thread_params_.resize(size_t(cfg.read.threads), nullptr);
      batch_params_.resize(size_t(cfg.batch), nullptr);
      for (auto* v : {&thread_params_, &batch_params_}) {
        for (auto& p : *v) {
          NVJPEG_CHECK(nvjpegDecodeParamsCreate(handle_, &p));
          NVJPEG_CHECK(nvjpegDecodeParamsSetOutputFormat(p, NVJPEG_OUTPUT_RGBI));
        }
      }
      describe_ += " [regions of interest]";
    }
    pool_ = std::make_unique<Prefetcher>(cfg.read.threads, cfg.read.prefetch,
                                         [this](int slot, int pos, int64_t sample, int64_t epoch, int thread) {
                                           read(slot, pos, sample, epoch, thread);
                                         },
                                         std::max(0, cfg.read.nice));
  }

  ~GpuImageSource() override {
    stop_stage();
    pool_.reset();
    cudaStreamSynchronize(stream_);
    for (auto s : streams_) nvjpegJpegStreamDestroy(s);
    for (auto p : thread_params_) nvjpegDecodeParamsDestroy(p);
    for (auto p : batch_params_) nvjpegDecodeParamsDestroy(p);
    for (auto& d : dev_) {
      cudaFree(d.images);
      cudaFree(d.labels);
      cudaFree(d.jobs);
      cudaFreeHost(d.host_jobs);
      cudaFreeHost(d.host_labels);
      cudaEventDestroy(d.ready);
      cudaEventDestroy(d.consumed);
    }
    cudaFree(slab_);
    for (uint8_t* r : rendered_) cudaFreeHost(r);
    nvjpegJpegStateDestroy(state_);
    nvjpegDestroy(handle_);
    cudaStreamDestroy(stream_);
  }

  const SplitInfo& info() const override { return info_; }
  std::string describe() const override { return describe_; }
  int64_t skipped() const override { return bad_.count(); }

  void start(int64_t epoch, std::vector<BatchIndices> order) override {
    stop_stage();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    batches_ = int64_t(order.size());
    pool_->start(epoch, std::move(order));
    std::lock_guard<std::mutex> lk(mu_);
    produced_ = consumed_ = 0;
    stop_ = false;
    error_ = nullptr;
    for (auto& d : dev_) d.n = 0;
    stage_ = std::thread([this] { stage_loop(); });
  }

  // The reader threads go on into the next pass (its files read, their headers parsed, its CPU
  // share decoded) as the current one ends; the GPU stage begins it at start().
  void follow(int64_t epoch, std::vector<BatchIndices> order) override { pool_->follow(epoch, std::move(order)); }

  int next(Act& images, int32_t* labels, double* wait_ms) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    if (consumed_ >= batches_) throw std::logic_error("image source: next() past the end of the pass");
    cv_.wait(lk, [&] { return produced_ > consumed_ || error_; });
    if (wait_ms) *wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (error_) std::rethrow_exception(error_);
    DeviceSlot& d = dev_[consumed_ % kDeviceSlots];
    const int n = d.n;
    lk.unlock();
    if (images.dtype != ops_.compute_dtype() || images.bytes() / size_t(images.n) != image_bytes_) {
      throw std::logic_error("image source: the model's input does not match --image-size");
    }
    cudaStream_t compute = ops_.stream();
    CUDA_CHECK(cudaStreamWaitEvent(compute, d.ready, 0));
    CUDA_CHECK(cudaMemcpyAsync(images.data, d.images, size_t(n) * image_bytes_, cudaMemcpyDeviceToDevice, compute));
    CUDA_CHECK(cudaMemcpyAsync(labels, d.labels, size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToDevice, compute));
    CUDA_CHECK(cudaEventRecord(d.consumed, compute));
    lk.lock();
    ++consumed_;
    lk.unlock();
    cv_.notify_all();
    return n;
  }

 private:
  // Decoded batches on the device, the one being read included (each one batch in the compute
  // dtype: 77 MB for bf16 b256 at 224 px). Four instead of two changed nothing end to end on an
  // H200 (the decode, not its lead, limits a ResNet-50 run: docs/benchmarks.md, "Data loading").
  static constexpr int kDeviceSlots = 2;
  struct DeviceSlot {
    void* images = nullptr;
    int32_t* labels = nullptr;
    gpu::ResizeJob* jobs = nullptr;
    gpu::ResizeJob* host_jobs = nullptr;  // pinned
    int32_t* host_labels = nullptr;       // pinned
    cudaEvent_t ready = nullptr, consumed = nullptr;
    int n = 0;
  };

  // --- Stage 1, on the reader threads.
  void read(int slot, int pos, int64_t sample, int64_t epoch, int thread) {
    HostSample& h = host_[size_t(slot)][size_t(pos)];
    const std::string path = index_->path(sample);
    h.label = index_->labels[size_t(sample)];
    h.bad = false;
    h.on_gpu = false;
    h.rendered = false;
    std::string err;
    try {
      if (!read_image_file(path, cfg_.read.max_image_bytes, &h.file, &err)) throw DecodeError("cannot read: " + err);
      h.header = read_header(h.file.data(), h.file.size());
      h.plan = cfg_.split == Split::Train ? plan_train(h.header.width, h.header.height, cfg_.tf, cfg_.seed, epoch, sample)
                                          : plan_eval(h.header.width, h.header.height, cfg_.tf);
      if (cpu_decodes_position(pos, cpu_share_)) {  // the CPU loader's work, into the batch's pinned image
        Scratch& sc = scratch_[size_t(thread)];
        const Geometry g = plan_geometry(h.plan, h.header.format, h.header.width, h.header.height, cfg_.tf.dct_scaling);
        decode_region(h.file.data(), h.file.size(), g.scale_num, g.region, &sc.region);
        render(sc.region, g, h.plan, cfg_.tf, ops_.compute_dtype(), rendered_[size_t(slot)] + size_t(pos) * image_bytes_,
               &sc.render);
        h.rendered = true;
        return;
      }
      h.roi = Region{0, 0, h.header.width, h.header.height};  // the whole image unless gpu_supported narrows it
      h.on_gpu = h.header.format == ImageFormat::Jpeg && (h.header.components == 1 || h.header.components == 3) &&
                 jpeg_complete(h.file.data(), h.file.size()) &&
                 gpu_supported(h, thread);
      if (!h.on_gpu) decode_full(h.file.data(), h.file.size(), &h.rgb);
      return;
    } catch (const DecodeError& e) {
      err = e.what();
    } catch (const std::bad_alloc&) {
      err = out_of_memory_reason(h.file);
    }
    h.bad = true;
    h.error = path + ": " + err;
    bad_.report(path, err);
  }

  // Whether nvJPEG's batched decode takes this file (the hardware engine: baseline, single
  // scan, no 4:1:0/4:1:1); a file it cannot parse is left to the CPU decoder, which decides
  // whether it is corrupt. The stream must also end with EOI (truncation, decode.h). With
  // regions of interest, h.roi becomes the crop's region where the engine takes it for this file.
  bool gpu_supported(HostSample& h, int thread) {
    nvjpegJpegStream_t s = streams_[size_t(thread)];
    if (nvjpegJpegStreamParse(handle_, h.file.data(), h.file.size(), 0, 0, s) != NVJPEG_STATUS_SUCCESS) return false;
    if (!hardware_) return true;
    int unsupported = 1;
    if (roi_) {
      const Region r = decode_region_for(h.plan, h.header.width, h.header.height);
      nvjpegDecodeParams_t p = thread_params_[size_t(thread)];
      if (nvjpegDecodeParamsSetROI(p, r.x0, r.y0, r.x1 - r.x0, r.y1 - r.y0) == NVJPEG_STATUS_SUCCESS &&
          nvjpegDecodeBatchedSupportedEx(handle_, s, p, &unsupported) == NVJPEG_STATUS_SUCCESS && unsupported == 0) {
        h.roi = r;
        return true;
      }
    }
    return nvjpegDecodeBatchedSupported(handle_, s, &unsupported) == NVJPEG_STATUS_SUCCESS && unsupported == 0;
  }

  // --- Stage 2, on the stage thread.
  void stage_loop() {
    try {
      CUDA_CHECK(cudaSetDevice(ops_.device_ordinal()));  // a new thread starts on device 0
      for (int64_t b = 0; b < batches_; ++b) {
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return stop_ || b - consumed_ < kDeviceSlots; });
          if (stop_) return;
        }
        const int hs = pool_->take(nullptr);
        if (hs < 0) return;
        DeviceSlot& d = dev_[b % kDeviceSlots];
        CUDA_CHECK(cudaEventSynchronize(d.consumed));  // the compute stream has copied the batch out
        const int n = int(pool_->batch(b).size());
        decode_batch(hs, n, d);
        pool_->release();
        {
          std::lock_guard<std::mutex> lk(mu_);
          d.n = n;
          ++produced_;
        }
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  void decode_batch(int slot, int n, DeviceSlot& d) {
    std::vector<HostSample>& hs = host_[size_t(slot)];
    std::vector<uint8_t> bad(static_cast<size_t>(n));
    std::string first;
    for (int i = 0; i < n; ++i) {
      bad[size_t(i)] = hs[size_t(i)].bad;
      if (first.empty() && bad[size_t(i)]) first = hs[size_t(i)].error;
    }
    const std::vector<int> sub = substitutes(bad, first);
    // Device slab: every good image of the batch, decoded, 256-byte aligned.
    std::vector<size_t> offset(static_cast<size_t>(n), 0);
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      if (bad[size_t(i)] || hs[size_t(i)].rendered) continue;
      const HostSample& h = hs[size_t(i)];
      offset[size_t(i)] = total;
      total += (size_t(h.roi.x1 - h.roi.x0) * size_t(h.roi.y1 - h.roi.y0) * 3 + 255) & ~size_t(255);
    }
    if (total > slab_bytes_) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      CUDA_CHECK(cudaFree(slab_));
      slab_bytes_ = total + total / 4;  // grows rarely
      CUDA_CHECK(cudaMalloc(&slab_, slab_bytes_));
    }
    auto* slab = static_cast<uint8_t*>(slab_);
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> dest;
    std::vector<nvjpegDecodeParams_t> params;
    for (int i = 0; i < n; ++i) {
      if (bad[size_t(i)] || hs[size_t(i)].rendered) continue;
      const HostSample& h = hs[size_t(i)];
      uint8_t* dst = slab + offset[size_t(i)];
      if (h.on_gpu) {
        nvjpegImage_t img{};
        img.channel[0] = dst;
        img.pitch[0] = size_t(h.roi.x1 - h.roi.x0) * 3;
        data.push_back(h.file.data());
        lengths.push_back(h.file.size());
        dest.push_back(img);
        if (roi_) {
          nvjpegDecodeParams_t p = batch_params_[params.size()];
          const bool whole = h.roi.x0 == 0 && h.roi.y0 == 0 && h.roi.x1 == h.header.width && h.roi.y1 == h.header.height;
          if (whole) {  // nvJPEG's "no region"
            NVJPEG_CHECK(nvjpegDecodeParamsSetROI(p, 0, 0, -1, -1));
          } else {
            NVJPEG_CHECK(nvjpegDecodeParamsSetROI(p, h.roi.x0, h.roi.y0, h.roi.x1 - h.roi.x0, h.roi.y1 - h.roi.y0));
          }
          params.push_back(p);
        }
      } else {
        CUDA_CHECK(cudaMemcpyAsync(dst, h.rgb.pixels.data(), h.rgb.pixels.size(), cudaMemcpyHostToDevice, stream_));
      }
    }
    if (!data.empty()) {
      if (int(data.size()) != batched_size_) {
        NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(handle_, state_, int(data.size()), 1, NVJPEG_OUTPUT_RGBI));
        batched_size_ = int(data.size());
      }
      if (roi_) {
        NVJPEG_CHECK(nvjpegDecodeBatchedEx(handle_, state_, data.data(), lengths.data(), dest.data(), params.data(),
                                           stream_));
      } else {
        NVJPEG_CHECK(nvjpegDecodeBatched(handle_, state_, data.data(), lengths.data(), dest.data(), stream_));
      }
    }
    for (int i = 0; i < n; ++i) {
      const int s = sub[size_t(i)];
      const HostSample& h = hs[size_t(s)];
      gpu::ResizeJob& j = d.host_jobs[i];
      if (h.rendered) {  // in place once copied; the kernel leaves it alone
        j = gpu::ResizeJob{};
        CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(d.images) + size_t(i) * image_bytes_,
                                   rendered_[size_t(slot)] + size_t(s) * image_bytes_, image_bytes_,
                                   cudaMemcpyHostToDevice, stream_));
        d.host_labels[i] = h.label;
        continue;
      }
      // The box in the decoded pixels, which start at the region's corner.
      const Region& r = h.roi;
      j.src = slab + offset[size_t(s)];
      j.pitch = (r.x1 - r.x0) * 3;
      j.box_x0 = h.plan.box_x0 - r.x0;
      j.box_y0 = h.plan.box_y0 - r.y0;
      j.box_x1 = h.plan.box_x1 - r.x0;
      j.box_y1 = h.plan.box_y1 - r.y0;
      j.out_w = h.plan.out_w;
      j.out_h = h.plan.out_h;
      j.win_x = h.plan.win_x;
      j.win_y = h.plan.win_y;
      j.flip = h.plan.flip ? 1 : 0;
      d.host_labels[i] = h.label;
    }
    CUDA_CHECK(cudaMemcpyAsync(d.jobs, d.host_jobs, sizeof(gpu::ResizeJob) * size_t(n), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(d.labels, d.host_labels, sizeof(int32_t) * size_t(n), cudaMemcpyHostToDevice, stream_));
    gpu::launch_resize_normalize(d.jobs, n, cfg_.tf.size, ops_.compute_dtype(), norm_, d.images, stream_);
    CUDA_CHECK(cudaEventRecord(d.ready, stream_));
    // The host buffers (files, pinned jobs) are reused once the stream is past them.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    device_cache_.settle();
    pinned_cache_.settle();
  }

  void stop_stage() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (stage_.joinable()) stage_.join();
  }

  std::shared_ptr<const DatasetIndex> index_;
  SplitInfo info_;
  LoaderConfig cfg_;
  gpu::GpuOps& ops_;
  BadFiles bad_;
  std::string describe_;
  // Before handle_: nvJPEG's buffers are dropped after nvjpegDestroy (in the destructor's body).
  BufferCache device_cache_{device_make, device_drop};
  BufferCache pinned_cache_{pinned_make, pinned_drop};
  cudaStream_t stream_ = nullptr;
  nvjpegHandle_t handle_ = nullptr;
  nvjpegJpegState_t state_ = nullptr;
  bool hardware_ = false;
  int batched_size_ = 0;
  // The CPU share: its positions' finished images per host slot (pinned, batch x image_bytes_),
  // and each reader thread's decode and render buffers.
  struct Scratch {
    RgbRegion region;
    RenderScratch render;
  };
  double cpu_share_ = 0.0;
  std::vector<uint8_t*> rendered_;
  std::vector<Scratch> scratch_;
  std::vector<nvjpegJpegStream_t> streams_;  // one per reader thread
  bool roi_ = false;                              // decode regions of interest (WORKER_NVJPEG_ROI, hardware engine)
  std::vector<nvjpegDecodeParams_t> thread_params_;  // per reader thread: the support check's
  std::vector<nvjpegDecodeParams_t> batch_params_;   // per position of the decoded batch
  gpu::Normalize norm_{};
  size_t image_bytes_ = 0;
  void* slab_ = nullptr;
  size_t slab_bytes_ = 0;
  DeviceSlot dev_[kDeviceSlots];
  std::vector<std::vector<HostSample>> host_;  // per host slot, per position

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t batches_ = 0, produced_ = 0, consumed_ = 0;
  std::exception_ptr error_;
  std::thread stage_;
  std::unique_ptr<Prefetcher> pool_;
};

}  // namespace

std::unique_ptr<BatchSource> make_gpu_image_source(std::shared_ptr<const DatasetIndex> index, SplitInfo info,
                                                   const LoaderConfig& cfg, Ops& gpu_ops, std::string describe) {
  auto* ops = dynamic_cast<gpu::GpuOps*>(&gpu_ops);
  if (!ops) throw std::invalid_argument("make_gpu_image_source: not the GPU backend");
  return std::make_unique<GpuImageSource>(std::move(index), std::move(info), cfg, *ops, std::move(describe));
}

}  // namespace worker
