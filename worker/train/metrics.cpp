#include "worker/train/metrics.h"

#include <stdexcept>

#include "worker/train/checkpoint.h"

namespace worker {

void MetricsLog::open(const std::string& path) {
  if (path.empty()) return;
  ensure_parent_dir(path);
  file_.open(path, std::ios::trunc);
  if (!file_) throw std::runtime_error("cannot write --metrics-file '" + path + "'");
}

void MetricsLog::write(const nlohmann::json& record) {
  if (file_.is_open()) file_ << record.dump() << "\n" << std::flush;
}

}  // namespace worker
