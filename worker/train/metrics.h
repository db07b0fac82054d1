// What a run records for people and tools: --metrics-file, one JSON object per line (rank 0).
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace worker {

class MetricsLog {
 public:
  // Opens (truncates) `path`, creating its folder; an empty path records nothing.
  void open(const std::string& path);
  bool is_open() const { return file_.is_open(); }
  // One record, flushed at once (a killed run keeps every record written before).
  void write(const nlohmann::json& record);

 private:
  std::ofstream file_;
};

}  // namespace worker
