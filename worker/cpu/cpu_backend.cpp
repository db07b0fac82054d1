// The CPU backend's factory. Built for the baseline ISA (no -mavx2), so the CPU check below
// runs before any AVX2 instruction can.
#include <stdexcept>

#include "worker/core/backend.h"
#include "worker/cpu/cpu_ops.h"

namespace worker {

std::unique_ptr<Ops> make_cpu_ops(int threads) {
#if defined(WORKER_CPU_AVX2)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    throw std::runtime_error(
        "cpu backend: this build needs a CPU with AVX2 and FMA; rebuild with "
        "-DWORKER_CPU_AVX2=OFF for older CPUs");
#endif
  return cpu::make_cpu_ops_impl(threads);
}

}  // namespace worker
