#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "launcher/errors.h"
#include "launcher/ports.h"

using namespace launch;

namespace {
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/launch-ports-test-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

bool can_bind(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}
}  // namespace

TEST_CASE("ports: distinct, held until released, then bindable", "[launcher][ports]") {
  TempDir td;
  const std::string& dir = td.path;
  PortReservation r = reserve_ports("127.0.0.1", 9, std::nullopt, dir);
  std::set<uint16_t> unique(r.ports().begin(), r.ports().end());
  CHECK(unique.size() == 9);
  CHECK_FALSE(can_bind(r.ports()[0]));  // still held by our socket
  r.release_sockets();
  for (uint16_t p : r.ports()) CHECK(can_bind(p));
}

TEST_CASE("ports: a second reservation skips ports whose lock another holds", "[launcher][ports]") {
  TempDir td;
  const std::string& dir = td.path;
  PortReservation a = reserve_ports("127.0.0.1", 16, std::nullopt, dir);
  a.release_sockets();  // the window in which another launch's bind(0) could draw them
  for (int round = 0; round < 20; ++round) {
    PortReservation b = reserve_ports("127.0.0.1", 16, std::nullopt, dir);
    for (uint16_t p : b.ports())
      CHECK(std::find(a.ports().begin(), a.ports().end(), p) == a.ports().end());
  }
}

TEST_CASE("ports: a port locked by a live launch is refused even when free", "[launcher][ports]") {
  TempDir td;
  const std::string& dir = td.path;
  PortReservation probe = reserve_ports("127.0.0.1", 2, std::nullopt, "");
  const uint16_t p = probe.ports()[0];
  probe = PortReservation();  // free again
  PortReservation a = reserve_ports("127.0.0.1", 1, p, dir);
  a.release_sockets();  // free for bind(), but the lock is held
  CHECK_THROWS_WITH(reserve_ports("127.0.0.1", 1, p, dir), Catch::Contains("held by another launch"));
  a = PortReservation();  // the launch ends: its lock goes
  CHECK_NOTHROW(reserve_ports("127.0.0.1", 1, p, dir));
}

TEST_CASE("ports: --start_port takes consecutive ports and refuses a busy one", "[launcher][ports]") {
  TempDir td;
  const std::string& dir = td.path;
  // A listening server holds this port.
  int server = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(server, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(server, 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(server, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const int busy = ntohs(a.sin_port);
  CHECK_THROWS_WITH(reserve_ports("127.0.0.1", 2, busy, dir), Catch::Contains("in use"));
  CHECK_THROWS_WITH(reserve_ports("127.0.0.1", 3, 65534, dir), Catch::Contains("no room"));
  CHECK_THROWS_WITH(reserve_ports("not-an-ip", 1, std::nullopt, dir), Catch::Contains("not an IP address"));
  close(server);
}

namespace {
// TMPDIR for the scope of a test.
struct TmpdirAs {
  explicit TmpdirAs(const std::string& dir) {
    if (const char* t = std::getenv("TMPDIR")) old = t;
    setenv("TMPDIR", dir.c_str(), 1);
  }
  ~TmpdirAs() {
    if (old.empty())
      unsetenv("TMPDIR");
    else
      setenv("TMPDIR", old.c_str(), 1);
  }
  std::string old;
};
}  // namespace

TEST_CASE("ports: the lock folder is the user's own under TMPDIR, made 0700", "[launcher][ports]") {
  TempDir td;
  TmpdirAs tmp(td.path);
  const std::string want = td.path + "/launch-" + std::to_string(getuid()) + "/ports";
  CHECK(port_lock_dir() == want);
  struct stat st;
  REQUIRE(lstat(want.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  PortReservation r = reserve_ports("127.0.0.1", 2, std::nullopt);
  CHECK(std::filesystem::exists(want + "/" + std::to_string(r.ports()[0])));
}

TEST_CASE("ports: a lock folder planted as a file, a symlink or open to others is refused, saying what to do",
          "[launcher][ports]") {
  // Issue 22, item 12: a regular file /tmp/launch-ports (any local user can make one) switched
  // port locking off without a word.
  TempDir td;
  TmpdirAs tmp(td.path);
  const std::string mine = td.path + "/launch-" + std::to_string(getuid());
  { std::ofstream(mine) << "planted"; }
  CHECK_THROWS_WITH(reserve_ports("127.0.0.1", 1, std::nullopt),
                    Catch::Contains(mine + " is a regular file, not a directory of yours (remove it: rm " + mine + ")") &&
                        Catch::Contains("set TMPDIR to a directory of yours"));
  std::filesystem::remove(mine);
  std::filesystem::create_directory_symlink(td.path, mine);
  CHECK_THROWS_WITH(port_lock_dir(), Catch::Contains(mine + " is a symbolic link"));
  std::filesystem::remove(mine);
  REQUIRE(mkdir(mine.c_str(), 0700) == 0);
  chmod(mine.c_str(), 0777);
  CHECK_THROWS_WITH(port_lock_dir(), Catch::Contains(mine + " may be used by group or others (mode 0777): chmod 700 " + mine));
  chmod(mine.c_str(), 0700);
  { std::ofstream(mine + "/ports") << "planted"; }
  CHECK_THROWS_WITH(port_lock_dir(), Catch::Contains(mine + "/ports is a regular file"));
  std::filesystem::remove(mine + "/ports");
  CHECK(port_lock_dir() == mine + "/ports");
  // A folder given explicitly is checked the same way.
  const std::string open_dir = td.path + "/open";
  REQUIRE(mkdir(open_dir.c_str(), 0700) == 0);
  chmod(open_dir.c_str(), 01777);
  CHECK_THROWS_WITH(reserve_ports("127.0.0.1", 1, std::nullopt, open_dir), Catch::Contains("chmod 700 " + open_dir));
}

TEST_CASE("ports: a lock folder of another user is refused", "[launcher][ports]") {
  if (geteuid() != 0) {
    WARN("skipped: needs root to give a folder to another user");
    return;
  }
  TempDir td;
  chmod(td.path.c_str(), 0755);  // so that the other user's folder can sit in it
  TmpdirAs tmp(td.path);
  const std::string mine = td.path + "/launch-" + std::to_string(getuid());
  REQUIRE(mkdir(mine.c_str(), 0700) == 0);
  REQUIRE(chown(mine.c_str(), 65534, 65534) == 0);
  CHECK_THROWS_WITH(port_lock_dir(), Catch::Contains(mine + " belongs to uid 65534, not to you (uid 0)") &&
                                         Catch::Contains("set TMPDIR"));
}
