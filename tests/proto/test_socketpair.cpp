// The codec and the state machine over a real socketpair: frames split at odd offsets and
// pipelined, the way TCP may deliver them.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/kv_state.h"

using namespace proto;

namespace {

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    REQUIRE(n > 0);
    s.remove_prefix(static_cast<size_t>(n));
  }
}

std::string read_some(int fd) {
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf);
  REQUIRE(n > 0);
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

TEST_CASE("requests split across writes are decoded and answered over a socketpair", "[proto][kv]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  const int client = sv[0], server = sv[1];

  Request set;
  set.op = Op::Set;
  set.key = "nccl/uid/world/0";
  set.value = std::string(128, '\x7f');
  Request get;
  get.op = Op::Get;
  get.key = set.key;
  get.timeout_ms = 1000;
  std::string bytes = encode_request(set) + encode_request(get);
  // Three writes cutting through the first header and the second payload.
  write_all(client, bytes.substr(0, 5));
  write_all(client, bytes.substr(5, bytes.size() - 12));
  write_all(client, bytes.substr(bytes.size() - 7));

  KvState state;
  std::string inbuf;
  std::vector<Outgoing> out;
  int frames = 0;
  while (frames < 2) {
    inbuf += read_some(server);
    for (;;) {
      auto d = decode_request(inbuf, Limits{});
      REQUIRE(d.state != Parse::Error);
      if (d.state == Parse::NeedMore) break;
      inbuf.erase(0, d.consumed);
      state.handle(1, d.value, Clock::now(), out);
      ++frames;
    }
  }
  std::string replies;
  for (auto& o : out) append_reply(replies, o.op, o.reply);
  write_all(server, replies);

  std::string got;
  std::vector<Reply> decoded;
  while (decoded.size() < 2) {
    got += read_some(client);
    for (;;) {
      auto d = decode_reply(got, Limits{});
      REQUIRE(d.state != Parse::Error);
      if (d.state == Parse::NeedMore) break;
      got.erase(0, d.consumed);
      decoded.push_back(d.value);
    }
  }
  CHECK(decoded[0].status == Status::Ok);
  CHECK(decoded[1].status == Status::Ok);
  CHECK(decoded[1].value == set.value);
  ::close(client);
  ::close(server);
}
