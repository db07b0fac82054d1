#include <catch2/catch.hpp>

#include "launcher/slurm/slurm_env.h"

using namespace launch::slurm;

namespace {
// Recorded from `srun -N2 --ntasks-per-node=1 env` on a two-node test cluster (trimmed).
EnvMap two_node_step() {
  return {{"SLURM_JOB_ID", "4711"},        {"SLURM_STEP_ID", "0"},
          {"SLURM_NNODES", "2"},           {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NODEID", "1"},           {"SLURM_JOB_NODELIST", "gpu[01-02]"},
          {"SLURM_STEP_NODELIST", "gpu[01-02]"}, {"SLURM_NTASKS", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},   {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_PROCID", "1"},           {"SLURM_LOCALID", "0"},
          {"SLURM_STEP_GPUS", "0,1,2,3"}};
}
}  // namespace

TEST_CASE("outside Slurm nothing is derived", "[slurm]") {
  CHECK_FALSE(derive_slurm_layout({{"PATH", "/bin"}}).has_value());
}

TEST_CASE("a launcher per node: node count, rank, master and devices", "[slurm]") {
  auto l = derive_slurm_layout(two_node_step());
  REQUIRE(l);
  CHECK(l->nnodes == 2);
  CHECK(l->node_rank == 1);
  CHECK(l->hosts == std::vector<std::string>{"gpu01", "gpu02"});
  CHECK(l->master_host == "gpu01");
  CHECK(l->devices == std::optional<std::string>("0,1,2,3"));
  CHECK_FALSE(l->task_per_worker);
  CHECK(l->master_port == derive_port("4711", "0"));
  CHECK(l->master_port >= kPortBase);
  CHECK(l->master_port < kPortBase + kPortSpan);
}

TEST_CASE("the step's values win over the job's", "[slurm]") {
  auto env = two_node_step();
  env["SLURM_JOB_NODELIST"] = "gpu[01-08]";
  env["SLURM_NNODES"] = "8";
  auto l = derive_slurm_layout(env);
  REQUIRE(l);
  CHECK(l->nnodes == 2);
  CHECK(l->hosts.size() == 2);
}

TEST_CASE("one task per GPU: Slurm's task ids become the ranks", "[slurm]") {
  EnvMap env = {{"SLURM_JOB_ID", "99"},         {"SLURM_STEP_ID", "3"},
                {"SLURM_STEP_NUM_NODES", "2"},  {"SLURM_NODEID", "1"},
                {"SLURM_STEP_NODELIST", "n[1-2]"}, {"SLURM_STEP_NUM_TASKS", "8"},
                {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_PROCID", "6"},
                {"SLURM_LOCALID", "2"},         {"CUDA_VISIBLE_DEVICES", "2"}};
  auto l = derive_slurm_layout(env);
  REQUIRE(l);
  CHECK(l->task_per_worker);
  CHECK(l->world_size == 8);
  CHECK(l->tasks_per_node == 4);
  CHECK(l->global_rank == 6);
  CHECK(l->local_rank == 2);
  CHECK(l->devices == std::optional<std::string>("2"));
}

TEST_CASE("the derived port differs between steps and jobs, and is stable", "[slurm]") {
  CHECK(derive_port("4711", "0") == derive_port("4711", "0"));
  CHECK(derive_port("4711", "0") != derive_port("4711", "1"));
  CHECK(derive_port("4711", "0") != derive_port("4712", "0"));
}

TEST_CASE("inconsistent or malformed Slurm variables are errors naming the variable", "[slurm]") {
  auto message = [](EnvMap env) {
    try {
      derive_slurm_layout(env);
    } catch (const SlurmEnvError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto env = two_node_step();
  env["SLURM_NODEID"] = "2";
  CHECK_THAT(message(env), Catch::Contains("SLURM_NODEID=2"));
  env = two_node_step();
  env["SLURM_STEP_NUM_NODES"] = "two";
  CHECK_THAT(message(env), Catch::Contains("SLURM_STEP_NUM_NODES='two'"));
  env = two_node_step();
  env["SLURM_STEP_NODELIST"] = "gpu[01-02";
  CHECK_THAT(message(env), Catch::Contains("SLURM_STEP_NODELIST"));
  env = two_node_step();
  env["SLURM_STEP_NODELIST"] = "gpu[01-03]";
  CHECK_THAT(message(env), Catch::Contains("names 3 hosts but the step has 2 nodes"));
  env = two_node_step();
  env["SLURM_PROCID"] = "5";
  CHECK_THAT(message(env), Catch::Contains("SLURM_PROCID=5"));
}

TEST_CASE("every derived value records the variable it came from", "[slurm]") {
  auto l = derive_slurm_layout(two_node_step());
  REQUIRE(l);
  CHECK(l->origin.at("nnodes") == "SLURM_STEP_NUM_NODES=2");
  CHECK(l->origin.at("node_rank") == "SLURM_NODEID=1");
  CHECK(l->origin.at("hosts") == "SLURM_STEP_NODELIST=gpu[01-02]");
  CHECK(l->origin.at("devices") == "SLURM_STEP_GPUS=0,1,2,3");
  CHECK(l->origin.at("world_size") == "SLURM_STEP_NUM_TASKS=2");
  CHECK(l->origin.at("global_rank") == "SLURM_PROCID=1");
  auto env = two_node_step();
  env.erase("SLURM_STEP_NUM_NODES");
  env.erase("SLURM_STEP_GPUS");
  env["CUDA_VISIBLE_DEVICES"] = "3";
  l = derive_slurm_layout(env);
  CHECK(l->origin.at("nnodes") == "SLURM_NNODES=2");
  CHECK(l->origin.at("devices") == "CUDA_VISIBLE_DEVICES=3");
  CHECK(derive_slurm_layout({{"SLURM_JOB_ID", "1"}})->origin.count("nnodes") == 0);  // the default
}
