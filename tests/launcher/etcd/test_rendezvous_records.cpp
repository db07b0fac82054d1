// The etcd rendezvous's pure parts: keys, the versioned records, and the rank order of a listing.
#include <catch2/catch.hpp>

#include "launcher/etcd/etcd_rendezvous.h"

using namespace launch::etcd;

TEST_CASE("rendezvous records: keys per job, ids that can name keys", "[etcd][rendezvous]") {
  CHECK(nodes_prefix("job-1") == "/launch/job-1/nodes/");
  CHECK(store_key("job-1") == "/launch/job-1/store");
  CHECK_NOTHROW(check_id("node id", "host-a/4242/00ff00ff00ff00ff"));
  CHECK_THROWS_WITH(check_id("job id", ""), Catch::Contains("job id ''") && Catch::Contains("1 to 128"));
  CHECK_THROWS_WITH(check_id("job id", std::string(129, 'j')), Catch::Contains("1 to 128"));
  CHECK_THROWS_WITH(check_id("node id", "a b"), Catch::Contains("node id 'a b'") && Catch::Contains("space"));
  CHECK_THROWS_WITH(check_id("node id", std::string("a\0b", 3)), Catch::Contains("a\\x00b"));
}

TEST_CASE("rendezvous records: node and store records round-trip; others are refused by name", "[etcd][rendezvous]") {
  const std::string rec = R"({"host":"10.0.0.1","nproc":8})";
  CHECK(decode_node_record("/k", encode_node_record(rec)) == rec);
  CHECK(decode_node_record("/k", encode_node_record("")).empty());
  CHECK_THROWS_WITH(encode_node_record(std::string(kMaxRecordBytes + 1, 'x')), Catch::Contains("over the limit"));

  KeyValue kv;
  kv.value = encode_store_record("node-a", "10.0.0.1:29500");
  kv.mod_revision = 17;
  StoreHolder h = decode_store_record("/launch/j/store", kv);
  CHECK(h.node_id == "node-a");
  CHECK(h.address == "10.0.0.1:29500");
  CHECK(h.mod_revision == 17);
  CHECK_FALSE(h.mine);

  CHECK_THROWS_WITH(decode_node_record("/launch/j/nodes/x", "hello"),
                    Catch::Contains("'/launch/j/nodes/x' does not hold a launch.etcd.node record"));
  CHECK_THROWS_WITH(decode_node_record("/k", kv.value), Catch::Contains("does not hold a launch.etcd.node"));
  CHECK_THROWS_WITH(decode_node_record("/k", R"({"format":"launch.etcd.node","version":2,"record":""})"),
                    Catch::Contains("version 2") && Catch::Contains("same launch version on every node"));
  CHECK_THROWS_WITH(decode_node_record("/k", R"({"format":"launch.etcd.node","version":1})"),
                    Catch::Contains("no string 'record'"));
  CHECK_THROWS_WITH(decode_node_record("/k", std::string(7 * kMaxRecordBytes, ' ')), Catch::Contains("more than a node record may"));
  KeyValue bad;
  bad.value = R"({"format":"launch.etcd.store","version":1,"node":3,"address":"a:1"})";
  CHECK_THROWS_WITH(decode_store_record("/s", bad), Catch::Contains("no string 'node'"));
}

TEST_CASE("rendezvous records: ranks follow the join order, the same from any listing", "[etcd][rendezvous]") {
  auto node = [](const std::string& id, int64_t created) {
    KeyValue kv;
    kv.key = nodes_prefix("j") + id;
    kv.value = encode_node_record("rec-" + id);
    kv.create_revision = created;
    kv.mod_revision = created;
    return kv;
  };
  // etcd lists by key; the ranks come from the revisions.
  Listing l{40, {node("a", 30), node("b", 12), node("c", 25)}};
  Membership m = membership_from("j", l);
  CHECK(m.revision == 40);
  REQUIRE(m.nodes.size() == 3);
  CHECK(m.nodes[0].node_id == "b");
  CHECK(m.nodes[1].node_id == "c");
  CHECK(m.nodes[2].node_id == "a");
  CHECK(m.nodes[2].record == "rec-a");
  CHECK(m.rank_of("b") == 0);
  CHECK(m.rank_of("a") == 2);
  CHECK(m.rank_of("z") == -1);
  // A later joiner does not move the ranks before it.
  l.kvs.push_back(node("0-first-by-key", 41));
  Membership later = membership_from("j", l);
  CHECK(later.rank_of("b") == 0);
  CHECK(later.rank_of("0-first-by-key") == 3);
}

TEST_CASE("rendezvous records: the job record, the holder's lease, the other jobs at an endpoint", "[etcd][rendezvous]") {
  CHECK(job_key("job-1") == "/launch/job-1/job");
  CHECK(membership_key("job-1") == "/launch/job-1/membership");
  const std::string fp(64, 'f');
  CHECK(decode_job_record("/launch/j/job", encode_job_record(fp)) == fp);
  CHECK_THROWS_WITH(decode_job_record("/launch/j/job", encode_store_record("n", "a:1")),
                    Catch::Contains("does not hold a launch.etcd.job record"));
  CHECK_THROWS_WITH(decode_job_record("/launch/j/job", R"({"format":"launch.etcd.job","version":1})"),
                    Catch::Contains("no string 'token_fingerprint'"));
  CHECK_THROWS_WITH(decode_job_record("/launch/j/job", std::string(5000, ' ')), Catch::Contains("more than a job record may"));

  KeyValue kv;
  kv.value = encode_store_record("node-a", "10.0.0.1:29500");
  kv.lease = 0x38f8;
  CHECK(decode_store_record("/launch/j/store", kv).lease == 0x38f8);

  auto key = [](const std::string& k) {
    KeyValue x;
    x.key = k;
    return x;
  };
  // As etcd lists /launch/: by key. Only node keys count; the asking job is left out.
  const Listing l{9, {key("/launch/a-b/nodes/n1"), key("/launch/a/job"), key("/launch/a/membership"),
                      key("/launch/a/nodes/n1"), key("/launch/a/nodes/n2"), key("/launch/a/store"),
                      key("/launch/mine/nodes/n3"), key("/launch/x/nodes/"), key("/elsewhere/nodes/n")}};
  const auto jobs = jobs_with_nodes(l, "mine");
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0] == std::make_pair(std::string("a-b"), size_t(1)));
  CHECK(jobs[1] == std::make_pair(std::string("a"), size_t(2)));
  CHECK(jobs_with_nodes(l, "a").size() == 2);  // a-b and mine
}
