// The launcher's options, as parsed from the command line (cli.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace launch {

enum class StreamMode { Rank0, All, None };

struct Options {
  std::optional<std::string> gpus;     // --gpus 0,1,3
  std::optional<std::string> devices;  // --devices 0,1 | cpu
  std::optional<int> nproc_per_node;
  int nnodes = 1;
  std::string job_id = "default";
  std::string log_dir = "log";
  std::string log_level = "info";
  bool log_overwrite = false;
  std::string host = "127.0.0.1";
  int max_restart = 0;  // parsed for paddle compatibility; restarting is not implemented yet
  std::optional<int> start_port;
  bool dry_run = false;
  StreamMode stream = StreamMode::Rank0;
  double grace_s = 10.0;
  std::optional<std::string> summary;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

}  // namespace launch
