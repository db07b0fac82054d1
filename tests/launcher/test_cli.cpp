#include <catch2/catch.hpp>

#include <algorithm>
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
  CHECK(o.devices == parse_gpus("0,1"));
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
  CHECK_FALSE(r.options->devices);
  CHECK_FALSE(r.options->nproc_per_node);
  CHECK_FALSE(r.options->dry_run);
}

TEST_CASE("cli: paddle options are accepted", "[launcher][cli]") {
  auto r = parse({"--devices", "cpu", "--nproc_per_node", "4", "--nnodes", "1", "--max_restart", "3",
                  "--log_level", "DEBUG", "--host", "127.0.0.1", "--dry-run", "--", "env"});
  REQUIRE(r.options);
  CHECK(r.options->devices == parse_devices("cpu"));
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
  CHECK_THAT(err({"--nnodes", "2", "env"}), Catch::Contains("--nnodes 2 needs --master HOST:PORT or --rdzv-endpoint HOST:PORT"));
  CHECK_THAT(err({"--nnodes", "2", "--master", "10.0.0.1:29400", "--rank", "2", "env"}), Catch::Contains("--rank 2 is not below"));
  CHECK_THAT(err({"--bogus", "env"}), Catch::Contains("unknown option --bogus"));
  CHECK_THAT(err({"--job_id", "a b", "env"}), Catch::Contains("--job_id"));
  CHECK_THAT(err({}), Catch::Contains("no PROGRAM"));
  CHECK_THAT(err({"--gpus"}), Catch::Contains("--gpus"));
  // --gpus and --devices are parsed into one device list at option parsing.
  CHECK_THAT(err({"--gpus", "0", "--devices", "1", "env"}), Catch::Contains("not both"));
  CHECK_THAT(err({"--gpus", "cpu", "env"}), Catch::Contains("--devices cpu"));
  CHECK_THAT(err({"--devices", "0,0", "env"}), Catch::Contains("duplicate device id '0' in --devices"));
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

// --- torchrun's remaining options (issue 21, item 6) --------------------------------------------

namespace {
CliResult parse_env(std::vector<const char*> args, const proto::EnvMap& env) {
  args.insert(args.begin(), "launch");
  return parse_cli(static_cast<int>(args.size()), args.data(), env);
}
std::string usage_error(std::vector<const char*> a) {
  try {
    parse(a);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("cli: torchrun's -r and -t are --redirects and --tee", "[launcher][cli][torchrun]") {
  CHECK(parse({"-r", "3", "p"}).options->stream == StreamMode::None);
  CHECK(parse({"-t", "3", "p"}).options->stream == StreamMode::All);
  CHECK(parse({"-t", "0", "p"}).options->stream == StreamMode::Rank0);
  CHECK_THAT(usage_error({"-r", "1", "p"}), Catch::Contains("does not split stdout from stderr"));
}

TEST_CASE("cli: --rdzv-conf keys launch honours, the inert ones said once, unknown ones warned once", "[launcher][cli][torchrun]") {
  auto r = parse({"--rdzv-conf",
                  "join_timeout=30, last_call_timeout=2,close_timeout=4,is_host=0,read_timeout=7,keep_alive_interval=0.5,"
                  "keep_alive_max_attempt=4,checkpoint_timeout=9,use_libuv=1,foo=bar,baz=1",
                  "p"});
  const Options& o = *r.options;
  CHECK(o.elastic_timeout_s == 30);
  CHECK(o.rdzv.last_call_timeout_s == 2.0);
  CHECK(o.rdzv.close_timeout_s == 4.0);
  CHECK(o.rdzv.is_host == false);
  CHECK(o.rdzv.store_timeout_s == 7.0);
  CHECK(o.rdzv.heartbeat_period_s == 0.5);
  CHECK(o.rdzv.heartbeat_timeout_s == 2.0);  // 4 missed beats of 0.5 s, as torchrun counts them
  CHECK(o.rdzv.checkpoint_timeout_s == 9.0);
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("unknown key(s) foo, baz ignored"));
  REQUIRE(r.infos.size() == 1);
  CHECK_THAT(r.infos[0], Catch::Contains("use_libuv: no effect"));
  // timeout= is join_timeout's other name (torchrun's static and etcd backends); PET_RDZV_CONF
  // fills what the command line did not give.
  CHECK(parse({"--rdzv-conf", "timeout=45", "p"}).options->elastic_timeout_s == 45);
  CHECK(parse_env({"p"}, {{"PET_RDZV_CONF", "join_timeout=12,is_host=1"}}).options->rdzv.is_host == true);
  CHECK(parse_env({"--rdzv-conf", "join_timeout=5", "p"}, {{"PET_RDZV_CONF", "join_timeout=12"}})
            .options->elastic_timeout_s == 5);
  CHECK_THAT(usage_error({"--rdzv-conf", "=3", "p"}), Catch::Contains("must be KEY=VALUE"));
  CHECK_THAT(usage_error({"--rdzv-conf", "join_timeout", "p"}), Catch::Contains("'join_timeout' needs a value"));
  CHECK_THAT(usage_error({"--rdzv-conf", "join_timeout=0", "p"}), Catch::Contains("join_timeout=0: give seconds"));
  CHECK_THAT(usage_error({"--rdzv-conf", "is_host=maybe", "p"}), Catch::Contains("not a boolean"));
  CHECK_THAT(usage_error({"--rdzv-conf", "join_timeout=9", "--elastic_timeout", "8", "p"}), Catch::Contains("disagree"));
}

TEST_CASE("cli: --local-addr is --host, --shutdown-timeout is --grace, --role is ROLE_NAME", "[launcher][cli][torchrun]") {
  auto o = *parse({"--local-addr", "10.0.0.3", "--shutdown-timeout", "3", "--role", "trainer", "p"}).options;
  CHECK(o.host == "10.0.0.3");
  CHECK(o.host_given);
  CHECK(o.grace_s == 3);
  CHECK(o.grace_given);
  CHECK(o.role == "trainer");
  CHECK(parse_env({"p"}, {{"PET_ROLE", "r2"}, {"PET_LOCAL_ADDR", "10.0.0.4"}}).options->host == "10.0.0.4");
  CHECK_THAT(usage_error({"--local-addr", "10.0.0.3", "--host", "10.0.0.4", "p"}), Catch::Contains("disagree"));
  CHECK_THAT(usage_error({"--shutdown-timeout", "3", "--grace", "4", "p"}), Catch::Contains("disagree"));
}

TEST_CASE("cli: --log-line-prefix-template and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[launcher][cli][torchrun]") {
  CHECK(parse({"--tee", "3", "--log-line-prefix-template", "[${role_name}${rank}]:", "p"}).options->line_prefix_template ==
        "[${role_name}${rank}]:");
  CHECK(parse_env({"p"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${local_rank}|"}}).options->line_prefix_template ==
        "${local_rank}|");
  CHECK_THAT(usage_error({"--log-line-prefix-template", "${host}:", "p"}), Catch::Contains("${host} is none of"));
  auto r = parse({"--log-line-prefix-template", "${rank}:", "p"});  // the console shows rank 0 only
  REQUIRE(r.infos.size() == 1);
  CHECK_THAT(r.infos[0], Catch::Contains("applies to --stream all"));
}

TEST_CASE("cli: --signals-to-handle: SIGUSR1/2 become stop signals, unless one is the checkpoint signal", "[launcher][cli][torchrun]") {
  auto o = *parse({"--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", "p"}).options;
  CHECK(o.extra_stop_signals == std::vector<int>{SIGUSR1});
  CHECK(o.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
  auto r = parse({"--checkpoint-signal", "USR2", "--signals-to-handle", "SIGTERM,usr2", "p"});
  CHECK(r.options->extra_stop_signals.empty());
  REQUIRE(r.infos.size() == 2);
  CHECK_THAT(r.infos[0], Catch::Contains("whether listed or not"));
  CHECK_THAT(r.infos[1], Catch::Contains("stays the checkpoint signal"));
  CHECK(parse_env({"p"}, {{"PET_SIGNALS_TO_HANDLE", "SIGUSR2,SIGTERM,SIGINT,SIGHUP,SIGQUIT"}}).options->extra_stop_signals ==
        std::vector<int>{SIGUSR2});
  CHECK_THAT(usage_error({"--signals-to-handle", "SIGKILL", "p"}), Catch::Contains("'SIGKILL' is none of"));
  CHECK(parse({"p"}).options->signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
}

TEST_CASE("cli: torchrun options without an effect here: accepted, one info line each, bad values refused", "[launcher][cli][torchrun]") {
  auto r = parse({"--monitor-interval", "5", "--start-method", "fork", "--numa-binding", "node", "--logs-specs", "x",
                  "--event-log-handler", "y", "--duplicate-stdout-filters", "a,b", "--duplicate-stderr-filters", "c",
                  "--virtual-local-rank", "p"});
  REQUIRE(r.options);
  CHECK(r.options->virtual_local_rank);
  CHECK(r.infos.size() == 7);
  for (const char* what : {"--monitor-interval 5: no effect", "--start-method fork: no effect", "--numa-binding node: no effect",
                           "--logs-specs x: no effect", "--event-log-handler y: no effect",
                           "--duplicate-stdout-filters a,b: no effect", "--duplicate-stderr-filters c: no effect"}) {
    INFO(what);
    CHECK(std::count_if(r.infos.begin(), r.infos.end(),
                        [&](const std::string& i) { return i.find(what) != std::string::npos; }) == 1);
  }
  CHECK(parse({"p"}).infos.empty());
  CHECK(parse_env({"p"}, {{"PET_VIRTUAL_LOCAL_RANK", "1"}, {"PET_START_METHOD", "spawn"}}).options->virtual_local_rank);
  CHECK_THAT(usage_error({"--start-method", "thread", "p"}), Catch::Contains("must be one of spawn, fork, forkserver"));
  CHECK_THAT(usage_error({"--numa-binding", "all", "p"}), Catch::Contains("must be one of node"));
  CHECK_THAT(usage_error({"--monitor-interval", "-1", "p"}), Catch::Contains("positive number"));
}

TEST_CASE("cli: --nnodes MIN:MAX is elastic membership; MIN > MAX and 0 are refused", "[launcher][cli][elastic]") {
  auto o = *parse({"--nnodes", "2:4", "--master", "10.0.0.1:29400", "p"}).options;
  CHECK(o.nnodes == 4);
  CHECK(o.nnodes_min == 2);
  o = *parse({"--nnodes", "3:3", "--master", "10.0.0.1:29400", "p"}).options;  // torchrun's N:N: fixed
  CHECK(o.nnodes == 3);
  CHECK(o.nnodes_min == 0);
  CHECK(parse_env({"--master", "10.0.0.1:1", "p"}, {{"PET_NNODES", "1:2"}}).options->nnodes_min == 1);
  CHECK(parse_env({"--master", "10.0.0.1:1", "p"}, {{"PADDLE_NNODES", "2:3"}}).options->nnodes == 3);
  CHECK_THAT(usage_error({"--nnodes", "3:2", "--master", "10.0.0.1:1", "p"}), Catch::Contains("MIN 3 is above MAX 2"));
  CHECK_THAT(usage_error({"--nnodes", "0:2", "--master", "10.0.0.1:1", "p"}), Catch::Contains("MIN '0' must be"));
  CHECK_THAT(usage_error({"--nnodes", "2:x", "--master", "10.0.0.1:1", "p"}), Catch::Contains("MAX 'x' must be"));
  CHECK_THAT(usage_error({"--nnodes", "1:3", "p"}), Catch::Contains("needs --master"));
}

// --- the etcd rendezvous backend (issue 21, item 3) ----------------------------------------------

TEST_CASE("cli: --rdzv-backend etcd|etcd-v2 and --master etcd:// (PADDLE_MASTER too) meet at etcd, port 2379 by default", "[launcher][cli][etcd]") {
  auto o = *parse({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.5", "p"}).options;
  CHECK(o.rdzv_backend == RdzvBackend::Etcd);
  CHECK(*o.master == "10.0.0.5:2379");
  o = *parse({"--nnodes", "1:3", "--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "etcd-0:12379", "p"}).options;
  CHECK(o.rdzv_backend == RdzvBackend::Etcd);
  CHECK(*o.master == "etcd-0:12379");
  CHECK(o.nnodes_min == 1);
  o = *parse({"--nnodes", "2", "--master", "etcd://[fd00::5]", "p"}).options;
  CHECK(o.rdzv_backend == RdzvBackend::Etcd);
  CHECK(*o.master == "[fd00::5]:2379");
  o = *parse_env({"p"}, {{"PADDLE_MASTER", "etcd://10.0.0.5:2379"}, {"PADDLE_NNODES", "2:4"}}).options;
  CHECK(o.rdzv_backend == RdzvBackend::Etcd);
  CHECK(*o.master == "10.0.0.5:2379");
  // c10d and static stay launch's own store, whose endpoint's port is torchrun's 29400.
  o = *parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.5", "p"}).options;
  CHECK(o.rdzv_backend == RdzvBackend::Store);
  CHECK(*o.master == "10.0.0.5:29400");
  CHECK(parse({"--nnodes", "2", "--master", "10.0.0.5:29400", "p"}).options->rdzv_backend == RdzvBackend::Store);
  // One node meets nobody: said once.
  auto one = parse({"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.5", "p"});
  CHECK(one.options->rdzv_backend == RdzvBackend::Etcd);
  CHECK(std::count_if(one.infos.begin(), one.infos.end(), [](const std::string& i) {
          return i.find("etcd's rendezvous: no effect with one node") != std::string::npos;
        }) == 1);
  // --rdzv-conf over etcd: the prefix has no effect, TLS is refused.
  auto conf = parse({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "--rdzv-conf",
                     "etcd_prefix=/x,protocol=http", "p"});
  CHECK_THAT(conf.infos.back(), Catch::Contains("etcd_prefix, protocol: no effect over etcd"));
  for (const char* tls : {"protocol=https", "cacert=/ca.pem", "cert=/c.pem", "key=/k.pem"})
    CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "h", "--rdzv-conf", tls, "p"}),
               Catch::Contains("not TLS yet"));
  CHECK(parse({"--nnodes", "2", "--rdzv-conf", "cacert=/ca.pem", "--rdzv-endpoint", "h", "p"}).infos.size() == 1);

  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "zookeeper", "--rdzv-endpoint", "h", "p"}),
             Catch::Contains("must be c10d or static (launch's own store, served on the endpoint by the launch that "
                             "binds it) or etcd"));
  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "c10d", "--master", "etcd://h:2379", "p"}),
             Catch::Contains("names etcd, --rdzv-backend c10d launch's own store"));
  CHECK_THAT(usage_error({"--nnodes", "2", "--master", "http://h:2379", "p"}),
             Catch::Contains("the one scheme launch knows is etcd://HOST:PORT"));
  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "etcd", "--master-addr", "h", "p"}),
             Catch::Contains("give its endpoint as --rdzv-endpoint HOST:2379"));
}
