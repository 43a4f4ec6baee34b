// The memory-bound kernels of a training step, in plain C++ over float buffers, for the CPU
// calibration backend: each moves a known number of bytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hetsim::calibrate::cpu {

// The kernel names of the database's /memory groups.
const std::vector<std::string>& memory_kernels();

// Runs `kernel` over buffers sized for `bytes` moved in total; returns a checksum so that the
// compiler cannot drop the work.
double run_memory_kernel(const std::string& kernel, std::vector<float>& a, std::vector<float>& b,
                         std::vector<float>& c, size_t elements);

// Elements per buffer so that the kernel moves `bytes` (reads plus writes).
size_t elements_for(const std::string& kernel, double bytes);

}  // namespace hetsim::calibrate::cpu
