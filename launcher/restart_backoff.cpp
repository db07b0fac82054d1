#include "launcher/restart_backoff.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "launcher/errors.h"
#include "launcher/seconds.h"

namespace launch {

namespace {

// Seconds, 0 to a day; strtod's full syntax except what is not a plain number (nan, inf, hex).
double seconds(const std::string& part, const std::string& whole) {
  char* end = nullptr;
  const double v = part.empty() || part.find_first_not_of("0123456789.") != std::string::npos
                       ? -1
                       : std::strtod(part.c_str(), &end);
  if (v < 0 || !end || *end != '\0' || v > 86400)
    throw UsageError("--restart-backoff '" + whole + "' must be INITIAL or INITIAL:MAX, seconds from 0 to 86400 "
                     "(e.g. 1:60; 0 restarts at once)");
  return v;
}

}  // namespace

BackoffSpec parse_restart_backoff(const std::string& text) {
  const size_t colon = text.find(':');
  BackoffSpec s;
  s.initial_s = seconds(text.substr(0, colon), text);
  s.max_s = colon == std::string::npos ? std::max(s.initial_s, BackoffSpec{}.max_s)
                                        : seconds(text.substr(colon + 1), text);
  if (s.max_s < s.initial_s)
    throw UsageError("--restart-backoff '" + text + "': MAX (" + seconds_text(s.max_s) + " s) is below INITIAL (" +
                     seconds_text(s.initial_s) + " s)");
  return s;
}

std::string describe(const BackoffSpec& s) {
  if (s.initial_s == 0) return "none";
  if (s.max_s == s.initial_s) return seconds_text(s.initial_s) + " s";
  return seconds_text(s.initial_s) + " s doubling to " + seconds_text(s.max_s) + " s";
}

double RestartBackoff::next(double ran_s) {
  if (current_ == 0 || ran_s >= kBackoffResetS)
    current_ = spec_.initial_s;
  else
    current_ = std::min(current_ * 2, spec_.max_s);
  return current_;
}

}  // namespace launch
