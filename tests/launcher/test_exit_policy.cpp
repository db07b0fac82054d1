#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <csignal>

#include "launcher/exit_policy.h"

using namespace launch;

namespace {
const Termination ok{Termination::How::Exited, 0};
const Termination code3{Termination::How::Exited, 3};
const Termination segv{Termination::How::Signaled, SIGSEGV};
const Termination term{Termination::How::Signaled, SIGTERM};
}  // namespace

TEST_CASE("exit codes: a signal counts as 128+signal", "[launcher][exit]") {
  CHECK(exit_code_of(ok) == 0);
  CHECK(exit_code_of(code3) == 3);
  CHECK(exit_code_of(segv) == 139);
  CHECK(exit_code_of(term) == 143);
  CHECK_FALSE(is_failure(ok));
  CHECK(is_failure(code3));
  CHECK(is_failure(segv));
}

TEST_CASE("wait status decoding", "[launcher][exit]") {
  // The encoding glibc's macros read: exit code in bits 8-15, signal in bits 0-6.
  Termination t = from_wait_status(3 << 8);
  CHECK(t.how == Termination::How::Exited);
  CHECK(t.value == 3);
  t = from_wait_status(SIGSEGV);
  CHECK(t.how == Termination::How::Signaled);
  CHECK(t.value == SIGSEGV);
  t = from_wait_status(SIGABRT | 0x80);  // core dumped
  CHECK(t.how == Termination::How::Signaled);
  CHECK(t.value == SIGABRT);
}

TEST_CASE("signal names and descriptions", "[launcher][exit]") {
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGRTMIN + 2) == "SIGRTMIN+2");
  CHECK(signal_name(200) == "signal 200");
  CHECK(describe(2, code3) == "rank 2 exited with code 3");
  CHECK(describe(0, segv) == "rank 0 killed by SIGSEGV");
  CHECK(describe(code3) == "exited with code 3");
}

TEST_CASE("exit policy: the first failure is the root cause", "[launcher][exit]") {
  ExitPolicy p;
  CHECK_FALSE(p.on_worker_end(0, ok));
  CHECK_FALSE(p.stopping());
  CHECK(p.on_worker_end(2, segv));
  CHECK(p.stopping());
  // What our SIGTERM kills afterwards is a consequence, not a cause.
  CHECK_FALSE(p.on_worker_end(1, term));
  CHECK_FALSE(p.on_worker_end(3, code3));
  CHECK_FALSE(p.on_launcher_signal(SIGINT));
  CHECK(p.root_rank() == 2);
  CHECK(p.exit_code() == 139);
  CHECK_FALSE(p.launcher_signal().has_value());
}

TEST_CASE("exit policy: a signal to the launcher gives 128+signal", "[launcher][exit]") {
  ExitPolicy p;
  CHECK(p.on_launcher_signal(SIGTERM));
  CHECK_FALSE(p.on_worker_end(0, term));  // our forwarded SIGTERM, not a root cause
  CHECK_FALSE(p.root_rank().has_value());
  CHECK(p.exit_code() == 143);
}

TEST_CASE("exit policy: all workers succeed", "[launcher][exit]") {
  ExitPolicy p;
  for (int r = 0; r < 4; ++r) CHECK_FALSE(p.on_worker_end(r, ok));
  CHECK(p.exit_code() == 0);
}

TEST_CASE("exit policy: a failure on another node stops the job with its code", "[launcher][exit]") {
  ExitPolicy p;
  CHECK(p.on_remote_failure(3, "node 1 (10.0.0.2): rank 5 exited with code 3"));
  CHECK(p.stopping());
  CHECK(p.exit_code() == 3);
  CHECK(p.remote_failure() == std::optional<std::string>("node 1 (10.0.0.2): rank 5 exited with code 3"));
  // Our workers then die of our SIGTERM: a consequence, not a cause.
  CHECK_FALSE(p.on_worker_end(0, {Termination::How::Signaled, SIGTERM}));
  CHECK_FALSE(p.root_rank());
  CHECK(p.exit_code() == 3);
  CHECK_FALSE(p.on_remote_failure(4, "later"));
  // A launcher that stopped responding has no exit code: 1.
  ExitPolicy q;
  q.on_remote_failure(0, "node 2: launcher stopped responding");
  CHECK(q.exit_code() == 1);
  // A local root cause first: a remote report afterwards changes nothing.
  ExitPolicy r;
  r.on_worker_end(1, {Termination::How::Exited, 7});
  CHECK_FALSE(r.on_remote_failure(3, "x"));
  CHECK(r.exit_code() == 7);
}
