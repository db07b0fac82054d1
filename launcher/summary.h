// `--summary FILE`: one JSON record per rank, written atomically (temporary name, then rename).
#pragma once

#include <string>

#include "launcher/supervisor.h"

namespace launch {

std::string summary_json(const std::string& job_id, const JobOutcome& outcome);
std::string iso8601_utc(double unix_seconds);  // "2026-11-29T18:31:49.123Z"
// Throws SystemError; never leaves a half-written `path` behind.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace launch
