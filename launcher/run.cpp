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

#include "launcher/cli.h"
#include "launcher/devices.h"
#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/job_store.h"
#include "launcher/log.h"
#include "launcher/ports.h"
#include "launcher/program.h"
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

int run_or_throw(int argc, char** argv) {
  CliResult cli = parse_cli(argc, argv);
  if (!cli.options) {
    std::cout << cli.help;
    return 0;
  }
  const Options& opt = *cli.options;
  log::init(opt.log_level);

  // --- validate everything before starting anything
  const bool cpu_only = opt.devices && (*opt.devices == "cpu" || *opt.devices == "CPU");
  const int visible = cpu_only ? 0 : detect_visible_gpus();
  std::vector<RankDevice> devices =
      plan_devices(DeviceRequest{opt.gpus, opt.devices, opt.nproc_per_node}, visible);
  const std::vector<std::string> command = resolve_command(opt.command, real_lookup_context());
  if (!is_ipv4_address(opt.host))
    throw UsageError("--host '" + opt.host + "' is not an IPv4 address (e.g. 127.0.0.1)");
  std::string summary_path;
  if (opt.summary) {
    summary_path = absolute(*opt.summary);
    struct stat st;
    std::string dir = parent_dir(summary_path);
    if (stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), W_OK) < 0)
      throw UsageError("--summary " + *opt.summary + ": directory " + dir +
                       " does not exist or is not writable");
  }
  if (opt.max_restart > 0)
    log::debug("--max_restart " + std::to_string(opt.max_restart) + " accepted; restarting is not implemented yet");
  const int n = static_cast<int>(devices.size());
  const std::string log_dir = absolute(opt.log_dir);
  const EnvMap parent = env_from_environ(environ);

  JobSpec job;
  job.job_id = opt.job_id;
  job.host = opt.host;
  job.log_dir = log_dir;
  job.devices = devices;

  if (opt.dry_run) {
    PortReservation ports = reserve_ports(opt.host, n + 1, opt.start_port, "");
    job.endpoint_ports.assign(ports.ports().begin(), ports.ports().begin() + n);
    job.master_port = ports.ports()[static_cast<size_t>(n)];
    job.store_addr = opt.host + ":<port chosen at launch>";
    job.store_token = "<redacted>";
    std::cout << "# dry run: nothing is started; ports are examples, a real launch picks its own\n";
    for (int r = 0; r < n; ++r) {
      WorkerEnv env = build_worker_env(job, r, parent);
      std::cout << "rank " << r << " (" << describe(devices[static_cast<size_t>(r)]) << "): "
                << join_command(command) << "\n";
      for (const auto& [k, v] : env.set) std::cout << "  " << k << "=" << v << "\n";
      for (const auto& u : env.unset) std::cout << "  unset " << u << "\n";
      std::cout << "  log: " << log_dir << "/workerlog." << r << "\n";
    }
    return 0;
  }

  // Two descriptors per worker (its pipe, its log): a large job needs more than the usual 1024.
  rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < static_cast<rlim_t>(2 * n + 64)) {
    nofile.rlim_cur = std::min(nofile.rlim_max, static_cast<rlim_t>(2 * n + 64));
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  // Ports before the log directory: a bad --host or --start_port must leave nothing behind.
  // n endpoints, the master, the store.
  PortReservation ports = reserve_ports(opt.host, n + 2, opt.start_port);
  job.endpoint_ports.assign(ports.ports().begin(), ports.ports().begin() + n);
  job.master_port = ports.ports()[static_cast<size_t>(n)];
  make_dirs(log_dir);

  // --- from here on we own processes: signals are handled in the supervisor's loop only.
  // Blocked before the store's thread exists, so that thread inherits the mask and never takes
  // a signal meant for the loop.
  sigset_t stop_signals, orig_mask;
  sigemptyset(&stop_signals);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&stop_signals, s);
  SYS_CHECK(pthread_sigmask(SIG_BLOCK, &stop_signals, &orig_mask) == 0 ? 0 : -1);
  int sfd = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  SYS_CHECK(sfd);
  std::signal(SIGPIPE, SIG_IGN);  // a closed console (launch | head) must not kill the launcher
  // Orphaned grandchildren come to us, so we can reap them and know when none is left.
  SYS_CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1));

  // The workers bind these now, the store its own; the cross-launch locks stay held.
  ports.release_sockets();
  std::optional<JobStore> store = start_job_store(opt.host, opt.job_id, ports.ports()[static_cast<size_t>(n) + 1]);
  if (store) {
    job.store_addr = store->address;
    job.store_token = store->token;
  } else {
    log::warn("built without the store: LAUNCH_STORE_ADDR is not set for the workers");
  }

  std::vector<WorkerPlan> plans;
  for (int r = 0; r < n; ++r) {
    WorkerEnv env = build_worker_env(job, r, parent);
    if (r == 0 && env.set.count("OMP_NUM_THREADS"))
      log::info("OMP_NUM_THREADS=1 for every worker (" + std::to_string(n) +
                " processes on this node); set it yourself to override");
    plans.push_back({r, devices[static_cast<size_t>(r)], command, merge_env(parent, env),
                     log_dir + "/workerlog." + std::to_string(r)});
  }
  log::info("job " + opt.job_id + ": " + std::to_string(n) + " worker(s) of " +
            join_command(command) + "; logs in " + log_dir +
            (store ? "; store at " + store->address : ""));

  SupervisorConfig cfg;
  cfg.stream = opt.stream;
  cfg.grace_s = opt.grace_s;
  cfg.log_overwrite = opt.log_overwrite;
  cfg.signal_fd = sfd;
  cfg.child_mask = orig_mask;
  if (store) cfg.on_failure = store->report_failure;

  JobOutcome outcome = supervise(plans, cfg);
  std::cout.flush();
  print_failure_report(outcome);
  if (!summary_path.empty()) write_file_atomically(summary_path, summary_json(opt.job_id, outcome));
  close(sfd);
  return outcome.policy.exit_code();
}

}  // namespace

int run(int argc, char** argv) {
  try {
    return run_or_throw(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "launch: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace launch
