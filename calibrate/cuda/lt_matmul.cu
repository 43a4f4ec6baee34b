// cuBLASLt descriptors, heuristic algorithm choice and launch for one matrix multiply.
#include "lt_matmul.h"

#include <stdexcept>

#include "check.h"

namespace hetsim::calibrate::cuda {

GemmType gemm_type_from_name(const std::string& name) {
  if (name == "fp32") return GemmType::fp32;
  if (name == "tf32") return GemmType::tf32;
  if (name == "fp16") return GemmType::fp16;
  if (name == "bf16") return GemmType::bf16;
  if (name == "fp8") return GemmType::fp8;
  throw std::invalid_argument("unknown GEMM type \"" + name + "\" (expected fp32, tf32, fp16, bf16, fp8)");
}

std::size_t input_element_bytes(GemmType type) {
  switch (type) {
    case GemmType::fp32:
    case GemmType::tf32: return 4;
    case GemmType::fp16:
    case GemmType::bf16: return 2;
    case GemmType::fp8: return 1;
  }
  return 4;
}

std::size_t output_element_bytes(GemmType type) {
  return type == GemmType::fp32 || type == GemmType::tf32 ? 4 : 2;
}

GemmShape GemmShape::tn(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
  GemmShape s;
  s.transa = CUBLAS_OP_T;
  s.transb = CUBLAS_OP_N;
  s.m = m;
  s.n = n;
  s.k = k;
  s.lda = k;
  s.ldb = k;
  s.ldc = m;
  s.batch = batch;
  s.stride_a = m * k;
  s.stride_b = k * n;
  s.stride_c = m * n;
  return s;
}

namespace {
struct TypeSet {
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
};

TypeSet types_of(GemmType type) {
  switch (type) {
    case GemmType::fp32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case GemmType::tf32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    case GemmType::fp16: return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case GemmType::bf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case GemmType::fp8: return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  }
  return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                                   std::int64_t ld, std::int64_t batch, std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                          static_cast<std::uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof count));
    CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return layout;
}
}  // namespace

LtMatmul::LtMatmul(cublasLtHandle_t handle, GemmType type, const GemmShape& s) : handle_(handle) {
  const TypeSet t = types_of(type);
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc_, t.compute, CUDA_R_32F));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &s.transa,
                                              sizeof s.transa));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &s.transb,
                                              sizeof s.transb));
  // Layouts describe the matrices as stored, before op().
  const bool ta = s.transa != CUBLAS_OP_N, tb = s.transb != CUBLAS_OP_N;
  a_ = make_layout(t.ab, ta ? s.k : s.m, ta ? s.m : s.k, s.lda, s.batch, s.stride_a);
  b_ = make_layout(t.ab, tb ? s.n : s.k, tb ? s.k : s.n, s.ldb, s.batch, s.stride_b);
  c_ = make_layout(t.cd, s.m, s.n, s.ldc, s.batch, s.stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  const std::uint64_t workspace = kWorkspaceBytes;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, desc_, a_, b_, c_, c_, preference, 1, &heuristic_, &returned);
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(preference));
  // NOT_SUPPORTED means "no algorithm for this combination", a property of the shape, not an error.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) CHECK_CUBLAS(status);
  supported_ = status == CUBLAS_STATUS_SUCCESS && returned > 0 &&
               heuristic_.state == CUBLAS_STATUS_SUCCESS;
}

LtMatmul::~LtMatmul() {
  // Teardown: a failure to free a descriptor leaves nothing to recover.
  if (c_ != nullptr) cublasLtMatrixLayoutDestroy(c_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

void LtMatmul::run(const void* a, const void* b, void* d, void* workspace,
                   cudaStream_t stream) const {
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_CUBLAS(cublasLtMatmul(handle_, desc_, &alpha, a, a_, b, b_, &beta, d, c_, d, c_,
                              &heuristic_.algo, workspace, kWorkspaceBytes, stream));
}

}  // namespace hetsim::calibrate::cuda
