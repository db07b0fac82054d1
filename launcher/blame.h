// Who is at fault when the first sign of a failure is a worker that lost a peer (it exited with
// proto::kPeerLostExitCode). In a ring of 4 one stopped rank makes several others give up, each
// naming whichever neighbour it was waiting for -- often a healthy rank that was itself waiting,
// or one that already gave up. Pure: what the supervisor knows of its workers in, a verdict out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/exit_policy.h"
#include "proto/peer_lost.h"

namespace launch {

// What the supervisor knows of one of its workers when the verdict is due.
struct RankView {
  int rank = 0;
  std::optional<Termination> end;       // it has ended (been reaped)
  std::optional<proto::PeerLost> lost;  // its LAUNCH_PEER_LOST line, if it wrote one
  char state = 0;                       // while alive: the state letter of /proc/PID/stat
};

// 'T' (stopped), 't' (stopped by a debugger), 'D' (uninterruptible sleep): it cannot answer.
bool looks_stuck(char state);
// "is stopped: SIGSTOP or SIGTSTP", ...: for "its process <this>".
std::string describe_state(char state);

// Either a worker whose own failure is the cause (for ExitPolicy::on_worker_end), or the
// lost-peer report to give ExitPolicy::on_peer_lost.
struct Blame {
  std::optional<size_t> own_failure;  // index into the views
  LostPeerReport lost;                // when own_failure is empty
};

// `failed`: indices into `ranks` of the workers that failed, in the order their ends arrived
// (not empty). In order of preference, the culprit is
//   1. the first worker that failed on its own (a signal, or any code but the peer-lost one);
//   2. a worker of ours that is alive but cannot run (looks_stuck), the one the lost-peer
//      reports name first;
//   3. where the chain of LAUNCH_PEER_LOST reports leads from the first one: "rank 0 lost rank
//      3", "rank 3 lost rank 2", so rank 2 (alive, ended cleanly, or on another node), and the
//      worker that lost it is the noticer. A chain that ends at a worker that could not name
//      its peer names that worker, one that loops the first to report, as having lost a peer it
//      could not name.
Blame blame(const std::vector<RankView>& ranks, const std::vector<size_t>& failed);

}  // namespace launch
