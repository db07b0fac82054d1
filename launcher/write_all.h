// Writing a whole C string to a descriptor where only async-signal-safe calls are allowed:
// between fork and exec (spawn.cpp) and in the forked helpers of the containment. No
// allocation, no locks; gives up silently on an error (there is nobody left to tell).
#pragma once

#include <unistd.h>

#include <cstring>

namespace launch {

inline void write_all(int fd, const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace launch
