// A number of seconds in messages as the user would write it (%g): "2.5", "10", "0.25", never
// std::to_string's "2.500000".
#pragma once

#include <cstdio>
#include <string>

namespace launch {

inline std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace launch
