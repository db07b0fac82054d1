#include "worker/train/checksum.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace worker {

void ParamChecksum::add(const float* data, size_t n) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data);
  uint64_t h = fnv;
  for (size_t i = 0; i < n * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  fnv = h;
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += double(data[i]);
  sum += s;
  count += n;
}

std::string ParamChecksum::str() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "fnv1a64=%016" PRIx64 " sum=%.9e n=%" PRIu64, fnv, sum, count);
  return buf;
}

}  // namespace worker
