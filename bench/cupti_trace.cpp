// libcupti_trace.so: where a GPU process's device time goes, on machines without Nsight Systems.
//
//   CUDA_INJECTION64_PATH=/path/to/libcupti_trace.so train_resnet ...
//
// The CUDA driver loads the library at cuInit and calls InitializeInjection(). CUPTI's activity
// API then records every kernel, memcpy and memset (start, end, stream) and every runtime/driver
// call (its end); at exit, stderr gets, over the last part of the run (CUPTI_TRACE_FROM, the
// fraction of the run skipped as warm-up, default 0.3):
//   - per stream: operations, busy time and its share of the window, the idle gaps between them,
//     mean queue latency;
//   - per stream and operation name: count, total and mean duration, the mean gap before it, mean
//     and worst queue latency, the CUPTI_TRACE_TOP (default 12) largest of each stream.
// Queue latency is the device start minus the end of the call that enqueued it: work that waits
// behind other work (its stream's, or another stream's sharing its hardware queue) shows here.
// This is how the JPEG pipeline's stall was found (docs/benchmarks.md, "Data loading").
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Op {
  uint32_t stream;
  std::string name;
  uint64_t start, end;
  uint32_t correlation;
  uint64_t bytes;
};

struct Trace {
  std::mutex mu;
  std::vector<Op> ops;
  std::unordered_map<uint32_t, uint64_t> call_end;  // correlation id -> end of the API call
  std::unordered_map<std::string, std::string> short_names;  // mangled kernel name -> short_name's
};

Trace& trace() {
  static Trace* t = new Trace;  // never destroyed: the report runs from atexit
  return *t;
}

// A kernel's name as the report prints it: demangled, without our namespaces and the parameter
// list and return type (the template arguments kept: they tell a kernel's variants apart), at most 90 characters.
std::string short_name(const char* mangled) {
  int status = -1;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  for (const char* drop : {"worker::gpu::", "(anonymous namespace)::"})
    for (size_t at; (at = s.find(drop)) != std::string::npos;) s.erase(at, std::string(drop).size());
  if (status == 0 && !s.empty() && s.back() == ')') {  // the parameter list: from its matching '('
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
      if (depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);  // a kernel's return type
  if (s.size() > 90) s.resize(90);
  return s;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
        const char* mangled = k->name ? k->name : "?";
        auto it = t.short_names.find(mangled);
        if (it == t.short_names.end()) it = t.short_names.emplace(mangled, short_name(mangled)).first;
        t.ops.push_back({k->streamId, it->second, k->start, k->end, k->correlationId, 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
        const char* kind = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy HtoD"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy DtoH"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "memcpy DtoD"
                                                                             : "memcpy other";
        t.ops.push_back({m->streamId, kind, m->start, m->end, m->correlationId, m->bytes});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
        t.ops.push_back({m->streamId, "memset", m->start, m->end, m->correlationId, m->bytes});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
        t.call_end[a->correlationId] = a->end;
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

struct Sum {
  int64_t n = 0, queued = 0;
  double busy_us = 0, queue_us = 0, worst_queue_us = 0, gap_us = 0;
  uint64_t bytes = 0;
  void add(const Op& op, const double* queue, double gap) {
    ++n;
    gap_us += gap;
    busy_us += double(op.end - op.start) * 1e-3;
    bytes += op.bytes;
    if (queue) {
      ++queued;
      queue_us += *queue;
      worst_queue_us = std::max(worst_queue_us, *queue);
    }
  }
  double mean_queue() const { return queued ? queue_us / double(queued) : 0.0; }
};

void report() {
  cuptiActivityFlushAll(1);
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  if (t.ops.empty()) return;
  uint64_t first = UINT64_MAX, last = 0;
  for (const Op& op : t.ops) {
    first = std::min(first, op.start);
    last = std::max(last, op.end);
  }
  const double skip = std::clamp(env_double("CUPTI_TRACE_FROM", 0.3), 0.0, 0.99);
  const uint64_t from = first + uint64_t(double(last - first) * skip);
  std::map<uint32_t, Sum> per_stream;
  std::map<std::pair<uint32_t, std::string>, Sum> per_op;
  // The gap before an operation: its start minus the end of the one before it on its stream, where
  // that one is in the window too (idle time that the graph's node-to-node latency explains).
  std::sort(t.ops.begin(), t.ops.end(), [](const Op& a, const Op& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.start < b.start;
  });
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const Op& op = t.ops[i];
    if (op.start < from) continue;
    const auto it = t.call_end.find(op.correlation);
    const bool known = it != t.call_end.end() && op.start > it->second;
    const double queue = known ? double(op.start - it->second) * 1e-3 : 0.0;
    const Op* prev = i > 0 && t.ops[i - 1].stream == op.stream && t.ops[i - 1].start >= from ? &t.ops[i - 1] : nullptr;
    const double gap = prev && op.start > prev->end ? double(op.start - prev->end) * 1e-3 : 0.0;
    per_stream[op.stream].add(op, known ? &queue : nullptr, gap);
    per_op[{op.stream, op.name}].add(op, known ? &queue : nullptr, gap);
  }
  const double window_us = double(last - from) * 1e-3;
  std::fprintf(stderr, "cupti_trace: the last %.0f%% of the run, %.1f ms\n", 100.0 * (1.0 - skip), window_us * 1e-3);
  for (const auto& [stream, s] : per_stream) {
    std::fprintf(stderr,
                 "cupti_trace: stream %u: %lld ops, busy %.1f ms (%.1f%%), gaps between them %.1f ms, mean queue latency "
                 "%.1f us\n",
                 stream, static_cast<long long>(s.n), s.busy_us * 1e-3, 100.0 * s.busy_us / window_us, s.gap_us * 1e-3,
                 s.mean_queue());
  }
  std::vector<std::pair<std::pair<uint32_t, std::string>, Sum>> ops(per_op.begin(), per_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.busy_us > b.second.busy_us; });
  const int top = std::max(1, int(env_double("CUPTI_TRACE_TOP", 12)));
  std::map<uint32_t, int> shown;
  for (const auto& [key, s] : ops) {
    if (shown[key.first]++ >= top) continue;
    std::fprintf(stderr,
                 "cupti_trace:   stream %u %-90s n %7lld total %9.1f ms mean %8.1f us gap before %6.2f us queue mean "
                 "%8.1f worst %9.1f us",
                 key.first, key.second.c_str(), static_cast<long long>(s.n), s.busy_us * 1e-3, s.busy_us / double(s.n),
                 s.gap_us / double(s.n), s.mean_queue(), s.worst_queue_us);
    if (s.bytes) std::fprintf(stderr, " bytes/op %llu", static_cast<unsigned long long>(s.bytes / uint64_t(s.n)));
    std::fprintf(stderr, "\n");
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_trace: cuptiActivityRegisterCallbacks failed: no trace\n");
    return 0;
  }
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER}) {
    if (cuptiActivityEnable(kind) != CUPTI_SUCCESS) std::fprintf(stderr, "cupti_trace: activity kind %d refused\n", int(kind));
  }
  std::atexit(report);
  return 1;
}
