// The worker's side of the launcher's environment contract: one pure function reads the
// variables `launch` exports (PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, ...) into a struct.
// Missing variables mean a single process; inconsistent ones are an EnvError naming them.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace worker {

class EnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvMap = std::map<std::string, std::string>;

struct WorkerEnv {
  int rank = 0;                             // PADDLE_TRAINER_ID
  int world = 1;                            // PADDLE_TRAINERS_NUM
  int local_rank = 0;                       // PADDLE_LOCAL_RANK / LOCAL_RANK / PADDLE_RANK_IN_NODE
  std::vector<std::string> endpoints;       // PADDLE_TRAINER_ENDPOINTS ("ip:port", one per rank)
  std::string current_endpoint;             // PADDLE_CURRENT_ENDPOINT
  std::optional<std::string> store_addr;    // LAUNCH_STORE_ADDR: the rendezvous store, if any
  std::optional<std::string> selected_gpus; // FLAGS_selected_gpus (physical id)
  std::optional<std::string> cuda_visible_devices;
  std::string job_id = "default";           // PADDLE_JOB_ID
  int restart_count = 0;                    // PADDLE_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT
  int checkpoint_signal = 0;                // LAUNCH_CHECKPOINT_SIGNAL ("USR2", "SIGUSR2", "12"); 0: none

  bool distributed() const { return world > 1; }
  // The host part of current_endpoint ("" when unknown): where this rank's sockets bind.
  std::string current_host() const;
};

// Pure: reads `env` (name -> value). Throws EnvError naming the variable on bad input.
WorkerEnv read_worker_env(const EnvMap& env);

// A signal by name ("USR1", "SIGUSR2", "TERM", ...) or number; throws EnvError naming `var`.
int parse_signal(const std::string& var, const std::string& value);

// The process environment as an EnvMap.
EnvMap process_env();

// CUDA device ordinal for FLAGS_selected_gpus (a physical id as the launcher assigned it):
// without CUDA_VISIBLE_DEVICES the ordinal is the id; with it, the id's position in that list
// (or, when the id is not listed but smaller than the list, the id itself as paddle's
// relative numbering). Throws EnvError otherwise.
int gpu_ordinal(const std::string& selected_gpus, const std::optional<std::string>& cuda_visible);

}  // namespace worker
