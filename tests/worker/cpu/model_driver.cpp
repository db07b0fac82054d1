// Test driver for the PyTorch comparisons (tests/worker/python/*.py):
//   model_driver names --depth D [--width W] [--classes C]       state entries as JSON lines
//   model_driver step --depth D --width W --classes C --image-size S --batch N --seed K --out DIR
//                     [--data learnable|random] [--threads T] [--init WEIGHTS] [--stem imagenet|cifar]
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
#include "worker/model/model.h"
#include "worker/model/safetensors.h"
#include "tests/worker/reference_step.h"

namespace {

using namespace worker;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
  cfg.stem = a.count("stem") && a.at("stem") == "cifar" ? Stem::Cifar : Stem::ImageNet;
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
      ops->sgd_step(0.01f, 0.9f, 0.0f, mom, s == 0, false, nullptr);
      ops->synchronize();
    }
    const double dt = now_s() - t0;
    std::printf("%s resnet%d width %d image %d batch %d: %.1f images/s (%.1f ms/step), loss %.4f, memory %.0f MiB\n",
                ops->describe().c_str(), cfg.depth, cfg.width, cfg.image_size, cfg.batch,
                steps * cfg.batch / dt, 1e3 * dt / steps, double(m.last_loss()), double(ops->peak_bytes()) / (1 << 20));
    return 0;
  }
  if (cmd != "step") throw std::invalid_argument("unknown command " + cmd);
  const DataKind kind = a.count("data") && a.at("data") == "random" ? DataKind::Random : DataKind::Learnable;
  const float loss = testing::write_reference_step(*ops, cfg, kind, uint64_t(get(a, "seed", 1)),
                                                   a.count("init") ? a.at("init") : "",
                                                   a.count("out") ? a.at("out") : ".");
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
