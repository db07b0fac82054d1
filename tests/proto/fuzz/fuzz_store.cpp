// libFuzzer harness for the frame decoder and the key-value state machine.
// The input is a byte stream as a server would receive it: frames are decoded one after
// another and fed to a KvState under client ids and clock ticks taken from the frames
// themselves. Checks: no crash/UB/leak (sanitizers), decoded frames re-encode to the exact
// bytes they came from, replies encode to frames that decode again.
// Build and run: scripts/fuzz_store.sh [seconds]
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Limits lim;
  lim.max_key = 64;
  lim.max_value = 1024;
  lim.max_keys = 16;
  std::string_view in(reinterpret_cast<const char*>(data), size);

  // Replies must decode too (the client's side).
  (void)decode_reply(in, lim);

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
  return 0;
}
