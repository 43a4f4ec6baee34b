// Memory-bound kernels: straightforward, coalesced, elementwise ones in 16-byte vectors; one
// block per row for the row-wise ones. They stand for what a framework runs, not for the fastest possible.
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

// Eight bf16 values moved as one 16-byte load or store, as frameworks' elementwise kernels move
// them (PyTorch's vectorised loops, Megatron's fused kernels); the element counts of these
// kernels are multiples of 8 (kMemoryKernels). Scalar 2-byte loads reached 1.8-2.5 TB/s on an
// H200 where a copy reaches 3.9 (experiments/h200-calibration/README.md).
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

__global__ void gelu_kernel(const Bf16x8* in, Bf16x8* out, std::int64_t vectors) {
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) {
    const Bf16x8 a = in[i];
    Bf16x8 y;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float x = __bfloat162float(a.v[j]);
      const float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));  // tanh approximation
      y.v[j] = __float2bfloat16(0.5f * x * (1.0f + t));
    }
    out[i] = y;
  }
}

__global__ void swiglu_kernel(const Bf16x8* gate, const Bf16x8* up, Bf16x8* out,
                              std::int64_t vectors) {
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) {
    const Bf16x8 g8 = gate[i], u8 = up[i];
    Bf16x8 y;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float g = __bfloat162float(g8.v[j]);
      y.v[j] = __float2bfloat16(g / (1.0f + __expf(-g)) * __bfloat162float(u8.v[j]));
    }
    out[i] = y;
  }
}

__global__ void dropout_kernel(const Bf16x8* in, Bf16x8* out, uint2* mask, std::int64_t vectors,
                               float p, std::uint32_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) {
    const Bf16x8 a = in[i];
    Bf16x8 y;
    union {
      std::uint8_t b[8];
      uint2 word;
    } m;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool keep = hash_uniform(i * 8 + j, seed) >= p;
      m.b[j] = keep;
      y.v[j] = __float2bfloat16(keep ? __bfloat162float(a.v[j]) * keep_scale : 0.0f);
    }
    out[i] = y;
    mask[i] = m.word;
  }
}

__global__ void residual_add_kernel(const Bf16x8* x, const Bf16x8* r, Bf16x8* out,
                                    std::int64_t vectors) {
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) {
    const Bf16x8 a = x[i], b = r[i];
    Bf16x8 y;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      y.v[j] = __float2bfloat16(__bfloat162float(a.v[j]) + __bfloat162float(b.v[j]));
    out[i] = y;
  }
}

// Four fp32 values of each tensor per 16-byte load (element counts are multiples of 4).
__global__ void adam_kernel(float4* p, const float4* g, float4* m, float4* v,
                            std::int64_t vectors) {
  constexpr float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, decay = 0.1f;
  for (std::int64_t i = global_index(); i < vectors; i += global_stride()) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    float* pp = &pi.x;
    float* mp = &mi.x;
    float* vp = &vi.x;
    const float* gp = &gi.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mp[j] = beta1 * mp[j] + (1 - beta1) * gp[j];
      vp[j] = beta2 * fabsf(vp[j]) + (1 - beta2) * gp[j] * gp[j];
      pp[j] -= lr * (mp[j] * rsqrtf(vp[j] + eps) + decay * pp[j]);
    }
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
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
    const std::int64_t vectors = n / 8;
    const Bf16x8* in = carve.take<Bf16x8>(vectors);
    gelu_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(in, carve.take<Bf16x8>(vectors),
                                                            vectors);
  } else if (name == "swiglu") {
    const std::int64_t vectors = n / 8;
    const Bf16x8* gate = carve.take<Bf16x8>(vectors);
    const Bf16x8* up = carve.take<Bf16x8>(vectors);
    swiglu_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(gate, up,
                                                              carve.take<Bf16x8>(vectors), vectors);
  } else if (name == "dropout") {
    const std::int64_t vectors = n / 8;
    const Bf16x8* in = carve.take<Bf16x8>(vectors);
    Bf16x8* out = carve.take<Bf16x8>(vectors);
    dropout_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(in, out, carve.take<uint2>(vectors),
                                                               vectors, 0.1f, 1234u);
  } else if (name == "residual_add") {
    const std::int64_t vectors = n / 8;
    const Bf16x8* x = carve.take<Bf16x8>(vectors);
    const Bf16x8* r = carve.take<Bf16x8>(vectors);
    residual_add_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(x, r,
                                                                    carve.take<Bf16x8>(vectors),
                                                                    vectors);
  } else if (name == "adam") {
    const std::int64_t vectors = n / 4;
    float4* p = carve.take<float4>(vectors);
    const float4* g = carve.take<float4>(vectors);
    float4* m = carve.take<float4>(vectors);
    adam_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(p, g, m, carve.take<float4>(vectors),
                                                            vectors);
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
