// Attention points, unfused (the path a framework takes without FlashAttention): cuBLASLt
// strided-batched GEMMs for QK^T and PV and the hetsim row softmax in between; the backward
// pass reuses the saved probabilities P (no recomputation). Scores are materialised, so this is
// slower than a fused kernel at long sequences; the provenance line `attention_impl` says so.
//
// Layout per (sample, head): Q, K, V, O row-major [seq][head_dim], which cuBLAS sees as
// column-major head_dim x seq; scores row-major [seq][seq].
//   forward:  S^T = K^T Q (TN, m=S n=S k=d);  P = softmax(S / sqrt(d));  O^T = V P^T (NN, m=d n=S k=S)
//   backward: dV^T = dO^T P (NT);  dP^T = V^T dO (TN);  dS = P (dP - rowsum(P dP));
//             dQ^T = K^T dS^T (NN);  dK^T = Q^T dS (NT)
#include <algorithm>
#include <cmath>
#include <memory>

#include "bench.h"
#include "check.h"
#include "device_buffer.h"
#include "fill.h"
#include "lt_matmul.h"
#include "memory_kernels.h"

namespace hetsim::calibrate::cuda {

namespace {
GemmShape batched(cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
                  std::int64_t k, std::int64_t lda, std::int64_t ldb, std::int64_t ldc,
                  std::int64_t batch, std::int64_t sa, std::int64_t sb, std::int64_t sc) {
  GemmShape s;
  s.transa = ta;
  s.transb = tb;
  s.m = m;
  s.n = n;
  s.k = k;
  s.lda = lda;
  s.ldb = ldb;
  s.ldc = ldc;
  s.batch = batch;
  s.stride_a = sa;
  s.stride_b = sb;
  s.stride_c = sc;
  return s;
}

class AttentionBench final : public Bench {
 public:
  AttentionBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    std::size_t tensor = 0, scores = 0;
    for (const PlanItem& item : items) {
      const Key& k = item.key;
      tensor = std::max(tensor, static_cast<std::size_t>(k.batch * k.heads * k.seq * k.head_dim) * 2);
      scores = std::max(scores, static_cast<std::size_t>(k.batch * k.heads * k.seq * k.seq) * 2);
    }
    for (DeviceBuffer& t : tensors_) {
      t = DeviceBuffer(tensor);
      fill_random(GemmType::bf16, t.get(), tensor / 2, static_cast<std::uint32_t>(&t - tensors_), context_.stream);
    }
    p_ = DeviceBuffer(scores);
    dp_ = DeviceBuffer(scores);
    fill_random(GemmType::bf16, dp_.get(), scores / 2, 99u, context_.stream);
    workspace_ = DeviceBuffer(LtMatmul::kWorkspaceBytes);
    CHECK_CUDA(cudaStreamSynchronize(context_.stream));
    CHECK_CUBLAS(cublasLtCreate(&handle_));
  }
  ~AttentionBench() override { cublasLtDestroy(handle_); }

  std::optional<Stats> measure(const Key& key) override {
    const std::int64_t S = key.seq, d = key.head_dim, B = key.batch * key.heads;
    const std::int64_t sd = S * d, ss = S * S;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    void *q = tensors_[0].get(), *k = tensors_[1].get(), *v = tensors_[2].get();
    void *o = tensors_[3].get(), *dout = tensors_[4].get();
    void *dq = tensors_[5].get(), *dk = tensors_[6].get(), *dv = tensors_[7].get();
    void *p = p_.get(), *dp = dp_.get();
    cudaStream_t stream = context_.stream;
    void* ws = workspace_.get();
    const auto T = CUBLAS_OP_T, N = CUBLAS_OP_N;

    if (!key.backward) {
      const LtMatmul qk(handle_, GemmType::bf16, batched(T, N, S, S, d, d, d, S, B, sd, sd, ss));
      const LtMatmul pv(handle_, GemmType::bf16, batched(N, N, d, S, S, d, S, d, B, sd, ss, sd));
      if (!qk.supported() || !pv.supported()) return std::nullopt;
      return context_.timer->measure([&] {
        qk.run(k, q, p, ws, stream);
        launch_row_softmax(p, p, B * S, S, scale, key.causal != 0, stream);
        pv.run(v, p, o, ws, stream);
      });
    }
    // P must hold probabilities (with the causal zeros) before the backward pass is timed.
    {
      const LtMatmul qk(handle_, GemmType::bf16, batched(T, N, S, S, d, d, d, S, B, sd, sd, ss));
      if (!qk.supported()) return std::nullopt;
      qk.run(k, q, p, ws, stream);
      launch_row_softmax(p, p, B * S, S, scale, key.causal != 0, stream);
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    const LtMatmul grad_v(handle_, GemmType::bf16, batched(N, T, d, S, S, d, S, d, B, sd, ss, sd));
    const LtMatmul grad_p(handle_, GemmType::bf16, batched(T, N, S, S, d, d, d, S, B, sd, sd, ss));
    const LtMatmul grad_q(handle_, GemmType::bf16, batched(N, N, d, S, S, d, S, d, B, sd, ss, sd));
    const LtMatmul grad_k(handle_, GemmType::bf16, batched(N, T, d, S, S, d, S, d, B, sd, ss, sd));
    if (!grad_v.supported() || !grad_p.supported() || !grad_q.supported() || !grad_k.supported())
      return std::nullopt;
    return context_.timer->measure([&] {
      grad_v.run(dout, p, dv, ws, stream);
      grad_p.run(v, dout, dp, ws, stream);
      launch_row_softmax_backward(p, dp, B * S, S, scale, stream);
      grad_q.run(k, dp, dq, ws, stream);
      grad_k.run(q, dp, dk, ws, stream);
    });
  }

 private:
  BenchContext context_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer tensors_[8];  // q, k, v, o, dO, dQ, dK, dV
  DeviceBuffer p_, dp_, workspace_;
};
}  // namespace

std::unique_ptr<Bench> make_attention_bench(const BenchContext& context,
                                            const std::vector<PlanItem>& items) {
  return std::make_unique<AttentionBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
