#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "worker/train/options.h"
#include "worker/train/precision.h"

using worker::parse_options;
using worker::TrainOptions;
using worker::UsageError;

namespace {

std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_options(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("defaults are the paddle guide's", "[train][options]") {
  const auto o = parse_options(std::vector<std::string>{});
  REQUIRE(o);
  CHECK(o->depth == 50);
  CHECK(o->num_classes == 1000);
  CHECK(o->image_size == 224);
  CHECK(o->batch_size == 32);
  CHECK(o->num_samples == 1000);
  CHECK(o->epochs == 3);
  CHECK(o->optimizer == worker::OptimizerKind::Adam);
  CHECK(o->lr == 1e-3);
  CHECK(o->log_every == 10);
  CHECK(o->data == worker::DataSourceKind::Random);
  CHECK(o->device == worker::DeviceChoice::Auto);
  CHECK(worker::choose_precision(o->precision, true, {}).dtype == worker::DType::BF16);
  CHECK(worker::choose_precision(o->precision, false, {}).dtype == worker::DType::F32);
}

TEST_CASE("every option is parsed", "[train][options]") {
  const auto o = parse_options(std::vector<std::string>{
      "--depth", "18", "--width", "16", "--num-classes", "10", "--image-size", "32", "--batch-size", "8",
      "--num-samples", "64", "--epochs", "2", "--max-steps", "5", "--optimizer", "sgd", "--lr", "0.1",
      "--momentum", "0.5", "--weight-decay", "1e-4", "--accum-steps", "2", "--seed", "9", "--data", "learnable",
      "--save", "c.safetensors", "--save-every", "3", "--dump-batch", "b.safetensors", "--metrics-file", "m.jsonl",
      "--log-every", "1", "--device", "cpu", "--precision", "fp32", "--threads", "2"});
  REQUIRE(o);
  CHECK(o->depth == 18);
  CHECK(o->width == 16);
  CHECK(o->max_steps == 5);
  CHECK(o->optimizer == worker::OptimizerKind::Sgd);
  CHECK(o->data == worker::DataSourceKind::Learnable);
  CHECK(o->device == worker::DeviceChoice::Cpu);
  CHECK(o->precision == worker::Precision::Fp32);
  CHECK(o->momentum == 0.5);
  CHECK(o->weight_decay == 1e-4);
  CHECK(o->accum_steps == 2);
  CHECK(o->seed == 9);
  CHECK(o->save_every == 3);
  CHECK(o->threads == 2);
  CHECK(parse_options(std::vector<std::string>{"--resume", "auto", "--save", "x"})->resume == "auto");
}

TEST_CASE("bad values are usage errors naming the option", "[train][options]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--depth", "20"}, "--depth 20"},
      {{"--depth", "x"}, "--depth"},
      {{"--width", "0"}, "--width"},
      {{"--num-classes", "0"}, "--num-classes"},
      {{"--image-size", "4"}, "--image-size"},
      {{"--batch-size", "0"}, "--batch-size"},
      {{"--batch-size", "-3"}, "--batch-size"},
      {{"--num-samples", "0"}, "--num-samples"},
      {{"--epochs", "0"}, "--epochs"},
      {{"--max-steps", "-1"}, "--max-steps"},
      {{"--optimizer", "rmsprop"}, "--optimizer"},
      {{"--lr", "0"}, "--lr"},
      {{"--lr", "nan"}, "--lr"},
      {{"--momentum", "1"}, "--momentum"},
      {{"--weight-decay", "-1"}, "--weight-decay"},
      {{"--accum-steps", "0"}, "--accum-steps"},
      {{"--data", ""}, "--data"},  // a path is checked when the data is opened (check_data.py errors)
      {{"--crop-scale", "0.5"}, "--crop-scale"},
      {{"--crop-scale", "0.9,0.1"}, "--crop-scale"},
      {{"--hflip", "1.5"}, "--hflip"},
      {{"--loader", "tpu"}, "--loader"},
      {{"--augment", "heavy"}, "--augment"},
      {{"--decode-scaling", "maybe"}, "--decode-scaling"},
      {{"--data-prefetch", "0"}, "--data-prefetch"},
      {{"--val-data", "v.txt"}, "--val-data"},
      {{"--save-every", "5"}, "--save-every"},
      {{"--resume", "auto"}, "--resume auto"},
      {{"--init", "a", "--resume", "b"}, "--init"},
      {{"--log-every", "0"}, "--log-every"},
      {{"--device", "tpu"}, "--device"},
      {{"--precision", "fp8"}, "--precision"},
      {{"--device", "cpu", "--precision", "bf16"}, "fp32 only"},
      {{"--threads", "-1"}, "--threads"},
      {{"--no-such-flag"}, "--no-such-flag"},
      {{"extra"}, "extra"},
  };
  for (const auto& [args, needle] : cases) {
    const std::string err = usage_error(args);
    INFO(args[0] << " -> '" << err << "'");
    CHECK(err.find(needle) != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
  }
  TrainOptions o;
  o.precision = worker::Precision::Fp16;
  CHECK_THROWS_AS(worker::choose_precision(o.precision, false, {}), UsageError);  // auto picked the CPU
}

TEST_CASE("the recipe, validation and TensorBoard options (issue 12)", "[train][options]") {
  const auto d = parse_options(std::vector<std::string>{});
  REQUIRE(d);
  CHECK(d->lr_schedule == worker::LrScheduleKind::Constant);
  CHECK(d->warmup_epochs == 0.0);
  CHECK(d->lr_steps == std::vector<int>{30, 60, 90});
  CHECK(d->lr_gamma == 0.1);
  CHECK(d->lr_base_batch == 0);
  CHECK(d->label_smoothing == 0.0);
  CHECK_FALSE(d->nesterov);
  CHECK_FALSE(d->no_wd_on_bn_bias);
  CHECK(d->val_samples == 0);
  CHECK(d->eval_every == 1);
  const auto o = parse_options(std::vector<std::string>{
      "--optimizer", "sgd", "--momentum", "0.875", "--lr", "0.256", "--lr-base-batch", "256", "--lr-schedule", "cosine",
      "--warmup-epochs", "5", "--epochs", "90", "--label-smoothing", "0.1", "--nesterov", "--no-wd-on-bn-bias",
      "--lr-steps", "10,20", "--lr-steps", "5", "--lr-gamma", "0.5", "--val-samples", "100", "--eval-every", "2",
      "--save", "c.safetensors", "--save-best", "--tensorboard", "tb"});
  REQUIRE(o);
  CHECK(o->lr_schedule == worker::LrScheduleKind::Cosine);
  CHECK(o->warmup_epochs == 5.0);
  CHECK(o->lr_steps == std::vector<int>{5});  // a repeated option replaces the list
  CHECK(o->lr_gamma == 0.5);
  CHECK(o->lr_base_batch == 256);
  CHECK(o->label_smoothing == 0.1);
  CHECK(o->nesterov);
  CHECK(o->no_wd_on_bn_bias);
  CHECK(o->val_samples == 100);
  CHECK(o->eval_every == 2);
  CHECK(o->save_best);
  CHECK(o->tensorboard == "tb");
  CHECK(parse_options(std::vector<std::string>{"--eval-only", "--init", "w.safetensors"})->eval_only);

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--lr-schedule", "linear"}, "--lr-schedule must be constant, step or cosine"},
      {{"--warmup-epochs", "-1"}, "--warmup-epochs"},
      {{"--warmup-epochs", "4", "--epochs", "3"}, "--warmup-epochs"},
      {{"--lr-steps", "60,30"}, "--lr-steps"},
      {{"--lr-steps", "30,x"}, "--lr-steps"},
      {{"--lr-steps", "30,,60"}, "--lr-steps"},
      {{"--lr-gamma", "0"}, "--lr-gamma"},
      {{"--lr-base-batch", "-1"}, "--lr-base-batch"},
      {{"--label-smoothing", "1"}, "--label-smoothing"},
      {{"--nesterov"}, "--nesterov needs --optimizer sgd"},
      {{"--nesterov", "--optimizer", "sgd", "--momentum", "0"}, "--nesterov"},
      {{"--val-samples", "-1"}, "--val-samples"},
      {{"--eval-every", "0"}, "--eval-every"},
      {{"--eval-only"}, "--eval-only needs --init"},
      {{"--eval-only", "--init", "w", "--save", "c"}, "--eval-only"},
      {{"--save-best"}, "--save-best needs --save"},
  };
  for (const auto& [args, needle] : bad) {
    const std::string err = usage_error(args);
    INFO(args[0] << " -> '" << err << "'");
    CHECK(err.find(needle) != std::string::npos);
  }
}

// --- communication (issue 14)
TEST_CASE("--comm-timeout: 300 s by default, any positive number of seconds", "[train][options][comm]") {
  CHECK(parse_options(std::vector<std::string>{})->comm_timeout_s == 300);
  CHECK(parse_options(std::vector<std::string>{"--comm-timeout", "1.5"})->comm_timeout_s == 1.5);
  for (const char* bad : {"0", "-3", "nan", "1e9"})
    CHECK_THAT(usage_error({"--comm-timeout", bad}), Catch::Contains("--comm-timeout"));
}

TEST_CASE("--max-image-bytes: 256 MiB by default, at least 1024 bytes", "[train][options]") {
  CHECK(parse_options(std::vector<std::string>{})->images.read.max_image_bytes == 268435456u);
  CHECK(parse_options(std::vector<std::string>{"--max-image-bytes", "5000000"})->images.read.max_image_bytes == 5000000u);
  CHECK_THAT(usage_error({"--max-image-bytes", "100"}), Catch::Contains("--max-image-bytes must be at least 1024"));
  CHECK_THAT(usage_error({"--max-image-bytes", "-1"}), Catch::Contains("--max-image-bytes"));
}

// --- the image pipeline's choices (issue 11): parsed by add_choice like every other name option
// (CLI11's CheckedTransformer over enums without a stream operator printed NUL bytes in --help
// and raw bytes in the error of a bad value).
TEST_CASE("--loader, --augment, --decode-scaling: names in, enums out, readable help and errors", "[train][options]") {
  const auto d = parse_options(std::vector<std::string>{});
  REQUIRE(d);
  CHECK(d->images.loader == worker::Loader::Auto);
  CHECK(d->images.tf.augment == worker::Augment::Standard);
  CHECK(d->images.tf.dct_scaling);
  const auto o = parse_options(std::vector<std::string>{"--loader", "gpu", "--augment", "none", "--decode-scaling", "off"});
  REQUIRE(o);
  CHECK(o->images.loader == worker::Loader::Gpu);
  CHECK(o->images.tf.augment == worker::Augment::None);
  CHECK_FALSE(o->images.tf.dct_scaling);
  CHECK(parse_options(std::vector<std::string>{"--loader", "cpu"})->images.loader == worker::Loader::Cpu);

  CHECK(usage_error({"--loader", "foo"}) == "--loader must be auto, cpu or gpu, got 'foo'");
  CHECK(usage_error({"--augment", "heavy"}) == "--augment must be standard, none or pad-crop, got 'heavy'");
  CHECK(usage_error({"--decode-scaling", "1"}) == "--decode-scaling must be on or off, got '1'");

  std::ostringstream help;
  std::streambuf* saved = std::cout.rdbuf(help.rdbuf());
  const auto none = parse_options(std::vector<std::string>{"--help"});
  std::cout.rdbuf(saved);
  CHECK_FALSE(none);
  const std::string h = help.str();
  const auto unprintable = std::find_if(h.begin(), h.end(), [](char c) { return c != '\n' && (c < ' ' || c > '~'); });
  CHECK(unprintable == h.end());  // no NUL, no raw bytes
  // Each with its default shown, as the other name options.
  for (const auto& [flag, def] : std::vector<std::pair<std::string, std::string>>{
           {"--loader", "=auto "}, {"--augment", "=standard "}, {"--decode-scaling", "=on "}}) {
    const size_t at = h.find("  " + flag + " ");
    REQUIRE(at != std::string::npos);
    const std::string line = h.substr(at, h.find('\n', at) - at);
    INFO(line);
    CHECK(line.find(def) != std::string::npos);
  }
}

TEST_CASE("--cuda-graph: auto by default, on or off (issue 13)", "[train][options][graph]") {
  using worker::CudaGraph;
  CHECK(parse_options(std::vector<std::string>{})->cuda_graph == CudaGraph::Auto);
  CHECK(parse_options(std::vector<std::string>{"--cuda-graph", "on"})->cuda_graph == CudaGraph::On);
  CHECK(parse_options(std::vector<std::string>{"--cuda-graph", "off"})->cuda_graph == CudaGraph::Off);
  CHECK(std::string(worker::to_string(CudaGraph::Auto)) == "auto");
  CHECK_THAT(usage_error({"--cuda-graph", "yes"}), Catch::Contains("--cuda-graph must be auto, on or off, got 'yes'"));
}

// --- issue 25: recipes, the cifar stem, pad-crop

TEST_CASE("--recipe: a named set of options that the command line overrides", "[train][options][recipe]") {
  const auto guide = parse_options(std::vector<std::string>{});
  REQUIRE(guide);
  CHECK(guide->recipe == "guide");
  CHECK(guide->given.empty());
  CHECK_FALSE(guide->given_or_recipe("--image-size"));  // the guide leaves the size to the data
  CHECK(guide->given_or_recipe("--depth"));

  const auto small = parse_options({"--recipe", "small-images"});
  REQUIRE(small);
  CHECK(small->depth == 18);
  CHECK(small->width == 32);
  CHECK(small->stem == worker::Stem::Cifar);
  CHECK(small->image_size == 32);
  CHECK(small->images.tf.augment == worker::Augment::PadCrop);
  CHECK(small->images.tf.padding == 4);
  CHECK(small->optimizer == worker::OptimizerKind::Sgd);
  CHECK(small->nesterov);
  CHECK(small->no_wd_on_bn_bias);
  CHECK(small->lr_schedule == worker::LrScheduleKind::Cosine);
  CHECK(small->lr_base_batch == 128);
  CHECK(small->label_smoothing == 0.1);
  CHECK(small->given == std::set<std::string>{"--recipe"});

  // Explicit options win, wherever they stand relative to --recipe; flags can be turned off.
  const auto mine = parse_options({"--epochs", "3", "--recipe=small-images", "--width", "16", "--nesterov=false"});
  REQUIRE(mine);
  CHECK(mine->epochs == 3);
  CHECK(mine->width == 16);
  CHECK_FALSE(mine->nesterov);
  CHECK(mine->stem == worker::Stem::Cifar);  // the rest is the recipe's
  CHECK(mine->given == std::set<std::string>{"--epochs", "--recipe", "--width", "--nesterov"});

  const auto nv = parse_options({"--recipe", "nvidia"});
  REQUIRE(nv);
  CHECK(nv->momentum == 0.875);
  CHECK(nv->lr == 0.256);
  CHECK(nv->weight_decay == 3.0517578125e-05);
  CHECK(nv->warmup_epochs == 5);
  const auto tv = parse_options({"--recipe", "torchvision"});
  REQUIRE(tv);
  CHECK(tv->lr_schedule == worker::LrScheduleKind::Step);
  CHECK(tv->lr_steps == std::vector<int>{30, 60, 90});
  CHECK(tv->weight_decay == 1e-4);
  CHECK(tv->epochs == 90);

  CHECK(usage_error({"--recipe", "imagenet"}) == "--recipe must be guide, torchvision, nvidia or small-images, got 'imagenet'");
  // A recipe's value that no longer fits what the command line changed names both.
  CHECK(usage_error({"--recipe", "nvidia", "--epochs", "3"}).find("--warmup-epochs") != std::string::npos);
}

TEST_CASE("--stem and --augment pad-crop (issue 25)", "[train][options]") {
  const auto o = parse_options({"--stem", "cifar", "--augment", "pad-crop", "--crop-padding", "2"});
  REQUIRE(o);
  CHECK(o->stem == worker::Stem::Cifar);
  CHECK(o->images.tf.augment == worker::Augment::PadCrop);
  CHECK(o->images.tf.padding == 2);
  CHECK(std::string(worker::to_string(o->stem)) == "cifar");
  CHECK(std::string(worker::to_string(o->images.tf.augment)) == "pad-crop");
  CHECK(usage_error({"--stem", "tiny"}) == "--stem must be imagenet or cifar, got 'tiny'");
  CHECK(usage_error({"--augment", "crop"}) == "--augment must be standard, none or pad-crop, got 'crop'");
  CHECK(usage_error({"--crop-padding", "-1"}) == "--crop-padding must be between 0 and 4096 pixels");
}
