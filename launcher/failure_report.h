// How a generation of the job ended, told on stderr: the root cause (the rank that failed first,
// how, its log's last lines and, for a PyTorch rank, the exception its error file holds), a
// failure on another node, a signal, or success.
#pragma once

#include <string>

#include "launcher/supervisor.h"

namespace launch {

// `log_dir`: where the ranks' error files are (worker_error_file).
void print_failure_report(const JobOutcome& outcome, const std::string& log_dir);

}  // namespace launch
