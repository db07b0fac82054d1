#include "launcher/elastic/etcd_backend.h"

#include "launcher/etcd/etcd_rendezvous.h"
#include "launcher/etcd/primitives.h"

#include <utility>

namespace launch::elastic {

namespace {

// etcd's errors (and a foreign record under the job's keys) as the seam's.
BackendError::Kind kind_of(const etcd::EtcdError& e) {
  return e.kind() == etcd::EtcdError::Kind::Cancelled ? BackendError::Kind::Cancelled : BackendError::Kind::Unavailable;
}

template <class F>
auto translated(F&& call) -> decltype(call()) {
  try {
    return with_errors_of<etcd::EtcdError>(std::forward<F>(call), kind_of);
  } catch (const etcd::RendezvousError& e) {
    throw BackendError(BackendError::Kind::Unavailable, e.what());
  }
}

}  // namespace

EtcdBackend::EtcdBackend(etcd::Options opts, std::string job_id)
    : client_(std::move(opts)), job_id_(std::move(job_id)), key_(etcd::membership_key(job_id_)) {}

std::string EtcdBackend::load(ms timeout) {
  return translated([&] {
    client_.set_timeout(timeout);
    const etcd::RangeResponse r = client_.range(key_);
    revision_ = r.revision;
    return r.kvs.empty() ? std::string() : r.kvs.front().value;
  });
}

std::string EtcdBackend::compare_and_swap(const std::string& expected, const std::string& desired, int64_t,
                                          ms timeout) {
  return translated([&] {
    client_.set_timeout(timeout);
    etcd::Txn t;
    if (expected.empty())
      t.compare.push_back({key_, etcd::CompareTarget::Create, etcd::CompareResult::Equal, 0, ""});
    else
      t.compare.push_back({key_, etcd::CompareTarget::Value, etcd::CompareResult::Equal, 0, expected});
    t.success.push_back(etcd::RequestOp::put(key_, desired));
    t.failure.push_back(etcd::RequestOp::range(key_));
    const etcd::TxnResponse r = client_.txn(t);
    revision_ = r.revision;
    if (r.succeeded) return desired;
    for (const etcd::ResponseOp& op : r.responses)
      for (const etcd::KeyValue& kv : op.range.kvs)
        if (kv.key == key_) return kv.value;
    return std::string();  // deleted meanwhile (an ended job's record expired)
  });
}

void EtcdBackend::wait_change(int64_t, ms timeout) {
  translated([&] {
    try {
      const etcd::WatchResult w =
          etcd::wait_prefix_change(client_, etcd::job_prefix(job_id_), revision_, timeout);
      if (w.revision > revision_ && w.outcome != etcd::WatchResult::Outcome::TimedOut) revision_ = w.revision;
    } catch (const etcd::EtcdError& e) {
      // A wait too short for etcd to confirm the watch is a wait that timed out.
      if (e.kind() != etcd::EtcdError::Kind::Timeout) throw;
    }
  });
}

std::optional<std::vector<std::string>> EtcdBackend::alive(ms timeout) {
  return translated([&] {
    client_.set_timeout(timeout);
    const etcd::Membership m =
        etcd::membership_from(job_id_, etcd::list_prefix(client_, etcd::nodes_prefix(job_id_)));
    std::vector<std::string> ids;
    for (const etcd::Member& n : m.nodes) ids.push_back(n.node_id);
    return std::optional<std::vector<std::string>>(std::move(ids));
  });
}

}  // namespace launch::elastic
