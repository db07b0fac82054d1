#include "launcher/elastic/store_backend.h"

#include <utility>

namespace launch::elastic {

namespace {

// The store's errors as the seam's (membership_backend.h).
BackendError::Kind kind_of(const proto::StoreError& e) {
  using K = proto::StoreError::Kind;
  return e.kind() == K::Cancelled ? BackendError::Kind::Cancelled
         : e.kind() == K::Refused ? BackendError::Kind::Refused
                                  : BackendError::Kind::Unavailable;
}

template <class F>
auto translated(F&& call) -> decltype(call()) {
  return with_errors_of<proto::StoreError>(std::forward<F>(call), kind_of);
}

}  // namespace

std::string StoreBackend::load(ms timeout) {
  return translated([&] {
    // CHECK first: a GET of an absent key would park until it exists.
    if (!client_.check({kStateKey}, timeout)[0]) return std::string();
    return client_.get(kStateKey, timeout);
  });
}

std::string StoreBackend::compare_and_swap(const std::string& expected, const std::string& desired, int64_t version,
                                           ms timeout) {
  return translated([&] {
    std::string now = client_.compare_set(kStateKey, expected, desired, timeout);
    if (now == desired) client_.set(changed_key(version), "1", timeout);
    return now;
  });
}

void StoreBackend::wait_change(int64_t seen, ms timeout) {
  translated([&] {
    try {
      client_.wait({changed_key(seen + 1)}, timeout);
    } catch (const proto::StoreError& e) {
      if (e.kind() != proto::StoreError::Kind::Timeout) throw;
    }
  });
}

}  // namespace launch::elastic
