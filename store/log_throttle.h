// A rate limit for log lines that strangers can cause (a refused or broken connection each
// writes one): a burst is logged line by line, then at most one line per interval, and what was
// held back is counted and said with the next line that is written. Pure: the caller passes
// the time.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace store {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  LogThrottle(size_t burst, std::chrono::milliseconds interval) : burst_(burst), interval_(interval) {}

  // The line to write for `msg` now, with the count held back before it; nullopt: hold it back.
  std::optional<std::string> admit(const std::string& msg, Clock::time_point now) {
    refill(now);
    if (tokens_ == 0) {
      ++held_;
      return std::nullopt;
    }
    --tokens_;
    return with_count(msg);
  }
  // For a periodic check: when lines were held back and the interval has passed since the last
  // line written, a summary line (e.g. "12 more refused connection(s) not logged").
  std::optional<std::string> flush(const std::string& what, Clock::time_point now) {
    refill(now);
    if (held_ == 0 || tokens_ == 0) return std::nullopt;
    --tokens_;
    std::string s = std::to_string(held_) + " more " + what + " not logged one by one";
    held_ = 0;
    return s;
  }
  size_t held() const { return held_; }
  // At the end: how many were held back since the last line written (and forget them).
  size_t take_held() {
    size_t n = held_;
    held_ = 0;
    return n;
  }

 private:
  void refill(Clock::time_point now) {
    if (!started_) {
      started_ = true;
      tokens_ = burst_;
      last_refill_ = now;
      return;
    }
    while (tokens_ < burst_ && now - last_refill_ >= interval_) {
      ++tokens_;
      last_refill_ += interval_;
    }
    if (tokens_ == burst_) last_refill_ = now;
  }
  std::string with_count(const std::string& msg) {
    if (held_ == 0) return msg;
    std::string s = msg + " (" + std::to_string(held_) + " similar line(s) before this one not logged)";
    held_ = 0;
    return s;
  }

  size_t burst_;
  std::chrono::milliseconds interval_;
  size_t tokens_ = 0;
  size_t held_ = 0;
  bool started_ = false;
  Clock::time_point last_refill_{};
};

}  // namespace store
