#include "launcher/failure_report.h"

#include "launcher/error_file.h"
#include "launcher/exit_policy.h"
#include "launcher/log.h"
#include "launcher/worker_env.h"

namespace launch {

namespace {

// Lines of a traceback shown; a deeper one keeps its first and its last lines (the exception).
constexpr size_t kTracebackLines = 40;

void print_python_error(const std::string& path, const PythonError& e) {
  log::error("error file: " + path);
  log::error("exception: " + e.message);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < e.traceback.size()) {
    size_t nl = e.traceback.find('\n', start);
    if (nl == std::string::npos) nl = e.traceback.size();
    lines.push_back(e.traceback.substr(start, nl - start));
    start = nl + 1;
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines.size() > kTracebackLines && i == kTracebackLines / 4) {
      log::error("  ! ... (" + std::to_string(lines.size() - kTracebackLines) + " line(s) of the traceback left out)");
      i = lines.size() - (kTracebackLines - kTracebackLines / 4);
    }
    log::error("  ! " + lines[i]);
  }
}

}  // namespace

void print_failure_report(const JobOutcome& o, const std::string& log_dir, NextStep next) {
  const auto& p = o.policy;
  const std::string verdict = next.restart > 0 ? "restart " + std::to_string(next.restart) + " of " +
                                                     std::to_string(next.max_restart) + " follows"
                                               : "launch exits with " + std::to_string(p.exit_code());
  if (const auto& root = p.root()) {
    const int r = root->rank;
    const WorkerRecord* rec = nullptr;
    for (const auto& w : o.records)
      if (w.rank == r) rec = &w;
    // A rank with no record (none of this launcher's workers) is named all the same, without
    // the details only a record holds.
    const std::string where =
        rec ? " (pid " + std::to_string(rec->pid) + ", " + launch::describe(rec->device) + ")" : "";
    log::error("==================== failure report ====================");
    log::error("root cause: rank " + std::to_string(r) + " " + root->description + where + "; " + verdict);
    const std::string error_file = worker_error_file(log_dir, r);
    if (auto e = read_error_file(error_file)) print_python_error(error_file, *e);
    if (rec) {
      log::error("log: " + rec->log_path + "; its last " + std::to_string(rec->tail.size()) + " line(s) of this run:");
      for (const auto& line : rec->tail) log::error("  | " + line);
    } else {
      log::error("rank " + std::to_string(r) + " is not one of this launcher's workers: no log of it here");
    }
    log::error("========================================================");
  } else if (auto remote = p.remote_failure()) {
    log::error("==================== failure report ====================");
    log::error("root cause, on another node: " + *remote + "; " + verdict);
    log::error("========================================================");
  } else if (auto s = p.launcher_signal()) {
    log::warn("job stopped by " + signal_name(*s) + "; launch exits with " + std::to_string(exit_code_for_signal(*s)));
  } else {
    log::info("all " + std::to_string(o.records.size()) + " worker(s) exited with code 0");
  }
  if (!o.stragglers.empty())
    log::error(std::to_string(o.stragglers.size()) + " process(es) could not be killed: " +
               describe_processes(o.stragglers) + "; " + o.stragglers_left);
}

}  // namespace launch
