// The membership record in the job's own store (launcher/store, on --master): key
// __elastic/state, replaced with COMPARE_SET; after each change its writer sets
// __elastic/changed/<version>, on which the others park (WAIT). A writer that dies between the
// two leaves the others to their wait's timeout, which the caller bounds (a second at most).
#pragma once

#include <memory>

#include "launcher/elastic/membership_backend.h"
#include "proto/client.h"

namespace launch::elastic {

inline constexpr const char* kStateKey = "__elastic/state";
inline std::string changed_key(int64_t version) { return "__elastic/changed/" + std::to_string(version); }

class StoreBackend final : public MembershipBackend {
 public:
  explicit StoreBackend(proto::ClientOptions opts) : client_(std::move(opts)) {}
  std::string load(ms timeout) override;
  std::string compare_and_swap(const std::string& expected, const std::string& desired, int64_t version,
                               ms timeout) override;
  void wait_change(int64_t seen, ms timeout) override;
  std::string where() const override { return "the store at " + client_.options().address; }

 private:
  proto::Client client_;
};

}  // namespace launch::elastic
