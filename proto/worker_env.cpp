#include "proto/worker_env.h"

#include <cctype>
#include <csignal>
#include <cstring>

extern char** environ;

namespace proto {

namespace {

using namespace env;

std::optional<std::string> lookup(const EnvMap& e, const char* name) {
  auto it = e.find(name);
  if (it == e.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// A whole non-negative decimal int, or EnvError naming the variable.
int parse_count(const std::string& name, const std::string& value) {
  bool ok = !value.empty() && value.size() <= 9;
  for (char ch : value) ok = ok && ch >= '0' && ch <= '9';
  if (!ok)
    throw EnvError(name + "='" + value + "' is not a non-negative integer (set by the launcher; " +
                   "unset it to run a single process)");
  return std::stoi(value);
}

// The first of `names` that is set, as a count; the others, when set too, must agree (launch
// sets Paddle's and torchrun's names alike, so a disagreement is somebody else's leftover).
struct Count {
  std::optional<int> value;
  std::string name;  // the variable it came from
};
Count pick_count(const EnvMap& e, std::initializer_list<const char*> names) {
  Count c;
  for (const char* n : names) {
    auto v = lookup(e, n);
    if (!v) continue;
    const int x = parse_count(n, *v);
    if (!c.value) {
      c.value = x;
      c.name = n;
    } else if (*c.value != x) {
      throw EnvError(c.name + "=" + std::to_string(*c.value) + " but " + n + "=" + std::to_string(x) +
                     ": the launcher sets both alike; unset the one it did not set");
    }
  }
  return c;
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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// FLAGS_selected_gpus as paddle means it: one index among the visible devices.
int read_gpu_ordinal(const std::string& value, const std::optional<std::string>& visible) {
  if (value.find(',') != std::string::npos)
    throw EnvError(std::string(kSelectedGpus) + "='" + value + "': a worker drives exactly one GPU per process");
  const int index = parse_count(kSelectedGpus, value);
  if (visible) {
    const int n = count_cuda_visible(*visible);
    if (index >= n)
      throw EnvError(std::string(kSelectedGpus) + "=" + value + " is an index among the visible GPUs, but " +
                     kCudaVisibleDevices + "=" + *visible + " exposes " + std::to_string(n) +
                     (n > 0 ? " (indices 0-" + std::to_string(n - 1) + ")" : ""));
  }
  return index;
}

// "sigterm" -> "TERM": a signal's name as the parsers compare it.
std::string signal_base_name(std::string_view name) {
  std::string n;
  for (char c : name) n += char(std::toupper(static_cast<unsigned char>(c)));
  return n.rfind("SIG", 0) == 0 ? n.substr(3) : n;
}

// LAUNCH_CHECKPOINT_SIGNAL, or an EnvError saying why not.
int read_checkpoint_signal(const std::string& value) {
  if (auto sig = parse_checkpoint_signal(value)) return *sig;
  const std::string n = signal_base_name(value);
  for (const auto& [name, sig] : {std::pair<const char*, int>{"INT", SIGINT}, {"TERM", SIGTERM}, {"HUP", SIGHUP},
                                  {"QUIT", SIGQUIT}}) {
    if (n == name || n == std::to_string(sig)) {
      throw EnvError(std::string(kCheckpointSignal) + "='" + value + "' is SIG" + name +
                     ", a stop signal: it already makes the workers save (with --save) and exit; the checkpoint "
                     "signal must be USR1 or USR2");
    }
  }
  throw EnvError(std::string(kCheckpointSignal) + "='" + value + "': the checkpoint signal must be USR1 or USR2");
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string WorkerEnv::current_host() const {
  const size_t colon = current_endpoint.rfind(':');
  return colon == std::string::npos ? std::string() : current_endpoint.substr(0, colon);
}

std::string WorkerEnv::who() const { return "rank " + std::to_string(rank); }

WorkerEnv read_worker_env(const EnvMap& e) {
  WorkerEnv out;
  const Count rank = pick_count(e, {kPaddleTrainerId, kRank});
  const Count world = pick_count(e, {kPaddleTrainersNum, kWorldSize});
  if (lookup(e, kPaddleTrainerId) || lookup(e, kPaddleTrainersNum) || lookup(e, kPaddleTrainerEndpoints))
    out.contract = Contract::Paddle;
  else if (rank.value || world.value)
    out.contract = Contract::Torchrun;
  const char* rank_var = out.contract == Contract::Torchrun ? kRank : kPaddleTrainerId;
  const char* world_var = out.contract == Contract::Torchrun ? kWorldSize : kPaddleTrainersNum;

  if (auto eps = lookup(e, kPaddleTrainerEndpoints)) {
    out.endpoints = split(*eps, ',');
    for (const auto& ep : out.endpoints) check_endpoint(kPaddleTrainerEndpoints, ep);
  }
  if (world.value) {
    out.world = *world.value;
    if (out.world < 1) throw EnvError(world.name + "=0: a job has at least one process");
  } else if (!out.endpoints.empty()) {
    out.world = int(out.endpoints.size());
  }
  if (rank.value) {
    out.rank = *rank.value;
  } else if (out.world > 1) {
    throw EnvError(std::string(world_var) + "=" + std::to_string(out.world) + " but " + rank_var +
                   " is not set: run the worker through `launch`");
  }
  if (out.rank >= out.world)
    throw EnvError(std::string(rank.name) + "=" + std::to_string(out.rank) + " is not below " +
                   (world.value ? world.name : std::string(world_var)) + "=" + std::to_string(out.world));
  if (!out.endpoints.empty() && int(out.endpoints.size()) != out.world)
    throw EnvError(std::string(kPaddleTrainerEndpoints) + " lists " + std::to_string(out.endpoints.size()) +
                   " endpoints but " + (world.value ? world.name : std::string(world_var)) + "=" +
                   std::to_string(out.world));
  if (auto cur = lookup(e, kPaddleCurrentEndpoint)) {
    check_endpoint(kPaddleCurrentEndpoint, *cur);
    if (!out.endpoints.empty() && out.endpoints[size_t(out.rank)] != *cur)
      throw EnvError(std::string(kPaddleCurrentEndpoint) + "=" + *cur + " is not entry " + std::to_string(out.rank) +
                     " of " + kPaddleTrainerEndpoints + " (" + out.endpoints[size_t(out.rank)] + ")");
    out.current_endpoint = *cur;
  } else if (!out.endpoints.empty()) {
    out.current_endpoint = out.endpoints[size_t(out.rank)];
  }

  if (auto v = pick_count(e, {kPaddleLocalRank, kLocalRank, kPaddleRankInNode}).value) out.local_rank = *v;
  if (auto v = pick_count(e, {kPaddleLocalSize, kLocalWorldSize}).value) out.local_world = *v;

  // The framework's rendezvous point: PADDLE_MASTER, else torchrun's pair.
  const auto addr = lookup(e, kMasterAddr), port = lookup(e, kMasterPort);
  if (auto m = lookup(e, kPaddleMaster)) {
    check_endpoint(kPaddleMaster, *m);
    out.master = *m;
  } else if (addr && port) {
    out.master = *addr + ":" + *port;
    check_endpoint(std::string(kMasterAddr) + ":" + kMasterPort, *out.master);
  } else if (addr || port) {
    throw EnvError(std::string(addr ? kMasterAddr : kMasterPort) + " is set but " + (addr ? kMasterPort : kMasterAddr) +
                   " is not: torchrun sets both");
  }
  if (auto v = lookup(e, kTorchUseAgentStore)) out.agent_store = *v == "True" || *v == "true" || *v == "1";

  out.store_addr = lookup(e, kStoreAddr);
  out.store_token = lookup(e, kStoreToken);
  if (auto job = lookup(e, kPaddleJobId))
    out.job_id = *job;
  else if (auto run = lookup(e, kTorchRunId))
    out.job_id = *run;
  if (auto g = lookup(e, kSelectedGpus)) out.gpu_ordinal = read_gpu_ordinal(*g, lookup(e, kCudaVisibleDevices));
  if (auto v = pick_count(e, {kPaddleRestartCount, kTorchRestartCount}).value) out.restart_count = *v;
  if (auto sig = lookup(e, kCheckpointSignal)) out.checkpoint_signal = read_checkpoint_signal(*sig);
  out.error_file = lookup(e, kTorchErrorFile);
  out.log_dir = lookup(e, kPaddleLogDir);
  return out;
}

EnvMap process_env() { return env_from_environ(environ); }

EnvMap env_from_environ(char** envp) {
  EnvMap m;
  for (char** p = envp; p && *p; ++p) {
    const char* eq = std::strchr(*p, '=');
    if (!eq) continue;
    m.emplace(std::string(*p, static_cast<size_t>(eq - *p)), std::string(eq + 1));
  }
  return m;
}

int count_cuda_visible(std::string_view v) {
  if (trim(v).empty()) return 0;
  int n = 0;
  for (const std::string& part : split(std::string(v), ',')) {
    std::string_view el = trim(part);
    if (el.empty() || el[0] == '-') break;
    ++n;
  }
  return n;
}

std::optional<int> parse_checkpoint_signal(std::string_view name) {
  const std::string n = signal_base_name(name);
  if (n == "USR1" || n == std::to_string(SIGUSR1)) return SIGUSR1;
  if (n == "USR2" || n == std::to_string(SIGUSR2)) return SIGUSR2;
  return std::nullopt;
}

}  // namespace proto
