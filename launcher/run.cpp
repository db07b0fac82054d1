#include "launcher/run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "launcher/cli.h"
#include "launcher/containment.h"
#include "launcher/dry_run.h"
#include "launcher/errors.h"
#include "launcher/exit_policy.h"
#include "launcher/failure_report.h"
#include "launcher/job_mode.h"
#include "launcher/line_prefix.h"
#include "launcher/log.h"
#include "launcher/log_lock.h"
#include "launcher/output.h"
#include "launcher/plan.h"
#include "launcher/program.h"
#include "launcher/restart_backoff.h"
#include "launcher/seconds.h"
#include "launcher/slurm/requeue.h"
#include "launcher/stop_signals.h"
#include "launcher/summary.h"
#include "launcher/supervisor.h"

namespace launch {

namespace {

// mkdir -p; UsageError naming the directory when it cannot be made.
void make_dirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) < 0 && errno != EEXIST)
      throw UsageError("cannot create log directory " + dir + " (" + part + ": " + std::strerror(errno) +
                       "); choose another --log_dir");
  }
  struct stat st;
  if (stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode))
    throw UsageError("--log_dir " + dir + " is not a directory; choose another --log_dir");
  if (access(dir.c_str(), W_OK) < 0) throw UsageError("--log_dir " + dir + " is not writable; choose another --log_dir");
}

// The log directory; the default one (./log) that cannot be made -- a read-only working
// directory, as in many container images -- falls back to a fresh folder under the temporary
// directory, as torchrun's does, named in a warning.
void make_log_dir(Plan& p) {
  try {
    make_dirs(p.job.log_dir);
  } catch (const UsageError& e) {
    if (p.opt.log_dir_given || !p.log_dir_note.empty()) throw;
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/launch-log-XXXXXX";
    if (!mkdtemp(dir.data())) throw;
    log::warn(std::string(e.what()).substr(0, std::string(e.what()).find(';')) + ": the logs go to " + dir +
              " instead (--log_dir to choose)");
    p.job.log_dir = dir;
  }
}

// This generation's workers. A stale error file of an earlier run must not be reported as this one's.
std::vector<WorkerPlan> worker_plans(const Plan& p, const RankLayout& layout, int generation) {
  std::vector<WorkerPlan> plans;
  for (int i = 0; i < p.n(); ++i) {
    const int rank = layout.first_rank + i;
    WorkerEnv env = build_worker_env(p.job, layout, i, generation, p.parent);
    if (i == 0 && generation == 0 && env.set.count(proto::env::kOmpNumThreads))
      log::info("OMP_NUM_THREADS=1 for every worker (" + std::to_string(layout.local_size) +
                " processes on this node); set it yourself to override");
    unlink(worker_error_file(p.job.log_dir, rank).c_str());
    plans.push_back({rank, p.job.devices[size_t(i)], p.command, merge_env(p.parent, env),
                     worker_log_path(p.job.log_dir, rank),
                     line_prefix(p.opt.line_prefix_template, rank, layout.first_local_rank + i, p.job.role)});
  }
  return plans;
}

// After a generation: whether the job starts again; `why_not` says why it does not when a
// restart was asked for (logged after the failure report).
bool restart_follows(const JobOutcome& o, int generation, int max_restart, StopSignals& stops, std::string& why_not) {
  const ExitPolicy& policy = o.policy;
  if (policy.exit_code() == 0 || policy.launcher_signal() || (!policy.root_rank() && !policy.remote_failure()))
    return false;
  if (generation >= max_restart) {
    if (max_restart > 0)
      why_not = "no restart left (--max_restart " + std::to_string(max_restart) + "); launch exits with " +
                std::to_string(policy.exit_code());
    return false;
  }
  if (auto s = stops.poll()) {
    why_not = signal_name(*s) + " arrived while the job was failing: not restarting";
    return false;
  }
  return true;
}

// The wait before restart `restart` (--restart-backoff); a stop signal ends it, and the job.
bool wait_before_restart(double delay_s, int restart, const Plan& p, size_t workers, StopSignals& stops) {
  log::warn("restarting all " + std::to_string(workers) + " worker(s) " +
            (delay_s > 0 ? "in " + seconds_text(delay_s) + " s " : std::string()) + "(restart " +
            std::to_string(restart) + " of " + std::to_string(p.opt.max_restart) +
            ", PADDLE_RESTART_COUNT=" + std::to_string(restart) + "; --restart-backoff " +
            describe(p.opt.restart_backoff) + ")");
  if (delay_s <= 0) return true;
  try {
    stops.wait_readable(-1, static_cast<int>(std::ceil(delay_s * 1000)), "waiting to restart");
  } catch (const StopRequested& e) {
    log::warn(signal_name(e.sig()) + " arrived during the wait before restart " + std::to_string(restart) +
              ": not restarting");
    return false;
  }
  return true;
}

// Ctrl-C through `launch ... | tee log`: the same SIGINT ends tee, so what the workers print while
// they stop (train_resnet's "continue with --resume PATH") finds no reader on stdout and is only in
// the logs. Where the launcher's signal ended the job and stdout's reader had gone, rank 0's last
// lines go to stderr (usually still the terminal) too.
void repeat_last_words(const JobOutcome& o, const ConsoleStreams& console) {
  if (!o.policy.launcher_signal() || !console.out || !console.out->reader_gone() || console.out == console.err) return;
  for (const WorkerRecord& r : o.records) {
    if (r.rank != 0 || r.tail.empty()) continue;
    log::info("stdout's reader went away before the job ended; rank 0's last lines (all of them in " + r.log_path + "):");
    const size_t n = std::min<size_t>(r.tail.size(), 3);
    for (size_t k = r.tail.size() - n; k < r.tail.size(); ++k) log::info("[rank 0] " + r.tail[k]);
  }
}

// What a job keeps from one generation of workers to the next.
struct JobRun {
  JobRun(Plan& plan, const ConsoleStreams& streams, StopSignals& signals, JobMode& job_mode, SupervisorConfig config)
      : p(plan), console(streams), stops(signals), mode(job_mode), cfg(std::move(config)), backoff(plan.opt.restart_backoff) {}
  Plan& p;
  const ConsoleStreams& console;
  StopSignals& stops;
  JobMode& mode;
  SupervisorConfig cfg;
  RestartBackoff backoff;
  LogLocks log_locks;  // held until we exit, whatever the generation
  JobOutcome outcome;  // the last generation's
};

// Generation `gen`: its layout from the mode, its workers supervised to their end, the report.
// True where another generation follows (after a failure, once the back-off is waited out).
bool run_generation(JobRun& j, int gen) {
  Plan& p = j.p;
  const RankLayout layout = j.mode.start(gen);
  std::vector<int> ranks;
  for (int i = 0; i < p.n(); ++i) ranks.push_back(layout.first_rank + i);
  j.log_locks.hold(p.job.log_dir, ranks);  // a second launch on these workerlog.N is refused
  j.mode.install(j.cfg);
  // The first run truncates the logs if asked; a restart appends to what the failed run wrote.
  j.cfg.log_overwrite = p.opt.log_overwrite && gen == 0;
  const int restart_count = layout.restart_count.value_or(gen);
  const std::vector<WorkerPlan> plans = worker_plans(p, layout, restart_count);
  log::info("job " + p.job.job_id + ": " + std::to_string(p.n()) + " worker(s) of " +
            join_command(p.command, kLoggedCommandChars) + "; logs in " + p.job.log_dir +
            (layout.store_addr.empty() ? "" : "; store at " + layout.store_addr) +
            (gen > 0 && !layout.restart_count ? "; restart " + std::to_string(gen) + " of " + std::to_string(p.opt.max_restart)
                                                : ""));
  const auto started = std::chrono::steady_clock::now();
  JobOutcome& outcome = j.outcome;
  outcome = supervise(plans, j.cfg);
  outcome.restart_count = restart_count;
  std::string why_not;
  // The mode decides when it can (elastic membership re-forms), else --max_restart's rule.
  const std::optional<bool> decided = j.mode.another_generation(outcome, gen, j.stops);
  bool again = decided ? *decided : restart_follows(outcome, gen, p.opt.max_restart, j.stops, why_not);
  // A re-forming around a node that joins is no failure: no report, no back-off.
  const bool after_failure = again && !outcome.policy.reform();
  print_failure_report(outcome, p.job.log_dir, after_failure ? NextStep{restart_count + 1, p.opt.max_restart} : NextStep{});
  repeat_last_words(outcome, j.console);
  if (!why_not.empty()) log::error(why_not);
  if (after_failure) {
    const double ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    again = wait_before_restart(j.backoff.next(ran), restart_count + 1, p, plans.size(), j.stops);
  }
  j.mode.finish(outcome.policy.exit_code(), !again);
  return again;
}

// After the last generation: the requeue a stop signal asked for, the --summary file; the job's code.
int finish_job(const Plan& p, const JobOutcome& outcome) {
  const int code = outcome.policy.exit_code();
  // The workers have saved and ended: now the job may go back into the queue (a running job
  // that is requeued is killed, so not before).
  if (!p.requeue_job.empty() && outcome.policy.launcher_signal()) slurm::requeue_after_stop(p.requeue_job);
  if (!p.summary_path.empty()) {
    // The job's code is the job's: batch scripts branch on it. A summary that cannot be written
    // is worth a warning, not a different exit code.
    try {
      write_file_atomically(p.summary_path, summary_json(p.job.job_id, outcome));
    } catch (const std::exception& e) {
      log::warn(std::string("--summary not written: ") + e.what() + "; launch still exits with the job's code " +
                std::to_string(code));
    }
  }
  return code;
}

// The job itself: the mode, the log directory, then one generation of workers per run.
int run_job(Plan& p, const ConsoleStreams& console) {
  // From here on signals are read from one signalfd only; blocked before any thread exists.
  StopSignals stops(p.opt.checkpoint_signal.value_or(0), p.opt.extra_stop_signals);
  // The store, the other nodes and the workers depend on us from here on: a stalled stderr must
  // not hold up a message, let alone the supervisor or the store's thread.
  log::never_block();
  std::signal(SIGPIPE, SIG_IGN);  // a closed console (launch | head) must not kill the launcher
  std::unique_ptr<JobMode> mode = make_job_mode(p, stops);  // a bad --start_port fails before the log dir
  make_log_dir(p);
  // Cgroup, PID namespace or process groups (logged); makes us the subreaper of our orphans.
  const std::unique_ptr<Containment> containment = Containment::create();

  SupervisorConfig cfg;
  cfg.stream = p.opt.stream;
  cfg.grace_s = p.opt.grace_s;
  cfg.signal_fd = stops.fd();
  cfg.containment = containment.get();
  cfg.checkpoint_signal = p.opt.checkpoint_signal.value_or(0);
  cfg.console = console.out.get();
  cfg.log_console = console.err.get();

  JobRun job(p, console, stops, *mode, cfg);
  for (int gen = 0; run_generation(job, gen); ++gen) {
  }
  return finish_job(p, job.outcome);
}

int run_or_throw(int argc, char** argv, const ConsoleStreams& console) {
  const EnvMap parent = proto::process_env();
  const LauncherEnv own = launcher_env(parent);
  CliResult cli = parse_cli(argc, argv, own.env);
  if (!cli.options) {
    std::cout << cli.text;
    return 0;
  }
  log::init(cli.options->log_level);
  if (own.outer)
    log::info("inside another launcher's worker (" + *own.outer +
              " is set): the outer job's PADDLE_*, PET_*, SLURM_* and worker variables are ignored here, and "
              "this launch's workers get their own");
  for (const auto& w : cli.warnings) log::warn(w);
  for (const auto& d : cli.debug) log::debug(d);
  for (const auto& i : cli.infos) log::info(i);
  Plan plan = make_plan(*cli.options, parent);
  if (!plan.log_dir_note.empty()) log::info(plan.log_dir_note);
  return plan.opt.dry_run ? dry_run(plan) : run_job(plan, console);
}

}  // namespace

int run(int argc, char** argv) {
  // stdout and stderr as the launcher's console streams (one stream when they are one file).
  const ConsoleStreams console = open_console_streams();
  log::attach(console.err);
  int code = 1;
  std::string last_words;
  try {
    code = run_or_throw(argc, argv, console);
  } catch (const UsageError& e) {
    last_words = std::string("launch: error: ") + e.what() + "\n";
    code = 2;
  } catch (const JobOver& e) {
    last_words = std::string("launch: ") + e.what() + "\n";
    code = e.code();
  } catch (const StopRequested& e) {
    last_words = "launch: stopped by " + signal_name(e.sig()) + " while " + e.doing() + " (no worker was running)\n";
    code = exit_code_for_signal(e.sig());
  } catch (const std::exception& e) {
    last_words = std::string("launch: error: ") + e.what() + "\n";
    code = 1;
  }
  // After what is queued: written at once before the job began, bounded once it had.
  if (!last_words.empty()) log::raw(last_words);
  log::finish();
  return code;
}

}  // namespace launch
