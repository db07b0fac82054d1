// Exponential back-off between restarts (--restart-backoff INITIAL[:MAX]). Without it a worker
// that always fails ran --max_restart 50 generations in 287 ms: a crash loop that floods the
// logs and the store, and hammers whatever the workers fail on (a file system, a license
// server, the network). torchrun and paddle restart at once; launch waits INITIAL seconds
// before the first restart, doubling after each failed generation up to MAX, and starts over
// at INITIAL after a generation that ran kBackoffResetS (Kubernetes' rule for CrashLoopBackOff:
// a long run means the failure was not the crash loop). Pure: the caller measures the time.
#pragma once

#include <string>

namespace launch {

struct BackoffSpec {
  double initial_s = 1;  // 0: restart at once (torchrun's behaviour)
  double max_s = 60;
};

// A generation that ran this long resets the delay to INITIAL.
inline constexpr double kBackoffResetS = 600;

// "INITIAL" or "INITIAL:MAX" in seconds (MAX defaults to 60, or to INITIAL when that is larger).
// Throws UsageError naming what is wrong.
BackoffSpec parse_restart_backoff(const std::string& text);
std::string describe(const BackoffSpec& s);  // "1 s doubling to 60 s", "none"

class RestartBackoff {
 public:
  explicit RestartBackoff(BackoffSpec spec) : spec_(spec) {}
  // The wait before the next generation, after one that failed having run `ran_s` seconds.
  double next(double ran_s);

 private:
  BackoffSpec spec_;
  double current_ = 0;  // the last delay handed out; 0: none yet
};

}  // namespace launch
