// The model's device-memory plan as a plain value (worker/model/memory_plan.h): no backend. The
// figures are the ones the trainer's WORKER_MEM_REPORT prints on the GPU for the model's share;
// they guard the savings against PyTorch's 11.8 GB peak (docs/memory.md). That every mode's plan
// computes the same numbers is test_recompute.cpp's (the CPU backend, bit for bit).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "worker/model/memory_plan.h"
#include "worker/model/schema.h"
#include "tests/worker/model/small_model.h"

namespace {

using namespace worker;

std::map<std::string, double> plan_gb(int depth, int batch, DType t, Recompute mode = Recompute::None) {
  const MemoryPlan p = plan_memory(make_schema(model_config(depth, batch)), t, mode, true);
  std::map<std::string, double> gb;
  for (MemUse u : kMemUses) gb[mem_use_name(u)] = double(p.bytes(u)) / 1e9;
  gb["total"] = double(p.total()) / 1e9;
  return gb;
}

std::string all_rows(const std::map<std::string, double>& gb) {
  std::string all;
  for (const auto& kv : gb) all += kv.first + ": " + std::to_string(kv.second) + " GB; ";
  return all;
}

// A placed tensor: where it starts and how many bytes it covers.
struct Span {
  std::string what;
  Place at;
  size_t bytes;
};

// Every tensor the plan places (activations, the downsample outputs that alias their block's
// output, statistics, gradient homes), with its size from the schema.
std::vector<Span> spans(const Schema& s, const MemoryPlan& p) {
  const size_t es = dtype_size(p.dtype);
  std::vector<Span> v;
  auto add = [&](const std::string& what, const Place& at, size_t bytes) {
    if (at.placed()) v.push_back({what, at, bytes});
  };
  auto act = [&](const std::string& what, const Place& at, const ActShape& sh) { add(what, at, sh.numel() * es); };
  auto bn = [&](const std::string& what, const BnPlaces& at, const BnLayer& l) {
    act(what + ".out", at.out, l.out());
    add(what + ".save_mean", at.save_mean, size_t(l.d.c) * sizeof(float));
    add(what + ".save_invstd", at.save_invstd, size_t(l.d.c) * sizeof(float));
  };
  add("params", p.params, s.nparams * sizeof(float));
  add("grads", p.grads, s.nparams * sizeof(float));
  add("running stats", p.stats, s.nbuffers * sizeof(float));
  act("input", p.input, s.input());
  add("labels", p.labels, size_t(s.batch) * sizeof(int32_t));
  act("conv1", p.conv1, s.conv1.out());
  bn("bn1", p.bn1, s.bn1);
  act("stem output", p.stem_out, s.stem_out());
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const BlockLayers& b = s.blocks[i];
    const BlockPlaces& q = p.blocks[i];
    const std::string n = "block " + std::to_string(i) + " ";
    act(n + "c1", q.c1, b.c1.out());
    act(n + "c2", q.c2, b.c2.out());
    act(n + "c3", q.c3, b.c3.out());
    act(n + "cd", q.cd, b.cd.out());
    bn(n + "b1", q.b1, b.b1);
    bn(n + "b2", q.b2, b.b2);
    bn(n + "b3", q.b3, b.b3);
    bn(n + "bd", q.bd, b.bd);
    act(n + "input gradient", q.din, s.block_in(i));
  }
  const ActShape avg{s.batch, 1, 1, s.fc_in};
  act("avg_out", p.avg_out, avg);
  act("d_avg", p.d_avg, avg);
  const size_t nl = size_t(s.batch) * size_t(s.num_classes) * sizeof(float);
  add("logits", p.logits, nl);
  add("dlogits", p.dlogits, nl);
  add("loss", p.loss, sizeof(float));
  if (p.stem_dx.placed()) act("bn1's output gradient", p.stem_dx, s.bn1.out());
  add("bn sink", p.bn_sink, 4 * size_t(p.bn_sink_c) * sizeof(float));
  return v;
}

bool overlap(const Span& a, const Span& b) {
  return a.at.buffer == b.at.buffer && a.at.offset < b.at.offset + b.bytes && b.at.offset < a.at.offset + a.bytes;
}

}  // namespace

TEST_CASE("ResNet-50 bf16 batch 256: the model's memory plan", "[model][memory]") {
  const auto gb = plan_gb(50, 256, DType::BF16);
  INFO(all_rows(gb));
  // Conv and BN outputs in bf16 minus the downsample BN outputs (written into the block outputs):
  // 11.48 GB - 0.77 GB.
  CHECK(gb.at("activations kept for backward") == Approx(10.71).margin(0.02));
  // Activation gradients live in dead activations; the scratch only holds the gradient of the
  // top block's output (256 x 7 x 7 x 2048 bf16) and the average pool's (instead of three
  // buffers of the largest activation: 1.23 GB).
  CHECK(gb.at("activation-gradient scratch") == Approx(0.0524).margin(0.002));
  CHECK(gb.at("params fp32") == Approx(0.1022).margin(0.001));
  // With the backend's share (bf16 shadow 0.05, cuDNN workspace ~0.21, cuBLAS 0.03) and SGD's
  // momentum (0.10): about 11.45 GB, under PyTorch's 11.8 GB.
  CHECK(gb.at("total") < 11.1);
}

TEST_CASE("ResNet-18 fp32: the stem's gradient goes to the scratch (no dead activation fits)", "[model][memory]") {
  const auto gb = plan_gb(18, 32, DType::F32);
  // 32 x 112 x 112 x 64 fp32 (bn1's output gradient) is the largest gradient without a home.
  CHECK(gb.at("activation-gradient scratch") == Approx(32.0 * 112 * 112 * 64 * 4 / 1e9).margin(0.001));
  const MemoryPlan p = plan_memory(make_schema(model_config(18, 32)), DType::F32, Recompute::None, true);
  CHECK(p.stem_dx == p.grad_s);
  // ResNet-50's bn1 gradient fits a dead activation (the scratch above is the top output's).
  const MemoryPlan p50 = plan_memory(make_schema(model_config(50, 256)), DType::BF16, Recompute::None, true);
  CHECK(p50.stem_dx.placed());
  CHECK(p50.stem_dx != p50.grad_s);
}

TEST_CASE("recompute: what each mode keeps (ResNet-50 and -152, bf16, batch 256)", "[model][memory]") {
  const auto bn = plan_gb(50, 256, DType::BF16, Recompute::Bn);
  const auto block = plan_gb(50, 256, DType::BF16, Recompute::Block);
  INFO(all_rows(bn) + "| " + all_rows(block));
  const double mb = 256.0 * 2 / 1e9;  // one bf16 channel of a 1x1 map over the batch, in GB
  // Bn: bn1's output (112x112x64) and each block's inner BN outputs go; one buffer of the largest
  // of them (bn1's, 0.41 GB) takes their place: 10.71 - 2.09 kept, 0.41 shared.
  CHECK(bn.at("recomputed activations (shared)") == Approx(112 * 112 * 64 * mb).margin(0.001));
  CHECK(bn.at("activations kept for backward") == Approx(8.62).margin(0.02));
  // Block: the pool output and the 16 block outputs are kept (3 x 56x56x256, 4 x 28x28x512,
  // 6 x 14x14x1024, 3 x 7x7x2048, + 56x56x64, + the average pool's 2048), the largest segment is layer1.0's (its four
  // 56x56x64 inner tensors, the 56x56x256 last conv and downsample outputs).
  const double outputs = (3 * 56 * 56 * 256 + 4 * 28 * 28 * 512 + 6 * 14 * 14 * 1024 + 3 * 7 * 7 * 2048 + 56 * 56 * 64 + 2048) * mb;
  CHECK(block.at("activations kept for backward") == Approx(outputs).margin(0.001));
  CHECK(block.at("recomputed activations (shared)") == Approx((4 * 56 * 56 * 64 + 2 * 56 * 56 * 256) * mb).margin(0.001));
  // The activation gradients still live in dead tensors: the scratch is the top output's.
  CHECK(block.at("activation-gradient scratch") == Approx(0.0524).margin(0.002));
  // 4.50 GB for the model; with the backend's ~0.3 GB and the optimizer under half of PyTorch's 11.8.
  CHECK(block.at("total") < 4.6);
  // ResNet-152 (3, 8, 36, 3 blocks): the same rule; the largest segment is layer1.0's again.
  const auto block152 = plan_gb(152, 256, DType::BF16, Recompute::Block);
  const double outputs152 =
      (3 * 56 * 56 * 256 + 8 * 28 * 28 * 512 + 36 * 14 * 14 * 1024 + 3 * 7 * 7 * 2048 + 56 * 56 * 64 + 2048) * mb;
  CHECK(block152.at("activations kept for backward") == Approx(outputs152).margin(0.001));
  CHECK(block152.at("recomputed activations (shared)") == Approx((4 * 56 * 56 * 64 + 2 * 56 * 56 * 256) * mb).margin(0.001));
}

TEST_CASE("plan: the parameter buffers come first, as the backend binds them", "[model][memory]") {
  const Schema s = make_schema(model_config(18, 4));
  const MemoryPlan whole = plan_memory(s, DType::BF16, Recompute::None, true);
  REQUIRE(whole.buffers.size() > 3);
  CHECK((whole.params.buffer == 0 && whole.grads.buffer == 1 && whole.stats.buffer == 2));
  CHECK(whole.buffers[0].bytes == s.nparams * sizeof(float));
  CHECK(whole.buffers[2].bytes == s.nbuffers * sizeof(float));
  // ZeRO-1's sharded master weights: no whole fp32 parameter buffer, nothing else changes.
  const MemoryPlan sharded = plan_memory(s, DType::BF16, Recompute::None, false);
  CHECK(!sharded.params.placed());
  CHECK((sharded.grads.buffer == 0 && sharded.stats.buffer == 1));
  CHECK(sharded.buffers.size() == whole.buffers.size() - 1);
  CHECK(sharded.total() == whole.total() - s.nparams * sizeof(float));
  CHECK(sharded.bytes(MemUse::Params) == 0);
}

TEST_CASE("plan: every tensor lies inside its buffer (every depth, stem and mode)", "[model][memory]") {
  for (int depth : {18, 34, 50, 101, 152})
    for (Stem stem : {Stem::ImageNet, Stem::Cifar})
      for (Recompute mode : {Recompute::None, Recompute::Bn, Recompute::Block})
        for (int image_size : {224, 33, 7}) {
          const Schema s = make_schema(model_config(depth, 3, stem, image_size));
          const MemoryPlan p = plan_memory(s, DType::F16, mode, true);
          for (const Span& t : spans(s, p)) {
            INFO("depth " << depth << " stem " << int(stem) << " mode " << int(mode) << " " << image_size << " px: "
                          << t.what);
            REQUIRE(size_t(t.at.buffer) < p.buffers.size());
            CHECK(t.at.offset + t.bytes <= p.buffers[size_t(t.at.buffer)].bytes);
            CHECK(t.at.offset % 256 == 0);  // buffers are 256-byte aligned: so is every tensor
          }
          // At 224 px every downsampling block's input gradient has a home outside the scratch.
          for (size_t i = 0; i < s.blocks.size(); ++i)
            if (s.blocks[i].has_ds && image_size == 224) CHECK(p.blocks[i].din.placed());
        }
}

TEST_CASE("plan: without recomputation no two kept activations share memory", "[model][memory]") {
  // But the documented aliases: a downsample's batch-norm output is its block's output (the last
  // batch norm reads it as the residual and overwrites it), and without a pool bn1's output is the
  // stem's output.
  for (int depth : {18, 50})
    for (Stem stem : {Stem::ImageNet, Stem::Cifar}) {
      const Schema s = make_schema(model_config(depth, 2, stem, 64));
      const MemoryPlan p = plan_memory(s, DType::BF16, Recompute::None, true);
      std::vector<Span> kept;
      for (const Span& t : spans(s, p))
        if (p.buffers[size_t(t.at.buffer)].use == MemUse::Acts && t.what.find("bd.out") == std::string::npos &&
            t.what.find("gradient") == std::string::npos && !(stem == Stem::Cifar && t.what == "bn1.out"))
          kept.push_back(t);
      CHECK(kept.size() > s.blocks.size() * 4);
      for (size_t i = 0; i < kept.size(); ++i)
        for (size_t j = i + 1; j < kept.size(); ++j) {
          INFO("depth " << depth << ": " << kept[i].what << " and " << kept[j].what);
          CHECK_FALSE(overlap(kept[i], kept[j]));
        }
      for (size_t i = 0; i < s.blocks.size(); ++i)
        if (s.blocks[i].has_ds)
          CHECK(p.blocks[i].bd.out == (s.blocks[i].bottleneck ? p.blocks[i].b3.out : p.blocks[i].b2.out));
      if (stem == Stem::Cifar) CHECK(p.bn1.out == p.stem_out);
    }
}

TEST_CASE("plan: Bn shares one buffer among the outputs it recomputes; Block keeps the block outputs in order",
          "[model][memory]") {
  const Schema s = make_schema(model_config(50, 2, Stem::ImageNet, 64));
  const MemoryPlan bn = plan_memory(s, DType::BF16, Recompute::Bn, true);
  const Place r = bn.bn1.out;
  REQUIRE(r.placed());
  CHECK(bn.buffers[size_t(r.buffer)].use == MemUse::Recompute);
  CHECK(bn.buffers[size_t(r.buffer)].bytes == s.bn1.out().numel() * 2);  // the largest of them
  for (const BlockPlaces& q : bn.blocks) {
    CHECK((q.b1.out == r && q.b2.out == r));
    CHECK(q.b3.out != r);  // the block's output is kept
  }
  CHECK(bn.bn_sink_c == 2048);

  const MemoryPlan block = plan_memory(s, DType::BF16, Recompute::Block, true);
  size_t next = 0;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const Place o = block.blocks[i].b3.out;
    CHECK((o.buffer == block.blocks[0].b3.out.buffer && o.offset == next));
    next += (s.block_out(i).numel() * 2 + 255) / 256 * 256;
    // Inside a block everything is recomputed into the arena.
    CHECK(block.buffers[size_t(block.blocks[i].c1.buffer)].use == MemUse::Recompute);
  }
  CHECK(block.buffers[size_t(block.blocks[0].b3.out.buffer)].bytes == next);
  CHECK(block.buffers[size_t(block.stem_out.buffer)].use == MemUse::Acts);
}

TEST_CASE("plan: the model's share of GPU memory in docs/benchmarks.md's recompute table", "[model][memory]") {
  // ResNet-50 and -152, bf16, batch 256: the totals that table quotes for none / bn / block.
  const struct {
    int depth;
    Recompute mode;
    double gb;
  } rows[] = {{50, Recompute::None, 11.05}, {50, Recompute::Bn, 9.37},   {50, Recompute::Block, 4.50},
              {152, Recompute::None, 23.04}, {152, Recompute::Bn, 19.41}, {152, Recompute::Block, 8.68}};
  for (const auto& r : rows) {
    INFO("ResNet-" << r.depth << " mode " << int(r.mode));
    CHECK(plan_gb(r.depth, 256, DType::BF16, r.mode).at("total") == Approx(r.gb).margin(0.005));
  }
}
