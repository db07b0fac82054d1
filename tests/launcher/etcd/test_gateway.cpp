// The gateway's JSON, both ways, against answers etcd 3.4.23 (Debian's etcd-server) gave to the
// same requests with curl; hostile and malformed answers are refused with a reason.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "launcher/etcd/base64.h"
#include "launcher/etcd/gateway.h"
#include "launcher/etcd/http.h"

using namespace launch::etcd;
using nlohmann::json;

namespace {

const char* kHeader = R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"})";

std::string with_header(const std::string& rest) { return "{" + std::string(kHeader) + rest + "}"; }

}  // namespace

TEST_CASE("gateway: request bodies have rpc.proto's field names, base64 bytes and int64 strings", "[etcd][gateway]") {
  CHECK(json::parse(put_body("foo", "bar", 0)) == json{{"key", "Zm9v"}, {"value", "YmFy"}});
  CHECK(json::parse(put_body("foo", "", 7)) == json{{"key", "Zm9v"}, {"value", ""}, {"lease", "7"}});
  CHECK(json::parse(range_body("foo", "fop", 0)) == json{{"key", "Zm9v"}, {"range_end", "Zm9w"}});
  CHECK(json::parse(range_body("foo", "", 5)) == json{{"key", "Zm9v"}, {"revision", "5"}});
  CHECK(json::parse(delete_range_body("a", "")) == json{{"key", "YQ=="}});
  CHECK(json::parse(lease_grant_body(5)) == json{{"TTL", "5"}});
  CHECK(json::parse(lease_id_body(4111120376542520844)) == json{{"ID", "4111120376542520844"}});
  CHECK(json::parse(watch_body("foo", "", 3)) == json{{"create_request", {{"key", "Zm9v"}, {"start_revision", "3"}}}});
  CHECK(json::parse(watch_body("foo", "fop", 0)) == json{{"create_request", {{"key", "Zm9v"}, {"range_end", "Zm9w"}}}});

  Txn t;
  t.compare.push_back({"k", CompareTarget::Create, CompareResult::Equal, 0, ""});
  t.compare.push_back({"k", CompareTarget::Value, CompareResult::NotEqual, 0, "v"});
  t.success.push_back(RequestOp::put("k", "v", 9));
  t.failure.push_back(RequestOp::range("k"));
  t.failure.push_back(RequestOp::delete_range("a", "b"));
  CHECK(json::parse(txn_body(t)) ==
        json::parse(R"({"compare":[{"key":"aw==","target":"CREATE","result":"EQUAL","create_revision":"0"},
                                   {"key":"aw==","target":"VALUE","result":"NOT_EQUAL","value":"dg=="}],
                        "success":[{"request_put":{"key":"aw==","value":"dg==","lease":"9"}}],
                        "failure":[{"request_range":{"key":"aw=="}},
                                   {"request_delete_range":{"key":"YQ==","range_end":"Yg=="}}]})"));
}

TEST_CASE("gateway: etcd 3.4's answers parse, zero values left out included", "[etcd][gateway]") {
  CHECK(parse_version(R"({"etcdserver":"3.4.23","etcdcluster":"3.4.0"})") == "3.4.23");
  CHECK(api_prefix("3.4.23") == "/v3");
  CHECK(api_prefix("3.5.0") == "/v3");
  CHECK(api_prefix("3.3.11") == "/v3beta");
  CHECK_THROWS_WITH(api_prefix("3.2.9"), Catch::Contains("too old"));
  CHECK_THROWS_AS(api_prefix("x"), GatewayFormatError);

  CHECK(parse_put(with_header("")) == 2);

  RangeResponse r = parse_range(with_header(
      R"(,"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"7","version":"4","value":"YmFy","lease":"12"}],"count":"1")"));
  CHECK(r.revision == 2);
  REQUIRE(r.kvs.size() == 1);
  CHECK(r.kvs[0] == KeyValue{"foo", "bar", 2, 7, 4, 12});
  CHECK(r.count == 1);
  CHECK_FALSE(r.more);
  RangeResponse empty = parse_range(with_header(""));  // an empty range: no kvs, no count
  CHECK(empty.kvs.empty());
  CHECK(empty.count == 0);

  CHECK(parse_delete_range(with_header(R"(,"deleted":"1")")) == 1);
  CHECK(parse_delete_range(with_header("")) == 0);

  TxnResponse won = parse_txn(with_header(R"(,"succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}])"));
  CHECK(won.succeeded);
  REQUIRE(won.responses.size() == 1);
  CHECK(won.responses[0].type == RequestOp::Type::Put);
  TxnResponse lost = parse_txn(with_header(
      R"(,"responses":[{"response_range":{"header":{"revision":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}}])"));
  CHECK_FALSE(lost.succeeded);
  REQUIRE(lost.responses.size() == 1);
  CHECK(lost.responses[0].range.kvs.at(0).value == "bar");

  LeaseGrant g = parse_lease_grant(with_header(R"(,"ID":"4111120376542520840","TTL":"5")"));
  CHECK(g.id == 4111120376542520840);
  CHECK(g.ttl == 5);
  CHECK(parse_keepalive_line("{\"result\":" + with_header(R"(,"ID":"4111120376542520844","TTL":"5")") + "}") == 5);
  // A revoked or expired lease: etcd answers the keep-alive without a TTL.
  CHECK(parse_keepalive_line("{\"result\":" + with_header(R"(,"ID":"4111120376542520844")") + "}") == 0);
}

TEST_CASE("gateway: watch lines: the confirmation, puts and deletes, a compacted start", "[etcd][gateway]") {
  WatchMessage created = parse_watch_line("{\"result\":" + with_header(R"(,"created":true)") + "}");
  CHECK(created.created);
  CHECK(created.events.empty());
  CHECK(created.revision == 2);

  WatchMessage ev = parse_watch_line("{\"result\":" + with_header(
      R"(,"events":[{"kv":{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}},
                    {"type":"DELETE","kv":{"key":"Zm9v","mod_revision":"3"}}])") + "}");
  REQUIRE(ev.events.size() == 2);
  CHECK(ev.events[0].type == EventType::Put);
  CHECK(ev.events[0].kv.value == "bar");
  CHECK(ev.events[1].type == EventType::Delete);
  CHECK(ev.events[1].kv.mod_revision == 3);

  WatchMessage compacted = parse_watch_line(
      R"({"result":{"header":{"cluster_id":"1","member_id":"2","raft_term":"2"},"canceled":true,"compact_revision":"6"}})");
  CHECK(compacted.canceled);
  CHECK(compacted.compact_revision == 6);
}

TEST_CASE("gateway: errors in both of the gateway's forms, and bodies that are not errors", "[etcd][gateway]") {
  auto unary = parse_error(R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})");
  REQUIRE(unary);
  CHECK(unary->code == 5);
  CHECK(unary->message == "etcdserver: requested lease not found");
  auto streamed = parse_error(R"({"error":{"grpc_code":11,"http_code":400,"message":"mvcc: required revision has been compacted","http_status":"Bad Request"}})");
  REQUIRE(streamed);
  CHECK(streamed->code == 11);
  CHECK(streamed->message == "mvcc: required revision has been compacted");
  CHECK_FALSE(parse_error("Not Found"));
  CHECK_FALSE(parse_error(with_header("")));
  CHECK_FALSE(parse_error("[1,2]"));
}

TEST_CASE("gateway: malformed answers are refused with what was wrong", "[etcd][gateway]") {
  CHECK_THROWS_WITH(parse_range("<html>502 Bad Gateway</html>"), Catch::Contains("not JSON") && Catch::Contains("<html>"));
  CHECK_THROWS_WITH(parse_range("[]"), Catch::Contains("not a JSON object"));
  CHECK_THROWS_WITH(parse_range(R"({"kvs":"x"})"), Catch::Contains("'kvs' is not an array"));
  CHECK_THROWS_WITH(parse_range(R"({"kvs":[{"key":"not base64!"}]})"), Catch::Contains("'key' is not base64"));
  CHECK_THROWS_WITH(parse_range(R"({"header":{"revision":"12x"}})"), Catch::Contains("'revision' is not an int64"));
  CHECK_THROWS_WITH(parse_range(R"({"header":{"revision":1.5}})"), Catch::Contains("'revision' is not an int64"));
  CHECK_THROWS_WITH(parse_range(R"({"header":{"revision":"99999999999999999999"}})"), Catch::Contains("not an int64"));
  CHECK_THROWS_WITH(parse_range(R"({"header":{"revision":18446744073709551615}})"), Catch::Contains("not an int64"));
  CHECK(parse_range(R"({"header":{"revision":9}})").revision == 9);  // a plain number is taken too
  CHECK_THROWS_WITH(parse_txn(R"({"succeeded":"yes"})"), Catch::Contains("'succeeded' is not a boolean"));
  CHECK_THROWS_WITH(parse_txn(R"({"responses":[{"response_what":{}}]})"), Catch::Contains("no known kind"));
  CHECK_THROWS_WITH(parse_lease_grant(with_header("")), Catch::Contains("without an ID"));
  CHECK_THROWS_WITH(parse_keepalive_line(with_header("")), Catch::Contains("without 'result'"));
  CHECK_THROWS_WITH(parse_watch_line(R"({"result":{"events":[{"type":"EXPLODE","kv":{}}]}})"), Catch::Contains("EXPLODE"));
  CHECK_THROWS_WITH(parse_version(R"({"etcdcluster":"3.4.0"})"), Catch::Contains("no 'etcdserver'"));
  // A bad answer's bytes are quoted printable and cut short.
  CHECK_THROWS_WITH(parse_range(std::string("\x01\x02", 2) + std::string(500, 'x')), Catch::Contains("\\x01\\x02") && Catch::Contains("..."));
}

TEST_CASE("gateway: prefix_end covers exactly the keys under a prefix", "[etcd][gateway]") {
  CHECK(prefix_end("/launch/j/") == "/launch/j0");
  CHECK(prefix_end("a") == "b");
  CHECK(prefix_end(std::string("a\xff", 2)) == "b");
  CHECK(prefix_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
  CHECK(prefix_end("") == std::string(1, '\0'));
  CHECK(describe_range("/p/", prefix_end("/p/")) == "prefix '/p/'");
  CHECK(describe_range("k", "") == "'k'");
  CHECK(describe_range("a", "c") == "'a' to 'c'");
  CHECK(describe_range("a", std::string(1, '\0')) == "'a' onwards");
  CHECK(lease_name(0x38f8a4b1c0de0f12) == "lease 38f8a4b1c0de0f12");
}

TEST_CASE("gateway: endpoints are HOST:PORT or http://HOST:PORT; others are refused with why", "[etcd][gateway]") {
  auto url = [](const std::string& e) {
    Options o;
    o.endpoint = e;
    o.endpoint_source = "--rdzv-endpoint";
    return endpoint_url(o);
  };
  CHECK(url("127.0.0.1:2379") == "http://127.0.0.1:2379");
  CHECK(url("http://etcd-0.etcd:2379/") == "http://etcd-0.etcd:2379");
  CHECK(url("[::1]:2379") == "http://[::1]:2379");
  auto refused = [&](const std::string& e, const std::string& why) {
    INFO(e);
    try {
      url(e);
      FAIL("accepted");
    } catch (const EtcdError& err) {
      CHECK(err.kind() == EtcdError::Kind::Invalid);
      CHECK_THAT(err.what(), Catch::Contains(why) && Catch::Contains("--rdzv-endpoint") && Catch::Contains("'" + e + "'"));
    }
  };
  refused("https://h:2379", "TLS");
  refused("etcd://h:2379", "scheme");
  refused("h", "HOST:PORT");
  refused(":2379", "HOST:PORT");
  refused("h:0", "port");
  refused("h:65536", "port");
  refused("h:23x", "port");
  refused("h:2379/v3", "'/'");
  refused("user@h:2379", "'@'");
  refused("::1:2379", "brackets");
}
