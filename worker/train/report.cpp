#include "worker/train/report.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "worker/train/checksum.h"

namespace worker {

std::string strf(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

namespace {
std::string mb(size_t bytes) { return strf("%.1f MB", double(bytes) / 1e6); }
}  // namespace

void memory_report(std::ostream& out, const Model& model, const Ops& ops, size_t optimizer_bytes) {
  std::vector<std::pair<std::string, size_t>> items = model.memory_breakdown();
  items.emplace_back("optimizer state", optimizer_bytes);
  size_t pool_free = 0;
  for (auto& kv : ops.memory_breakdown()) {
    if (kv.first.rfind("pool reserved", 0) == 0) {
      pool_free = kv.second;  // not handed out: not part of the peak
      continue;
    }
    items.push_back(kv);
  }
  size_t sum = 0;
  for (const auto& kv : items) sum += kv.second;
  const size_t peak = ops.peak_bytes();
  out << "Memory (rank 0, " << mb(peak) << " peak):" << std::endl;
  for (const auto& kv : items) out << "  " << kv.first << ": " << mb(kv.second) << std::endl;
  out << "  other: " << mb(peak > sum ? peak - sum : 0) << std::endl;
  if (pool_free > 0) out << "  (pool overhead: " << mb(pool_free) << " reserved beyond the peak)" << std::endl;
}

bool report_checksums(const ModelState& st, Comm& comm, std::ostream& out) {
  const int rank = comm.rank(), world = comm.size();
  ParamChecksum cs;
  cs.add(st.params.data(), st.params.size());
  cs.add(st.buffers.data(), st.buffers.size());
  out << "rank " << rank << ": params checksum " << cs.str() << std::endl;
  struct Wire {
    uint64_t fnv, count;
    double sum;
  } mine{cs.fnv, cs.count, cs.sum};
  std::vector<Wire> all(static_cast<size_t>(world));
  comm.allgather_host(&mine, all.data(), sizeof(Wire));
  std::string differing;
  for (int r = 0; r < world; ++r) {
    if (all[size_t(r)].fnv != mine.fnv || all[size_t(r)].count != mine.count) {
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (rank == 0) {
    if (differing.empty()) {
      out << "Checksums: all " << world << " rank(s) agree" << std::endl;
    } else {
      out << "Checksums: ranks " << differing << " DIFFER from rank 0" << std::endl;
    }
  }
  return differing.empty();
}

}  // namespace worker
