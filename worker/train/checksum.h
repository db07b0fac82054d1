// A checksum of the model's parameters, printed by every rank at the end of training and
// compared across ranks: FNV-1a (64-bit) over the fp32 bytes, which changes with any bit of
// any parameter, plus their sum in double precision, which is readable by a human.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace worker {

struct ParamChecksum {
  uint64_t fnv = 0xcbf29ce484222325ULL;  // FNV-1a offset basis: the hash of nothing
  double sum = 0.0;
  uint64_t count = 0;

  void add(const float* data, size_t n);
  bool operator==(const ParamChecksum& o) const { return fnv == o.fnv && count == o.count; }
  std::string str() const;  // "fnv1a64=0123456789abcdef sum=1.234567890e+02 n=123"
};

}  // namespace worker
