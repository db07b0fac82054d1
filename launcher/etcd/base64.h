// Base64 (RFC 4648, standard alphabet, with padding): how etcd's JSON gateway carries keys and
// values, which are bytes in its protocol buffers. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace launch::etcd {

std::string base64_encode(std::string_view bytes);

// Strict: only the standard alphabet, length a multiple of 4, '=' only as the last one or two
// characters, and zero bits after the last byte (what Go's encoding/base64 writes). nullopt for
// anything else, so that a corrupted answer is never taken for a key.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace launch::etcd
