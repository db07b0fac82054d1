#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include "launcher/errors.h"

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
  app.add_option("--nnodes", o.nnodes, "number of nodes (only 1 for now)");
  app.add_option("--job_id", o.job_id, "job name, exported as PADDLE_JOB_ID")->capture_default_str();
  app.add_option("--log_dir", o.log_dir, "directory of workerlog.N files")->capture_default_str();
  app.add_option("--log_level", o.log_level, "launcher log level: debug, info, warning, error")
      ->transform(CLI::IsMember({"debug", "info", "warning", "warn", "error"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_flag("--log_overwrite", o.log_overwrite, "truncate workerlog.N instead of appending");
  app.add_option("--host", o.host, "IPv4 address of this node for endpoints and the store")
      ->capture_default_str();
  app.add_option("--max_restart", o.max_restart, "parsed for compatibility; not implemented yet")
      ->check(CLI::NonNegativeNumber);
  auto* o_start = app.add_option("--start_port", start_port,
                                 "first port of the trainer endpoints (default: free ports)")
                      ->check(CLI::Range(1, 65535));
  app.add_flag("--dry-run,--dry_run", o.dry_run, "print each rank's command and environment, start nothing");
  app.add_option("--stream", stream, "console output: rank0, all ([rank N] prefix), none")
      ->check(CLI::IsMember({"rank0", "all", "none"}))
      ->capture_default_str();
  app.add_option("--grace", o.grace_s, "seconds between SIGTERM and SIGKILL at teardown")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
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
  o.stream = stream == "all" ? StreamMode::All : stream == "none" ? StreamMode::None : StreamMode::Rank0;
  if (o.log_level == "warn") o.log_level = "warning";

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty())
    throw UsageError("no PROGRAM given: usage is launch [options] PROGRAM [ARGS...]");
  if (o.command.front().size() > 1 && o.command.front()[0] == '-')
    throw UsageError("unknown option " + o.command.front() + " (see launch --help; put -- before a "
                     "program whose name starts with '-')");
  if (o.nnodes != 1)
    throw UsageError("--nnodes " + std::to_string(o.nnodes) +
                     ": multi-node launch is not supported yet; use --nnodes 1");
  if (o.job_id.empty() || o.job_id.find_first_of(" \t\n/=,") != std::string::npos)
    throw UsageError("--job_id '" + o.job_id + "' must be non-empty without spaces, '/', '=' or ','");
  if (o.log_dir.empty()) throw UsageError("--log_dir is empty; give a directory such as log");
  return {std::move(o), {}};
}

}  // namespace launch
