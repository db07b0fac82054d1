// Elastic membership (--nnodes MIN:MAX), the pure half: one record, the job's State, held by a
// backend (membership_backend.h: our store today, etcd next) and changed only by compare-and-swap,
// and one function, step(), from (the record, this node, the time) to what the node does: write a
// new record, wait for a change, run its workers, or stop. No store, no sockets, no clock of its
// own: every node computes the same from the same record. MEMBERSHIP.md specifies the record and
// the rules; in short:
//
//   Forming(r)  nodes join (in arrival order) until MAX joined, or the nodes the round expects
//               (the survivors of round r-1 and the nodes that waited) are all in, or MIN joined
//               and the last call (last_call_timeout, counted by each node from when it saw MIN)
//               is over; then any node closes it: Running(r), the node ranks fixed.
//   Running(r)  the round's nodes run their workers. A node that arrives asks to join (waiting);
//               the running nodes see it, save (checkpoint signal) and stop. A round that ends --
//               a failure, a lost node, a join -- is reopened by the first of its nodes to come
//               back: Forming(r+1), its failures counted against --max_restart.
//   Finished, Failed  the job is over (its exit code in the record): late nodes stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/multinode/layout.h"

namespace launch::elastic {

using Clock = std::chrono::steady_clock;

// A record that is not ours or is damaged (names the field).
class StateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Member {
  multinode::NodeRegistration node;  // node.id tells this launcher run from every other
  int since = 0;                     // the round it first ran in (its seniority)
  int64_t seq = 0;                   // its arrival number
  bool operator==(const Member& o) const { return node == o.node && since == o.since && seq == o.seq; }
};

enum class Phase { Forming, Running, Finished, Failed };

struct State {
  int64_t version = 0;  // 0: no record yet; +1 per change
  int round = 0;        // the generation the members run (PADDLE_RESTART_COUNT)
  Phase phase = Phase::Forming;
  int min_nodes = 1, max_nodes = 1, nproc = 0;  // the job's, as its first node gave them
  std::vector<Member> members;        // Forming: joined so far; Running: the round's nodes, in node-rank order
  std::vector<Member> waiting;        // Running: nodes that asked to join
  std::vector<std::string> expected;  // Forming: ids the round waits for before it closes at once
  int failures = 0;                   // rounds that ended by a failure (--max_restart counts them)
  int64_t next_seq = 0;
  int exit_code = 0;                  // Finished / Failed: the job's code ...
  std::string outcome;                // ... and why
  bool operator==(const State& o) const;
};

// How the round this node ran ended, as it comes back to the rendezvous.
struct RoundEnd {
  int round = 0;
  bool failed = false;             // a failure (counted); else a join re-formed the job
  int exit_code = 0;               // of the failure
  std::string what;                // its description
  std::vector<std::string> lost;   // ids of nodes whose launcher stopped responding: not waited for
};

// This node, as it asks the record where it stands.
struct Self {
  Member me;                        // its registration (since and seq are the record's, once in)
  int min_nodes = 1, max_nodes = 1;
  int max_restart = 0;
  std::chrono::milliseconds last_call{30000};
  std::optional<RoundEnd> ended;    // the round it just ran, if any
  std::optional<Clock::time_point> quorum_seen;  // when it first saw MIN joined in the forming round
};

// Where this node runs once its round closes.
struct Place {
  int round = 0;
  std::vector<Member> members;  // node-rank order
  size_t index = 0;             // this node's node rank
  // The round's layout as the workers' environment needs it (ranks, endpoints, master).
  multinode::JobLayout layout(const std::string& store_address) const;
};

struct Decision {
  enum class Kind {
    Write,   // compare-and-swap `next` for the record read; then step again
    Wait,    // wait for the record to change (or `wake`), then step again
    Run,     // start the workers: `place`
    Refuse,  // bad input (another MIN:MAX, --nproc_per_node): `message`, exit 2
    Over,    // the job is over for this node: `message`, exit `exit_code`
  } kind = Kind::Wait;
  State next;
  Place place;
  std::optional<Clock::time_point> wake;  // Wait: step again by then at the latest (the last call)
  std::string message;                    // Wait: what is awaited (for the log and the timeout)
  int exit_code = 0;
};

// The one decision. `s` is the record as read (version 0: none yet).
Decision step(const State& s, const Self& self, Clock::time_point now);

// A node that gives up waiting: the record without it (nullopt: it is not in it).
std::optional<State> leave(const State& s, const std::string& id);

// The record without the nodes a backend that knows liveness (etcd's leases) says are gone:
// `alive` holds the ids of the nodes alive now, read AFTER the record (a node registers before it
// writes itself in, so one missing there has left or died). A forming round loses them from its
// members and expected ids, a running one from its waiting list; a running round none of whose
// members is alive is reopened by whoever sees it, as a failure (Failed past `max_restart`): a
// job every node of which was lost goes on with the nodes that come. nullopt: nothing to change.
std::optional<State> prune(const State& s, const std::vector<std::string>& alive, int max_restart);

// The job's end, for nodes that come late: Finished (code 0) or Failed.
State finished(const State& s, int exit_code, const std::string& outcome);

// --- The record on the wire (JSON, "format": 1; MEMBERSHIP.md) ---
std::string encode_state(const State& s);
// "" is no record (version 0). Throws StateError naming what is wrong.
State decode_state(const std::string& text);

}  // namespace launch::elastic
