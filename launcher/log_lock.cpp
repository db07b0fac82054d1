#include "launcher/log_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "launcher/errors.h"
#include "launcher/worker_env.h"

namespace launch {

LogLocks::~LogLocks() {
  for (const auto& [path, fd] : fds_) close(fd);
}

void LogLocks::hold(const std::string& log_dir, const std::vector<int>& ranks) {
  for (int rank : ranks) {
    const std::string path = worker_log_path(log_dir, rank);
    if (fds_.count(path)) continue;  // ours already (an earlier generation)
    // Opened as the supervisor opens it (appending, created), and close-on-exec: no worker, and
    // no launch started by one, inherits the lock.
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw UsageError("cannot open log file " + path + ": " + std::strerror(errno) + "; choose another --log_dir");
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
      const int err = errno;
      struct stat st {};
      const bool stat_ok = fstat(fd, &st) == 0;
      close(fd);
      if (err != EWOULDBLOCK) throw SystemError("flock " + path, err);
      std::ifstream f("/proc/locks");
      std::stringstream text;
      text << f.rdbuf();
      const std::optional<pid_t> pid = stat_ok ? flock_holder(text.str(), st.st_dev, st.st_ino) : std::nullopt;
      throw UsageError("--log_dir " + log_dir + " is in use: another launch (" +
                       (pid ? "pid " + std::to_string(*pid) : std::string("on another host of a shared file system?")) +
                       ") is writing " + path + "; wait for it to end, or give this launch its own --log_dir");
    }
    fds_[path] = fd;
  }
}

std::optional<pid_t> flock_holder(const std::string& proc_locks, dev_t dev, ino_t ino) {
  // "3: FLOCK  ADVISORY  WRITE 1234 fe:01:5678 0 EOF"; a waiter's line reads "3: -> FLOCK ...".
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%lu", major(dev), minor(dev), static_cast<unsigned long>(ino));
  std::istringstream in(proc_locks);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, type, advisory, mode, where;
    long pid = 0;
    if (!(f >> id >> type) || type != "FLOCK") continue;
    if (!(f >> advisory >> mode >> pid >> where)) continue;
    if (where == want && pid > 0) return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

}  // namespace launch
