// The unique-id exchange the GPU worker uses for ncclUniqueId, with an opaque 128-byte blob
// and N forked processes against a real in-process store.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "store/store_server.h"
#include "proto/rendezvous.h"
#include "proto/token.h"

using namespace std::chrono_literals;

namespace {

proto::ClientOptions options(const store::StoreServer& server, const std::string& token, int rank) {
  proto::ClientOptions o;
  o.address = server.address();
  o.job_id = "rdv";
  o.token = token;
  o.client_name = "rank " + std::to_string(rank);
  o.connect_timeout = 10s;
  return o;
}

}  // namespace

TEST_CASE("N processes receive rank 0's 128-byte blob", "[proto][rendezvous]") {
  const int n = 8;
  store::StoreServerConfig cfg;
  cfg.job_id = "rdv";
  cfg.token = proto::generate_token();
  auto server = store::StoreServer::start(cfg);

  std::string blob(128, '\0');
  for (int i = 0; i < 128; ++i) blob[i] = static_cast<char>((i * 37 + 11) & 0xff);  // has NULs

  std::vector<pid_t> kids;
  for (int rank = 1; rank < n; ++rank) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 3;
      try {
        proto::Client c(options(*server, cfg.token, rank));
        std::string got = proto::share_unique_id(c, rank, "world", 0, "", 128, 30s);
        code = got == blob ? 0 : 1;
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  proto::Client c0(options(*server, cfg.token, 0));
  CHECK(proto::share_unique_id(c0, 0, "world", 0, blob, 128, 30s) == blob);
  for (pid_t pid : kids) {
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
}

TEST_CASE("a rank waiting for rank 0's id gets an error naming the key and rank 0", "[proto][rendezvous]") {
  store::StoreServerConfig cfg;
  cfg.job_id = "rdv";
  cfg.token = proto::generate_token();
  auto server = store::StoreServer::start(cfg);
  proto::Client c(options(*server, cfg.token, 1));
  try {
    proto::share_unique_id(c, 1, "world", 3, "", 128, 200ms);
    FAIL("expected a timeout");
  } catch (const proto::StoreError& e) {
    CHECK(e.kind() == proto::StoreError::Kind::Timeout);
    CHECK_THAT(e.what(), Catch::Contains("waited 200 ms for key 'nccl/uid/world/3' (written by rank 0)"));
  }
  proto::Client c0(options(*server, cfg.token, 0));
  CHECK_THROWS_AS(proto::share_unique_id(c0, 0, "world", 3, "short", 128, 1s), proto::StoreError);
  c0.set(proto::unique_id_key("world", 4), "short");
  CHECK_THROWS_WITH(proto::share_unique_id(c, 1, "world", 4, "", 128, 1s),
                    Catch::Contains("expected a 128-byte unique id"));
}
