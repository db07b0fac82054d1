// The per-job store token: 32 random bytes from the kernel, as 64 hex characters.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace proto {

// 64 lowercase hex characters from 32 bytes of getrandom(2). Throws std::runtime_error if the
// kernel cannot supply them.
std::string generate_token();

// n bytes of getrandom(2) (the token's source, also the ring's nonces). Throws
// std::runtime_error naming `what` if the kernel cannot supply them.
void random_bytes(void* out, size_t n, const char* what);

// Compares in time independent of where the inputs differ (only their lengths leak).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace proto
