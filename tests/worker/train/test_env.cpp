#include <catch2/catch.hpp>

#include <csignal>

#include "worker/train/env.h"

using worker::EnvError;
using worker::EnvMap;
using worker::read_worker_env;

TEST_CASE("no launcher variables: a single process", "[train][env]") {
  const auto e = read_worker_env({});
  CHECK(e.rank == 0);
  CHECK(e.world == 1);
  CHECK(e.local_rank == 0);
  CHECK_FALSE(e.distributed());
  CHECK_FALSE(e.store_addr.has_value());
  CHECK_FALSE(e.selected_gpus.has_value());
  CHECK(e.job_id == "default");
  CHECK(e.endpoints.empty());
}

TEST_CASE("a full launcher environment is read", "[train][env]") {
  const EnvMap env = {{"PADDLE_TRAINER_ID", "2"},
                      {"PADDLE_TRAINERS_NUM", "3"},
                      {"PADDLE_LOCAL_RANK", "2"},
                      {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170"},
                      {"PADDLE_CURRENT_ENDPOINT", "10.0.0.2:6170"},
                      {"LAUNCH_STORE_ADDR", "10.0.0.1:5000"},
                      {"FLAGS_selected_gpus", "1"},
                      {"PADDLE_JOB_ID", "job7"},
                      {"PADDLE_RESTART_COUNT", "4"},
                      {"UNRELATED", "x"}};
  const auto e = read_worker_env(env);
  CHECK(e.rank == 2);
  CHECK(e.world == 3);
  CHECK(e.local_rank == 2);
  CHECK(e.endpoints.size() == 3);
  CHECK(e.current_endpoint == "10.0.0.2:6170");
  CHECK(e.current_host() == "10.0.0.2");
  CHECK(*e.store_addr == "10.0.0.1:5000");
  CHECK(*e.selected_gpus == "1");
  CHECK(e.job_id == "job7");
  CHECK(e.restart_count == 4);
  CHECK(e.distributed());
}

TEST_CASE("world defaults to the endpoint count; current endpoint to this rank's", "[train][env]") {
  const auto e = read_worker_env({{"PADDLE_TRAINER_ID", "1"}, {"PADDLE_TRAINER_ENDPOINTS", "a:1,b:2"}});
  CHECK(e.world == 2);
  CHECK(e.current_endpoint == "b:2");
  CHECK(e.current_host() == "b");
  CHECK(read_worker_env({{"LOCAL_RANK", "5"}}).local_rank == 5);
  CHECK(read_worker_env({{"TORCHELASTIC_RESTART_COUNT", "2"}}).restart_count == 2);
}

TEST_CASE("inconsistent launcher variables are errors naming the variable", "[train][env]") {
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

TEST_CASE("GPU ordinal from FLAGS_selected_gpus and CUDA_VISIBLE_DEVICES", "[train][env]") {
  using worker::gpu_ordinal;
  CHECK(gpu_ordinal("3", std::nullopt) == 3);
  CHECK(gpu_ordinal("3", std::string("2,3")) == 1);    // physical id -> position
  CHECK(gpu_ordinal("5", std::string("5")) == 0);
  CHECK(gpu_ordinal("1", std::string("4,6")) == 1);    // not listed: paddle's relative numbering
  CHECK_THROWS_AS(gpu_ordinal("7", std::string("2,3")), EnvError);
  CHECK_THROWS_AS(gpu_ordinal("0,1", std::nullopt), EnvError);
  CHECK_THROWS_AS(gpu_ordinal("gpu0", std::nullopt), EnvError);
}

TEST_CASE("the checkpoint signal is read by name or number", "[train][env]") {
  using worker::parse_signal;
  CHECK(parse_signal("V", "USR2") == SIGUSR2);
  CHECK(parse_signal("V", "SIGUSR1") == SIGUSR1);
  CHECK(parse_signal("V", "TERM") == SIGTERM);
  CHECK(parse_signal("V", "10") == 10);
  CHECK(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "USR2"}}).checkpoint_signal == SIGUSR2);
  CHECK(read_worker_env({}).checkpoint_signal == 0);
  CHECK_THROWS_AS(parse_signal("V", "KILL"), EnvError);
  CHECK_THROWS_AS(parse_signal("V", "9"), EnvError);
  CHECK_THROWS_AS(parse_signal("V", "0"), EnvError);
  CHECK_THROWS_AS(parse_signal("V", "USR3"), EnvError);
  CHECK_THROWS_WITH(read_worker_env({{"LAUNCH_CHECKPOINT_SIGNAL", "nope"}}),
                    Catch::Contains("LAUNCH_CHECKPOINT_SIGNAL"));
}
