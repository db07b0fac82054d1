// The launcher's options, as parsed from the command line (cli.cpp): ours, paddle launch's and
// torchrun's spellings, with PET_* and PADDLE_* environment variables applied as those tools do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/devices.h"
#include "launcher/restart_backoff.h"

namespace launch {

enum class StreamMode { Rank0, All, None };

// torchrun's --nproc-per-node words: one process per visible GPU, per CPU core, or GPUs if any.
enum class NprocWord { Gpu, Cpu, Auto };

// How PROGRAM is started (program.h).
enum class ProgramKind {
  Auto,          // a *.py program runs under the Python interpreter, anything else as it is
  Module,        // -m MODULE: python -m MODULE ARGS
  PythonScript,  // --run-path: PROGRAM is a Python script whatever its name
  NoPython,      // --no-python: PROGRAM is executed as it is, even a *.py
};

// Where the nodes of a multi-node job meet (--rdzv-backend): launch's own store, served on
// --master by the launch that wins the bind (torchrun's c10d and static), or etcd at the endpoint
// (torchrun's etcd and etcd-v2, paddle's --master etcd://HOST:PORT).
enum class RdzvBackend { Store, Etcd };

// torchrun's --rdzv-conf KEY=VALUE,... (PET_RDZV_CONF): the keys launch honours. join_timeout and
// timeout set elastic_timeout_s itself.
struct RdzvConf {
  std::optional<bool> is_host;                // is_host: this launch serves the store (1) or joins it (0)
  std::optional<double> last_call_timeout_s;  // last_call_timeout: --nnodes MIN:MAX waits this long for MAX
  std::optional<double> close_timeout_s;      // close_timeout: the store's node waits this long for the others to leave
  std::optional<double> heartbeat_period_s;   // keep_alive_interval
  std::optional<double> heartbeat_timeout_s;  // heartbeat_timeout (or keep_alive_interval x keep_alive_max_attempt)
  std::optional<double> store_timeout_s;      // read_timeout: the store may be unreachable this long
  std::optional<double> checkpoint_timeout_s; // checkpoint_timeout (ours): a join waits this long for the save
};

struct Options {
  std::optional<DeviceList> devices;   // --gpus 0,1,3 | --devices 0,1 | --devices cpu
  std::optional<int> nproc_per_node;   // N; gpu/cpu/auto are resolved in make_plan
  std::optional<NprocWord> nproc_word; // --nproc-per-node gpu|cpu|auto (torchrun's)
  int nnodes = 1;      // --nnodes N, or MAX of --nnodes MIN:MAX
  int nnodes_min = 0;  // MIN of --nnodes MIN:MAX (elastic membership); 0: a fixed number of nodes
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
  // torchrun's --signals-to-handle beyond the four stop signals launch always handles (USR1,
  // USR2): forwarded, then the job stops, as those four.
  std::vector<int> extra_stop_signals;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // TORCHELASTIC_SIGNALS_TO_HANDLE
  std::string role = "default";          // --role: ROLE_NAME
  std::string line_prefix_template;      // --log-line-prefix-template: --stream all's prefixes; empty: "[rank N] "
  bool virtual_local_rank = false;       // --virtual-local-rank: LOCAL_RANK 0, one GPU visible per worker
  bool requeue = false;                  // --requeue: Slurm batch jobs, after a time limit or preemption
  // Multi-node (launcher/multinode): node 0 serves the store on --master, every node meets there.
  std::optional<std::string> master;      // --master HOST:PORT (or --master-addr/--master-port, --rdzv-endpoint)
  RdzvBackend rdzv_backend = RdzvBackend::Store;  // Etcd: `master` is the etcd endpoint
  int rank = -1;                          // --rank / --node-rank: this node's rank; -1: in arrival order
  std::optional<std::string> token_file;  // --token-file; else LAUNCH_STORE_TOKEN
  double elastic_timeout_s = 600;         // --elastic_timeout: how long the nodes wait for each other
  RdzvConf rdzv;                          // --rdzv-conf
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
