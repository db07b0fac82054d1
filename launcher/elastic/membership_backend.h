// Where the membership record (membership.h) lives: one value that nodes read, replace by
// compare-and-swap, and wait on for a change. The membership logic needs nothing else, so that
// the backends plug in side by side: our store (store_backend.h: the job's store on --master) and
// etcd (etcd_backend.h: a key, a transaction comparing its value, a watch), which also knows which
// nodes are alive (their leases).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace launch::elastic {

// What every backend call throws, whatever is behind it: the caller needs to tell a stop signal,
// a refusal of this node (bad input: exit 2) and everything else (unreachable, timed out, a
// broken answer) apart. The message names the backend and the call.
class BackendError : public std::runtime_error {
 public:
  enum class Kind {
    Cancelled,    // the stop-signal hook ended the call
    Refused,      // this node is not let in (another job id, a wrong token)
    Unavailable,  // everything else
  };
  BackendError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A backend's call with its client's errors as the seam's: an `Error` that `call` throws becomes
// a BackendError of kind `kind_of(error)` with the client's message.
template <class Error, class F, class KindOf>
auto with_errors_of(F&& call, KindOf kind_of) -> decltype(call()) {
  try {
    return call();
  } catch (const Error& e) {
    throw BackendError(kind_of(e), e.what());
  }
}

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
  // Returns once the record's version is past `seen` (the version this backend last read or
  // wrote), or after `timeout`; parks, never polls. It may return early (etcd: a node joined or
  // left): the caller reads the record again either way.
  virtual void wait_change(int64_t seen, ms timeout) = 0;
  // The ids of the nodes alive now (etcd: those whose lease holds), read after the record;
  // nullopt when the backend does not know (our store: the heartbeats tell, once a round runs).
  virtual std::optional<std::vector<std::string>> alive(ms timeout) {
    (void)timeout;
    return std::nullopt;
  }
  // For messages: "the store at 10.0.0.1:29400", "etcd at 10.0.0.1:2379".
  virtual std::string where() const = 0;
};

}  // namespace launch::elastic
