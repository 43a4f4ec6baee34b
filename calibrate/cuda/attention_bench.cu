// Attention points, bf16, BHSD. Each point first tries cuDNN's fused flash attention
// (cudnn_sdpa.h: the backend graph API, forward with the softmax statistics training keeps,
// backward from them); where cuDNN cannot build a plan, fails to execute one, or cannot be loaded
// at all, the point measures the unfused path a framework takes without FlashAttention: cuBLASLt
// strided-batched GEMMs for QK^T and PV and the hetsim row softmax in between, the backward pass
// reusing the saved probabilities P (no recomputation). The unfused path materialises the scores,
// so it is slower than a fused kernel at long sequences. The CSV name column says which one a row
// measured
// ("cudnn" or "unfused"); the provenance line `attention_impl` says the same.
//
// Unfused layout per (sample, head): Q, K, V, O row-major [seq][head_dim], which cuBLAS sees as
// column-major head_dim x seq; scores row-major [seq][seq].
//   forward:  S^T = K^T Q (TN, m=S n=S k=d);  P = softmax(S / sqrt(d));
//             O^T = V P^T (NN, m=d n=S k=S)
//   backward: dV^T = dO^T P (NT);  dP^T = V^T dO (TN);  dS = P (dP - rowsum(P dP));
//             dQ^T = K^T dS^T (NN);  dK^T = Q^T dS (NT)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#ifdef HETSIM_CALIBRATE_CUDNN
#include <cudnn_graph.h>
#endif

#include "bench.h"
#include "check.h"
#ifdef HETSIM_CALIBRATE_CUDNN
#include "cudnn_sdpa.h"
#endif
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
  AttentionBench(const BenchContext& context, const std::vector<PlanItem>& items)
      : context_(context) {
    std::size_t tensor = 0, scores = 0, rows = 0;
    for (const PlanItem& item : items) {
      const Key& k = item.key;
      tensor =
          std::max(tensor, static_cast<std::size_t>(k.batch * k.heads * k.seq * k.head_dim) * 2);
      scores = std::max(scores, static_cast<std::size_t>(k.batch * k.heads * k.seq * k.seq) * 2);
      rows = std::max(rows, static_cast<std::size_t>(k.batch * k.heads * k.seq));
    }
    for (DeviceBuffer& t : tensors_) {
      t = DeviceBuffer(tensor);
      fill_random(GemmType::bf16, t.get(), tensor / 2, static_cast<std::uint32_t>(&t - tensors_),
                  context_.stream);
    }
    p_ = DeviceBuffer(scores);
    dp_ = DeviceBuffer(scores);
    fill_random(GemmType::bf16, dp_.get(), scores / 2, 99u, context_.stream);
    stats_ = DeviceBuffer(rows * sizeof(float));
    workspace_ = DeviceBuffer(LtMatmul::kWorkspaceBytes);
    CHECK_CUDA(cudaStreamSynchronize(context_.stream));
    CHECK_CUBLAS(cublasLtCreate(&handle_));
#ifdef HETSIM_CALIBRATE_CUDNN
    if (!context_.cudnn) {
      std::fprintf(stderr, "attention: --no-cudnn: measuring the UNFUSED path for every point\n");
      return;
    }
    const cudnnStatus_t status = cudnnCreate(&cudnn_);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnn_ = nullptr;
      std::fprintf(stderr,
                   "attention: cuDNN unavailable (cudnnCreate: %s); measuring the UNFUSED path for "
                   "every point\n",
                   cudnnGetErrorString(status));
    }
#else
    std::fprintf(stderr,
                 "attention: built without cuDNN (not found at configure time); measuring the "
                 "UNFUSED path for every point\n");
#endif
  }
  ~AttentionBench() override {
#ifdef HETSIM_CALIBRATE_CUDNN
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
#endif
    cublasLtDestroy(handle_);
  }

  std::optional<Stats> measure(const Key& key) override {
#ifdef HETSIM_CALIBRATE_CUDNN
    if (cudnn_ != nullptr) {
      std::string reason;
      if (std::optional<Stats> stats = measure_fused(key, &reason)) return stats;
      std::fprintf(stderr, "%s: cuDNN fused SDPA failed (%s); measuring the UNFUSED path\n",
                   key.label().c_str(), reason.c_str());
    }
#endif
    std::optional<Stats> stats = measure_unfused(key);
    if (stats) stats->impl = "unfused";
    return stats;
  }

 private:
#ifdef HETSIM_CALIBRATE_CUDNN
  // cuDNN's fused forward or backward pass; nullopt with `reason` when it has no plan for the
  // point or its plan fails to execute (tried once, untimed, before the timed repetitions).
  std::optional<Stats> measure_fused(const Key& key, std::string* reason) {
    SdpaShape shape;
    shape.batch = key.batch;
    shape.heads = key.heads;
    shape.seq = key.seq;
    shape.head_dim = key.head_dim;
    shape.causal = key.causal != 0;
    const CudnnSdpa forward(cudnn_, shape);
    if (!forward.supported()) {
      *reason = forward.reason();
      return std::nullopt;
    }
    SdpaBuffers buffers;
    buffers.q = tensors_[0].get();
    buffers.k = tensors_[1].get();
    buffers.v = tensors_[2].get();
    buffers.o = tensors_[3].get();
    buffers.dout = tensors_[4].get();
    buffers.dq = tensors_[5].get();
    buffers.dk = tensors_[6].get();
    buffers.dv = tensors_[7].get();
    buffers.stats = stats_.get();
    cudaStream_t stream = context_.stream;

    // One untimed execution: a status error falls back to the unfused path. (A fault inside a
    // kernel is sticky and ends the program: run_gpu.sh then resumes with --no-cudnn.)
    const auto execute = [&](const CudnnSdpa& pass, void* ws, const char* what) {
      const cudnnStatus_t status = pass.try_run(buffers, ws, stream);
      if (status != CUDNN_STATUS_SUCCESS) {
        *reason = std::string(what) + " execute: " + cudnn_status_text(status);
        return false;
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      return true;
    };
    std::optional<Stats> stats;
    if (!key.backward) {
      void* ws = workspace(forward.workspace_bytes());
      if (!execute(forward, ws, "forward")) return std::nullopt;
      // The softmax statistics are written as in training: part of the timed kernel.
      stats = context_.timer->measure([&] { forward.run(buffers, ws, stream); });
    } else {
      shape.backward = true;
      const CudnnSdpa backward(cudnn_, shape);
      if (!backward.supported()) {
        *reason = "backward: " + backward.reason();
        return std::nullopt;
      }
      void* ws = workspace(std::max(forward.workspace_bytes(), backward.workspace_bytes()));
      // O and the statistics the backward pass reads come from one forward pass.
      if (!execute(forward, ws, "forward") || !execute(backward, ws, "backward"))
        return std::nullopt;
      stats = context_.timer->measure([&] { backward.run(buffers, ws, stream); });
    }
    stats->impl = "cudnn";
    return stats;
  }
#endif

  // The workspace, grown (never shrunk) to at least `bytes`.
  void* workspace(std::size_t bytes) {
    if (workspace_.bytes() < bytes) {
      workspace_ = DeviceBuffer();  // free first: the two need not fit together
      workspace_ = DeviceBuffer(bytes);
    }
    return workspace_.get();
  }

  std::optional<Stats> measure_unfused(const Key& key) {
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

  BenchContext context_;
  cublasLtHandle_t handle_ = nullptr;
#ifdef HETSIM_CALIBRATE_CUDNN
  cudnnHandle_t cudnn_ = nullptr;  // null when cuDNN could not be loaded: every point unfused
#endif
  DeviceBuffer tensors_[8];  // q, k, v, o, dO, dQ, dK, dV
  DeviceBuffer p_, dp_;      // unfused: probabilities and their gradient
  DeviceBuffer stats_;       // fused: FP32 softmax statistics [B, H, S]
  DeviceBuffer workspace_;   // cuBLASLt's, and cuDNN's (grown as a plan needs)
};
}  // namespace

std::unique_ptr<Bench> make_attention_bench(const BenchContext& context,
                                            const std::vector<PlanItem>& items) {
  return std::make_unique<AttentionBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
