#include "proto/token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
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

namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace

std::string generate_token() {
  unsigned char bytes[32];
  random_bytes(bytes, sizeof bytes, "the store token");
  return hex(bytes, sizeof bytes);
}

std::array<uint8_t, 32> hmac_sha256(std::string_view token, std::string_view message) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  // OpenSSL's one-shot HMAC: a null key pointer is not an empty key, so point at a byte.
  static const unsigned char kEmpty = 0;
  const auto* key = token.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), out.data(), &len) == nullptr ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed (OpenSSL's libcrypto)");
  return out;
}

std::string token_fingerprint(std::string_view token, std::string_view context) {
  std::string msg("launch token fingerprint v1");
  msg.push_back('\0');
  msg.append(context.data(), context.size());
  const auto mac = hmac_sha256(token, msg);
  return hex(mac.data(), mac.size());
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
