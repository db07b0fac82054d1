// One writer per workerlog.N: two launches on one --log_dir interleaved their workers' output in
// the same files, without a word. A launch holds an flock on every workerlog.N it writes, from
// before its first worker starts until it exits -- across every generation of --max_restart --
// and a second launch that would write one of them is refused with the holder's pid and the way
// out. Per file, not per folder: the nodes of a multi-node job may share a folder (a shared home)
// and write their own ranks there, and a launch inside a worker writes OUTER/inner.RANK
// (plan.cpp), never the outer's files. The kernel drops the locks when a launcher dies, however.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace launch {

class LogLocks {
 public:
  LogLocks() = default;
  LogLocks(const LogLocks&) = delete;
  LogLocks& operator=(const LogLocks&) = delete;
  ~LogLocks();

  // Locks log_dir/workerlog.R (creating it) for each of `ranks` not held yet. Throws UsageError
  // naming the file, the other launch's pid and --log_dir when another process holds one.
  void hold(const std::string& log_dir, const std::vector<int>& ranks);

 private:
  std::map<std::string, int> fds_;  // by path
};

// The pid holding an FLOCK on the file (device `dev`, inode `ino`) in /proc/locks' text;
// nullopt when none is listed (the holder is on another host of a shared file system).
std::optional<pid_t> flock_holder(const std::string& proc_locks, dev_t dev, ino_t ino);

}  // namespace launch
