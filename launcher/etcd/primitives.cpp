#include "launcher/etcd/primitives.h"

namespace launch::etcd {

namespace {

// The key as the failure branch of a transaction read it; nullopt when absent.
std::optional<KeyValue> read_back(const TxnResponse& r, std::string_view key) {
  for (const ResponseOp& op : r.responses)
    if (op.type == RequestOp::Type::Range)
      for (const KeyValue& kv : op.range.kvs)
        if (kv.key == key) return kv;
  return std::nullopt;
}

// Puts `value` if the key's `target` equals `number`; otherwise reads the key back.
TxnResponse put_if(Client& c, std::string_view key, CompareTarget target, int64_t number, std::string_view value,
                   int64_t lease) {
  Txn t;
  t.compare.push_back({std::string(key), target, CompareResult::Equal, number, ""});
  t.success.push_back(RequestOp::put(std::string(key), std::string(value), lease));
  t.failure.push_back(RequestOp::range(std::string(key)));
  return c.txn(t);
}

}  // namespace

CreateResult create_if_absent(Client& c, std::string_view key, std::string_view value, int64_t lease) {
  TxnResponse r = put_if(c, key, CompareTarget::Create, 0, value, lease);
  CreateResult out;
  out.created = r.succeeded;
  out.revision = r.revision;
  if (!r.succeeded) {
    // It existed when the comparison ran; the read in the same transaction saw it.
    if (auto kv = read_back(r, key)) out.existing = std::move(*kv);
  }
  return out;
}

SwapResult compare_and_swap(Client& c, std::string_view key, int64_t expected_mod_revision, std::string_view value,
                            int64_t lease) {
  TxnResponse r = put_if(c, key, CompareTarget::Mod, expected_mod_revision, value, lease);
  SwapResult out;
  out.swapped = r.succeeded;
  out.revision = r.revision;
  if (!r.succeeded) out.current = read_back(r, key);
  return out;
}

bool delete_if_unchanged(Client& c, std::string_view key, int64_t expected_mod_revision) {
  Txn t;
  t.compare.push_back({std::string(key), CompareTarget::Mod, CompareResult::Equal, expected_mod_revision, ""});
  t.success.push_back(RequestOp::delete_range(std::string(key)));
  TxnResponse r = c.txn(t);
  return r.succeeded && !r.responses.empty() && r.responses[0].deleted > 0;
}

Listing list_prefix(Client& c, std::string_view prefix) {
  RangeResponse r = c.range(prefix, prefix_end(prefix));
  return Listing{r.revision, std::move(r.kvs)};
}

WatchResult wait_prefix_change(Client& c, std::string_view prefix, int64_t after_revision,
                               std::chrono::milliseconds timeout) {
  return c.wait_for_change(prefix, prefix_end(prefix), after_revision, timeout);
}

}  // namespace launch::etcd
