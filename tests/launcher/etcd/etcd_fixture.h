// A real etcd (Debian's etcd-server) for the tests: on 127.0.0.1, on two ports reserved as the
// launcher reserves its own (launcher/ports.h), with a data dir under /tmp that goes with it.
// Readiness is etcd's own READY=1 on a NOTIFY_SOCKET (sd_notify), its death a pidfd: no polling.
// Tests that need it call require_etcd() first: without an etcd binary the test binary reports
// SKIPPED (exit 77).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/etcd/client.h"
#include "launcher/ports.h"
#include "tests/temp_dir.h"

namespace etcdtest {

// $ETCD_BIN, else `etcd` on PATH; "" when there is none (or $ETCD_BIN is not executable).
inline std::string etcd_binary() {
  if (const char* e = std::getenv("ETCD_BIN")) return ::access(e, X_OK) == 0 ? e : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && ::access((d + "/etcd").c_str(), X_OK) == 0) return d + "/etcd";
  return "";
}

inline void require_etcd() {
  if (!etcd_binary().empty()) return;
  std::printf("SKIPPED: no etcd binary (apt-get install etcd-server, or set ETCD_BIN)\n");
  std::fflush(stdout);
  std::_Exit(77);
}

class EtcdServer {
 public:
  EtcdServer() {
    for (int attempt = 0;; ++attempt) {
      if (start()) return;
      // Another program took a port between our release and etcd's bind: new ports.
      if (attempt == 2 || log().find("address already in use") == std::string::npos)
        throw std::runtime_error("etcd did not start; its log:\n" + tail(log()));
    }
  }
  ~EtcdServer() { stop(); }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  launch::etcd::Options options() const {
    launch::etcd::Options o;
    o.endpoint = endpoint_;
    o.endpoint_source = "the test's etcd";
    o.timeout = std::chrono::seconds(5);
    return o;
  }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream f(dir_.path + "/etcd.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  void pause() { ::kill(pid_, SIGSTOP); }  // etcd hangs: connections open, nothing answers
  void resume() { ::kill(pid_, SIGCONT); }
  // SIGTERM (SIGKILL after 5 s) and reap; idempotent.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(pidfd_);
    pid_ = -1;
  }

 private:
  static std::string tail(const std::string& s) { return s.size() > 3000 ? s.substr(s.size() - 3000) : s; }

  // One start on two fresh ports; false when etcd exited before it was ready.
  bool start() {
    ports_ = launch::reserve_ports("127.0.0.1", 2, std::nullopt);
    const std::string client = "http://127.0.0.1:" + std::to_string(ports_.ports()[0]);
    const std::string peer = "http://127.0.0.1:" + std::to_string(ports_.ports()[1]);
    endpoint_ = client.substr(7);
    ports_.release_sockets();

    const std::string notify = dir_.path + "/notify";
    ::unlink(notify.c_str());
    int ns = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", notify.c_str());
    if (ns < 0 || ::bind(ns, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
      throw std::runtime_error("cannot make the notify socket " + notify);

    std::vector<std::string> args = {etcd_binary(), "--name", "test", "--data-dir", dir_.path + "/data",
                                     "--listen-client-urls", client, "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", "test=" + peer};
    const std::string log_path = dir_.path + "/etcd.log";
    // Everything the child needs is made before fork: other threads may hold malloc's lock.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string notify_env = "NOTIFY_SOCKET=" + notify;
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e)
      if (std::string_view(*e).rfind("NOTIFY_SOCKET=", 0) != 0) envp.push_back(*e);
    envp.push_back(notify_env.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a crashed test
      int lf = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(lf, 1);
      ::dup2(lf, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    pollfd p[2] = {{ns, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    int pr = ::poll(p, 2, 20000);
    char buf[256] = "";
    ssize_t n = (pr > 0 && (p[0].revents & POLLIN)) ? ::recv(ns, buf, sizeof buf - 1, 0) : -1;
    ::close(ns);
    if (n > 0 && std::string(buf, size_t(n)).find("READY=1") != std::string::npos) return true;
    const bool exited = pr > 0 && (p[1].revents & POLLIN);
    stop();
    if (!exited) throw std::runtime_error("etcd was not ready within 20 s; its log:\n" + tail(log()));
    return false;
  }

  testing_support::TempDir dir_{"etcd-test"};
  launch::PortReservation ports_;  // its locks keep other launches off our ports
  std::string endpoint_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

// One etcd for the tests that do not stop or pause it (about 0.5 s to start); each test keeps
// to keys under its own unique_prefix(). Ask for it first on the test's own thread: etcd's
// PR_SET_PDEATHSIG follows the thread that started it.
inline EtcdServer& shared_etcd() {
  require_etcd();
  static EtcdServer server;
  return server;
}

inline std::string unique_prefix() {
  static int n = 0;
  return "/test-" + std::to_string(::getpid()) + "-" + std::to_string(++n) + "/";
}

// Seconds since `t0`, for the timing assertions.
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace etcdtest
