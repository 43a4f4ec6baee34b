// The memory-bound kernels of a training step, written here (no library provides them as one
// would run them): each moves a known number of bytes per element, the `bytes` of the CSV.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

namespace hetsim::calibrate::cuda {

struct MemoryKernelInfo {
  const char* name;
  const char* dtype;              // element type of the activations it touches
  int bytes_per_element;          // bytes read plus written per element
  std::int64_t element_multiple;  // element counts are rounded down to this (row width, vector)
};

// Row width of the normalisation and softmax kernels: a typical hidden size / sequence length.
inline constexpr std::int64_t kRowWidth = 4096;

inline constexpr MemoryKernelInfo kMemoryKernels[] = {
    {"copy", "bf16", 4, 8},               // read x, write y (16-byte vectors)
    {"layernorm", "bf16", 4, kRowWidth},  // read x, write y; gamma, beta stay in cache
    {"rmsnorm", "bf16", 4, kRowWidth},
    {"softmax", "bf16", 4, kRowWidth},  // nominal: read x, write y (the max pass rereads x)
    {"gelu", "bf16", 4, 8},
    {"swiglu", "bf16", 6, 8},        // read gate and up, write out
    {"dropout", "bf16", 5, 8},       // read x, write y and a byte mask
    {"residual_add", "bf16", 6, 8},  // read x and r, write y
    {"adam", "fp32", 28, 4},         // read p, g, m, v; write p, m, v
    {"reduce", "fp32", 4, 4},        // read x, one sum
};

// The entry for `name`; throws std::invalid_argument listing the valid names.
const MemoryKernelInfo& memory_kernel_info(const std::string& name);

// Enqueues kernel `name` over `elements` elements whose arrays are carved from `arena` (at least
// bytes_per_element * elements + 4 KiB, 256-byte aligned). `reduce_out` is one float.
void launch_memory_kernel(const std::string& name, void* arena, std::int64_t elements,
                          float* reduce_out, cudaStream_t stream);

// Row softmax over bf16 rows of `width` (in place allowed), scaled by `scale`; with `causal`,
// row r sees columns 0..(r % width) and the rest become 0 (the attention mask).
void launch_row_softmax(const void* in, void* out, std::int64_t rows, std::int64_t width,
                        float scale, bool causal, cudaStream_t stream);

// Softmax backward over bf16 rows: dx = p * (dy - sum(p * dy)) * scale, written over dy.
void launch_row_softmax_backward(const void* p, void* dy, std::int64_t rows, std::int64_t width,
                                 float scale, cudaStream_t stream);

}  // namespace hetsim::calibrate::cuda
