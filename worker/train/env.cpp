#include "worker/train/env.h"

#include <csignal>
#include <cerrno>
#include <climits>
#include <cstdlib>

extern char** environ;

namespace worker {

namespace {

std::optional<std::string> lookup(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// A whole non-negative decimal int, or EnvError naming the variable.
int parse_count(const std::string& name, const std::string& value) {
  bool ok = !value.empty() && value.size() <= 9;
  for (char ch : value) ok = ok && ch >= '0' && ch <= '9';
  if (!ok) {
    throw EnvError(name + "='" + value + "' is not a non-negative integer (set by the launcher; " +
                   "unset it to run a single process)");
  }
  return std::stoi(value);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

void check_endpoint(const std::string& var, const std::string& ep) {
  const size_t colon = ep.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < ep.size();
  if (ok) {
    const std::string port = ep.substr(colon + 1);
    for (char ch : port) ok = ok && ch >= '0' && ch <= '9';
    ok = ok && port.size() <= 5 && std::stoi(port) <= 65535;
  }
  if (!ok) throw EnvError(var + ": '" + ep + "' is not a host:port endpoint");
}

}  // namespace

std::string WorkerEnv::current_host() const {
  const size_t colon = current_endpoint.rfind(':');
  return colon == std::string::npos ? std::string() : current_endpoint.substr(0, colon);
}

WorkerEnv read_worker_env(const EnvMap& env) {
  WorkerEnv out;
  const auto rank = lookup(env, "PADDLE_TRAINER_ID");
  const auto world = lookup(env, "PADDLE_TRAINERS_NUM");
  const auto endpoints = lookup(env, "PADDLE_TRAINER_ENDPOINTS");

  if (endpoints) {
    out.endpoints = split(*endpoints, ',');
    for (const auto& ep : out.endpoints) check_endpoint("PADDLE_TRAINER_ENDPOINTS", ep);
  }
  if (world) {
    out.world = parse_count("PADDLE_TRAINERS_NUM", *world);
    if (out.world < 1) throw EnvError("PADDLE_TRAINERS_NUM=0: a job has at least one process");
  } else if (!out.endpoints.empty()) {
    out.world = int(out.endpoints.size());
  }
  if (rank) {
    out.rank = parse_count("PADDLE_TRAINER_ID", *rank);
  } else if (out.world > 1) {
    throw EnvError("PADDLE_TRAINERS_NUM=" + std::to_string(out.world) +
                   " but PADDLE_TRAINER_ID is not set: run the worker through `launch`");
  }
  if (out.rank >= out.world) {
    throw EnvError("PADDLE_TRAINER_ID=" + std::to_string(out.rank) + " is not below PADDLE_TRAINERS_NUM=" +
                   std::to_string(out.world));
  }
  if (!out.endpoints.empty() && int(out.endpoints.size()) != out.world) {
    throw EnvError("PADDLE_TRAINER_ENDPOINTS lists " + std::to_string(out.endpoints.size()) +
                   " endpoints but PADDLE_TRAINERS_NUM=" + std::to_string(out.world));
  }
  if (auto cur = lookup(env, "PADDLE_CURRENT_ENDPOINT")) {
    check_endpoint("PADDLE_CURRENT_ENDPOINT", *cur);
    if (!out.endpoints.empty() && out.endpoints[size_t(out.rank)] != *cur) {
      throw EnvError("PADDLE_CURRENT_ENDPOINT=" + *cur + " is not entry " + std::to_string(out.rank) +
                     " of PADDLE_TRAINER_ENDPOINTS (" + out.endpoints[size_t(out.rank)] + ")");
    }
    out.current_endpoint = *cur;
  } else if (!out.endpoints.empty()) {
    out.current_endpoint = out.endpoints[size_t(out.rank)];
  }
  for (const char* name : {"PADDLE_LOCAL_RANK", "LOCAL_RANK", "PADDLE_RANK_IN_NODE"}) {
    if (auto v = lookup(env, name)) {
      out.local_rank = parse_count(name, *v);
      break;
    }
  }
  out.store_addr = lookup(env, "LAUNCH_STORE_ADDR");
  out.selected_gpus = lookup(env, "FLAGS_selected_gpus");
  out.cuda_visible_devices = lookup(env, "CUDA_VISIBLE_DEVICES");
  if (auto job = lookup(env, "PADDLE_JOB_ID")) out.job_id = *job;
  for (const char* name : {"PADDLE_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    if (auto v = lookup(env, name)) {
      out.restart_count = parse_count(name, *v);
      break;
    }
  }
  if (auto sig = lookup(env, "LAUNCH_CHECKPOINT_SIGNAL")) {
    out.checkpoint_signal = parse_signal("LAUNCH_CHECKPOINT_SIGNAL", *sig);
  }
  return out;
}

int parse_signal(const std::string& var, const std::string& value) {
  // The signals a scheduler sends ahead of a time limit (sbatch --signal); KILL and STOP cannot
  // be caught, so they are refused.
  static const std::pair<const char*, int> names[] = {
      {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
      {"TERM", SIGTERM}, {"ALRM", SIGALRM}, {"CONT", SIGCONT}, {"URG", SIGURG}, {"XCPU", SIGXCPU},
      {"PWR", SIGPWR}};
  std::string name = value;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [n, sig] : names) {
    if (name == n) return sig;
  }
  bool digits = !value.empty() && value.size() <= 2;
  for (char ch : value) digits = digits && ch >= '0' && ch <= '9';
  if (digits) {
    const int sig = std::stoi(value);
    if (sig > 0 && sig < NSIG && sig != SIGKILL && sig != SIGSTOP) return sig;
  }
  throw EnvError(var + "='" + value + "' is not a signal that can be caught (use e.g. USR1, USR2 or TERM)");
}

EnvMap process_env() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

int gpu_ordinal(const std::string& selected_gpus, const std::optional<std::string>& cuda_visible) {
  const auto ids = split(selected_gpus, ',');
  if (ids.size() != 1) {
    throw EnvError("FLAGS_selected_gpus='" + selected_gpus +
                   "': train_resnet drives exactly one GPU per process");
  }
  const int id = parse_count("FLAGS_selected_gpus", ids[0]);
  if (!cuda_visible) return id;
  const auto visible = split(*cuda_visible, ',');
  for (size_t i = 0; i < visible.size(); ++i) {
    if (visible[i] == ids[0]) return int(i);
  }
  if (size_t(id) < visible.size()) return id;
  throw EnvError("FLAGS_selected_gpus=" + ids[0] + " is not among CUDA_VISIBLE_DEVICES=" + *cuda_visible);
}

}  // namespace worker
