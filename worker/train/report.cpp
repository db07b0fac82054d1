#include "worker/train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace worker {

std::string strf(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string hms(double seconds) {
  const int64_t s = std::llround(std::max(seconds, 0.0));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                (long long)(s % 60));
  return buf;
}

namespace {
std::string mb(size_t bytes) { return strf("%.1f MB", double(bytes) / 1e6); }
}  // namespace

std::string startup_line(const StartupFigures& f) {
  std::ostringstream s;
  s << "Start-up: the first step ended " << strf("%.2f", f.total()) << " s after the "
    << (f.to_session >= 0 ? "process started (to the training session " + strf("%.2f", f.to_session) + ", "
                          : std::string("training session began ("))
    << "data " << strf("%.2f", f.data) << ", model " << strf("%.2f", f.model) << ", weights "
    << strf("%.2f", f.weights) << ", first step " << strf("%.2f", f.first_step);
  if (!f.backend.empty()) {
    s << "; the backend's parts:";
    for (size_t i = 0; i < f.backend.size(); ++i)
      s << (i ? ", " : " ") << f.backend[i].first << " " << strf("%.2f", f.backend[i].second);
  }
  s << ")";
  return s.str();
}

double seconds_since_process_start() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1.0;
  // Field 22, starttime (clock ticks after boot); field 2, the command's name, may hold spaces
  // and parentheses, so the count starts after its last ')', at field 3.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1.0;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(fields >> field)) return -1.0;
  timespec now{};
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1.0;
  const double started = double(std::strtoull(field.c_str(), nullptr, 10)) / double(ticks);
  const double since = double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - started;
  return since >= 0 ? since : -1.0;
}

void print_run_figures(std::ostream& out, const RunFigures& f) {
  if (f.steps > 0) {
    out << "Throughput: " << strf("%.1f", f.images_per_s) << " images/s (" << f.world << " rank(s), " << f.steps
        << " steps, first step" << (f.eval_s > 0 ? " and validation" : "") << " excluded), total "
        << strf("%.1f", f.total_s) << " s";
    if (f.eval_s > 0) out << " (validation " << strf("%.1f", f.eval_s) << " s)";
    out << std::endl;
  }
  if (f.loss_scaling) {
    out << "fp16 loss scaling: scale " << f.loss_scale << ", " << f.skipped_steps
        << " step(s) skipped for inf/NaN gradients" << std::endl;
  }
  out << "Peak device memory: " << strf("%.2f GB", double(f.peak_bytes) / 1e9) << " (rank 0, " << f.peak_bytes
      << " bytes)";
  if (f.world > 1) {
    out << ", " << strf("%.2f GB", double(f.peak_bytes_max_rank) / 1e9) << " (largest over " << f.world << " ranks)";
  }
  out << std::endl;
  if (f.zero) {
    out << "Optimizer state: " << mb(f.optimizer_bytes_max_rank) << " per rank (largest of " << f.world
        << "; unsharded " << mb(f.optimizer_bytes_unsharded) << ")" << std::endl;
  }
  if (f.comm) {
    const double k = double(f.comm->steps);
    out << (f.zero ? "Reduce-scatter: " : "All-reduce: ") << strf("%.2f", f.comm->allreduce_ms / k)
        << " ms per step on the communication stream, " << strf("%.2f", f.comm->exposed_ms / k)
        << " ms of it after backward ended (not overlapped), " << f.comm->steps << " steps" << std::endl;
  }
}

nlohmann::json final_record(const RunFigures& f) {
  nlohmann::json j = {{"final", true}, {"steps", f.steps}, {"throughput_images_per_s", f.images_per_s},
                      {"eval_s", f.eval_s}, {"skipped_images", f.skipped_images},
                      {"peak_bytes", f.peak_bytes}, {"peak_bytes_max_rank", f.peak_bytes_max_rank}, {"world", f.world},
                      {"optimizer_state_bytes_max_rank", f.optimizer_bytes_max_rank}, {"recompute", f.recompute},
                      {"zero", f.zero_option}, {"fp32_weight_bytes", f.fp32_weight_bytes},
                      {"time", f.time}};
  if (f.first_step_s >= 0) j["first_step_s"] = f.first_step_s;
  if (f.comm) {
    j["allreduce_ms"] = f.comm->allreduce_ms / double(f.comm->steps);
    j["allreduce_exposed_ms"] = f.comm->exposed_ms / double(f.comm->steps);
  }
  return j;
}

void print_memory(std::ostream& out, const std::vector<std::pair<std::string, size_t>>& all, size_t peak) {
  std::vector<std::pair<std::string, size_t>> items;
  size_t pool_free = 0;
  for (const auto& kv : all) {
    if (kv.first.rfind("pool reserved", 0) == 0) {
      pool_free = kv.second;  // not handed out: not part of the peak
      continue;
    }
    items.push_back(kv);
  }
  size_t sum = 0;
  for (const auto& kv : items) sum += kv.second;
  out << "Memory (rank 0, " << mb(peak) << " peak):" << std::endl;
  for (const auto& kv : items) out << "  " << kv.first << ": " << mb(kv.second) << std::endl;
  out << "  other: " << mb(peak > sum ? peak - sum : 0) << std::endl;
  if (pool_free > 0) out << "  (pool overhead: " << mb(pool_free) << " reserved beyond the peak)" << std::endl;
}

std::string differing_ranks(const std::vector<ParamChecksum>& all, const ParamChecksum& mine) {
  std::string differing;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!(all[r] == mine)) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  return differing;
}

std::string checksum_verdict(int world, const std::string& differing) {
  if (differing.empty()) return "Checksums: all " + std::to_string(world) + " rank(s) agree";
  return "Checksums: ranks " + differing + " DIFFER from rank 0";
}

std::string summary_line(const RunSummary& s) {
  std::ostringstream out;
  out << "Summary: " << s.steps << " steps in " << hms(s.total_s) << ", " << strf("%.1f", s.images_per_s)
      << " images/s";
  if (s.last_top1 >= 0) {
    out << "; validation top-1 best " << strf("%.2f", s.best_top1) << " %";
    if (s.best_epoch >= 0) out << " (epoch " << s.best_epoch << ")";
    out << ", last " << strf("%.2f", s.last_top1) << " %";
  }
  if (!s.checkpoint.empty()) {
    out << "; checkpoint " << s.checkpoint;
    if (!s.best_weights.empty()) out << ", best " << s.best_weights;
  }
  if (!s.tensorboard.empty()) out << "; TensorBoard " << s.tensorboard;
  if (s.skipped_images) out << "; " << *s.skipped_images << " unreadable image read(s) skipped (all ranks)";
  return out.str();
}

}  // namespace worker
