// hetsim-execute-cuda: runs the compute kernels of one device's training iteration (a program
// file from `hetsim execute --backend cuda --program-out FILE`, execute_program.h) on one GPU, in
// order, on one stream, and writes the measured iteration and per-op times as CSV
// (calibrate/README.md "Executing a plan on one GPU"). The kernels are the calibration's own:
// cuBLASLt GEMMs of the program's precision, cuDNN's fused attention where built and the op is
// fused (else the unfused cuBLASLt path with our softmax), our memory-bound kernels. Buffers are
// made once; W warm-up and K measured iterations are timed with CUDA events around each
// iteration, then one more iteration with events between every two ops.
//
// Exit status: 0 measured; 1 a CUDA, cuBLAS or cuDNN failure (check.h); 2 bad arguments or
// program; 3 no usable GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"
#ifdef HETSIM_CALIBRATE_CUDNN
#include "cudnn_sdpa.h"
#endif
#include "device_buffer.h"
#include "execute_program.h"
#include "fill.h"
#include "lt_matmul.h"
#include "memory_kernels.h"

namespace hetsim::calibrate::cuda {
namespace {

constexpr const char* kUsage =
    "usage: hetsim-execute-cuda --program FILE --out CSV [--iterations K] [--warmup W]\n"
    "                           [--device N] [--no-cudnn] [--dry-run]\n"
    "  --program FILE  the kernels of one device's iteration (hetsim execute --backend cuda\n"
    "                  --program-out FILE)\n"
    "  --out CSV       measured times: one row per iteration and one per op\n"
    "  --iterations K  measured iterations (default 10); --warmup W: before them (default 3)\n"
    "  --device N      the GPU (default 0); --no-cudnn: every attention op unfused\n"
    "  --dry-run       parse and validate the program, print what it would run; needs no GPU\n";

struct Options {
  std::string program, out;
  int iterations = 10, warmup = 3, device = 0;
  bool dry_run = false, cudnn = true;
};

int parse_count(const std::string& flag, const std::string& text, int lo, int hi) {
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < lo || v > hi)
    throw ProgramError(flag + ": expected a whole number from " + std::to_string(lo) + " to " +
                       std::to_string(hi) + ", got \"" + text + "\"");
  return v;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ProgramError(a + ": missing value");
      return argv[++i];
    };
    if (a == "--program")
      o.program = value();
    else if (a == "--out")
      o.out = value();
    else if (a == "--iterations")
      o.iterations = parse_count(a, value(), 1, 100000);
    else if (a == "--warmup")
      o.warmup = parse_count(a, value(), 0, 100000);
    else if (a == "--device")
      o.device = parse_count(a, value(), 0, 1023);
    else if (a == "--dry-run")
      o.dry_run = true;
    else if (a == "--no-cudnn")
      o.cudnn = false;
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else
      throw ProgramError("unknown argument \"" + a + "\"\n" + kUsage);
  }
  if (o.program.empty()) throw ProgramError(std::string("--program: required\n") + kUsage);
  if (o.out.empty() && !o.dry_run) throw ProgramError(std::string("--out: required\n") + kUsage);
  return o;
}

GemmType gemm_type_of(const std::string& precision) {
  // fp32 runs on TF32 tensor cores, as the calibration measures it and frameworks default to.
  return precision == "fp32" ? GemmType::tf32 : gemm_type_from_name(precision);
}

// Elements of a memory kernel moving `bytes` (rounded to what the kernel processes whole).
std::int64_t memory_elements(const ProgramOp& op) {
  const MemoryKernelInfo& info = memory_kernel_info(op.memory_kernel);
  const std::int64_t multiple = info.element_multiple;
  const auto raw = static_cast<std::int64_t>(op.bytes / info.bytes_per_element);
  return std::max(multiple, raw / multiple * multiple);
}

std::size_t attention_tensor_elements(const ProgramOp& op) {
  return static_cast<std::size_t>(op.batch * op.heads * op.seq * op.head_dim);
}
std::size_t attention_score_elements(const ProgramOp& op) {
  return static_cast<std::size_t>(op.batch * op.heads * op.seq * op.seq);
}
bool is_attention(const ProgramOp& op) {
  return op.kind == ProgramOpKind::attention_forward ||
         op.kind == ProgramOpKind::attention_backward;
}

// Device bytes the buffers take (attention's score buffers for the ops that are not fused).
struct Operands {
  std::size_t a = 0, b = 0, d = 0;
};
struct Sizes {
  std::map<GemmType, Operands> gemm;  // the GEMMs' operands, per precision they run at
  std::size_t tensor = 0, scores = 0, rows = 0, arena = 0;
  std::size_t total() const {
    std::size_t operands = 0;
    for (const auto& [type, o] : gemm) operands += o.a + o.b + o.d;
    return operands + 8 * tensor + 2 * scores + rows * sizeof(float) + arena +
           LtMatmul::kWorkspaceBytes;
  }
};

Sizes sizes_of(const Program& p, const std::vector<bool>& unfused) {
  Sizes s;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.kind == ProgramOpKind::gemm) {
      const GemmType type = gemm_type_of(op.precision);
      const std::size_t in = input_element_bytes(type), out = output_element_bytes(type);
      const auto batch = static_cast<std::size_t>(std::max<std::int64_t>(1, op.batch));
      Operands& o = s.gemm[type];
      o.a = std::max(o.a, static_cast<std::size_t>(op.m * op.k) * batch * in);
      o.b = std::max(o.b, static_cast<std::size_t>(op.k * op.n) * batch * in);
      o.d = std::max(o.d, static_cast<std::size_t>(op.m * op.n) * batch * out);
    } else if (op.kind == ProgramOpKind::memory) {
      const std::size_t bytes = static_cast<std::size_t>(memory_elements(op)) *
                                memory_kernel_info(op.memory_kernel).bytes_per_element;
      s.arena = std::max(s.arena, bytes + 8 * 256 + 4096);
    } else {
      s.tensor = std::max(s.tensor, attention_tensor_elements(op) * 2);
      s.rows = std::max(s.rows, static_cast<std::size_t>(op.batch * op.heads * op.seq));
      if (unfused[i]) s.scores = std::max(s.scores, attention_score_elements(op) * 2);
    }
  }
  return s;
}

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

// The unfused attention of attention_bench.cu (its comment gives the layout): cuBLASLt batched
// GEMMs around our row softmax, the backward pass from the saved probabilities.
struct UnfusedAttention {
  std::unique_ptr<LtMatmul> qk, pv, grad_v, grad_p, grad_q, grad_k;
};

using AttentionKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;
AttentionKey attention_key(const ProgramOp& op) {
  return {op.batch, op.heads, op.seq, op.head_dim, op.causal};
}

class Runner {
 public:
  Runner(const Program& p, bool cudnn, cudaStream_t stream)
      : p_(p), stream_(stream), impl_(p.ops.size()), gemm_of_(p.ops.size()) {
    CHECK_CUBLAS(cublasLtCreate(&lt_));
#ifdef HETSIM_CALIBRATE_CUDNN
    if (cudnn) {
      const cudnnStatus_t status = cudnnCreate(&cudnn_);
      if (status != CUDNN_STATUS_SUCCESS) {
        cudnn_ = nullptr;
        std::fprintf(stderr, "hetsim-execute-cuda: cuDNN unavailable (%s): attention UNFUSED\n",
                     cudnnGetErrorString(status));
      }
    }
#else
    (void)cudnn;
#endif
    std::vector<bool> unfused(p.ops.size(), false);
    const Sizes s = sizes_of(p, unfused);
    unsigned seed = 1;
    for (const auto& [type, o] : s.gemm) {
      Buffers& b = operands_[type];
      b.a = random_buffer(o.a, type, seed++);
      b.b = random_buffer(o.b, type, seed++);
      b.d = DeviceBuffer(o.d);
    }
    for (DeviceBuffer& t : tensors_)
      t = random_buffer(s.tensor, GemmType::bf16, 10 + static_cast<unsigned>(&t - tensors_));
    stats_ = DeviceBuffer(s.rows * sizeof(float));
    arena_ = random_buffer(s.arena, GemmType::bf16, 3);
    sum_ = DeviceBuffer(sizeof(float));
    std::size_t workspace = LtMatmul::kWorkspaceBytes;
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      const ProgramOp& op = p.ops[i];
      if (op.kind == ProgramOpKind::gemm) {
        const GemmType type = gemm_type_of(op.precision);
        auto& mm = gemms_[gemm_key(op)];
        if (!mm) {
          mm = std::make_unique<LtMatmul>(
              lt_, type, GemmShape::tn(op.m, op.n, op.k, std::max<std::int64_t>(1, op.batch)));
          if (!mm->supported())
            throw ProgramError("op " + std::to_string(i) + " " + op.name + ": cuBLASLt has no " +
                               op.precision + " algorithm for this GEMM (" + std::to_string(op.m) +
                               " x " + std::to_string(op.n) + " x " + std::to_string(op.k) + ")");
        }
        impl_[i] = "cublaslt-" + op.precision;
        gemm_of_[i] = {mm.get(), &operands_.at(type)};
      } else if (op.kind == ProgramOpKind::memory) {
        impl_[i] = op.memory_kernel;
      } else if (op.fused) {
        unfused[i] = !fused_plan(op, i, &workspace);
        if (!unfused[i]) impl_[i] = "cudnn";
      } else {
        unfused[i] = true;
      }
    }
    workspace_ = DeviceBuffer(workspace);
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    // Fused plans that finalised may still fail to execute: try each shape once, untimed.
#ifdef HETSIM_CALIBRATE_CUDNN
    std::map<std::pair<AttentionKey, bool>, cudnnStatus_t> tried;
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      if (impl_[i] != "cudnn") continue;
      const ProgramOp& op = p.ops[i];
      const auto key =
          std::make_pair(attention_key(op), op.kind == ProgramOpKind::attention_backward);
      auto it = tried.find(key);
      const bool first = it == tried.end();
      if (first) {
        const CudnnSdpa& forward = *fused_.at(std::make_pair(key.first, false));
        cudnnStatus_t status = forward.try_run(sdpa_buffers(), workspace_.get(), stream_);
        if (status == CUDNN_STATUS_SUCCESS && key.second)
          status = fused_.at(key)->try_run(sdpa_buffers(), workspace_.get(), stream_);
        CHECK_CUDA(cudaStreamSynchronize(stream_));
        it = tried.emplace(key, status).first;
      }
      const cudnnStatus_t status = it->second;
      if (status != CUDNN_STATUS_SUCCESS) {
        if (first)
          std::fprintf(stderr,
                       "op %zu %s: cuDNN fused attention failed to execute (%s): UNFUSED (and "
                       "every op of its shape)\n",
                       i, op.name.c_str(), cudnn_status_text(status).c_str());
        unfused[i] = true;
      }
    }
#endif
    const Sizes all = sizes_of(p, unfused);
    if (all.scores > 0) {
      p_buffer_ = DeviceBuffer(all.scores);
      dp_buffer_ = random_buffer(all.scores, GemmType::bf16, 99);
    }
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      if (!unfused[i]) continue;
      unfused_plan(p.ops[i], i);
      impl_[i] = "unfused";
    }
    CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  ~Runner() {
#ifdef HETSIM_CALIBRATE_CUDNN
    fused_.clear();
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
#endif
    gemms_.clear();
    unfused_.clear();
    cublasLtDestroy(lt_);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  const std::string& impl(std::size_t i) const { return impl_[i]; }

  void run(std::size_t i) {
    const ProgramOp& op = p_.ops[i];
    switch (op.kind) {
      case ProgramOpKind::gemm: {
        const auto& [mm, b] = gemm_of_[i];
        mm->run(b->a.get(), b->b.get(), b->d.get(), workspace_.get(), stream_);
        return;
      }
      case ProgramOpKind::memory:
        launch_memory_kernel(op.memory_kernel, arena_.get(), memory_elements(op),
                             static_cast<float*>(sum_.get()), stream_);
        return;
      case ProgramOpKind::attention_forward:
      case ProgramOpKind::attention_backward:
        break;
    }
    const bool backward = op.kind == ProgramOpKind::attention_backward;
#ifdef HETSIM_CALIBRATE_CUDNN
    if (impl_[i] == "cudnn") {
      fused_.at(std::make_pair(attention_key(op), backward))
          ->run(sdpa_buffers(), workspace_.get(), stream_);
      return;
    }
#endif
    run_unfused(op, backward);
  }

 private:
  DeviceBuffer random_buffer(std::size_t bytes, GemmType type, unsigned seed) {
    DeviceBuffer b(bytes);
    const std::size_t count = bytes / input_element_bytes(type);
    if (count > 0) fill_random(type, b.get(), count, seed, stream_);
    return b;
  }

  // Builds the fused plans of op i (the forward one too for a backward op: it writes the
  // statistics the backward pass reads); false when cuDNN has none.
  bool fused_plan(const ProgramOp& op, std::size_t i, std::size_t* workspace) {
#ifdef HETSIM_CALIBRATE_CUDNN
    if (cudnn_ == nullptr) return false;
    for (const bool backward : {false, true}) {
      if (backward && op.kind != ProgramOpKind::attention_backward) break;
      auto& plan = fused_[std::make_pair(attention_key(op), backward)];
      const bool first = !plan;
      if (first) {
        SdpaShape shape;
        shape.batch = op.batch;
        shape.heads = op.heads;
        shape.seq = op.seq;
        shape.head_dim = op.head_dim;
        shape.causal = op.causal;
        shape.backward = backward;
        plan = std::make_unique<CudnnSdpa>(cudnn_, shape);
      }
      if (!plan->supported()) {
        if (first)
          std::fprintf(stderr,
                       "op %zu %s: cuDNN has no fused plan (%s): UNFUSED (and every op of its "
                       "shape)\n",
                       i, op.name.c_str(), plan->reason().c_str());
        return false;
      }
      *workspace = std::max(*workspace, plan->workspace_bytes());
    }
    return true;
#else
    (void)op;
    (void)i;
    (void)workspace;
    if (!warned_) {
      std::fprintf(stderr,
                   "hetsim-execute-cuda: built without cuDNN: fused attention ops run UNFUSED\n");
      warned_ = true;
    }
    return false;
#endif
  }

#ifdef HETSIM_CALIBRATE_CUDNN
  SdpaBuffers sdpa_buffers() const {
    SdpaBuffers b;
    b.q = tensors_[0].get();
    b.k = tensors_[1].get();
    b.v = tensors_[2].get();
    b.o = tensors_[3].get();
    b.dout = tensors_[4].get();
    b.dq = tensors_[5].get();
    b.dk = tensors_[6].get();
    b.dv = tensors_[7].get();
    b.stats = stats_.get();
    return b;
  }
#endif

  void unfused_plan(const ProgramOp& op, std::size_t i) {
    const bool backward = op.kind == ProgramOpKind::attention_backward;
    UnfusedAttention& u = unfused_[std::make_pair(attention_key(op), backward)];
    if (u.qk || u.grad_v) return;
    const std::int64_t S = op.seq, d = op.head_dim, B = op.batch * op.heads;
    const std::int64_t sd = S * d, ss = S * S;
    const auto T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    auto make = [&](const GemmShape& shape) {
      auto mm = std::make_unique<LtMatmul>(lt_, GemmType::bf16, shape);
      if (!mm->supported())
        throw ProgramError("op " + std::to_string(i) + " " + op.name +
                           ": cuBLASLt has no algorithm for the unfused attention's GEMMs");
      return mm;
    };
    if (!backward) {
      u.qk = make(batched(T, N, S, S, d, d, d, S, B, sd, sd, ss));
      u.pv = make(batched(N, N, d, S, S, d, S, d, B, sd, ss, sd));
    } else {
      u.grad_v = make(batched(N, T, d, S, S, d, S, d, B, sd, ss, sd));
      u.grad_p = make(batched(T, N, S, S, d, d, d, S, B, sd, sd, ss));
      u.grad_q = make(batched(N, N, d, S, S, d, S, d, B, sd, ss, sd));
      u.grad_k = make(batched(N, T, d, S, S, d, S, d, B, sd, ss, sd));
    }
  }

  void run_unfused(const ProgramOp& op, bool backward) {
    const UnfusedAttention& u = unfused_.at(std::make_pair(attention_key(op), backward));
    const std::int64_t S = op.seq, B = op.batch * op.heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(op.head_dim));
    void *q = tensors_[0].get(), *k = tensors_[1].get(), *v = tensors_[2].get();
    void *o = tensors_[3].get(), *dout = tensors_[4].get();
    void *dq = tensors_[5].get(), *dk = tensors_[6].get(), *dv = tensors_[7].get();
    void *p = p_buffer_.get(), *dp = dp_buffer_.get(), *ws = workspace_.get();
    if (!backward) {
      u.qk->run(k, q, p, ws, stream_);
      launch_row_softmax(p, p, B * S, S, scale, op.causal, stream_);
      u.pv->run(v, p, o, ws, stream_);
      return;
    }
    u.grad_v->run(dout, p, dv, ws, stream_);
    u.grad_p->run(v, dout, dp, ws, stream_);
    launch_row_softmax_backward(p, dp, B * S, S, scale, stream_);
    u.grad_q->run(k, dp, dq, ws, stream_);
    u.grad_k->run(q, dp, dk, ws, stream_);
  }

  using GemmKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string>;
  static GemmKey gemm_key(const ProgramOp& op) {
    return {op.m, op.n, op.k, std::max<std::int64_t>(1, op.batch), op.precision};
  }
  struct Buffers {
    DeviceBuffer a, b, d;
  };

  const Program& p_;
  cudaStream_t stream_;
  std::vector<std::string> impl_;
  cublasLtHandle_t lt_ = nullptr;
  std::map<GemmKey, std::unique_ptr<LtMatmul>> gemms_;
  std::map<GemmType, Buffers> operands_;
  // Each GEMM op's plan and operands, found once here rather than looked up at every launch.
  std::vector<std::pair<const LtMatmul*, const Buffers*>> gemm_of_;
  std::map<std::pair<AttentionKey, bool>, UnfusedAttention> unfused_;
#ifdef HETSIM_CALIBRATE_CUDNN
  cudnnHandle_t cudnn_ = nullptr;
  std::map<std::pair<AttentionKey, bool>, std::unique_ptr<CudnnSdpa>> fused_;
#else
  bool warned_ = false;
#endif
  DeviceBuffer tensors_[8], stats_, p_buffer_, dp_buffer_, arena_, sum_, workspace_;
};

double gib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

int dry_run(const Options& o, const Program& p) {
  std::size_t counts[4] = {};
  std::vector<bool> unfused(p.ops.size());
  std::map<std::string, std::size_t> gemm_types;  // "tf32" for fp32, as they run
  double predicted_ops = 0;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    ++counts[static_cast<int>(p.ops[i].kind)];
    unfused[i] = is_attention(p.ops[i]) && !p.ops[i].fused;
    predicted_ops += p.ops[i].predicted_s;
    if (p.ops[i].kind == ProgramOpKind::gemm)
      ++gemm_types[p.ops[i].precision == "fp32" ? "tf32" : p.ops[i].precision];
  }
  std::string as;
  for (const auto& [type, n] : gemm_types)
    as += (as.empty() ? "" : ", ") + type + " " + std::to_string(n);
  std::printf(
      "program %s: %zu ops (%zu gemm, %zu attention_forward, %zu attention_backward, %zu "
      "memory), precision %s (GEMMs as %s), predicted %.6f s per iteration (ops %.6f s)\n",
      o.program.c_str(), p.ops.size(), counts[0], counts[1], counts[2], counts[3],
      p.precision.c_str(), as.empty() ? "none" : as.c_str(), p.predicted_iteration_s,
      predicted_ops);
  std::printf("device memory for buffers: %.3f GiB (unfused attention scores included)\n",
              gib(sizes_of(p, unfused).total()));
  std::printf("would run %d warm-up and %d measured iterations, then one timed per op\n", o.warmup,
              o.iterations);
  return 0;
}

int execute(const Options& o, const Program& p) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "hetsim-execute-cuda: no CUDA device (%s)\n",
                 status != cudaSuccess ? cudaGetErrorString(status) : "none found");
    return 3;
  }
  if (o.device >= devices) {
    std::fprintf(stderr, "hetsim-execute-cuda: --device %d: this machine has %d GPU(s)\n", o.device,
                 devices);
    return 3;
  }
  CHECK_CUDA(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, o.device));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<double> iteration_s(static_cast<std::size_t>(o.iterations));
  std::vector<double> op_s(p.ops.size());
  std::vector<std::string> impl(p.ops.size());
  {
    Runner runner(p, o.cudnn, stream);
    const std::size_t n = p.ops.size();
    for (std::size_t i = 0; i < n; ++i) impl[i] = runner.impl(i);
    auto iteration = [&] {
      for (std::size_t i = 0; i < n; ++i) runner.run(i);
    };
    for (int w = 0; w < o.warmup; ++w) iteration();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> events(std::max<std::size_t>(n + 1, 2 * iteration_s.size()));
    for (cudaEvent_t& e : events) CHECK_CUDA(cudaEventCreate(&e));
    // K iterations back to back, as training runs them: events only between iterations.
    for (std::size_t k = 0; k < iteration_s.size(); ++k) {
      CHECK_CUDA(cudaEventRecord(events[2 * k], stream));
      iteration();
      CHECK_CUDA(cudaEventRecord(events[2 * k + 1], stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    for (std::size_t k = 0; k < iteration_s.size(); ++k) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, events[2 * k], events[2 * k + 1]));
      iteration_s[k] = ms * 1e-3;
    }
    // One more iteration with an event between every two ops.
    CHECK_CUDA(cudaEventRecord(events[0], stream));
    for (std::size_t i = 0; i < n; ++i) {
      runner.run(i);
      CHECK_CUDA(cudaEventRecord(events[i + 1], stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < n; ++i) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
      op_s[i] = ms * 1e-3;
    }
    for (cudaEvent_t e : events) CHECK_CUDA(cudaEventDestroy(e));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));

  std::ofstream out(o.out, std::ios::binary);
  if (!out) {
    std::fprintf(stderr, "hetsim-execute-cuda: --out %s: cannot write\n", o.out.c_str());
    return 2;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  out << "# hetsim-execute-cuda measured\n"
      << "# program=" << o.program << "\n# device_name=" << prop.name
      << "\n# cuda_driver=" << driver << "\n# cuda_runtime=" << runtime
      << "\n# precision=" << p.precision << "\n# warmup=" << o.warmup
      << "\n# iterations=" << o.iterations << "\n# ops=" << p.ops.size() << "\n";
  out << "kind,index,task,name,impl,seconds\n";
  char buf[64];
  for (std::size_t k = 0; k < iteration_s.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%.9g", iteration_s[k]);
    out << "iteration," << k << ",,,," << buf << "\n";
  }
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.9g", op_s[i]);
    out << "op," << i << "," << p.ops[i].task << "," << p.ops[i].name << "," << impl[i] << ","
        << buf << "\n";
  }
  out.flush();
  if (!out) {
    std::fprintf(stderr, "hetsim-execute-cuda: --out %s: write failed\n", o.out.c_str());
    return 2;
  }
  std::vector<double> sorted = iteration_s;
  std::sort(sorted.begin(), sorted.end());
  std::fprintf(stderr,
               "hetsim-execute-cuda: %s: %zu ops, median iteration %.6f s over %d (predicted "
               "%.6f s); wrote %s\n",
               prop.name, p.ops.size(), sorted[sorted.size() / 2], o.iterations,
               p.predicted_iteration_s, o.out.c_str());
  return 0;
}

}  // namespace
}  // namespace hetsim::calibrate::cuda

int main(int argc, char** argv) {
  using namespace hetsim::calibrate::cuda;
  try {
    const Options o = parse_options(argc, argv);
    const Program p = read_program(o.program);
    if (o.dry_run) return dry_run(o, p);
    return execute(o, p);
  } catch (const ProgramError& e) {
    std::fprintf(stderr, "hetsim-execute-cuda: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hetsim-execute-cuda: %s\n", e.what());
    return 1;
  }
}
