// What the host gives this process.
#pragma once

namespace worker {

// The cores this process may run on: its CPU affinity mask (what taskset, Slurm's --cpu-bind or a
// container's cpuset leave it), else std::thread::hardware_concurrency(); at least 1.
int process_cores();

}  // namespace worker
