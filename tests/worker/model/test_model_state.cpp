// Model state layout (torchvision's state_dict names, shapes and sizes), initialisation, and
// the checkpoint mapping (OIHW conv weights, I64 num_batches_tracked, strict name/shape checks).
// The full name-by-name comparison with torchvision itself is worker_state_names_vs_torchvision.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "worker/core/backend.h"
#include "worker/model/state_dict.h"
#include "tests/worker/model/small_model.h"

using namespace worker;

namespace {

const StateEntry& entry(const Model& m, const std::string& name) {
  for (const StateEntry& e : m.state_entries())
    if (e.name == name) return e;
  FAIL("no entry " << name);
  throw 0;
}

std::string error_of(const Model& m, const std::vector<StTensor>& ts) {
  try {
    model_state_from_tensors(m, ts, "ckpt.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model: sizes and order match torchvision's state_dict", "[model]") {
  auto ops = make_cpu_ops(1);
  struct Want { int depth; size_t entries, params, buffers; const char* last_bn; };
  // From torchvision 0.14: len(state_dict()), parameter count, running-stat values.
  for (const Want& w : {Want{18, 122, 11689512, 9600, "layer4.1.bn2.num_batches_tracked"},
                        Want{50, 320, 25557032, 53120, "layer4.2.bn3.num_batches_tracked"}}) {
    ModelConfig c;
    c.depth = w.depth;
    c.image_size = 8;
    c.batch = 1;
    Model m(c, *ops);
    const auto& es = m.state_entries();
    CHECK(es.size() == w.entries);
    CHECK(m.num_params() == w.params);
    CHECK(m.num_buffers() == w.buffers);
    const std::vector<std::string> head{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                        "bn1.running_var", "bn1.num_batches_tracked",
                                        "layer1.0.conv1.weight", "layer1.0.bn1.weight"};
    for (size_t i = 0; i < head.size(); ++i) CHECK(es[i].name == head[i]);
    CHECK(es[es.size() - 3].name == w.last_bn);
    CHECK(es[es.size() - 2].name == "fc.weight");
    CHECK(es.back().name == "fc.bias");
    CHECK(entry(m, "conv1.weight").shape == std::vector<int64_t>{64, 3, 7, 7});
    CHECK(entry(m, "fc.weight").shape == std::vector<int64_t>{1000, w.depth == 18 ? 512 : 2048});
    // Parameters are laid out in state order, back to back: backward finishes them end-first.
    size_t next = 0;
    for (const StateEntry& e : es)
      if (e.kind == StateKind::Param) {
        CHECK(e.offset == next);
        next += e.count;
      }
    CHECK(next == m.num_params());
  }
  // stride on the bottleneck's 3x3 (v1.5) and the width multiplier.
  Model m50(small_model(50, 16), *ops);
  CHECK(entry(m50, "layer2.0.conv2.weight").shape == std::vector<int64_t>{32, 32, 3, 3});
  CHECK(entry(m50, "layer2.0.downsample.0.weight").shape == std::vector<int64_t>{128, 64, 1, 1});
  CHECK(entry(m50, "layer4.2.bn3.running_var").shape == std::vector<int64_t>{512});
}

TEST_CASE("model: bad configurations are clear errors", "[model]") {
  auto ops = make_cpu_ops(1);
  CHECK_THROWS_WITH(Model(small_model(20), *ops), Catch::Contains("depth 20") && Catch::Contains("18, 34, 50"));
  ModelConfig c = small_model(18);
  c.width = 0;
  CHECK_THROWS_WITH(Model(c, *ops), Catch::Contains("width"));
  c = small_model(18);
  c.batch = 0;
  CHECK_THROWS_WITH(Model(c, *ops), Catch::Contains("batch"));
}

TEST_CASE("model: init is torchvision's, deterministic per seed", "[model]") {
  auto ops = make_cpu_ops(1);
  Model m(small_model(18, 16, 10), *ops);
  m.init(5);
  const ModelState a = m.get_state();
  m.init(5);
  CHECK(m.get_state().params == a.params);
  m.init(6);
  CHECK(m.get_state().params != a.params);
  // Drawn while the model was built (the constructor's init_seed): the same state; another seed
  // than the one drawn ahead is drawn when asked for, and the one drawn ahead is used once.
  Model ahead(small_model(18, 16, 10), *ops, uint64_t(5));
  ahead.init(5);
  const ModelState b = ahead.get_state();
  CHECK(b.params == a.params);
  CHECK(b.buffers == a.buffers);
  ahead.init(6);
  CHECK(ahead.get_state().params == m.get_state().params);
  ahead.init(5);
  CHECK(ahead.get_state().params == a.params);
  Model other(small_model(18, 16, 10), *ops, uint64_t(7));
  other.init(6);
  CHECK(other.get_state().params == m.get_state().params);

  // Kaiming normal, fan_out, relu: std sqrt(2 / (C_out * 3 * 3)) for layer3's 3x3 convs.
  const StateEntry& cw = entry(m, "layer3.0.conv2.weight");
  double s = 0, s2 = 0;
  for (size_t i = 0; i < cw.count; ++i) {
    const double v = a.params[cw.offset + i];
    s += v;
    s2 += v * v;
  }
  const double mean = s / double(cw.count), sd = std::sqrt(s2 / double(cw.count) - mean * mean);
  CHECK(std::abs(mean) < 0.01);
  CHECK(sd == Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.05));
  for (const StateEntry& e : m.state_entries()) {
    if (e.name.find("bn") == std::string::npos && e.name.find("downsample.1") == std::string::npos) continue;
    const float* base = (e.kind == StateKind::Param ? a.params.data() : a.buffers.data()) + e.offset;
    const bool is_weight = e.name.size() > 7 && e.name.substr(e.name.size() - 7) == ".weight";
    const float want = e.kind == StateKind::RunningVar || (e.kind == StateKind::Param && is_weight) ? 1.0f : 0.0f;
    for (size_t i = 0; i < e.count; ++i) REQUIRE(base[i] == want);
  }
  // nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  const StateEntry& fw = entry(m, "fc.weight");
  const double bound = 1.0 / std::sqrt(128.0);
  float mx = 0;
  for (size_t i = 0; i < fw.count + 10; ++i) mx = std::max(mx, std::abs(a.params[fw.offset + i]));
  CHECK(mx <= bound);
  CHECK(mx > 0.9 * bound);
}

TEST_CASE("model: OIHW <-> OHWI", "[model]") {
  const int o = 2, i = 3, kh = 2, kw = 3;
  std::vector<float> oihw(size_t(o * i * kh * kw)), ohwi(oihw.size()), back(oihw.size());
  for (size_t k = 0; k < oihw.size(); ++k) oihw[k] = float(k);
  oihw_to_ohwi(oihw.data(), ohwi.data(), o, i, kh, kw);
  // element (a=1, b=2, y=1, x=0): OIHW index ((1*3+2)*2+1)*3+0 = 33; OHWI ((1*2+1)*3+0)*3+2 = 29
  CHECK(ohwi[29] == 33.0f);
  ohwi_to_oihw(ohwi.data(), back.data(), o, i, kh, kw);
  CHECK(back == oihw);
}

TEST_CASE("model: state <-> tensors round trip and strict checks", "[model][safetensors]") {
  auto ops = make_cpu_ops(1);
  Model m(small_model(50), *ops);
  m.init(3);
  ModelState s = m.get_state();
  s.num_batches_tracked = 17;
  for (size_t i = 0; i < s.buffers.size(); ++i) s.buffers[i] = float(i % 7) * 0.5f;
  auto ts = model_state_to_tensors(m, s);
  REQUIRE(ts.size() == m.state_entries().size());
  // Conv weights leave in OIHW; num_batches_tracked is a 0-d I64.
  const StateEntry& c1 = entry(m, "conv1.weight");
  std::vector<float> oihw(c1.count);
  ohwi_to_oihw(s.params.data() + c1.offset, oihw.data(), 8, 3, 7, 7);
  CHECK(std::memcmp(ts[0].data.data(), oihw.data(), oihw.size() * 4) == 0);
  CHECK(ts[5].name == "bn1.num_batches_tracked");
  CHECK(ts[5].dtype == "I64");
  CHECK(ts[5].shape.empty());
  CHECK(ts[5].data[0] == 17);

  const char* path = "/tmp/test_model_state.safetensors";
  write_safetensors(path, ts);
  const ModelState r = model_state_from_tensors(m, read_safetensors(path), path);
  std::remove(path);
  CHECK(r.params == s.params);
  CHECK(r.buffers == s.buffers);
  CHECK(r.num_batches_tracked == 17);
  m.set_state(r);
  CHECK(m.get_state().params == s.params);
  CHECK(m.num_batches_tracked() == 17);

  SECTION("missing tensor") {
    auto bad = ts;
    bad.erase(bad.begin() + 7);
    CHECK_THAT(error_of(m, bad), Catch::Contains("ckpt.safetensors") && Catch::Contains("missing tensor 'layer1.0.bn1.weight'"));
  }
  SECTION("unexpected tensor") {
    auto bad = ts;
    bad.push_back(bad[1]);
    bad.back().name = "layer9.0.bn1.weight";
    CHECK_THAT(error_of(m, bad), Catch::Contains("unexpected tensor 'layer9.0.bn1.weight'"));
  }
  SECTION("wrong shape") {
    auto bad = ts;
    bad[1].shape = {4, 2};
    CHECK_THAT(error_of(m, bad), Catch::Contains("'bn1.weight' has shape [4, 2]") && Catch::Contains("needs [8]"));
  }
  SECTION("wrong dtype") {
    auto bad = ts;
    bad[1].dtype = "F16";
    bad[1].data.resize(16);
    CHECK_THAT(error_of(m, bad), Catch::Contains("'bn1.weight' has dtype F16"));
    bad = ts;
    bad[5].dtype = "F32";
    CHECK_THAT(error_of(m, bad), Catch::Contains("'bn1.num_batches_tracked' has dtype F32"));
  }
  SECTION("another depth's checkpoint") {
    Model m18(small_model(18), *ops);
    CHECK_THAT(error_of(m18, ts), Catch::Contains("ckpt.safetensors"));
  }
  SECTION("set_state with the wrong sizes") {
    ModelState w = s;
    w.params.pop_back();
    CHECK_THROWS_WITH(m.set_state(w), Catch::Contains("parameters"));
  }
}
