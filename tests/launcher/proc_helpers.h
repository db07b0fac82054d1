// Helpers of the integration tests (Catch2): run the real `launch` binary with its output in
// files, wait for things with deadlines (never a fixed sleep), and tell whether a process is gone.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace testutil {

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Polls cond every 2 ms until it holds or the deadline passes.
inline bool wait_until(const std::function<bool()>& cond, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A fresh directory under /tmp, removed with everything in it at the end of the test.
struct TempDir : testing_support::TempDir {
  TempDir() : testing_support::TempDir("launch-test") {}
};

// Gone, or a zombie that nobody has reaped yet (it holds nothing any more).
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) < 0 && errno == ESRCH) return true;
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

inline pid_t read_pid(const std::string& path) { return static_cast<pid_t>(std::atol(slurp(path).c_str())); }

struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::string out() const { return slurp(out_path); }
  std::string err() const { return slurp(err_path); }
};

// Starts `argv` in `dir` with stdout/stderr in dir/<tag>.out and dir/<tag>.err (stdout on
// `stdout_fd` instead when one is given: a pipe nobody reads, /dev/full; stderr on `stderr_fd`
// when one is given: the same pipe for `2>&1`).
inline Proc start(const std::vector<std::string>& argv, const std::string& dir,
                  const std::map<std::string, std::string>& env = {}, const std::string& tag = "launch",
                  int stdout_fd = -1, int stderr_fd = -1) {
  Proc p;
  p.out_path = stdout_fd >= 0 ? "" : dir + "/" + tag + ".out";
  p.err_path = stderr_fd >= 0 ? "" : dir + "/" + tag + ".err";
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  p.pid = fork();
  if (p.pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    if (chdir(dir.c_str()) < 0) _exit(126);
    int o = stdout_fd >= 0 ? stdout_fd : open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = stderr_fd >= 0 ? stderr_fd : open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    execv(av[0], av.data());
    _exit(127);
  }
  // A failed fork must not go on as pid -1: waitpid(-1) would wait for any child at all.
  const int fork_errno = errno;
  INFO("fork() for " << argv.front() << ": " << std::strerror(fork_errno));
  REQUIRE(p.pid > 0);
  return p;
}

// Exit code (128+signal for a signal), or nullopt when it did not exit in time. A waitpid error
// (ECHILD: not our child, or reaped by someone else) fails the test, naming it: it is no timeout.
inline std::optional<int> wait_exit(pid_t pid, double timeout_s) {
  int st = 0;
  pid_t r = 0;
  int err = 0;
  bool done = wait_until(
      [&] {
        r = waitpid(pid, &st, WNOHANG);
        if (r < 0 && errno == EINTR) return false;
        err = errno;
        return r != 0;
      },
      timeout_s);
  if (done && r < 0) FAIL("waitpid(" << pid << "): " << std::strerror(err) << " (not a timeout)");
  if (!done) return std::nullopt;
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

// Kills and reaps a launcher a failed test left behind, so a failure does not hang ctest.
struct Reaper {
  explicit Reaper(pid_t p) : pid(p) {}
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  pid_t pid;
  ~Reaper() {
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// "127.0.0.1:PORT" with a port nobody holds right now (the kernel's pick; the window until the
// test's server binds it is the usual one of a user-chosen address).
inline std::string free_loopback_address() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

// Whether files dir/<prefix>0 .. dir/<prefix>(n-1) each hold a whole line (the workers wrote them).
inline bool all_written(const std::string& dir, const std::string& prefix, int n) {
  for (int r = 0; r < n; ++r)
    if (slurp(dir + "/" + prefix + std::to_string(r)).find('\n') == std::string::npos) return false;
  return true;
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) out.push_back(l);
  return out;
}

inline std::map<std::string, std::string> parse_env_file(const std::string& path) {
  std::map<std::string, std::string> m;
  for (const auto& l : lines_of(slurp(path))) {
    size_t eq = l.find('=');
    if (eq != std::string::npos) m[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return m;
}

}  // namespace testutil
