#include <catch2/catch.hpp>

#include <algorithm>

#include "launcher/worker_env.h"

using namespace launch;

namespace {
JobSpec two_gpu_job() {
  JobSpec j;
  j.job_id = "job7";
  j.host = "10.0.0.5";
  j.log_dir = "/tmp/logs";
  j.devices = {{DeviceKind::Gpu, 2}, {DeviceKind::Gpu, 5}};
  j.endpoint_ports = {6170, 6171};
  j.master_port = 6169;
  j.store_addr = "10.0.0.5:7000";
  j.store_token = "abcd";
  return j;
}
}  // namespace

TEST_CASE("worker env: Paddle and torchrun names for every rank", "[launcher][env]") {
  const JobSpec job = two_gpu_job();
  const WorkerEnv e0 = build_worker_env(job, 0, {});
  const WorkerEnv e1 = build_worker_env(job, 1, {});
  const EnvMap expected1 = {
      {"PADDLE_TRAINER_ID", "1"},
      {"PADDLE_GLOBAL_RANK", "1"},
      {"PADDLE_TRAINERS_NUM", "2"},
      {"PADDLE_GLOBAL_SIZE", "2"},
      {"PADDLE_LOCAL_RANK", "1"},
      {"PADDLE_RANK_IN_NODE", "1"},
      {"PADDLE_LOCAL_SIZE", "2"},
      {"PADDLE_NNODES", "1"},
      {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.5:6170,10.0.0.5:6171"},
      {"PADDLE_CURRENT_ENDPOINT", "10.0.0.5:6171"},
      {"PADDLE_MASTER", "10.0.0.5:6169"},
      {"PADDLE_JOB_ID", "job7"},
      {"PADDLE_LOG_DIR", "/tmp/logs"},
      {"PADDLE_DISTRI_BACKEND", "nccl"},
      {"FLAGS_selected_gpus", "5"},
      {"RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "0"},
      {"MASTER_ADDR", "10.0.0.5"},
      {"MASTER_PORT", "6169"},
      {"LAUNCH_STORE_ADDR", "10.0.0.5:7000"},
      {"LAUNCH_STORE_TOKEN", "abcd"},
      {"OMP_NUM_THREADS", "1"},
      {"PADDLE_RESTART_COUNT", "0"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
  };
  CHECK(e1.set == expected1);
  CHECK(e1.unset.empty());
  CHECK(e0.set.at("FLAGS_selected_gpus") == "2");
  CHECK(e0.set.at("PADDLE_CURRENT_ENDPOINT") == "10.0.0.5:6170");
  CHECK(e0.set.at("RANK") == "0");
  CHECK(e0.set.at("PADDLE_TRAINER_ENDPOINTS") == e1.set.at("PADDLE_TRAINER_ENDPOINTS"));
}

TEST_CASE("worker env: CPU ranks use gloo and carry no FLAGS_selected_gpus", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.devices = {{DeviceKind::Cpu, -1}, {DeviceKind::Cpu, -1}};
  const WorkerEnv e = build_worker_env(job, 0, {{"FLAGS_selected_gpus", "3"}});
  CHECK(e.set.at("PADDLE_DISTRI_BACKEND") == "gloo");
  CHECK(e.set.count("FLAGS_selected_gpus") == 0);
  CHECK(e.unset == std::vector<std::string>{"FLAGS_selected_gpus"});
  const auto merged = merge_env({{"FLAGS_selected_gpus", "3"}, {"HOME", "/root"}}, e);
  CHECK(std::count(merged.begin(), merged.end(), "HOME=/root") == 1);
  CHECK(std::none_of(merged.begin(), merged.end(),
                     [](const std::string& kv) { return kv.rfind("FLAGS_selected_gpus=", 0) == 0; }));
}

TEST_CASE("worker env: OMP_NUM_THREADS only when unset and several processes", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  CHECK(build_worker_env(job, 0, {{"OMP_NUM_THREADS", "8"}}).set.count("OMP_NUM_THREADS") == 0);
  job.devices.resize(1);
  job.endpoint_ports.resize(1);
  CHECK(build_worker_env(job, 0, {}).set.count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("worker env: our variables override the launcher's, the rest is inherited", "[launcher][env]") {
  const JobSpec job = two_gpu_job();
  const EnvMap parent = {{"RANK", "99"}, {"CUDA_VISIBLE_DEVICES", "4,5,6"}, {"PATH", "/bin"}};
  const auto merged = merge_env(parent, build_worker_env(job, 0, parent));
  auto has = [&](const std::string& kv) { return std::count(merged.begin(), merged.end(), kv) == 1; };
  CHECK(has("RANK=0"));
  CHECK_FALSE(has("RANK=99"));
  CHECK(has("CUDA_VISIBLE_DEVICES=4,5,6"));  // left as it was
  CHECK(has("PATH=/bin"));
}

TEST_CASE("worker env: no store, no store variables", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.store_addr.clear();
  const WorkerEnv e = build_worker_env(job, 0, {});
  CHECK(e.set.count("LAUNCH_STORE_ADDR") == 0);
  CHECK(e.set.count("LAUNCH_STORE_TOKEN") == 0);
}

TEST_CASE("env_from_environ splits at the first '='", "[launcher][env]") {
  char a[] = "A=1", b[] = "B=x=y", c[] = "NOEQUALS";
  char* envp[] = {a, b, c, nullptr};
  const EnvMap m = env_from_environ(envp);
  CHECK(m == EnvMap{{"A", "1"}, {"B", "x=y"}});
}

TEST_CASE("worker env: restart counters follow the generation, under both names", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.restart_count = 2;
  for (int r = 0; r < 2; ++r) {
    const WorkerEnv e = build_worker_env(job, r, {{"PADDLE_RESTART_COUNT", "7"}});
    CHECK(e.set.at("PADDLE_RESTART_COUNT") == "2");
    CHECK(e.set.at("TORCHELASTIC_RESTART_COUNT") == "2");
    // Everything else is the same as in the first run.
    JobSpec first = job;
    first.restart_count = 0;
    EnvMap a = e.set, b = build_worker_env(first, r, {}).set;
    a.erase("PADDLE_RESTART_COUNT"), a.erase("TORCHELASTIC_RESTART_COUNT");
    b.erase("PADDLE_RESTART_COUNT"), b.erase("TORCHELASTIC_RESTART_COUNT");
    CHECK(a == b);
  }
}

TEST_CASE("worker env: the checkpoint signal is exported only when asked for", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  CHECK(build_worker_env(job, 0, {}).set.count("LAUNCH_CHECKPOINT_SIGNAL") == 0);
  job.checkpoint_signal = "SIGUSR2";
  CHECK(build_worker_env(job, 1, {}).set.at("LAUNCH_CHECKPOINT_SIGNAL") == "SIGUSR2");
}

TEST_CASE("worker env: one Slurm task per worker takes its ranks from Slurm", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.devices = {{DeviceKind::Gpu, 1}};
  job.endpoint_ports = {6170, 6171, 6172, 6173};
  job.task = JobSpec::TaskRanks{2, 2, 4, 4};
  const WorkerEnv e = build_worker_env(job, 0, {});
  CHECK(e.set.at("RANK") == "2");
  CHECK(e.set.at("PADDLE_TRAINER_ID") == "2");
  CHECK(e.set.at("LOCAL_RANK") == "2");
  CHECK(e.set.at("PADDLE_LOCAL_RANK") == "2");
  CHECK(e.set.at("WORLD_SIZE") == "4");
  CHECK(e.set.at("PADDLE_TRAINERS_NUM") == "4");
  CHECK(e.set.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(e.set.at("PADDLE_CURRENT_ENDPOINT") == "10.0.0.5:6172");
  CHECK(e.set.at("FLAGS_selected_gpus") == "1");
  CHECK(e.set.at("OMP_NUM_THREADS") == "1");  // 4 processes on the node, one per launcher
}

TEST_CASE("worker env: a multi-node job takes ranks, endpoints and master from the layout", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.nnodes = 2;
  job.node_rank = 1;
  job.cluster = JobSpec::Cluster{2, 4, {"10.0.0.4:100", "10.0.0.4:101", "10.0.0.5:6170", "10.0.0.5:6171"},
                                 "10.0.0.4:99"};
  const WorkerEnv e = build_worker_env(job, 1, {});
  CHECK(e.set.at("RANK") == "3");
  CHECK(e.set.at("PADDLE_TRAINER_ID") == "3");
  CHECK(e.set.at("LOCAL_RANK") == "1");
  CHECK(e.set.at("WORLD_SIZE") == "4");
  CHECK(e.set.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(e.set.at("GROUP_RANK") == "1");
  CHECK(e.set.at("PADDLE_NNODES") == "2");
  CHECK(e.set.at("PADDLE_TRAINER_ENDPOINTS") == "10.0.0.4:100,10.0.0.4:101,10.0.0.5:6170,10.0.0.5:6171");
  CHECK(e.set.at("PADDLE_CURRENT_ENDPOINT") == "10.0.0.5:6171");
  CHECK(e.set.at("PADDLE_MASTER") == "10.0.0.4:99");
  CHECK(e.set.at("MASTER_ADDR") == "10.0.0.4");
  CHECK(e.set.at("MASTER_PORT") == "99");
}
