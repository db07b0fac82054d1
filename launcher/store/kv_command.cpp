// `launch kv`: one store call per invocation, for shell-script workers and for debugging.
#include "launcher/store/kv_command.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "proto/client.h"
#include "proto/worker_env.h"

namespace launch {

namespace {

using std::chrono::milliseconds;

milliseconds to_ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000.0)); }

}  // namespace

int run_kv_command(int argc, char** argv) {
  CLI::App app{"Talk to the job's rendezvous store (LAUNCH_STORE_ADDR, LAUNCH_STORE_TOKEN, "
               "PADDLE_JOB_ID, PADDLE_TRAINERS_NUM come from the environment launch sets).",
               "launch kv"};
  app.require_subcommand(1);
  double timeout_s = 300;
  app.add_option("--timeout", timeout_s, "Seconds to wait for the store (default 300)")
      ->check(CLI::PositiveNumber);

  std::string key, value, expected, desired, name;
  std::vector<std::string> keys;
  int64_t delta = 0;
  int world = 0;

  auto* set = app.add_subcommand("set", "Store VALUE under KEY");
  set->add_option("key", key, "Key")->required();
  set->add_option("value", value, "Value")->required();
  auto* get = app.add_subcommand("get", "Print KEY's value, waiting until it exists");
  get->add_option("key", key, "Key")->required();
  auto* add = app.add_subcommand("add", "Add N to the integer at KEY; print the new value");
  add->add_option("key", key, "Key")->required();
  add->add_option("n", delta, "Amount (may be negative)")->required();
  auto* check = app.add_subcommand("check", "Print 1/0 per key; exit 0 only if all exist");
  check->add_option("keys", keys, "Keys")->required();
  auto* wait = app.add_subcommand("wait", "Wait until every KEY exists");
  wait->add_option("keys", keys, "Keys")->required();
  auto* del = app.add_subcommand("delete", "Delete KEY; exit 1 if it did not exist");
  del->add_option("key", key, "Key")->required();
  auto* cas = app.add_subcommand("compare-set", "Set KEY to DESIRED if it holds EXPECTED; print the value now stored");
  cas->add_option("key", key, "Key")->required();
  cas->add_option("expected", expected, "Expected value ('' matches an absent key)")->required();
  cas->add_option("desired", desired, "New value")->required();
  auto* barrier = app.add_subcommand("barrier", "Wait until all ranks of the job reach barrier NAME");
  barrier->add_option("name", name, "Barrier name")->required();
  barrier->add_option("--world", world, "Number of ranks (default PADDLE_TRAINERS_NUM)")
      ->check(CLI::PositiveNumber);
  auto* ping = app.add_subcommand("ping", "Check that the store answers");
  auto* status = app.add_subcommand("job-status", "Print the job's failure record; exit 1 if it failed");
  for (auto* sub : {set, get, add, check, wait, del, cas, barrier, ping, status})
    sub->add_option("--timeout", timeout_s, "Seconds to wait (default 300)")->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "launch kv: " << e.what() << " (see `launch kv --help`)\n";
    return 2;
  }

  proto::WorkerEnv env;
  try {
    env = proto::read_worker_env(proto::process_env());
  } catch (const proto::EnvError& e) {
    std::cerr << "launch kv: " << e.what() << "\n";
    return 2;
  }
  if (barrier->parsed() && world == 0) {
    if (env.contract == proto::Contract::None) {
      std::cerr << "launch kv: barrier needs the number of ranks: " << proto::env::kPaddleTrainersNum
                << " is not set; pass --world N\n";
      return 2;
    }
    world = env.world;
  }

  const milliseconds timeout = to_ms(timeout_s);
  try {
    proto::Client client = proto::Client::from_env(env);
    if (set->parsed()) {
      client.set(key, value, timeout);
    } else if (get->parsed()) {
      std::cout << client.get(key, timeout) << "\n";
    } else if (add->parsed()) {
      std::cout << client.add(key, delta, timeout) << "\n";
    } else if (check->parsed()) {
      auto present = client.check(keys, timeout);
      bool all = true;
      for (bool p : present) {
        std::cout << (p ? 1 : 0) << "\n";
        all = all && p;
      }
      return all ? 0 : 1;
    } else if (wait->parsed()) {
      client.wait(keys, timeout);
    } else if (del->parsed()) {
      return client.del(key, timeout) ? 0 : 1;
    } else if (cas->parsed()) {
      std::cout << client.compare_set(key, expected, desired, timeout) << "\n";
    } else if (barrier->parsed()) {
      client.barrier(name, world, timeout);
    } else if (ping->parsed()) {
      client.ping(timeout);
    } else if (status->parsed()) {
      auto failure = client.job_failure(timeout);
      std::cout << (failure ? "failed: " + *failure : std::string("running")) << "\n";
      return failure ? 1 : 0;
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const proto::StoreError& e) {
    std::cerr << "launch kv: " << e.what() << "\n";
    return e.kind() == proto::StoreError::Kind::Invalid ? 2 : 1;
  }
}

}  // namespace launch
