// One cuBLASLt matrix multiply, column-major as cuBLAS sees it: D = op(A) op(B), alpha 1,
// beta 0, FP32 accumulation, optionally strided-batched. Used by the GEMM sweep and the
// unfused attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace hetsim::calibrate::cuda {

enum class GemmType { fp32, tf32, fp16, bf16, fp8 };

// "fp32" ... "fp8"; throws std::invalid_argument naming the valid names.
GemmType gemm_type_from_name(const std::string& name);
// Bytes of one A/B element and of one C/D element (fp8 writes bf16).
std::size_t input_element_bytes(GemmType type);
std::size_t output_element_bytes(GemmType type);

struct GemmShape {
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;

  // The "TN" layout every sweep point uses (A stored k x m, B k x n, C m x n, packed): cuBLASLt's
  // FP8 kernels on Ada and Hopper require it, and it is the layout its fastest kernels favour.
  static GemmShape tn(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch);
};

class LtMatmul {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // NVIDIA's Hopper advice

  // Builds the descriptors and asks the heuristic for its best algorithm.
  LtMatmul(cublasLtHandle_t handle, GemmType type, const GemmShape& shape);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // False when cuBLASLt has no algorithm for this type and shape (the point is skipped).
  bool supported() const { return supported_; }
  void run(const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const;

 private:
  cublasLtHandle_t handle_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  bool supported_ = false;
};

}  // namespace hetsim::calibrate::cuda
