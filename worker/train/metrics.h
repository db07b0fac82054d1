// What a run records for people and tools: --metrics-file, one JSON object per line (rank 0).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace worker {

class MetricsLog {
 public:
  // Opens `path`, creating its folder; an empty path records nothing. Truncated, or appended to
  // when `resume_step` >= 0 (a resumed run continues the file of the run it resumes, issue 25):
  // then returns the `time` of the file's last record at a step up to resume_step (0 if none),
  // from which the resumed run's times go on.
  double open(const std::string& path, int64_t resume_step = -1);
  bool is_open() const { return file_.is_open(); }
  // One record, flushed at once (a killed run keeps every record written before).
  void write(const nlohmann::json& record);

 private:
  std::ofstream file_;
};

}  // namespace worker
