#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include "launcher/errors.h"
#include "launcher/exit_policy.h"

namespace launch {

namespace {

// CLI11 messages can span lines (e.g. "Run with --help"); the contract is one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

CliResult parse_cli(int argc, const char* const* argv) {
  Options o;
  CLI::App app{"Start one worker process per device, supervise them, tear them all down on the "
               "first failure.\n  launch [options] PROGRAM [ARGS...]",
               "launch"};
  // Everything from PROGRAM on belongs to the program, options included.
  app.prefix_command();

  std::string gpus, devices, summary, stream = "rank0";
  int nproc = 0, start_port = 0;
  auto* o_gpus = app.add_option("--gpus", gpus, "GPU ids, comma-separated (e.g. 0,1,3)");
  auto* o_devices =
      app.add_option("--devices", devices, "device ids like --gpus, or 'cpu' (with --nproc_per_node)");
  auto* o_nproc = app.add_option("--nproc_per_node", nproc, "processes on this node")
                      ->check(CLI::Range(1, 4096));
  auto* o_nnodes = app.add_option("--nnodes", o.nnodes, "number of nodes (more than 1: with --master)")
                      ->check(CLI::Range(1, 65536));
  std::string master, token_file;
  auto* o_master = app.add_option("--master", master, "IP:PORT of the store of a multi-node job, served by node 0");
  app.add_option("--rank", o.rank, "this node's rank, 0..nnodes-1; -1: in order of arrival")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  auto* o_token = app.add_option("--token-file,--token_file", token_file,
                                 "file holding the multi-node job's token (mode 600); else LAUNCH_STORE_TOKEN");
  app.add_option("--elastic_timeout", o.elastic_timeout_s, "seconds the nodes wait for each other to arrive")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  auto* o_job = app.add_option("--job_id", o.job_id, "job name, exported as PADDLE_JOB_ID")
                    ->capture_default_str();
  app.add_option("--log_dir", o.log_dir, "directory of workerlog.N files")->capture_default_str();
  app.add_option("--log_level", o.log_level, "launcher log level: debug, info, warning, error")
      ->transform(CLI::IsMember({"debug", "info", "warning", "warn", "error"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_flag("--log_overwrite", o.log_overwrite, "truncate workerlog.N instead of appending");
  auto* o_host = app.add_option("--host", o.host, "IPv4 address of this node for endpoints and the store")
      ->capture_default_str();
  app.add_option("--max_restart", o.max_restart,
                 "after a worker failure, stop all workers and start them all again, up to N times")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  auto* o_start = app.add_option("--start_port", start_port,
                                 "first port of the trainer endpoints (default: free ports)")
                      ->check(CLI::Range(1, 65535));
  app.add_flag("--dry-run,--dry_run", o.dry_run, "print each rank's command and environment, start nothing");
  app.add_option("--stream", stream, "console output: rank0, all ([rank N] prefix), none")
      ->check(CLI::IsMember({"rank0", "all", "none"}))
      ->capture_default_str();
  auto* o_grace = app.add_option("--grace", o.grace_s, "seconds between SIGTERM and SIGKILL at teardown")
                      ->check(CLI::Range(0.0, 86400.0))
                      ->capture_default_str();
  std::string ckpt_sig;
  auto* o_ckpt = app.add_option("--checkpoint-signal,--checkpoint_signal", ckpt_sig,
                                "USR1 or USR2: forwarded to every worker, which saves a checkpoint "
                                "and goes on (e.g. with sbatch --signal=USR2@120)");
  auto* o_summary = app.add_option("--summary", summary, "write a JSON summary of the job to FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, app.help()};
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + " (see launch --help)");
  }

  if (o_gpus->count()) o.gpus = gpus;
  if (o_devices->count()) o.devices = devices;
  if (o_nproc->count()) o.nproc_per_node = nproc;
  if (o_start->count()) o.start_port = start_port;
  if (o_summary->count()) o.summary = summary;
  o.nnodes_given = o_nnodes->count() > 0;
  o.job_id_given = o_job->count() > 0;
  o.grace_given = o_grace->count() > 0;
  o.host_given = o_host->count() > 0;
  if (o_master->count()) o.master = master;
  if (o_token->count()) o.token_file = token_file;
  if (o_ckpt->count()) {
    o.checkpoint_signal = parse_checkpoint_signal(ckpt_sig);
    if (!o.checkpoint_signal)
      throw UsageError("--checkpoint-signal '" + ckpt_sig +
                       "': use USR1 or USR2 (SIGTERM, SIGINT, SIGHUP and SIGQUIT already stop the job)");
  }
  o.stream = stream == "all" ? StreamMode::All : stream == "none" ? StreamMode::None : StreamMode::Rank0;
  if (o.log_level == "warn") o.log_level = "warning";

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty())
    throw UsageError("no PROGRAM given: usage is launch [options] PROGRAM [ARGS...]");
  if (o.command.front().size() > 1 && o.command.front()[0] == '-')
    throw UsageError("unknown option " + o.command.front() + " (see launch --help; put -- before a "
                     "program whose name starts with '-')");
  if (o.nnodes > 1 && !o.master)
    throw UsageError("--nnodes " + std::to_string(o.nnodes) +
                     " needs --master IP:PORT (the address node 0 serves the job's store on)");
  if (o.rank >= o.nnodes)
    throw UsageError("--rank " + std::to_string(o.rank) + " is not below --nnodes " + std::to_string(o.nnodes));

  if (o.job_id.empty() || o.job_id.find_first_of(" \t\n/=,") != std::string::npos)
    throw UsageError("--job_id '" + o.job_id + "' must be non-empty without spaces, '/', '=' or ','");
  if (o.log_dir.empty()) throw UsageError("--log_dir is empty; give a directory such as log");
  return {std::move(o), {}};
}

}  // namespace launch
