// The start-up check that every rank trains the same run (worker/train/agreement.h): which
// settings count, and the error that names the rank, the option and both values.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "worker/train/agreement.h"

using namespace worker;

namespace {

std::string text_of(const TrainOptions& o, const RunFacts& f = {}) { return canonical_text(shared_settings(o, f)); }

}  // namespace

TEST_CASE("shared settings: what changes the run counts, where and how a rank runs does not", "[train][agreement]") {
  const TrainOptions base;
  const std::string ref = text_of(base);
  const std::vector<std::pair<const char*, std::function<void(TrainOptions&)>>> counted = {
      {"--depth", [](TrainOptions& o) { o.depth = 18; }},
      {"--optimizer", [](TrainOptions& o) { o.optimizer = OptimizerKind::Sgd; }},
      {"--seed", [](TrainOptions& o) { o.seed = 1; }},
      {"--lr", [](TrainOptions& o) { o.lr = 1e-3 * (1 + 1e-15); }},  // exactly: one ulp counts
      {"--batch-size", [](TrainOptions& o) { o.batch_size = 16; }},
      {"--accum-steps", [](TrainOptions& o) { o.accum_steps = 2; }},
      {"--log-every", [](TrainOptions& o) { o.log_every = 5; }},  // a collective: a hang otherwise
      {"--bucket-mb", [](TrainOptions& o) { o.bucket_mb = 1; }},
      {"--zero", [](TrainOptions& o) { o.zero = 1; }},
      {"--save (set)", [](TrainOptions& o) { o.save = "a.safetensors"; }},
      {"--lr-steps", [](TrainOptions& o) { o.lr_steps = {30, 60}; }},
      {"--max-image-bytes", [](TrainOptions& o) { o.images.read.max_image_bytes = 4096; }},
      {"--hflip", [](TrainOptions& o) { o.images.tf.hflip = 0; }},
      {"--stem", [](TrainOptions& o) { o.stem = Stem::Cifar; }},
      {"--crop-padding", [](TrainOptions& o) { o.images.tf.padding = 2; }},
  };
  for (const auto& [name, edit] : counted) {
    TrainOptions o = base;
    edit(o);
    INFO(name);
    CHECK(text_of(o) != ref);
    CHECK_THAT(describe_disagreement({ref, text_of(o)}), Catch::Contains(name));
  }
  const std::vector<std::pair<const char*, std::function<void(TrainOptions&)>>> per_rank = {
      {"--device", [](TrainOptions& o) { o.device = DeviceChoice::Cpu; }},
      {"--threads", [](TrainOptions& o) { o.threads = 3; }},
      {"--data-threads", [](TrainOptions& o) { o.images.read.threads = 3; }},
      {"--metrics-file", [](TrainOptions& o) { o.metrics_file = "/tmp/m.jsonl"; }},
      {"--tensorboard", [](TrainOptions& o) { o.tensorboard = "/tmp/tb"; }},
      {"--comm-timeout", [](TrainOptions& o) { o.comm_timeout_s = 5; }},
      {"--recompute", [](TrainOptions& o) { o.recompute = Recompute::Block; }},
      {"--cuda-graph", [](TrainOptions& o) { o.cuda_graph = CudaGraph::Off; }},
      {"--strict-data", [](TrainOptions& o) { o.images.read.strict = true; }},
  };
  for (const auto& [name, edit] : per_rank) {
    TrainOptions o = base;
    edit(o);
    INFO(name);
    CHECK(text_of(o) == ref);
  }
  // The paths of --save and --resume may differ (another node's mount), not whether --save is set.
  TrainOptions a = base, b = base;
  a.save = "/node0/ck.safetensors";
  b.save = "/mnt/ck.safetensors";
  CHECK(text_of(a) == text_of(b));
  // What follows from the data and a resume counts too.
  RunFacts f;
  f.train_samples = 1000;
  RunFacts g = f;
  g.train_samples = 999;
  CHECK_THAT(describe_disagreement({text_of(base, f), text_of(base, g)}),
             Catch::Contains("the training data's size 999 on rank 1, 1000 on rank 0"));
  g = f;
  g.resumed_step = 10;
  CHECK_THAT(describe_disagreement({text_of(base, f), text_of(base, g)}),
             Catch::Contains("the resumed position (step, epoch, batch, sample) 10, 0, 0, 0 on rank 1, 0, 0, 0, 0 on rank 0"));
}

TEST_CASE("disagreement: the first rank that differs, both values, the rest counted", "[train][agreement]") {
  const TrainOptions base;
  TrainOptions sgd = base;
  sgd.optimizer = OptimizerKind::Sgd;
  TrainOptions many = base;
  many.seed = 7;
  many.depth = 18;
  many.width = 32;
  many.epochs = 9;
  many.log_every = 1;
  const std::string ref = text_of(base);
  CHECK(describe_disagreement({ref, ref, ref}).empty());
  const std::string one = describe_disagreement({ref, ref, text_of(sgd), text_of(many)});
  CHECK_THAT(one, Catch::StartsWith("the ranks do not train the same run: --optimizer sgd on rank 2, adam on rank 0"));
  CHECK_THAT(one, Catch::Contains("1 more rank(s) differ from rank 0"));
  const std::string five = describe_disagreement({ref, text_of(many)});
  CHECK_THAT(five, Catch::Contains("on rank 1") && Catch::Contains("(and 2 more)"));
  // A text with a setting the other lacks (another build): named, "(none)" for the missing value.
  CHECK_THAT(describe_disagreement({ref, ref + "--new=1\n"}), Catch::Contains("--new 1 on rank 1, (none) on rank 0"));
}
