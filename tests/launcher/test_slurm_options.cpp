// The Slurm -> options mapping, on environments recorded from real job steps.
#include <catch2/catch.hpp>

#include <algorithm>

#include "launcher/cli.h"
#include "launcher/errors.h"
#include "launcher/slurm/slurm_options.h"

using namespace launch;
using slurm::EnvMap;

namespace {

// `srun -n1 env` on the local test cluster (scripts/slurm/local_cluster.sh, slurm-wlm 22.05).
EnvMap one_task_step() {
  return {{"SLURM_JOB_ID", "8"},        {"SLURM_JOB_NODELIST", "vm"},  {"SLURM_JOB_NUM_NODES", "1"},
          {"SLURM_LOCALID", "0"},       {"SLURM_NNODES", "1"},         {"SLURM_NODEID", "0"},
          {"SLURM_NTASKS", "1"},        {"SLURM_PROCID", "0"},         {"SLURM_STEPID", "0"},
          {"SLURM_STEP_ID", "0"},       {"SLURM_STEP_LAUNCHER_PORT", "39737"},
          {"SLURM_STEP_NODELIST", "vm"}, {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_STEP_NUM_TASKS", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "1"}, {"SLURM_TASKS_PER_NODE", "1"}};
}

// `srun -n2 env`, task 1, same cluster.
EnvMap two_task_step_task1() {
  EnvMap e = one_task_step();
  e["SLURM_JOB_ID"] = "1";
  e["SLURM_LOCALID"] = "1";
  e["SLURM_PROCID"] = "1";
  e["SLURM_NTASKS"] = "2";
  e["SLURM_STEP_NUM_TASKS"] = "2";
  e["SLURM_STEP_TASKS_PER_NODE"] = "2";
  e["SLURM_TASKS_PER_NODE"] = "2";
  return e;
}

Options opts(std::vector<const char*> args) {
  args.insert(args.begin(), "launch");
  args.push_back("prog");
  return *parse_cli(static_cast<int>(args.size()), args.data()).options;
}

SlurmDerived derive(const EnvMap& env, const Options& o, int visible_gpus = 0) {
  return apply_slurm(o, *slurm::derive_slurm_layout(env), visible_gpus);
}

bool has_note(const SlurmDerived& d, const std::string& text) {
  return std::any_of(d.notes.begin(), d.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

std::string usage_error(const EnvMap& env, const Options& o, int visible_gpus = 0) {
  try {
    derive(env, o, visible_gpus);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("slurm: one launcher per node keeps the user's devices, names the step", "[launcher][slurm]") {
  const SlurmDerived d = derive(one_task_step(), opts({"--devices", "cpu", "--nproc_per_node", "2"}));
  CHECK_FALSE(d.task);
  CHECK(d.options.nnodes == 1);
  CHECK(d.options.job_id == "slurm-8.0");
  CHECK(d.options.devices == parse_devices("cpu"));
  CHECK(d.options.nproc_per_node == 2);
  CHECK(d.options.grace_s == Approx(10));  // below Slurm's default KillWait of 30 s
  // --dry-run says where every derived value came from.
  CHECK(has_note(d, "nnodes = 1 (from SLURM_STEP_NUM_NODES=1)"));
  CHECK(has_note(d, "node rank = 0 (from SLURM_NODEID=0)"));
  CHECK(has_note(d, "job id = slurm-8.0"));
  CHECK(has_note(d, "KillWait of 30 s"));
}

TEST_CASE("slurm: options given by the user win", "[launcher][slurm]") {
  const SlurmDerived d = derive(one_task_step(), opts({"--job_id", "mine", "--grace", "3", "--nnodes", "1"}));
  CHECK(d.options.job_id == "mine");
  CHECK(d.options.grace_s == Approx(3));
  CHECK_FALSE(has_note(d, "job id ="));
  CHECK_FALSE(has_note(d, "nnodes ="));
  CHECK(has_note(derive(one_task_step(), opts({"--grace", "45.5"})), "warning: --grace 45.5 is not below"));
}

TEST_CASE("slurm: the step's GPUs", "[launcher][slurm]") {
  EnvMap env = one_task_step();
  env["SLURM_STEP_GPUS"] = "2,3";
  // Slurm set no CUDA_VISIBLE_DEVICES: its ids are the visible ones.
  auto d = derive(env, opts({}), 0);
  CHECK(d.options.devices == DeviceList::gpu_ids({2, 3}, "SLURM_STEP_GPUS"));
  CHECK(d.options.devices->option == "SLURM_STEP_GPUS");
  CHECK(has_note(d, "devices = 2,3 (from SLURM_STEP_GPUS=2,3)"));
  // With CUDA_VISIBLE_DEVICES (what Slurm usually sets), every visible GPU, as outside Slurm.
  env.erase("SLURM_STEP_GPUS");
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  d = derive(env, opts({}), 2);
  CHECK_FALSE(d.options.devices);
  CHECK(has_note(d, "the 2 visible GPU(s) (from CUDA_VISIBLE_DEVICES=0,1)"));
  // An explicit list is the user's.
  d = derive(env, opts({"--gpus", "1"}), 2);
  CHECK(d.options.devices == parse_gpus("1"));
}

TEST_CASE("slurm: one task per worker takes rank, world and local rank from Slurm", "[launcher][slurm]") {
  const SlurmDerived d = derive(two_task_step_task1(), opts({}));
  REQUIRE(d.task);
  CHECK(d.task->rank() == 1);
  CHECK(d.task->ranks.first_rank == 1);
  CHECK(d.task->ranks.first_local_rank == 1);
  CHECK(d.task->ranks.world_size == 2);
  CHECK(d.task->ranks.local_size == 2);
  CHECK(d.task->ranks.nnodes == 1);
  CHECK(d.task->step == "1.0");
  CHECK(d.task->store_port == slurm::derive_port("1", "0"));
  CHECK(d.options.nproc_per_node == 1);
  CHECK(d.options.devices == parse_devices("cpu"));  // no GPU visible
  CHECK(has_note(d, "rank = 1 (from SLURM_PROCID=1)"));
  CHECK(has_note(d, "local rank = 1 (from SLURM_LOCALID=1)"));
  CHECK(has_note(d, "world size = 2 (from SLURM_STEP_NUM_TASKS=2)"));
  CHECK(has_note(d, "served by task 0"));
}

TEST_CASE("slurm: one task per worker picks this task's GPU", "[launcher][slurm]") {
  EnvMap env = two_task_step_task1();
  env["CUDA_VISIBLE_DEVICES"] = "5";  // srun --gpus-per-task=1
  CHECK(derive(env, opts({}), 1).options.devices == parse_gpus("0"));
  env["CUDA_VISIBLE_DEVICES"] = "0,1";  // every task sees the node's GPUs
  CHECK(derive(env, opts({}), 2).options.devices == parse_gpus("1"));
  env["SLURM_STEP_NUM_TASKS"] = env["SLURM_STEP_TASKS_PER_NODE"] = "4";
  CHECK_THAT(usage_error(env, opts({}), 2), Catch::Contains("4 Slurm tasks on this node share 2 visible GPUs"));
}

TEST_CASE("slurm: a step over several nodes becomes a multi-node job", "[launcher][slurm]") {
  // `srun -N2 --ntasks-per-node=1 env` on a two-node cluster, node 1 (trimmed).
  EnvMap env = {{"SLURM_JOB_ID", "4711"},          {"SLURM_STEP_ID", "0"},       {"SLURM_NNODES", "2"},
                {"SLURM_STEP_NUM_NODES", "2"},     {"SLURM_NODEID", "1"},        {"SLURM_JOB_NODELIST", "gpu[01-02]"},
                {"SLURM_STEP_NODELIST", "gpu[01-02]"}, {"SLURM_NTASKS", "2"},    {"SLURM_STEP_NUM_TASKS", "2"},
                {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_PROCID", "1"},   {"SLURM_LOCALID", "0"}};
  const SlurmDerived d = derive(env, opts({}), 4);
  CHECK_FALSE(d.task);
  CHECK(d.options.nnodes == 2);
  CHECK(d.options.rank == 1);
  CHECK(d.options.master == std::optional<std::string>("gpu01:" + std::to_string(slurm::derive_port("4711", "0"))));
  CHECK(d.hosts == std::vector<std::string>{"gpu01", "gpu02"});
  CHECK(has_note(d, "nnodes = 2 (from SLURM_STEP_NUM_NODES=2)"));
  CHECK(has_note(d, "node rank = 1 (from SLURM_NODEID=1)"));
  CHECK(has_note(d, "master = gpu01:"));
  // The user's --master and --rank win.
  const SlurmDerived mine = derive(env, opts({"--nnodes", "2", "--master", "10.0.0.1:29400", "--rank", "0"}), 4);
  CHECK(mine.options.master == std::optional<std::string>("10.0.0.1:29400"));
  CHECK(mine.options.rank == 0);
  // Several tasks per node on several nodes: refused.
  env["SLURM_STEP_NUM_TASKS"] = "8";
  env["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  CHECK_THAT(usage_error(env, opts({}), 4), Catch::Contains("one task per worker works on one node only"));
}

TEST_CASE("slurm: what cannot run here is a usage error saying what to do", "[launcher][slurm]") {
  CHECK_THAT(usage_error(two_task_step_task1(), opts({"--nproc_per_node", "2"})),
             Catch::Contains("drop --nproc_per_node"));
  CHECK_THAT(usage_error(two_task_step_task1(), opts({"--max_restart", "1"})),
             Catch::Contains("--ntasks-per-node=1"));
  CHECK_THAT(usage_error(two_task_step_task1(), opts({"--gpus", "0,1"})),
             Catch::Contains("one device per task") && Catch::Contains("not '0,1'"));
}
