// Check macros for every CUDA, cuDNN, cuBLAS and NCCL call of the GPU backend. A failure throws
// GpuError naming the call, file:line, the rank and the host, so the trainer's main prints one
// line and exits non-zero (nothing below main calls exit()).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace worker {
namespace gpu {

class GpuError : public std::runtime_error {
 public:
  enum class Kind { Cuda, OutOfMemory, Cudnn, Cublas, Nccl, PeerFailed, Invalid };
  GpuError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// "rank 1 on host h200-a" (PADDLE_TRAINER_ID and gethostname, read once).
const std::string& where();

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn(cudnnStatus_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl(ncclResult_t e, const char* call, const char* file, int line);
// An allocation of `bytes` failed: says how much was asked for and suggests --batch-size.
[[noreturn]] void throw_oom(size_t bytes, size_t in_use, const char* file, int line);

}  // namespace gpu
}  // namespace worker

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) ::worker::gpu::throw_cuda(e_, #call, __FILE__, __LINE__);  \
  } while (0)
#define CUDNN_CHECK(call)                                                                      \
  do {                                                                                         \
    cudnnStatus_t e_ = (call);                                                                 \
    if (e_ != CUDNN_STATUS_SUCCESS) ::worker::gpu::throw_cudnn(e_, #call, __FILE__, __LINE__); \
  } while (0)
#define CUBLAS_CHECK(call)                                                                       \
  do {                                                                                           \
    cublasStatus_t e_ = (call);                                                                  \
    if (e_ != CUBLAS_STATUS_SUCCESS) ::worker::gpu::throw_cublas(e_, #call, __FILE__, __LINE__); \
  } while (0)
#define NCCL_CHECK(call)                                                                \
  do {                                                                                  \
    ncclResult_t e_ = (call);                                                           \
    if (e_ != ncclSuccess && e_ != ncclInProgress)                                      \
      ::worker::gpu::throw_nccl(e_, #call, __FILE__, __LINE__);                         \
  } while (0)
// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())
