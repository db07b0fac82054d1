// libFuzzer harness for the frame decoder, the pre-authentication path and the key-value state
// machine. The first input byte picks the mode:
//  - even: a byte stream as a server receives it. The first frame goes through decode_hello (as
//    the server does before authentication), the rest through decode_request into a KvState
//    under client ids and clock ticks taken from the frames themselves. Checks: no crash/UB/leak
//    (sanitizers), decoded frames re-encode to the exact bytes they came from, replies encode to
//    frames that decode again.
//  - odd: the pre-authentication path with a declared length anywhere in 0 .. 2^64-1. Bytes
//    1..8 are the payload length (little-endian), byte 9 the op, byte 10 how many bytes each read
//    may take; the header is built from them and the rest of the input is the payload. The
//    harness reads as the server does (only what hello_bytes_wanted allows) and checks that it
//    never buffers more than one HELLO, that a frame announcing more than a HELLO's maximum or
//    another op is refused from its 16-byte header, and that a HELLO of legal size is decided
//    once its last byte arrives.
// Build and run: scripts/fuzz_store.sh [seconds]
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "proto/codec.h"
#include "proto/kv_state.h"

using namespace proto;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

Limits fuzz_limits() {
  Limits lim;
  lim.max_key = 64;
  lim.max_value = 1024;
  lim.max_keys = 16;
  return lim;
}

void preauth(std::string_view in) {
  if (in.size() < 11) return;
  const Limits lim = fuzz_limits();
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(in[1 + i]);
  const uint8_t op = static_cast<uint8_t>(in[9]);
  const size_t step = 1 + static_cast<uint8_t>(in[10]) % 64;
  in.remove_prefix(11);

  std::string frame = "LSTR";
  frame += static_cast<char>(kVersion);
  frame += static_cast<char>(op);
  frame += '\0';
  frame += '\0';
  for (int i = 0; i < 8; ++i) frame += static_cast<char>((len >> (8 * i)) & 0xff);
  frame.append(in.data(), in.size());  // the payload as far as the client sends it

  const size_t cap = kHeaderSize + max_hello_payload(lim);
  const bool refusable = op != static_cast<uint8_t>(Op::Hello) || len > max_hello_payload(lim);
  std::string buf;  // what the server has read
  size_t pos = 0;
  for (;;) {
    const size_t want = hello_bytes_wanted(buf, lim);
    check(buf.size() + want <= cap);
    auto d = decode_hello(buf, lim);
    if (want == 0) {
      check(d.state != Parse::NeedMore);
      if (refusable && buf.size() >= kHeaderSize) check(d.state == Parse::Error);
      if (d.state == Parse::Ok) {
        check(d.value.op == Op::Hello && d.consumed == buf.size() && d.consumed == kHeaderSize + len);
        check(encode_request(d.value) == buf);
      }
      return;
    }
    check(d.state == Parse::NeedMore);
    if (buf.size() >= kHeaderSize) check(!refusable);  // decided from the header alone
    if (pos == frame.size()) return;                   // the client stopped sending
    const size_t take = std::min({want, step, frame.size() - pos});
    buf.append(frame, pos, take);
    pos += take;
  }
}

void stream(std::string_view in) {
  const Limits lim = fuzz_limits();
  // Replies must decode too (the client's side).
  (void)decode_reply(in, lim);

  // The first frame as an unauthenticated client's.
  auto first = decode_hello(in, lim);
  check(first.state != Parse::Ok || (first.consumed <= kHeaderSize + max_hello_payload(lim) &&
                                     first.value.op == Op::Hello));
  if (first.state == Parse::Ok) {
    check(encode_request(first.value) == in.substr(0, first.consumed));
    (void)check_hello(first.value, "job", "token");
  }

  KvState state(lim);
  Clock::time_point now{};
  std::vector<Outgoing> out;
  size_t frame = 0;
  while (!in.empty()) {
    auto d = decode_request(in, lim);
    if (d.state != Parse::Ok) break;
    check(d.consumed >= kHeaderSize && d.consumed <= in.size());
    check(encode_request(d.value) == in.substr(0, d.consumed));
    ClientId client = d.consumed % 4;  // the fuzzer steers it through frame sizes
    in.remove_prefix(d.consumed);
    ++frame;
    if (d.value.op == Op::Hello) {
      (void)check_hello(d.value, "job", "token");
      if (frame % 7 == 0) state.fail_job("rank 1: fuzz", out);
      continue;
    }
    if (state.parked(client)) state.drop_client(client);
    if (d.value.timeout_ms > 100000) d.value.timeout_ms %= 100000;
    state.handle(client, d.value, now, out);
    now += std::chrono::milliseconds(frame * 13 % 500);
    state.expire(now, out);
  }
  for (const auto& o : out) {
    std::string f = encode_reply(o.op, o.reply);
    auto r = decode_reply(f, Limits{});
    check(r.state == Parse::Ok && r.consumed == f.size() && r.value.status == o.reply.status);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (data[0] & 1) {
    preauth(in);
  } else {
    in.remove_prefix(1);
    stream(in);
  }
  return 0;
}
