// launch --requeue's verdict, from squeue lines recorded on Slurm 22.05.8 (the repo's one-node
// cluster, scripts/slurm/local_cluster.sh) while the job ended, with
// squeue -h -j JOB -O "State:|,Reason:|,PreemptTime:|".
#include <catch2/catch.hpp>

#include <csignal>

#include "launcher/slurm/requeue.h"

using namespace launch::slurm;

TEST_CASE("requeue: the time limit and a preemption requeue, scancel does not", "[slurm][requeue]") {
  // sbatch --time: the SIGTERM comes with the state already COMPLETING, Reason TimeLimit.
  CHECK(requeue_verdict("COMPLETING|TimeLimit|N/A|").requeue);
  CHECK(requeue_verdict("COMPLETING|TimeLimit|N/A|").why == "the time limit");
  // A job of a higher partition took the CPUs (PreemptMode=CANCEL): COMPLETING, PreemptTime set.
  const RequeueVerdict pre = requeue_verdict("COMPLETING|None|2026-12-01T21:06:13|\n");
  CHECK(pre.requeue);
  CHECK(pre.why == "preemption (at 2026-12-01T21:06:13)");
  // sbatch --signal=TERM@120: the warning ahead of the limit, the job still runs.
  CHECK(requeue_verdict("RUNNING|None|N/A|").requeue);
  // scancel: COMPLETING with neither (CANCELLED once it is over).
  const RequeueVerdict cancelled = requeue_verdict("COMPLETING|None|N/A|");
  CHECK_FALSE(cancelled.requeue);
  CHECK_THAT(cancelled.why, Catch::Contains("cancelled (scancel)"));
  CHECK_FALSE(requeue_verdict("CANCELLED|None|None|").requeue);
}

TEST_CASE("requeue: what is not a job state requeues nothing, and says what it got", "[slurm][requeue]") {
  CHECK_FALSE(requeue_verdict("").requeue);
  CHECK_THAT(requeue_verdict("slurm_load_jobs error: Invalid job id specified").why,
             Catch::Contains("not the job's state"));
  const RequeueVerdict failed = requeue_verdict("FAILED|NonZeroExitCode|N/A|");
  CHECK_FALSE(failed.requeue);
  CHECK(failed.why == "the job is FAILED (NonZeroExitCode)");
}

TEST_CASE("requeue: run_command captures output and status, and is bounded", "[slurm][requeue]") {
  const CommandResult ok = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  CHECK(ok.status == 3);
  CHECK_FALSE(ok.timed_out);
  CHECK_THAT(ok.output, Catch::Contains("out") && Catch::Contains("err"));
  const CommandResult slow = run_command({"sleep", "30"}, 0.2);
  CHECK(slow.timed_out);
  CHECK(slow.status == 128 + SIGKILL);
  const CommandResult missing = run_command({"no-such-command-anywhere"}, 1);
  CHECK(missing.status == -1);  // glibc's posix_spawnp reports a failed exec to the parent
  CHECK_THAT(missing.output, Catch::Contains("no-such-command-anywhere"));
}
