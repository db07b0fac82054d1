// BatchSource implementations over an image data set (dataset_index.h): the CPU back end
// (libjpeg-turbo / libpng decode, transform.h on a pool of threads, prefetched host batches
// copied into the backend's input), and what the GPU back end shares with it: the options,
// the file reader and the bad-file bookkeeping.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/data/dataset_index.h"
#include "worker/data/transform.h"

namespace worker {

// How a rank reads its images (train_resnet's --data-threads, --data-prefetch, --strict-data,
// --max-image-bytes): one struct from the command line to the back end that reads.
struct ReadOptions {
  int threads = 0;         // decode threads of this rank; 0: default_data_threads (resolved when a source opens)
  int prefetch = 3;        // micro-batches decoded ahead (host buffers)
  bool strict = false;     // a bad file is an error instead of a skipped sample
  uint64_t max_image_bytes = kDefaultMaxImageBytes;  // a larger file is a bad file, judged by its size
  // The GPU loader: the share of each batch its reader threads decode on the CPU beside nvJPEG
  // (loader_choice.h: gpu_loader_cpu_share, cpu_decodes_position); negative: the cost model's
  // for the images' measured size, or WORKER_NVJPEG_CPU_SHARE's (resolved when a source opens).
  double gpu_cpu_share = -1.0;
  // The GPU loader's hardware engine decodes only the region each image's crop reads (1) or whole
  // images (0); negative: WORKER_NVJPEG_ROI's.
  int nvjpeg_roi = -1;
  // How much lower the reader threads' priority is than the process's (their nice increment);
  // negative: WORKER_DATA_NICE's, whose auto is kGpuDataNice beside the GPU backend and 0 on the CPU
  // (resolved when a source opens).
  int nice = -1;
};

// The reader threads' nice increment beside the GPU backend (WORKER_DATA_NICE=auto): there the
// threads only feed a GPU that one host thread drives, and that thread must get a core the moment
// it needs one. On the CPU backend the same cores compute the step, which the readers must keep up
// with at an equal share.
inline constexpr int kGpuDataNice = 10;

struct LoaderConfig {
  Split split = Split::Train;
  int batch = 32;          // the model's micro-batch
  uint64_t seed = 0;
  ReadOptions read;        // read.threads > 0
  TransformConfig tf;
};

// Default decode threads: the cores this process may run on, divided by the ranks of this node
// (proto::WorkerEnv::local_world: PADDLE_LOCAL_SIZE or LOCAL_WORLD_SIZE), at least one.
int default_data_threads(int local_ranks);

// Reads an image file into a reusable buffer, or says why not in `err` (returning false)
// without reading more than it must: a FIFO, device, socket or folder is refused by fstat (the
// open cannot block: O_NONBLOCK), one that is not a JPEG or PNG by its first 8 bytes, one over
// `max_bytes` by its size -- each before the rest of it is read or any memory taken for it.
// With `prefix` > 0 only the file's first `prefix` bytes are read (a header, for a size sample).
bool read_image_file(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* buf, std::string* err,
                     size_t prefix = 0);

// Files found unusable: each is named in one warning (per process), every skipped read counted.
// A bad sample's place in its micro-batch is taken by the next good sample of the same
// micro-batch (pixels and label), so batches stay full and a resumed run substitutes the same.
class BadFiles {
 public:
  BadFiles(bool strict, std::string what) : strict_(strict), what_(std::move(what)) {}
  // Records a bad file: warns once, counts; throws DataError when strict.
  void report(const std::string& path, const std::string& reason);
  int64_t count() const { return count_.load(); }

 private:
  bool strict_;
  std::string what_;
  std::mutex mu_;
  std::set<std::string> warned_;
  std::atomic<int64_t> count_{0};
};

// Why a file failed with std::bad_alloc ("out of memory decoding it (WxH)"): skipped and
// counted like any bad file, so an image too large for this machine does not end the run.
std::string out_of_memory_reason(const std::vector<uint8_t>& file);

// Which good position of a micro-batch stands in for each bad one (the next good one,
// cyclically); throws DataError when every sample of the batch is bad.
std::vector<int> substitutes(const std::vector<uint8_t>& bad, const std::string& first_error);

// The CPU back end. `ops` receives the batches through upload(); its compute dtype must be F32
// or BF16.
std::unique_ptr<BatchSource> make_cpu_image_source(std::shared_ptr<const DatasetIndex> index, SplitInfo info,
                                                   const LoaderConfig& cfg, Ops& ops, std::string describe);

std::string transform_description(const LoaderConfig& cfg);

}  // namespace worker
