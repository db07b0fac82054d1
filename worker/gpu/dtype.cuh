// Device-side helpers shared by the kernels: conversions between the compute dtypes and float,
// and 16-byte vectors of them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace worker {
namespace gpu {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

// V elements of T loaded or stored as one access (16 bytes when V = 16 / sizeof(T)).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_f(const T* p, float (&out)[V]) {
  const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f(a.v[i]);
}

// Raw vector load, converted later: keeps several loads in flight in few registers.
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_v(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void to_f(const Vec<T, V>& a, float (&out)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f(a.v[i]);
}

template <typename T, int V>
__device__ __forceinline__ void store_f(T* p, const float (&in)[V]) {
  Vec<T, V> a;
#pragma unroll
  for (int i = 0; i < V; ++i) a.v[i] = from_f<T>(in[i]);
  *reinterpret_cast<Vec<T, V>*>(p) = a;
}

}  // namespace gpu
}  // namespace worker

// Dispatch on the compute dtype: runs BODY with `T` bound to the element type.
#define WK_DISPATCH(dt, ...)                            \
  switch (dt) {                                         \
    case ::worker::DType::F32: {                        \
      using T = float;                                  \
      __VA_ARGS__;                                      \
      break;                                            \
    }                                                   \
    case ::worker::DType::BF16: {                       \
      using T = __nv_bfloat16;                          \
      __VA_ARGS__;                                      \
      break;                                            \
    }                                                   \
    case ::worker::DType::F16: {                        \
      using T = __half;                                 \
      __VA_ARGS__;                                      \
      break;                                            \
    }                                                   \
  }
