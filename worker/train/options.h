// train_resnet's command line: the options struct, its CLI11 parser and its validation.
// Validation is a pure function of the struct, so tests check it with plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/data/loader_kind.h"

namespace worker {

// A bad command line: main prints "train_resnet: error: <what>" and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainOptions {
  int depth = 50;
  int width = 64;
  int num_classes = 1000;
  int image_size = 224;
  int batch_size = 32;       // per rank, per micro-batch
  int64_t num_samples = 1000;
  int epochs = 3;
  int64_t max_steps = 0;     // 0: no limit (optimizer steps, counted from the start of training)
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int accum_steps = 1;
  uint64_t seed = 0;
  std::string data = "random";
  std::string init;          // weights only
  std::string save;
  int64_t save_every = 0;    // 0: only at the end
  std::string resume;        // a checkpoint, or "auto": --save's checkpoint when it exists
  std::string dump_batch;
  std::string metrics_file;
  int log_every = 10;
  std::string device = "auto";
  std::string precision;     // "" = default: bf16 on GPU, fp32 on CPU
  int threads = 0;           // CPU threads; 0: OMP_NUM_THREADS, else all cores

  // --- data (issue 11): --data DIR|LISTFILE (above) reads images; these shape how
  std::string val_data;                  // the val split's list file, for a list-file --data
  Loader loader = Loader::Auto;          // which back end decodes
  int data_threads = 0;                  // decode threads per rank; 0: the node's cores / LOCAL_WORLD_SIZE
  int data_prefetch = 3;                 // micro-batches decoded ahead
  bool strict_data = false;              // an unreadable image is an error instead of skipped
  double crop_scale_min = 0.08, crop_scale_max = 1.0;  // RandomResizedCrop's scale
  double hflip = 0.5;                    // probability of a horizontal flip
  Augment augment = Augment::Standard;   // none: the evaluation transform for training too
  bool decode_scaling = true;            // CPU back end: DCT-domain downscaling of large crops
  bool num_classes_given = false;        // --num-classes was on the command line (else: the data's)
};

// Parses argv (argv[0] included). Returns nullopt when --help was printed. Throws UsageError.
std::optional<TrainOptions> parse_options(int argc, const char* const* argv);
std::optional<TrainOptions> parse_options(const std::vector<std::string>& args);  // without argv[0]

// Throws UsageError naming the offending option and what would be valid.
void validate(const TrainOptions& o);

// The precision actually used on a device ("cpu" or "gpu"): the default, or a UsageError.
std::string resolve_precision(const TrainOptions& o, bool gpu);

}  // namespace worker
