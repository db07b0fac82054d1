// The membership record in etcd (launcher/etcd/): the key /launch/<job_id>/membership, replaced by
// one transaction that compares its value (create_revision == 0 for "none yet") and reads it back
// when the comparison fails. wait_change watches every key of the job from the revision of the
// last answer, so that it also returns when a node's key comes or goes; alive() lists those keys:
// each is written with its node's lease (etcd_rendezvous.h), so a node that dies drops out of it
// a lease TTL after its last renewal.
#pragma once

#include <string>

#include "launcher/elastic/membership_backend.h"
#include "launcher/etcd/client.h"

namespace launch::elastic {

class EtcdBackend final : public MembershipBackend {
 public:
  EtcdBackend(etcd::Options opts, std::string job_id);
  std::string load(ms timeout) override;
  std::string compare_and_swap(const std::string& expected, const std::string& desired, int64_t version,
                               ms timeout) override;
  void wait_change(int64_t seen, ms timeout) override;
  std::optional<std::vector<std::string>> alive(ms timeout) override;
  std::string where() const override { return "etcd at " + client_.options().endpoint; }

 private:
  etcd::Client client_;
  std::string job_id_, key_;
  int64_t revision_ = 0;  // etcd's revision in the last answer: what wait_change continues from
};

}  // namespace launch::elastic
