// Whether this binary carries the GPU backend: decided at build time by CMake (LAUNCH_HAVE_GPU).
#include "worker/core/backend.h"

namespace worker {

bool gpu_backend_built() {
#ifdef WORKER_HAVE_GPU
  return true;
#else
  return false;
#endif
}

}  // namespace worker
