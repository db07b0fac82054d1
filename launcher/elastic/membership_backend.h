// Where the membership record (membership.h) lives: one value that nodes read, replace by
// compare-and-swap, and wait on for a change. The membership logic needs nothing else, so that a
// second backend (etcd: a key, a transaction comparing its value, a watch) plugs in beside ours
// (store_backend.h: the job's store on --master).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace launch::elastic {

class MembershipBackend {
 public:
  virtual ~MembershipBackend() = default;
  using ms = std::chrono::milliseconds;
  // The record's bytes; "" when there is none yet.
  virtual std::string load(ms timeout) = 0;
  // Replaces the record with `desired` if it still is `expected` ("" : none yet); returns what it
  // holds afterwards (`desired` when this call won). `version` is desired's (State::version):
  // what wait_change() of the others waits for.
  virtual std::string compare_and_swap(const std::string& expected, const std::string& desired, int64_t version,
                                       ms timeout) = 0;
  // Returns once the record's version is past `seen`, or after `timeout`; parks, never polls.
  virtual void wait_change(int64_t seen, ms timeout) = 0;
  // For messages: "the store at 10.0.0.1:29400".
  virtual std::string where() const = 0;
};

}  // namespace launch::elastic
