// The elastic job's site over launch's own store (site.h): the store on --master, served by the
// launch that wins the bind for the whole job, holds the membership record (store_backend.h).
#include "launcher/elastic/site.h"
#include "launcher/elastic/store_backend.h"
#include "launcher/multinode/store_host.h"

namespace launch {

namespace {

class StoreSite final : public ElasticSite {
 public:
  StoreSite(const Plan& p, StopSignals& stops, Clock::time_point deadline) : mp_(meet_at_master(p, stops, deadline)) {
    opts_.address = mp_.master;
    opts_.address_source = p.master_origin;
    opts_.job_id = p.job.job_id;
    opts_.token = p.token;
    opts_.client_name = "launcher on " + mp_.host;
  }

  const std::string& host() const override { return mp_.host; }

  std::unique_ptr<elastic::MembershipBackend> backend(const CancelHook& hook,
                                                      std::chrono::milliseconds connect_timeout) const override {
    proto::ClientOptions o = opts_;
    o.connect_timeout = connect_timeout;
    hook.apply(o);
    return std::make_unique<elastic::StoreBackend>(std::move(o));
  }

  RoundStore round_store(const std::optional<elastic::RoundEnd>&, Clock::time_point) override {
    return RoundStore{mp_.master, opts_.address_source, mp_.serves, mp_.presence};
  }

  std::string failure_note() const override { return " (with launch's own store the job ends with the node that serves it)"; }

 private:
  MeetingPoint mp_;  // holds the store where this launch serves it
  proto::ClientOptions opts_;
};

}  // namespace

std::unique_ptr<ElasticSite> make_store_site(const Plan& p, StopSignals& stops, ElasticSite::Clock::time_point deadline) {
  return std::make_unique<StoreSite>(p, stops, deadline);
}

}  // namespace launch
