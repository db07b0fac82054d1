#include "proto/ring_hello.h"

#include <stdexcept>

#include "proto/token.h"

namespace proto::ring {

namespace {

constexpr size_t kHelloFixed = 4 + 4 + kNonceSize + 4;  // world, rank, nonce, job length

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string header(Type t, size_t body) {
  std::string out;
  out.reserve(kHeaderSize + body);
  put_u32(out, kMagic);
  put_u32(out, kVersion);
  put_u32(out, static_cast<uint32_t>(t));
  put_u32(out, static_cast<uint32_t>(body));
  return out;
}

template <size_t N>
void put_bytes(std::string& out, const std::array<uint8_t, N>& a) {
  out.append(reinterpret_cast<const char*>(a.data()), N);
}
template <size_t N>
void get_bytes(const char* p, std::array<uint8_t, N>* a) {
  for (size_t i = 0; i < N; ++i) (*a)[i] = static_cast<uint8_t>(p[i]);
}

// The body length a type allows: exactly `min` bytes, or for HELLO up to the job id's limit.
struct BodyRule {
  size_t min = 0, max = 0;
};
bool body_rule(uint32_t type, BodyRule* r) {
  switch (type) {
    case uint32_t(Type::Hello): *r = {kHelloFixed, kHelloFixed + kMaxJobId}; return true;
    case uint32_t(Type::Challenge): *r = {kNonceSize + kMacSize, kNonceSize + kMacSize}; return true;
    case uint32_t(Type::Proof): *r = {kMacSize, kMacSize}; return true;
    case uint32_t(Type::Verdict): *r = {4, 4}; return true;
    default: return false;
  }
}

Decoded error(std::string msg) {
  Decoded d;
  d.state = Parse::Error;
  d.error = std::move(msg);
  return d;
}

// The header's verdict: Ok with the body's length in `consumed` (header excluded), or an error.
Decoded check_header(std::string_view buf) {
  // The magic byte by byte as it arrives: anything that is not a ring peer is refused at once.
  for (size_t i = 0; i < 4 && i < buf.size(); ++i) {
    if (static_cast<uint8_t>(buf[i]) != uint8_t(kMagic >> (8 * i))) return error("not a ring peer (bad magic)");
  }
  if (buf.size() < kHeaderSize) return {};
  const uint32_t version = get_u32(buf.data() + 4);
  if (version != kVersion) {
    return error("speaks ring protocol version " + std::to_string(version) + ", this worker " +
                 std::to_string(kVersion) + " (mixed train_resnet builds?)");
  }
  const uint32_t type = get_u32(buf.data() + 8);
  const uint32_t len = get_u32(buf.data() + 12);
  BodyRule rule;
  if (!body_rule(type, &rule)) return error("sent a message of unknown type " + std::to_string(type));
  if (len < rule.min || len > rule.max) {
    return error("sent a message of type " + std::to_string(type) + " with a body of " + std::to_string(len) +
                 " bytes (allowed: " + std::to_string(rule.min) +
                 (rule.max == rule.min ? "" : " to " + std::to_string(rule.max)) + ")");
  }
  Decoded d;
  d.state = Parse::Ok;
  d.msg.type = static_cast<Type>(type);
  d.consumed = len;
  return d;
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Accepted: return "accepted";
    case Verdict::WrongJob: return "wrong job id";
    case Verdict::WrongWorld: return "wrong world size";
    case Verdict::WrongRank: return "wrong rank";
    case Verdict::BadProof: return "bad proof (another token, or a replayed set-up)";
  }
  return "unknown";
}

size_t bytes_wanted(std::string_view buf) {
  const Decoded h = check_header(buf);
  if (h.state == Parse::Error) return 0;
  if (h.state == Parse::NeedMore) return kHeaderSize - buf.size();
  const size_t total = kHeaderSize + h.consumed;
  return buf.size() >= total ? 0 : total - buf.size();
}

Decoded decode(std::string_view buf) {
  Decoded d = check_header(buf);
  if (d.state != Parse::Ok) return d;
  const size_t len = d.consumed;
  if (buf.size() < kHeaderSize + len) return {};
  const char* b = buf.data() + kHeaderSize;
  Message& m = d.msg;
  switch (m.type) {
    case Type::Hello: {
      m.world = get_u32(b);
      m.rank = get_u32(b + 4);
      get_bytes(b + 8, &m.nonce);
      const uint32_t job_len = get_u32(b + 8 + kNonceSize);
      if (job_len != len - kHelloFixed) {
        return error("sent a HELLO whose job id claims " + std::to_string(job_len) + " bytes, its body holds " +
                     std::to_string(len - kHelloFixed));
      }
      m.job.assign(b + kHelloFixed, job_len);
      break;
    }
    case Type::Challenge:
      get_bytes(b, &m.nonce);
      get_bytes(b + kNonceSize, &m.mac);
      break;
    case Type::Proof: get_bytes(b, &m.mac); break;
    case Type::Verdict: {
      const uint32_t v = get_u32(b);
      if (v > kMaxVerdict) return error("sent an unknown verdict " + std::to_string(v));
      m.verdict = static_cast<Verdict>(v);
      break;
    }
  }
  d.consumed = kHeaderSize + len;
  return d;
}

std::string encode_hello(uint32_t world, uint32_t rank, std::string_view job, const Nonce& nonce) {
  if (job.size() > kMaxJobId) {
    throw std::invalid_argument("ring hello: a job id of " + std::to_string(job.size()) + " bytes (at most " +
                                std::to_string(kMaxJobId) + ")");
  }
  std::string out = header(Type::Hello, kHelloFixed + job.size());
  put_u32(out, world);
  put_u32(out, rank);
  put_bytes(out, nonce);
  put_u32(out, static_cast<uint32_t>(job.size()));
  out.append(job.data(), job.size());
  return out;
}

std::string encode_challenge(const Nonce& nonce, const Mac& mac) {
  std::string out = header(Type::Challenge, kNonceSize + kMacSize);
  put_bytes(out, nonce);
  put_bytes(out, mac);
  return out;
}

std::string encode_proof(const Mac& mac) {
  std::string out = header(Type::Proof, kMacSize);
  put_bytes(out, mac);
  return out;
}

std::string encode_verdict(Verdict v) {
  std::string out = header(Type::Verdict, 4);
  put_u32(out, static_cast<uint32_t>(v));
  return out;
}

Mac transcript_mac(std::string_view token, Role role, const Transcript& t) {
  // Every field length-prefixed (or of fixed size), so no two transcripts share their bytes.
  std::string msg;
  auto str = [&msg](std::string_view s) {
    put_u32(msg, static_cast<uint32_t>(s.size()));
    msg.append(s.data(), s.size());
  };
  str("launch ring v2");
  str(role == Role::Acceptor ? "acceptor" : "connector");
  str(t.ring);
  str(t.job);
  put_u32(msg, t.world);
  put_u32(msg, t.connector);
  put_u32(msg, t.world == 0 ? 0 : (t.connector + 1) % t.world);
  put_bytes(msg, t.connector_nonce);
  put_bytes(msg, t.acceptor_nonce);
  try {
    return hmac_sha256(token, msg);
  } catch (const std::runtime_error&) {
    throw std::runtime_error("ring set-up: HMAC-SHA256 failed (OpenSSL's libcrypto)");
  }
}

bool mac_equal(const Mac& a, const Mac& b) {
  return constant_time_equal(std::string_view(reinterpret_cast<const char*>(a.data()), a.size()),
                             std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

Nonce random_nonce() {
  Nonce n{};
  random_bytes(n.data(), n.size(), "a ring set-up nonce");
  return n;
}

}  // namespace proto::ring
