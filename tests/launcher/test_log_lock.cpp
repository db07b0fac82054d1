#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "launcher/errors.h"
#include "launcher/log_lock.h"
#include "tests/temp_dir.h"

using namespace launch;

TEST_CASE("log lock: the holder of an FLOCK is read from /proc/locks", "[launcher][log_lock]") {
  const std::string locks =
      "1: POSIX  ADVISORY  WRITE 17556 fe:00:10952997 0 EOF\n"
      "2: FLOCK  ADVISORY  WRITE 4242 fe:01:123456 0 EOF\n"
      "2: -> FLOCK  ADVISORY  WRITE 5151 fe:01:123456 0 EOF\n"
      "3: FLOCK  ADVISORY  WRITE 777 08:11:99 0 EOF\n";
  CHECK(flock_holder(locks, makedev(0xfe, 1), 123456) == 4242);  // not the waiter
  CHECK(flock_holder(locks, makedev(8, 0x11), 99) == 777);
  CHECK_FALSE(flock_holder(locks, makedev(0xfe, 0), 10952997));  // a POSIX lock is not ours
  CHECK_FALSE(flock_holder(locks, makedev(0xfe, 1), 1));
  CHECK_FALSE(flock_holder("", 0, 0));
}

TEST_CASE("log lock: held per workerlog.N, refused to another holder with its pid, kept when asked again",
          "[launcher][log_lock]") {
  testing_support::TempDir td("log-lock");
  const std::string& d = td.path;
  LogLocks mine;
  mine.hold(d, {0, 1});
  mine.hold(d, {0, 1, 2});  // a later generation: what is held stays held, rank 2 is added
  LogLocks other;
  CHECK_THROWS_WITH(other.hold(d, {2}), Catch::Contains("--log_dir " + d + " is in use: another launch (pid " +
                                                        std::to_string(getpid()) + ") is writing " + d +
                                                        "/workerlog.2"));
  CHECK_NOTHROW(other.hold(d, {3}));  // a multi-node job's other node: its own ranks, the same folder
  // The lock is on the file the supervisor appends to, and nothing else holds it.
  const int fd = open((d + "/workerlog.0").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(flock(fd, LOCK_EX | LOCK_NB) < 0);
  close(fd);
  CHECK_THROWS_AS(LogLocks().hold(d + "/missing/dir", {0}), UsageError);
}
