#include "worker/gpu/check.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "proto/worker_env.h"

namespace worker {
namespace gpu {

const std::string& where() {
  static const std::string w = [] {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '?';
    std::string who = "rank 0";
    try {
      who = proto::read_worker_env(proto::process_env()).who();
    } catch (const proto::EnvError&) {
      // train_resnet refused that environment at start-up already; any name will do here.
    }
    return who + " on host " + host;
  }();
  return w;
}

static std::string at(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line) + " (" + where() + ")";
}

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaErrorMemoryAllocation) {
    throw GpuError(GpuError::Kind::OutOfMemory,
                   "GPU out of memory: " + at(call, file, line) +
                       ": try a smaller --batch-size");
  }
  throw GpuError(GpuError::Kind::Cuda, std::string("CUDA error ") + cudaGetErrorName(e) + " (" +
                                           cudaGetErrorString(e) + "): " + at(call, file, line));
}

void throw_cudnn(cudnnStatus_t e, const char* call, const char* file, int line) {
  throw GpuError(GpuError::Kind::Cudnn,
                 std::string("cuDNN error ") + cudnnGetErrorString(e) + ": " + at(call, file, line));
}

void throw_cublas(cublasStatus_t e, const char* call, const char* file, int line) {
  throw GpuError(GpuError::Kind::Cublas, std::string("cuBLAS error ") + cublasGetStatusName(e) +
                                             " (" + cublasGetStatusString(e) +
                                             "): " + at(call, file, line));
}

void throw_nccl(ncclResult_t e, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw GpuError(GpuError::Kind::Nccl, std::string("NCCL error ") + ncclGetErrorString(e) +
                                           (last && *last ? std::string(" (") + last + ")" : "") +
                                           ": " + at(call, file, line));
}

void throw_oom(size_t bytes, size_t in_use, const char* file, int line) {
  char buf[512];
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  std::snprintf(buf, sizeof buf,
                "GPU out of memory: asked for %.1f MiB with %.1f MiB already in the pool and %.1f MiB "
                "free on the device, at %s:%d (%s): try a smaller --batch-size",
                bytes / 1048576.0, in_use / 1048576.0, free_b / 1048576.0, file, line,
                where().c_str());
  throw GpuError(GpuError::Kind::OutOfMemory, buf);
}

}  // namespace gpu
}  // namespace worker
