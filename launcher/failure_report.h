// How a generation of the job ended, told on stderr: the root cause (the rank that failed first,
// how, its log's last lines and, for a PyTorch rank, the exception its error file holds), a
// failure on another node, a signal, or success.
#pragma once

#include <string>

#include "launcher/supervisor.h"

namespace launch {

// What follows a failed generation, for the report's verdict line: "launch exits with 3", or
// "restart 2 of 5 follows" (restart 0: none follows).
struct NextStep {
  int restart = 0;
  int max_restart = 0;
};

// `log_dir`: where the ranks' error files are (worker_error_file).
void print_failure_report(const JobOutcome& outcome, const std::string& log_dir, NextStep next = {});

}  // namespace launch
