#include "launcher/elastic/store_backend.h"

namespace launch::elastic {

std::string StoreBackend::load(ms timeout) {
  // CHECK first: a GET of an absent key would park until it exists.
  if (!client_.check({kStateKey}, timeout)[0]) return "";
  return client_.get(kStateKey, timeout);
}

std::string StoreBackend::compare_and_swap(const std::string& expected, const std::string& desired, int64_t version,
                                           ms timeout) {
  std::string now = client_.compare_set(kStateKey, expected, desired, timeout);
  if (now == desired) client_.set(changed_key(version), "1", timeout);
  return now;
}

void StoreBackend::wait_change(int64_t seen, ms timeout) {
  try {
    client_.wait({changed_key(seen + 1)}, timeout);
  } catch (const proto::StoreError& e) {
    if (e.kind() != proto::StoreError::Kind::Timeout) throw;
  }
}

}  // namespace launch::elastic
