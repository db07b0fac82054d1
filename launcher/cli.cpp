#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>

#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/line_prefix.h"
#include "launcher/seconds.h"
#include "proto/address.h"

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

// torchrun's --master-addr spells IPv6 "[::1]"; launch's options take the bare address.
std::string unbracket(const std::string& host) {
  return host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
}

// torchrun's endpoint without a port ("host", "[::1]", "::1") gets its default one.
std::string with_default_port(const std::string& endpoint, uint16_t port) {
  if (proto::split_host_port(endpoint)) return endpoint;
  const std::string host = unbracket(endpoint);
  if (host.empty() || (host.find(':') != std::string::npos && !proto::is_ipv6_literal(host))) return endpoint;
  return proto::join_host_port(host, port);
}

std::string trim(std::string v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
  return v;
}

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
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
  // torchrun's options with no counterpart of their own here (apply_torchrun_rest)
  std::string rdzv_conf, monitor_interval, start_method, role = "default", local_addr, line_prefix,
      signals_to_handle, numa_binding, logs_specs, event_log_handler, dup_stdout, dup_stderr;
  int rank = -1, max_restart = 0, start_port = 0, master_port = 0;
  double elastic_timeout = 600, grace = 10, shutdown_timeout = 0;
  bool log_overwrite = false, dry_run = false, standalone = false, module = false, no_python = false,
       run_path = false, version = false, virtual_local_rank = false, requeue = false;
  std::map<std::string, bool> given;  // by the option's first name
};

// One PET_<NAME> variable of torchrun: it fills the option when the command line did not give it.
struct PetVar {
  const char* option;  // the spelling we synthesise ("--nproc-per-node")
  const char* key;     // the option's first name, as Raw::given knows it
  const char* var;
  bool flag;
};
constexpr PetVar kPetVars[] = {
    {"--nproc-per-node", "--nproc_per_node", "PET_NPROC_PER_NODE", false},
    {"--nnodes", "--nnodes", "PET_NNODES", false},
    {"--node-rank", "--rank", "PET_NODE_RANK", false},
    {"--master-addr", "--master_addr", "PET_MASTER_ADDR", false},
    {"--master-port", "--master_port", "PET_MASTER_PORT", false},
    {"--rdzv-endpoint", "--rdzv_endpoint", "PET_RDZV_ENDPOINT", false},
    {"--rdzv-id", "--rdzv_id", "PET_RDZV_ID", false},
    {"--rdzv-backend", "--rdzv_backend", "PET_RDZV_BACKEND", false},
    {"--rdzv-conf", "--rdzv_conf", "PET_RDZV_CONF", false},
    {"--max-restarts", "--max_restart", "PET_MAX_RESTARTS", false},
    {"--log-dir", "--log_dir", "PET_LOG_DIR", false},
    {"--redirects", "--redirects", "PET_REDIRECTS", false},
    {"--tee", "--tee", "PET_TEE", false},
    {"--local-ranks-filter", "--local_ranks_filter", "PET_LOCAL_RANKS_FILTER", false},
    {"--monitor-interval", "--monitor_interval", "PET_MONITOR_INTERVAL", false},
    {"--start-method", "--start_method", "PET_START_METHOD", false},
    {"--event-log-handler", "--event_log_handler", "PET_EVENT_LOG_HANDLER", false},
    {"--role", "--role", "PET_ROLE", false},
    {"--local-addr", "--local_addr", "PET_LOCAL_ADDR", false},
    {"--signals-to-handle", "--signals_to_handle", "PET_SIGNALS_TO_HANDLE", false},
    {"--shutdown-timeout", "--shutdown_timeout", "PET_SHUTDOWN_TIMEOUT", false},
    {"--duplicate-stdout-filters", "--duplicate_stdout_filters", "PET_DUPLICATE_STDOUT_FILTERS", false},
    {"--duplicate-stderr-filters", "--duplicate_stderr_filters", "PET_DUPLICATE_STDERR_FILTERS", false},
    {"--standalone", "--standalone", "PET_STANDALONE", true},
    {"--module", "-m", "PET_MODULE", true},
    {"--no-python", "--no-python", "PET_NO_PYTHON", true},
    {"--run-path", "--run-path", "PET_RUN_PATH", true},
    {"--virtual-local-rank", "--virtual_local_rank", "PET_VIRTUAL_LOCAL_RANK", true},
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
  opt("--nnodes", r.nnodes, "number of nodes (more than 1: with --master), or MIN:MAX: elastic membership");
  opt("--master", r.master, "HOST:PORT of the store of a multi-node job, served by node 0; etcd://HOST:PORT: meet at etcd");
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
  opt("--rdzv_backend,--rdzv-backend", r.rdzv_backend,
      "torchrun: c10d or static (launch's own store), or etcd (etcd at --rdzv-endpoint HOST:2379)");
  opt("--rdzv_conf,--rdzv-conf", r.rdzv_conf,
      "torchrun: KEY=VALUE,...: join_timeout, last_call_timeout, close_timeout, heartbeat_timeout, keep_alive_interval, "
      "keep_alive_max_attempt, read_timeout, is_host, checkpoint_timeout");
  opt("--local_addr,--local-addr", r.local_addr, "torchrun: this node's address, as --host");
  // --- the rest of torchrun's options: their meaning where one applies here, else accepted
  opt("--role", r.role, "torchrun: the workers' role (ROLE_NAME)")->capture_default_str();
  opt("--log_line_prefix_template,--log-line-prefix-template", r.line_prefix,
      "torchrun: the prefix of --stream all's lines, with ${rank}, ${local_rank}, ${role_name} (default [rank N] )");
  opt("--signals_to_handle,--signals-to-handle", r.signals_to_handle,
      "torchrun: signals forwarded to the workers that stop the job: SIGINT, SIGTERM, SIGHUP, SIGQUIT always, "
      "SIGUSR1, SIGUSR2 when listed");
  opt("--shutdown_timeout,--shutdown-timeout", r.shutdown_timeout, "torchrun: as --grace");
  flag("--virtual_local_rank,--virtual-local-rank", r.virtual_local_rank,
       "torchrun: LOCAL_RANK=0 for every worker, whose GPU is then the only one it sees");
  opt("--monitor_interval,--monitor-interval", r.monitor_interval, "torchrun: accepted, no effect");
  opt("--start_method,--start-method", r.start_method, "torchrun: spawn, fork or forkserver: accepted, no effect");
  opt("--numa_binding,--numa-binding", r.numa_binding, "torchrun: accepted, no effect");
  opt("--logs_specs,--logs-specs", r.logs_specs, "torchrun: accepted, no effect");
  opt("--event_log_handler,--event-log-handler", r.event_log_handler, "torchrun: accepted, no effect");
  opt("--duplicate_stdout_filters,--duplicate-stdout-filters", r.dup_stdout, "torchrun: accepted, no effect");
  opt("--duplicate_stderr_filters,--duplicate-stderr-filters", r.dup_stderr, "torchrun: accepted, no effect");
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
  opt("--redirects,-r", r.redirects, "torchrun: 3 = --stream none (logs always hold stdout and stderr)");
  opt("--tee,-t", r.tee, "torchrun: 3 = --stream all");
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
    o.nproc_word = w == "gpu" ? NprocWord::Gpu : w == "cpu" ? NprocWord::Cpu : NprocWord::Auto;
    return;
  }
  if (!all_digits(v) || std::stoi(v) < 1 || std::stoi(v) > 4096)
    throw UsageError("--nproc_per_node '" + v + "' is not a number of processes: give N from 1 to 4096, or "
                     "gpu (one per visible GPU), cpu (one per CPU core), auto (gpu if any, else cpu)");
  o.nproc_per_node = std::stoi(v);
}

// --nnodes N, or torchrun's (and paddle's) MIN:MAX: elastic membership when MIN < MAX.
void apply_nnodes(const std::string& v, Options& o) {
  const size_t colon = v.find(':');
  if (colon == std::string::npos) {
    o.nnodes = to_int("--nnodes", v, 1, 65536);
    o.nnodes_min = 0;
    return;
  }
  auto part = [&](const std::string& x, const char* what) {
    if (!all_digits(x) || std::stoi(x) < 1 || std::stoi(x) > 65536)
      throw UsageError("--nnodes " + v + ": " + what + " '" + x + "' must be a whole number from 1 to 65536 (MIN:MAX)");
    return std::stoi(x);
  };
  const int lo = part(v.substr(0, colon), "MIN"), hi = part(v.substr(colon + 1), "MAX");
  if (lo > hi)
    throw UsageError("--nnodes " + v + ": MIN " + std::to_string(lo) + " is above MAX " + std::to_string(hi) +
                     " (give --nnodes MIN:MAX with MIN <= MAX)");
  o.nnodes = hi;
  o.nnodes_min = lo < hi ? lo : 0;
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

constexpr std::string_view kEtcdScheme = "etcd://";
constexpr uint16_t kEtcdPort = 2379;  // etcd's client port: torchrun's default for an etcd endpoint

// torchrun's etcd backends (etcd, etcd-v2) or paddle's --master etcd://: where the nodes meet is etcd.
bool names_etcd(const Raw& r) {
  const std::string b = lower(r.rdzv_backend);
  return (r.given.at("--rdzv_backend") && (b == "etcd" || b == "etcd-v2")) ||
         r.master.compare(0, kEtcdScheme.size(), kEtcdScheme) == 0;
}

// --master etcd://HOST[:PORT] (paddle's spelling, also from PADDLE_MASTER): the etcd backend.
void apply_master_scheme(const Raw& r, Options& o) {
  if (!o.master) return;
  const std::string& m = *o.master;
  if (m.compare(0, kEtcdScheme.size(), kEtcdScheme) != 0) {
    if (m.find("://") != std::string::npos)
      throw UsageError("--master '" + m + "': the one scheme launch knows is etcd://HOST:PORT (etcd's rendezvous); "
                       "launch's own store is HOST:PORT");
    return;
  }
  if (r.given.at("--rdzv_backend") && o.rdzv_backend != RdzvBackend::Etcd)
    throw UsageError("--master " + m + " names etcd, --rdzv-backend " + r.rdzv_backend +
                     " launch's own store: give one of them");
  o.master = with_default_port(m.substr(kEtcdScheme.size()), kEtcdPort);
  o.rdzv_backend = RdzvBackend::Etcd;
}

void apply_rendezvous(const Raw& r, Options& o, CliResult& out) {
  const bool addr = r.given.at("--master_addr"), port = r.given.at("--master_port");
  const bool endpoint = r.given.at("--rdzv_endpoint");
  if (r.given.at("--rdzv_backend")) {
    const std::string b = lower(r.rdzv_backend);
    if (b == "etcd" || b == "etcd-v2")
      o.rdzv_backend = RdzvBackend::Etcd;
    else if (b != "c10d" && b != "static")
      throw UsageError("--rdzv-backend " + r.rdzv_backend + " must be c10d or static (launch's own store, served on "
                       "the endpoint by the launch that binds it) or etcd (etcd at --rdzv-endpoint HOST:2379)");
  }
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
    if (addr || port)
      o.master = proto::join_host_port(addr ? unbracket(r.master_addr) : "127.0.0.1",
                                       static_cast<uint16_t>(port ? r.master_port : 29500));
    if (endpoint)
      o.master = with_default_port(r.rdzv_endpoint, o.rdzv_backend == RdzvBackend::Etcd ? kEtcdPort : 29400);
    if (o.rdzv_backend == RdzvBackend::Etcd && (addr || port))
      throw UsageError("--rdzv-backend " + r.rdzv_backend + " meets at etcd: give its endpoint as --rdzv-endpoint "
                       "HOST:2379, not --master-addr/--master-port");
  } else {
    // One node: nobody to meet; torchrun's master is what the program's rank 0 binds.
    if (addr) o.framework_addr = unbracket(r.master_addr);
    if (port) o.framework_port = r.master_port;
  }
  apply_master_scheme(r, o);
  if (o.rdzv_backend == RdzvBackend::Etcd && o.nnodes == 1)
    out.infos.push_back("etcd's rendezvous: no effect with one node (nobody to meet)");
}

// --- the rest of torchrun's options ---------------------------------------------------------------

// A number of seconds from a --rdzv-conf value (torchrun reads whole seconds; fractions are fine here).
double conf_seconds(const std::string& key, const std::string& value, double lo) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v >= lo && v <= 86400))
    throw UsageError("--rdzv-conf " + key + "=" + value + ": give seconds from " + seconds_text(lo) + " to 86400");
  return v;
}

// torchrun's --rdzv-conf: "key=value,key=value" (its _parse_rendezvous_config: a key needs a value).
void apply_rdzv_conf(const Raw& r, Options& o, CliResult& out) {
  std::vector<std::string> unknown, inert;
  std::optional<double> keep_alive, attempts;
  const bool etcd = names_etcd(r);
  if (trim(r.rdzv_conf).empty()) return;
  for (const std::string& item : split_commas(r.rdzv_conf)) {
    const size_t eq = item.find('=');
    const std::string key = trim(item.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    if (key.empty())
      throw UsageError("--rdzv-conf '" + r.rdzv_conf + "' must be KEY=VALUE,KEY=VALUE,... (e.g. join_timeout=900)");
    if (value.empty()) throw UsageError("--rdzv-conf: the key '" + key + "' needs a value (" + key + "=...)");
    if (key == "join_timeout" || key == "timeout") {
      const double t = conf_seconds(key, value, 1);
      if (r.given.at("--elastic_timeout") && t != r.elastic_timeout)
        throw UsageError("--rdzv-conf " + key + "=" + value + " and --elastic_timeout " + seconds_text(r.elastic_timeout) +
                         " disagree: give one of them");
      o.elastic_timeout_s = t;
    } else if (key == "last_call_timeout") {
      o.rdzv.last_call_timeout_s = conf_seconds(key, value, 0);
    } else if (key == "close_timeout") {
      o.rdzv.close_timeout_s = conf_seconds(key, value, 0);
    } else if (key == "heartbeat_timeout") {
      o.rdzv.heartbeat_timeout_s = conf_seconds(key, value, 0.1);
    } else if (key == "keep_alive_interval") {
      keep_alive = conf_seconds(key, value, 0.05);
    } else if (key == "keep_alive_max_attempt") {
      attempts = to_int("--rdzv-conf keep_alive_max_attempt", value, 1, 1000);
    } else if (key == "read_timeout") {
      o.rdzv.store_timeout_s = conf_seconds(key, value, 0.1);
    } else if (key == "checkpoint_timeout") {
      o.rdzv.checkpoint_timeout_s = conf_seconds(key, value, 0);
    } else if (key == "is_host") {
      o.rdzv.is_host = truthy("--rdzv-conf is_host", value);
    } else if (etcd && (key == "cacert" || key == "cert" || key == "key" || (key == "protocol" && lower(value) != "http"))) {
      throw UsageError("--rdzv-conf " + key + "=" + value + ": launch's etcd client speaks plain http:// to etcd, not "
                       "TLS yet: give etcd an http:// client URL, or use launch's own store (--rdzv-backend c10d)");
    } else if (key == "use_libuv" || key == "rank" || key == "etcd_prefix" || key == "protocol" || key == "cacert" ||
               key == "cert" || key == "key") {
      inert.push_back(key);
    } else {
      unknown.push_back(key);
    }
  }
  // torchrun: a node is dead after keep_alive_max_attempt missed beats of keep_alive_interval.
  if (keep_alive) o.rdzv.heartbeat_period_s = keep_alive;
  if ((keep_alive || attempts) && !o.rdzv.heartbeat_timeout_s)
    o.rdzv.heartbeat_timeout_s = keep_alive.value_or(1.0) * attempts.value_or(5);
  auto list = [](const std::vector<std::string>& v) {
    std::string t;
    for (const auto& k : v) t += (t.empty() ? "" : ", ") + k;
    return t;
  };
  if (!inert.empty())
    out.infos.push_back("--rdzv-conf " + list(inert) + ": no effect " +
                        (etcd ? "over etcd (launch keeps a job's keys under /launch/<job id>/)" : "with launch's store"));
  if (!unknown.empty())
    out.warnings.push_back("--rdzv-conf: unknown key(s) " + list(unknown) +
                           " ignored; launch honours join_timeout, timeout, last_call_timeout, close_timeout, "
                           "heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, read_timeout, is_host, "
                           "checkpoint_timeout");
}

// torchrun's --signals-to-handle. launch always handles the four stop signals; SIGUSR1/SIGUSR2
// listed become stop signals too (forwarded, then the job stops), unless one is the checkpoint
// signal, which keeps its meaning.
void apply_signals(const Raw& r, Options& o, CliResult& out) {
  o.signals_to_handle = r.signals_to_handle;
  bool all_four = true;
  std::vector<int> listed;
  for (const auto& raw : split_commas(r.signals_to_handle)) {
    std::string n;
    for (char c : trim(raw)) n += char(std::toupper(static_cast<unsigned char>(c)));
    if (n.rfind("SIG", 0) == 0) n = n.substr(3);
    const std::map<std::string, int> known = {{"INT", SIGINT},   {"TERM", SIGTERM}, {"HUP", SIGHUP},
                                              {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
    auto it = known.find(n);
    if (it == known.end())
      throw UsageError("--signals-to-handle: '" + raw + "' is none of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2");
    listed.push_back(it->second);
  }
  for (int sig : kStopSignals) all_four = all_four && std::find(listed.begin(), listed.end(), sig) != listed.end();
  if (!all_four)
    out.infos.push_back("--signals-to-handle " + r.signals_to_handle +
                        ": launch handles SIGINT, SIGTERM, SIGHUP and SIGQUIT whether listed or not");
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(listed.begin(), listed.end(), sig) == listed.end()) continue;
    if (o.checkpoint_signal == sig)
      out.infos.push_back("--signals-to-handle lists " + signal_name(sig) +
                          ", the --checkpoint-signal: it stays the checkpoint signal (forwarded, the job goes on)");
    else
      o.extra_stop_signals.push_back(sig);
  }
}

void apply_torchrun_rest(const Raw& r, const proto::EnvMap& env, Options& o, CliResult& out) {
  apply_rdzv_conf(r, o, out);
  if (r.given.at("--local_addr")) {
    if (r.given.at("--host") && r.host != r.local_addr)
      throw UsageError("--local-addr " + r.local_addr + " and --host " + r.host + " disagree: give one of them");
    o.host = r.local_addr;
    o.host_given = true;
  }
  if (r.given.at("--shutdown_timeout")) {
    if (r.given.at("--grace") && r.grace != r.shutdown_timeout)
      throw UsageError("--shutdown-timeout " + seconds_text(r.shutdown_timeout) + " and --grace " + seconds_text(r.grace) +
                       " disagree: give one of them");
    o.grace_s = r.shutdown_timeout;
    o.grace_given = true;
  }
  if (r.role.empty() || r.role.find_first_of(" \t\n") != std::string::npos)
    throw UsageError("--role '" + r.role + "' must be one word");
  o.role = r.role;
  o.line_prefix_template = r.line_prefix;
  if (!r.given.at("--log_line_prefix_template"))
    if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) o.line_prefix_template = it->second;
  if (auto bad = unknown_prefix_macro(o.line_prefix_template))
    throw UsageError("--log-line-prefix-template '" + o.line_prefix_template + "': " + *bad +
                     " is none of ${rank}, ${local_rank}, ${role_name}");
  if (!o.line_prefix_template.empty() && o.stream != StreamMode::All)
    out.infos.push_back("--log-line-prefix-template: applies to --stream all (--tee 3) only");
  o.virtual_local_rank = r.virtual_local_rank;
  if (r.given.at("--signals_to_handle")) apply_signals(r, o, out);

  // Accepted for their command lines' sake: what they choose, launch does one way only.
  auto choice = [](const char* opt, const std::string& v, std::initializer_list<const char*> allowed) {
    for (const char* a : allowed)
      if (v == a) return;
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
    throw UsageError(std::string(opt) + " '" + v + "' must be one of " + list);
  };
  if (r.given.at("--monitor_interval")) {
    char* end = nullptr;
    const double v = std::strtod(r.monitor_interval.c_str(), &end);
    if (r.monitor_interval.empty() || *end != '\0' || !(v > 0))
      throw UsageError("--monitor-interval '" + r.monitor_interval + "' must be a positive number of seconds");
    out.infos.push_back("--monitor-interval " + r.monitor_interval +
                        ": no effect (launch learns of a worker's end at once, from SIGCHLD)");
  }
  if (r.given.at("--start_method")) {
    choice("--start-method", r.start_method, {"spawn", "fork", "forkserver"});
    out.infos.push_back("--start-method " + r.start_method + ": no effect (every worker is its own process, "
                        "started with fork and exec)");
  }
  if (r.given.at("--numa_binding")) {
    choice("--numa-binding", r.numa_binding, {"node", "socket", "exclusive", "core-complex"});
    out.infos.push_back("--numa-binding " + r.numa_binding + ": no effect (launch binds no CPUs; numactl in the "
                        "command does)");
  }
  if (r.given.at("--logs_specs"))
    out.infos.push_back("--logs-specs " + r.logs_specs + ": no effect (logs are --log_dir/workerlog.N)");
  if (r.given.at("--event_log_handler"))
    out.infos.push_back("--event-log-handler " + r.event_log_handler + ": no effect (launch has no event log)");
  if (r.given.at("--duplicate_stdout_filters"))
    out.infos.push_back("--duplicate-stdout-filters " + r.dup_stdout + ": no effect (every line is in workerlog.N)");
  if (r.given.at("--duplicate_stderr_filters"))
    out.infos.push_back("--duplicate-stderr-filters " + r.dup_stderr + ": no effect (every line is in workerlog.N)");
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
      {"PADDLE_DEVICES", "--devices", [](Options& o, const std::string& s) { o.devices = parse_devices(s, "PADDLE_DEVICES"); }},
      {proto::env::kPaddleNnodes, "--nnodes", [](Options& o, const std::string& s) { apply_nnodes(s, o), o.nnodes_given = true; }},
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
  if (p.help_asked) return {std::nullopt, p.help, {}, {}, {}};
  if (p.raw.version) return {std::nullopt, std::string("launch ") + LAUNCH_VERSION + "\n", {}, {}, {}};

  // torchrun's PET_<OPTION> fill what the command line did not give: parse again with them first.
  std::vector<std::string> from_env;
  for (const PetVar& pv : kPetVars) {
    auto it = env.find(pv.var);
    if (it == env.end() || it->second.empty() || p.raw.given.at(pv.key)) continue;
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
  if (r.given.at("--gpus") && r.given.at("--devices")) throw UsageError("give either --gpus or --devices, not both");
  if (r.given.at("--gpus")) o.devices = parse_gpus(r.gpus);
  if (r.given.at("--devices")) o.devices = parse_devices(r.devices);
  if (r.given.at("--nproc_per_node")) apply_nproc(r.nproc, o);
  apply_nnodes(r.nnodes, o);
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
  apply_torchrun_rest(r, env, o, result);
  apply_paddle_env(env, o, result.warnings);
  apply_rendezvous(r, o, result);

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
    throw UsageError("--nnodes " +
                     (o.nnodes_min > 0 ? std::to_string(o.nnodes_min) + ":" + std::to_string(o.nnodes) +
                                             " (elastic membership)"
                                       : std::to_string(o.nnodes)) +
                     " needs --master HOST:PORT or --rdzv-endpoint HOST:PORT (where the job's store is served)");
  if (o.rank >= o.nnodes)
    throw UsageError("--rank " + std::to_string(o.rank) + " is not below --nnodes " + std::to_string(o.nnodes));
  if (o.job_id.empty() || o.job_id.find_first_of(" \t\n/=,") != std::string::npos)
    throw UsageError("--job_id '" + o.job_id + "' must be non-empty without spaces, '/', '=' or ','");
  if (o.log_dir.empty()) throw UsageError("--log_dir is empty; give a directory such as log");
  result.options = std::move(o);
  return result;
}

}  // namespace launch
