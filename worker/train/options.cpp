#include "worker/train/options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "worker/train/recipes.h"

namespace worker {

namespace {

void require(bool ok, const std::string& msg) {
  if (!ok) throw UsageError(msg);
}

template <typename E>
using Choices = std::vector<std::pair<const char*, E>>;

const Choices<OptimizerKind> kOptimizers = {{"adam", OptimizerKind::Adam}, {"sgd", OptimizerKind::Sgd}};
const Choices<DataSourceKind> kData = {
    {"random", DataSourceKind::Random}, {"learnable", DataSourceKind::Learnable}, {"images", DataSourceKind::Images}};
const Choices<DeviceChoice> kDevices = {{"auto", DeviceChoice::Auto}, {"cpu", DeviceChoice::Cpu}, {"gpu", DeviceChoice::Gpu}};
const Choices<LrScheduleKind> kSchedules = {
    {"constant", LrScheduleKind::Constant}, {"step", LrScheduleKind::Step}, {"cosine", LrScheduleKind::Cosine}};
const Choices<Recompute> kRecompute = {{"none", Recompute::None}, {"bn", Recompute::Bn}, {"block", Recompute::Block}};
const Choices<CudaGraph> kCudaGraph = {{"auto", CudaGraph::Auto}, {"on", CudaGraph::On}, {"off", CudaGraph::Off}};
const Choices<CommKind> kComm = {{"auto", CommKind::Auto}, {"nccl", CommKind::Nccl}, {"ring", CommKind::Ring}};
const Choices<Precision> kPrecisions = {
    {"auto", Precision::Auto}, {"fp32", Precision::Fp32}, {"bf16", Precision::Bf16}, {"fp16", Precision::Fp16}};
const Choices<Loader> kLoaders = {{"auto", Loader::Auto}, {"cpu", Loader::Cpu}, {"gpu", Loader::Gpu}};
const Choices<Augment> kAugments = {
    {"standard", Augment::Standard}, {"none", Augment::None}, {"pad-crop", Augment::PadCrop}};
const Choices<Stem> kStems = {{"imagenet", Stem::ImageNet}, {"cifar", Stem::Cifar}};
const Choices<bool> kOnOff = {{"on", true}, {"off", false}};

template <typename E>
const char* name_of(const Choices<E>& choices, E e) {
  for (const auto& c : choices)
    if (c.second == e) return c.first;
  return "?";
}

template <typename E>
std::string alternatives(const Choices<E>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
  return s;
}

// A name option parsed straight into its enum: "--optimizer must be adam or sgd, got 'lamb'".
template <typename E>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E& target, const Choices<E>& choices,
                        const std::string& help) {
  CLI::Option* opt = app.add_option_function<std::string>(
      flag,
      [flag, &target, &choices](const std::string& v) {
        for (const auto& c : choices) {
          if (v == c.first) {
            target = c.second;
            return;
          }
        }
        throw UsageError(flag + " must be " + alternatives(choices) + ", got '" + v + "'");
      },
      help);
  if (name_of(choices, target)[0] != '?') opt->default_str(name_of(choices, target));
  return opt;
}

// Digits only: CLI11 would read "-1" as 2^64-1.
uint64_t parse_u64(const std::string& flag, const std::string& v) {
  size_t used = 0;
  uint64_t x = 0;
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  try {
    if (digits) x = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!digits || used != v.size()) {
    throw UsageError(flag + " must be an integer from 0 to 18446744073709551615, got '" + v + "'");
  }
  return x;
}

// --- data (issue 11): the image pipeline's options (ImageSetOptions: read, then augmented)
void describe_images(CLI::App& app, TrainOptions& o) {
  ImageSetOptions& im = o.images;
  app.add_option("--val-data", im.val_data, "list file of the val split (with a list-file --data)");
  add_choice(app, "--loader", im.loader, kLoaders,
             "auto, cpu or gpu: who decodes the images (auto: cpu on the CPU backend; on the GPU backend with nvJPEG the faster "
             "for the images' measured size)");
  app.add_option("--data-threads", im.read.threads,
                 "decode threads per rank (0: the node's cores / its ranks, PADDLE_LOCAL_SIZE or LOCAL_WORLD_SIZE)")
      ->capture_default_str();
  app.add_option("--data-prefetch", im.read.prefetch, "micro-batches decoded ahead")->capture_default_str();
  app.add_flag("--strict-data", im.read.strict,
               "an unreadable image stops the run (default: skipped with a warning, counted)");
  app.add_option_function<std::string>(
         "--max-image-bytes", [&im](const std::string& v) { im.read.max_image_bytes = parse_u64("--max-image-bytes", v); },
         "an image file larger than this is unreadable, judged by its size before it is read")
      ->default_str(std::to_string(kDefaultMaxImageBytes));
  app.add_option("--crop-scale", "RandomResizedCrop's area range MIN,MAX (default 0.08,1)")
      ->each([&im](const std::string& v) {
        const size_t comma = v.find(',');
        char* e1 = nullptr;
        char* e2 = nullptr;
        const std::string a = v.substr(0, comma), b = comma == std::string::npos ? "" : v.substr(comma + 1);
        const double lo = std::strtod(a.c_str(), &e1), hi = std::strtod(b.c_str(), &e2);
        if (comma == std::string::npos || a.empty() || b.empty() || *e1 || *e2) {
          throw CLI::ValidationError("--crop-scale", "expected MIN,MAX (e.g. 0.08,1), got '" + v + "'");
        }
        im.tf.scale_min = lo;
        im.tf.scale_max = hi;
      });
  app.add_option("--hflip", im.tf.hflip, "probability of a horizontal flip in training")->capture_default_str();
  add_choice(app, "--augment", im.tf.augment, kAugments,
             "standard (RandomResizedCrop + flip), none (the evaluation transform) or pad-crop (RandomCrop(size, "
             "padding=--crop-padding) + flip at the images' own scale; evaluation: CenterCrop(size))");
  add_choice(app, "--decode-scaling", im.tf.dct_scaling, kOnOff,
             "on or off: CPU back end, decode large crops at 1/2, 1/4, 1/8 size in the DCT domain");
}

void validate_images(const TrainOptions& o) {
  const ReadOptions& read = o.images.read;
  const TransformConfig& tf = o.images.tf;
  require(o.data != DataSourceKind::Images || !o.images.data.empty(), "--data needs a folder or a list file");
  require(read.threads >= 0 && read.threads <= 1024, "--data-threads must be between 0 and 1024");
  require(read.prefetch >= 1 && read.prefetch <= 64, "--data-prefetch must be between 1 and 64");
  require(std::isfinite(tf.scale_min) && std::isfinite(tf.scale_max) && tf.scale_min > 0 &&
              tf.scale_min <= tf.scale_max && tf.scale_max <= 1,
          "--crop-scale MIN,MAX needs 0 < MIN <= MAX <= 1");
  require(std::isfinite(tf.hflip) && tf.hflip >= 0 && tf.hflip <= 1, "--hflip must be a probability in [0, 1]");
  require(o.images.val_data.empty() || o.data == DataSourceKind::Images,
          "--val-data needs image data (--data DIR or a list file); synthetic data takes --val-samples N");
  require(read.max_image_bytes >= 1024,
          "--max-image-bytes must be at least 1024 (bytes), got " + std::to_string(read.max_image_bytes));
}

// --- first contact and small images (issue 25)
void describe_small_images(CLI::App& app, TrainOptions& o) {
  add_choice(app, "--stem", o.stem, kStems,
             "imagenet (7x7/2 convolution + 3x3/2 max-pool, torchvision's) or cifar (3x3/1 convolution, no "
             "max-pool: small images keep their resolution)");
  app.add_option("--crop-padding", o.images.tf.padding, "--augment pad-crop: pixels of black padding on each side")
      ->capture_default_str();
  std::string help = "a named set of options that any option given here overrides: ";
  for (const Recipe& r : recipes()) help += std::string("\n  ") + r.name + ": " + r.what;
  app.add_option_function<std::string>(
         "--recipe",
         [&o](const std::string& v) {
           if (!find_recipe(v)) throw UsageError("--recipe must be " + recipe_names() + ", got '" + v + "'");
           o.recipe = v;
         },
         help)
      ->default_str("guide");
}

void validate_small_images(const TrainOptions& o) {
  require(o.images.tf.padding >= 0 && o.images.tf.padding <= 4096, "--crop-padding must be between 0 and 4096 pixels");
}

// The recipe the command line names (its last --recipe), whose options go first.
const Recipe& named_recipe(const std::vector<std::string>& args) {
  std::string name = "guide";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--recipe" && i + 1 < args.size()) name = args[i + 1];
    else if (args[i].rfind("--recipe=", 0) == 0) name = args[i].substr(9);
  }
  const Recipe* r = find_recipe(name);
  if (!r) throw UsageError("--recipe must be " + recipe_names() + ", got '" + name + "'");
  return *r;
}

// The option names on the command line: "--depth" of "--depth 18" and of "--depth=18".
std::set<std::string> option_names(const std::vector<std::string>& args) {
  std::set<std::string> names;
  for (const std::string& a : args)
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) names.insert(a.substr(0, a.find('=')));
  return names;
}

// "30,60,90" -> {30, 60, 90}; one repeated option replaces the whole list.
std::vector<int> parse_epoch_list(const std::string& flag, const std::string& v) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find(',', start), v.size());
    const std::string item = v.substr(start, end - start);
    size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) {
      throw UsageError(flag + " must be comma-separated epochs, e.g. 30,60,90; got '" + v + "'");
    }
    out.push_back(x);
    start = end + 1;
  }
  return out;
}

CLI::App& describe(CLI::App& app, TrainOptions& o) {
  // --- model and run (issue 4)
  app.add_option("--depth", o.depth, "ResNet depth: 18, 34, 50, 101 or 152")->capture_default_str();
  app.add_option("--width", o.width, "base channels (torchvision: 64); smaller trains faster")->capture_default_str();
  app.add_option("--num-classes", o.num_classes, "classes of the classifier")->capture_default_str();
  app.add_option("--image-size", o.image_size, "height and width of the square images")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "samples per rank per micro-batch")->capture_default_str();
  app.add_option("--epochs", o.epochs, "passes over the data set")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps in total (0: no limit)")
      ->capture_default_str();
  add_choice(app, "--optimizer", o.optimizer, kOptimizers, "adam or sgd");
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay (added to the gradient, as torch.optim)")
      ->capture_default_str();
  app.add_option("--accum-steps", o.accum_steps, "micro-batches accumulated per optimizer step")->capture_default_str();
  app.add_option_function<std::string>(
         "--seed", [&o](const std::string& v) { o.seed = parse_u64("--seed", v); },
         "seed of the initialisation, the data and the shuffling (0 .. 2^64-1)")
      ->default_str("0");
  app.add_option("--init", o.init, "start from these weights (safetensors, torchvision names)");
  app.add_option("--save", o.save, "write the weights here at the end (rank 0; training state beside it)");
  app.add_option("--save-every", o.save_every, "also save every N optimizer steps (needs --save)");
  app.add_option("--resume", o.resume, "continue from this checkpoint (weights + training state); 'auto': from --save if it exists");
  app.add_option("--dump-batch", o.dump_batch, "write rank 0's first batch (images NHWC, labels) as safetensors");
  app.add_option("--metrics-file", o.metrics_file, "write the logged steps as JSON lines (rank 0)");
  app.add_option("--log-every", o.log_every, "log every N optimizer steps")->capture_default_str();
  add_choice(app, "--device", o.device, kDevices,
             "auto, cpu or gpu (auto: gpu when FLAGS_selected_gpus is set and the GPU backend is built)");
  add_choice(app, "--precision", o.precision, kPrecisions,
             "auto, fp32, bf16 or fp16 (auto: on a GPU fp16 where its fused convolution + batch-norm statistics "
             "run (sm_90), else bf16; fp32 on CPU; CPU: fp32 only)");
  app.add_option("--threads", o.threads, "CPU threads (0: OMP_NUM_THREADS, else all cores)")->capture_default_str();

  // --- data (issue 4: synthetic; issue 11 adds images)
  app.add_option_function<std::string>(
         "--data",
         [&o](const std::string& v) {
           if (v == "random" || v == "learnable") {
             o.data = v == "random" ? DataSourceKind::Random : DataSourceKind::Learnable;
             o.images.data.clear();
             return;
           }
           if (v.empty()) throw UsageError("--data must be random, learnable, an ImageFolder folder or a list file");
           o.data = DataSourceKind::Images;
           o.images.data = v;
         },
         "random (the guide's DummyDataset), learnable (class patterns + noise), an ImageFolder DIR "
         "(DIR/train/<class>/*) or a list file of `path label` lines")
      ->default_str("random");
  app.add_option("--num-samples", o.num_samples, "size of the synthetic data set")->capture_default_str();
  describe_images(app, o);
  describe_small_images(app, o);

  // --- recipe (issue 12)
  add_choice(app, "--lr-schedule", o.lr_schedule, kSchedules,
             "constant, step (x --lr-gamma at each of --lr-steps) or cosine (to 0 at the last epoch), per step");
  app.add_option("--warmup-epochs", o.warmup_epochs, "linear warm-up of the learning rate from 0 over this many epochs")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--lr-steps", [&o](const std::string& v) { o.lr_steps = parse_epoch_list("--lr-steps", v); },
         "epochs at which --lr-schedule step multiplies the rate by --lr-gamma (comma-separated)")
      ->default_str("30,60,90");
  app.add_option("--lr-gamma", o.lr_gamma, "factor of each step of --lr-schedule step")->capture_default_str();
  app.add_option("--lr-base-batch", o.lr_base_batch,
                 "N: --lr is the rate for a global batch of N images, used as lr x global batch / N (linear scaling); "
                 "0: --lr is used as given")
      ->capture_default_str();
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the loss (torch's CrossEntropyLoss)")
      ->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum (SGD)");
  app.add_flag("--no-wd-on-bn-bias", o.no_wd_on_bn_bias,
               "no weight decay on batch-norm weights and biases and the FC bias (NVIDIA's recipe)");

  // --- validation (issue 12)
  app.add_option("--val-samples", o.val_samples,
                 "validation samples of the synthetic data (generator indices after the training set; 0: none)")
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "evaluate every N epochs (and at the end) when there is validation data")
      ->capture_default_str();
  app.add_flag("--eval-only", o.eval_only, "evaluate the --init weights on the validation data, print the accuracy, exit");
  app.add_flag("--save-best", o.save_best, "also keep the weights of the best validation top-1 beside --save (.best)");

  // --- what a user sees (issue 12)
  app.add_option("--tensorboard", o.tensorboard, "write TensorBoard event files (scalars) into this folder (rank 0)");
  app.add_option("--log-samples", o.log_samples,
                 "debugging: rank 0 writes each step's sample indices, every rank's, as JSON lines to this file "
                 "(a collective each step)");

  // --- communication (issue 14)
  add_choice(app, "--comm", o.comm, kComm,
             "how the ranks talk: auto (NCCL on GPUs, the TCP ring on CPUs), nccl, or ring (on GPUs through host "
             "memory: slow, but it runs where NCCL does not, and several ranks on one GPU)");
  app.add_option("--comm-timeout", o.comm_timeout_s,
                 "seconds a collective may make no progress before this rank gives up, naming the silent peer "
                 "(CPU ring: a neighbour's silence; GPU: NCCL's watchdog)")
      ->capture_default_str();

  // --- memory (issue 15)
  add_choice(app, "--recompute", o.recompute, kRecompute,
             "none, bn (batch-norm outputs recomputed in backward) or block (only each block's input kept, "
             "the block recomputed in backward)");
  app.add_option("--zero", o.zero, "1: ZeRO-1, each rank keeps the optimizer state of its shard only (0: off)")
      ->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb,
                 "gradient bucket in MiB of fp32: the unit of the all-reduce (or ZeRO's reduce-scatter and "
                 "all-gather), overlapped with backward on GPUs")
      ->capture_default_str();

  // --- speed (issue 13)
  add_choice(app, "--cuda-graph", o.cuda_graph, kCudaGraph,
             "auto, on or off: the training step (forward, backward, optimizer) captured as one CUDA graph "
             "after warm-up and replayed; auto: where the run allows it (GPU, one rank, bf16/fp32, "
             "--accum-steps 1), on: refuse a run that does not");
  return app;
}

std::optional<TrainOptions> parse_impl(const std::vector<std::string>& args) {
  TrainOptions o;
  CLI::App app{"train_resnet: data-parallel ResNet training (run it under `launch`)", "train_resnet"};
  // A repeated option takes its last value, so scripts can override a base command line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  describe(app, o);
  // The recipe's options first: the command line's own come after and win.
  std::vector<std::string> all = recipe_args(named_recipe(args));
  all.insert(all.end(), args.begin(), args.end());
  o.given = option_names(args);
  std::vector<std::string> reversed(all.rbegin(), all.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see train_resnet --help)");
  }
  o.num_classes_given = o.given.count("--num-classes") > 0;
  validate(o);
  return o;
}

}  // namespace

const char* to_string(OptimizerKind k) { return name_of(kOptimizers, k); }
const char* to_string(DataSourceKind k) { return name_of(kData, k); }
const char* to_string(DeviceChoice k) { return name_of(kDevices, k); }
const char* to_string(LrScheduleKind k) { return name_of(kSchedules, k); }
const char* to_string(Recompute r) { return name_of(kRecompute, r); }
const char* to_string(CudaGraph g) { return name_of(kCudaGraph, g); }
const char* to_string(CommKind c) { return name_of(kComm, c); }
const char* to_string(Stem s) { return name_of(kStems, s); }
const char* to_string(Augment a) { return name_of(kAugments, a); }

bool TrainOptions::given_or_recipe(const std::string& option) const {
  if (given.count(option)) return true;
  const Recipe* r = find_recipe(recipe);
  if (!r) return false;
  for (const auto& kv : r->options)
    if (kv.first == option) return true;
  return false;
}

const char* to_string(Precision p) { return name_of(kPrecisions, p); }

std::optional<TrainOptions> parse_options(const std::vector<std::string>& args) { return parse_impl(args); }

std::optional<TrainOptions> parse_options(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_impl(args);
}

void validate(const TrainOptions& o) {
  // --- model and run (issue 4)
  require(o.depth == 18 || o.depth == 34 || o.depth == 50 || o.depth == 101 || o.depth == 152,
          "--depth " + std::to_string(o.depth) + " is not a ResNet depth (use 18, 34, 50, 101 or 152)");
  require(o.width >= 1 && o.width <= 4096, "--width must be between 1 and 4096, got " + std::to_string(o.width));
  require(o.num_classes >= 1 && o.num_classes <= 1000000,
          "--num-classes must be between 1 and 1000000, got " + std::to_string(o.num_classes));
  require(o.image_size >= 8 && o.image_size <= 4096,
          "--image-size must be between 8 and 4096, got " + std::to_string(o.image_size));
  require(o.batch_size >= 1, "--batch-size must be positive, got " + std::to_string(o.batch_size));
  require(o.epochs >= 1, "--epochs must be positive, got " + std::to_string(o.epochs));
  require(o.max_steps >= 0, "--max-steps must be positive (or 0 for no limit), got " + std::to_string(o.max_steps));
  require(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number");
  require(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1)");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--weight-decay must be >= 0");
  require(o.accum_steps >= 1, "--accum-steps must be positive, got " + std::to_string(o.accum_steps));
  require(o.save_every >= 0, "--save-every must be positive, got " + std::to_string(o.save_every));
  require(o.save_every == 0 || !o.save.empty(), "--save-every needs --save PATH (where to write)");
  require(o.resume != "auto" || !o.save.empty(), "--resume auto needs --save PATH (the checkpoint it resumes from)");
  require(o.init.empty() || o.resume.empty(), "--init and --resume exclude each other (--resume restores the weights too)");
  require(o.log_every >= 1, "--log-every must be positive, got " + std::to_string(o.log_every));
  require(o.device != DeviceChoice::Cpu || o.precision == Precision::Auto || o.precision == Precision::Fp32,
          std::string("--precision ") + to_string(o.precision) +
              " needs a GPU: the CPU backend computes in fp32 only (use --precision fp32)");
  require(o.threads >= 0 && o.threads <= 1024, "--threads must be between 0 and 1024");

  // --- data (issue 4: synthetic; issue 11 adds images)
  require(o.num_samples >= 1, "--num-samples must be positive, got " + std::to_string(o.num_samples));
  validate_images(o);
  validate_small_images(o);

  // --- recipe (issue 12)
  require(std::isfinite(o.warmup_epochs) && o.warmup_epochs >= 0 && o.warmup_epochs <= o.epochs,
          "--warmup-epochs must be between 0 and --epochs (" + std::to_string(o.epochs) + ")" +
              (o.given.count("--warmup-epochs") ? "" : "; --recipe " + o.recipe + " sets it: give --warmup-epochs"));
  for (size_t i = 0; i < o.lr_steps.size(); ++i) {
    require(o.lr_steps[i] >= 1 && (i == 0 || o.lr_steps[i] > o.lr_steps[i - 1]),
            "--lr-steps must be epochs >= 1 in increasing order, e.g. 30,60,90");
  }
  require(std::isfinite(o.lr_gamma) && o.lr_gamma > 0, "--lr-gamma must be a positive number");
  require(o.lr_base_batch >= 0, "--lr-base-batch must be >= 0 (0: --lr is used as given)");
  require(std::isfinite(o.label_smoothing) && o.label_smoothing >= 0 && o.label_smoothing < 1,
          "--label-smoothing must be in [0, 1)");
  require(!o.nesterov || (o.optimizer == OptimizerKind::Sgd && o.momentum > 0),
          "--nesterov needs --optimizer sgd and a --momentum above 0");

  // --- validation (issue 12)
  require(o.val_samples >= 0, "--val-samples must be >= 0, got " + std::to_string(o.val_samples));
  require(o.eval_every >= 1, "--eval-every must be positive, got " + std::to_string(o.eval_every));
  require(!o.eval_only || !o.init.empty(), "--eval-only needs --init WEIGHTS (the checkpoint to evaluate)");
  require(!o.eval_only || (o.save.empty() && o.resume.empty()),
          "--eval-only trains nothing: it takes --init WEIGHTS, not --save or --resume");
  require(!o.save_best || !o.save.empty(), "--save-best needs --save PATH (the best weights go beside it)");

  // --- communication (issue 14)
  require(std::isfinite(o.comm_timeout_s) && o.comm_timeout_s >= 0.1 && o.comm_timeout_s <= 86400 * 7,
          "--comm-timeout must be between 0.1 and 604800 seconds");

  // --- memory (issue 15)
  require(o.zero == 0 || o.zero == 1, "--zero must be 0 (off) or 1 (optimizer state sharded), got " + std::to_string(o.zero));
  require(std::isfinite(o.bucket_mb) && o.bucket_mb >= 0.001 && o.bucket_mb <= 65536,
          "--bucket-mb must be between 0.001 and 65536 (MiB)");
}

}  // namespace worker
