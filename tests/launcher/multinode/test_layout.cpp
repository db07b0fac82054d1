#include <catch2/catch.hpp>

#include <set>

#include "launcher/multinode/layout.h"

using namespace launch::multinode;

namespace {

// A node with `nproc` CPU processes on ports 6170.. of `host`.
NodeRegistration node(const std::string& host, int nproc, int rank = -1) {
  NodeRegistration r;
  r.host = host;
  r.hostname = "h-" + host;
  r.requested_rank = rank;
  r.nproc = nproc;
  for (int i = 0; i < nproc; ++i) r.endpoints.push_back(host + ":" + std::to_string(6170 + i));
  r.master_endpoint = host + ":6000";
  r.id = host + "/1/abc";
  return r;
}

}  // namespace

TEST_CASE("arrival order gives node ranks; offsets sum the lower nodes' process counts", "[multinode]") {
  std::vector<NodeRegistration> regs = {node("10.0.0.1", 2), node("10.0.0.2", 4), node("10.0.0.3", 1)};
  JobLayout l = compute_layout(regs, 3, 1);
  CHECK(l.node_rank == 1);
  CHECK(l.rank_offset == 2);
  CHECK(l.local_size == 4);
  CHECK(l.world_size == 7);
  CHECK(l.nnodes == 3);
  CHECK(l.global_rank(3) == 5);
  REQUIRE(l.nodes.size() == 3);
  CHECK(l.nodes[2].rank_offset == 6);
  CHECK(l.endpoints == std::vector<std::string>{"10.0.0.1:6170", "10.0.0.1:6171", "10.0.0.2:6170",
                                                "10.0.0.2:6171", "10.0.0.2:6172", "10.0.0.2:6173",
                                                "10.0.0.3:6170"});
  CHECK(l.trainer_endpoints().rfind("10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170", 0) == 0);
  CHECK(l.framework_master == "10.0.0.1:6000");
}

TEST_CASE("explicit --rank values win over arrival order", "[multinode]") {
  // Arrival: A asks for 2, B for 0, C for 1.
  std::vector<NodeRegistration> regs = {node("A", 1, 2), node("B", 3, 0), node("C", 2, 1)};
  JobLayout a = compute_layout(regs, 3, 0);
  CHECK(a.node_rank == 2);
  CHECK(a.rank_offset == 5);  // B's 3 + C's 2
  CHECK(a.world_size == 6);
  CHECK(a.endpoints.front() == "B:6170");
  CHECK(a.endpoints.back() == "A:6170");
  CHECK(a.framework_master == "B:6000");  // node rank 0's, not the first to arrive
  CHECK(a.nodes[0].host == "B");
  CHECK(a.nodes[0].arrival == 1);
}

TEST_CASE("nodes without --rank take the lowest free ranks in arrival order", "[multinode]") {
  std::vector<NodeRegistration> regs = {node("A", 1), node("B", 1, 0), node("C", 1), node("D", 1, 2)};
  auto nodes = assign_node_ranks(regs, 4);
  CHECK(nodes[0].host == "B");
  CHECK(nodes[1].host == "A");
  CHECK(nodes[2].host == "D");
  CHECK(nodes[3].host == "C");
}

TEST_CASE("the node that serves the store takes the lowest free rank, before the arrival order", "[multinode]") {
  // torchrun's c10d form: nobody gives a rank; the launch that won the bind on --master is node
  // 0 even when another node registered first (it can: the store listens before its own record).
  std::vector<NodeRegistration> regs = {node("A", 1), node("B", 1), node("S", 1), node("C", 1)};
  regs[2].serves_store = true;
  auto nodes = assign_node_ranks(regs, 4);
  CHECK(nodes[0].host == "S");
  CHECK(nodes[1].host == "A");
  CHECK(nodes[2].host == "B");
  CHECK(nodes[3].host == "C");
  // An explicit rank 0 is kept; the store's host then takes the lowest rank left.
  regs[3].requested_rank = 0;
  nodes = assign_node_ranks(regs, 4);
  CHECK(nodes[0].host == "C");
  CHECK(nodes[1].host == "S");
  CHECK(nodes[2].host == "A");
}

TEST_CASE("every node computes the same node table", "[multinode]") {
  std::vector<NodeRegistration> regs = {node("A", 2, 1), node("B", 3), node("C", 1)};
  JobLayout first = compute_layout(regs, 3, 0);
  std::set<int> ranks;
  for (size_t self = 0; self < regs.size(); ++self) {
    JobLayout l = compute_layout(regs, 3, self);
    CHECK(l.endpoints == first.endpoints);
    CHECK(l.framework_master == first.framework_master);
    ranks.insert(l.node_rank);
    CHECK(l.endpoints[size_t(l.rank_offset)] == regs[self].endpoints[0]);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
}

TEST_CASE("two nodes asking for one rank: the error names both hosts", "[multinode]") {
  std::vector<NodeRegistration> regs = {node("10.0.0.1", 1, 1), node("10.0.0.2", 1), node("10.0.0.3", 1, 1)};
  try {
    assign_node_ranks(regs, 3);
    FAIL("no error");
  } catch (const LayoutError& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("node rank 1 requested by both"));
    CHECK_THAT(m, Catch::Contains("10.0.0.1"));
    CHECK_THAT(m, Catch::Contains("10.0.0.3"));
    CHECK_THAT(m, Catch::Contains("distinct --rank"));
  }
}

TEST_CASE("a rank outside [0, nnodes) is refused", "[multinode]") {
  REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 1), node("B", 1, 2)}, 2),
                      Catch::Contains("--rank 2 is out of range for --nnodes 2 (use 0..1"));
  REQUIRE_THROWS_AS(validate_registration(node("A", 1, -2), 2), LayoutError);
  CHECK_NOTHROW(validate_registration(node("A", 1, 1), 2));
}

TEST_CASE("inconsistent registrations are refused", "[multinode]") {
  SECTION("count differs from --nnodes") {
    REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 1), node("B", 1)}, 3),
                        Catch::Contains("2 nodes registered but --nnodes is 3"));
  }
  SECTION("endpoints do not match the process count") {
    auto b = node("B", 2);
    b.endpoints.pop_back();
    REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 1), b}, 2),
                        Catch::Contains("registered 2 processes but 1 endpoints"));
  }
  SECTION("devices do not match the process count") {
    auto b = node("B", 2);
    b.devices = {"0"};
    REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 1), b}, 2), Catch::Contains("1 devices"));
  }
  SECTION("no processes") {
    REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 0)}, 1), Catch::Contains("at least 1"));
  }
  SECTION("two nodes on the same endpoint") {
    auto b = node("A", 1);
    b.hostname = "other";
    REQUIRE_THROWS_WITH(assign_node_ranks({node("A", 1), b}, 2), Catch::Contains("endpoint A:6170 registered by both"));
  }
  SECTION("no host") {
    REQUIRE_THROWS_WITH(assign_node_ranks({node("", 1)}, 1), Catch::Contains("without a host"));
  }
}

TEST_CASE("without a master endpoint, node 0's first endpoint is the framework master", "[multinode]") {
  auto a = node("A", 2);
  a.master_endpoint.clear();
  CHECK(compute_layout({a}, 1, 0).framework_master == "A:6170");
}

TEST_CASE("timeout message: missing node ranks and the hosts that arrived", "[multinode]") {
  std::string m = describe_missing(3, {node("10.0.0.1", 1, 0), node("10.0.0.2", 1, 2)}, {}, 29.6);
  CHECK_THAT(m, Catch::StartsWith("rendezvous timed out after 30 s: 1 of 3 nodes did not arrive (missing node rank 1)"));
  CHECK_THAT(m, Catch::Contains("arrived: h-10.0.0.1 (10.0.0.1) rank 0, h-10.0.0.2 (10.0.0.2) rank 2"));
  CHECK_THAT(m, Catch::Contains("--elastic_timeout"));
}

TEST_CASE("timeout message: arrival-order nodes can only be counted", "[multinode]") {
  std::string m = describe_missing(4, {node("A", 1)}, {}, 5);
  CHECK_THAT(m, Catch::Contains("3 of 4 nodes did not arrive; arrived: h-A (A)"));
  CHECK_THAT(describe_missing(2, {}, {}, 1.5), Catch::Contains("after 1.5 s: 2 of 2 nodes did not arrive (missing node ranks 0, 1); arrived: none"));
}

TEST_CASE("timeout message: with the expected hosts (Slurm), the missing hosts are named", "[multinode]") {
  auto a = node("10.0.0.1", 1);
  a.hostname = "gpu01";
  std::string m = describe_missing(3, {a}, {{"gpu01", {}}, {"gpu02", {}}, {"gpu03", {}}}, 600);
  CHECK_THAT(m, Catch::Contains("2 of 3 nodes did not arrive (missing hosts: gpu02, gpu03)"));
}

// Issue 14, item 9: node 0's own host was listed as missing when gethostname() gave its FQDN.
TEST_CASE("timeout message: an arrived host is recognised by its address or its name up to the domain", "[multinode]") {
  auto fqdn = node("10.0.0.1", 1);
  fqdn.hostname = "GPU01.cluster.example";  // gethostname() on a real cluster
  auto other = node("10.0.0.9", 1);
  other.hostname = "login-node";  // registered under an address only Slurm's name resolves to
  const std::vector<ExpectedHost> slurm = {{"gpu01", {"10.0.0.1"}}, {"gpu02", {"10.0.0.2"}}, {"gpu09", {"10.0.0.9"}}};
  std::string m = describe_missing(3, {fqdn, other}, slurm, 600);
  CHECK_THAT(m, Catch::Contains("1 of 3 nodes did not arrive (missing hosts: gpu02)"));
  // Without addresses (a name that does not resolve here) the names still match up to the domain.
  CHECK(same_host({"gpu01", {}}, fqdn));
  CHECK(same_host({"gpu01.cluster.example", {}}, fqdn));
  CHECK_FALSE(same_host({"gpu011", {}}, fqdn));
  CHECK_FALSE(same_host({"gpu02", {"10.0.0.2"}}, fqdn));
  CHECK(same_host({"10.0.0.1", {}}, fqdn));  // a node list of addresses
}

TEST_CASE("registration records round-trip through JSON", "[multinode]") {
  auto r = node("10.0.0.7", 2, 1);
  r.devices = {"0", "3"};
  CHECK(decode_registration(encode_registration(r)) == r);
  r.serves_store = true;
  CHECK(decode_registration(encode_registration(r)) == r);
  REQUIRE_THROWS_WITH(decode_registration("{\"host\": 3}"), Catch::Contains("field 'host'"));
  REQUIRE_THROWS_WITH(decode_registration("not json"), Catch::Contains("not JSON"));
  REQUIRE_THROWS_AS(decode_registration("[1,2]"), LayoutError);
}
