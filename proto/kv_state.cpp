#include "proto/kv_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "proto/token.h"

namespace proto {

namespace {

bool is_reserved(const std::string& key) {
  return key.compare(0, kReservedPrefix.size(), kReservedPrefix) == 0;
}

// Strict decimal int64: optional '-', digits only, no overflow.
std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::string quoted(const std::string& k) { return "'" + k + "'"; }

// Deadlines far in the future are clamped so time_point arithmetic cannot overflow.
constexpr uint64_t kMaxTimeoutMs = 30ull * 24 * 3600 * 1000;

}  // namespace

// --- Handshake ---
Reply check_hello(const Request& hello, std::string_view job_id, std::string_view token) {
  // The token first: a client without it learns nothing, not even whether its job id is right.
  if (!constant_time_equal(hello.token, token))
    return Reply::error(Status::BadToken,
                        "wrong token; use the LAUNCH_STORE_TOKEN the launcher handed out");
  // Only the client's own job id is named: the store's job id is none of a stranger's business
  // (a token is per run, so a right token with a wrong job id is a misconfigured worker).
  if (hello.job_id != job_id)
    return Reply::error(Status::BadJob, "job id '" + hello.job_id +
                                            "' is not this store's job; check PADDLE_JOB_ID");
  return Reply{};
}

// --- Requests ---
void KvState::handle(ClientId c, const Request& req, Clock::time_point now,
                     std::vector<Outgoing>& out) {
  auto reply = [&](Reply r) { out.push_back(Outgoing{c, req.op, std::move(r)}); };
  auto reserved = [&](const std::string& key) {
    if (!is_reserved(key)) return false;
    reply(Reply::error(Status::ReservedKey, "key " + quoted(key) + " is reserved for the launcher (prefix '" +
                                                std::string(kReservedPrefix) + "')"));
    return true;
  };
  switch (req.op) {
    case Op::Hello: reply(Reply::error(Status::Malformed, "HELLO sent twice")); return;
    case Op::Ping: reply(Reply{}); return;
    case Op::Set:
      if (reserved(req.key)) return;
      reply(set_value(req.key, req.value, "SET of key " + quoted(req.key), out));
      return;
    case Op::Add: {
      if (reserved(req.key)) return;
      int64_t cur = 0;
      auto it = data_.find(req.key);
      if (it != data_.end()) {
        auto v = parse_int(it->second);
        if (!v) {
          reply(Reply::error(Status::NotInteger,
                             "ADD on key " + quoted(req.key) + " whose value is not an integer"));
          return;
        }
        cur = *v;
      }
      int64_t next = 0;
      if (__builtin_add_overflow(cur, req.delta, &next)) {
        reply(Reply::error(Status::NotInteger, "ADD on key " + quoted(req.key) + " overflows int64"));
        return;
      }
      Reply r = set_value(req.key, std::to_string(next), "ADD to key " + quoted(req.key), out);
      r.number = next;
      reply(std::move(r));
      return;
    }
    case Op::Check: {
      Reply r;
      r.present.reserve(req.keys.size());
      for (const auto& k : req.keys) r.present.push_back(data_.count(k) ? 1 : 0);
      reply(std::move(r));
      return;
    }
    case Op::Delete: {
      if (reserved(req.key)) return;
      Reply r;
      auto it = data_.find(req.key);
      r.existed = it != data_.end();
      if (r.existed) {
        bytes_ -= charge(it->first, it->second.size());
        data_.erase(it);
        ++generation_;
      }
      reply(std::move(r));
      return;
    }
    case Op::CompareSet: {
      if (reserved(req.key)) return;
      auto it = data_.find(req.key);
      bool match = it == data_.end() ? req.value.empty() : it->second == req.value;
      if (match) {
        Reply set = set_value(req.key, req.desired, "COMPARE_SET of key " + quoted(req.key), out);
        if (set.status != Status::Ok) {
          reply(std::move(set));
          return;
        }
        it = data_.find(req.key);
      }
      Reply r;
      if (it != data_.end()) r.value = it->second;
      reply(std::move(r));
      return;
    }
    case Op::Get:
    case Op::Wait:
    case Op::MultiGet: block_or_answer(c, req, now, out); return;
  }
  reply(Reply::error(Status::UnknownOp, "unknown op"));
}

Reply KvState::set_value(const std::string& key, std::string value, const std::string& what,
                         std::vector<Outgoing>& out) {
  auto it = data_.find(key);
  const size_t before = it == data_.end() ? 0 : charge(key, it->second.size());
  const size_t after = charge(key, value.size());
  if (it == data_.end() && data_.size() >= limits_.max_store_keys)
    return Reply::error(Status::QuotaExceeded,
                        "store quota: " + what + " would make key " + std::to_string(data_.size() + 1) +
                            "; the store holds at most " + std::to_string(limits_.max_store_keys) +
                            " keys per job (delete keys no longer needed: DELETE, launch kv delete)");
  if (after > before && bytes_ - before + after > limits_.max_store_bytes)
    return Reply::error(Status::QuotaExceeded,
                        "store quota: " + what + " (" + std::to_string(value.size()) + " bytes) would bring the "
                            "store to " + std::to_string(bytes_ - before + after) + " bytes of keys and values; "
                            "it holds at most " + std::to_string(limits_.max_store_bytes) +
                            " per job (delete keys no longer needed: DELETE, launch kv delete)");
  bytes_ = bytes_ - before + after;
  const bool inserted = it == data_.end();
  if (inserted)
    data_.emplace(key, std::move(value));
  else
    it->second = std::move(value);
  ++generation_;
  if (inserted) notify(key, out);
  return Reply{};
}

// --- Parking ---
void KvState::block_or_answer(ClientId c, const Request& req, Clock::time_point now,
                              std::vector<Outgoing>& out) {
  std::vector<std::string> keys = req.op == Op::Get ? std::vector<std::string>{req.key} : req.keys;
  size_t missing = 0;
  for (const auto& k : keys) missing += data_.count(k) ? 0 : 1;
  if (missing == 0) {
    out.push_back(Outgoing{c, req.op, answer(req.op, keys)});
    return;
  }
  if (failure_) {
    out.push_back(Outgoing{c, req.op, Reply::error(Status::JobFailed, *failure_)});
    return;
  }
  if (req.timeout_ms == 0) {
    out.push_back(Outgoing{c, req.op, Reply::error(Status::Timeout, "missing " + missing_keys(keys))});
    return;
  }
  unpark(c);  // defensive: one parked request per client
  Waiter w;
  w.op = req.op;
  w.missing = missing;
  w.deadline = now + std::chrono::milliseconds(std::min(req.timeout_ms, kMaxTimeoutMs));
  for (const auto& k : keys)
    if (!data_.count(k)) watchers_[k].push_back(c);
  w.keys = std::move(keys);
  deadlines_.emplace(w.deadline, c);
  waiters_.emplace(c, std::move(w));
}

Reply KvState::answer(Op op, const std::vector<std::string>& keys) const {
  Reply r;
  if (op == Op::Get) {
    r.value = data_.at(keys[0]);
  } else if (op == Op::MultiGet) {
    size_t total = 4;
    for (const auto& k : keys) total += 4 + data_.at(k).size();
    if (total > limits_.max_payload())
      return Reply::error(Status::TooLarge, "MULTI_GET reply of " + std::to_string(total) +
                                                " bytes exceeds the frame limit of " +
                                                std::to_string(limits_.max_payload()));
    r.values.reserve(keys.size());
    for (const auto& k : keys) r.values.push_back(data_.at(k));
  }
  return r;
}

void KvState::notify(const std::string& key, std::vector<Outgoing>& out) {
  auto wit = watchers_.find(key);
  if (wit == watchers_.end()) return;
  std::vector<ClientId> woken = std::move(wit->second);
  watchers_.erase(wit);
  for (ClientId c : woken) {
    auto it = waiters_.find(c);
    if (it == waiters_.end() || it->second.missing == 0) continue;
    if (--it->second.missing != 0) continue;
    Waiter& w = it->second;
    // A key seen earlier may have been deleted since: park again on what is missing now.
    size_t missing = 0;
    for (const auto& k : w.keys)
      if (!data_.count(k)) {
        ++missing;
        watchers_[k].push_back(c);
      }
    if (missing != 0) {
      w.missing = missing;
      continue;
    }
    out.push_back(Outgoing{c, w.op, answer(w.op, w.keys)});
    unpark(c);
  }
}

void KvState::unpark(ClientId c) {
  auto it = waiters_.find(c);
  if (it == waiters_.end()) return;
  std::vector<std::string> keys = std::move(it->second.keys);
  deadlines_.erase({it->second.deadline, c});
  waiters_.erase(it);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& k : keys) {
    auto wit = watchers_.find(k);
    if (wit == watchers_.end()) continue;
    auto& v = wit->second;
    v.erase(std::remove(v.begin(), v.end(), c), v.end());
    if (v.empty()) watchers_.erase(wit);
  }
}

std::string KvState::missing_keys(const std::vector<std::string>& keys) const {
  std::string s;
  size_t n = 0;
  for (const auto& k : keys) {
    if (data_.count(k)) continue;
    if (n < 5) s += (n ? ", " : "") + quoted(k);
    ++n;
  }
  if (n > 5) s += " and " + std::to_string(n - 5) + " more";
  return (n == 1 ? "key " : std::to_string(n) + " keys: ") + s;
}

void KvState::expire(Clock::time_point now, std::vector<Outgoing>& out) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    ClientId c = deadlines_.begin()->second;
    auto it = waiters_.find(c);
    out.push_back(Outgoing{c, it->second.op,
                           Reply::error(Status::Timeout, "missing " + missing_keys(it->second.keys))});
    unpark(c);
  }
}

std::optional<Clock::time_point> KvState::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void KvState::drop_client(ClientId c) { unpark(c); }

bool KvState::fail_job(const std::string& record, std::vector<Outgoing>& out) {
  if (failure_) return false;
  failure_ = record;
  for (auto& [c, w] : waiters_) out.push_back(Outgoing{c, w.op, Reply::error(Status::JobFailed, record)});
  waiters_.clear();
  watchers_.clear();
  deadlines_.clear();
  // The launcher's own record: never refused by the quota (it counts towards it from now on).
  bytes_ += charge(std::string(kJobFailedKey), record.size());
  data_[std::string(kJobFailedKey)] = record;
  ++generation_;
  return true;
}

}  // namespace proto
