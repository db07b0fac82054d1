// Test driver for the PyTorch comparisons (tests/worker/python/*.py):
//   model_driver names --depth D [--width W] [--classes C]       state entries as JSON lines
//   model_driver step --depth D --width W --classes C --image-size S --batch N --seed K --out DIR
//                     [--data learnable|random] [--threads T] [--init WEIGHTS]
//   model_driver bench --depth D --width W --image-size S --batch N [--steps K] [--threads T]
// `step` writes, as safetensors in DIR: init (the initial state), batch (images NHWC, labels),
// grads (loss + every gradient, OIHW), fwd (state after one training forward: running stats),
// sgd (state after one SGD step), adam (state after one Adam step from the same start).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>

#include "worker/core/backend.h"
#include "worker/core/model.h"
#include "worker/core/safetensors.h"

namespace {

using namespace worker;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr float kSgdLr = 0.1f, kSgdMomentum = 0.9f, kSgdWd = 1e-4f;
constexpr float kAdamLr = 1e-3f, kAdamWd = 1e-4f;

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) throw std::invalid_argument(std::string("unexpected argument ") + argv[i]);
    a[argv[i] + 2] = argv[i + 1];
  }
  return a;
}

int get(const std::map<std::string, std::string>& a, const std::string& k, int def) {
  auto it = a.find(k);
  return it == a.end() ? def : std::stoi(it->second);
}

StTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, const float* p, size_t n) {
  StTensor t{name, "F32", std::move(shape), {}};
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), p, n * 4);
  return t;
}

void save_state(Model& m, const std::string& path) {
  write_safetensors(path, model_state_to_tensors(m, m.get_state()));
}

int run(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument("usage: model_driver names|step --key value ...");
  const std::string cmd = argv[1];
  const auto a = parse(argc, argv);
  ModelConfig cfg;
  cfg.depth = get(a, "depth", 18);
  cfg.width = get(a, "width", 64);
  cfg.num_classes = get(a, "classes", 1000);
  cfg.image_size = get(a, "image-size", 32);
  cfg.batch = get(a, "batch", 2);
  auto ops = make_cpu_ops(get(a, "threads", 0));
  if (cmd == "names") {
    cfg.batch = 1;
    cfg.image_size = 8;
    Model m(cfg, *ops);
    for (const StateEntry& e : m.state_entries()) {
      std::cout << "{\"name\": \"" << e.name << "\", \"shape\": [";
      for (size_t i = 0; i < e.shape.size(); ++i) std::cout << (i ? ", " : "") << e.shape[i];
      std::cout << "]}\n";
    }
    return 0;
  }
  if (cmd == "bench") {  // images/s of forward_backward + SGD step, after one warm-up step
    Model m(cfg, *ops);
    m.init(1);
    std::vector<int64_t> idx(size_t(cfg.batch));
    for (int i = 0; i < cfg.batch; ++i) idx[size_t(i)] = i;
    ops->make_batch(DataKind::Random, 1, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes, m.input(), m.labels());
    float* mom = static_cast<float*>(ops->alloc(m.num_params() * 4));
    const int steps = get(a, "steps", 5);
    double t0 = 0;
    for (int s = 0; s <= steps; ++s) {
      if (s == 1) t0 = now_s();
      ops->zero(m.grads(), m.num_params() * 4);
      m.forward_backward();
      ops->sgd_step(0.01f, 0.9f, 0.0f, mom, s == 0);
      ops->synchronize();
    }
    const double dt = now_s() - t0;
    std::printf("%s resnet%d width %d image %d batch %d: %.1f images/s (%.1f ms/step), loss %.4f, memory %.0f MiB\n",
                ops->describe().c_str(), cfg.depth, cfg.width, cfg.image_size, cfg.batch,
                steps * cfg.batch / dt, 1e3 * dt / steps, double(m.last_loss()), double(ops->peak_bytes()) / (1 << 20));
    return 0;
  }
  if (cmd != "step") throw std::invalid_argument("unknown command " + cmd);
  const std::string out = a.count("out") ? a.at("out") : ".";
  Model m(cfg, *ops);
  if (a.count("init")) {  // weights written by torch (tests/worker/python/compare_torch.py)
    m.set_state(model_state_from_tensors(m, read_safetensors(a.at("init")), a.at("init")));
  } else {
    m.init(uint64_t(get(a, "seed", 1)));
  }
  const ModelState init = m.get_state();
  save_state(m, out + "/init.safetensors");

  std::vector<int64_t> idx(size_t(cfg.batch));
  for (int i = 0; i < cfg.batch; ++i) idx[size_t(i)] = 1000 + i;
  const DataKind kind = a.count("data") && a.at("data") == "random" ? DataKind::Random : DataKind::Learnable;
  ops->make_batch(kind, 7, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes,
                  m.input(), m.labels());
  {
    std::vector<int32_t> lab(size_t(cfg.batch));
    ops->download(lab.data(), m.labels(), lab.size() * 4);
    std::vector<float> img(m.input().numel());
    ops->download(img.data(), m.input().data, img.size() * 4);
    StTensor lt{"labels", "I64", {cfg.batch}, {}};
    for (int32_t l : lab) {
      const int64_t v = l;
      const auto* b = reinterpret_cast<const uint8_t*>(&v);
      lt.data.insert(lt.data.end(), b, b + 8);
    }
    write_safetensors(out + "/batch.safetensors",
                      {f32_tensor("images", {cfg.batch, cfg.image_size, cfg.image_size, 3}, img.data(), img.size()), lt});
  }

  // One training step; gradients saved with the parameters' names and layouts.
  auto one_step = [&]() {
    m.set_state(init);
    ops->zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
  };
  one_step();
  const float loss = m.last_loss();
  save_state(m, out + "/fwd.safetensors");
  {
    ModelState g = m.get_state();
    ops->download(g.params.data(), m.grads(), m.num_params() * 4);
    std::vector<StTensor> ts;
    for (StTensor& t : model_state_to_tensors(m, g)) {
      for (const StateEntry& e : m.state_entries())
        if (e.name == t.name && e.kind == StateKind::Param) ts.push_back(std::move(t));
    }
    ts.push_back(f32_tensor("loss", {}, &loss, 1));
    write_safetensors(out + "/grads.safetensors", ts);
  }
  float* mom = static_cast<float*>(ops->alloc(m.num_params() * 4));
  ops->sgd_step(kSgdLr, kSgdMomentum, kSgdWd, mom, true);
  ops->params_updated();
  save_state(m, out + "/sgd.safetensors");

  one_step();
  float* am = static_cast<float*>(ops->alloc(m.num_params() * 4));
  float* av = static_cast<float*>(ops->alloc(m.num_params() * 4));
  ops->adam_step(kAdamLr, 0.9f, 0.999f, 1e-8f, kAdamWd, 1, am, av);
  ops->params_updated();
  save_state(m, out + "/adam.safetensors");
  std::printf("loss %.8f\n", double(loss));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_driver: %s\n", e.what());
    return 1;
  }
}
