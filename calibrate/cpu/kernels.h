// The memory-bound kernels of a training step, in plain C++ over float buffers, for the CPU
// calibration backend: each moves a known number of bytes.
#pragma once

#include <cstddef>
#include <cstdint>
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

// C (m x n) = A (m x k) . B (k x n), row-major fp32 through OpenBLAS.
void gemm_fp32(int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
               const std::vector<float>& b, std::vector<float>& c);

// Unfused attention over `batch` x `heads` heads of `seq` x `head_dim`, in fp32 with OpenBLAS:
// forward S = Q K^T / sqrt(d), a (causally masked) row softmax P, O = P V (4 b h s^2 d FLOPs);
// backward dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO . O)), dQ = dS K, dK = dS^T Q
// (twice the forward's FLOPs; P is kept from the forward, as an unfused implementation does).
// The buffers are sized on first use and reused; the contents are synthetic.
class Attention {
 public:
  Attention(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal);
  double forward();   // returns a checksum
  double backward();  // returns a checksum

 private:
  int64_t heads_, s_, d_;
  bool causal_;
  std::vector<float> q_, k_, v_, o_, do_, dq_, dk_, dv_, p_, dp_;
};

}  // namespace hetsim::calibrate::cpu
