#include "launcher/run.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>

#include "launcher/cli.h"
#include "launcher/devices.h"
#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/job_store.h"
#include "launcher/log.h"
#include "launcher/multinode_job.h"
#include "launcher/ports.h"
#include "launcher/program.h"
#include "launcher/slurm/slurm_env.h"
#include "launcher/slurm_options.h"
#include "launcher/slurm_tasks.h"
#include "launcher/summary.h"
#include "launcher/supervisor.h"
#include "launcher/worker_env.h"

extern char** environ;

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

// mkdir -p; UsageError naming the directory when it cannot be made.
void make_dirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) < 0 && errno != EEXIST)
      throw UsageError("cannot create log directory " + dir + " (" + part + ": " +
                       std::strerror(errno) + "); choose another --log_dir");
  }
  struct stat st;
  if (stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode))
    throw UsageError("--log_dir " + dir + " is not a directory; choose another --log_dir");
  if (access(dir.c_str(), W_OK) < 0)
    throw UsageError("--log_dir " + dir + " is not writable; choose another --log_dir");
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=./:,@%") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) out += (i ? " " : "") + shell_quote(argv[i]);
  return out;
}

void print_failure_report(const JobOutcome& o) {
  const auto& p = o.policy;
  if (auto r = p.root_rank()) {
    const WorkerRecord* rec = nullptr;
    for (const auto& w : o.records)
      if (w.rank == *r) rec = &w;
    const Termination t = *p.root_termination();
    log::error("==================== failure report ====================");
    log::error("root cause: " + describe(*r, t) + " (pid " + std::to_string(rec->pid) + ", " +
               launch::describe(rec->device) + "); launch exits with " +
               std::to_string(exit_code_of(t)));
    log::error("log: " + rec->log_path + "; its last " + std::to_string(rec->tail.size()) +
               " line(s) of this run:");
    for (const auto& line : rec->tail) log::error("  | " + line);
    log::error("========================================================");
  } else if (auto remote = p.remote_failure()) {
    log::error("==================== failure report ====================");
    log::error("root cause, on another node: " + *remote + "; launch exits with " + std::to_string(p.exit_code()));
    log::error("========================================================");
  } else if (auto s = p.launcher_signal()) {
    log::warn("job stopped by " + signal_name(*s) + "; launch exits with " +
              std::to_string(128 + *s));
  } else {
    log::info("all " + std::to_string(o.records.size()) + " worker(s) exited with code 0");
  }
  if (o.stragglers > 0)
    log::error(std::to_string(o.stragglers) + " process(es) could not be killed");
}

// ---------------------------------------------------------------------------------------------

// Whether a stop signal (blocked, so it waits in the signalfd) arrived: then no restart.
std::optional<int> pending_stop_signal() {
  sigset_t pending;
  if (sigpending(&pending) < 0) return std::nullopt;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
    if (sigismember(&pending, s) == 1) return s;
  return std::nullopt;
}

// --master HOST:PORT as "ip:port". A host name from Slurm's node list that resolves to a loopback
// address (Debian maps a machine's own name to 127.0.1.1) is refused: node 0 would serve its
// store where no other node can reach it.
std::string check_master(const std::string& m, bool from_slurm) {
  const size_t colon = m.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0 && colon + 1 < m.size() &&
      m.find_first_not_of("0123456789", colon + 1) == std::string::npos && m.size() - colon <= 6)
    port = std::stoi(m.substr(colon + 1));
  if (port < 1 || port > 65535) throw UsageError("--master '" + m + "' must be HOST:PORT, e.g. 10.0.0.1:29400");
  const std::string ip = resolve_ipv4(m.substr(0, colon));
  if (from_slurm && ip.rfind("127.", 0) == 0)
    throw UsageError("the Slurm step's first host '" + m.substr(0, colon) + "' resolves to " + ip +
                     ", which other nodes cannot reach (see /etc/hosts); give --master IP:PORT");
  return ip + ":" + std::to_string(port);
}

// Everything decided before anything starts: the options (with Slurm's values), the devices,
// the command, and the job as far as this node knows it.
struct Plan {
  Options opt;
  EnvMap parent;  // the launcher's environment
  std::vector<RankDevice> devices;
  std::vector<std::string> command;
  std::string log_dir, summary_path;
  std::optional<SlurmTaskForm> task;       // one Slurm task per worker
  std::vector<std::string> slurm_notes;    // for --dry-run
  std::vector<std::string> slurm_hosts;
  bool multinode = false;
  std::string master, token;               // multi-node: "ip:port" and the shared token
  JobSpec job;
  int n() const { return static_cast<int>(devices.size()); }
  // workerlog.<global rank>: unique even when the nodes or Slurm tasks share a log directory.
  std::string log_path(const WorkerEnv& env) const { return log_dir + "/workerlog." + env.set.at("RANK"); }
};

// Validates everything; throws UsageError. Reads the machine (GPUs, PATH, the token file), starts
// nothing and creates nothing.
Plan make_plan(const Options& given) {
  Plan p;
  p.opt = given;
  Options& opt = p.opt;
  p.parent = env_from_environ(environ);

  // --- Slurm fills in what the user did not say
  const bool cpu_asked = opt.devices && (*opt.devices == "cpu" || *opt.devices == "CPU");
  int visible = cpu_asked ? 0 : detect_visible_gpus();
  std::optional<slurm::SlurmLayout> layout;
  try {
    layout = slurm::derive_slurm_layout(p.parent);
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

  const bool cpu_only = opt.devices && (*opt.devices == "cpu" || *opt.devices == "CPU");
  if (cpu_only) visible = 0;
  p.devices = plan_devices(DeviceRequest{opt.gpus, opt.devices, opt.nproc_per_node}, visible);
  p.command = resolve_command(opt.command, real_lookup_context());
  if (!is_ipv4_address(opt.host))
    throw UsageError("--host '" + opt.host + "' is not an IPv4 address (e.g. 127.0.0.1)");
  if (opt.summary) {
    p.summary_path = absolute(*opt.summary);
    struct stat st;
    std::string dir = parent_dir(p.summary_path);
    if (stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), W_OK) < 0)
      throw UsageError("--summary " + *opt.summary + ": directory " + dir +
                       " does not exist or is not writable");
  }

  // --- multi-node: --master and the token are checked before anything starts
  p.multinode = opt.nnodes > 1;
  if (p.multinode) {
    if (p.task) throw UsageError("one Slurm task per worker works on one node only");
    p.master = check_master(*opt.master, /*from_slurm=*/!given.master);
    p.token = resolve_multinode_token(opt.token_file, p.parent);
  }
  p.log_dir = absolute(opt.log_dir);

  JobSpec& job = p.job;
  job.job_id = opt.job_id;
  job.host = opt.host;
  job.log_dir = p.log_dir;
  job.devices = p.devices;
  if (opt.checkpoint_signal) job.checkpoint_signal = signal_name(*opt.checkpoint_signal);
  if (p.task)
    job.task = JobSpec::TaskRanks{p.task->global_rank, p.task->local_rank, p.task->local_size, p.task->world_size};
  return p;
}

// --dry-run: what was derived, then each rank's command and variables. Starts and creates nothing.
int dry_run(Plan p) {
  const Options& opt = p.opt;
  JobSpec& job = p.job;
  const int n_ports = p.task ? p.task->world_size : p.n();
  PortReservation ports = reserve_ports(opt.host, n_ports + 1, opt.start_port, "");
  job.endpoint_ports.assign(ports.ports().begin(), ports.ports().begin() + n_ports);
  job.master_port = ports.ports()[static_cast<size_t>(n_ports)];
  job.store_addr = p.task ? opt.host + ":" + std::to_string(p.task->store_port) + " (served by task 0)"
                          : opt.host + ":<port chosen at launch>";
  job.store_token = "<redacted>";
  std::cout << "# dry run: nothing is started; ports are examples, a real launch picks its own\n";
  for (const auto& note : p.slurm_notes) std::cout << "# slurm: " << note << "\n";
  if (p.multinode)
    std::cout << "# multi-node: " << opt.nnodes << " nodes meet at --master " << p.master
              << " (node 0 serves the store there); global ranks, endpoints and the master port are "
                 "decided by the rendezvous, the values below are this node's as if it were node 0\n";
  if (p.task) std::cout << "# slurm: endpoints and the master port are exchanged through the store at run time\n";
  if (opt.max_restart > 0)
    std::cout << "# restarts: up to " << opt.max_restart << " (PADDLE_RESTART_COUNT=1.." << opt.max_restart << ")\n";
  for (int r = 0; r < p.n(); ++r) {
    WorkerEnv env = build_worker_env(job, r, p.parent);
    std::cout << "rank " << env.set.at("RANK") << " (" << describe(p.devices[static_cast<size_t>(r)])
              << "): " << join_command(p.command) << "\n";
    for (const auto& [k, v] : env.set) std::cout << "  " << k << "=" << v << "\n";
    for (const auto& u : env.unset) std::cout << "  unset " << u << "\n";
    std::cout << "  log: " << p.log_path(env) << "\n";
  }
  return 0;
}

sigset_t stop_signal_set() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&s, sig);
  return s;
}

// The job itself: ports, signals, the meeting of tasks or nodes, then one generation of workers
// per run (the first, then one per restart).
int run_job(Plan p) {
  const Options& opt = p.opt;
  JobSpec& job = p.job;
  const int n = p.n();

  // Two descriptors per worker (its pipe, its log): a large job needs more than the usual 1024.
  rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < static_cast<rlim_t>(2 * n + 64)) {
    nofile.rlim_cur = std::min(nofile.rlim_max, static_cast<rlim_t>(2 * n + 64));
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  // Ports before the log directory: a bad --host or --start_port must leave nothing behind.
  // n endpoints, the master, the store (tasks and nodes reserve their own when they meet).
  PortReservation ports;
  if (!p.task && !p.multinode) {
    ports = reserve_ports(opt.host, n + 2, opt.start_port);
    job.endpoint_ports.assign(ports.ports().begin(), ports.ports().begin() + n);
    job.master_port = ports.ports()[static_cast<size_t>(n)];
  }
  make_dirs(p.log_dir);

  // --- from here on we own processes: signals are handled in the supervisor's loop only.
  // Blocked before the store's thread exists, so that thread inherits the mask and never takes
  // a signal meant for the loop.
  sigset_t blocked = stop_signal_set(), orig_mask;
  sigaddset(&blocked, SIGCHLD);
  if (opt.checkpoint_signal) sigaddset(&blocked, *opt.checkpoint_signal);
  SYS_CHECK(pthread_sigmask(SIG_BLOCK, &blocked, &orig_mask) == 0 ? 0 : -1);
  int sfd = signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK);
  SYS_CHECK(sfd);
  std::signal(SIGPIPE, SIG_IGN);  // a closed console (launch | head) must not kill the launcher
  // Orphaned grandchildren come to us, so we can reap them and know when none is left.
  SYS_CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1));

  std::unique_ptr<SlurmTaskGroup> tasks;
  std::unique_ptr<MultinodeJob> cluster;
  std::optional<JobStore> store;
  uint16_t store_port = 0;
  if (p.task) {
    SlurmTaskConfig tc;
    tc.form = *p.task;
    tc.host = opt.host;
    tc.job_id = opt.job_id;
    if (auto it = p.parent.find("SLURM_STEP_LAUNCHER_PORT"); it != p.parent.end()) tc.launcher_port = it->second;
    // Only the stop signals end the wait: a checkpoint signal then is simply forwarded later.
    tc.stop_signals = stop_signal_set();
    tasks = SlurmTaskGroup::meet(tc);
    job.endpoint_ports = tasks->endpoint_ports();
    job.master_port = tasks->master_port();
    job.store_addr = tasks->store_address();
    job.store_token = tasks->store_token();
    tasks->release_sockets();
  } else if (p.multinode) {
    MultinodeConfig mc;
    mc.master = p.master;
    mc.host = opt.host_given ? opt.host : "";
    mc.nnodes = opt.nnodes;
    mc.rank = opt.rank;
    mc.job_id = opt.job_id;
    mc.token = p.token;
    mc.timeout = std::chrono::milliseconds(static_cast<long>(opt.elastic_timeout_s * 1000));
    mc.devices = p.devices;
    mc.expected_hosts = p.slurm_hosts;
    mc.max_restart = opt.max_restart;
    mc.stop_signals = stop_signal_set();
    cluster = MultinodeJob::join(mc);
    job.host = cluster->host();
    job.cluster = cluster->cluster();
    job.nnodes = opt.nnodes;
    job.node_rank = cluster->node_rank();
    job.store_addr = cluster->store_address();
    job.store_token = p.token;
    cluster->release_sockets();
  } else {
    // The workers bind these now, the store its own; the cross-launch locks stay held.
    ports.release_sockets();
    store_port = ports.ports()[static_cast<size_t>(n) + 1];
  }

  SupervisorConfig cfg;
  cfg.stream = opt.stream;
  cfg.grace_s = opt.grace_s;
  cfg.signal_fd = sfd;
  cfg.child_mask = orig_mask;
  if (opt.checkpoint_signal) cfg.checkpoint_signal = *opt.checkpoint_signal;

  // --- one generation per run of the workers: the first, then one per restart
  JobOutcome outcome;
  for (int gen = 0;; ++gen) {
    if (cluster) {
      if (gen > 0) {
        cluster->restart(gen);
        job.cluster = cluster->cluster();
        job.node_rank = cluster->node_rank();
      }
      cfg.on_failure = [&cluster](int rank, const Termination& t) { cluster->report_worker_failure(rank, t); };
      cfg.remote_fd = cluster->event_fd();
      cfg.remote_failure = [&cluster] { return cluster->failure(); };
    } else if (!p.task) {
      // A fresh store per generation, on the same address: the store's failure record is final
      // by design (a waiter of the failed generation must fail, never be answered by the next
      // one), and a half-finished barrier of the failed generation must not count towards the
      // next one's. Workers key what they exchange by PADDLE_RESTART_COUNT as well.
      store.reset();
      store = start_job_store(opt.host, opt.job_id, store_port);
      job.store_addr = store->address;
      job.store_token = store->token;
      store_port = static_cast<uint16_t>(std::stoi(store->address.substr(store->address.rfind(':') + 1)));
      cfg.on_failure = [report = store->report_failure](int rank, const Termination& t) { report(rank, describe(t)); };
    } else {
      if (auto report = tasks->failure_reporter())
        cfg.on_failure = [report](int rank, const Termination& t) { report(rank, describe(t)); };
    }
    job.restart_count = gen;
    // The first run truncates the logs if asked; a restart appends to what the failed run wrote.
    cfg.log_overwrite = opt.log_overwrite && gen == 0;

    std::vector<WorkerPlan> plans;
    for (int r = 0; r < n; ++r) {
      WorkerEnv env = build_worker_env(job, r, p.parent);
      if (r == 0 && gen == 0 && env.set.count("OMP_NUM_THREADS"))
        log::info("OMP_NUM_THREADS=1 for every worker (" + env.set.at("LOCAL_WORLD_SIZE") +
                  " processes on this node); set it yourself to override");
      plans.push_back({std::stoi(env.set.at("RANK")), p.devices[static_cast<size_t>(r)], p.command,
                       merge_env(p.parent, env), p.log_path(env)});
    }
    log::info("job " + opt.job_id + ": " + std::to_string(n) + " worker(s) of " + join_command(p.command) +
              "; logs in " + p.log_dir + (job.store_addr.empty() ? "" : "; store at " + job.store_addr) +
              (gen > 0 ? "; restart " + std::to_string(gen) + " of " + std::to_string(opt.max_restart) : ""));

    outcome = supervise(plans, cfg);
    outcome.restart_count = gen;
    std::cout.flush();
    print_failure_report(outcome);
    const int code = outcome.policy.exit_code();
    if (cluster) cluster->finish(code == 0);
    if (code == 0 || outcome.policy.launcher_signal() ||
        (!outcome.policy.root_rank() && !outcome.policy.remote_failure()))
      break;
    if (gen >= opt.max_restart) {
      if (opt.max_restart > 0)
        log::error("no restart left (--max_restart " + std::to_string(opt.max_restart) + "); launch exits with " +
                   std::to_string(code));
      break;
    }
    if (auto s = pending_stop_signal()) {
      log::warn(signal_name(*s) + " arrived while the job was failing: not restarting");
      break;
    }
    log::warn("restarting all " + std::to_string(n) + " worker(s) (restart " + std::to_string(gen + 1) + " of " +
              std::to_string(opt.max_restart) + ", PADDLE_RESTART_COUNT=" + std::to_string(gen + 1) + ")");
  }

  if (tasks) tasks->finish(outcome.policy.exit_code());
  if (!p.summary_path.empty()) write_file_atomically(p.summary_path, summary_json(opt.job_id, outcome));
  close(sfd);
  return outcome.policy.exit_code();
}


int run_or_throw(int argc, char** argv) {
  CliResult cli = parse_cli(argc, argv);
  if (!cli.options) {
    std::cout << cli.help;
    return 0;
  }
  log::init(cli.options->log_level);
  Plan plan = make_plan(*cli.options);
  return plan.opt.dry_run ? dry_run(std::move(plan)) : run_job(std::move(plan));
}

}  // namespace

int run(int argc, char** argv) {
  try {
    return run_or_throw(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "launch: error: %s\n", e.what());
    return 2;
  } catch (const StopRequested& e) {
    std::fprintf(stderr, "launch: stopped by %s before any worker started\n", signal_name(e.sig()).c_str());
    return 128 + e.sig();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace launch
