// train_resnet's command line: the options struct, its CLI11 parser and its validation.
// Every choice among names (optimizer, data, device, precision, schedule) is parsed into an
// enum class here, once; the rest of the worker never compares option strings.
// Validation is a pure function of the struct, so tests check it with plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/core/ops.h"
#include "worker/data/open_image_source.h"
#include "worker/train/lr_schedule.h"

namespace worker {

// A bad command line: main prints "train_resnet: error: <what>" and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class OptimizerKind : uint8_t { Adam, Sgd };
enum class DataSourceKind : uint8_t { Random, Learnable, Images };  // synthetic (worker/core/synthetic.h), or images
enum class DeviceChoice : uint8_t { Auto, Cpu, Gpu };
// Auto (the default): bf16 or fp16 on a GPU as worker/train/precision.h chooses, fp32 on the CPU.
enum class Precision : uint8_t { Auto, Fp32, Bf16, Fp16 };
// --cuda-graph: the training step captured once and replayed (worker/train/step_capture.h).
enum class CudaGraph : uint8_t { Auto, On, Off };
enum class CommKind : uint8_t { Auto, Nccl, Ring };  // Auto: NCCL on GPUs, the TCP ring on CPUs

// The names the command line and the checkpoints use ("adam", "learnable", "gpu", "bf16").
const char* to_string(OptimizerKind k);
const char* to_string(DataSourceKind k);
const char* to_string(DeviceChoice k);
const char* to_string(Precision p);
const char* to_string(LrScheduleKind k);
const char* to_string(Recompute r);
const char* to_string(CudaGraph g);
const char* to_string(CommKind c);
const char* to_string(Stem s);
const char* to_string(Augment a);

struct TrainOptions {
  // --- model and run (issue 4)
  int depth = 50;
  int width = 64;
  int num_classes = 1000;
  int image_size = 224;
  int batch_size = 32;       // per rank, per micro-batch
  int epochs = 3;
  int64_t max_steps = 0;     // 0: no limit (optimizer steps, counted from the start of training)
  OptimizerKind optimizer = OptimizerKind::Adam;
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int accum_steps = 1;
  uint64_t seed = 0;
  std::string init;          // weights only
  std::string save;
  int64_t save_every = 0;    // 0: only at the end
  std::string resume;        // a checkpoint, or "auto": --save's checkpoint when it exists
  std::string dump_batch;
  std::string metrics_file;
  int log_every = 10;
  DeviceChoice device = DeviceChoice::Auto;
  Precision precision = Precision::Auto;
  int threads = 0;           // CPU threads; 0: OMP_NUM_THREADS, else all cores

  // --- data (issue 4: synthetic; issue 11 adds images)
  DataSourceKind data = DataSourceKind::Random;
  int64_t num_samples = 1000;  // synthetic training samples
  // Images (--data DIR|LISTFILE): the data set, its val split, which back end decodes, how it
  // reads (--data-threads, --data-prefetch, --strict-data, --max-image-bytes) and augments
  // (--crop-scale, --hflip, --augment, --crop-padding, --decode-scaling); the data layer takes it
  // whole (worker/data/open_image_source.h).
  ImageSetOptions images;
  bool num_classes_given = false;        // --num-classes was on the command line (else: the data's)

  // --- recipe (issue 12): defaults as torchvision's reference recipe where it has one
  LrScheduleKind lr_schedule = LrScheduleKind::Constant;
  double warmup_epochs = 0.0;          // linear warm-up from 0 (fractional epochs allowed)
  std::vector<int> lr_steps = {30, 60, 90};  // epochs at which the step schedule multiplies by lr_gamma
  double lr_gamma = 0.1;
  int64_t lr_base_batch = 0;           // 0: --lr as given; N: --lr is for N images, scaled linearly
  double label_smoothing = 0.0;
  bool nesterov = false;
  bool no_wd_on_bn_bias = false;       // batch-norm weights, biases and the FC bias not decayed

  // --- validation (issue 12)
  int64_t val_samples = 0;             // synthetic validation samples (0: no validation)
  int eval_every = 1;                  // epochs between evaluations (and one at the end)
  bool eval_only = false;              // evaluate --init's weights and exit
  bool save_best = false;              // keep the best top-1's weights beside --save

  // --- what a user sees (issue 12)
  std::string tensorboard;             // folder for TensorBoard event files (rank 0)
  std::string log_samples;             // debugging: rank 0 writes each step's sample indices, every rank's

  // --- communication (issue 14)
  // A collective that makes no progress this long gives up: the CPU ring after this much
  // silence from a neighbour (and its set-up), NCCL's watchdog on a collective not finished.
  // The rank then names the silent peer to the launcher and exits 86 (proto/peer_lost.h).
  double comm_timeout_s = 300;
  CommKind comm = CommKind::Auto;      // --comm: ring on GPUs stages through host memory

  // --- memory (issue 15)
  Recompute recompute = Recompute::None;  // activations recomputed in backward instead of kept
  int zero = 0;                        // 1: ZeRO-1, optimizer state sharded over the ranks
  double bucket_mb = 25.0;             // gradient bucket (MiB of fp32): all-reduce / reduce-scatter unit

  // --- speed (issue 13)
  CudaGraph cuda_graph = CudaGraph::Auto;  // auto: captured where the run allows (step_capture.h)

  // --- first contact and small images (issue 25)
  Stem stem = Stem::ImageNet;          // cifar: 3x3/1 convolution, no max-pool (worker/model/model.h)
  std::string recipe = "guide";        // --recipe: its options go before the command line's (recipes.h)
  std::set<std::string> given;         // the options on the command line ("--depth"), the recipe's not
  bool given_or_recipe(const std::string& option) const;  // on the command line or in the recipe
};

// Parses argv (argv[0] included). Returns nullopt when --help was printed. Throws UsageError.
std::optional<TrainOptions> parse_options(int argc, const char* const* argv);
std::optional<TrainOptions> parse_options(const std::vector<std::string>& args);  // without argv[0]

// Throws UsageError naming the offending option and what would be valid.
void validate(const TrainOptions& o);

}  // namespace worker
