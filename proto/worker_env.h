// The environment contract between `launch` and its workers, in ONE place: every variable the
// launcher sets (Paddle's, torchrun's, ours) and the Slurm variables it reads, each named once
// with its meaning. The launcher writes them (launcher/worker_env.cpp builds every rank's set
// with these names); the worker, the store client, the NCCL communicator and `launch kv` read
// them back through read_worker_env() only. Pure: a name -> value map in, a struct out.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace proto {

using EnvMap = std::map<std::string, std::string>;

namespace env {

// --- Paddle's names (python -m paddle.distributed.launch sets the same for its workers)
inline constexpr const char* kPaddleTrainerId = "PADDLE_TRAINER_ID";        // global rank
inline constexpr const char* kPaddleGlobalRank = "PADDLE_GLOBAL_RANK";      // global rank (again)
inline constexpr const char* kPaddleTrainersNum = "PADDLE_TRAINERS_NUM";    // world size
inline constexpr const char* kPaddleGlobalSize = "PADDLE_GLOBAL_SIZE";      // world size (again)
inline constexpr const char* kPaddleLocalRank = "PADDLE_LOCAL_RANK";        // rank on this node
inline constexpr const char* kPaddleRankInNode = "PADDLE_RANK_IN_NODE";     // rank on this node (again)
inline constexpr const char* kPaddleLocalSize = "PADDLE_LOCAL_SIZE";        // processes on this node
inline constexpr const char* kPaddleNnodes = "PADDLE_NNODES";               // nodes of the job
inline constexpr const char* kPaddleTrainerEndpoints = "PADDLE_TRAINER_ENDPOINTS";  // "ip:port,..." rank order
inline constexpr const char* kPaddleCurrentEndpoint = "PADDLE_CURRENT_ENDPOINT";    // this rank's entry
inline constexpr const char* kPaddleMaster = "PADDLE_MASTER";  // "ip:port" the program's rank 0 may bind
inline constexpr const char* kPaddleJobId = "PADDLE_JOB_ID";   // the job's name; our store admits it
inline constexpr const char* kPaddleLogDir = "PADDLE_LOG_DIR";  // the launcher's log directory, absolute
inline constexpr const char* kPaddleDistriBackend = "PADDLE_DISTRI_BACKEND";  // "nccl" (GPU) or "gloo" (CPU)
// This rank's GPU as an index among the visible devices (CUDA_VISIBLE_DEVICES when set), the
// meaning paddle gives it: the CUDA device ordinal. Absent for CPU ranks.
inline constexpr const char* kSelectedGpus = "FLAGS_selected_gpus";
inline constexpr const char* kPaddleRestartCount = "PADDLE_RESTART_COUNT";  // 0, then +1 per restart
inline constexpr const char* kPodName = "POD_NAME";  // the launcher's "pod" (fleet.init looks for it)
inline constexpr const char* kPaddleAutoCluster = "PADDLE_AUTO_CLUSTER";    // "0": no auto-parallel cluster
inline constexpr const char* kPaddleTrainingRole = "PADDLE_TRAINING_ROLE";  // "TRAINER": collective mode

// --- torchrun's names (torch.distributed.run / elastic agent)
inline constexpr const char* kRank = "RANK";                      // global rank
inline constexpr const char* kWorldSize = "WORLD_SIZE";           // world size
inline constexpr const char* kLocalRank = "LOCAL_RANK";           // rank on this node
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";  // processes on this node
inline constexpr const char* kGroupRank = "GROUP_RANK";           // node rank
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";  // nodes of the job
inline constexpr const char* kRoleRank = "ROLE_RANK";             // rank among the role's workers (= RANK)
inline constexpr const char* kRoleName = "ROLE_NAME";             // torchrun's --role ("default")
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";  // workers of the role (= WORLD_SIZE)
inline constexpr const char* kMasterAddr = "MASTER_ADDR";         // host of PADDLE_MASTER
inline constexpr const char* kMasterPort = "MASTER_PORT";         // port of PADDLE_MASTER
inline constexpr const char* kTorchRestartCount = "TORCHELASTIC_RESTART_COUNT";  // = PADDLE_RESTART_COUNT
inline constexpr const char* kTorchMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";    // --max_restart
// The job id: its presence is what torch.distributed.is_torchelastic_launched() tests.
inline constexpr const char* kTorchRunId = "TORCHELASTIC_RUN_ID";
// "False" under launch: nothing serves MASTER_PORT, the program's rank 0 binds it (torch's
// TCPStore then starts as server there). torchrun's static rendezvous says "True": its agent
// already serves a TCPStore on MASTER_PORT.
inline constexpr const char* kTorchUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// Where torch.distributed.elastic's @record writes a failing rank's exception (JSON, see
// launcher/error_file.h); the failure report prints it.
inline constexpr const char* kTorchErrorFile = "TORCHELASTIC_ERROR_FILE";
// "1" when unset, as torchrun (on CPU ranks too: a program may still make NCCL communicators):
// NCCL errors abort instead of hanging.
inline constexpr const char* kTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
// torchrun's --signals-to-handle as it gives it to its workers ("SIGTERM,SIGINT,SIGHUP,SIGQUIT"
// by default): the signals the launcher forwards to them.
inline constexpr const char* kTorchSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
// "1" when unset and more than one process runs on the node, as torchrun.
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";

// --- ours
inline constexpr const char* kStoreAddr = "LAUNCH_STORE_ADDR";    // "ip:port" of the job's store
inline constexpr const char* kStoreToken = "LAUNCH_STORE_TOKEN";  // its token (64 hex chars; never logged)
// "SIGUSR2" (--checkpoint-signal): that signal means "save at the next step boundary, go on".
inline constexpr const char* kCheckpointSignal = "LAUNCH_CHECKPOINT_SIGNAL";

// --- the contract as a whole
// Every variable above that the launcher sets for its workers. A launcher gives its workers all
// of them afresh: what it does not set itself (FLAGS_selected_gpus on a CPU rank, the store
// without one, LAUNCH_CHECKPOINT_SIGNAL without --checkpoint-signal) it removes, so that nothing
// of an outer launch's job (a launch inside another launcher's worker) leaks through. The
// defaults it fills in only when unset (OMP_NUM_THREADS, PYTHONUNBUFFERED,
// TORCH_NCCL_ASYNC_ERROR_HANDLING) are the user's, not part of it.
inline constexpr const char* kWorkerContract[] = {
    kPaddleTrainerId, kPaddleGlobalRank, kPaddleTrainersNum, kPaddleGlobalSize, kPaddleLocalRank,
    kPaddleRankInNode, kPaddleLocalSize, kPaddleNnodes, kPaddleTrainerEndpoints, kPaddleCurrentEndpoint,
    kPaddleMaster, kPaddleJobId, kPaddleLogDir, kPaddleDistriBackend, kSelectedGpus, kPaddleRestartCount,
    kPodName, kPaddleAutoCluster, kPaddleTrainingRole,
    kRank, kWorldSize, kLocalRank, kLocalWorldSize, kGroupRank, kGroupWorldSize, kRoleRank, kRoleName,
    kRoleWorldSize, kMasterAddr, kMasterPort, kTorchRestartCount, kTorchMaxRestarts, kTorchRunId,
    kTorchUseAgentStore, kTorchErrorFile, kTorchSignalsToHandle,
    kStoreAddr, kStoreToken, kCheckpointSignal};
// Variables only a launcher gives its workers (ours, torchrun's, paddle's; nobody sets them for
// a launcher): in a launcher's own environment they mean it runs inside another's worker.
inline constexpr const char* kWorkerMarks[] = {kPaddleTrainerId, kPaddleCurrentEndpoint, kLocalRank, kTorchRunId,
                                               kStoreAddr};

// --- the process's surroundings
inline constexpr const char* kPythonUnbuffered = "PYTHONUNBUFFERED";  // "1" when unset: no lost prints
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";  // read, never changed

// --- Slurm's, as the launcher reads them (launcher/slurm/slurm_env.cpp)
inline constexpr const char* kSlurmJobId = "SLURM_JOB_ID";
inline constexpr const char* kSlurmStepId = "SLURM_STEP_ID";
inline constexpr const char* kSlurmStepNumNodes = "SLURM_STEP_NUM_NODES";  // then SLURM_NNODES
inline constexpr const char* kSlurmNnodes = "SLURM_NNODES";
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";                // node rank
inline constexpr const char* kSlurmStepNodelist = "SLURM_STEP_NODELIST";   // then SLURM_JOB_NODELIST
inline constexpr const char* kSlurmJobNodelist = "SLURM_JOB_NODELIST";
inline constexpr const char* kSlurmStepGpus = "SLURM_STEP_GPUS";           // when no CUDA_VISIBLE_DEVICES
inline constexpr const char* kSlurmStepNumTasks = "SLURM_STEP_NUM_TASKS";  // then SLURM_NTASKS
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";
inline constexpr const char* kSlurmStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";  // then SLURM_NTASKS_PER_NODE
inline constexpr const char* kSlurmNtasksPerNode = "SLURM_NTASKS_PER_NODE";
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";                // task rank
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";              // task rank on the node
inline constexpr const char* kSlurmStepLauncherPort = "SLURM_STEP_LAUNCHER_PORT";  // tells two runs of a step apart

}  // namespace env

// A variable of the contract is missing, malformed or inconsistent with another; names it.
class EnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which launcher's names the worker found.
enum class Contract {
  None,      // neither: a single process
  Paddle,    // PADDLE_TRAINER_ID ... (launch sets both; paddle's launcher these only)
  Torchrun,  // RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT only
};

// What a worker learns from its environment.
struct WorkerEnv {
  Contract contract = Contract::None;
  int rank = 0;         // PADDLE_TRAINER_ID, else RANK
  int world = 1;        // PADDLE_TRAINERS_NUM, else WORLD_SIZE (else the endpoint count)
  int local_rank = 0;   // PADDLE_LOCAL_RANK / LOCAL_RANK / PADDLE_RANK_IN_NODE
  int local_world = 1;  // PADDLE_LOCAL_SIZE / LOCAL_WORLD_SIZE (else 1): the ranks sharing this node's cores
  std::vector<std::string> endpoints;     // PADDLE_TRAINER_ENDPOINTS ("ip:port", one per rank)
  std::string current_endpoint;           // PADDLE_CURRENT_ENDPOINT
  std::optional<std::string> master;      // "host:port": PADDLE_MASTER, else MASTER_ADDR:MASTER_PORT
  bool agent_store = false;               // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves `master`
  std::optional<std::string> store_addr;  // LAUNCH_STORE_ADDR
  std::optional<std::string> store_token;  // LAUNCH_STORE_TOKEN
  std::string job_id = "default";         // PADDLE_JOB_ID, else TORCHELASTIC_RUN_ID
  std::optional<int> gpu_ordinal;         // FLAGS_selected_gpus: the CUDA device ordinal
  int restart_count = 0;                  // PADDLE_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT
  int checkpoint_signal = 0;              // LAUNCH_CHECKPOINT_SIGNAL; 0: none
  std::optional<std::string> error_file;  // TORCHELASTIC_ERROR_FILE
  std::optional<std::string> log_dir;     // PADDLE_LOG_DIR (launch and paddle's launcher set it)

  bool distributed() const { return world > 1; }
  // The host part of current_endpoint ("" when unknown): where this rank's sockets bind.
  std::string current_host() const;
  std::string who() const;  // "rank 3" (for messages), "rank 0" for a single process
};

// Pure: reads `env`. Missing variables mean a single process. Throws EnvError naming the
// variable on bad input (not a number, rank >= world, an endpoint list of the wrong length, a
// GPU index CUDA_VISIBLE_DEVICES does not expose, Paddle's and torchrun's names disagreeing).
WorkerEnv read_worker_env(const EnvMap& env);

// The calling process's environment as an EnvMap (the I/O side of read_worker_env).
EnvMap process_env();
EnvMap env_from_environ(char** envp);  // "K=V" strings split at the first '='; others dropped

// How many GPUs CUDA_VISIBLE_DEVICES exposes. Like the CUDA runtime, the list ends at the first
// invalid entry (empty or negative, e.g. "-1" hides every GPU); UUIDs count as one GPU each.
int count_cuda_visible(std::string_view cuda_visible_devices);

// The checkpoint signal, as `launch --checkpoint-signal` takes it and LAUNCH_CHECKPOINT_SIGNAL
// carries it (the one parser of both binaries): USR1 or USR2 in any case, with or without "SIG",
// or its number. nullopt for anything else. The stop signals (INT, TERM, HUP, QUIT) are refused:
// they already stop the job (a worker with --save saves and exits on them), and a worker's stop
// handler would take the signal over from its checkpoint handler. No other signal is anybody's
// convention for "save now".
std::optional<int> parse_checkpoint_signal(std::string_view name);

}  // namespace proto
