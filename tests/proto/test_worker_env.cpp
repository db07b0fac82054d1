#include <catch2/catch.hpp>

#include <csignal>

#include "proto/worker_env.h"

using proto::EnvError;
using proto::EnvMap;
using proto::read_worker_env;

TEST_CASE("no launcher variables: a single process", "[proto][env]") {
  const auto e = read_worker_env({});
  CHECK(e.rank == 0);
  CHECK(e.world == 1);
  CHECK(e.local_rank == 0);
  CHECK_FALSE(e.distributed());
  CHECK_FALSE(e.store_addr.has_value());
  CHECK_FALSE(e.gpu_ordinal.has_value());
  CHECK(e.contract == proto::Contract::None);
  CHECK(e.job_id == "default");
  CHECK(e.endpoints.empty());
  CHECK(e.local_world == 1);
  CHECK_FALSE(e.log_dir.has_value());
}

TEST_CASE("a full launcher environment is read", "[proto][env]") {
  const EnvMap env = {{"PADDLE_TRAINER_ID", "2"},
                      {"PADDLE_TRAINERS_NUM", "3"},
                      {"PADDLE_LOCAL_RANK", "2"},
                      {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170"},
                      {"PADDLE_CURRENT_ENDPOINT", "10.0.0.2:6170"},
                      {"LAUNCH_STORE_ADDR", "10.0.0.1:5000"},
                      {"FLAGS_selected_gpus", "1"},
                      {"PADDLE_JOB_ID", "job7"},
                      {"PADDLE_RESTART_COUNT", "4"},
                      {"PADDLE_LOCAL_SIZE", "2"},
                      {"PADDLE_LOG_DIR", "/logs/job7"},
                      {"UNRELATED", "x"}};
  const auto e = read_worker_env(env);
  CHECK(e.rank == 2);
  CHECK(e.world == 3);
  CHECK(e.local_rank == 2);
  CHECK(e.endpoints.size() == 3);
  CHECK(e.current_endpoint == "10.0.0.2:6170");
  CHECK(e.current_host() == "10.0.0.2");
  CHECK(*e.store_addr == "10.0.0.1:5000");
  CHECK(*e.gpu_ordinal == 1);
  CHECK(e.job_id == "job7");
  CHECK(e.contract == proto::Contract::Paddle);
  CHECK(e.restart_count == 4);
  CHECK(e.local_world == 2);  // paddle's launcher sets PADDLE_LOCAL_SIZE, not LOCAL_WORLD_SIZE
  CHECK(e.log_dir == "/logs/job7");
  CHECK(e.distributed());
}

TEST_CASE("world defaults to the endpoint count; current endpoint to this rank's", "[proto][env]") {
  const auto e = read_worker_env({{"PADDLE_TRAINER_ID", "1"}, {"PADDLE_TRAINER_ENDPOINTS", "a:1,b:2"}});
  CHECK(e.world == 2);
  CHECK(e.current_endpoint == "b:2");
  CHECK(e.current_host() == "b");
  CHECK(read_worker_env({{"LOCAL_RANK", "5"}}).local_rank == 5);
  CHECK(read_worker_env({{"TORCHELASTIC_RESTART_COUNT", "2"}}).restart_count == 2);
}

TEST_CASE("inconsistent launcher variables are errors naming the variable", "[proto][env]") {
  auto fails_with = [](const EnvMap& env, const std::string& needle) {
    try {
      read_worker_env(env);
    } catch (const EnvError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      return;
    }
    FAIL("no error for " << needle);
  };
  fails_with({{"PADDLE_TRAINER_ID", "2"}, {"PADDLE_TRAINERS_NUM", "2"}}, "PADDLE_TRAINER_ID=2");
  fails_with({{"PADDLE_TRAINER_ID", "1"}}, "PADDLE_TRAINER_ID=1");  // world defaults to 1
  fails_with({{"PADDLE_TRAINER_ID", "x"}, {"PADDLE_TRAINERS_NUM", "2"}}, "PADDLE_TRAINER_ID");
  fails_with({{"PADDLE_TRAINER_ID", "-1"}, {"PADDLE_TRAINERS_NUM", "2"}}, "PADDLE_TRAINER_ID");
  fails_with({{"PADDLE_TRAINER_ID", "0"}, {"PADDLE_TRAINERS_NUM", "two"}}, "PADDLE_TRAINERS_NUM");
  fails_with({{"PADDLE_TRAINER_ID", "0"}, {"PADDLE_TRAINERS_NUM", "0"}}, "PADDLE_TRAINERS_NUM");
  fails_with({{"PADDLE_TRAINERS_NUM", "4"}}, "PADDLE_TRAINER_ID is not set");
  fails_with({{"PADDLE_TRAINER_ID", "0"}, {"PADDLE_TRAINERS_NUM", "3"}, {"PADDLE_TRAINER_ENDPOINTS", "a:1,b:2"}},
             "PADDLE_TRAINER_ENDPOINTS");
  fails_with({{"PADDLE_TRAINER_ID", "0"}, {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ENDPOINTS", "a:1,b"}},
             "PADDLE_TRAINER_ENDPOINTS");
  fails_with({{"PADDLE_TRAINER_ID", "0"},
              {"PADDLE_TRAINERS_NUM", "2"},
              {"PADDLE_TRAINER_ENDPOINTS", "a:1,b:2"},
              {"PADDLE_CURRENT_ENDPOINT", "b:2"}},
             "PADDLE_CURRENT_ENDPOINT");
  fails_with({{"PADDLE_LOCAL_RANK", "1.5"}}, "PADDLE_LOCAL_RANK");
}

TEST_CASE("FLAGS_selected_gpus is an index among the visible GPUs, as paddle means it", "[proto][env]") {
  auto ordinal = [](EnvMap env) { return *read_worker_env(env).gpu_ordinal; };
  CHECK(ordinal({{"FLAGS_selected_gpus", "3"}}) == 3);
  // Issue 10: CUDA_VISIBLE_DEVICES=1,2 and --gpus 0,1 gave both ranks ordinal 0.
  CHECK(ordinal({{"FLAGS_selected_gpus", "0"}, {"CUDA_VISIBLE_DEVICES", "1,2"}}) == 0);
  CHECK(ordinal({{"FLAGS_selected_gpus", "1"}, {"CUDA_VISIBLE_DEVICES", "1,2"}}) == 1);
  CHECK(ordinal({{"FLAGS_selected_gpus", "1"}, {"CUDA_VISIBLE_DEVICES", "GPU-8f2e,GPU-91aa"}}) == 1);
  CHECK_THROWS_WITH(read_worker_env({{"FLAGS_selected_gpus", "2"}, {"CUDA_VISIBLE_DEVICES", "1,2"}}),
                    Catch::Contains("exposes 2"));
  CHECK_THROWS_AS(read_worker_env({{"FLAGS_selected_gpus", "0"}, {"CUDA_VISIBLE_DEVICES", "-1"}}), EnvError);
  CHECK_THROWS_AS(read_worker_env({{"FLAGS_selected_gpus", "0,1"}}), EnvError);
  CHECK_THROWS_AS(read_worker_env({{"FLAGS_selected_gpus", "gpu0"}}), EnvError);
}

TEST_CASE("torchrun's contract alone: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT", "[proto][env]") {
  const auto e = read_worker_env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                  {"TORCHELASTIC_RUN_ID", "abc"}});
  CHECK(e.contract == proto::Contract::Torchrun);
  CHECK(e.rank == 3);
  CHECK(e.world == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);
  CHECK(*e.master == "10.0.0.1:29500");
  CHECK(e.job_id == "abc");
  CHECK_FALSE(e.agent_store);
  CHECK(read_worker_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                         {"TORCHELASTIC_USE_AGENT_STORE", "True"}})
            .agent_store);
  CHECK_THROWS_WITH(read_worker_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
                    Catch::Contains("MASTER_PORT"));
  CHECK_THROWS_WITH(read_worker_env({{"WORLD_SIZE", "2"}}), Catch::Contains("RANK is not set"));
  CHECK_THROWS_WITH(read_worker_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK=2 is not below WORLD_SIZE=2"));
}

TEST_CASE("Paddle's and torchrun's names must agree where both are set", "[proto][env]") {
  CHECK(read_worker_env({{"PADDLE_TRAINER_ID", "1"}, {"RANK", "1"}, {"PADDLE_TRAINERS_NUM", "2"}, {"WORLD_SIZE", "2"}})
            .rank == 1);
  CHECK_THROWS_WITH(read_worker_env({{"PADDLE_TRAINER_ID", "1"}, {"RANK", "0"}, {"PADDLE_TRAINERS_NUM", "2"}}),
                    Catch::Contains("PADDLE_TRAINER_ID=1 but RANK=0"));
  CHECK_THROWS_WITH(read_worker_env({{"PADDLE_RESTART_COUNT", "1"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}),
                    Catch::Contains("TORCHELASTIC_RESTART_COUNT=2"));
}

TEST_CASE("the checkpoint signal: USR1 or USR2 in any spelling, never a stop signal", "[proto][env]") {
  using proto::parse_checkpoint_signal;
  CHECK(parse_checkpoint_signal("USR2") == SIGUSR2);
  CHECK(parse_checkpoint_signal("SIGUSR1") == SIGUSR1);
  CHECK(parse_checkpoint_signal("sigusr2") == SIGUSR2);
  CHECK(parse_checkpoint_signal("usr1") == SIGUSR1);
  CHECK(parse_checkpoint_signal(std::to_string(SIGUSR1)) == SIGUSR1);
  for (const char* no : {"TERM", "SIGINT", "hup", "QUIT", "15", "2", "KILL", "9", "0", "USR3", "", "SIG"})
    CHECK_FALSE(parse_checkpoint_signal(no));
  CHECK(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "USR2"}}).checkpoint_signal == SIGUSR2);
  CHECK(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "SIGUSR1"}}).checkpoint_signal == SIGUSR1);
  CHECK(read_worker_env({}).checkpoint_signal == 0);
  // TERM used to be accepted, and then overwritten by the worker's SIGTERM stop handler.
  CHECK_THROWS_WITH(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "TERM"}}),
                    Catch::Contains("LAUNCH_CHECKPOINT_SIGNAL='TERM' is SIGTERM, a stop signal") &&
                        Catch::Contains("must be USR1 or USR2"));
  CHECK_THROWS_WITH(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "2"}}), Catch::Contains("is SIGINT, a stop signal"));
  CHECK_THROWS_WITH(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "nope"}}),
                    Catch::Contains("LAUNCH_CHECKPOINT_SIGNAL='nope': the checkpoint signal must be USR1 or USR2"));
}
