// The launcher's options, as parsed from the command line (cli.cpp): ours, paddle launch's and
// torchrun's spellings, with PET_* and PADDLE_* environment variables applied as those tools do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/restart_backoff.h"

namespace launch {

enum class StreamMode { Rank0, All, None };

// How PROGRAM is started (program.h).
enum class ProgramKind {
  Auto,          // a *.py program runs under the Python interpreter, anything else as it is
  Module,        // -m MODULE: python -m MODULE ARGS
  PythonScript,  // --run-path: PROGRAM is a Python script whatever its name
  NoPython,      // --no-python: PROGRAM is executed as it is, even a *.py
};

struct Options {
  std::optional<std::string> gpus;     // --gpus 0,1,3
  std::optional<std::string> devices;  // --devices 0,1 | cpu
  std::optional<int> nproc_per_node;   // N; "gpu"/"cpu"/"auto" are resolved in make_plan
  std::optional<std::string> nproc_word;  // --nproc-per-node gpu|cpu|auto (torchrun's)
  int nnodes = 1;
  std::string job_id = "default";
  std::string log_dir = "log";
  std::string log_level = "info";
  bool log_overwrite = false;
  std::string host = "127.0.0.1";
  int max_restart = 0;  // restarts of the whole job after a worker failure
  BackoffSpec restart_backoff;  // --restart-backoff INITIAL[:MAX]: the wait before each restart
  std::optional<int> start_port;
  bool dry_run = false;
  StreamMode stream = StreamMode::Rank0;
  double grace_s = 10.0;
  std::optional<std::string> summary;
  std::optional<int> checkpoint_signal;  // --checkpoint-signal USR2: forwarded, does not stop the job
  bool requeue = false;                  // --requeue: Slurm batch jobs, after a time limit or preemption
  // Multi-node (launcher/multinode): node 0 serves the store on --master, every node meets there.
  std::optional<std::string> master;      // --master HOST:PORT (or --master-addr/--master-port, --rdzv-endpoint)
  int rank = -1;                          // --rank / --node-rank: this node's rank; -1: in arrival order
  std::optional<std::string> token_file;  // --token-file; else LAUNCH_STORE_TOKEN
  double elastic_timeout_s = 600;         // --elastic_timeout: how long the nodes wait for each other
  // Single node: torchrun's --master-addr/--master-port name what the program's rank 0 binds.
  std::optional<std::string> framework_addr;
  std::optional<int> framework_port;
  // The program.
  ProgramKind program_kind = ProgramKind::Auto;
  std::optional<std::string> python;  // --python PATH (else PYTHON_EXEC, else python3 in PATH)
  // Which of the options above were given, so that Slurm's values fill only the others.
  bool nnodes_given = false;
  bool job_id_given = false;
  bool log_dir_given = false;  // --log_dir (or PADDLE_LOG_DIR) given, not the default
  bool grace_given = false;
  bool host_given = false;
  std::vector<std::string> command;  // PROGRAM ARGS... (MODULE ARGS... with -m)
};

}  // namespace launch
