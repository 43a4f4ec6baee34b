// Pseudo-random device data for benchmark inputs: constant or zero inputs draw less power and
// inflate results (hardware.md §5, [mle-bench]).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "lt_matmul.h"

namespace hetsim::calibrate::cuda {

// Fills `count` elements of the GEMM input type with values uniform in [-1, 1).
void fill_random(GemmType type, void* data, std::size_t count, std::uint32_t seed,
                 cudaStream_t stream);

}  // namespace hetsim::calibrate::cuda
