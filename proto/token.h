// The per-job store token: 32 random bytes from the kernel, as 64 hex characters.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace proto {

// 64 lowercase hex characters from 32 bytes of getrandom(2). Throws std::runtime_error if the
// kernel cannot supply them.
std::string generate_token();

// n bytes of getrandom(2) (the token's source, also the ring's nonces). Throws
// std::runtime_error naming `what` if the kernel cannot supply them.
void random_bytes(void* out, size_t n, const char* what);

// HMAC-SHA256 of `message` keyed with `token` (OpenSSL's libcrypto; an empty token is an empty
// key). Throws std::runtime_error if libcrypto fails.
std::array<uint8_t, 32> hmac_sha256(std::string_view token, std::string_view message);

// What a shared record may hold to let nodes check that they have the same token without
// publishing it: HMAC-SHA256(token, "launch token fingerprint v1\0" + context), 64 hex
// characters. `context` (e.g. the job id) keeps one job's fingerprint from matching another's.
std::string token_fingerprint(std::string_view token, std::string_view context);

// Compares in time independent of where the inputs differ (only their lengths leak).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace proto
