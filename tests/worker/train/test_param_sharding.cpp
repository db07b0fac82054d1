// ParamSharding (worker/train/param_sharding.h): the decision, the answers it gives the optimizer,
// the reducer and the model, and the rule of sharded master weights -- what a step issues and the
// uses of the gradient buffer it refuses -- on a backend and a communicator that record their calls.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "worker/comm/comm.h"
#include "worker/core/backend.h"
#include "worker/model/model.h"
#include "worker/train/optimizer.h"
#include "worker/train/param_sharding.h"

using namespace worker;

namespace {

ModelConfig small(bool whole_params) {
  ModelConfig c;
  c.depth = 18;
  c.width = 4;
  c.num_classes = 3;
  c.image_size = 16;
  c.batch = 1;
  c.whole_params = whole_params;
  return c;
}

// A backend in host memory that computes nothing but records what the trainer's parts ask of it:
// the master-weight calls of a backend with a working copy (the GPU in bf16), and the optimizer's.
class RecordingOps final : public Ops {
 public:
  std::vector<std::string> calls;

  DeviceKind device() const override { return DeviceKind::Gpu; }
  DType compute_dtype() const override { return DType::BF16; }
  std::string describe() const override { return "recording"; }
  bool keeps_working_copy() const override { return true; }
  void* alloc(size_t bytes) override {
    memory_.emplace_back(bytes + 256, 0);
    return memory_.back().data();
  }
  void upload(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void download(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void zero(void* d, size_t n) override { std::memset(d, 0, n); }
  size_t peak_bytes() const override { return 0; }
  void bind_params(float*, float* grads, size_t count) override { grads_ = grads, count_ = count; }
  void register_conv(const ConvDesc&, ParamView) override {}
  void params_updated() override { calls.push_back("params_updated"); }
  void shard_master_weights(const std::vector<ParamView>& owned, const std::vector<ParamView>&) override {
    calls.push_back("shard_master_weights " + std::to_string(owned.size()));
  }
  void export_master(float*, ParamView r) override { calls.push_back(range("export_master", r)); }
  void import_master(const float*) override { calls.push_back("import_master"); }
  void conv_forward(const ConvDesc&, const Act&, ParamView, Act&) override {}
  void conv_backward(const ConvDesc&, const Act&, ParamView, const Act&, Act*, bool, ParamView) override {}
  void bn_forward_train(const BnDesc&, const Act&, ParamView, ParamView, float*, float*, float*, float*,
                        const Act*, bool, Act&) override {}
  void bn_forward_eval(const BnDesc&, const Act&, ParamView, ParamView, const float*, const float*,
                       const Act*, bool, Act&) override {}
  void bn_backward(const BnDesc&, const Act&, const Act&, const Act&, ParamView, const float*, const float*,
                   bool, Act&, Act*, ParamView, ParamView, const Act*) override {}
  void maxpool_forward(const PoolDesc&, const Act&, Act&) override {}
  void maxpool_backward(const PoolDesc&, const Act&, const Act&, const Act&, Act&) override {}
  void avgpool_forward(const Act&, Act&) override {}
  void avgpool_backward(const Act&, Act&) override {}
  void fc_forward(const Act&, ParamView, ParamView, int, float*) override {}
  void fc_backward(const Act&, ParamView, const float*, int, Act&, ParamView, ParamView) override {}
  void softmax_xent(int, int, const float*, const int32_t*, float, float, float*, float*) override {}
  void make_batch(DataKind, uint64_t, const int64_t*, int, int, int, Act&, int32_t*) override {}
  void scale_grads(float) override {}
  bool grads_finite() override { return true; }
  void sgd_step(float, float, float, float*, bool, bool, const uint8_t*, ParamView r) override {
    calls.push_back(range("sgd_step", r));
  }
  void adam_step(float, float, float, float, float, int64_t, float*, float*, const uint8_t*, ParamView r) override {
    calls.push_back(range("adam_step", r));
  }
  void synchronize() override {}

  // The offset of a pointer into the gradient buffer, in floats (for the communicator's log).
  size_t grads_offset(const float* p) const { return size_t(p - grads_); }

 private:
  static std::string range(const char* what, ParamView r) {
    return std::string(what) + " " + std::to_string(r.offset) + "+" + std::to_string(r.count);
  }
  std::vector<std::vector<uint8_t>> memory_;
  float* grads_ = nullptr;
  size_t count_ = 0;
};

// Rank 0 of `world` ranks whose collectives only record what they were given.
class RecordingComm final : public Comm {
 public:
  RecordingComm(int world, RecordingOps& ops) : world_(world), ops_(ops) {}
  int rank() const override { return 0; }
  int size() const override { return world_; }
  void allreduce_sum(float*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void wait() override { ops_.calls.push_back("wait"); }
  void reduce_scatter_sum(float*, size_t) override {}
  void allgather(float* data, size_t count) override {
    ops_.calls.push_back("allgather " + std::to_string(ops_.grads_offset(data)) + "+" + std::to_string(count));
  }
  void allgather_host(const void* send, void* recv, size_t bytes) override {
    for (int r = 0; r < world_; ++r) std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, send, bytes);
  }
  void barrier_untimed() override {}

 private:
  int world_;
  RecordingOps& ops_;
};

template <typename F>
std::string logic_error_of(F&& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("ZeRO's decision: --zero 1 shards the optimizer state; the master weights where a working copy is",
          "[train][zero][sharding]") {
  CHECK(ParamSharding::decide(0, 4, true) == Sharding::None);
  CHECK(ParamSharding::decide(1, 1, true) == Sharding::OptimizerState);   // one rank: nothing to split the masters over
  CHECK(ParamSharding::decide(1, 4, false) == Sharding::OptimizerState);  // CPU, GPU fp32: the fp32 weights are the working ones
  CHECK(ParamSharding::decide(1, 4, true) == Sharding::MasterWeights);
  CHECK(ParamSharding::whole_params(Sharding::None));
  CHECK(ParamSharding::whole_params(Sharding::OptimizerState));
  CHECK_FALSE(ParamSharding::whole_params(Sharding::MasterWeights));
}

TEST_CASE("ZeRO's answers: the optimizer's ranges, the reduction, the fp32 weights kept", "[train][zero][sharding]") {
  auto cpu = make_cpu_ops(1);
  auto comm = make_single_process_comm();
  Model model(small(true), *cpu);
  const size_t np = model.num_params();

  ParamSharding off(0, 1000, model, *cpu, *comm);
  CHECK(off.mode() == Sharding::None);
  CHECK(off.optimizer_ranges().empty());  // the whole buffer
  CHECK(off.reduction() == Reduction::AllReduce);
  CHECK(off.master_bytes() == np * sizeof(float));

  ParamSharding zero(1, 1000, model, *cpu, *comm);
  CHECK(zero.mode() == Sharding::OptimizerState);
  CHECK(zero.reduction() == Reduction::ReduceScatter);
  REQUIRE(zero.optimizer_ranges().size() == zero.layout().buckets.size());
  size_t owned = 0;
  for (const ParamView& r : zero.optimizer_ranges()) owned += r.count;
  CHECK(owned == np);  // one rank owns every block
  CHECK(zero.master_bytes() == np * sizeof(float));

  // A model built against the decision is refused.
  Model no_params(small(false), *cpu);
  CHECK_THAT(logic_error_of([&] { ParamSharding(1, 1000, no_params, *cpu, *comm); }),
             Catch::Contains("without whole fp32 parameters"));
}

TEST_CASE("sharded master weights: a step exports each owned block, all-gathers its bucket, then imports",
          "[train][zero][sharding]") {
  RecordingOps ops;
  RecordingComm comm(2, ops);
  Model model(small(false), ops);
  const size_t np = model.num_params();
  const size_t bucket = np / 3;  // three or four buckets
  ParamSharding s(1, bucket, model, ops, comm);
  REQUIRE(s.mode() == Sharding::MasterWeights);
  CHECK(s.master_bytes() == s.layout().owned_total * sizeof(float));
  CHECK(s.master_bytes() < np * sizeof(float));

  OptimizerConfig oc;
  oc.kind = OptimizerKind::Sgd;
  Optimizer opt(oc, ops, np, {}, s.optimizer_ranges());
  CHECK_THAT(logic_error_of([&] { s.weights_loaded(); }), Catch::Contains("before bind_backend"));
  s.bind_backend();
  CHECK(ops.calls == std::vector<std::string>{"shard_master_weights " + std::to_string(s.layout().buckets.size())});
  CHECK_THAT(logic_error_of([&] { s.bind_backend(); }), Catch::Contains("once"));

  model.init(1);  // into the gradient buffer: there is no whole parameter buffer
  s.weights_loaded();
  CHECK(s.whole_weights() == model.grads());

  // The step: every owned block updated, exported into the spent gradients and gathered.
  ops.calls.clear();
  s.zero_grads();
  CHECK_THAT(logic_error_of([&] { s.whole_weights(); }), Catch::Contains("this step's gradients"));
  CHECK(s.grads_finite_everywhere());
  s.update(opt, 0.1f);
  std::vector<std::string> want;
  for (size_t k = 0; k < s.layout().buckets.size(); ++k) {
    const ParamView& o = s.layout().owned[k];
    const Bucket& b = s.layout().buckets[k];
    if (o.count > 0) want.push_back("sgd_step " + std::to_string(o.offset) + "+" + std::to_string(o.count));
    if (o.count > 0) want.push_back("export_master " + std::to_string(o.offset) + "+" + std::to_string(o.count));
    want.push_back("allgather " + std::to_string(b.begin) + "+" + std::to_string(b.size()));
  }
  want.push_back("wait");
  want.push_back("import_master");
  CHECK(ops.calls == want);
  CHECK(s.whole_weights() == model.grads());  // the spent gradient buffer holds the new weights

  // A second update of the same gradients, or a verdict without them, is refused.
  CHECK_THAT(logic_error_of([&] { s.update(opt, 0.1f); }), Catch::Contains("without this step's gradients"));
  CHECK_THAT(logic_error_of([&] { s.grads_finite_everywhere(); }), Catch::Contains("without gradients"));

  // A checkpoint: the optimizer state's gather takes the buffer as scratch; the weights' gather
  // puts them back, and only then are they readable.
  ops.calls.clear();
  s.whole_optimizer_state(opt);
  CHECK_THAT(logic_error_of([&] { s.whole_weights(); }), Catch::Contains("no weights"));
  const ModelState st = s.lead_model_state();
  CHECK(st.params.size() == np);
  CHECK(ops.calls.front() == "allgather " + std::to_string(s.layout().buckets.front().begin) + "+" +
                                 std::to_string(s.layout().buckets.front().size()));
  CHECK(std::find(ops.calls.begin(), ops.calls.end(), "export_master 0+0") != ops.calls.end());  // every owned block
  CHECK(s.whole_weights() == model.grads());

  // Inside a step the buffer is neither scratch nor a place to gather into.
  s.zero_grads();
  CHECK_THAT(logic_error_of([&] { s.whole_optimizer_state(opt); }), Catch::Contains("scratch while it holds gradients"));
  CHECK_THAT(logic_error_of([&] { s.model_state(); }), Catch::Contains("gradient buffer that holds gradients"));
}

TEST_CASE("unsharded and optimizer-state sharding keep the weights in the model's buffer", "[train][zero][sharding]") {
  RecordingOps ops;
  auto single = make_single_process_comm();
  Model model(small(true), ops);
  ParamSharding s(1, model.num_params() / 2, model, ops, *single);  // one rank: the optimizer state only
  REQUIRE(s.mode() == Sharding::OptimizerState);
  OptimizerConfig oc;
  Optimizer opt(oc, ops, model.num_params(), {}, s.optimizer_ranges());
  s.bind_backend();
  CHECK(ops.calls.empty());  // no master weights to hand to the backend
  model.init(1);
  s.weights_loaded();
  s.zero_grads();
  CHECK(s.whole_weights() == model.params());  // readable at any time: not the gradient buffer
  s.update(opt, 0.1f);
  CHECK(ops.calls.back() == "params_updated");
  CHECK(s.whole_weights() == model.params());
}
