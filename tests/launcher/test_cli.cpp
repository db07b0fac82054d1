#include <catch2/catch.hpp>

#include <csignal>

#include "launcher/cli.h"
#include "launcher/errors.h"

using namespace launch;

namespace {
CliResult parse(std::vector<const char*> args) {
  args.insert(args.begin(), "launch");
  return parse_cli(static_cast<int>(args.size()), args.data());
}
using V = std::vector<std::string>;
}  // namespace

TEST_CASE("cli: options before PROGRAM, everything after it belongs to PROGRAM", "[launcher][cli]") {
  auto r = parse({"--gpus", "0,1", "--job_id", "j1", "--log_dir", "/tmp/x", "--stream", "all",
                  "--grace", "2.5", "--summary", "s.json", "--log_overwrite", "--start_port", "7000",
                  "train.py", "--gpus", "3", "-v"});
  REQUIRE(r.options);
  const Options& o = *r.options;
  CHECK(o.gpus == "0,1");
  CHECK(o.job_id == "j1");
  CHECK(o.log_dir == "/tmp/x");
  CHECK(o.stream == StreamMode::All);
  CHECK(o.grace_s == Approx(2.5));
  CHECK(o.summary == "s.json");
  CHECK(o.log_overwrite);
  CHECK(o.start_port == 7000);
  CHECK(o.command == V{"train.py", "--gpus", "3", "-v"});
}

TEST_CASE("cli: defaults", "[launcher][cli]") {
  auto r = parse({"env"});
  REQUIRE(r.options);
  CHECK(r.options->job_id == "default");
  CHECK(r.options->log_dir == "log");
  CHECK(r.options->host == "127.0.0.1");
  CHECK(r.options->stream == StreamMode::Rank0);
  CHECK(r.options->grace_s == Approx(10.0));
  CHECK_FALSE(r.options->gpus);
  CHECK_FALSE(r.options->nproc_per_node);
  CHECK_FALSE(r.options->dry_run);
}

TEST_CASE("cli: paddle options are accepted", "[launcher][cli]") {
  auto r = parse({"--devices", "cpu", "--nproc_per_node", "4", "--nnodes", "1", "--max_restart", "3",
                  "--log_level", "DEBUG", "--host", "127.0.0.1", "--dry-run", "--", "env"});
  REQUIRE(r.options);
  CHECK(r.options->devices == "cpu");
  CHECK(r.options->nproc_per_node == 4);
  CHECK(r.options->dry_run);
  CHECK(r.options->command == V{"env"});
}

TEST_CASE("cli: --help", "[launcher][cli]") {
  auto r = parse({"--help"});
  CHECK_FALSE(r.options);
  CHECK_THAT(r.text, Catch::Contains("--nproc_per_node") && Catch::Contains("--stream") && Catch::Contains("PROGRAM [ARGS...]") && Catch::Contains("launch kv") && Catch::Contains("Examples:"));
}

TEST_CASE("cli: bad input is a one-line usage error", "[launcher][cli]") {
  auto err = [](std::vector<const char*> a) {
    try {
      parse(a);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  CHECK_THAT(err({"--nproc_per_node", "0", "env"}), Catch::Contains("--nproc_per_node"));
  CHECK_THAT(err({"--nproc_per_node", "x", "env"}), Catch::Contains("--nproc_per_node"));
  CHECK_THAT(err({"--stream", "some", "env"}), Catch::Contains("--stream"));
  CHECK_THAT(err({"--grace", "-1", "env"}), Catch::Contains("--grace"));
  // Seconds as the user wrote them, not std::to_string's "-2.500000".
  CHECK_THAT(err({"--grace", "-2.5", "env"}), Catch::Contains("--grace -2.5 must be 0 to 86400 seconds"));
  CHECK_THAT(err({"--elastic_timeout", "0.5", "env"}), Catch::Contains("--elastic_timeout 0.5 must be"));
  CHECK_THAT(err({"--nnodes", "2", "env"}), Catch::Contains("needs --master IP:PORT"));
  CHECK_THAT(err({"--nnodes", "2", "--master", "10.0.0.1:29400", "--rank", "2", "env"}), Catch::Contains("--rank 2 is not below"));
  CHECK_THAT(err({"--bogus", "env"}), Catch::Contains("unknown option --bogus"));
  CHECK_THAT(err({"--job_id", "a b", "env"}), Catch::Contains("--job_id"));
  CHECK_THAT(err({}), Catch::Contains("no PROGRAM"));
  CHECK_THAT(err({"--gpus"}), Catch::Contains("--gpus"));
  for (auto e : {err({"--nproc_per_node", "x", "env"}), err({"--stream", "x", "env"})})
    CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("cli: --checkpoint-signal takes USR1/USR2 in any spelling, nothing else", "[launcher][cli]") {
  CHECK(parse({"--checkpoint-signal", "USR2", "p"}).options->checkpoint_signal == SIGUSR2);
  CHECK(parse({"--checkpoint-signal", "sigusr1", "p"}).options->checkpoint_signal == SIGUSR1);
  CHECK(parse({"--checkpoint_signal", "12", "p"}).options->checkpoint_signal == SIGUSR2);
  CHECK_FALSE(parse({"p"}).options->checkpoint_signal);
  CHECK_THROWS_WITH(parse({"--checkpoint-signal", "TERM", "p"}), Catch::Contains("use USR1 or USR2"));
  CHECK_THROWS_WITH(parse({"--checkpoint-signal", "USR3", "p"}), Catch::Contains("'USR3'"));
}

TEST_CASE("cli: --max_restart, and which options were given", "[launcher][cli]") {
  auto o = *parse({"--max_restart", "3", "--grace", "5", "p"}).options;
  CHECK(o.max_restart == 3);
  CHECK(o.grace_given);
  CHECK_FALSE(o.job_id_given);
  CHECK_FALSE(o.nnodes_given);
  CHECK_THROWS_AS(parse({"--max_restart", "-1", "p"}), UsageError);
}

TEST_CASE("cli: --restart-backoff, 1 s doubling to 60 s unless given", "[launcher][cli][restart]") {
  auto o = *parse({"p"}).options;
  CHECK(o.restart_backoff.initial_s == 1);
  CHECK(o.restart_backoff.max_s == 60);
  o = *parse({"--restart-backoff", "0.25:2", "p"}).options;
  CHECK(o.restart_backoff.initial_s == 0.25);
  CHECK(o.restart_backoff.max_s == 2);
  CHECK(parse({"--restart_backoff", "0", "p"}).options->restart_backoff.initial_s == 0);
  CHECK_THROWS_WITH(parse({"--restart-backoff", "fast", "p"}), Catch::Contains("--restart-backoff 'fast'"));
}
