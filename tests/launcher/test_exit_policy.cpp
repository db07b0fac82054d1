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

namespace {
const Termination lost_code{Termination::How::Exited, 86};
LostPeerReport lost(int noticer, std::optional<int> peer, LostPeerReport::Peer is, std::string state = "") {
  LostPeerReport r;
  r.noticer = noticer;
  r.end = lost_code;
  r.peer = peer;
  r.what = "no progress for 2000 ms waiting for rank " + (peer ? std::to_string(*peer) : std::string("?"));
  r.peer_is = is;
  r.peer_state = std::move(state);
  return r;
}
}  // namespace

TEST_CASE("exit policy: a worker that lost a live peer puts that peer first", "[launcher][exit][peer_lost]") {
  ExitPolicy p;
  CHECK(p.on_peer_lost(lost(0, 1, LostPeerReport::Peer::Alive, "is stopped (SIGSTOP or SIGTSTP)")) ==
        ExitPolicy::Verdict::RootCause);
  REQUIRE(p.root());
  CHECK(p.root()->rank == 1);
  CHECK_FALSE(p.root()->end);  // it never ended on its own
  CHECK(p.root()->noticed_by == 0);
  CHECK_THAT(p.root()->description, Catch::StartsWith("stopped responding (its process is stopped") &&
                                        Catch::Contains("rank 0 lost it: no progress"));
  CHECK(p.exit_code() == 86);  // the noticer's code: the stopped rank never exited
  // The stopped rank then dies of our SIGTERM: a consequence.
  CHECK_FALSE(p.on_worker_end(1, term));
  CHECK(p.root_rank() == 1);
  // Stuck, but named by nobody (the noticer waited for another rank): it gave up, not lost it.
  ExitPolicy q;
  LostPeerReport unnamed = lost(0, 2, LostPeerReport::Peer::Alive, "is stopped (SIGSTOP or SIGTSTP)");
  unnamed.named = false;
  q.on_peer_lost(unnamed);
  REQUIRE(q.root());
  CHECK(q.root()->rank == 2);
  CHECK_THAT(q.root()->description, Catch::Contains("rank 0 gave up: no progress") && !Catch::Contains("lost it"));
}

TEST_CASE("exit policy: a peer's own failure first stays the root cause", "[launcher][exit][peer_lost]") {
  ExitPolicy p;
  CHECK(p.on_worker_end(1, segv));
  CHECK(p.on_peer_lost(lost(0, 1, LostPeerReport::Peer::Ended)) == ExitPolicy::Verdict::Consequence);
  CHECK(p.root_rank() == 1);
  CHECK(p.exit_code() == 139);
  // A chain in a ring: rank 2 lost rank 0, which had lost rank 1 -- still rank 1.
  CHECK(p.on_peer_lost(lost(2, 0, LostPeerReport::Peer::Ended)) == ExitPolicy::Verdict::Consequence);
  CHECK(p.root_rank() == 1);
}

TEST_CASE("exit policy: a lost peer that ended cleanly, or unnamed, leaves the noticer at fault", "[launcher][exit][peer_lost]") {
  ExitPolicy p;
  CHECK(p.on_peer_lost(lost(0, 1, LostPeerReport::Peer::Ended)) == ExitPolicy::Verdict::RootCause);
  CHECK(p.root_rank() == 0);
  CHECK_THAT(p.root()->description, Catch::Contains("already exited cleanly"));
  ExitPolicy q;
  CHECK(q.on_peer_lost(lost(3, std::nullopt, LostPeerReport::Peer::Unknown)) == ExitPolicy::Verdict::RootCause);
  CHECK(q.root_rank() == 3);
  CHECK(q.exit_code() == 86);
}

TEST_CASE("exit policy: a peer on another node waits for that node's report", "[launcher][exit][peer_lost]") {
  ExitPolicy p;
  CHECK(p.on_peer_lost(lost(0, 2, LostPeerReport::Peer::Remote)) == ExitPolicy::Verdict::AwaitRemote);
  CHECK(p.stopping());
  CHECK(p.awaiting_remote());
  CHECK_FALSE(p.root());
  // Our own workers die of our SIGTERM meanwhile: consequences.
  CHECK_FALSE(p.on_worker_end(1, term));
  CHECK(p.on_remote_failure(0, "node 1 (10.0.0.2): launcher stopped responding (no heartbeat for 5 s)"));
  CHECK_FALSE(p.awaiting_remote());
  CHECK_FALSE(p.root());
  CHECK(p.remote_failure() == std::optional<std::string>("node 1 (10.0.0.2): launcher stopped responding (no heartbeat for 5 s)"));
  CHECK(p.exit_code() == 1);
  CHECK_FALSE(p.settle_remote());

  // Nobody reports: the noticer is the root cause, naming the peer it lost.
  ExitPolicy q;
  q.on_peer_lost(lost(0, 2, LostPeerReport::Peer::Remote));
  CHECK(q.exit_code() == 86);
  CHECK(q.settle_remote());
  CHECK(q.root_rank() == 0);
  CHECK_THAT(q.root()->description, Catch::Contains("losing rank 2, which is not one of this launcher's workers"));
  CHECK_FALSE(q.on_remote_failure(3, "too late"));
  CHECK(q.exit_code() == 86);
}

TEST_CASE("exit policy: re-forming around a joining node is no failure and explains a lost remote peer", "[launcher][exit][elastic]") {
  ExitPolicy p;
  CHECK(p.on_reform("1 node(s) ask to join: host-d"));
  CHECK(p.stopping());
  CHECK(p.reform() == std::optional<std::string>("1 node(s) ask to join: host-d"));
  CHECK_FALSE(p.on_worker_end(0, code3));  // the workers' ends from here on are its consequence
  CHECK_FALSE(p.on_remote_failure(3, "late"));
  CHECK_FALSE(p.root());
  CHECK(p.exit_code() == 0);
  // A worker that lost a peer on another node (its node stopped first for the join): explained.
  ExitPolicy q;
  CHECK(q.on_peer_lost(lost(0, 2, LostPeerReport::Peer::Remote)) == ExitPolicy::Verdict::AwaitRemote);
  CHECK(q.on_reform("a join"));
  CHECK_FALSE(q.awaiting_remote());
  CHECK(q.exit_code() == 0);
  // A failure first stays a failure.
  ExitPolicy f;
  f.on_worker_end(1, segv);
  CHECK_FALSE(f.on_reform("a join"));
  CHECK_FALSE(f.reform());
  CHECK(f.exit_code() == 139);
}

TEST_CASE("exit policy: while stopping, only SIGINT and SIGQUIT mean now", "[launcher][exit][signals]") {
  // Slurm repeats SIGTERM (time limit: SIGTERM, SIGCONT, SIGTERM); a terminal hangs up once per
  // process. A Ctrl-C or Ctrl-\ while the job stops is someone who will not wait.
  CHECK_FALSE(stop_signal_means_now(SIGTERM));
  CHECK_FALSE(stop_signal_means_now(SIGHUP));
  CHECK(stop_signal_means_now(SIGINT));
  CHECK(stop_signal_means_now(SIGQUIT));
}
