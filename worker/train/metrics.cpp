#include "worker/train/metrics.h"

#include <stdexcept>

#include "worker/train/checkpoint.h"

namespace worker {

double MetricsLog::open(const std::string& path, int64_t resume_step) {
  if (path.empty()) return 0.0;
  ensure_parent_dir(path);
  double time = 0.0;
  if (resume_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (r.is_object() && r.contains("time") && r["time"].is_number() && r.contains("step") &&
          r["step"].is_number_integer() && r["step"].get<int64_t>() <= resume_step)
        time = r["time"].get<double>();
    }
  }
  file_.open(path, resume_step >= 0 ? std::ios::app : std::ios::trunc);
  if (!file_) throw std::runtime_error("cannot write --metrics-file '" + path + "'");
  return time;
}

void MetricsLog::write(const nlohmann::json& record) {
  if (file_.is_open()) file_ << record.dump() << "\n" << std::flush;
}

}  // namespace worker
