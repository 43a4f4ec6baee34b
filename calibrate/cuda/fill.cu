// Hash-based random fill kernels, one per element type.
#include "fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "check.h"

namespace hetsim::calibrate::cuda {

namespace {
__device__ float uniform_pm1(std::size_t i, std::uint32_t seed) {
  // A 32-bit integer hash (the "lowbias32" constants) of index and seed.
  std::uint32_t x = static_cast<std::uint32_t>(i) ^ (static_cast<std::uint32_t>(i >> 32) * 0x9e3779b9u) ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x) * (2.0f / 4294967296.0f) - 1.0f;
}

template <class T>
__global__ void fill_kernel(T* data, std::size_t count, std::uint32_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    data[i] = static_cast<T>(uniform_pm1(i, seed));
}

template <class T>
void launch_fill(void* data, std::size_t count, std::uint32_t seed, cudaStream_t stream) {
  fill_kernel<T><<<4096, 256, 0, stream>>>(static_cast<T*>(data), count, seed);
  CHECK_LAUNCH();
}
}  // namespace

void fill_random(GemmType type, void* data, std::size_t count, std::uint32_t seed,
                 cudaStream_t stream) {
  switch (type) {
    case GemmType::fp32:
    case GemmType::tf32: launch_fill<float>(data, count, seed, stream); break;
    case GemmType::fp16: launch_fill<__half>(data, count, seed, stream); break;
    case GemmType::bf16: launch_fill<__nv_bfloat16>(data, count, seed, stream); break;
    case GemmType::fp8: launch_fill<__nv_fp8_e4m3>(data, count, seed, stream); break;
  }
}

}  // namespace hetsim::calibrate::cuda
