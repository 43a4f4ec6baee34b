// Memory-bound kernels: straightforward, coalesced, vectorised where it is free; one block per
// row for the row-wise ones. They stand for what a framework runs, not for the fastest possible.
#include "memory_kernels.h"

#include <stdexcept>

#include <cuda_bf16.h>

#include "check.h"

namespace hetsim::calibrate::cuda {

const MemoryKernelInfo& memory_kernel_info(const std::string& name) {
  std::string valid;
  for (const MemoryKernelInfo& info : kMemoryKernels) {
    if (name == info.name) return info;
    valid += valid.empty() ? info.name : std::string(", ") + info.name;
  }
  throw std::invalid_argument("unknown memory kernel \"" + name + "\" (expected one of " + valid + ")");
}

namespace {
using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kGridCap = 132 * 16;  // enough blocks to fill any current GPU; loops cover the rest

int grid_for(std::int64_t work) {
  const std::int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kGridCap ? (blocks > 0 ? blocks : 1) : kGridCap);
}

__device__ std::int64_t global_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::int64_t global_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

__device__ float hash_uniform(std::int64_t i, std::uint32_t seed) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9e3779b9u ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x) * (1.0f / 4294967296.0f);
}

// Sum (or max) over the block; every thread gets the result. blockDim.x == kThreads.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

__global__ void copy_kernel(const uint4* in, uint4* out, std::int64_t vectors) {
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) out[i] = in[i];
}

// One block per row of kRowWidth; each thread keeps its kRowWidth / kThreads values in registers.
template <bool kRms>
__global__ void norm_kernel(const bf16* in, bf16* out, std::int64_t rows) {
  constexpr int kPer = static_cast<int>(kRowWidth) / kThreads;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const bf16* x = in + row * kRowWidth;
    float v[kPer];
    float sum = 0, sum_sq = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      v[j] = __bfloat162float(x[threadIdx.x + j * kThreads]);
      sum += v[j];
      sum_sq += v[j] * v[j];
    }
    const float mean = kRms ? 0.0f : block_reduce<false>(sum) / kRowWidth;
    const float mean_sq = block_reduce<false>(sum_sq) / kRowWidth;
    const float inv = rsqrtf(mean_sq - mean * mean + 1e-5f);
    bf16* y = out + row * kRowWidth;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int col = threadIdx.x + j * kThreads;
      const float gamma = 1.0f + 1e-3f * (col & 7), beta = kRms ? 0.0f : 1e-3f * (col & 3);
      y[col] = __float2bfloat16((v[j] - mean) * inv * gamma + beta);
    }
  }
}

// Online max/sum per thread, merged over the block, then a second pass writes.
__global__ void softmax_kernel(const bf16* in, bf16* out, std::int64_t rows, std::int64_t width,
                               float scale, bool causal) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const bf16* x = in + row * width;
    bf16* y = out + row * width;
    const std::int64_t valid = causal ? (row % width) + 1 : width;
    float m = -INFINITY, s = 0;
    for (std::int64_t c = threadIdx.x; c < valid; c += blockDim.x) {
      const float v = __bfloat162float(x[c]) * scale;
      if (v > m) {
        s = s * __expf(m - v) + 1.0f;
        m = v;
      } else {
        s += __expf(v - m);
      }
    }
    const float row_max = block_reduce<true>(m);
    const float row_sum = block_reduce<false>(m == -INFINITY ? 0.0f : s * __expf(m - row_max));
    const float inv = 1.0f / row_sum;
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
      y[c] = __float2bfloat16(c < valid ? __expf(__bfloat162float(x[c]) * scale - row_max) * inv : 0.0f);
  }
}

__global__ void softmax_backward_kernel(const bf16* p, bf16* dy, std::int64_t rows,
                                        std::int64_t width, float scale) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const bf16* pr = p + row * width;
    bf16* g = dy + row * width;
    float dot = 0;
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
      dot += __bfloat162float(pr[c]) * __bfloat162float(g[c]);
    dot = block_reduce<false>(dot);
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x)
      g[c] = __float2bfloat16(__bfloat162float(pr[c]) * (__bfloat162float(g[c]) - dot) * scale);
  }
}

__global__ void gelu_kernel(const bf16* in, bf16* out, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const float x = __bfloat162float(in[i]);
    const float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));  // tanh approximation
    out[i] = __float2bfloat16(0.5f * x * (1.0f + t));
  }
}

__global__ void swiglu_kernel(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const float g = __bfloat162float(gate[i]);
    out[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * __bfloat162float(up[i]));
  }
}

__global__ void dropout_kernel(const bf16* in, bf16* out, std::uint8_t* mask, std::int64_t n,
                               float p, std::uint32_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const bool keep = hash_uniform(i, seed) >= p;
    mask[i] = keep;
    out[i] = __float2bfloat16(keep ? __bfloat162float(in[i]) * keep_scale : 0.0f);
  }
}

__global__ void residual_add_kernel(const bf16* x, const bf16* r, bf16* out, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    out[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(r[i]));
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, std::int64_t n) {
  constexpr float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, decay = 0.1f;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const float grad = g[i];
    const float mi = beta1 * m[i] + (1 - beta1) * grad;
    const float vi = beta2 * fabsf(v[i]) + (1 - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * rsqrtf(vi + eps) + decay * p[i]);
  }
}

__global__ void reduce_kernel(const float* x, std::int64_t n, float* out) {
  float s = 0;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) s += x[i];
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

// Carves consecutive 256-byte-aligned arrays out of the arena.
struct Carver {
  char* next;
  template <class T>
  T* take(std::int64_t count) {
    T* p = reinterpret_cast<T*>(next);
    next += (static_cast<std::int64_t>(sizeof(T)) * count + 255) / 256 * 256;
    return p;
  }
};
}  // namespace

void launch_memory_kernel(const std::string& name, void* arena, std::int64_t n, float* reduce_out,
                          cudaStream_t stream) {
  Carver carve{static_cast<char*>(arena)};
  const int grid = grid_for(n);
  if (name == "copy") {
    const std::int64_t vectors = n * 2 / 16;  // n bf16 elements in 16-byte vectors
    const uint4* in = carve.take<uint4>(vectors);
    copy_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(in, carve.take<uint4>(vectors), vectors);
  } else if (name == "layernorm" || name == "rmsnorm") {
    const std::int64_t rows = n / kRowWidth;
    const bf16* in = carve.take<bf16>(n);
    bf16* out = carve.take<bf16>(n);
    const int blocks = static_cast<int>(rows < kGridCap ? rows : kGridCap);
    if (name == "layernorm") norm_kernel<false><<<blocks, kThreads, 0, stream>>>(in, out, rows);
    else norm_kernel<true><<<blocks, kThreads, 0, stream>>>(in, out, rows);
  } else if (name == "softmax") {
    const bf16* in = carve.take<bf16>(n);
    launch_row_softmax(in, carve.take<bf16>(n), n / kRowWidth, kRowWidth, 1.0f, false, stream);
    return;
  } else if (name == "gelu") {
    const bf16* in = carve.take<bf16>(n);
    gelu_kernel<<<grid, kThreads, 0, stream>>>(in, carve.take<bf16>(n), n);
  } else if (name == "swiglu") {
    const bf16* gate = carve.take<bf16>(n);
    const bf16* up = carve.take<bf16>(n);
    swiglu_kernel<<<grid, kThreads, 0, stream>>>(gate, up, carve.take<bf16>(n), n);
  } else if (name == "dropout") {
    const bf16* in = carve.take<bf16>(n);
    bf16* out = carve.take<bf16>(n);
    dropout_kernel<<<grid, kThreads, 0, stream>>>(in, out, carve.take<std::uint8_t>(n), n, 0.1f, 1234u);
  } else if (name == "residual_add") {
    const bf16* x = carve.take<bf16>(n);
    const bf16* r = carve.take<bf16>(n);
    residual_add_kernel<<<grid, kThreads, 0, stream>>>(x, r, carve.take<bf16>(n), n);
  } else if (name == "adam") {
    float* p = carve.take<float>(n);
    const float* g = carve.take<float>(n);
    float* m = carve.take<float>(n);
    adam_kernel<<<grid, kThreads, 0, stream>>>(p, g, m, carve.take<float>(n), n);
  } else if (name == "reduce") {
    CHECK_CUDA(cudaMemsetAsync(reduce_out, 0, sizeof(float), stream));
    reduce_kernel<<<grid, kThreads, 0, stream>>>(carve.take<float>(n), n, reduce_out);
  } else {
    memory_kernel_info(name);  // throws with the list of valid names
  }
  CHECK_LAUNCH();
}

void launch_row_softmax(const void* in, void* out, std::int64_t rows, std::int64_t width,
                        float scale, bool causal, cudaStream_t stream) {
  const int blocks = static_cast<int>(rows < kGridCap * 4 ? rows : kGridCap * 4);
  softmax_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16*>(in),
                                                  static_cast<bf16*>(out), rows, width, scale, causal);
  CHECK_LAUNCH();
}

void launch_row_softmax_backward(const void* p, void* dy, std::int64_t rows, std::int64_t width,
                                 float scale, cudaStream_t stream) {
  const int blocks = static_cast<int>(rows < kGridCap * 4 ? rows : kGridCap * 4);
  softmax_backward_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16*>(p),
                                                           static_cast<bf16*>(dy), rows, width, scale);
  CHECK_LAUNCH();
}

}  // namespace hetsim::calibrate::cuda
