#include "worker/gpu/device.h"

#include "worker/gpu/check.h"

#include <chrono>

namespace worker {
namespace gpu {

Device::Device(int device, DevicePool& pool) : ordinal(device) {
  auto t = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    const auto now = std::chrono::steady_clock::now();
    startup.emplace_back(what, std::chrono::duration<double>(now - t).count());
    t = now;
  };
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  phase("cuda");
  if (e != cudaSuccess || count == 0)
    throw GpuError(GpuError::Kind::Cuda,
                   std::string("no usable GPU (") + (e == cudaSuccess ? "none visible" : cudaGetErrorString(e)) +
                       ", " + where() + "): use --device cpu, or check CUDA_VISIBLE_DEVICES / FLAGS_selected_gpus");
  if (device < 0 || device >= count)
    throw GpuError(GpuError::Kind::Invalid, "GPU " + std::to_string(device) +
                                                " requested but this process sees " +
                                                std::to_string(count) + " (" + where() + ")");
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name = prop.name;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  phase("context");
  CUDNN_CHECK(cudnnCreate(&cudnn));
  CUDNN_CHECK(cudnnSetStream(cudnn, stream));
  phase("cudnn");
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, pool.alloc(kCublasWorkspace), kCublasWorkspace));
  CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
  phase("cublas");
}

void Device::wait() {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ++host_waits;
}

Device::~Device() {
  if (cublas) cublasDestroy(cublas);
  if (cudnn) cudnnDestroy(cudnn);
  if (stream) cudaStreamDestroy(stream);
}

}  // namespace gpu
}  // namespace worker
