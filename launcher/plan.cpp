#include "launcher/plan.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <system_error>

#include "launcher/devices.h"
#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/multinode/multinode_job.h"
#include "launcher/net_address.h"
#include "launcher/ports.h"
#include "launcher/program.h"
#include "launcher/slurm/slurm_env.h"
#include "proto/address.h"

namespace launch {

namespace {

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char buf[PATH_MAX];
  if (!getcwd(buf, sizeof buf)) throw SystemError("getcwd", errno);
  return std::string(buf) + "/" + path;
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string env_or(const EnvMap& env, const char* name, const std::string& fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

// --master HOST:PORT, checked. A name is resolved by the job mode, which retries while it does
// not resolve yet (a Kubernetes service has no address before its pod runs) -- except a host
// from Slurm's node list, resolved now: one that resolves to a loopback address (Debian maps a
// machine's own name to 127.0.1.1) is refused, as node 0 would serve its store where no other
// node can reach it.
std::string check_master(const std::string& m, bool from_slurm) {
  const std::optional<proto::HostPort> hp = proto::split_host_port(m);
  if (!hp)
    throw UsageError("--master '" + m + "' must be HOST:PORT, e.g. 10.0.0.1:29400 or [fd00::1]:29400");
  if (!from_slurm) return m;
  std::string why;
  const std::optional<std::string> ip = resolve_host(hp->host, &why);
  if (!ip) throw UsageError("cannot resolve host '" + hp->host + "' of --master: " + why);
  if (ip->rfind("127.", 0) == 0 || *ip == "::1")
    throw UsageError("the Slurm step's first host '" + hp->host + "' resolves to " + *ip +
                     ", which other nodes cannot reach (see /etc/hosts); give --master IP:PORT");
  return proto::join_host_port(*ip, hp->port);
}

// Per worker the launcher holds its output pipe and its log, plus one lock per reserved port
// (n + 2) for the whole job, and a few of its own (store, epoll, signalfd, timers): a job of n
// workers needs about 3n + 64 descriptors. The soft limit is raised up to the hard one; past
// that, say what to raise before anything starts.
void ensure_open_files(int n) {
  const rlim_t need = static_cast<rlim_t>(3) * static_cast<rlim_t>(n) + 64;
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= need) return;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need)
    throw UsageError(std::to_string(n) + " worker processes need about " + std::to_string(need) +
                     " open files, but the limit is " + std::to_string(lim.rlim_max) + ": raise it (ulimit -n " +
                     std::to_string(need) + ", or LimitNOFILE in a service) or start fewer processes");
  lim.rlim_cur = need;
  setrlimit(RLIMIT_NOFILE, &lim);
}

// torchrun's --nproc-per-node gpu|cpu|auto.
void resolve_nproc_word(Options& o, int visible) {
  if (!o.nproc_word) return;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const bool gpu = *o.nproc_word == NprocWord::Gpu || (*o.nproc_word == NprocWord::Auto && visible > 0);
  if (gpu) {
    if (visible == 0) throw UsageError("--nproc_per_node gpu: no GPU is visible (check CUDA_VISIBLE_DEVICES)");
    o.nproc_per_node = visible;
  } else {
    o.nproc_per_node = static_cast<int>(cores > 0 ? cores : 1);
    if (!o.devices) o.devices = DeviceList::cpu_processes("--nproc_per_node cpu");
  }
}

// Whether two directory names are one directory ("log", "./log/", a symlink to it).
bool same_dir(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ea, eb;
  const fs::path x = fs::weakly_canonical(fs::path(a), ea), y = fs::weakly_canonical(fs::path(b), eb);
  const auto norm = [](const fs::path& q) { return q.lexically_normal().string(); };
  std::string u = norm(ea ? fs::path(a) : x), v = norm(eb ? fs::path(b) : y);
  while (u.size() > 1 && u.back() == '/') u.pop_back();
  while (v.size() > 1 && v.back() == '/') v.pop_back();
  return u == v;
}

// Inside another launcher's worker, that launcher's log directory (PADDLE_LOG_DIR) is not ours:
// its workerlog.N are the outer job's, this launch's own console output among them, and the
// inner launches of its other ranks would write the same names. The default (log, the outer's
// too when both start in one folder) moves to OUTER/inner.RANK; a --log_dir naming the outer's
// is refused. Returns the directory, and sets *note when it moved.
std::string own_log_dir(const Options& opt, const EnvMap& parent, std::string* note) {
  // Absolute and normal ("log/", "./log" and "log" read the same in every message).
  std::string dir = std::filesystem::path(absolute(opt.log_dir)).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const LauncherEnv nested = launcher_env(parent);
  const auto outer = parent.find(proto::env::kPaddleLogDir);
  if (!nested.outer || outer == parent.end() || !same_dir(dir, outer->second)) return dir;
  const auto rank = parent.find(proto::env::kPaddleTrainerId);
  const std::string own =
      outer->second + "/inner." + (rank != parent.end() ? rank->second : "pid" + std::to_string(::getpid()));
  if (opt.log_dir_given) {
    throw UsageError("--log_dir " + dir + " is the log directory of the launcher this launch runs inside (" +
                     proto::env::kPaddleLogDir + "): both would write its workerlog.N; give this launch its own, e.g. " +
                     "--log_dir " + own);
  }
  *note = "log directory " + own + ": the default, " + dir + ", is the log directory of the launcher this launch runs inside";
  return own;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Plan make_plan(const Options& given, const EnvMap& parent) {
  Plan p;
  p.opt = given;
  Options& opt = p.opt;
  p.parent = parent;  // the workers' environment starts from it (build_worker_env)
  // The launcher's own decisions: not from an outer launch's job (launcher_env).
  const EnvMap env = launcher_env(parent).env;

  // --- Slurm fills in what the user did not say
  int visible = opt.devices && opt.devices->cpu ? 0 : detect_visible_gpus(env);
  std::optional<slurm::SlurmLayout> layout;
  try {
    layout = slurm::derive_slurm_layout(env);
  } catch (const slurm::SlurmEnvError& e) {
    throw UsageError(std::string("inside Slurm: ") + e.what());
  }
  if (layout) {
    SlurmDerived d = apply_slurm(opt, *layout, visible);
    opt = d.options;
    p.task = d.task;
    p.slurm_notes = d.notes;
    p.slurm_hosts = d.hosts;
  }
  resolve_nproc_word(opt, visible);

  if (opt.devices && opt.devices->cpu) visible = 0;
  p.job.devices = plan_devices(DeviceRequest{opt.devices, opt.nproc_per_node}, visible);
  ensure_open_files(p.n());

  // --- the program and its interpreter: --python, else PYTHON_EXEC (torchrun's), else python3
  std::string python = opt.python.value_or(env_or(env, "PYTHON_EXEC", ""));
  const std::string python_source = opt.python ? "--python" : "PYTHON_EXEC";
  p.command = resolve_command(opt.command,
                              real_lookup_context(env_or(env, "PATH", "/usr/local/bin:/usr/bin:/bin"), python,
                                                  python_source),
                              opt.program_kind);

  if (opt.framework_addr && !opt.host_given) {
    std::string why;
    const std::optional<std::string> ip = resolve_host(*opt.framework_addr, &why);
    if (!ip) throw UsageError("cannot resolve --master-addr '" + *opt.framework_addr + "': " + why);
    opt.host = *ip;
  }
  if (!proto::is_ip_literal(opt.host))
    throw UsageError("--host '" + opt.host + "' is not an IP address (e.g. 127.0.0.1 or ::1)");
  if (opt.summary) {
    p.summary_path = absolute(*opt.summary);
    struct stat st;
    std::string dir = parent_dir(p.summary_path);
    if (stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), W_OK) < 0)
      throw UsageError("--summary " + *opt.summary + ": directory " + dir + " does not exist or is not writable");
  }

  // --- multi-node: --master and the token are checked before anything starts
  p.multinode = opt.nnodes > 1;
  p.elastic = opt.nnodes_min > 0;
  if (p.multinode) {
    if (p.task) throw UsageError("one Slurm task per worker works on one node only");
    if (p.elastic && !p.slurm_notes.empty())
      throw UsageError("--nnodes " + std::to_string(opt.nnodes_min) + ":" + std::to_string(opt.nnodes) +
                       ": a Slurm step has a fixed number of nodes; give --nnodes N");
    const bool from_slurm = !given.master && opt.master;
    p.etcd = opt.rdzv_backend == RdzvBackend::Etcd;
    if (p.etcd && from_slurm)
      throw UsageError("--rdzv-backend etcd meets at etcd: give its endpoint, --rdzv-endpoint HOST:2379 (a Slurm "
                       "step names no etcd)");
    if (p.etcd && !proto::split_host_port(*opt.master))
      throw UsageError("the etcd endpoint '" + *opt.master + "' must be HOST:PORT, e.g. 10.0.0.1:2379 or [fd00::1]:2379");
    p.master = check_master(*opt.master, from_slurm);
    p.master_origin = p.etcd ? std::string("the etcd endpoint (--rdzv-endpoint)")
                      : from_slurm ? "--master, derived from " + std::string(proto::env::kSlurmStepNodelist)
                                   : std::string("--master");
    p.token = resolve_multinode_token(opt.token_file, env);
  }

  if (opt.requeue) {
    if (!layout)
      throw UsageError("--requeue puts a Slurm batch job back in the queue, but this is no Slurm job "
                       "(SLURM_JOB_ID is not set): run it from an sbatch script, or leave --requeue out");
    const LookupContext path = real_lookup_context(env_or(env, "PATH", "/usr/local/bin:/usr/bin:/bin"));
    for (const char* tool : {"squeue", "scontrol"}) {
      try {
        resolve_command({tool}, path, ProgramKind::NoPython);
      } catch (const UsageError&) {
        throw UsageError(std::string("--requeue needs Slurm's ") + tool + ", which is not in PATH");
      }
    }
    if (env_or(env, proto::env::kSlurmProcId, "0") == "0") p.requeue_job = layout->job_id;
  }

  JobSpec& job = p.job;
  job.job_id = opt.job_id;
  job.log_dir = own_log_dir(opt, parent, &p.log_dir_note);
  job.max_restarts = opt.max_restart;
  job.role = opt.role;
  job.signals_to_handle = opt.signals_to_handle;
  job.virtual_local_rank = opt.virtual_local_rank;
  if (opt.checkpoint_signal) job.checkpoint_signal = signal_name(*opt.checkpoint_signal);
  return p;
}

}  // namespace launch
