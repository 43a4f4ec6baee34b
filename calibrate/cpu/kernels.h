// The kernels of a training step for the CPU calibration backend, in plain C++ over float
// buffers: the memory-bound ones (each moves a known number of bytes), and OpenBLAS GEMMs,
// unfused attention and convolutions (im2col).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/workload/model/ops.h"

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

// A 2-D convolution in fp32, NCHW, cross-correlation (as cuDNN computes it), image by image
// through im2col and OpenBLAS: forward Y_i (k x pq) = W (k x crs) . col(X_i) (crs x pq);
// data gradient col = W^T . dY_i, then col2im adds it into dX_i; weight gradient
// dW += dY_i . col(X_i)^T over the images. A 1x1 filter of stride 1 without padding reads X_i as
// its own column matrix (no im2col). `col` holds conv_col_elements(shape) floats.
size_t conv_col_elements(const workload::ConvShape& shape);
void conv_forward(const workload::ConvShape& shape, const float* x, const float* w, float* y,
                  float* col);
void conv_data_grad(const workload::ConvShape& shape, const float* dy, const float* w, float* dx,
                    float* col);
void conv_weight_grad(const workload::ConvShape& shape, const float* x, const float* dy, float* dw,
                      float* col);

// The buffers of one convolution (synthetic contents) and its pass, run repeatedly.
class Conv {
 public:
  explicit Conv(const workload::ConvShape& shape);
  double run();  // the shape's pass; returns a checksum

 private:
  workload::ConvShape shape_;
  std::vector<float> x_, w_, y_, col_;  // input (or its gradient), filters (or theirs), output
};

}  // namespace hetsim::calibrate::cpu
