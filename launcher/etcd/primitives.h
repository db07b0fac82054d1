// What a rendezvous needs from etcd, as plain functions over a Client, each one etcd request
// (one transaction where it must be atomic). Every one inherits the client's guarantees
// (client.h): a timeout, the cancel hook, errors naming the endpoint and the key.
//
// How a rendezvous backend uses them (keys under /launch/<job_id>/):
//   LeaseKeeper lease(opts, ttl);                        // liveness of this node (lease_keeper.h)
//   create_if_absent(c, ".../nodes/<id>", record, lease.id());   // register; false: id taken
//   auto l = list_prefix(c, ".../nodes/");               // who is there, at revision l.revision
//   wait_prefix_change(c, ".../nodes/", l.revision, t);  // block until someone joins or leaves
//   create_if_absent(c, ".../store", my_addr, lease.id());  // first to create serves the store;
//       // when its lease expires the key goes, the others' wait returns, and one of them wins
//   compare_and_swap(c, ".../state", seen.mod_revision, next);  // advance shared state once
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/etcd/client.h"

namespace launch::etcd {

struct CreateResult {
  bool created = false;
  int64_t revision = 0;    // created: the revision of the write; else the store's revision
  KeyValue existing;       // not created: the key as it is (its value, lease, revisions)
};
// Creates `key` only if it does not exist (a transaction on create_revision == 0); atomic: of
// several clients creating the same key at once, exactly one gets created == true.
CreateResult create_if_absent(Client& c, std::string_view key, std::string_view value, int64_t lease = 0);

struct SwapResult {
  bool swapped = false;
  int64_t revision = 0;              // swapped: the revision of the write; else the store's
  std::optional<KeyValue> current;   // not swapped: the key as it is (nullopt: absent)
};
// Writes `value` only if the key's mod_revision is still `expected_mod_revision` (the one the
// caller read; 0: the key must be absent). Revisions, not values, are compared, so a value
// written back in between (A, B, A) is still seen as a change.
SwapResult compare_and_swap(Client& c, std::string_view key, int64_t expected_mod_revision, std::string_view value,
                            int64_t lease = 0);

// Deletes `key` only if its mod_revision is still `expected_mod_revision`: gives up a role (the
// store's host) without removing a successor's claim. false: it changed or is gone.
bool delete_if_unchanged(Client& c, std::string_view key, int64_t expected_mod_revision);

struct Listing {
  int64_t revision = 0;  // the store's revision the listing is a snapshot of
  std::vector<KeyValue> kvs;  // sorted by key, as etcd returns them
};
// Every key starting with `prefix` (one linearizable range read).
Listing list_prefix(Client& c, std::string_view prefix);

// Blocks until a key under `prefix` is created, changed or deleted after `after_revision` (a
// Listing's revision: nothing is missed between the listing and the wait), or `timeout` passes.
WatchResult wait_prefix_change(Client& c, std::string_view prefix, int64_t after_revision,
                               std::chrono::milliseconds timeout);

}  // namespace launch::etcd
