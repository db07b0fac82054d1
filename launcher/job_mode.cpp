#include "launcher/job_mode.h"

#include <optional>

#include "launcher/ports.h"
#include "launcher/store/job_store.h"
#include "proto/address.h"

namespace launch {

namespace {

// This node alone: n endpoints, the framework's master port and the store's, reserved up front
// (a busy --start_port fails before anything is made); a fresh store per generation on the
// same address, because the store's failure record is final by design (a waiter of the failed
// generation must fail, never be answered by the next one) and a half-finished barrier of the
// failed generation must not count towards the next one's.
class LocalJob final : public JobMode {
 public:
  explicit LocalJob(const Plan& p) : host_(p.opt.host), job_id_(p.job.job_id) {
    const int n = p.n();
    const bool own_master = p.opt.framework_port.has_value();
    ports_ = reserve_ports(host_, own_master ? n + 1 : n + 2, p.opt.start_port);
    const auto& got = ports_.ports();
    for (int i = 0; i < n; ++i) layout_.endpoints.push_back(proto::join_host_port(host_, got[size_t(i)]));
    // torchrun's --master-port names the framework's port; it is checked free like the others.
    if (own_master) master_ports_ = reserve_ports(host_, 1, p.opt.framework_port, "");
    layout_.master = proto::join_host_port(host_, own_master ? master_ports_.ports()[0] : got[size_t(n)]);
    store_port_ = got.back();
    layout_.world_size = layout_.local_size = n;
  }

  RankLayout start(int) override {
    ports_.release_sockets();  // the workers bind these now, the store its own; the locks stay held
    master_ports_.release_sockets();
    store_.reset();
    store_ = start_job_store(host_, job_id_, store_port_);
    layout_.store_addr = store_->address;
    layout_.store_token = store_->token;
    store_port_ = static_cast<uint16_t>(std::stoi(store_->address.substr(store_->address.rfind(':') + 1)));
    return layout_;
  }

  void install(SupervisorConfig& cfg) override {
    cfg.on_failure = [report = store_->report_failure](const RootCause& rc) { report(rc.rank, rc.description); };
  }

  void finish(int, bool) override {}

 private:
  std::string host_, job_id_;
  PortReservation ports_, master_ports_;
  uint16_t store_port_ = 0;
  RankLayout layout_;
  std::optional<JobStore> store_;
};

}  // namespace

std::unique_ptr<JobMode> make_job_mode(const Plan& plan, StopSignals& stops) {
  if (plan.task) return make_slurm_task_group(plan, stops);
  if (plan.elastic || plan.etcd) return make_elastic_job(plan, stops);
  if (plan.multinode) return make_multinode_job(plan, stops);
  return std::make_unique<LocalJob>(plan);
}

}  // namespace launch
