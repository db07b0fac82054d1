// The ResNet schema as plain values (worker/model/schema.h): the facts the memory plan and the
// passes rely on, and the tensor-size limit checked before anything is allocated. Names, shapes
// and order against torchvision: test_model_state.cpp and worker_state_names_vs_torchvision.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>

#include "worker/model/schema.h"
#include "tests/worker/model/small_model.h"

using namespace worker;

TEST_CASE("schema: the layers' units tile the parameter buffer in order", "[model][schema]") {
  // Gradient readiness reports the finished suffix of the buffer: it needs every parameter in
  // exactly one unit, units in buffer order.
  for (int depth : {18, 34, 50, 101, 152}) {
    const Schema s = make_schema(model_config(depth, 2));
    size_t next = 0;
    for (const Unit& u : s.units) {
      CHECK(u.begin == next);
      CHECK(u.end > u.begin);
      next = u.end;
    }
    CHECK(next == s.nparams);
    CHECK(s.fc_unit == int(s.units.size()) - 1);
    CHECK(s.units[size_t(s.conv1.unit)].begin == 0);
  }
}

TEST_CASE("schema: running statistics and views agree with the state entries", "[model][schema]") {
  const Schema s = make_schema(model_config(50, 2));
  size_t means = 0, vars = 0, params = 0;
  for (const StateEntry& e : s.entries) {
    if (e.kind == StateKind::RunningMean) ++means;
    if (e.kind == StateKind::RunningVar) ++vars;
    if (e.kind == StateKind::Param) params += e.count;
  }
  CHECK(means == vars);
  CHECK(params == s.nparams);
  auto entry_at = [&](StateKind k, size_t offset) {
    for (const StateEntry& e : s.entries)
      if (e.kind == k && e.offset == offset) return e.name;
    return std::string("none");
  };
  CHECK(entry_at(StateKind::RunningMean, s.bn1.running_mean) == "bn1.running_mean");
  CHECK(entry_at(StateKind::RunningVar, s.blocks[0].bd.running_var) == "layer1.0.downsample.1.running_var");
  CHECK(entry_at(StateKind::Param, s.blocks[3].c2.w.offset) == "layer2.0.conv2.weight");
  CHECK(entry_at(StateKind::Param, s.fc_b.offset) == "fc.bias");
  // The 1-D parameters: every batch norm's weight and bias and the FC bias, in buffer order.
  const std::vector<ParamView> v = vector_params(s);
  CHECK(v.size() == 2 * means + 1);
  for (size_t i = 1; i < v.size(); ++i) CHECK(v[i].offset > v[i - 1].offset);
}

TEST_CASE("schema: shapes chain from the stem through the blocks", "[model][schema]") {
  for (Stem stem : {Stem::ImageNet, Stem::Cifar})
    for (int depth : {18, 50}) {
      const int px = stem == Stem::ImageNet ? 224 : 32;
      const Schema s = make_schema(model_config(depth, 2, stem, px));
      // ImageNet: 224 -> 112 (conv1) -> 56 (pool); Cifar: 32 throughout the stem.
      CHECK(s.stem_out().h == (stem == Stem::ImageNet ? 56 : 32));
      CHECK(s.pooled == (stem == Stem::ImageNet));
      for (size_t i = 0; i < s.blocks.size(); ++i) {
        const BlockLayers& b = s.blocks[i];
        const ActShape in = s.block_in(i), out = s.block_out(i);
        CHECK((b.c1.d.h == in.h && b.c1.d.w == in.w && b.c1.d.cin == in.c));
        CHECK(b.last_conv().out().numel() == out.numel());
        CHECK(b.has_ds == (in.h != out.h || in.c != out.c));
        if (b.has_ds) CHECK(b.cd.out().numel() == out.numel());
      }
      CHECK(s.fc_in == s.block_out(s.blocks.size() - 1).c);
      // layer4 at 1/32 of the input (ImageNet) or 1/8 (Cifar: no stride in the stem).
      CHECK(s.block_out(s.blocks.size() - 1).h == (stem == Stem::ImageNet ? 7 : 4));
    }
}

TEST_CASE("schema: bad configurations are clear errors", "[model][schema]") {
  CHECK_THROWS_WITH(make_schema(model_config(20, 2)),
                    Catch::Contains("depth 20") && Catch::Contains("18, 34, 50, 101 or 152"));
  ModelConfig c = model_config(18, 2);
  c.num_classes = 0;
  CHECK_THROWS_WITH(make_schema(c), Catch::Contains("num_classes"));
  c = model_config(18, 2, Stem::ImageNet, 0);
  CHECK_THROWS_WITH(make_schema(c), Catch::Contains("image_size"));
}

TEST_CASE("a batch beyond cuDNN's 2^31 elements per tensor is refused before anything is allocated",
          "[model][schema]") {
  // ResNet-50 at 224 px: conv1's output holds 64 x 112 x 112 = 802,816 values per image, so
  // 2,674 images are the most one tensor of 2^31 - 1 elements holds (the GPU backend's limit).
  // The model checks this on the schema, before it plans or carves any memory.
  CHECK_NOTHROW(check_tensor_sizes(make_schema(model_config(50, 2674, Stem::ImageNet, 224)), INT32_MAX));
  try {
    check_tensor_sizes(make_schema(model_config(50, 2675, Stem::ImageNet, 224)), INT32_MAX);
    FAIL("batch 2675 was accepted");
  } catch (const ModelTooLarge& e) {
    CHECK_THAT(e.what(), Catch::Contains("batch 2675") && Catch::Contains("at most 2674") &&
                             Catch::Contains("conv1's output"));
  }
  // The CIFAR stem keeps 32 px: layer1's 256-channel outputs are the largest (32 x 32 x 256).
  try {
    check_tensor_sizes(make_schema(model_config(50, 1 << 20, Stem::Cifar, 32)), INT32_MAX);
    FAIL("a batch of 2^20 was accepted");
  } catch (const ModelTooLarge& e) {
    CHECK_THAT(e.what(), Catch::Contains("262144 per image") && Catch::Contains("at most 8191"));
  }
}
