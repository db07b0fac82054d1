#include "worker/train/run.h"

#include <atomic>
#include <csignal>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "proto/client.h"
#include "proto/peer_lost.h"
#include "worker/comm/ring_comm.h"
#include "worker/comm/staged_comm.h"
#include "worker/core/backend.h"
#include "worker/core/knobs.h"
#include "worker/model/model.h"
#include "worker/data/data_error.h"
#include "worker/train/checkpoint.h"
#include "worker/train/env.h"
#include "worker/train/options.h"
#include "worker/train/precision.h"
#include "worker/train/settle.h"
#include "worker/train/torchrun_store.h"
#include "worker/train/trainer.h"

#ifdef WORKER_HAVE_GPU
#include "worker/comm/nccl_comm.h"
#endif

namespace worker {

namespace {

// Set by the signal handlers, read by the training loop at step boundaries (requests.h).
std::atomic<int> g_checkpoint_signals{0};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handlers need lock-free flags");

extern "C" void on_checkpoint_signal(int) { g_checkpoint_signals.fetch_add(1); }
// The first stop signal is the one the run ends with (its exit code); later ones change nothing.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

void install(int sig, void (*handler)(int), int flags) {
  struct sigaction sa{};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | flags;
  ::sigaction(sig, &sa, nullptr);
}

// With --save, Ctrl-C and SIGTERM (launch's teardown, Slurm, kill) save at the next step
// boundary and end the run with the first signal's exit code. A repeated SIGTERM is the same
// request: Slurm sends SIGTERM, SIGCONT, SIGTERM at a time limit, and under scancel both Slurm
// and launch signal every worker. A second SIGINT kills at once (SA_RESETHAND restores the
// default action after the first): someone at the terminal does not want to wait.
void install_stop_signals() {
  install(SIGINT, on_stop_signal, SA_RESETHAND);
  install(SIGTERM, on_stop_signal, 0);
}

struct Device {
  bool gpu = false;
  int ordinal = 0;
};

Device choose_device(const TrainOptions& o, const WorkerEnv& env) {
  Device d;
  if (o.device == DeviceChoice::Cpu) return d;
  if (o.device == DeviceChoice::Gpu) {
    if (!gpu_backend_built()) {
      throw UsageError("--device gpu: this train_resnet was built without the GPU backend (CUDA, cuDNN, NCCL)");
    }
    d.gpu = true;
  } else {
    d.gpu = env.gpu_ordinal.has_value() && gpu_backend_built();
  }
  // FLAGS_selected_gpus is the ordinal; under torchrun's contract the local rank is (as in
  // torch.cuda.set_device(LOCAL_RANK)).
  if (d.gpu) d.ordinal = env.gpu_ordinal.value_or(env.contract == proto::Contract::Torchrun ? env.local_rank : 0);
  return d;
}

// The backend, in the precision --precision resolves to (auto: rank 0 says what it picked and why).
std::unique_ptr<Ops> make_backend(const TrainOptions& opt, const Device& dev, bool lead) {
  BackendFacts facts;
#ifdef WORKER_HAVE_GPU
  if (dev.gpu) facts = gpu_backend_facts(dev.ordinal);
#endif
  const PrecisionChoice precision = choose_precision(opt.precision, dev.gpu, facts);  // throws on CPU + bf16/fp16
  if (lead && !precision.why.empty()) std::cout << describe_precision(precision) << std::endl;
#ifdef WORKER_HAVE_GPU
  if (dev.gpu) return make_gpu_ops(dev.ordinal, precision.dtype);
#endif
  return make_cpu_ops(opt.threads);
}

// The communicator of the job: none for one rank; NCCL on GPUs (unless --comm ring: the TCP ring
// through host memory); else the TCP ring. The ranks
// meet through the launcher's store; under torchrun's contract through the store rank 0 serves
// on MASTER_ADDR:MASTER_PORT; under paddle's launcher (no store) the CPU ring uses the endpoints
// it assigned. `store` / `master` receive the store, which must outlive the communicator
// (NCCL's watchdog watches the job's status through it).
std::unique_ptr<Comm> make_comm(const TrainOptions& opt, const WorkerEnv& env, const Device& dev, Ops& ops,
                                std::optional<proto::Client>& store, std::optional<TorchrunStore>& master) {
  using namespace proto::env;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.comm_timeout_s * 1000));
  if (opt.comm == CommKind::Nccl && !dev.gpu)
    throw UsageError("--comm nccl needs the GPU backend, and this rank runs on the CPU: use --comm ring (or auto)");
  if (env.world == 1) return make_single_process_comm();
  const bool nccl = dev.gpu && opt.comm != CommKind::Ring;
  proto::Client* client = nullptr;
  if (env.store_addr) {
    client = &store.emplace(proto::Client::from_env(env, timeout));  // a store that never answers: --comm-timeout
  } else if (env.contract == proto::Contract::Torchrun) {
    client = &master.emplace(env, timeout).client();
  } else if (nccl || env.endpoints.empty()) {
    throw EnvError(std::string(kPaddleTrainersNum) + "=" + std::to_string(env.world) + " but " + kStoreAddr +
                   " is not set" + (nccl ? "" : std::string(" (nor ") + kPaddleTrainerEndpoints + ")") +
                   ": run the ranks under `launch`, whose store they meet in");
  }
  // Launch's store outlives the generations: a restart meets under keys of its own. Under
  // torchrun's contract rank 0 serves a fresh store every round, and an agent that joined an
  // elastic job counts its restarts from 0 where the others count on: there the store is the round.
  const int meeting = master ? 0 : env.restart_count;
#ifdef WORKER_HAVE_GPU
  if (nccl) return make_nccl_comm(ops, client, env.rank, env.world, "world", meeting, timeout);
#endif
  RingConfig rc;
  rc.rank = env.rank;
  rc.world = env.world;
  rc.job_id = env.job_id;
  if (!env.current_host().empty()) rc.bind_host = env.current_host();
  else if (master) rc.bind_host = master->local_host();
  rc.key_prefix = "ring/world/" + std::to_string(meeting);
  rc.timeout = timeout;
  // The set-up's MACs are keyed with the store's token (LAUNCH_STORE_TOKEN; under torchrun's
  // contract rank 0's store has no secret); without a store there is none (RingConfig::token).
  if (client) rc.token = client->options().token;
  rc.warn = [](const std::string& line) { std::cerr << "train_resnet: warning: " << line << std::endl; };
  std::unique_ptr<Rendezvous> rdv;
  if (client) {
    rdv = make_store_rendezvous(*client, timeout);
  } else {  // a launcher without our store (e.g. paddle's): the endpoints it assigned
    const std::string& me = env.endpoints[size_t(env.rank)];
    rc.bind_port = uint16_t(std::stoi(me.substr(me.rfind(':') + 1)));
    rc.retry_connect = true;
    rdv = make_endpoint_rendezvous(env.endpoints, rc.key_prefix);
  }
  std::unique_ptr<Comm> ring = make_ring_comm(rc, *rdv);
  if (ops.device() == DeviceKind::Cpu) return ring;
  return make_staged_comm(std::move(ring), ops);
}

int run(TrainOptions opt, const WorkerEnv& env) {
  const Device dev = choose_device(opt, env);
#ifdef WORKER_HAVE_GPU
  // The GPU's context (about 0.5 s on an H100) is made while the options are settled (an image
  // folder's index and a sample of its sizes) and the save path is checked.
  std::future<void> context;
  if (dev.gpu) context = start_gpu_context(dev.ordinal);
#endif
  // Before anything is built: what the checkpoint (--eval-only) and the images say.
  const Settled settled = settle_options(opt);
  if (env.rank == 0) {
    for (const std::string& w : settled.warnings) std::cerr << "train_resnet: warning: " << w << std::endl;
    for (const std::string& line : settled.lines) std::cout << line << std::endl;
  }
  Requests requests;
  if (env.checkpoint_signal != 0) {
    if (opt.save.empty()) {
      throw UsageError(std::string(proto::env::kCheckpointSignal) +
                       " is set but there is no --save PATH to write the checkpoint to");
    }
    install(env.checkpoint_signal, on_checkpoint_signal, 0);
    requests.saves = &g_checkpoint_signals;
  }
  if (!opt.save.empty()) {
    // Before anything else: a --save that cannot be written fails now, not after the training.
    if (env.rank == 0) {
      check_save_path(opt.save);
      for (const std::string& line : recover_interrupted_save(opt.save)) std::cout << line << std::endl;
    }
    install_stop_signals();
    requests.stop = &g_stop_signal;
  }
#ifdef WORKER_HAVE_GPU
  if (context.valid()) context.wait();
#endif
  std::unique_ptr<Ops> ops = make_backend(opt, dev, env.rank == 0);
  std::optional<TorchrunStore> master;  // declared first: it outlives the client and the comm
  std::optional<proto::Client> store;
  std::unique_ptr<Comm> comm;
  try {
    comm = make_comm(opt, env, dev, *ops, store, master);
  } catch (const proto::StoreError& e) {
    using Kind = proto::StoreError::Kind;
    if (e.kind() != Kind::Timeout && e.kind() != Kind::Connection) throw;
    std::ostringstream s;
    s << e.what() << " (waited --comm-timeout " << opt.comm_timeout_s << " s for it)";
    throw proto::StoreError(e.kind(), s.str());
  }
  const TrainResult r = train(opt, data_env(env), *ops, *comm, std::cout, requests);
  if (r.stop_signal != 0) return 128 + r.stop_signal;  // as a shell reports a death by that signal
  if (!r.checksums_agree) {
    std::cerr << "train_resnet: error: the ranks' parameters differ at the end of training" << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

int run_train(int argc, const char* const* argv) {
  std::optional<TrainOptions> opt;
  WorkerEnv env;
  try {
    opt = parse_options(argc, argv);
    if (!opt) return 0;  // --help
    env = read_worker_env(process_env());
    process_knobs();  // a bad WORKER_* value is reported before any work
  } catch (const std::exception& e) {  // UsageError, EnvError
    std::cerr << "train_resnet: error: " << e.what() << std::endl;
    return 2;
  }
  const std::string who = env.world > 1 ? "rank " + std::to_string(env.rank) + ": " : "";
  try {
    return run(*opt, env);
  } catch (const UsageError& e) {
    std::cerr << "train_resnet: error: " << who << e.what() << std::endl;
    return 2;
  } catch (const EnvError& e) {
    std::cerr << "train_resnet: error: " << who << e.what() << std::endl;
    return 2;
  } catch (const DataError& e) {  // bad data: before training, or a corrupt file under --strict-data
    std::cerr << "train_resnet: error: " << who << e.what() << std::endl;
    return 2;
  } catch (const ModelTooLarge& e) {  // --batch-size beyond what the backend takes
    std::cerr << "train_resnet: error: " << who << e.what() << std::endl;
    return 2;
  } catch (const CommFailure& e) {
    const std::string msg = e.what();
    std::cerr << "train_resnet: error: " << (msg.rfind("rank ", 0) == 0 ? "" : who) << msg << std::endl;
    if (!e.peer_lost()) return 1;
    // The launcher reads this line and the exit code: the peer, not this rank, is at fault.
    const std::string me = "rank " + std::to_string(env.rank) + ": ";
    std::cerr << proto::format_peer_lost({e.lost_peer(), msg.rfind(me, 0) == 0 ? msg.substr(me.size()) : msg})
              << std::endl;
    return proto::kPeerLostExitCode;
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    std::cerr << "train_resnet: error: " << (msg.rfind("rank ", 0) == 0 ? "" : who) << msg << std::endl;
    return 1;
  }
}

}  // namespace worker
