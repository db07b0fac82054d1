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
  int max_restart = 0;  // restarts of the whole job after a worker failure
  std::optional<int> start_port;
  bool dry_run = false;
  StreamMode stream = StreamMode::Rank0;
  double grace_s = 10.0;
  std::optional<std::string> summary;
  std::optional<int> checkpoint_signal;
  // Multi-node (launcher/multinode): node 0 serves the store on --master, every node meets there.
  std::optional<std::string> master;      // --master IP:PORT
  int rank = -1;                          // --rank: this node's rank; -1: in arrival order
  std::optional<std::string> token_file;  // --token-file; else LAUNCH_STORE_TOKEN
  double elastic_timeout_s = 600;         // --elastic_timeout: how long the nodes wait for each other  // --checkpoint-signal USR2: forwarded, does not stop the job
  // Which of the options above were given, so that Slurm's values fill only the others.
  bool nnodes_given = false;
  bool job_id_given = false;
  bool grace_given = false;
  bool host_given = false;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

}  // namespace launch
