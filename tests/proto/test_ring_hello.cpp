// The CPU ring's set-up messages (proto/ring_hello.h, proto/RING_PROTOCOL.md): bytes in, values out.
#include <catch2/catch.hpp>

#include <string>

#include "proto/ring_hello.h"

using namespace proto::ring;

namespace {

Nonce nonce_of(uint8_t first) {
  Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = uint8_t(first + i);
  return n;
}

std::string hex(const Mac& m) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : m) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

}  // namespace

TEST_CASE("ring hello: the documented bytes, little-endian, and back", "[proto][ring]") {
  const std::string h = encode_hello(3, 2, "ab", nonce_of(0));
  REQUIRE(h.size() == kHeaderSize + 44 + 2);
  // magic "RNG1", version 2, type 1 (HELLO), body 46 bytes; world 3, rank 2
  CHECK(h.substr(0, 16) == std::string("RNG1\x02\0\0\0\x01\0\0\0\x2e\0\0\0", 16));
  CHECK(h.substr(16, 8) == std::string("\x03\0\0\0\x02\0\0\0", 8));
  CHECK(h.substr(56, 6) == std::string("\x02\0\0\0ab", 6));
  const Decoded d = decode(h);
  REQUIRE(d.state == Parse::Ok);
  CHECK(d.consumed == h.size());
  CHECK(d.msg.type == Type::Hello);
  CHECK(d.msg.world == 3);
  CHECK(d.msg.rank == 2);
  CHECK(d.msg.job == "ab");
  CHECK(d.msg.nonce == nonce_of(0));

  Mac mac{};
  mac[0] = 0xaa;
  mac[31] = 0x55;
  const Decoded c = decode(encode_challenge(nonce_of(7), mac));
  REQUIRE(c.state == Parse::Ok);
  CHECK(c.msg.type == Type::Challenge);
  CHECK(c.msg.nonce == nonce_of(7));
  CHECK(c.msg.mac == mac);
  const Decoded p = decode(encode_proof(mac));
  REQUIRE(p.state == Parse::Ok);
  CHECK(p.msg.mac == mac);
  const Decoded v = decode(encode_verdict(Verdict::WrongRank));
  REQUIRE(v.state == Parse::Ok);
  CHECK(v.msg.verdict == Verdict::WrongRank);
}

TEST_CASE("ring hello: a partial message waits, asking for no more than it lacks", "[proto][ring]") {
  const std::string h = encode_hello(2, 1, "default", nonce_of(1));
  for (size_t n = 0; n < h.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK(decode(h.substr(0, n)).state == Parse::NeedMore);
    CHECK(bytes_wanted(h.substr(0, n)) == (n < kHeaderSize ? kHeaderSize - n : h.size() - n));
  }
  CHECK(bytes_wanted(h) == 0);
  // Two messages in one buffer: the first is decoded, the second left.
  const Decoded d = decode(h + encode_proof(Mac{}));
  REQUIRE(d.state == Parse::Ok);
  CHECK(d.consumed == h.size());
}

TEST_CASE("ring hello: strangers' bytes are refused from the header alone", "[proto][ring]") {
  // Not a ring peer: refused at its first byte.
  CHECK(decode("G").state == Parse::Error);
  CHECK(bytes_wanted("GET / HTTP/1.1\r\n") == 0);
  // Version 1's 20-byte hello (the form the attacker sent): a version, not garbage.
  const std::string v1("RNG1\x01\0\0\0\x02\0\0\0\x01\0\0\0\x07\0\0\0", 20);
  const Decoded old = decode(v1);
  REQUIRE(old.state == Parse::Error);
  CHECK_THAT(old.error, Catch::Contains("version 1"));
  // A body longer than its type allows, whatever it claims (up to 2^32 - 1): no byte of it is read.
  std::string huge = encode_hello(2, 1, "x", nonce_of(0)).substr(0, 12) + std::string("\xff\xff\xff\xff", 4);
  CHECK(decode(huge).state == Parse::Error);
  CHECK(bytes_wanted(huge) == 0);
  std::string long_job = encode_hello(2, 1, "", nonce_of(0));
  long_job[12] = char(44 + kMaxJobId + 1);
  long_job[13] = char((44 + kMaxJobId + 1) >> 8);
  CHECK(decode(long_job).state == Parse::Error);
  // A proof of the wrong length, an unknown type, an unknown verdict, a job length that
  // disagrees with the body.
  std::string proof = encode_proof(Mac{});
  proof[12] = 31;
  CHECK(decode(proof).state == Parse::Error);
  std::string type = encode_proof(Mac{});
  type[8] = 9;
  CHECK_THAT(decode(type).error, Catch::Contains("unknown type 9"));
  std::string verdict = encode_verdict(Verdict::Accepted);
  verdict[16] = char(kMaxVerdict + 1);
  CHECK(decode(verdict).state == Parse::Error);
  std::string job = encode_hello(2, 1, "abc", nonce_of(0));
  job[56] = 2;  // claims 2 bytes, the body holds 3
  CHECK(decode(job).state == Parse::Error);
  CHECK_THROWS(encode_hello(2, 1, std::string(kMaxJobId + 1, 'j'), nonce_of(0)));
}

TEST_CASE("ring MACs: keyed by the token, bound to both nonces, every field and the role", "[proto][ring]") {
  Transcript t{"ring/world/0", "default", 2, 1, nonce_of(0), nonce_of(100)};
  const Mac a = transcript_mac("secret", Role::Acceptor, t);
  const Mac c = transcript_mac("secret", Role::Connector, t);
  CHECK(a == transcript_mac("secret", Role::Acceptor, t));
  CHECK_FALSE(a == c);  // the acceptor's MAC is no proof for a connector
  CHECK(mac_equal(a, transcript_mac("secret", Role::Acceptor, t)));
  CHECK_FALSE(mac_equal(a, c));
  CHECK_FALSE(c == transcript_mac("other", Role::Connector, t));
  CHECK_FALSE(c == transcript_mac("", Role::Connector, t));
  auto changed = [&](auto&& edit) {
    Transcript u = t;
    edit(u);
    return !(transcript_mac("secret", Role::Connector, u) == c);
  };
  CHECK(changed([](Transcript& u) { u.ring = "ring/world/1"; }));  // another restart's ring
  CHECK(changed([](Transcript& u) { u.job = "defaulu"; }));
  CHECK(changed([](Transcript& u) { u.world = 3; }));
  CHECK(changed([](Transcript& u) { u.connector = 0; }));
  CHECK(changed([](Transcript& u) { u.connector_nonce[5] ^= 1; }));
  CHECK(changed([](Transcript& u) { u.acceptor_nonce[31] ^= 1; }));  // a replayed proof
  // The specification's example (RING_PROTOCOL.md), computed with Python's hmac module.
  CHECK(hex(c) == "afd04e8ddc6aa2a5a98ed77bb555b49ad4b9371b6bb64cca3be9896ecee6007e");
  CHECK_FALSE(random_nonce() == random_nonce());
}
