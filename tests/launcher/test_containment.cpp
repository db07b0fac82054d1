// The pure parts of the containment set-up, on recorded /proc files.
#include <catch2/catch.hpp>

#include "launcher/containment.h"
#include "launcher/errors.h"

using namespace launch;

namespace {

// This development machine (cgroup v1 with a v2 `unified` hierarchy), and a v2-only systemd host.
const char* kHybridMountinfo =
    "24 29 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "27 24 0:25 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "28 27 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
    "29 27 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory\n";
const char* kUnifiedMountinfo =
    "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
// A container that bind-mounts its own subtree (no cgroup namespace).
const char* kBindMountinfo =
    "612 600 0:26 /docker/abc /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n";

}  // namespace

TEST_CASE("containment: the cgroup v2 mount and this process's cgroup", "[launcher][containment]") {
  auto hybrid = cgroup2_mount(kHybridMountinfo);
  REQUIRE(hybrid);
  CHECK(hybrid->mount_point == "/sys/fs/cgroup/unified");
  CHECK(hybrid->root == "/");
  auto unified = cgroup2_mount(kUnifiedMountinfo);
  REQUIRE(unified);
  CHECK(unified->mount_point == "/sys/fs/cgroup");
  CHECK_FALSE(cgroup2_mount("24 29 0:22 / /sys rw - sysfs sysfs rw\n"));  // e.g. under `ip netns exec`

  CHECK(cgroup2_path("4:memory:/x\n0::/user.slice/user-1000.slice/session-2.scope\n") ==
        std::optional<std::string>("/user.slice/user-1000.slice/session-2.scope"));
  CHECK(cgroup2_path("0::/\n") == std::optional<std::string>("/"));
  CHECK_FALSE(cgroup2_path("4:memory:/x\n"));  // cgroup v1 only

  CHECK(cgroup2_dir(*hybrid, "/") == std::optional<std::string>("/sys/fs/cgroup/unified"));
  CHECK(cgroup2_dir(*unified, "/system.slice/slurmd.service") ==
        std::optional<std::string>("/sys/fs/cgroup/system.slice/slurmd.service"));
  auto bind = cgroup2_mount(kBindMountinfo);
  REQUIRE(bind);
  CHECK(cgroup2_dir(*bind, "/docker/abc") == std::optional<std::string>("/sys/fs/cgroup"));
  CHECK(cgroup2_dir(*bind, "/docker/abc/job") == std::optional<std::string>("/sys/fs/cgroup/job"));
  CHECK_FALSE(cgroup2_dir(*bind, "/docker/other"));  // not under what is mounted here
  CHECK_FALSE(cgroup2_dir(*bind, "/docker/abcd"));
  CHECK_FALSE(cgroup2_dir(*unified, "/a/../../etc"));
}

TEST_CASE("containment: LAUNCH_CONTAINMENT names a mode or auto", "[launcher][containment]") {
  CHECK_FALSE(parse_containment(""));
  CHECK_FALSE(parse_containment("auto"));
  CHECK(parse_containment("cgroup") == ContainmentKind::Cgroup);
  CHECK(parse_containment("pidns") == ContainmentKind::PidNamespace);
  CHECK(parse_containment("none") == ContainmentKind::ProcessGroups);
  CHECK_THROWS_AS(parse_containment("docker"), UsageError);
  for (auto k : {ContainmentKind::Cgroup, ContainmentKind::PidNamespace, ContainmentKind::ProcessGroups})
    CHECK(parse_containment(containment_name(k)) == k);
}
