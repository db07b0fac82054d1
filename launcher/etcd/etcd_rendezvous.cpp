#include "launcher/etcd/etcd_rendezvous.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "launcher/etcd/primitives.h"
#include "launcher/seconds.h"

namespace launch::etcd {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

namespace {

ms remaining(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() < 0 ? ms(0) : d;
}

// The envelope's fields once its format and version are checked.
json open_envelope(std::string_view key, std::string_view value, std::string_view format) {
  const std::string where = "etcd key '" + printable(key) + "'";
  json j = json::parse(value.begin(), value.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != format)
    throw RendezvousError(where + " does not hold a " + std::string(format) + " record ('" + printable(value, 60) +
                          "'): is another program using this job id's keys?");
  if (!j.contains("version") || j["version"] != kRecordVersion)
    throw RendezvousError(where + " holds a " + std::string(format) + " record of version " +
                          (j.contains("version") ? j["version"].dump() : std::string("none")) + "; this launcher reads " +
                          std::to_string(kRecordVersion) + ": run the same launch version on every node");
  return j;
}

std::string string_member(const json& j, const char* name, std::string_view key) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string())
    throw RendezvousError("etcd key '" + printable(key) + "': its record has no string '" + name + "'");
  return it->get<std::string>();
}

}  // namespace

// --- Keys and records ---
void check_id(std::string_view what, std::string_view id) {
  if (id.empty() || id.size() > 128)
    throw RendezvousError(std::string(what) + " '" + printable(id) + "' must be 1 to 128 characters long");
  for (char c : id)
    if (c < 0x21 || c > 0x7e)
      throw RendezvousError(std::string(what) + " '" + printable(id) +
                            "' holds a space or a byte outside printable ASCII: it names etcd keys");
}

std::string job_prefix(std::string_view job_id) { return "/launch/" + std::string(job_id) + "/"; }
std::string nodes_prefix(std::string_view job_id) { return job_prefix(job_id) + "nodes/"; }
std::string store_key(std::string_view job_id) { return job_prefix(job_id) + "store"; }
std::string job_key(std::string_view job_id) { return job_prefix(job_id) + "job"; }
std::string membership_key(std::string_view job_id) { return job_prefix(job_id) + "membership"; }

std::string encode_node_record(std::string_view record) {
  if (record.size() > kMaxRecordBytes)
    throw RendezvousError("a node record of " + std::to_string(record.size()) + " bytes is over the limit of " +
                          std::to_string(kMaxRecordBytes));
  return json{{"format", kNodeFormat}, {"version", kRecordVersion}, {"record", std::string(record)}}.dump();
}

std::string decode_node_record(std::string_view key, std::string_view value) {
  // The limit first: the envelope of a kMaxRecordBytes record can at most double it (escapes
  // of every byte are 6) plus its fields.
  if (value.size() > 6 * kMaxRecordBytes + 256)
    throw RendezvousError("etcd key '" + printable(key) + "' holds " + std::to_string(value.size()) +
                          " bytes, more than a node record may");
  json j = open_envelope(key, value, kNodeFormat);
  std::string record = string_member(j, "record", key);
  if (record.size() > kMaxRecordBytes)
    throw RendezvousError("etcd key '" + printable(key) + "': a node record over " + std::to_string(kMaxRecordBytes) + " bytes");
  return record;
}

std::string encode_store_record(std::string_view node_id, std::string_view address) {
  return json{{"format", kStoreFormat}, {"version", kRecordVersion}, {"node", std::string(node_id)},
              {"address", std::string(address)}}
      .dump();
}

StoreHolder decode_store_record(std::string_view key, const KeyValue& kv) {
  if (kv.value.size() > 4096)
    throw RendezvousError("etcd key '" + printable(key) + "' holds " + std::to_string(kv.value.size()) +
                          " bytes, more than a store record may");
  json j = open_envelope(key, kv.value, kStoreFormat);
  StoreHolder h;
  h.node_id = string_member(j, "node", key);
  h.address = string_member(j, "address", key);
  h.mod_revision = kv.mod_revision;
  h.lease = kv.lease;
  return h;
}

std::string encode_job_record(std::string_view token_fingerprint) {
  return json{{"format", kJobFormat}, {"version", kRecordVersion}, {"token_fingerprint", std::string(token_fingerprint)}}
      .dump();
}

std::string decode_job_record(std::string_view key, std::string_view value) {
  if (value.size() > 4096)
    throw RendezvousError("etcd key '" + printable(key) + "' holds " + std::to_string(value.size()) +
                          " bytes, more than a job record may");
  return string_member(open_envelope(key, value, kJobFormat), "token_fingerprint", key);
}

std::vector<std::pair<std::string, size_t>> jobs_with_nodes(const Listing& listing, std::string_view except) {
  std::vector<std::pair<std::string, size_t>> jobs;
  for (const KeyValue& kv : listing.kvs) {
    // /launch/<job>/nodes/<node>
    if (kv.key.compare(0, kJobsPrefix.size(), kJobsPrefix) != 0) continue;
    const size_t slash = kv.key.find('/', kJobsPrefix.size());
    if (slash == std::string::npos || kv.key.compare(slash, 7, "/nodes/") != 0 || kv.key.size() == slash + 7) continue;
    const std::string job = kv.key.substr(kJobsPrefix.size(), slash - kJobsPrefix.size());
    if (job == except) continue;
    if (jobs.empty() || jobs.back().first != job) jobs.emplace_back(job, 0);  // etcd lists keys in order
    ++jobs.back().second;
  }
  return jobs;
}

int Membership::rank_of(std::string_view node_id) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].node_id == node_id) return static_cast<int>(i);
  return -1;
}

Membership membership_from(std::string_view job_id, const Listing& listing) {
  const std::string prefix = nodes_prefix(job_id);
  Membership m;
  m.revision = listing.revision;
  for (const KeyValue& kv : listing.kvs) {
    if (kv.key.compare(0, prefix.size(), prefix) != 0) continue;
    m.nodes.push_back(Member{kv.key.substr(prefix.size()), decode_node_record(kv.key, kv.value), kv.create_revision});
  }
  // Revisions are unique per write, so this order is total and the same on every node.
  std::sort(m.nodes.begin(), m.nodes.end(),
            [](const Member& a, const Member& b) { return a.joined_revision < b.joined_revision; });
  return m;
}

// --- One node's part ---
EtcdRendezvous::EtcdRendezvous(RendezvousConfig cfg) : cfg_(std::move(cfg)), client_(cfg_.etcd) {
  check_id("job id", cfg_.job_id);
  check_id("node id", cfg_.node_id);
  lease_ = std::make_unique<LeaseKeeper>(cfg_.etcd, cfg_.lease_ttl_s);
}

EtcdRendezvous::~EtcdRendezvous() { leave(); }

void EtcdRendezvous::leave() { lease_->stop(LeaseKeeper::Revoke::Yes); }

void EtcdRendezvous::join(std::string_view record) {
  const std::string key = nodes_prefix(cfg_.job_id) + cfg_.node_id;
  CreateResult r = create_if_absent(client_, key, encode_node_record(record), lease_->id());
  // With this node's lease it is this node's own write (libcurl resent the request after a
  // connection was lost with it in flight).
  if (!r.created && r.existing.lease != lease_->id())
    throw RendezvousError("node id '" + cfg_.node_id + "' is registered already in job '" + cfg_.job_id + "' at etcd " +
                          cfg_.etcd.endpoint + " (since revision " + std::to_string(r.existing.create_revision) +
                          "): give every launcher its own id");
}

Membership EtcdRendezvous::members() { return membership_from(cfg_.job_id, list_prefix(client_, nodes_prefix(cfg_.job_id))); }

Membership EtcdRendezvous::wait_for_members(size_t count, ms timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Membership m = members();
    if (m.nodes.size() >= count) return m;
    if (remaining(deadline).count() == 0) {
      std::string who;
      for (const Member& n : m.nodes) who += (who.empty() ? "" : ", ") + n.node_id;
      throw RendezvousError("only " + std::to_string(m.nodes.size()) + " of " + std::to_string(count) +
                            " nodes joined job '" + cfg_.job_id + "' at etcd " + cfg_.etcd.endpoint + " within " +
                            seconds_text(double(timeout.count()) / 1000.0) + " s" + (who.empty() ? "" : " (" + who + ")") +
                            ": start the others, or raise the rendezvous timeout");
    }
    wait_prefix_change(client_, nodes_prefix(cfg_.job_id), m.revision, remaining(deadline));
  }
}

std::optional<Membership> EtcdRendezvous::wait_for_change(const Membership& seen, ms timeout) {
  const auto deadline = Clock::now() + timeout;
  int64_t after = seen.revision;
  for (;;) {
    WatchResult w = wait_prefix_change(client_, nodes_prefix(cfg_.job_id), after, remaining(deadline));
    if (w.outcome == WatchResult::Outcome::TimedOut) return std::nullopt;
    Membership now = members();
    // Who is there, and since when: a record rewritten in place is no change of membership.
    auto ids = [](const Membership& m) {
      std::vector<std::string> v;
      for (const Member& n : m.nodes) v.push_back(n.node_id + "@" + std::to_string(n.joined_revision));
      return v;
    };
    if (ids(now) != ids(seen)) return now;
    if (remaining(deadline).count() == 0) return std::nullopt;
    after = now.revision;
  }
}

StoreHolder EtcdRendezvous::claim_store(std::string_view address) {
  const std::string key = store_key(cfg_.job_id);
  CreateResult r = create_if_absent(client_, key, encode_store_record(cfg_.node_id, address), lease_->id());
  if (r.created) {
    StoreHolder h;
    h.node_id = cfg_.node_id;
    h.address = std::string(address);
    h.mod_revision = r.revision;
    h.lease = lease_->id();
    h.mine = true;
    return h;
  }
  StoreHolder h = decode_store_record(key, r.existing);
  h.mine = h.node_id == cfg_.node_id && r.existing.lease == lease_->id();  // its own claim, resent
  return h;
}

bool EtcdRendezvous::wait_store_vacant(const StoreHolder& holder, ms timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string key = store_key(cfg_.job_id);
  int64_t after = holder.mod_revision;
  for (;;) {
    WatchResult w = client_.wait_for_change(key, "", after, remaining(deadline));
    switch (w.outcome) {
      case WatchResult::Outcome::TimedOut:
        return false;
      case WatchResult::Outcome::Compacted: {
        auto kv = client_.get(key);  // history gone: look at what is there now
        if (!kv || kv->mod_revision != holder.mod_revision) return true;
        after = kv->mod_revision;
        break;
      }
      case WatchResult::Outcome::Changed:
        return true;  // deleted, or (after a delete) claimed again: either way not that claim
    }
  }
}

void EtcdRendezvous::resign_store(const StoreHolder& mine) {
  if (mine.mine) delete_if_unchanged(client_, store_key(cfg_.job_id), mine.mod_revision);
}

bool EtcdRendezvous::evict_store(const StoreHolder& holder) {
  if (holder.mine || holder.lease == 0) return false;
  return client_.revoke(holder.lease);
}

bool EtcdRendezvous::admit(std::string_view token_fingerprint) {
  const std::string key = job_key(cfg_.job_id);
  CreateResult r = create_if_absent(client_, key, encode_job_record(token_fingerprint));
  if (r.created) return true;
  const std::string theirs = decode_job_record(key, r.existing.value);
  return theirs.size() == token_fingerprint.size() &&
         std::equal(theirs.begin(), theirs.end(), token_fingerprint.begin());
}

void EtcdRendezvous::expire_job(int64_t ttl_s) {
  std::vector<KeyValue> open;  // the records without an end of their own yet
  for (const std::string& key : {membership_key(cfg_.job_id), job_key(cfg_.job_id)})
    if (std::optional<KeyValue> kv = client_.get(key); kv && kv->lease == 0) open.push_back(std::move(*kv));
  if (open.empty()) return;  // gone, or another node's end put them on a lease already
  // Both in one transaction: two nodes ending at once would otherwise each move one of them, onto
  // two leases. The node whose transaction loses drops its lease.
  const LeaseGrant g = client_.grant_lease(ttl_s);
  Txn t;
  for (const KeyValue& kv : open) {
    t.compare.push_back({kv.key, CompareTarget::Mod, CompareResult::Equal, kv.mod_revision, ""});
    t.success.push_back(RequestOp::put(kv.key, kv.value, g.id));
  }
  if (!client_.txn(t).succeeded) client_.revoke(g.id);
}

}  // namespace launch::etcd
