// Frame codec: round trips for every op and status, every limit, truncation at every offset.
#include <catch2/catch.hpp>

#include <cstring>

#include "proto/codec.h"

using namespace proto;

namespace {

std::vector<Request> one_of_each_op() {
  std::vector<Request> v;
  Request q;
  q.op = Op::Hello; q.job_id = "job-1"; q.token = std::string(64, 'a'); q.client_name = "rank 3";
  v.push_back(q);
  q = Request{}; q.op = Op::Set; q.key = "nccl/uid/0"; q.value = std::string("\0\1\2bin", 6); v.push_back(q);
  q = Request{}; q.op = Op::Get; q.key = "k"; q.timeout_ms = 300000; v.push_back(q);
  q = Request{}; q.op = Op::Add; q.key = "counter"; q.delta = -5; v.push_back(q);
  q = Request{}; q.op = Op::Check; q.keys = {"a", "", "ccc"}; v.push_back(q);
  q = Request{}; q.op = Op::Wait; q.keys = {"a", "b"}; q.timeout_ms = 1; v.push_back(q);
  q = Request{}; q.op = Op::Delete; q.key = "gone"; v.push_back(q);
  q = Request{}; q.op = Op::CompareSet; q.key = "k"; q.value = "old"; q.desired = "new"; v.push_back(q);
  q = Request{}; q.op = Op::Ping; v.push_back(q);
  q = Request{}; q.op = Op::MultiGet; q.keys = {"x", "y"}; q.timeout_ms = 7; v.push_back(q);
  return v;
}

bool same(const Request& a, const Request& b) {
  return a.op == b.op && a.key == b.key && a.value == b.value && a.desired == b.desired &&
         a.delta == b.delta && a.timeout_ms == b.timeout_ms && a.keys == b.keys &&
         a.job_id == b.job_id && a.token == b.token && a.client_name == b.client_name;
}

void put_u64(std::string& f, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) f[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST_CASE("header is 16 bytes, little-endian, magic first", "[proto][codec]") {
  Request q;
  q.op = Op::Set;
  q.key = "ab";
  q.value = "xyz";
  std::string f = encode_request(q);
  REQUIRE(f.size() == kHeaderSize + 4 + 2 + 4 + 3);
  CHECK(f.substr(0, 4) == "LSTR");
  CHECK(static_cast<uint8_t>(f[4]) == kVersion);
  CHECK(static_cast<uint8_t>(f[5]) == 2);
  CHECK(f[6] == 0);
  CHECK(f[7] == 0);
  CHECK(static_cast<uint8_t>(f[8]) == 13);
  for (int i = 9; i < 16; ++i) CHECK(f[i] == 0);
  CHECK(static_cast<uint8_t>(f[16]) == 2);  // key length, low byte first
  CHECK(f.substr(20, 2) == "ab");
}

TEST_CASE("every request op round-trips", "[proto][codec]") {
  Limits lim;
  for (const Request& q : one_of_each_op()) {
    INFO("op " << op_name(q.op));
    std::string f = encode_request(q);
    auto d = decode_request(f, lim);
    REQUIRE(d.state == Parse::Ok);
    CHECK(d.consumed == f.size());
    CHECK(same(d.value, q));
  }
}

TEST_CASE("two frames in one buffer decode one at a time", "[proto][codec]") {
  auto ops = one_of_each_op();
  std::string buf = encode_request(ops[1]) + encode_request(ops[2]);
  auto d = decode_request(buf, Limits{});
  REQUIRE(d.state == Parse::Ok);
  CHECK(d.value.op == Op::Set);
  auto d2 = decode_request(std::string_view(buf).substr(d.consumed), Limits{});
  REQUIRE(d2.state == Parse::Ok);
  CHECK(d2.value.op == Op::Get);
}

TEST_CASE("a truncated frame needs more at every byte offset", "[proto][codec]") {
  for (const Request& q : one_of_each_op()) {
    std::string f = encode_request(q);
    for (size_t n = 0; n < f.size(); ++n) {
      INFO("op " << op_name(q.op) << " cut at " << n << " of " << f.size());
      auto d = decode_request(std::string_view(f).substr(0, n), Limits{});
      CHECK(d.state == Parse::NeedMore);
    }
  }
}

TEST_CASE("a payload cut short at every offset (length patched) is malformed", "[proto][codec]") {
  for (const Request& q : one_of_each_op()) {
    std::string f = encode_request(q);
    size_t payload = f.size() - kHeaderSize;
    for (size_t n = 0; n < payload; ++n) {
      std::string g = f.substr(0, kHeaderSize + n);
      put_u64(g, 8, n);
      INFO("op " << op_name(q.op) << " payload cut to " << n << " of " << payload);
      auto d = decode_request(g, Limits{});
      REQUIRE(d.state == Parse::Error);
      CHECK((d.error == Status::Malformed));
    }
  }
}

TEST_CASE("trailing bytes after a payload are malformed", "[proto][codec]") {
  Request q;
  q.op = Op::Ping;
  std::string f = encode_request(q) + "x";
  put_u64(f, 8, 1);
  auto d = decode_request(f, Limits{});
  REQUIRE(d.state == Parse::Error);
  CHECK(d.error == Status::Malformed);
}

TEST_CASE("header checks: magic, version, reserved byte, op, status byte", "[proto][codec]") {
  Request q;
  q.op = Op::Ping;
  const std::string good = encode_request(q);
  auto status_of = [](const std::string& f) {
    auto d = decode_request(f, Limits{});
    REQUIRE(d.state == Parse::Error);
    return d.error;
  };
  std::string f = good;
  f[0] = 'X';
  CHECK(status_of(f) == Status::Malformed);
  // Garbage is refused from its first byte, without waiting for a whole header.
  auto d = decode_request("GET / HTTP/1.1", Limits{});
  CHECK(d.state == Parse::Error);
  CHECK(decode_request("G", Limits{}).state == Parse::Error);
  f = good;
  f[4] = kVersion + 1;
  CHECK(status_of(f) == Status::BadVersion);
  f[4] = 1;  // version 1 had no QUOTA_EXCEEDED: a peer of it could not read our replies
  CHECK(status_of(f) == Status::BadVersion);
  f = good;
  f[7] = 1;
  CHECK(status_of(f) == Status::Malformed);
  f = good;
  f[5] = 0;
  CHECK(status_of(f) == Status::UnknownOp);
  f = good;
  f[5] = static_cast<char>(kMaxOp + 1);
  CHECK(status_of(f) == Status::UnknownOp);
  f = good;
  f[6] = 1;  // requests carry status 0
  CHECK(status_of(f) == Status::Malformed);
}

TEST_CASE("limits: payload length, key, value, key count", "[proto][codec]") {
  Limits lim;
  lim.max_key = 8;
  lim.max_value = 16;
  lim.max_keys = 3;

  SECTION("announced payload over the limit, including 2^63, is refused from the header") {
    Request q;
    q.op = Op::Ping;
    for (uint64_t len : {uint64_t(lim.max_payload()) + 1, uint64_t(1) << 63, ~uint64_t(0)}) {
      std::string f = encode_request(q);
      put_u64(f, 8, len);
      auto d = decode_request(f, lim);
      REQUIRE(d.state == Parse::Error);
      CHECK(d.error == Status::TooLarge);
    }
    std::string f = encode_request(q);
    put_u64(f, 8, lim.max_payload());
    CHECK(decode_request(f, lim).state == Parse::NeedMore);  // at the limit: wait for the bytes
  }
  SECTION("key one byte over") {
    Request q;
    q.op = Op::Get;
    q.key = std::string(8, 'k');
    CHECK(decode_request(encode_request(q), lim).state == Parse::Ok);
    q.key = std::string(9, 'k');
    auto d = decode_request(encode_request(q), lim);
    REQUIRE(d.state == Parse::Error);
    CHECK(d.error == Status::TooLarge);
    CHECK_THAT(d.message, Catch::Contains("key of 9 bytes"));
  }
  SECTION("value one byte over") {
    Request q;
    q.op = Op::Set;
    q.key = "k";
    q.value = std::string(16, 'v');
    CHECK(decode_request(encode_request(q), lim).state == Parse::Ok);
    q.value = std::string(17, 'v');
    auto d = decode_request(encode_request(q), lim);
    REQUIRE(d.state == Parse::Error);
    CHECK(d.error == Status::TooLarge);
  }
  SECTION("too many keys") {
    Request q;
    q.op = Op::Check;
    q.keys = {"a", "b", "c"};
    CHECK(decode_request(encode_request(q), lim).state == Parse::Ok);
    q.keys.push_back("d");
    auto d = decode_request(encode_request(q), lim);
    REQUIRE(d.state == Parse::Error);
    CHECK(d.error == Status::TooLarge);
  }
  SECTION("a string length larger than the bytes present is malformed, not allocated") {
    Request q;
    q.op = Op::Delete;
    q.key = "abc";
    std::string f = encode_request(q);
    f[16] = 7;  // key length 7 but 3 bytes follow
    auto d = decode_request(f, lim);
    REQUIRE(d.state == Parse::Error);
    CHECK(d.error == Status::Malformed);
  }
  SECTION("a key count larger than the bytes could hold is malformed") {
    Limits big;
    Request q;
    q.op = Op::Check;
    q.keys = {"a"};
    std::string f = encode_request(q);
    f[16] = 100;
    auto d = decode_request(f, big);
    REQUIRE(d.state == Parse::Error);
    CHECK(d.error == Status::Malformed);
  }
}

TEST_CASE("every reply shape and every status round-trips", "[proto][codec]") {
  Limits lim;
  Reply r;
  r.value = "v";
  r.number = -42;
  r.existed = true;
  r.present = {1, 0, 1};
  r.values = {"a", "", "c"};
  for (uint8_t op = 1; op <= kMaxOp; ++op) {
    std::string f = encode_reply(static_cast<Op>(op), r);
    auto d = decode_reply(f, lim);
    INFO("op " << op_name(static_cast<Op>(op)));
    REQUIRE(d.state == Parse::Ok);
    CHECK(d.consumed == f.size());
    CHECK(d.value.status == Status::Ok);
    switch (static_cast<Op>(op)) {
      case Op::Get:
      case Op::CompareSet: CHECK(d.value.value == "v"); break;
      case Op::Add: CHECK(d.value.number == -42); break;
      case Op::Check: CHECK(d.value.present == r.present); break;
      case Op::Delete: CHECK(d.value.existed); break;
      case Op::MultiGet: CHECK(d.value.values == r.values); break;
      default: CHECK(f.size() == kHeaderSize); break;
    }
    for (size_t n = 0; n < f.size(); ++n)
      CHECK(decode_reply(std::string_view(f).substr(0, n), lim).state == Parse::NeedMore);
  }
  for (uint8_t s = 1; s <= kMaxStatus; ++s) {
    INFO("status " << status_name(static_cast<Status>(s)));
    CHECK(status_name(static_cast<Status>(s)) != "UNKNOWN");
    std::string f = encode_reply(Op::Get, Reply::error(static_cast<Status>(s), "why"));
    CHECK(static_cast<uint8_t>(f[6]) == s);
    auto d = decode_reply(f, lim);
    REQUIRE(d.state == Parse::Ok);
    CHECK(d.value.status == static_cast<Status>(s));
    CHECK(d.value.message == "why");
  }
  std::string bad = encode_reply(Op::Get, Reply{});
  bad[6] = static_cast<char>(kMaxStatus + 1);
  CHECK(decode_reply(bad, lim).state == Parse::Error);
}

TEST_CASE("names of ops", "[proto][codec]") {
  for (uint8_t op = 1; op <= kMaxOp; ++op) CHECK(op_name(static_cast<Op>(op)) != "UNKNOWN");
  CHECK(op_name(Op::CompareSet) == "COMPARE_SET");
}

TEST_CASE("the example frames in PROTOCOL.md are what the codec writes", "[proto][codec]") {
  Request q;
  q.op = Op::Set;
  q.key = "ab";
  q.value = "xyz";
  const unsigned char set[] = {0x4C, 0x53, 0x54, 0x52, 0x02, 0x02, 0x00, 0x00, 0x0D, 0x00,
                               0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
                               0x61, 0x62, 0x03, 0x00, 0x00, 0x00, 0x78, 0x79, 0x7A};
  CHECK(encode_request(q) == std::string(reinterpret_cast<const char*>(set), sizeof set));
  const unsigned char ok[] = {0x4C, 0x53, 0x54, 0x52, 0x02, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(encode_reply(Op::Set, Reply{}) == std::string(reinterpret_cast<const char*>(ok), sizeof ok));
  CHECK(Limits{}.max_payload() == 134221836u);
}

TEST_CASE("before HELLO: only a HELLO of at most HELLO's size, decided from the header", "[proto][codec][preauth]") {
  Limits lim;
  const size_t hello_max = max_hello_payload(lim);
  CHECK(hello_max == 3 * (4 + lim.max_key));  // 12,300 bytes with the defaults
  Request h = one_of_each_op()[0];
  const std::string f = encode_request(h);

  SECTION("a valid HELLO decodes; its bytes are wanted exactly up to its end") {
    auto d = decode_hello(f, lim);
    REQUIRE(d.state == Parse::Ok);
    CHECK(same(d.value, h));
    CHECK(d.consumed == f.size());
    for (size_t cut = 0; cut < f.size(); ++cut) {
      CHECK(decode_hello(std::string_view(f).substr(0, cut), lim).state == Parse::NeedMore);
      // The header first (its length is not known before), then exactly the rest of the frame.
      const size_t want = cut < kHeaderSize ? kHeaderSize - cut : f.size() - cut;
      CHECK(hello_bytes_wanted(std::string_view(f).substr(0, cut), lim) == want);
    }
    CHECK(hello_bytes_wanted(f, lim) == 0);
    CHECK(hello_bytes_wanted(f + "pipelined request", lim) == 0);
  }
  SECTION("a HELLO announcing more than HELLO's maximum is refused with the header alone") {
    for (uint64_t len : {uint64_t(hello_max + 1), uint64_t(lim.max_payload()), uint64_t(134221836),
                         uint64_t(1) << 63, ~uint64_t{0}}) {
      std::string hdr = f.substr(0, kHeaderSize);
      put_u64(hdr, 8, len);
      auto d = decode_hello(hdr, lim);
      REQUIRE(d.state == Parse::Error);
      CHECK(d.error == Status::TooLarge);
      CHECK(d.value.op == Op::Hello);
      CHECK(hello_bytes_wanted(hdr, lim) == 0);
    }
    std::string hdr = f.substr(0, kHeaderSize);
    put_u64(hdr, 8, hello_max);
    CHECK(decode_hello(hdr, lim).state == Parse::NeedMore);
    CHECK(hello_bytes_wanted(hdr, lim) == hello_max);
  }
  SECTION("any other op first is NOT_AUTHENTICATED before its payload arrives") {
    for (const Request& q : one_of_each_op()) {
      if (q.op == Op::Hello) continue;
      std::string g = encode_request(q);
      put_u64(g, 8, lim.max_payload());  // even a SET announcing 128 MiB: nothing is read for it
      auto d = decode_hello(std::string_view(g).substr(0, kHeaderSize), lim);
      REQUIRE(d.state == Parse::Error);
      CHECK(d.error == Status::NotAuthenticated);
      CHECK(d.value.op == q.op);
      CHECK_THAT(d.message, Catch::Contains(std::string(op_name(q.op))));
    }
  }
  SECTION("garbage is refused at its first wrong byte") {
    CHECK(decode_hello("G", lim).error == Status::Malformed);
    CHECK(hello_bytes_wanted("G", lim) == 0);
    CHECK(hello_bytes_wanted("LS", lim) == kHeaderSize - 2);
  }
}
