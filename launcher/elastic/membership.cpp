#include "launcher/elastic/membership.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/multinode/json_record.h"

namespace launch::elastic {

namespace {

using multinode::NodeRegistration;

constexpr int kFormat = 1;
// A record naming more nodes than this is damaged (--nnodes allows 65536).
constexpr size_t kMaxMembers = 65536;

const Member* find(const std::vector<Member>& v, const std::string& id) {
  for (const auto& m : v)
    if (m.node.id == id) return &m;
  return nullptr;
}

std::string who(const NodeRegistration& n) {
  return n.hostname.empty() || n.hostname == n.host ? n.host : n.hostname + " (" + n.host + ")";
}

// "2:3", or "2" for a fixed size (an etcd job's --nnodes 2).
std::string range(int min, int max) { return (min == max ? "" : std::to_string(min) + ":") + std::to_string(max); }
std::string range(const State& s) { return range(s.min_nodes, s.max_nodes); }

Decision write(State next) {
  Decision d;
  d.kind = Decision::Kind::Write;
  ++next.version;
  d.next = std::move(next);
  return d;
}

Decision wait(std::string what, std::optional<Clock::time_point> wake = std::nullopt) {
  Decision d;
  d.kind = Decision::Kind::Wait;
  d.message = std::move(what);
  d.wake = wake;
  return d;
}

Decision over(Decision::Kind kind, std::string message, int exit_code) {
  Decision d;
  d.kind = kind;
  d.message = std::move(message);
  d.exit_code = exit_code;
  return d;
}

// The round closes: node ranks are the store's host first (it must be there: without it there is
// no store), then by seniority, then by arrival. Survivors keep their order across rounds.
State close(State s) {
  std::stable_sort(s.members.begin(), s.members.end(), [](const Member& a, const Member& b) {
    if (a.node.serves_store != b.node.serves_store) return a.node.serves_store;
    if (a.since != b.since) return a.since < b.since;
    return a.seq < b.seq;
  });
  s.phase = Phase::Running;
  s.expected.clear();
  s.waiting.clear();
  return s;
}

Member arriving(const State& s, const Self& self, int since) {
  Member m = self.me;
  m.node.requested_rank = -1;  // ranks are the round's (close), whatever --rank said
  m.since = since;
  m.seq = s.next_seq;
  return m;
}

Decision forming(const State& s, const Self& self, Clock::time_point now) {
  const size_t n = s.members.size();
  if (!find(s.members, self.me.node.id)) {
    if (n >= size_t(s.max_nodes)) return write(close(s));  // full: whoever sees it closes it
    State next = s;
    next.members.push_back(arriving(s, self, self.ended ? self.me.since : s.round));
    ++next.next_seq;
    return write(std::move(next));
  }
  std::vector<std::string> missing;
  for (const auto& id : s.expected)
    if (!find(s.members, id)) missing.push_back(id);
  const bool quorum = n >= size_t(s.min_nodes);
  if (n >= size_t(s.max_nodes) || (quorum && !s.expected.empty() && missing.empty())) return write(close(s));
  const Clock::time_point last_call_ends = self.quorum_seen.value_or(now) + self.last_call;
  if (quorum && now >= last_call_ends) return write(close(s));
  std::string what = std::to_string(n) + " of " + range(s) + " node(s) joined round " + std::to_string(s.round);
  if (!missing.empty()) what += ", " + std::to_string(missing.size()) + " of the last round's still to come";
  return wait(what, quorum ? std::optional<Clock::time_point>(last_call_ends) : std::nullopt);
}

Decision running(const State& s, const Self& self) {
  const std::string& id = self.me.node.id;
  if (const Member* m = find(s.members, id)) {
    if (!self.ended || self.ended->round != s.round) {
      Decision d;
      d.kind = Decision::Kind::Run;
      d.place.round = s.round;
      d.place.members = s.members;
      d.place.index = size_t(m - s.members.data());
      return d;
    }
    // The round this node ran is over: the first of its nodes back opens the next one.
    const RoundEnd& end = *self.ended;
    State next = s;
    next.failures += end.failed ? 1 : 0;
    if (end.failed && next.failures > self.max_restart) {
      next.phase = Phase::Failed;
      next.exit_code = end.exit_code;
      next.outcome = end.what + " (no restart left: --max_restart " + std::to_string(self.max_restart) + ")";
      return write(std::move(next));
    }
    next.round = s.round + 1;
    next.phase = Phase::Forming;
    next.expected.clear();
    for (const auto* group : {&s.members, &s.waiting})
      for (const auto& other : *group)
        if (other.node.id != id && std::find(end.lost.begin(), end.lost.end(), other.node.id) == end.lost.end())
          next.expected.push_back(other.node.id);
    // Its registration as it is now: under etcd the node that serves the store may have changed.
    Member back = *m;
    back.node = self.me.node;
    back.node.requested_rank = -1;
    next.members = {back};
    next.waiting.clear();
    return write(std::move(next));
  }
  if (find(s.waiting, id))
    return wait("waiting to join: the " + std::to_string(s.members.size()) + " running node(s) of round " +
                std::to_string(s.round) + " save and stop, then the job re-forms");
  if (s.members.size() >= size_t(s.max_nodes))
    return wait("the job runs at its maximum of " + std::to_string(s.max_nodes) + " node(s): waiting for a place");
  State next = s;
  next.waiting.push_back(arriving(s, self, s.round + 1));
  ++next.next_seq;
  return write(std::move(next));
}

}  // namespace

bool State::operator==(const State& o) const {
  return version == o.version && round == o.round && phase == o.phase && min_nodes == o.min_nodes &&
         max_nodes == o.max_nodes && nproc == o.nproc && members == o.members && waiting == o.waiting &&
         expected == o.expected && failures == o.failures && next_seq == o.next_seq && exit_code == o.exit_code &&
         outcome == o.outcome;
}

Decision step(const State& s, const Self& self, Clock::time_point now) {
  if (s.version == 0) {
    State first;
    first.min_nodes = self.min_nodes;
    first.max_nodes = self.max_nodes;
    first.nproc = self.me.node.nproc;
    first.members = {arriving(first, self, 0)};
    first.next_seq = 1;
    return write(std::move(first));
  }
  if (s.phase == Phase::Finished || s.phase == Phase::Failed) {
    const bool ok = s.phase == Phase::Finished;
    return over(Decision::Kind::Over, std::string(ok ? "the job finished: " : "the job failed: ") + s.outcome,
                ok ? s.exit_code : std::max(s.exit_code, 1));
  }
  if (s.min_nodes != self.min_nodes || s.max_nodes != self.max_nodes)
    return over(Decision::Kind::Refuse,
                "this node was started with --nnodes " + range(self.min_nodes, self.max_nodes) +
                    ", the job it joins runs --nnodes " + range(s) + ": give every node the same --nnodes",
                2);
  if (s.nproc != self.me.node.nproc)
    return over(Decision::Kind::Refuse,
                "this node runs " + std::to_string(self.me.node.nproc) + " worker process(es), the job's nodes " +
                    std::to_string(s.nproc) + " each (" + who(s.members.empty() ? self.me.node : s.members[0].node) +
                    "): every node of the job runs the same --nproc_per_node",
                2);
  return s.phase == Phase::Forming ? forming(s, self, now) : running(s, self);
}

std::optional<State> leave(const State& s, const std::string& id) {
  State next = s;
  auto drop = [&](std::vector<Member>& v) {
    const size_t before = v.size();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Member& m) { return m.node.id == id; }), v.end());
    return v.size() != before;
  };
  const bool gone = (s.phase == Phase::Forming && drop(next.members)) || (s.phase == Phase::Running && drop(next.waiting));
  if (!gone) return std::nullopt;
  ++next.version;
  return next;
}

std::optional<State> prune(const State& s, const std::vector<std::string>& alive, int max_restart) {
  auto gone = [&](const std::string& id) { return std::find(alive.begin(), alive.end(), id) == alive.end(); };
  auto drop = [&](std::vector<Member>& v) {
    const size_t before = v.size();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Member& m) { return gone(m.node.id); }), v.end());
    return v.size() != before;
  };
  State next = s;
  bool changed = false;
  if (s.phase == Phase::Forming) {
    changed = drop(next.members);
    const size_t before = next.expected.size();
    next.expected.erase(std::remove_if(next.expected.begin(), next.expected.end(), gone), next.expected.end());
    changed = changed || next.expected.size() != before;
  } else if (s.phase == Phase::Running) {
    if (!s.members.empty() && std::all_of(s.members.begin(), s.members.end(), [&](const Member& m) { return gone(m.node.id); })) {
      // Nobody is left to reopen the round: the node that sees it does, as a failure.
      next.failures += 1;
      const std::string what = "every node of round " + std::to_string(s.round) + " is gone (their liveness ended)";
      if (next.failures > max_restart) {
        next.phase = Phase::Failed;
        next.exit_code = 1;
        next.outcome = what + " (no restart left: --max_restart " + std::to_string(max_restart) + ")";
      } else {
        next.round = s.round + 1;
        next.phase = Phase::Forming;
        next.members.clear();
        drop(next.waiting);
        for (const auto& w : next.waiting) next.expected.push_back(w.node.id);
        next.waiting.clear();
      }
      changed = true;
    } else {
      changed = drop(next.waiting);
    }
  }
  if (!changed) return std::nullopt;
  ++next.version;
  return next;
}

State finished(const State& s, int exit_code, const std::string& outcome) {
  State next = s;
  ++next.version;
  next.phase = exit_code == 0 ? Phase::Finished : Phase::Failed;
  next.exit_code = exit_code;
  next.outcome = outcome;
  return next;
}

multinode::JobLayout Place::layout(const std::string& store_address) const {
  std::vector<NodeRegistration> regs;
  for (const auto& m : members) {
    regs.push_back(m.node);
    regs.back().requested_rank = -1;
  }
  multinode::JobLayout l = multinode::compute_layout(regs, int(regs.size()), index, round);
  l.store_address = store_address;
  return l;
}

// --- The record on the wire ---

namespace {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forming: return "forming";
    case Phase::Running: return "running";
    case Phase::Finished: return "finished";
    case Phase::Failed: return "failed";
  }
  return "?";
}

nlohmann::json members_json(const std::vector<Member>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& m : v)
    a.push_back({{"node", nlohmann::json::parse(multinode::encode_registration(m.node))}, {"since", m.since}, {"seq", m.seq}});
  return a;
}

}  // namespace

std::string encode_state(const State& s) {
  nlohmann::json j = {{"format", kFormat},      {"version", s.version},     {"round", s.round},
                      {"phase", phase_name(s.phase)}, {"min", s.min_nodes}, {"max", s.max_nodes},
                      {"nproc", s.nproc},       {"members", members_json(s.members)},
                      {"waiting", members_json(s.waiting)}, {"expected", s.expected},
                      {"failures", s.failures}, {"next_seq", s.next_seq}, {"exit_code", s.exit_code},
                      {"outcome", s.outcome}};
  return j.dump();
}

State decode_state(const std::string& text) {
  if (text.empty()) return State{};
  const std::string what = "the membership record in the store";
  const nlohmann::json j = multinode::parse_record<StateError>(text, what);
  auto field = [&](const char* name, auto& out) { multinode::record_field<StateError>(j, name, out, what); };
  int format = 0;
  field("format", format);
  if (format != kFormat)
    throw StateError("the membership record in the store has format " + std::to_string(format) + ", this launch reads " +
                     std::to_string(kFormat) + ": run the same launch version on every node");
  State s;
  std::string phase;
  field("version", s.version);
  field("round", s.round);
  field("phase", phase);
  field("min", s.min_nodes);
  field("max", s.max_nodes);
  field("nproc", s.nproc);
  field("expected", s.expected);
  field("failures", s.failures);
  field("next_seq", s.next_seq);
  field("exit_code", s.exit_code);
  field("outcome", s.outcome);
  if (phase == "forming") s.phase = Phase::Forming;
  else if (phase == "running") s.phase = Phase::Running;
  else if (phase == "finished") s.phase = Phase::Finished;
  else if (phase == "failed") s.phase = Phase::Failed;
  else throw StateError("the membership record in the store: unknown phase '" + phase + "'");
  for (const auto& [name, out] : {std::pair<const char*, std::vector<Member>*>{"members", &s.members}, {"waiting", &s.waiting}}) {
    const auto it = j.find(name);
    if (it == j.end() || !it->is_array() || it->size() > kMaxMembers)
      throw StateError(std::string("the membership record in the store: field '") + name + "' missing or too long");
    for (const auto& m : *it) {
      Member x;
      try {
        x.node = multinode::decode_registration(m.at("node").dump());
        m.at("since").get_to(x.since);
        m.at("seq").get_to(x.seq);
      } catch (const nlohmann::json::exception&) {
        throw StateError(std::string("the membership record in the store: a node of '") + name + "' is malformed");
      } catch (const multinode::LayoutError& e) {
        throw StateError(e.what());
      }
      out->push_back(std::move(x));
    }
  }
  if (s.version < 1 || s.min_nodes < 1 || s.max_nodes < s.min_nodes || s.nproc < 1)
    throw StateError("the membership record in the store is inconsistent (version, --nnodes or nproc)");
  return s;
}

}  // namespace launch::elastic
