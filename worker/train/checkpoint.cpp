#include "worker/train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "worker/model/state_dict.h"
#include "worker/train/architecture.h"
#include "worker/train/optimizer.h"

namespace worker {

namespace {

constexpr const char* kFormat = "train_resnet.train_state.v1";
constexpr const char* kPending = ".pending";

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw std::runtime_error("cannot rename '" + from + "' to '" + to + "': " + std::strerror(errno));
  }
}

std::string step_of(const std::string& path) {
  std::map<std::string, std::string> meta;
  read_safetensors(path, &meta);
  return meta.count("step") ? meta["step"] : "";
}

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
    check_finite(v.data(), count, "training state '" + path + "'", name);
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

// Why `path` is not a checkpoint to load, and what is there instead: the folder's checkpoints
// (for --resume weights with their training state beside them, for --init any weights) when it
// names a folder or a missing file.
std::string not_a_checkpoint(const std::string& path, const std::string& what) {
  const bool need_state = what == "--resume";
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  std::vector<std::string> found;
  if (fs::is_directory(dir.empty() ? fs::path(".") : dir, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
      const std::string p = e.path().string();
      if (ends_with(p, ".safetensors") && !ends_with(p, ".train.safetensors") && file_exists(p) &&
          (!need_state || file_exists(train_state_path(p)))) {
        found.push_back(p);
      }
    }
  }
  std::sort(found.begin(), found.end());
  std::string there;
  for (size_t i = 0; i < found.size() && i < 5; ++i) there += (i ? ", " : "") + found[i];
  if (found.size() > 5) there += " and " + std::to_string(found.size() - 5) + " more";
  const std::string looked = what + " '" + path + "'";
  const std::string shape = need_state ? "a checkpoint is a weights file NAME.safetensors with its training state "
                                         "NAME.train.safetensors beside it"
                                       : "weights are a file NAME.safetensors";
  if (is_dir) {
    return looked + " is a folder, not a checkpoint (" + shape + "); " +
           (found.empty() ? "that folder holds none" : "in it: " + there + "; give one of them");
  }
  std::string msg = looked + (fs::exists(path, ec) ? " is not a regular file" : " does not exist");
  if (!dir.empty() && !fs::is_directory(dir, ec)) return msg + " (nor its folder '" + dir.string() + "')";
  const std::string folder = dir.empty() ? "the current folder" : "'" + dir.string() + "'";
  return msg + "; " + (found.empty() ? folder + " holds no checkpoint (" + shape + ")"
                                     : "checkpoints in " + folder + ": " + there);
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

std::string best_weights_path(const std::string& save) {
  const std::string ext = ".safetensors";
  if (ends_with(save, ext) && save.size() > ext.size()) return save.substr(0, save.size() - ext.size()) + ".best" + ext;
  return save + ".best";
}

void check_save_path(const std::string& path) {
  namespace fs = std::filesystem;
  for (const std::string& p : {path, train_state_path(path)}) {
    if (fs::is_directory(p)) {
      throw UsageError("--save '" + path + "': '" + p + "' is a directory; give a file name, e.g. " +
                       (fs::path(p) / "model.safetensors").string());
    }
  }
  try {
    ensure_parent_dir(path);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--save: ") + e.what());
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::string probe = (fs::path(dir) / ("." + fs::path(path).filename().string() + ".probe.XXXXXX")).string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw UsageError("--save '" + path + "': cannot write in '" + dir + "': " + std::strerror(errno) +
                     " (choose a writable place; checked before training, nothing was written)");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

std::vector<std::string> recover_interrupted_save(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> done;
  const std::string tpath = train_state_path(path);
  // A save killed between its renames: the training state is in place, the weights pending.
  if (file_exists(path + kPending) && file_exists(tpath) && !file_exists(tpath + kPending)) {
    std::string pending_step, state_step;
    try {
      pending_step = step_of(path + kPending);
      state_step = step_of(tpath);
    } catch (const std::exception&) {
      pending_step.clear();  // unreadable: not the other half of the committed state
    }
    if (!pending_step.empty() && pending_step == state_step) {
      rename_or_throw(path + kPending, path);
      done.push_back("Completed the interrupted save of " + path + " (step " + state_step + ")");
    }
  }
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  std::error_code ec;
  std::vector<std::string> prefixes;
  for (const std::string& p : {path, tpath, best_weights_path(path)}) {
    prefixes.push_back(fs::path(p).filename().string() + ".tmp.");
    prefixes.push_back(fs::path(p).filename().string() + kPending);
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (const std::string& prefix : prefixes) {
      if (name.compare(0, prefix.size(), prefix) == 0 && e.is_regular_file()) {
        fs::remove(e.path(), ec);
        done.push_back("Removed " + e.path().string() + ", left by an interrupted save");
        break;
      }
    }
  }
  return done;
}

std::string resume_source(const std::string& resume, const std::string& save) {
  if (resume != "auto") return resume;
  const bool weights = file_exists(save), state = file_exists(train_state_path(save));
  if (weights && state) return save;
  if (!weights && !state) return "";
  throw UsageError("--resume auto: '" + (weights ? save : train_state_path(save)) + "' exists but '" +
                   (weights ? train_state_path(save) : save) +
                   "' does not, so this is not a checkpoint a run can continue; move it away to start afresh" +
                   (weights ? ", or start from its weights with --init" : ""));
}

void save_checkpoint(const std::string& path, const Model& model, const ModelState& state,
                     const TrainState& train, const std::map<std::string, std::string>& extra) {
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
      {"world", std::to_string(train.world)},
      {"replicas", std::to_string(train.replicas)},
      {"segment_start", std::to_string(train.segment_start)},
      {"num_params", std::to_string(model.num_params())},
      {"loss_scale", float_text(train.loss_scale)},
      {"loss_scale_growth_tracker", std::to_string(train.loss_scale_growth_tracker)},
      {"skipped_steps", std::to_string(train.skipped_steps)},
      {"best_top1", std::to_string(train.best_top1)},
  };
  const std::string tpath = train_state_path(path);
  if (std::filesystem::is_directory(path) || std::filesystem::is_directory(tpath)) {
    throw std::runtime_error("cannot save to '" + path + "': it or '" + tpath + "' is a directory");
  }
  // Phase 1: both files complete under their pending names; phase 2: the two renames.
  write_safetensors(tpath + kPending, ts, tmeta);
  write_weights(path + kPending, model, state, train.step, extra);
  rename_or_throw(tpath + kPending, tpath);  // the commit point
  rename_or_throw(path + kPending, path);
}

void write_weights(const std::string& path, const Model& model, const ModelState& state, int64_t step,
                   const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "pt";
  meta["step"] = std::to_string(step);
  for (const auto& [key, value] : architecture_metadata(model.config())) meta[key] = value;  // --eval-only reads it
  ensure_parent_dir(path);
  write_safetensors(path, model_state_to_tensors(model, state), meta);
}

ModelState load_weights(const std::string& path, const Model& model) {
  if (!file_exists(path)) throw std::runtime_error(not_a_checkpoint(path, "--init"));
  return model_state_from_tensors(model, read_safetensors(path), path);
}

void load_checkpoint(const std::string& path, const Model& model, ModelState* state, TrainState* train) {
  const std::string tpath = train_state_path(path);
  if (!file_exists(path)) throw std::runtime_error(not_a_checkpoint(path, "--resume"));
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
  // Recorded since issue 21 (a resume at another world size); older checkpoints continue as before.
  if (tmeta.count("replicas") && tmeta["replicas"] != "0") {
    t.world = int(meta_int(tmeta, "world", tpath));
    t.replicas = meta_int(tmeta, "replicas", tpath);
    t.segment_start = meta_int(tmeta, "segment_start", tpath);
    if (t.world < 1 || t.replicas < t.world || t.segment_start < 0 || t.segment_start > t.num_samples) {
      throw std::runtime_error("training state '" + tpath + "': world " + std::to_string(t.world) + ", replicas " +
                               std::to_string(t.replicas) + ", segment_start " + std::to_string(t.segment_start) +
                               " are not a layout of " + std::to_string(t.num_samples) + " samples");
    }
  }
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
  auto differs = [&](const char* what, const std::string& was, const std::string& is, const char* why) {
    if (was != is) {
      throw UsageError("cannot resume from '" + path + "': it was trained with " + what + " " + was +
                       ", this run has " + is + " (" + why + ")");
    }
  };
  const std::string state_names = [&] {
    std::string s;
    for (const std::string& n : optimizer_buffer_names(saved.optimizer)) s += (s.empty() ? "" : " and ") + n;
    return s;
  }();
  differs("--optimizer", to_string(saved.optimizer), to_string(now.optimizer),
          ("its optimizer state (" + state_names + ") does not fit another optimizer; --init starts a new run "
           "from its weights").c_str());
  const char* order = "the data order would not continue";
  differs("--seed", std::to_string(saved.seed), std::to_string(now.seed), order);
  differs("--data", saved.data, now.data, order);
  differs("--num-samples", std::to_string(saved.num_samples), std::to_string(now.num_samples), order);
  // Another global batch (world size, --batch-size, --accum-steps) continues the epoch from its
  // sample position (sampler.h); a checkpoint from before that was recorded cannot say where.
  if (saved.replicas == 0) {
    differs("a global batch (ranks x batch x accum-steps) of", std::to_string(saved.global_batch),
            std::to_string(now.global_batch), "a checkpoint of an older train_resnet, without the layout it was saved in, resumes at its own global batch only");
  }
}

}  // namespace worker
