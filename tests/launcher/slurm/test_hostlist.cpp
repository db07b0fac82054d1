#include <catch2/catch.hpp>

#include "launcher/slurm/hostlist.h"

using launch::slurm::expand_hostlist;
using launch::slurm::HostlistError;
using V = std::vector<std::string>;

TEST_CASE("plain host names and lists", "[slurm][hostlist]") {
  CHECK(expand_hostlist("node1") == V{"node1"});
  CHECK(expand_hostlist("a,b,c") == V{"a", "b", "c"});
  CHECK(expand_hostlist("cpu-a1.cluster") == V{"cpu-a1.cluster"});
}

TEST_CASE("ranges keep the zero padding of their lower bound", "[slurm][hostlist]") {
  CHECK(expand_hostlist("gpu[01-04,07],cpu-a1") == V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1"});
  CHECK(expand_hostlist("n[8-11]") == V{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == V{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[5]") == V{"n5"});
}

TEST_CASE("several bracket groups in one name multiply, leftmost slowest", "[slurm][hostlist]") {
  CHECK(expand_hostlist("r[1-2]n[01-02]") == V{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expand_hostlist("r[1-2]-n[3,5].x,y") == V{"r1-n3.x", "r1-n5.x", "r2-n3.x", "r2-n5.x", "y"});
}

TEST_CASE("malformed hostlists are errors naming the problem", "[slurm][hostlist]") {
  auto message = [](const char* expr) {
    try {
      expand_hostlist(expr);
    } catch (const HostlistError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message(""), Catch::Contains("empty"));
  CHECK_THAT(message("gpu[01-04"), Catch::Contains("'[' without ']'"));
  CHECK_THAT(message("gpu01-04]"), Catch::Contains("']' without '['"));
  CHECK_THAT(message("gpu[]"), Catch::Contains("empty brackets"));
  CHECK_THAT(message("gpu[4-1]"), Catch::Contains("backwards"));
  CHECK_THAT(message("gpu[a-b]"), Catch::Contains("'a-b' is not a number"));
  CHECK_THAT(message("gpu[1,,2]"), Catch::Contains("empty element"));
  CHECK_THAT(message("a,,b"), Catch::Contains("empty host name"));
  CHECK_THAT(message("gpu[1-[2]]"), Catch::Contains("nested"));
  CHECK_THAT(message("n[0-99999999]"), Catch::Contains("too many hosts"));
  CHECK_THAT(message("a b"), Catch::Contains("white space"));
  CHECK_THAT(message("gpu[1-2]"), Catch::Contains("no error"));
}
