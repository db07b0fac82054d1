// The launcher's half of the worker-environment contract, and the round trip: what
// build_worker_env writes is what the worker's read_worker_env reads back.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "launcher/devices.h"
#include "launcher/exit_policy.h"
#include "launcher/worker_env.h"
#include "proto/worker_env.h"

using namespace launch;

namespace {

JobSpec two_gpu_job() {
  JobSpec j;
  j.job_id = "job7";
  j.log_dir = "/tmp/logs";
  j.devices = {{DeviceKind::Gpu, 2}, {DeviceKind::Gpu, 5}};
  return j;
}

RankLayout one_node(int n) {
  RankLayout l;
  l.world_size = l.local_size = n;
  for (int i = 0; i < n; ++i) l.endpoints.push_back("10.0.0.5:" + std::to_string(6170 + i));
  l.master = "10.0.0.5:6169";
  l.store_addr = "10.0.0.5:7000";
  l.store_token = "abcd";
  return l;
}

// What a worker started with this environment (on top of `parent`) reads.
proto::WorkerEnv worker_reads(const WorkerEnv& e, const EnvMap& parent = {}) {
  EnvMap all;
  for (const auto& kv : merge_env(parent, e)) all[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return proto::read_worker_env(all);
}

}  // namespace

TEST_CASE("worker env: Paddle's and torchrun's names for every rank", "[launcher][env]") {
  const JobSpec job = two_gpu_job();
  const WorkerEnv e0 = build_worker_env(job, one_node(2), 0, 0, {});
  const WorkerEnv e1 = build_worker_env(job, one_node(2), 1, 0, {});
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
      {"POD_NAME", e1.set.at("POD_NAME")},
      {"PADDLE_AUTO_CLUSTER", "0"},
      {"PADDLE_TRAINING_ROLE", "TRAINER"},
      {"RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "0"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_RANK", "1"},
      {"ROLE_NAME", "default"},
      {"ROLE_WORLD_SIZE", "2"},
      {"MASTER_ADDR", "10.0.0.5"},
      {"MASTER_PORT", "6169"},
      {"TORCHELASTIC_RUN_ID", "job7"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", "/tmp/logs/workererror.1.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
      {"LAUNCH_STORE_ADDR", "10.0.0.5:7000"},
      {"LAUNCH_STORE_TOKEN", "abcd"},
      {"OMP_NUM_THREADS", "1"},
      {"PYTHONUNBUFFERED", "1"},
      {"PADDLE_RESTART_COUNT", "0"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
  };
  CHECK(e1.set == expected1);
  CHECK(e1.set.at("POD_NAME").size() == 6);
  CHECK(e1.unset.empty());
  CHECK(e0.set.at("FLAGS_selected_gpus") == "2");
  CHECK(e0.set.at("PADDLE_CURRENT_ENDPOINT") == "10.0.0.5:6170");
  CHECK(e0.set.at("RANK") == "0");
  CHECK(e0.set.at("TORCHELASTIC_ERROR_FILE") == "/tmp/logs/workererror.0.json");
  CHECK(e0.set.at("PADDLE_TRAINER_ENDPOINTS") == e1.set.at("PADDLE_TRAINER_ENDPOINTS"));
}

TEST_CASE("worker env: CPU ranks use gloo, carry no FLAGS_selected_gpus; NCCL's error handling as torchrun", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.devices = {{DeviceKind::Cpu, -1}, {DeviceKind::Cpu, -1}};
  const WorkerEnv e = build_worker_env(job, one_node(2), 0, 0, {{"FLAGS_selected_gpus", "3"}});
  CHECK(e.set.at("PADDLE_DISTRI_BACKEND") == "gloo");
  CHECK(e.set.count("FLAGS_selected_gpus") == 0);
  CHECK(e.set.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");  // torchrun sets it on CPU ranks too
  CHECK(e.unset == std::vector<std::string>{"FLAGS_selected_gpus"});
  const auto merged = merge_env({{"FLAGS_selected_gpus", "3"}, {"HOME", "/root"}}, e);
  CHECK(std::count(merged.begin(), merged.end(), "HOME=/root") == 1);
  CHECK(std::none_of(merged.begin(), merged.end(),
                     [](const std::string& kv) { return kv.rfind("FLAGS_selected_gpus=", 0) == 0; }));
}

TEST_CASE("worker env: --role, --signals-to-handle, --virtual-local-rank", "[launcher][env]") {
  JobSpec job = two_gpu_job();  // GPUs 2 and 5 of the visible ones
  job.role = "trainer";
  job.signals_to_handle = "SIGTERM,SIGUSR1";
  job.virtual_local_rank = true;
  const EnvMap parent = {{"CUDA_VISIBLE_DEVICES", "0,1,4,5,6,GPU-77"}};
  const WorkerEnv e = build_worker_env(job, one_node(2), 1, 0, parent);
  CHECK(e.set.at("ROLE_NAME") == "trainer");
  CHECK(e.set.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGUSR1");
  CHECK(e.set.at("LOCAL_RANK") == "0");
  CHECK(e.set.at("PADDLE_LOCAL_RANK") == "0");
  CHECK(e.set.at("RANK") == "1");
  CHECK(e.set.at("CUDA_VISIBLE_DEVICES") == "GPU-77");  // the 6th visible one: index 5
  CHECK(e.set.at("FLAGS_selected_gpus") == "0");
  // The worker reads its one GPU back as device 0 of the one it sees.
  EnvMap merged;
  for (const auto& kv : merge_env(parent, e)) merged[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  const proto::WorkerEnv w = proto::read_worker_env(merged);
  CHECK(w.gpu_ordinal == 0);
  CHECK(w.local_rank == 0);
  CHECK(w.rank == 1);
  // Without CUDA_VISIBLE_DEVICES the index is the device.
  CHECK(build_worker_env(job, one_node(2), 0, 0, {}).set.at("CUDA_VISIBLE_DEVICES") == "2");
  job.virtual_local_rank = false;
  CHECK(build_worker_env(job, one_node(2), 1, 0, parent).set.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("worker env: what the user set stays (OMP_NUM_THREADS, PYTHONUNBUFFERED, NCCL error handling)", "[launcher][env]") {
  const EnvMap user = {{"OMP_NUM_THREADS", "8"}, {"PYTHONUNBUFFERED", "0"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  const WorkerEnv e = build_worker_env(two_gpu_job(), one_node(2), 0, 0, user);
  for (const auto& [k, v] : user) CHECK(e.set.count(k) == 0);
  JobSpec one = two_gpu_job();
  one.devices.resize(1);
  CHECK(build_worker_env(one, one_node(1), 0, 0, {}).set.count("OMP_NUM_THREADS") == 0);  // a single process
}

TEST_CASE("worker env: our variables override the launcher's, the rest is inherited", "[launcher][env]") {
  const EnvMap parent = {{"RANK", "99"}, {"CUDA_VISIBLE_DEVICES", "4,5,6"}, {"PATH", "/bin"}};
  const auto merged = merge_env(parent, build_worker_env(two_gpu_job(), one_node(2), 0, 0, parent));
  auto has = [&](const std::string& kv) { return std::count(merged.begin(), merged.end(), kv) == 1; };
  CHECK(has("RANK=0"));
  CHECK_FALSE(has("RANK=99"));
  CHECK(has("CUDA_VISIBLE_DEVICES=4,5,6"));  // left as it was
  CHECK(has("PATH=/bin"));
}

TEST_CASE("worker env: no store, no store variables", "[launcher][env]") {
  RankLayout l = one_node(2);
  l.store_addr.clear();
  const WorkerEnv e = build_worker_env(two_gpu_job(), l, 0, 0, {});
  CHECK(e.set.count("LAUNCH_STORE_ADDR") == 0);
  CHECK(e.set.count("LAUNCH_STORE_TOKEN") == 0);
}

TEST_CASE("env_from_environ splits at the first '='", "[launcher][env]") {
  char a[] = "A=1", b[] = "B=x=y", c[] = "NOEQUALS";
  char* envp[] = {a, b, c, nullptr};
  CHECK(env_from_environ(envp) == EnvMap{{"A", "1"}, {"B", "x=y"}});
}

TEST_CASE("worker env: restart counters follow the generation, under both names", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  job.max_restarts = 3;
  for (int r = 0; r < 2; ++r) {
    const WorkerEnv e = build_worker_env(job, one_node(2), r, 2, {{"PADDLE_RESTART_COUNT", "7"}});
    CHECK(e.set.at("PADDLE_RESTART_COUNT") == "2");
    CHECK(e.set.at("TORCHELASTIC_RESTART_COUNT") == "2");
    CHECK(e.set.at("TORCHELASTIC_MAX_RESTARTS") == "3");
    // Everything else is the same as in the first run.
    EnvMap a = e.set, b = build_worker_env(job, one_node(2), r, 0, {}).set;
    a.erase("PADDLE_RESTART_COUNT"), a.erase("TORCHELASTIC_RESTART_COUNT");
    b.erase("PADDLE_RESTART_COUNT"), b.erase("TORCHELASTIC_RESTART_COUNT");
    CHECK(a == b);
  }
}

TEST_CASE("worker env: the checkpoint signal is exported only when asked for", "[launcher][env]") {
  JobSpec job = two_gpu_job();
  CHECK(build_worker_env(job, one_node(2), 0, 0, {}).set.count("LAUNCH_CHECKPOINT_SIGNAL") == 0);
  job.checkpoint_signal = "SIGUSR2";
  CHECK(build_worker_env(job, one_node(2), 1, 0, {}).set.at("LAUNCH_CHECKPOINT_SIGNAL") == "SIGUSR2");
}

// --- a launch inside another launcher's worker ----------------------------------------------------

namespace {

// What an outer launch gives its worker 3 of 8 (with --checkpoint-signal), on top of the user's
// and Slurm's variables.
EnvMap outer_worker_env() {
  EnvMap e = {{"PATH", "/bin"}, {"OMP_NUM_THREADS", "1"}, {"SLURM_JOB_ID", "77"}, {"SLURM_NNODES", "2"},
              {"PET_NNODES", "2"}, {"PADDLE_NPROC_PER_NODE", "8"}, {"POD_IP", "10.0.0.9"}};
  JobSpec outer = two_gpu_job();
  outer.checkpoint_signal = "SIGUSR1";
  RankLayout l = one_node(8);
  l.first_rank = 2;
  for (const auto& [k, v] : build_worker_env(outer, l, 1, 4, e).set) e[k] = v;
  return e;
}

}  // namespace

TEST_CASE("worker env: the contract is rebuilt whole; an outer launch's variables we do not set go", "[launcher][env][nested]") {
  const EnvMap parent = outer_worker_env();
  REQUIRE(parent.at("LAUNCH_CHECKPOINT_SIGNAL") == "SIGUSR1");
  JobSpec inner;
  inner.log_dir = "/tmp/inner";
  inner.devices = {{DeviceKind::Cpu, -1}, {DeviceKind::Cpu, -1}};
  RankLayout l = one_node(2);
  l.store_addr.clear();  // no store: its variables must not be the outer one's
  const WorkerEnv e = build_worker_env(inner, l, 1, 0, parent);
  EnvMap all;
  for (const auto& kv : merge_env(parent, e)) all[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  for (const char* gone : {"LAUNCH_CHECKPOINT_SIGNAL", "LAUNCH_STORE_ADDR", "LAUNCH_STORE_TOKEN", "FLAGS_selected_gpus"})
    CHECK(all.count(gone) == 0);
  CHECK(all.at("RANK") == "1");
  CHECK(all.at("WORLD_SIZE") == "2");
  CHECK(all.at("PADDLE_RESTART_COUNT") == "0");
  CHECK(all.at("PADDLE_LOG_DIR") == "/tmp/inner");
  CHECK(all.at("PADDLE_JOB_ID") == "default");
  // Not the contract: the user's and Slurm's stay.
  CHECK(all.at("SLURM_JOB_ID") == "77");
  CHECK(all.at("OMP_NUM_THREADS") == "1");
  const proto::WorkerEnv w = proto::read_worker_env(all);
  CHECK(w.rank == 1);
  CHECK(w.world == 2);
  CHECK(w.checkpoint_signal == 0);
  CHECK_FALSE(w.store_addr);
}

TEST_CASE("worker env: kWorkerContract names every variable build_worker_env may set", "[launcher][env][nested]") {
  // A GPU rank with a store and a checkpoint signal: the fullest set there is.
  JobSpec job = two_gpu_job();
  job.checkpoint_signal = "SIGUSR2";
  const WorkerEnv e = build_worker_env(job, one_node(2), 1, 0, {});
  const std::set<std::string> user_defaults = {"OMP_NUM_THREADS", "PYTHONUNBUFFERED", "TORCH_NCCL_ASYNC_ERROR_HANDLING"};
  std::set<std::string> contract(std::begin(proto::env::kWorkerContract), std::end(proto::env::kWorkerContract));
  for (const auto& [k, v] : e.set) {
    INFO(k);
    CHECK((contract.count(k) == 1 || user_defaults.count(k) == 1));
  }
  for (const char* mark : proto::env::kWorkerMarks) CHECK(e.set.count(mark) == 1);
}

TEST_CASE("launcher env: inside another launcher's worker, the outer job's variables are not ours", "[launcher][env][nested]") {
  const LauncherEnv in = launcher_env(outer_worker_env());
  REQUIRE(in.outer);
  CHECK(*in.outer == "PADDLE_TRAINER_ID");
  // Left: the user's (and the outer launch's defaults for what the user did not set).
  CHECK(in.env == EnvMap{{"PATH", "/bin"}, {"OMP_NUM_THREADS", "1"}, {"PYTHONUNBUFFERED", "1"},
                         {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  // Each mark alone is enough (a shell that exported a torchrun or a paddle worker's variables).
  for (const char* mark : proto::env::kWorkerMarks) {
    const LauncherEnv one = launcher_env({{mark, "1"}, {"PADDLE_MASTER", "10.0.0.1:6000"}, {"HOME", "/root"}});
    CHECK(one.outer == std::optional<std::string>(mark));
    CHECK(one.env == EnvMap{{"HOME", "/root"}});
  }
  // Elsewhere, paddle's overrides, torchrun's PET_* and Slurm's variables are the launcher's own.
  const EnvMap plain = {{"PADDLE_MASTER", "10.0.0.1:6000"}, {"PET_NNODES", "2"}, {"SLURM_JOB_ID", "7"}, {"RANK", "1"}};
  const LauncherEnv out = launcher_env(plain);
  CHECK_FALSE(out.outer);
  CHECK(out.env == plain);
}

// --- the round trip: what the launcher writes, the worker reads -----------------------------------

TEST_CASE("round trip: a local GPU job", "[launcher][env][roundtrip]") {
  const JobSpec job = two_gpu_job();
  for (int i = 0; i < 2; ++i) {
    const auto w = worker_reads(build_worker_env(job, one_node(2), i, 1, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5"}}),
                                {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5"}});
    CHECK(w.contract == proto::Contract::Paddle);
    CHECK(w.rank == i);
    CHECK(w.world == 2);
    CHECK(w.local_rank == i);
    CHECK(w.local_world == 2);
    CHECK(*w.gpu_ordinal == (i == 0 ? 2 : 5));
    CHECK(w.endpoints == one_node(2).endpoints);
    CHECK(w.current_endpoint == one_node(2).endpoints[size_t(i)]);
    CHECK(*w.master == "10.0.0.5:6169");
    CHECK(*w.store_addr == "10.0.0.5:7000");
    CHECK(*w.store_token == "abcd");
    CHECK(w.job_id == "job7");
    CHECK(w.restart_count == 1);
    CHECK(*w.error_file == "/tmp/logs/workererror." + std::to_string(i) + ".json");
    CHECK(w.log_dir == "/tmp/logs");
  }
}

TEST_CASE("round trip: the checkpoint signal, parsed by one parser on both sides", "[launcher][env][roundtrip]") {
  for (const char* given : {"USR1", "usr2", "SIGUSR1", "12"}) {
    const std::optional<int> sig = parse_checkpoint_signal(given);  // launch --checkpoint-signal
    REQUIRE(sig);
    JobSpec job = two_gpu_job();
    job.checkpoint_signal = signal_name(*sig);
    CHECK(worker_reads(build_worker_env(job, one_node(2), 0, 0, {})).checkpoint_signal == *sig);
  }
}

TEST_CASE("round trip: CPU ranks", "[launcher][env][roundtrip]") {
  JobSpec job = two_gpu_job();
  job.devices = {{DeviceKind::Cpu, -1}, {DeviceKind::Cpu, -1}, {DeviceKind::Cpu, -1}};
  const auto w = worker_reads(build_worker_env(job, one_node(3), 2, 0, {{"FLAGS_selected_gpus", "1"}}),
                              {{"FLAGS_selected_gpus", "1"}});
  CHECK(w.rank == 2);
  CHECK(w.world == 3);
  CHECK_FALSE(w.gpu_ordinal);  // removed: a CPU rank must not pick up the launcher's GPU
}

TEST_CASE("round trip: CUDA_VISIBLE_DEVICES=1,2 and --gpus 0,1 give distinct ordinals 0 and 1", "[launcher][env][roundtrip]") {
  const EnvMap parent = {{"CUDA_VISIBLE_DEVICES", "1,2"}};
  JobSpec job = two_gpu_job();
  job.devices = plan_devices(DeviceRequest{parse_gpus("0,1"), std::nullopt}, detect_visible_gpus(parent));
  REQUIRE(job.devices.size() == 2);
  const auto w0 = worker_reads(build_worker_env(job, one_node(2), 0, 0, parent), parent);
  const auto w1 = worker_reads(build_worker_env(job, one_node(2), 1, 0, parent), parent);
  CHECK(*w0.gpu_ordinal == 0);
  CHECK(*w1.gpu_ordinal == 1);
}

TEST_CASE("round trip: one Slurm task per worker takes its ranks from Slurm", "[launcher][env][roundtrip]") {
  JobSpec job = two_gpu_job();
  job.devices = {{DeviceKind::Gpu, 0}};
  RankLayout l = one_node(4);
  l.first_rank = 2;        // SLURM_PROCID
  l.first_local_rank = 2;  // SLURM_LOCALID
  const WorkerEnv e = build_worker_env(job, l, 0, 0, {});
  CHECK(e.set.at("OMP_NUM_THREADS") == "1");  // 4 processes on the node, one per launcher
  const auto w = worker_reads(e);
  CHECK(w.rank == 2);
  CHECK(w.world == 4);
  CHECK(w.local_rank == 2);
  CHECK(w.local_world == 4);
  CHECK(w.current_endpoint == "10.0.0.5:6172");
  CHECK(*w.gpu_ordinal == 0);
}

TEST_CASE("round trip: a multi-node job takes ranks, endpoints and master from the layout", "[launcher][env][roundtrip]") {
  RankLayout l;
  l.world_size = 4;
  l.nnodes = 2;
  l.node_rank = 1;
  l.local_size = 2;
  l.first_rank = 2;
  l.endpoints = {"10.0.0.4:100", "10.0.0.4:101", "10.0.0.5:6170", "10.0.0.5:6171"};
  l.master = "10.0.0.4:99";
  l.store_addr = "10.0.0.4:29400";
  l.store_token = "t";
  const WorkerEnv e = build_worker_env(two_gpu_job(), l, 1, 0, {});
  CHECK(e.set.at("GROUP_RANK") == "1");
  CHECK(e.set.at("GROUP_WORLD_SIZE") == "2");
  CHECK(e.set.at("PADDLE_NNODES") == "2");
  CHECK(e.set.at("MASTER_ADDR") == "10.0.0.4");
  CHECK(e.set.at("MASTER_PORT") == "99");
  const auto w = worker_reads(e);
  CHECK(w.rank == 3);
  CHECK(w.local_rank == 1);
  CHECK(w.world == 4);
  CHECK(w.local_world == 2);
  CHECK(w.endpoints == l.endpoints);
  CHECK(w.current_endpoint == "10.0.0.5:6171");
  CHECK(*w.master == "10.0.0.4:99");
  CHECK(*w.store_addr == "10.0.0.4:29400");
}
