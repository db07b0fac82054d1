#include "launcher/etcd/base64.h"

#include <array>
#include <cstdint>

namespace launch::etcd {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The value of each character, -1 where it is not in the alphabet.
constexpr std::array<int8_t, 256> decoding_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr auto kDecode = decoding_table();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += kAlphabet[n >> 6 & 63];
    out += kAlphabet[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += rest == 2 ? kAlphabet[n >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t data_chars = last ? 4 - pad : 4;
    uint32_t n = 0;
    for (size_t k = 0; k < 4; ++k) {
      int v = 0;
      if (k < data_chars) {
        v = kDecode[static_cast<unsigned char>(text[i + k])];
        if (v < 0) return std::nullopt;  // includes a '=' before the end
      }
      n = n << 6 | uint32_t(v);
    }
    out += char(n >> 16 & 0xff);
    if (data_chars >= 3) out += char(n >> 8 & 0xff);
    if (data_chars == 4) out += char(n & 0xff);
    // The bits below the last byte must be zero: otherwise two texts would decode alike.
    if (data_chars == 3 && (n & 0xff) != 0) return std::nullopt;
    if (data_chars == 2 && (n & 0xffff) != 0) return std::nullopt;
  }
  return out;
}

}  // namespace launch::etcd
