#include "proto/token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace proto {

void random_bytes(void* out, size_t n, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  size_t got = 0;
  while (got < n) {
    const ssize_t k = getrandom(p + got, n - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom failed while creating ") + what + ": " + std::strerror(errno));
    }
    got += static_cast<size_t>(k);
  }
}

std::string generate_token() {
  unsigned char bytes[32];
  random_bytes(bytes, sizeof bytes, "the store token");
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned char b : bytes) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  // volatile keeps the compiler from turning the loop into an early-exit memcmp.
  volatile unsigned char acc = 0;
  for (size_t i = 0; i < a.size(); ++i)
    acc = acc | static_cast<unsigned char>(a[i] ^ b[i]);
  return acc == 0;
}

}  // namespace proto
