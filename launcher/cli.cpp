#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <functional>

#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/seconds.h"

#ifndef LAUNCH_VERSION
#define LAUNCH_VERSION "unknown"
#endif

namespace launch {

namespace {

// CLI11 messages can span lines (e.g. "Run with --help"); the contract is one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// "1", "true", "yes", "on" / "0", "false", "no", "off", as Python's strtobool (torchrun, paddle).
bool truthy(const std::string& var, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "y" || v == "on" || v == "t") return true;
  if (v == "0" || v == "false" || v == "no" || v == "n" || v == "off" || v == "f") return false;
  throw UsageError(var + "='" + value + "' is not a boolean (use 1 or 0)");
}

int to_int(const std::string& what, const std::string& value, int lo, int hi) {
  if (!all_digits(value) || std::stoi(value) < lo || std::stoi(value) > hi)
    throw UsageError(what + " '" + value + "' must be a whole number from " + std::to_string(lo) + " to " +
                     std::to_string(hi));
  return std::stoi(value);
}

const char* const kUsage =
    "Usage: launch [OPTIONS] PROGRAM [ARGS...]\n"
    "       launch kv COMMAND [ARGS...]      the job's key-value store, from a worker (launch kv --help)\n";

const char* const kExamples =
    "Examples:\n"
    "  launch --gpus 0,1 train_resnet --depth 50           one worker per listed GPU\n"
    "  launch --devices cpu --nproc_per_node 4 train.py    4 CPU workers of a Python program\n"
    "  launch --nproc-per-node 2 -m pkg.train --lr 0.1     torchrun's spellings: python -m pkg.train\n"
    "  launch --nnodes 2 --master 10.0.0.1:29400 --token-file ~/.launch_token train_resnet\n"
    "  launch --dry-run --gpus 0,1 train.py                print each rank's command and variables\n"
    "PROGRAM is looked up in PATH, then beside launch; a *.py program runs under --python, PYTHON_EXEC\n"
    "or the first python3 in PATH. Everything after PROGRAM belongs to it (launch -- -prog for a name\n"
    "starting with '-'). Paddle's and torchrun's variables for every rank: docs/environment.md.\n";

// Everything the command line says, as given (strings where a spelling needs checking first).
struct Raw {
  std::string gpus, devices, nproc, nnodes = "1", master, token_file, job_id = "default", log_dir = "log",
      log_level = "info", host = "127.0.0.1", stream = "rank0", ckpt, summary, master_addr, rdzv_endpoint,
      rdzv_id, rdzv_backend, redirects, tee, ranks_filter, python, restart_backoff = "1:60";
  int rank = -1, max_restart = 0, start_port = 0, master_port = 0;
  double elastic_timeout = 600, grace = 10;
  bool log_overwrite = false, dry_run = false, standalone = false, module = false, no_python = false,
       run_path = false, version = false, requeue = false;
  std::map<std::string, bool> given;  // by the option's first name
};

// One PET_<NAME> variable of torchrun: it fills the option when the command line did not give it.
struct PetVar {
  const char* option;  // the spelling we synthesise ("--nproc-per-node")
  const char* var;
  bool flag;
};
constexpr PetVar kPetVars[] = {
    {"--nproc-per-node", "PET_NPROC_PER_NODE", false}, {"--nnodes", "PET_NNODES", false},
    {"--node-rank", "PET_NODE_RANK", false},           {"--master-addr", "PET_MASTER_ADDR", false},
    {"--master-port", "PET_MASTER_PORT", false},       {"--rdzv-endpoint", "PET_RDZV_ENDPOINT", false},
    {"--rdzv-id", "PET_RDZV_ID", false},               {"--rdzv-backend", "PET_RDZV_BACKEND", false},
    {"--max-restarts", "PET_MAX_RESTARTS", false},     {"--log-dir", "PET_LOG_DIR", false},
    {"--redirects", "PET_REDIRECTS", false},           {"--tee", "PET_TEE", false},
    {"--local-ranks-filter", "PET_LOCAL_RANKS_FILTER", false},
    {"--standalone", "PET_STANDALONE", true},          {"--module", "PET_MODULE", true},
    {"--no-python", "PET_NO_PYTHON", true},            {"--run-path", "PET_RUN_PATH", true},
};

struct Parsed {
  Raw raw;
  std::vector<std::string> remaining;
  std::string help;
  bool help_asked = false;
};

Parsed parse_args(const std::vector<std::string>& args) {
  Parsed p;
  Raw& r = p.raw;
  CLI::App app{"Start one worker process per device, supervise them, tear them all down on the first failure.",
               "launch"};
  app.prefix_command();  // everything from PROGRAM on belongs to the program, options included
  std::map<std::string, CLI::Option*> opts;
  auto opt = [&](const std::string& names, auto& target, const std::string& help) {
    CLI::Option* o = app.add_option(names, target, help);
    opts[names.substr(0, names.find(','))] = o;
    return o;
  };
  auto flag = [&](const std::string& names, bool& target, const std::string& help) {
    CLI::Option* o = app.add_flag(names, target, help);
    opts[names.substr(0, names.find(','))] = o;
    return o;
  };
  // --- devices and processes
  opt("--gpus", r.gpus, "GPU ids, indices among the visible GPUs, comma-separated (e.g. 0,1,3)");
  opt("--devices", r.devices, "device ids like --gpus, or 'cpu' (with --nproc_per_node)");
  opt("--nproc_per_node,--nproc-per-node", r.nproc, "processes on this node: N, or gpu, cpu, auto (torchrun)");
  // --- nodes
  opt("--nnodes", r.nnodes, "number of nodes (more than 1: with --master)");
  opt("--master", r.master, "HOST:PORT of the store of a multi-node job, served by node 0");
  opt("--rank,--node_rank,--node-rank", r.rank, "this node's rank, 0..nnodes-1; -1: in order of arrival")
      ->capture_default_str();
  opt("--token-file,--token_file", r.token_file, "file holding the multi-node job's token (mode 600); else LAUNCH_STORE_TOKEN");
  opt("--elastic_timeout,--elastic-timeout", r.elastic_timeout,
      "seconds the nodes (or Slurm tasks) wait for each other to arrive")->capture_default_str();
  opt("--host", r.host, "IPv4 address of this node for endpoints and the store")->capture_default_str();
  // --- torchrun's rendezvous spellings
  opt("--master_addr,--master-addr", r.master_addr, "torchrun: node 0's address (with --nnodes > 1: --master ADDR:PORT)");
  opt("--master_port,--master-port", r.master_port, "torchrun: with --nnodes > 1 the store's port, else MASTER_PORT");
  flag("--standalone", r.standalone, "torchrun: a single-node job (what launch does without --nnodes)");
  opt("--rdzv_endpoint,--rdzv-endpoint", r.rdzv_endpoint, "torchrun: HOST:PORT, as --master");
  opt("--rdzv_id,--rdzv-id", r.rdzv_id, "torchrun: the job id, as --job_id");
  opt("--rdzv_backend,--rdzv-backend", r.rdzv_backend, "torchrun: c10d or static (both: launch's own store)");
  // --- the job
  opt("--job_id", r.job_id, "job name, exported as PADDLE_JOB_ID and TORCHELASTIC_RUN_ID")->capture_default_str();
  opt("--log_dir,--log-dir", r.log_dir, "directory of workerlog.N files")->capture_default_str();
  opt("--log_level", r.log_level, "launcher log level: debug, info, warning, error")->capture_default_str();
  flag("--log_overwrite", r.log_overwrite, "truncate workerlog.N instead of appending");
  opt("--max_restart,--max-restarts,--max_restarts", r.max_restart,
      "after a worker failure, stop all workers and start them all again, up to N times")->capture_default_str();
  opt("--restart-backoff,--restart_backoff", r.restart_backoff,
      "INITIAL[:MAX] seconds to wait before a restart, doubling after each one up to MAX; 0: at once")
      ->capture_default_str();
  opt("--start_port", r.start_port, "first port of the trainer endpoints (default: free ports)");
  flag("--dry-run,--dry_run", r.dry_run, "print each rank's command and environment, start nothing");
  opt("--stream", r.stream, "console output: rank0, all ([rank N] prefix), none")->capture_default_str();
  opt("--redirects", r.redirects, "torchrun: 3 = --stream none (logs always hold stdout and stderr)");
  opt("--tee", r.tee, "torchrun: 3 = --stream all");
  opt("--local_ranks_filter,--local-ranks-filter", r.ranks_filter, "torchrun: 0 = --stream rank0");
  opt("--grace", r.grace, "seconds between SIGTERM and SIGKILL at teardown")->capture_default_str();
  opt("--checkpoint-signal,--checkpoint_signal", r.ckpt,
      "USR1 or USR2: forwarded to every worker, which saves a checkpoint and goes on (e.g. with sbatch "
      "--signal=USR2@120)");
  flag("--requeue", r.requeue,
       "Slurm: after the stop signal of a time limit or preemption and the workers' checkpoint, requeue the "
       "batch job (scontrol requeue); not after scancel");
  opt("--summary", r.summary, "write a JSON summary of the job to FILE");
  // --- the program
  opt("--python", r.python, "Python interpreter of *.py, -m and --run-path programs (else PYTHON_EXEC, else python3 in PATH)");
  flag("-m,--module", r.module, "PROGRAM is a Python module: python -m PROGRAM ARGS (torchrun)");
  flag("--no-python,--no_python", r.no_python, "execute PROGRAM as it is, even a *.py (torchrun)");
  flag("--run-path,--run_path", r.run_path, "PROGRAM is a Python script whatever its name (torchrun)");
  flag("--version", r.version, "print the version and exit");

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    p.help_asked = true;
    std::string h = app.help();
    const size_t usage = h.find("Usage:");
    const size_t eol = usage == std::string::npos ? std::string::npos : h.find('\n', usage);
    if (eol != std::string::npos) h.replace(usage, eol + 1 - usage, kUsage);
    p.help = h + "\n" + kExamples;
    return p;
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + " (see launch --help)");
  }
  for (const auto& [name, o] : opts) r.given[name] = o->count() > 0;
  p.remaining = app.remaining();
  return p;
}

// --- torchrun's spellings onto ours -------------------------------------------------------------

void apply_nproc(const std::string& v, Options& o) {
  const std::string w = lower(v);
  if (w == "gpu" || w == "cpu" || w == "auto") {
    o.nproc_word = w;
    return;
  }
  if (!all_digits(v) || std::stoi(v) < 1 || std::stoi(v) > 4096)
    throw UsageError("--nproc_per_node '" + v + "' is not a number of processes: give N from 1 to 4096, or "
                     "gpu (one per visible GPU), cpu (one per CPU core), auto (gpu if any, else cpu)");
  o.nproc_per_node = std::stoi(v);
}

int parse_nnodes(const std::string& v) {
  const size_t colon = v.find(':');
  if (colon == std::string::npos) return to_int("--nnodes", v, 1, 65536);
  const int lo = to_int("--nnodes", v.substr(0, colon), 1, 65536);
  const int hi = to_int("--nnodes", v.substr(colon + 1), 1, 65536);
  if (lo != hi)
    throw UsageError("--nnodes " + v + ": launch runs a fixed number of nodes (no elastic membership); give "
                     "--nnodes N");
  return lo;
}

StreamMode parse_stream(const std::string& v) {
  if (v == "rank0") return StreamMode::Rank0;
  if (v == "all") return StreamMode::All;
  if (v == "none") return StreamMode::None;
  throw UsageError("--stream '" + v + "' must be rank0, all or none");
}

// torchrun's --redirects / --tee / --local-ranks-filter onto --stream. launch keeps stdout and
// stderr together in workerlog.N, so only the "both" forms (3) map; 0 changes nothing.
void apply_console(const Raw& r, Options& o) {
  auto std_code = [](const char* opt, const std::string& v, const char* meaning) {
    if (v == "0" || v == "3") return v == "3";
    throw UsageError(std::string(opt) + " " + v + ": launch does not split stdout from stderr (both go to "
                     "workerlog.N and the console together); use " + opt + " 3 (" + meaning + ") or --stream");
  };
  const bool given_stream = r.given.at("--stream");
  if (!r.redirects.empty() && std_code("--redirects", r.redirects, "= --stream none")) o.stream = StreamMode::None;
  if (!r.tee.empty() && std_code("--tee", r.tee, "= --stream all")) o.stream = StreamMode::All;
  if (!r.ranks_filter.empty()) {
    if (r.ranks_filter != "0")
      throw UsageError("--local-ranks-filter " + r.ranks_filter + ": launch shows rank 0 (--stream rank0), every "
                       "rank (--stream all) or none (--stream none)");
    o.stream = StreamMode::Rank0;
  }
  if (given_stream && (!r.redirects.empty() || !r.tee.empty() || !r.ranks_filter.empty()))
    throw UsageError("give either --stream or torchrun's --redirects/--tee/--local-ranks-filter, not both");
}

void apply_rendezvous(const Raw& r, Options& o) {
  const bool addr = r.given.at("--master_addr"), port = r.given.at("--master_port");
  const bool endpoint = r.given.at("--rdzv_endpoint");
  if (r.given.at("--rdzv_backend") && r.rdzv_backend != "c10d" && r.rdzv_backend != "static")
    throw UsageError("--rdzv-backend " + r.rdzv_backend + ": launch's rendezvous is its own store; use c10d or "
                     "static (or leave it out)");
  if (r.given.at("--rdzv_id")) {
    if (r.given.at("--job_id") && r.job_id != r.rdzv_id)
      throw UsageError("--rdzv-id " + r.rdzv_id + " and --job_id " + r.job_id + " disagree: give one of them");
    o.job_id = r.rdzv_id;
    o.job_id_given = true;
  }
  if (r.standalone && o.nnodes > 1)
    throw UsageError("--standalone is a single-node job, but --nnodes is " + std::to_string(o.nnodes));
  if (port && (r.master_port < 1 || r.master_port > 65535))
    throw UsageError("--master-port " + std::to_string(r.master_port) + " is not a port (1-65535)");
  const int sources = int(r.given.at("--master")) + int(addr || port) + int(endpoint);
  if (sources > 1)
    throw UsageError("give the rendezvous address once: --master, --master-addr/--master-port or --rdzv-endpoint");
  if (o.nnodes > 1) {
    // torchrun's defaults: master port 29500, rendezvous endpoint port 29400.
    if (addr || port) o.master = (addr ? r.master_addr : "127.0.0.1") + ":" + std::to_string(port ? r.master_port : 29500);
    if (endpoint)
      o.master = r.rdzv_endpoint.find(':') == std::string::npos ? r.rdzv_endpoint + ":29400" : r.rdzv_endpoint;
  } else {
    // One node: nobody to meet; torchrun's master is what the program's rank 0 binds.
    if (addr) o.framework_addr = r.master_addr;
    if (port) o.framework_port = r.master_port;
  }
}

void apply_program(const Raw& r, Options& o) {
  if (int(r.module) + int(r.no_python) + int(r.run_path) > 1)
    throw UsageError("give at most one of -m/--module, --no-python and --run-path");
  if (r.module) o.program_kind = ProgramKind::Module;
  if (r.no_python) o.program_kind = ProgramKind::NoPython;
  if (r.run_path) o.program_kind = ProgramKind::PythonScript;
  if (r.given.at("--python")) {
    if (r.python.empty()) throw UsageError("--python is empty; give an interpreter such as /usr/bin/python3");
    if (r.no_python) throw UsageError("--python and --no-python contradict each other");
    o.python = r.python;
  }
}

// --- paddle's environment overrides -------------------------------------------------------------

// paddle launch (context/args_envs.py) lets these variables override the command line, and says
// so; launch does the same. Paddle's other variables name modes launch does not have.
struct PaddleVar {
  const char* var;
  const char* option;
  std::function<void(Options&, const std::string&)> apply;
};

const std::vector<PaddleVar>& paddle_vars() {
  static const std::vector<PaddleVar> v = {
      {"POD_IP", "--host", [](Options& o, const std::string& s) { o.host = s, o.host_given = true; }},
      {proto::env::kPaddleMaster, "--master", [](Options& o, const std::string& s) { o.master = s; }},
      {"PADDLE_DEVICES", "--devices", [](Options& o, const std::string& s) { o.devices = s, o.gpus.reset(); }},
      {proto::env::kPaddleNnodes, "--nnodes", [](Options& o, const std::string& s) { o.nnodes = parse_nnodes(s), o.nnodes_given = true; }},
      {"PADDLE_LOG_LEVEL", "--log_level", [](Options& o, const std::string& s) { o.log_level = lower(s); }},
      {"PADDLE_LOG_OVERWRITE", "--log_overwrite",
       [](Options& o, const std::string& s) { o.log_overwrite = truthy("PADDLE_LOG_OVERWRITE", s); }},
      {"PADDLE_NPROC_PER_NODE", "--nproc_per_node", [](Options& o, const std::string& s) { apply_nproc(s, o); }},
      {proto::env::kPaddleJobId, "--job_id", [](Options& o, const std::string& s) { o.job_id = s, o.job_id_given = true; }},
      {"PADDLE_RANK", "--rank", [](Options& o, const std::string& s) { o.rank = to_int("PADDLE_RANK", s, 0, 65535); }},
      {proto::env::kPaddleLogDir, "--log_dir", [](Options& o, const std::string& s) { o.log_dir = s, o.log_dir_given = true; }},
      {"PADDLE_MAX_RESTART", "--max_restart",
       [](Options& o, const std::string& s) { o.max_restart = to_int("PADDLE_MAX_RESTART", s, 0, 1000000); }},
      {"PADDLE_ELASTIC_TIMEOUT", "--elastic_timeout",
       [](Options& o, const std::string& s) { o.elastic_timeout_s = to_int("PADDLE_ELASTIC_TIMEOUT", s, 1, 86400); }},
      {"PADDLE_START_PORT", "--start_port",
       [](Options& o, const std::string& s) { o.start_port = to_int("PADDLE_START_PORT", s, 1, 65535); }},
  };
  return v;
}

// Paddle's variables for what launch does not do: refused unless at their default.
constexpr const char* kPaddleUnsupported[] = {"PADDLE_SERVER_NUM", "PADDLE_TRAINER_NUM", "PADDLE_SERVERS_ENDPOINTS",
                                              "PADDLE_TRAINERS_ENDPOINTS", "PADDLE_IPS", "PADDLE_AUTO_PARALLEL_CONFIG"};

void apply_paddle_env(const proto::EnvMap& env, Options& o, std::vector<std::string>& warnings) {
  auto get = [&](const char* name) -> const std::string* {
    auto it = env.find(name);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
  };
  for (const auto& pv : paddle_vars()) {
    if (const std::string* v = get(pv.var)) {
      pv.apply(o, *v);
      warnings.push_back(std::string(pv.option) + " = " + *v + " from " + pv.var +
                         " (paddle launch's environment overrides its options; unset it to use the option)");
    }
  }
  if (const std::string* v = get("PADDLE_RUN_MODE"); v && lower(*v) != "collective")
    throw UsageError("PADDLE_RUN_MODE=" + *v + ": launch runs collective jobs only; unset it");
  if (const std::string* v = get("PADDLE_AUTO_CLUSTER"); v && truthy("PADDLE_AUTO_CLUSTER", *v))
    throw UsageError("PADDLE_AUTO_CLUSTER=" + *v + ": launch has no auto-parallel cluster tuning; unset it");
  if (const std::string* v = get("PADDLE_ELASTIC_LEVEL"); v && *v != "-1" && *v != "0")
    throw UsageError("PADDLE_ELASTIC_LEVEL=" + *v + ": launch has no elastic membership (restarts: "
                     "--max_restart); unset it");
  for (const char* name : kPaddleUnsupported)
    if (const std::string* v = get(name))
      throw UsageError(std::string(name) + "=" + *v + " belongs to paddle's parameter-server or legacy modes, "
                       "which launch does not run (it runs collective jobs); unset it");
}

}  // namespace

// ---------------------------------------------------------------------------------------------

CliResult parse_cli(int argc, const char* const* argv, const proto::EnvMap& env) {
  std::vector<std::string> args(argv + 1, argv + argc);
  Parsed p = parse_args(args);
  if (p.help_asked) return {std::nullopt, p.help, {}, {}};
  if (p.raw.version) return {std::nullopt, std::string("launch ") + LAUNCH_VERSION + "\n", {}, {}};

  // torchrun's PET_<OPTION> fill what the command line did not give: parse again with them first.
  std::vector<std::string> from_env;
  static const std::map<std::string, std::string> first_name = {
      {"--nproc-per-node", "--nproc_per_node"}, {"--node-rank", "--rank"},     {"--master-addr", "--master_addr"},
      {"--master-port", "--master_port"},       {"--rdzv-endpoint", "--rdzv_endpoint"},
      {"--rdzv-id", "--rdzv_id"},               {"--rdzv-backend", "--rdzv_backend"},
      {"--max-restarts", "--max_restart"},      {"--log-dir", "--log_dir"},
      {"--local-ranks-filter", "--local_ranks_filter"}, {"--module", "-m"}, {"--no-python", "--no-python"},
      {"--run-path", "--run-path"},             {"--nnodes", "--nnodes"},      {"--redirects", "--redirects"},
      {"--tee", "--tee"},                       {"--standalone", "--standalone"}};
  for (const PetVar& pv : kPetVars) {
    auto it = env.find(pv.var);
    if (it == env.end() || it->second.empty() || p.raw.given.at(first_name.at(pv.option))) continue;
    if (pv.flag) {
      if (truthy(pv.var, it->second)) from_env.push_back(pv.option);
    } else {
      from_env.push_back(pv.option);
      from_env.push_back(it->second);
    }
  }
  if (!from_env.empty()) {
    from_env.insert(from_env.end(), args.begin(), args.end());
    p = parse_args(from_env);
  }
  const Raw& r = p.raw;

  Options o;
  o.gpus = r.given.at("--gpus") ? std::optional<std::string>(r.gpus) : std::nullopt;
  o.devices = r.given.at("--devices") ? std::optional<std::string>(r.devices) : std::nullopt;
  if (r.given.at("--nproc_per_node")) apply_nproc(r.nproc, o);
  o.nnodes = parse_nnodes(r.nnodes);
  o.nnodes_given = r.given.at("--nnodes");
  if (r.given.at("--master")) o.master = r.master;
  o.rank = r.rank;
  if (r.given.at("--token-file")) o.token_file = r.token_file;
  o.elastic_timeout_s = r.elastic_timeout;
  o.job_id = r.job_id;
  o.job_id_given = r.given.at("--job_id");
  o.log_dir = r.log_dir;
  o.log_dir_given = r.given.at("--log_dir");
  o.log_level = lower(r.log_level);
  o.log_overwrite = r.log_overwrite;
  o.host = r.host;
  o.host_given = r.given.at("--host");
  o.max_restart = r.max_restart;
  o.restart_backoff = parse_restart_backoff(r.restart_backoff);
  if (r.given.at("--start_port")) o.start_port = r.start_port;
  o.dry_run = r.dry_run;
  o.stream = parse_stream(r.stream);
  o.grace_s = r.grace;
  o.grace_given = r.given.at("--grace");
  if (r.given.at("--summary")) o.summary = r.summary;
  o.requeue = r.requeue;
  if (r.given.at("--checkpoint-signal")) {
    o.checkpoint_signal = parse_checkpoint_signal(r.ckpt);
    if (!o.checkpoint_signal)
      throw UsageError("--checkpoint-signal '" + r.ckpt +
                       "': use USR1 or USR2 (SIGTERM, SIGINT, SIGHUP and SIGQUIT already stop the job)");
  }
  apply_console(r, o);
  apply_program(r, o);

  CliResult result;
  apply_paddle_env(env, o, result.warnings);
  apply_rendezvous(r, o);

  // --- what holds whatever the spelling
  if (o.log_level == "warn") o.log_level = "warning";
  if (o.log_level != "debug" && o.log_level != "info" && o.log_level != "warning" && o.log_level != "error")
    throw UsageError("--log_level '" + o.log_level + "' must be debug, info, warning or error");
  if (o.rank < -1 || o.rank > 65535) throw UsageError("--rank " + std::to_string(o.rank) + " must be -1..65535");
  if (!(o.elastic_timeout_s >= 1 && o.elastic_timeout_s <= 86400))
    throw UsageError("--elastic_timeout " + seconds_text(o.elastic_timeout_s) + " must be 1 to 86400 seconds");
  if (!(o.grace_s >= 0 && o.grace_s <= 86400))
    throw UsageError("--grace " + seconds_text(o.grace_s) + " must be 0 to 86400 seconds");
  if (o.max_restart < 0 || o.max_restart > 1000000)
    throw UsageError("--max_restart " + std::to_string(o.max_restart) + " must be 0 to 1000000");
  if (o.start_port && (*o.start_port < 1 || *o.start_port > 65535))
    throw UsageError("--start_port " + std::to_string(*o.start_port) + " is not a port (1-65535)");

  // PROGRAM: after `--` anything goes, even a name starting with '-'.
  o.command = p.remaining;
  const bool dashdash = !o.command.empty() && o.command.front() == "--";
  if (dashdash) o.command.erase(o.command.begin());
  if (o.command.empty())
    throw UsageError(std::string("no ") + (o.program_kind == ProgramKind::Module ? "MODULE" : "PROGRAM") +
                     " given: usage is launch [options] PROGRAM [ARGS...]");
  if (!dashdash && o.command.front().size() > 1 && o.command.front()[0] == '-')
    throw UsageError("unknown option " + o.command.front() + " (see launch --help; put -- before a "
                     "program whose name starts with '-')");
  if (o.nnodes > 1 && !o.master)
    throw UsageError("--nnodes " + std::to_string(o.nnodes) +
                     " needs --master IP:PORT (the address node 0 serves the job's store on)");
  if (o.rank >= o.nnodes)
    throw UsageError("--rank " + std::to_string(o.rank) + " is not below --nnodes " + std::to_string(o.nnodes));
  if (o.job_id.empty() || o.job_id.find_first_of(" \t\n/=,") != std::string::npos)
    throw UsageError("--job_id '" + o.job_id + "' must be non-empty without spaces, '/', '=' or ','");
  if (o.log_dir.empty()) throw UsageError("--log_dir is empty; give a directory such as log");
  result.options = std::move(o);
  return result;
}

}  // namespace launch
