#include "worker/core/host.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace worker {

int process_cores() {
  cpu_set_t set;
  int cores = 0;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = int(std::thread::hardware_concurrency());
  return std::max(1, cores);
}

}  // namespace worker
