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
