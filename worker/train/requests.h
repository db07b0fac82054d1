// What signal handlers ask of the training loop -- stop (SIGINT/SIGTERM), save (the checkpoint
// signal) -- and how the ranks agree on it, so that all act at the same step boundary.
//
// A signal reaches the ranks at different moments (launch forwards it to each, Slurm signals
// each task; a user may signal one), possibly on either side of a boundary. At every boundary
// each rank sends what it has received so far and the ranks act on the all-gathered flags of
// the boundary before: the exchange overlaps a whole step (NCCL: it waits for nothing on the
// compute stream, and the host, reading it a boundary later, waits only if it runs more than a
// step ahead of the device), and every rank reads the same bytes at the same boundary, so every
// rank makes the same decision at the same step. A signal during step N is acted on after
// step N + 1 on every backend (a single process: after step N). Without a stop handler or a
// checkpoint signal on any rank there is no exchange at all.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "worker/comm/comm.h"

namespace worker {

// The handlers' flags (either may be null: that request cannot arrive on this rank).
struct Requests {
  // How many times the checkpoint signal arrived: rank 0 saves to --save, training goes on.
  std::atomic<int>* saves = nullptr;
  // SIGINT/SIGTERM (its number): every rank stops, rank 0 saves to --save, train() returns
  // with stop_signal set.
  std::atomic<int>* stop = nullptr;
};

// One rank's part of the exchange (host bytes: all ranks run the same binary).
struct RankRequests {
  int32_t stop_signal = 0;
  int32_t save = 0;  // 1: a checkpoint signal arrived here since the last save
};
static_assert(sizeof(RankRequests) == 8, "sent as raw bytes");

// What every rank does at a boundary.
struct Verdict {
  int stop_signal = 0;  // non-zero: stop, with this signal's exit code
  bool save = false;
};

// The ranks' parts, in rank order, as one decision: stop with the first signal in rank order;
// save when any rank has a checkpoint signal that no save has answered yet. A save answers every
// signal a rank received before the verdict, so one signal that reaches the ranks on either side
// of a boundary (launch forwards it to each) makes one save, not two.
Verdict agree(const std::vector<RankRequests>& all);

class RequestAgreement {
 public:
  RequestAgreement(const Requests& requests, Comm& comm) : requests_(requests), comm_(comm) {}
  // At a step boundary (collective): the verdict on the parts sent at the previous boundary
  // (none at the first), after which this rank sends its part of this one.
  Verdict at_boundary();
  // At the end of the loop (collective): the verdict on the parts still in flight.
  Verdict drain();

 private:
  bool listening();  // whether any rank can receive a request (agreed once, at the first boundary)
  int saves_received() const { return requests_.saves ? requests_.saves->load() : 0; }
  RankRequests mine(int saves_received) const;
  Verdict answered(const Verdict& v, int saves_received);  // a save answers what came before it

  Requests requests_;
  Comm& comm_;
  int listening_ = -1;  // -1: not agreed yet
  bool in_flight_ = false;
  RankRequests sent_;
  std::vector<RankRequests> all_;
  int saves_answered_ = 0;  // checkpoint signals received before the last save
};

}  // namespace worker
