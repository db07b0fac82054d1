// The key-value state machine over plain values: every op, parking and waking, timeouts,
// job failure, reserved keys, and the handshake check.
#include <catch2/catch.hpp>

#include <map>

#include "proto/kv_state.h"

using namespace proto;
using std::chrono::milliseconds;

namespace {

const Clock::time_point t0{};

Request req(Op op, std::string key = "", std::string value = "") {
  Request q;
  q.op = op;
  q.key = std::move(key);
  q.value = std::move(value);
  return q;
}
Request keys_req(Op op, std::vector<std::string> keys, uint64_t timeout_ms = 1000) {
  Request q;
  q.op = op;
  q.keys = std::move(keys);
  q.timeout_ms = timeout_ms;
  return q;
}
Request get(std::string key, uint64_t timeout_ms = 1000) {
  Request q = req(Op::Get, std::move(key));
  q.timeout_ms = timeout_ms;
  return q;
}

// Runs one request and returns every reply it produced.
std::vector<Outgoing> run(KvState& s, ClientId c, const Request& q, Clock::time_point now = t0) {
  std::vector<Outgoing> out;
  s.handle(c, q, now, out);
  return out;
}

Reply only(const std::vector<Outgoing>& out, ClientId c) {
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].client == c);
  return out[0].reply;
}

}  // namespace

TEST_CASE("SET then GET, PING, DELETE", "[proto][kv]") {
  KvState s;
  CHECK(only(run(s, 1, req(Op::Set, "a", "1")), 1).status == Status::Ok);
  CHECK(only(run(s, 1, get("a")), 1).value == "1");
  CHECK(only(run(s, 1, req(Op::Set, "a", "2")), 1).status == Status::Ok);  // overwrite
  CHECK(only(run(s, 1, get("a")), 1).value == "2");
  CHECK(only(run(s, 1, req(Op::Ping)), 1).status == Status::Ok);
  CHECK(only(run(s, 1, req(Op::Delete, "a")), 1).existed);
  CHECK_FALSE(only(run(s, 1, req(Op::Delete, "a")), 1).existed);
  CHECK(s.key_count() == 0);
}

TEST_CASE("ADD counts atomically and refuses non-integers and overflow", "[proto][kv]") {
  KvState s;
  Request add = req(Op::Add, "n");
  add.delta = 3;
  CHECK(only(run(s, 1, add), 1).number == 3);
  add.delta = -10;
  CHECK(only(run(s, 2, add), 2).number == -7);
  CHECK(only(run(s, 1, get("n")), 1).value == "-7");
  run(s, 1, req(Op::Set, "text", "abc"));
  add.key = "text";
  CHECK(only(run(s, 1, add), 1).status == Status::NotInteger);
  run(s, 1, req(Op::Set, "big", std::to_string(INT64_MAX)));
  add.key = "big";
  add.delta = 1;
  CHECK(only(run(s, 1, add), 1).status == Status::NotInteger);
}

TEST_CASE("CHECK reports presence without blocking", "[proto][kv]") {
  KvState s;
  run(s, 1, req(Op::Set, "b", ""));
  Reply r = only(run(s, 1, keys_req(Op::Check, {"a", "b", "c"})), 1);
  CHECK(r.present == std::vector<uint8_t>{0, 1, 0});
  CHECK_FALSE(s.parked(1));
}

TEST_CASE("COMPARE_SET", "[proto][kv]") {
  KvState s;
  Request cas = req(Op::CompareSet, "k", "");
  cas.desired = "first";
  CHECK(only(run(s, 1, cas), 1).value == "first");  // absent matches empty
  cas.desired = "second";
  CHECK(only(run(s, 1, cas), 1).value == "first");  // "" no longer matches
  cas.value = "first";
  CHECK(only(run(s, 1, cas), 1).value == "second");
}

TEST_CASE("GET parks until SET wakes it; never answered twice", "[proto][kv]") {
  KvState s;
  CHECK(run(s, 7, get("nccl/uid/0")).empty());
  CHECK(s.parked(7));
  auto out = run(s, 1, req(Op::Set, "nccl/uid/0", "blob"));
  REQUIRE(out.size() == 2);
  CHECK(out[0].client == 7);
  CHECK(out[0].op == Op::Get);
  CHECK(out[0].reply.value == "blob");
  CHECK(out[1].client == 1);
  CHECK_FALSE(s.parked(7));
  std::vector<Outgoing> later;
  s.expire(t0 + milliseconds(5000), later);
  CHECK(later.empty());
}

TEST_CASE("WAIT and MULTI_GET wake only when every key exists", "[proto][kv]") {
  KvState s;
  CHECK(run(s, 5, keys_req(Op::Wait, {"a", "b", "a"})).empty());
  CHECK(run(s, 6, keys_req(Op::MultiGet, {"b", "a"})).empty());
  CHECK(run(s, 1, req(Op::Set, "a", "A")).size() == 1);  // only the setter's reply
  auto out = run(s, 1, req(Op::Set, "b", "B"));
  REQUIRE(out.size() == 3);
  std::map<ClientId, Reply> by;
  for (auto& o : out) by[o.client] = o.reply;
  CHECK(by[5].status == Status::Ok);
  CHECK(by[6].values == std::vector<std::string>{"B", "A"});
  CHECK(s.parked_count() == 0);
}

TEST_CASE("a key deleted before the last one appears is waited for again", "[proto][kv]") {
  KvState s;
  run(s, 5, keys_req(Op::MultiGet, {"a", "b"}));
  run(s, 1, req(Op::Set, "a", "A"));
  run(s, 1, req(Op::Delete, "a"));
  CHECK(run(s, 1, req(Op::Set, "b", "B")).size() == 1);
  CHECK(s.parked(5));
  auto out = run(s, 1, req(Op::Set, "a", "A2"));
  REQUIRE(out.size() == 2);
  CHECK(out[0].reply.values == std::vector<std::string>{"A2", "B"});
}

TEST_CASE("present keys answer at once; zero timeout answers TIMEOUT at once", "[proto][kv]") {
  KvState s;
  run(s, 1, req(Op::Set, "a", "A"));
  CHECK(only(run(s, 2, keys_req(Op::Wait, {"a"})), 2).status == Status::Ok);
  Reply r = only(run(s, 2, get("missing", 0)), 2);
  CHECK(r.status == Status::Timeout);
  CHECK_THAT(r.message, Catch::Contains("'missing'"));
  CHECK_FALSE(s.parked(2));
}

TEST_CASE("parked requests time out at their deadline, not before", "[proto][kv]") {
  KvState s;
  run(s, 1, get("x", 100), t0);
  run(s, 2, keys_req(Op::Wait, {"x", "y"}, 300), t0);
  REQUIRE(s.next_deadline() == t0 + milliseconds(100));
  std::vector<Outgoing> out;
  s.expire(t0 + milliseconds(99), out);
  CHECK(out.empty());
  s.expire(t0 + milliseconds(100), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].client == 1);
  CHECK(out[0].reply.status == Status::Timeout);
  out.clear();
  s.expire(t0 + milliseconds(1000), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].reply.status == Status::Timeout);
  CHECK_THAT(out[0].reply.message, Catch::Contains("'x'") && Catch::Contains("'y'"));
  CHECK_FALSE(s.next_deadline().has_value());
  // A timed-out waiter leaves no trace: a later SET wakes nobody.
  CHECK(run(s, 3, req(Op::Set, "x", "1")).size() == 1);
}

TEST_CASE("a client that re-parks after a timeout is woken once", "[proto][kv]") {
  KvState s;
  run(s, 1, get("x", 10));
  std::vector<Outgoing> out;
  s.expire(t0 + milliseconds(10), out);
  run(s, 1, get("x", 1000), t0 + milliseconds(10));
  auto woke = run(s, 2, req(Op::Set, "x", "v"));
  CHECK(woke.size() == 2);
}

TEST_CASE("a dropped client is forgotten", "[proto][kv]") {
  KvState s;
  run(s, 1, get("x"));
  s.drop_client(1);
  CHECK_FALSE(s.parked(1));
  CHECK(run(s, 2, req(Op::Set, "x", "v")).size() == 1);
  CHECK_FALSE(s.next_deadline().has_value());
}

TEST_CASE("job failure wakes every waiter with the record; later waits fail at once", "[proto][kv]") {
  KvState s;
  run(s, 1, get("x"));
  run(s, 2, keys_req(Op::Wait, {"y"}));
  run(s, 3, keys_req(Op::MultiGet, {"z"}));
  run(s, 4, req(Op::Set, "present", "p"));
  std::vector<Outgoing> out;
  REQUIRE(s.fail_job("rank 2: exited with code 3", out));
  REQUIRE(out.size() == 3);
  for (auto& o : out) {
    CHECK(o.reply.status == Status::JobFailed);
    CHECK(o.reply.message == "rank 2: exited with code 3");
  }
  CHECK(s.parked_count() == 0);
  CHECK_FALSE(s.fail_job("rank 5: second", out));  // first call wins
  CHECK(only(run(s, 1, get("x")), 1).status == Status::JobFailed);
  CHECK(only(run(s, 1, get("present")), 1).value == "p");  // non-blocking calls still work
  CHECK(only(run(s, 1, get(std::string(kJobFailedKey))), 1).value == "rank 2: exited with code 3");
  CHECK(*s.job_failure() == "rank 2: exited with code 3");
}

TEST_CASE("reserved keys cannot be written by clients", "[proto][kv]") {
  KvState s;
  std::string k(kJobFailedKey);
  CHECK(only(run(s, 1, req(Op::Set, k, "x")), 1).status == Status::ReservedKey);
  Request add = req(Op::Add, "__launch/n");
  CHECK(only(run(s, 1, add), 1).status == Status::ReservedKey);
  CHECK(only(run(s, 1, req(Op::Delete, k)), 1).status == Status::ReservedKey);
  Request cas = req(Op::CompareSet, k);
  CHECK(only(run(s, 1, cas), 1).status == Status::ReservedKey);
  CHECK(s.key_count() == 0);
}

TEST_CASE("MULTI_GET whose reply would exceed the frame limit is TOO_LARGE", "[proto][kv]") {
  Limits lim;
  lim.max_key = 4;
  lim.max_value = 10;
  KvState s(lim);
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back("k" + std::to_string(i));
    run(s, 1, req(Op::Set, keys.back(), std::string(10, 'v')));
  }
  CHECK(only(run(s, 1, keys_req(Op::MultiGet, keys)), 1).status == Status::TooLarge);
}

TEST_CASE("HELLO: token checked first, then the job id; neither the token nor our job id echoed", "[proto][kv]") {
  Request h;
  h.op = Op::Hello;
  h.job_id = "job";
  h.token = "secret-token";
  CHECK(check_hello(h, "job", "secret-token").status == Status::Ok);
  Reply r = check_hello(h, "real-job-id", "secret-token");
  CHECK(r.status == Status::BadJob);
  CHECK_THAT(r.message, Catch::Contains("'job'") && !Catch::Contains("real-job-id"));
  r = check_hello(h, "job", "secret-tokeN");
  CHECK(r.status == Status::BadToken);
  CHECK_THAT(r.message, !Catch::Contains("secret"));
  CHECK(check_hello(h, "job", "").status == Status::BadToken);
  // A stranger with the wrong token is not told that its job id is wrong too.
  r = check_hello(h, "real-job-id", "secret-tokeN");
  CHECK(r.status == Status::BadToken);
  CHECK_THAT(r.message, !Catch::Contains("real-job-id"));
  KvState s;
  CHECK(only(run(s, 1, h), 1).status == Status::Malformed);  // HELLO twice
}

TEST_CASE("quota: keys per job; the refusal says which write and how to make room", "[proto][kv][quota]") {
  // Issue 22, item 10: one client writing 500,000 keys took launch to 559 MB.
  Limits lim;
  lim.max_store_keys = 3;
  KvState s(lim);
  for (const char* k : {"a", "b", "c"}) CHECK(only(run(s, 1, req(Op::Set, k, "v")), 1).status == Status::Ok);
  Reply r = only(run(s, 1, req(Op::Set, "d", "v")), 1);
  CHECK(r.status == Status::QuotaExceeded);
  CHECK_THAT(r.message, Catch::Contains("store quota: SET of key 'd' would make key 4; the store holds at most 3 keys "
                                        "per job (delete keys no longer needed: DELETE, launch kv delete)"));
  CHECK(s.key_count() == 3);
  CHECK(only(run(s, 1, get("d", 0)), 1).status == Status::Timeout);  // nothing was stored
  // Writing a key that exists is no new key; ADD and COMPARE_SET of a new one are refused too.
  CHECK(only(run(s, 1, req(Op::Set, "a", "w")), 1).status == Status::Ok);
  Request add = req(Op::Add, "n");
  add.delta = 1;
  CHECK(only(run(s, 1, add), 1).status == Status::QuotaExceeded);
  Request cas = req(Op::CompareSet, "e");
  cas.desired = "x";
  r = only(run(s, 1, cas), 1);
  CHECK(r.status == Status::QuotaExceeded);
  CHECK_THAT(r.message, Catch::Contains("COMPARE_SET of key 'e'"));
  // A DELETE makes room.
  CHECK(only(run(s, 1, req(Op::Delete, "b")), 1).existed);
  CHECK(only(run(s, 1, add), 1).number == 1);
  // The launcher's failure record is never refused, and wakes the waiters as ever.
  run(s, 2, get("zz"));
  std::vector<Outgoing> out;
  CHECK(s.fail_job("rank 0: exited with code 1", out));
  CHECK(out.size() == 1);
  CHECK(s.key_count() == 4);
}

TEST_CASE("quota: bytes per job count key, value and each entry's bookkeeping", "[proto][kv][quota]") {
  Limits lim;
  lim.max_store_bytes = 3 * (1 + 100 + kEntryCharge);
  KvState s(lim);
  for (const char* k : {"a", "b", "c"}) CHECK(only(run(s, 1, req(Op::Set, k, std::string(100, 'v'))), 1).status == Status::Ok);
  CHECK(s.stored_bytes() == lim.max_store_bytes);
  Reply r = only(run(s, 1, req(Op::Set, "d", "")), 1);
  CHECK(r.status == Status::QuotaExceeded);
  CHECK_THAT(r.message, Catch::Contains("SET of key 'd' (0 bytes) would bring the store to " +
                                        std::to_string(lim.max_store_bytes + 1 + kEntryCharge) +
                                        " bytes of keys and values; it holds at most " +
                                        std::to_string(lim.max_store_bytes) + " per job"));
  // Growing a value past the quota is refused; shrinking it, or writing it the same size, is not.
  CHECK(only(run(s, 1, req(Op::Set, "a", std::string(101, 'v'))), 1).status == Status::QuotaExceeded);
  CHECK(only(run(s, 1, get("a")), 1).value == std::string(100, 'v'));
  CHECK(only(run(s, 1, req(Op::Set, "a", std::string(100, 'w'))), 1).status == Status::Ok);
  CHECK(only(run(s, 1, req(Op::Set, "a", "short")), 1).status == Status::Ok);
  CHECK(s.stored_bytes() == lim.max_store_bytes - 95);
  CHECK(only(run(s, 1, req(Op::Set, "a", std::string(100, 'x'))), 1).status == Status::Ok);
  CHECK(only(run(s, 1, req(Op::Delete, "c")), 1).existed);
  CHECK(s.stored_bytes() == 2 * (1 + 100 + kEntryCharge));
  CHECK(only(run(s, 1, req(Op::Set, "d", "")), 1).status == Status::Ok);
}

TEST_CASE("quota: the defaults take a value of the largest size, and 500,000 small keys are refused", "[proto][kv][quota]") {
  Limits lim;
  CHECK(lim.max_store_bytes >= lim.max_key + lim.max_value + kEntryCharge);
  KvState s;
  Request big = req(Op::Set, std::string(lim.max_key, 'k'), std::string(lim.max_value, 'v'));
  CHECK(only(run(s, 1, big), 1).status == Status::Ok);
  CHECK(only(run(s, 1, req(Op::Delete, big.key)), 1).existed);
  size_t ok = 0, refused = 0;
  for (int i = 0; i < 500000; ++i) {
    const Status st = only(run(s, 1, req(Op::Set, "key/" + std::to_string(i), "value")), 1).status;
    (st == Status::Ok ? ok : refused) += 1;
  }
  CHECK(ok == lim.max_store_keys);
  CHECK(refused == 500000 - lim.max_store_keys);
}
