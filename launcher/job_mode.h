// The three ways a launcher takes part in a job, behind one small interface, so that run_job
// is one short loop over generations (the first run, then one per restart):
//   - this node alone: ports of our own, a fresh store per generation (job_mode.cpp);
//   - one Slurm task per worker: the tasks meet in task 0's store (slurm/slurm_tasks.cpp);
//   - several nodes: the nodes meet in node 0's store and fail together (multinode/multinode_job.cpp);
//   - elastic membership, --nnodes MIN:MAX, and every multi-node job over etcd: the job re-forms as
//     nodes come and go (elastic/elastic_job.cpp).
#pragma once

#include <memory>
#include <optional>

#include "launcher/plan.h"
#include "launcher/stop_signals.h"
#include "launcher/supervisor.h"
#include "launcher/worker_env.h"

namespace launch {

class JobMode {
 public:
  virtual ~JobMode() = default;
  // Generation `generation`: meets the other launchers, if there are any (a stop signal ends the
  // wait: StopRequested), and says where this launcher's workers sit. The ports it names are
  // released for the workers to bind.
  virtual RankLayout start(int generation) = 0;
  // This generation's hooks into the supervisor: publishing a failure here, hearing of one elsewhere.
  virtual void install(SupervisorConfig& cfg) = 0;
  // After generation `generation` ended as `outcome`: whether another follows. nullopt: the
  // --max_restart rule of run.cpp decides (a failure restarts while restarts are left); elastic
  // membership decides itself (a node that joins re-forms the job without counting).
  virtual std::optional<bool> another_generation(const JobOutcome& outcome, int generation, StopSignals& stops) {
    (void)outcome, (void)generation, (void)stops;
    return std::nullopt;
  }
  // The generation ended with `exit_code`; `last`: no restart follows.
  virtual void finish(int exit_code, bool last) = 0;
};

// The mode the plan calls for. Called after `stops` blocked the signals (threads it starts, such
// as a store's, inherit the mask) and before the log directory is made: what can fail early
// (a busy --start_port, node 0's --master address) fails here.
std::unique_ptr<JobMode> make_job_mode(const Plan& plan, StopSignals& stops);

// The modes' own factories (in their folders).
std::unique_ptr<JobMode> make_slurm_task_group(const Plan& plan, StopSignals& stops);
std::unique_ptr<JobMode> make_multinode_job(const Plan& plan, StopSignals& stops);
std::unique_ptr<JobMode> make_elastic_job(const Plan& plan, StopSignals& stops);

}  // namespace launch
