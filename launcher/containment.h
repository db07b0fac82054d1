// Containment: how the launcher keeps hold of every process of its job -- the workers, what they
// start, and what those start, including processes that call setsid or double-fork -- so that
// teardown reaches all of them in one pass and none outlives the job, even when the launcher is
// SIGKILLed (the OOM killer, `kill -9`, a node agent). In order of preference:
//
//  - Cgroup: the job gets a cgroup v2 of its own, a child of the launcher's
//    (`<mount>/<launcher's cgroup>/launch-<pid>`; writable when systemd or Slurm delegated the
//    subtree, or as root). Every worker moves itself in before execve, so all descendants are
//    born there. Teardown signals every process listed in it; the SIGKILL is `cgroup.kill`
//    (Linux >= 5.14), which catches forks in flight. A guard process outside the job (its own
//    session, not the launcher's child) waits on a pipe from the launcher and writes
//    `cgroup.kill` when the launcher dies, however it dies. PIDs, /proc and getppid() are those
//    of the host: nothing changes for the workers.
//  - PidNamespace: the workers live in a PID namespace whose init is the launcher's child (with
//    PR_SET_PDEATHSIG(SIGKILL)): when the launcher dies, init dies, and the kernel kills every
//    process of the namespace. Needs CAP_SYS_ADMIN (root, or a container allowed to unshare).
//    The one namespace is shared by all workers of this node, so NCCL, which hashes the PID
//    together with the namespace (getPidHash reads /proc/self/ns/pid) and exchanges PIDs between
//    ranks, sees consistent values. /proc is NOT remounted: the workers still see the host's
//    processes, the launcher among them, but getpid() returns the PID inside the namespace
//    (2, 3, ...), not the one /proc and the launcher's report show, and getppid() returns 0.
//    A program that reads /proc/<getpid()>/ (psutil.Process() does) reads another process.
//    Hence only the fallback when no cgroup can be had.
//  - ProcessGroups: today's behaviour, where neither is allowed. Workers get PDEATHSIG and a
//    process group each; the launcher is a child subreaper and signals what is adopted during
//    teardown too. A SIGKILLed launcher leaves grandchildren running.
//
// LAUNCH_CONTAINMENT=auto|cgroup|pidns|none picks one (auto: the first that works; a named one
// that does not work here is an error). The choice and why is logged before any worker starts.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace launch {

enum class ContainmentKind { Cgroup, PidNamespace, ProcessGroups };

// What a worker does between fork and execve to join the job's containment (plain data: only
// async-signal-safe calls happen there).
struct ChildJoin {
  int cgroup_procs_fd = -1;  // write "0" here: the child moves itself into the job's cgroup
  pid_t expected_parent = -1;  // getppid() while the launcher lives (0 in a PID namespace)
  // A PID namespace: the fork happens between setns(pidns_fd) and setns(own_pidns_fd), so that
  // only the worker is born inside (a thread whose children go to another namespace cannot
  // create threads, and the launcher's store and monitor are threads).
  int pidns_fd = -1;
  int own_pidns_fd = -1;
};

class Containment {
 public:
  // Sets up the strongest containment available (or the one LAUNCH_CONTAINMENT names), makes the
  // launcher a child subreaper, and logs which one is in force and why. Call before any worker
  // is started (threads may exist: what the forked helpers run is async-signal-safe). Throws
  // UsageError for a bad LAUNCH_CONTAINMENT or one that cannot be had here.
  static std::unique_ptr<Containment> create();
  // Kills whatever is left and removes the cgroup / ends the namespace.
  virtual ~Containment() = default;

  virtual ContainmentKind kind() const = 0;
  virtual std::string describe() const = 0;  // "cgroup v2 /sys/fs/cgroup/.../launch-123"
  virtual ChildJoin child_join() const = 0;

  // Processes of the job other than the launcher's direct children, for teardown: the members
  // of the cgroup or of the namespace (without its init); for ProcessGroups, the orphans the
  // launcher adopted. `workers` are the process groups the supervisor signals itself.
  virtual std::vector<pid_t> members() const = 0;
  // SIGKILL everything at once (cgroup.kill); false where there is no such thing.
  virtual bool kill_all() = 0;
  // Whether processes of the job may still be alive, given whether the launcher still has
  // children (waitpid). In a namespace, orphans belong to its init, not to the launcher.
  virtual bool anything_left(bool launcher_has_children) const = 0;
  // The launcher reaped `pid` and it was none of its workers: true when it was the namespace's
  // init (every process of the namespace is gone with it).
  virtual bool on_reaped(pid_t pid) = 0;
  // The supervisor gave up on processes that SIGKILL has not ended (uninterruptible sleep: a
  // driver, a hung file system): the containment stops waiting for them at the launcher's end
  // and leaves what outlives it in a known state, which the returned text tells the user --
  //  - cgroup: the job's cgroup stays, cgroup.kill written (each process dies as soon as the
  //    kernel lets it); the guard process removes the cgroup once the last one is gone;
  //  - pidns: the namespace's init has been told to kill everything; the kernel ends the
  //    namespace once they are gone;
  //  - process groups: nothing holds them any more.
  virtual std::string leave() = 0;
};

// Parses LAUNCH_CONTAINMENT ("auto" when empty); nullopt for auto. Throws UsageError.
std::optional<ContainmentKind> parse_containment(const std::string& value);
std::string containment_name(ContainmentKind k);  // "cgroup", "pidns", "none"

// --- Pure helpers of the cgroup setup, unit-tested on recorded files.
struct Cgroup2Mount {
  std::string root;         // the hierarchy's path mounted there ("/" unless bind-mounted)
  std::string mount_point;  // "/sys/fs/cgroup" (v2 only) or "/sys/fs/cgroup/unified" (hybrid)
};
// The cgroup v2 mount from /proc/self/mountinfo's text; nullopt when there is none.
std::optional<Cgroup2Mount> cgroup2_mount(const std::string& mountinfo);
// The launcher's cgroup v2 path from /proc/self/cgroup's text (its "0::" line), e.g.
// "/user.slice/user-1000.slice/session-2.scope"; nullopt when there is none.
std::optional<std::string> cgroup2_path(const std::string& proc_self_cgroup);
// The directory of cgroup `path` under `m`; nullopt when the mount does not show it.
std::optional<std::string> cgroup2_dir(const Cgroup2Mount& m, const std::string& path);

}  // namespace launch
