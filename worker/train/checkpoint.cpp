#include "worker/train/checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "worker/core/safetensors.h"
#include "worker/train/optimizer.h"

namespace worker {

namespace {

constexpr const char* kFormat = "train_resnet.train_state.v1";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

StTensor f32_tensor(const std::string& name, const std::vector<float>& v) {
  StTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = {int64_t(v.size())};
  t.data.resize(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> f32_from(const std::vector<StTensor>& ts, const std::string& name, size_t count,
                            const std::string& path) {
  for (const auto& t : ts) {
    if (t.name != name) continue;
    if (t.dtype != "F32" || t.shape.size() != 1 || size_t(t.shape[0]) != count) {
      throw std::runtime_error("training state '" + path + "': tensor '" + name + "' is not F32 [" +
                               std::to_string(count) + "] (a checkpoint of a different model?)");
    }
    std::vector<float> v(count);
    if (count) std::memcpy(v.data(), t.data.data(), count * sizeof(float));
    return v;
  }
  throw std::runtime_error("training state '" + path + "': tensor '" + name + "' is missing");
}

const std::string& meta(const std::map<std::string, std::string>& m, const std::string& key,
                        const std::string& path) {
  auto it = m.find(key);
  if (it == m.end()) throw std::runtime_error("training state '" + path + "': metadata '" + key + "' is missing");
  return it->second;
}

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path) {
  const std::string& v = meta(m, key, path);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::runtime_error("training state '" + path + "': metadata '" + key + "'='" + v + "' is not an integer");
}

// Round-trips exactly: the loss scale is a power of two that may get very small.
std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

}  // namespace

std::string train_state_path(const std::string& weights_path) {
  const std::string ext = ".safetensors";
  if (ends_with(weights_path, ext)) {
    return weights_path.substr(0, weights_path.size() - ext.size()) + ".train" + ext;
  }
  return weights_path + ".train" + ext;
}

void ensure_parent_dir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw std::runtime_error("cannot create the folder '" + parent.string() + "' for '" + path + "': " + ec.message());
}

bool checkpoint_exists(const std::string& weights_path) {
  return file_exists(weights_path) && file_exists(train_state_path(weights_path));
}

void save_checkpoint(const std::string& path, const Model& model, const ModelState& state,
                     const TrainState& train) {
  const std::string step = std::to_string(train.step);
  ensure_parent_dir(path);
  std::vector<StTensor> ts;
  for (const std::string& name : optimizer_buffer_names(train.optimizer)) {
    auto it = train.optimizer_state.find(name);
    if (it == train.optimizer_state.end()) throw std::logic_error("save_checkpoint: no optimizer buffer '" + name + "'");
    ts.push_back(f32_tensor("optimizer." + name, it->second));
  }
  const std::map<std::string, std::string> tmeta = {
      {"format", kFormat},
      {"step", step},
      {"epoch", std::to_string(train.epoch)},
      {"batch", std::to_string(train.batch)},
      {"seed", std::to_string(train.seed)},
      {"optimizer", to_string(train.optimizer)},
      {"data", train.data},
      {"num_samples", std::to_string(train.num_samples)},
      {"global_batch", std::to_string(train.global_batch)},
      {"num_params", std::to_string(model.num_params())},
      {"loss_scale", float_text(train.loss_scale)},
      {"loss_scale_growth_tracker", std::to_string(train.loss_scale_growth_tracker)},
      {"skipped_steps", std::to_string(train.skipped_steps)},
      {"best_top1", std::to_string(train.best_top1)},
  };
  write_safetensors(train_state_path(path), ts, tmeta);
  write_weights(path, model, state, train.step);
}

void write_weights(const std::string& path, const Model& model, const ModelState& state, int64_t step,
                   const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "pt";
  meta["step"] = std::to_string(step);
  ensure_parent_dir(path);
  write_safetensors(path, model_state_to_tensors(model, state), meta);
}

ModelState load_weights(const std::string& path, const Model& model) {
  if (!file_exists(path)) throw std::runtime_error("checkpoint '" + path + "' does not exist");
  return model_state_from_tensors(model, read_safetensors(path), path);
}

void load_checkpoint(const std::string& path, const Model& model, ModelState* state, TrainState* train) {
  const std::string tpath = train_state_path(path);
  if (!file_exists(path)) throw std::runtime_error("checkpoint '" + path + "' does not exist");
  if (!file_exists(tpath)) {
    throw std::runtime_error("checkpoint '" + path + "' has no training state '" + tpath +
                             "' beside it (use --init to start from weights alone)");
  }
  std::map<std::string, std::string> wmeta, tmeta;
  const auto wts = read_safetensors(path, &wmeta);
  *state = model_state_from_tensors(model, wts, path);
  const auto tts = read_safetensors(tpath, &tmeta);
  if (meta(tmeta, "format", tpath) != kFormat) {
    throw std::runtime_error("training state '" + tpath + "' has format '" + tmeta["format"] + "', expected " + kFormat);
  }
  TrainState t;
  t.step = meta_int(tmeta, "step", tpath);
  t.epoch = meta_int(tmeta, "epoch", tpath);
  t.batch = meta_int(tmeta, "batch", tpath);
  t.seed = uint64_t(std::stoull(meta(tmeta, "seed", tpath)));
  const std::string& optimizer = meta(tmeta, "optimizer", tpath);
  if (optimizer == to_string(OptimizerKind::Adam)) {
    t.optimizer = OptimizerKind::Adam;
  } else if (optimizer == to_string(OptimizerKind::Sgd)) {
    t.optimizer = OptimizerKind::Sgd;
  } else {
    throw std::runtime_error("training state '" + tpath + "': unknown optimizer '" + optimizer + "'");
  }
  t.data = meta(tmeta, "data", tpath);
  t.num_samples = meta_int(tmeta, "num_samples", tpath);
  t.global_batch = meta_int(tmeta, "global_batch", tpath);
  if (tmeta.count("loss_scale")) {
    const std::string& v = tmeta["loss_scale"];
    char* end = nullptr;
    t.loss_scale = std::strtof(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(t.loss_scale >= 0.0f)) {
      throw std::runtime_error("training state '" + tpath + "': metadata 'loss_scale'='" + v + "' is not a number >= 0");
    }
    t.loss_scale_growth_tracker = meta_int(tmeta, "loss_scale_growth_tracker", tpath);
    t.skipped_steps = meta_int(tmeta, "skipped_steps", tpath);
    if (t.skipped_steps < 0 || t.skipped_steps > t.step) {
      throw std::runtime_error("training state '" + tpath + "': skipped_steps " + std::to_string(t.skipped_steps) +
                               " is not within 0.." + std::to_string(t.step));
    }
  }
  if (tmeta.count("best_top1")) {
    const std::string& v = tmeta["best_top1"];
    char* end = nullptr;
    t.best_top1 = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') {
      throw std::runtime_error("training state '" + tpath + "': metadata 'best_top1'='" + v + "' is not a number");
    }
  }
  if (wmeta.count("step") == 0 || wmeta["step"] != std::to_string(t.step)) {
    throw std::runtime_error("checkpoint '" + path + "' (step " + (wmeta.count("step") ? wmeta["step"] : "?") +
                             ") and its training state '" + tpath + "' (step " + std::to_string(t.step) +
                             ") do not belong together");
  }
  const size_t n = model.num_params();
  for (const std::string& name : optimizer_buffer_names(t.optimizer))
    t.optimizer_state[name] = f32_from(tts, "optimizer." + name, n, tpath);
  *train = std::move(t);
}

void check_resume_compatible(const std::string& path, const TrainState& saved, const TrainState& now) {
  auto differs = [&](const char* what, const std::string& was, const std::string& is) {
    if (was != is) {
      throw UsageError("cannot resume from '" + path + "': it was trained with " + what + " " + was +
                       ", this run has " + is + " (the data order would not continue)");
    }
  };
  differs("--optimizer", to_string(saved.optimizer), to_string(now.optimizer));
  differs("--seed", std::to_string(saved.seed), std::to_string(now.seed));
  differs("--data", saved.data, now.data);
  differs("--num-samples", std::to_string(saved.num_samples), std::to_string(now.num_samples));
  differs("a global batch (ranks x batch x accum-steps) of", std::to_string(saved.global_batch),
          std::to_string(now.global_batch));
}

}  // namespace worker
