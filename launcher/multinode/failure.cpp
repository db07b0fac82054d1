#include "launcher/multinode/failure.h"

#include "launcher/exit_policy.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace launch::multinode {

// --- Records ---

std::string FailureRecord::describe() const {
  std::string where;
  if (node_rank >= 0) where = "node " + std::to_string(node_rank) + (host.empty() ? "" : " (" + host + ")");
  else if (!host.empty()) where = host;
  std::string what;
  if (rank >= 0) {
    what = "rank " + std::to_string(rank);
    if (signal > 0) {
      const char* abbrev = sigabbrev_np(signal);  // glibc: "SEGV"
      what += " killed by " + (abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signal)) +
              " (exit code " + std::to_string(exit_code) + ")";
    } else {
      what += " exited with code " + std::to_string(exit_code);
    }
    if (!reason.empty()) what += ": " + reason;
  } else {
    what = reason.empty() ? "failed" : reason;
  }
  return where.empty() ? what : where + ": " + what;
}

bool FailureRecord::operator==(const FailureRecord& o) const {
  return node_rank == o.node_rank && host == o.host && rank == o.rank && exit_code == o.exit_code &&
         signal == o.signal && reason == o.reason;
}

FailureRecord worker_failure(int node_rank, const std::string& host, int rank, int exit_code, int signal) {
  FailureRecord f;
  f.node_rank = node_rank;
  f.host = host;
  f.rank = rank;
  f.signal = signal;
  f.exit_code = signal > 0 ? exit_code_for_signal(signal) : exit_code;
  return f;
}

std::string encode_failure(const FailureRecord& f) {
  nlohmann::json j = {{"node", f.node_rank}, {"host", f.host},     {"rank", f.rank},
                      {"exit_code", f.exit_code}, {"signal", f.signal}, {"reason", f.reason}};
  return j.dump();
}

FailureRecord decode_failure(const std::string& text) {
  FailureRecord f;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_object()) throw std::invalid_argument("not an object");
    j.at("node").get_to(f.node_rank);
    j.at("host").get_to(f.host);
    j.at("rank").get_to(f.rank);
    j.at("exit_code").get_to(f.exit_code);
    j.at("signal").get_to(f.signal);
    j.at("reason").get_to(f.reason);
  } catch (const std::exception&) {
    f = FailureRecord{};
    f.reason = text;
  }
  return f;
}

// --- Heartbeats ---

HeartbeatTracker::HeartbeatTracker(std::vector<int> node_ranks, std::chrono::milliseconds timeout,
                                   Clock::time_point start)
    : ranks_(std::move(node_ranks)), seen_(ranks_.size(), Seen{0, start}), timeout_(timeout) {}

size_t HeartbeatTracker::index(int node_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), node_rank);
  if (it == ranks_.end()) throw std::out_of_range("node rank " + std::to_string(node_rank) + " is not watched");
  return size_t(it - ranks_.begin());
}

void HeartbeatTracker::observe(int node_rank, long long counter, Clock::time_point now) {
  Seen& s = seen_[index(node_rank)];
  if (counter != s.counter) {
    s.counter = counter;
    s.changed = now;
  }
}

std::vector<int> HeartbeatTracker::stale(Clock::time_point now) const {
  std::vector<int> out;
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (now - seen_[i].changed > timeout_) out.push_back(ranks_[i]);
  std::sort(out.begin(), out.end());
  return out;
}

std::chrono::milliseconds HeartbeatTracker::silent_for(int node_rank, Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - seen_[index(node_rank)].changed);
}

}  // namespace launch::multinode
