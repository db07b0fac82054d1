// Loader-alone benchmark (scripts/bench_data.sh): micro-batches of an image folder delivered
// into the backend's memory (host on the CPU backend, device on the GPU), nothing else running.
//   data_bench DIR LOADER DEVICE BATCH THREADS SIZE SECONDS
//   LOADER: cpu|gpu  DEVICE: cpu|gpu  -> one JSON line: images/s (median of 1 s windows), the
//   process's CPU time per image after the first window (all threads: on a shared machine the
//   cost per image that other load does not dilute), ...
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "worker/core/backend.h"
#include "worker/data/open_image_source.h"
#include "worker/train/sampler.h"

using namespace worker;

namespace {

double cpu_seconds() {  // user + system time of every thread of the process
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: data_bench DIR cpu|gpu cpu|gpu BATCH THREADS SIZE SECONDS" << std::endl;
    return 2;
  }
  try {
    DataSourceOptions o;
    o.images.data = argv[1];
    o.images.loader = std::string(argv[2]) == "gpu" ? Loader::Gpu : Loader::Cpu;
    const bool gpu = std::string(argv[3]) == "gpu";
    o.batch = std::stoi(argv[4]);
    o.images.read.threads = std::stoi(argv[5]);
    o.image_size = std::stoi(argv[6]);
    const double seconds = std::stod(argv[7]);
    std::unique_ptr<Ops> ops;
#ifdef WORKER_HAVE_GPU
    if (gpu) ops = make_gpu_ops(0, DType::BF16);
#endif
    if (!ops) {
      if (gpu) throw std::runtime_error("built without the GPU backend");
      ops = make_cpu_ops(1);
    }
    auto src = open_image_source(o, Split::Train, *ops);
    const DType dt = ops->compute_dtype();
    const int px = o.image_size;
    Act x{ops->alloc(size_t(o.batch) * px * px * 3 * dtype_size(dt)), dt, o.batch, px, px, 3};
    auto* labels = static_cast<int32_t*>(ops->alloc(sizeof(int32_t) * size_t(o.batch)));
    SamplerConfig sc;
    sc.num_samples = src->info().size;
    sc.batch = o.batch;
    Sampler sampler(sc);
    std::vector<double> windows;
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto tw = t0;
    int64_t images = 0, total = 0, measured = 0;
    double wait = 0, cpu0 = 0;
    bool warm = false;
    for (int64_t epoch = 0; std::chrono::duration<double>(Clock::now() - t0).count() < seconds; ++epoch) {
      const auto perm = sampler.permutation(epoch);
      std::vector<BatchIndices> order;
      for (int64_t b = 0; b < sampler.steps_per_epoch(); ++b) order.push_back(sampler.batch(perm, 0, 0, b));
      src->start(epoch, order);
      for (size_t b = 0; b < order.size() && std::chrono::duration<double>(Clock::now() - t0).count() < seconds; ++b) {
        double w = 0;
        images += src->next(x, labels, &w);
        ops->synchronize();  // delivered: in the backend's memory
        wait += w;
        const double dt_w = std::chrono::duration<double>(Clock::now() - tw).count();
        if (dt_w >= 1.0) {
          if (warm) {
            windows.push_back(double(images) / dt_w);
            measured += images;
          } else {
            cpu0 = cpu_seconds();  // the first window warms up
          }
          warm = true;
          total += images;
          images = 0;
          tw = Clock::now();
        }
      }
    }
    if (warm) measured += images;  // the last, partial window's images cost CPU time too
    const double cpu_ms = measured > 0 ? (cpu_seconds() - cpu0) * 1e3 / double(measured) : 0;
    std::sort(windows.begin(), windows.end());
    const double med = windows.empty() ? 0 : windows[windows.size() / 2];
    std::cout << "{\"loader\": \"" << argv[2] << "\", \"device\": \"" << argv[3] << "\", \"threads\": "
              << o.images.read.threads
              << ", \"batch\": " << o.batch << ", \"images_per_s\": " << double(int64_t(med * 10 + 0.5)) / 10
              << ", \"cpu_ms_per_image\": " << double(int64_t(cpu_ms * 1000 + 0.5)) / 1000
              << ", \"windows\": " << windows.size()
              << ", \"skipped\": " << src->skipped() << ", \"describe\": \"" << src->describe() << "\"}" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "data_bench: " << e.what() << std::endl;
    return 1;
  }
}
