// Kernel shapes, FLOPs and bytes of transformer layers; see ops.h.
#include "sim/workload/model/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace hetsim::workload {

std::string to_string(Precision p) {
  switch (p) {
    case Precision::fp32:
      return "fp32";
    case Precision::fp16:
      return "fp16";
    case Precision::bf16:
      return "bf16";
    case Precision::fp8:
      return "fp8";
  }
  return "?";
}

int element_bytes(Precision p) {
  return p == Precision::fp32 ? 4 : 2;
}  // fp8 keeps 16-bit activations

double attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal,
                       bool fused, bool backward) {
  const double forward = 4.0 * batch * seq * seq * head_dim * heads;
  const double masked = causal && fused ? 0.5 : 1.0;
  return masked * (backward ? (fused ? 2.5 : 2.0) * forward : forward);
}

namespace {

struct Builder {
  const ModelConfig& m;
  const LayerShape& s;
  std::vector<Step> steps;
  double e;  // element bytes
  // The residual stream's element bytes: fp32 under autocast (the embedding's output is fp32 and
  // every residual add keeps it so), the plan's precision otherwise.
  double r;

  Builder(const ModelConfig& model, const LayerShape& shape)
      : m(model), s(shape), e(element_bytes(shape.precision)), r(shape.autocast ? 4.0 : e) {}

  int64_t tokens() const { return s.micro_batch * s.sequence; }
  // Tokens a rank holds outside the tensor-parallel region (sequence parallel splits them).
  double local_tokens() const {
    return s.sequence_parallel ? static_cast<double>(tokens()) / s.tensor_parallel
                               : static_cast<double>(tokens());
  }

  void gemm(const std::string& name, int64_t mm, int64_t nn, int64_t kk, bool model = true) {
    Op op;
    op.name = name;
    op.kind = OpKind::gemm;
    op.m = mm;
    op.n = nn;
    op.k = kk;
    op.flops = 2.0 * mm * nn * kk;
    op.model_flops = model ? op.flops : 0;
    op.bytes = e * (static_cast<double>(mm) * kk + static_cast<double>(kk) * nn +
                    static_cast<double>(mm) * nn);
    steps.push_back(Step{op});
  }
  // Transformer Engine's fp8 quantisation around a transformer layer's linear layers (a fused
  // framework under fp8; activations and gradients stay 16-bit between the kernels): a 16-bit
  // tensor of `elements` read and written in fp8 as is and transposed (cast_transpose: the
  // transposed copy feeds the backward GEMM that reduces over the tokens), or an fp8 tensor
  // transposed (a norm's fused fp8 output, transposed for its linear layer's weight gradient).
  // Per layer and micro-batch: the inputs of proj and fc2 forward, every linear layer's output
  // gradient backward, the qkv and fc1 inputs' transposes backward; in a MoE layer the experts'
  // fc1 and fc2 inputs forward (the dispatched tokens are not a norm's output) and output
  // gradients backward, the shared experts' likewise; in MLA the projection's input forward,
  // every projection's output gradient backward, the norms' fp8 outputs transposed backward. TE's
  // per-step weight casts and amax reductions are left out (once per iteration, or a few bytes).
  bool te_fp8() const { return s.precision == Precision::fp8 && !s.eager; }
  void fp8_cast_transpose(const std::string& name, double elements) {
    if (te_fp8()) memory(name + ".fp8_cast", (2.0 + 1 + 1) * elements);
  }
  void fp8_transpose(const std::string& name, double elements) {
    if (te_fp8()) memory(name + ".fp8_transpose", (1.0 + 1) * elements);
  }
  // A linear layer y = x W with x (tokens x in), W (in x out): forward, and backward as the
  // input-gradient (dgrad) and weight-gradient (wgrad) GEMMs.
  void linear_fwd(const std::string& name, int64_t in, int64_t out) {
    // Autocast casts the fp32 weight for the matmul in every forward pass.
    if (s.autocast) memory(name + ".weight_cast", (4 + e) * static_cast<double>(in) * out);
    gemm(name, tokens(), out, in);
  }
  void linear_dgrad(const std::string& name, int64_t in, int64_t out) {
    gemm(name + ".dgrad", tokens(), in, out);
  }
  void linear_wgrad(const std::string& name, int64_t in, int64_t out) {
    gemm(name + ".wgrad", in, out, tokens());
    // A separate accumulation (Framework::separate_grad_accumulation): .grad += the new gradient,
    // in the plan's precision (counted in every micro-batch, as below).
    if (s.grad_accumulate) grad_accumulate(name, 3 * e * static_cast<double>(in) * out);
    if (!s.autocast) return;
    // The weight's gradient cast back to fp32 and added to the parameter's .grad (counted in
    // every micro-batch; the first one's gradient is taken over without the add).
    const double params = static_cast<double>(in) * out;
    memory(name + ".grad_cast", (e + 4) * params);
    grad_accumulate(name, 12 * params);
  }
  // Autocast: a norm's fp32 output cast for the matmul after it (forward), and the gradient of
  // that cast's output cast back to fp32 for the norm's backward.
  void cast_for_matmul(const std::string& name) {
    if (s.autocast) memory(name + ".cast", (4 + e) * local_tokens() * m.hidden);
  }
  void cast_back(const std::string& name) {
    if (s.autocast) memory(name + ".cast.bwd", (e + 4) * local_tokens() * m.hidden);
  }
  // Dropout on a branch's output and its add to the residual stream: one fused kernel (reads
  // both, writes the stream), or, eager or with the fusion turned off
  // (KernelChoices::bias_dropout_fusion), a dropout (reads and writes the branch, writes its
  // one-byte mask) and an add (reads the stream and the branch, writes the stream). A fused
  // framework's row-parallel linear hands its bias back apart for the fused kernel to add, so
  // unfused, a branch with a bias (`bias`) adds it by a kernel of its own first (reads and writes
  // the branch); eager frameworks add it in the GEMM. Without dropout (ModelConfig::dropout 0) the
  // dropout's kernel is not run.
  bool fused_dropout_residual() const { return !s.eager && s.kernels.bias_dropout_fusion; }
  void dropout_residual(const std::string& name, bool bias) {
    const double n = local_tokens() * m.hidden;
    if (fused_dropout_residual()) {
      memory(name, e * n * 3);
      return;
    }
    if (bias && !s.eager) memory(name + ".bias", 2 * e * n);
    if (m.dropout > 0) memory(name + ".dropout", (2 * e + 1) * n);
    memory(name + ".add", (2 * r + e) * n);
  }
  // Its backward: fused, one kernel; unfused, the stream's gradient cast for the branch
  // (autocast) and the dropout's backward (reads the gradient and the mask, writes).
  void dropout_residual_bwd(const std::string& name) {
    const double n = local_tokens() * m.hidden;
    if (fused_dropout_residual()) {
      memory(name + ".bwd", e * n * 3);
      return;
    }
    if (s.autocast) memory(name + ".cast.bwd", (r + e) * n);
    if (m.dropout > 0) memory(name + ".dropout.bwd", (2 * e + 1) * n);
  }
  // Eager: the stream's gradient summed over its two uses (the branch's norm and the add).
  void residual_sum(const std::string& name) {
    if (s.eager) memory(name + ".sum", 3 * r * local_tokens() * m.hidden);
  }
  // Eager: attention's output copied from head-major back to token-major order (and its
  // gradient the other way), which fused layouts avoid.
  void attention_reshape(bool forward) {
    if (!s.eager) return;
    memory(forward ? "attention.reshape" : "attention.reshape.bwd",
           2 * e * tokens() * static_cast<double>(m.q_width()) / s.tensor_parallel);
  }
  void memory(const std::string& name, double bytes, double flops = 0) {
    Op op;
    op.name = name;
    op.kind = OpKind::memory;
    op.bytes = bytes;
    op.flops = flops;
    steps.push_back(Step{op});
  }
  // A long pass over one large flat buffer (Op::streaming).
  void streaming(const std::string& name, double bytes) {
    memory(name, bytes);
    steps.back().op.streaming = true;
  }
  // A gradient added into a parameter's .grad: a pass over a parameter-sized buffer.
  void grad_accumulate(const std::string& name, double bytes) {
    streaming(name + ".grad_accumulate", bytes);
  }
  // The loss's passes over the [tokens x local vocabulary] fp32 logits, `per_logit` bytes each,
  // with the cast between the matmul's precision and fp32 (e + 4 bytes a logit; none in fp32).
  void loss(const std::string& name, int64_t vocab, double per_logit) {
    const double cast = e < 4 ? e + 4 : 0;
    streaming(name, (cast + per_logit) * tokens() * static_cast<double>(vocab));
  }
  // The extra passes over the scores, in the scores' element size, where a fused framework's
  // softmax runs unfused (fused_softmax_runs), over the fused kernel's one read and one write
  // (forward; backward two reads and a write):
  // - in fp32 from 16-bit scores (softmax_upcast): the cast up (2 + 4 bytes),
  //   the scale (4 + 4), the mask (4 + 4), the softmax (4 + 4) and the cast down (4 + 2): 32
  //   bytes over the fused 4, 16 passes; backward the same five, 40 bytes over 6, 17 passes;
  // - fp32 scores with the scale: the scale and the mask, 2 x (4 + 4), 4 passes either way;
  // - in the plan's precision (no scale): the mask, 2 passes either way.
  double unfused_softmax_passes(int64_t rows, bool forward) const {
    if (fused_softmax_runs(m, s, rows)) return 0;
    if (softmax_upcast(m, s, rows)) return forward ? 16 : 17;
    return s.softmax.unfused_fp32 ? 4 : 2;
  }
  void attention(bool forward) {
    const int64_t heads = m.heads / s.tensor_parallel;
    Op op;
    op.name = forward ? "attention" : "attention.bwd";
    op.kind = forward ? OpKind::attention_forward : OpKind::attention_backward;
    // Context parallel: the rank's queries against each of the cp blocks of keys and values, as
    // cp blocks of the local length (causal work balanced: 1/cp of the whole on every rank).
    op.batch = s.micro_batch * s.context_parallel;
    op.heads = heads;
    op.seq = s.sequence;
    op.head_dim = m.attention_head_dim();
    op.causal = m.causal;
    op.fused = s.flash_attention;
    // Q K^T and P V: 4 b s^2 d per head; backward 2x (dQ, dK, dV, dP), counted in full for the
    // MFU numerator as Narayanan et al. do; causal kernels skip half of it.
    const double fwd =
        attention_flops(op.batch, heads, s.sequence, m.attention_head_dim(), false, false, false);
    op.model_flops = forward ? fwd : 2 * fwd;
    // Standard attention computes the whole s x s score matrix, masks it, and stores it for the
    // backward; flash attention does neither (attention_flops).
    op.flops = attention_flops(op.batch, heads, s.sequence, m.attention_head_dim(), m.causal,
                               s.flash_attention, !forward);
    // Local attention: a fused kernel skips the blocks outside each window or chunk (over the
    // whole sequence of the context-parallel group), and the MFU numerator counts what the model
    // needs; an unfused one computes every score and masks them.
    const double span = m.causal ? m.attention_span(s.sequence * s.context_parallel) : 1.0;
    op.model_flops *= span;
    if (s.flash_attention) {
      op.span = span;
      op.flops *= span;
    }
    const double kv_local = std::max<int64_t>(1, m.kv_heads / s.tensor_parallel);
    const double qkvo = e * tokens() * m.attention_head_dim() * (2.0 * heads + 2.0 * kv_local);
    const double scores =
        s.flash_attention ? 0 : e * op.batch * heads * double(s.sequence) * s.sequence;
    // Standard attention moves the scores about 6 times forward (write S, fused scale-mask-
    // softmax read and write, dropout read and write plus its mask, read by P V) and 9 times
    // backward (the dropout's backward 2 of them); without dropout 4 and 7; flash attention keeps
    // them on chip.
    const double passes =
        (m.dropout > 0 ? (forward ? 6 : 9) : (forward ? 4 : 7)) +
        (s.flash_attention ? 0 : unfused_softmax_passes(s.micro_batch * heads, forward));
    op.bytes = (forward ? qkvo : 2 * qkvo) + passes * scores;
    steps.push_back(Step{op});
  }
  void comm(CommKind k, double bytes, bool async = false) {
    if (s.tensor_parallel == 1) return;
    Step st;
    st.op.name = k == CommKind::allreduce   ? "tp.allreduce"
                 : k == CommKind::allgather ? "tp.allgather"
                                            : "tp.reducescatter";
    st.comm = k;
    st.comm_bytes = bytes;
    st.async = async;
    steps.push_back(st);
  }
  // Ring attention's exchange over the context-parallel group: every rank's keys and values
  // (all-gather of the result's `bytes`) or their gradients (reduce-scatter).
  void context_comm(CommKind k, bool async) {
    if (s.context_parallel == 1) return;
    const double kv = std::max<int64_t>(1, m.kv_heads / s.tensor_parallel);
    Step st;
    st.op.name = k == CommKind::allgather ? "cp.kv" : "cp.dkv";
    st.comm = k;
    st.comm_bytes = e * tokens() * s.context_parallel * m.attention_head_dim() * kv * 2;
    st.async = async;
    st.context = true;
    steps.push_back(st);
  }
  // An all-to-all over the expert-parallel group: `bytes` per rank, 1/EP of it to each peer.
  void expert_alltoall(const std::string& name, double bytes) {
    if (s.expert_parallel == 1) return;
    Step st;
    st.op.name = name;
    st.comm = CommKind::alltoall;
    st.comm_bytes = bytes;
    st.expert = true;
    steps.push_back(st);
  }
  // `count` GEMMs of (mm x kk) . (kk x nn) in one launch (a MoE layer's grouped GEMM over its
  // local experts, as a batched GEMM); the MFU numerator counts `model_rows` token rows where
  // the shape has `rows` (the most loaded rank's): mm forward and dgrad, kk for wgrad.
  void grouped(const std::string& name, int64_t count, int64_t mm, int64_t nn, int64_t kk,
               double rows, double model_rows) {
    gemm(name, mm, nn, kk);
    Op& op = steps.back().op;
    op.batch = count;
    op.flops *= static_cast<double>(count);
    op.bytes *= static_cast<double>(count);
    op.model_flops = op.flops * model_rows / rows;
  }
  void grouped_gemm(const std::string& name, int64_t count, int64_t mm, int64_t nn, int64_t kk,
                    double model_mm) {
    grouped(name, count, mm, nn, kk, static_cast<double>(mm), model_mm);
  }
  void grouped_wgrad(const std::string& name, int64_t count, int64_t mm, int64_t nn, int64_t kk,
                     double model_kk) {
    grouped(name, count, mm, nn, kk, static_cast<double>(kk), model_kk);
  }
  // The activation of one layer boundary (tokens x hidden), whole.
  double boundary_bytes() const { return e * tokens() * m.hidden; }
  // A column-parallel linear's backward under sequence parallelism: its input was kept as this
  // rank's slice of the sequence, so the whole input is gathered again for the weight gradient,
  // beside the input-gradient GEMM (Megatron-LM's and Transformer Engine's linear layers).
  void regather_input() {
    if (s.sequence_parallel) comm(CommKind::allgather, boundary_bytes(), true);
  }
  // Entering a column-parallel region: nothing, or an all-gather with sequence parallelism; in a
  // transformer layer's attention and MLP blocks (Transformer Engine's modules, `te`) beside the
  // GEMM after it under tp_comm_overlap. The output layer and the embedding are Megatron-LM's own
  // modules, which TE does not overlap.
  void enter_tp_fwd(bool te = false) {
    if (s.sequence_parallel) comm(CommKind::allgather, boundary_bytes(), te && overlap_tp());
  }
  bool overlap_tp() const { return s.kernels.tp_comm_overlap && s.sequence_parallel && !s.eager; }
  // A row-parallel linear layer's forward GEMM and the collective that leaves its region: after
  // it, or under tp_comm_overlap its reduce-scatter beside it (the output's chunks reduced as the
  // GEMM writes them; the replay runs an asynchronous collective beside the one kernel after it).
  void row_parallel_fwd(const std::string& name, int64_t in, int64_t out) {
    if (overlap_tp()) {
      comm(CommKind::reducescatter, boundary_bytes(), true);
      linear_fwd(name, in, out);
    } else {
      linear_fwd(name, in, out);
      leave_tp_fwd();
    }
  }
  // Leaving a row-parallel region: all-reduce, or reduce-scatter with sequence parallelism.
  void leave_tp_fwd() {
    comm(s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce, boundary_bytes());
  }
  double norm_bytes() const { return r * local_tokens() * m.hidden * 2; }
  bool eager_rmsnorm() const { return s.eager && m.norm == Norm::rmsnorm; }
  // A norm over the residual stream. Fused (Megatron-LM's and Apex's kernels; eager LayerNorm
  // too, F.layer_norm being one kernel): it reads the stream and writes its output, and its
  // backward moves half as much again. Eager RMSNorm is PyTorch's composite, as Meta's reference
  // Llama code, torchtitan, Hugging Face's LlamaRMSNorm and torch.nn.RMSNorm without a fused
  // kernel write it: x32 = x.float(); y = x32 * rsqrt(x32.pow(2).mean(-1) + eps);
  // out = weight * y.type_as(x), one kernel per op, over n = tokens x hidden elements, the
  // intermediates in fp32 (the casts are no-ops where the stream already is: autocast, fp32):
  // cast (r + 4), pow (8), mean (4), add eps and rsqrt (per token), mul (8), cast back (4 + r),
  // times the weight (2r): 36 bytes an element in bf16 against the fused kernel's 4.
  void norm_fwd(const std::string& name) {
    if (!eager_rmsnorm()) {
      memory(name, norm_bytes());
      return;
    }
    const double t = local_tokens(), n = t * m.hidden;
    if (r < 4) memory(name + ".float", (r + 4) * n);
    memory(name + ".pow", 8 * n);
    memory(name + ".mean", 4 * n + 4 * t);
    memory(name + ".add_eps", 8 * t);
    memory(name + ".rsqrt", 8 * t);
    memory(name + ".mul", 8 * n + 4 * t);
    if (r < 4) memory(name + ".type_as", (4 + r) * n);
    memory(name + ".weight", 2 * r * n);
  }
  // Its backward, as autograd runs the composite: the output gradient times the weight (2r) and
  // the weight's gradient (the product with y, 3r, summed over the tokens, r); the cast's
  // backward (r + 4); the mul's two gradients (times rsqrt, 8; times x32, 12, summed over the
  // hidden dimension, 4); rsqrt's backward per token; mean's (the gradient expanded and divided,
  // 4); pow's (2 x32, 8, times the gradient, 12); the two paths' gradients added (12); the first
  // cast's backward (4 + r): 84 bytes an element in bf16 against the fused kernel's 6.
  void norm_bwd(const std::string& name) {
    if (!eager_rmsnorm()) {
      memory(name + ".bwd", norm_bytes() * 1.5);
      return;
    }
    const double t = local_tokens(), n = t * m.hidden;
    memory(name + ".weight.bwd", 2 * r * n);
    memory(name + ".weight.grad_mul", 3 * r * n);
    memory(name + ".weight.grad_sum", r * n);
    if (r < 4) memory(name + ".type_as.bwd", (r + 4) * n);
    memory(name + ".mul.bwd", 8 * n + 4 * t);
    memory(name + ".mul.grad_mul", 12 * n);
    memory(name + ".mul.grad_sum", 4 * n);
    memory(name + ".rsqrt.bwd", 12 * t);
    memory(name + ".mean.bwd", 4 * n + 4 * t);
    memory(name + ".pow.bwd_scale", 8 * n);
    memory(name + ".pow.bwd", 12 * n);
    memory(name + ".grad_add", 12 * n);
    if (r < 4) memory(name + ".float.bwd", (4 + r) * n);
  }
  // Rotary embeddings over the queries and keys. Fused (Megatron-LM, Transformer Engine): one
  // kernel over the qkv output, read and written. Eager, in the complex form of Meta's
  // reference code and torchtitan (view_as_complex(x.float()) * freqs, view_as_real, type_as),
  // per queries and keys: the cast to fp32 (e + 4), the complex product (8), the cast back
  // (4 + e); backward the same three. Hugging Face's rotate_half form moves about as much.
  void rotary(bool forward, int64_t qkv) {
    const std::string name = forward ? "rotary" : "rotary.bwd";
    if (!s.eager) {
      memory(name, e * tokens() * qkv * 2);
      return;
    }
    const int t = s.tensor_parallel;
    for (const auto& [part, width] :
         {std::pair<const char*, int64_t>{"q", m.q_width() / t}, {"k", m.kv_width() / t}}) {
      const double n = static_cast<double>(tokens()) * width;
      const std::string k = name + "." + part;
      if (e < 4) memory(k + (forward ? ".float" : ".type_as.bwd"), (e + 4) * n);
      memory(k + ".mul", 8 * n);
      if (e < 4) memory(k + (forward ? ".type_as" : ".float.bwd"), (4 + e) * n);
    }
  }
  // Grouped-query attention, eager: the keys and values repeated to every query head
  // (repeat_kv: expand and reshape, a copy) before scaled_dot_product_attention, as Meta's
  // reference code, torchtitan and Hugging Face's attention do; backward, the repeated
  // gradients summed back onto the shared heads.
  void repeat_kv(bool forward) {
    if (!s.eager || m.kv_heads >= m.heads) return;
    const int t = s.tensor_parallel;
    const double n = static_cast<double>(tokens()) * (m.q_width() / t);
    const double kv = static_cast<double>(tokens()) * (m.kv_width() / t);
    memory(forward ? "repeat_kv" : "repeat_kv.bwd", 2 * e * (n + kv));
  }
  // The gated MLP's activation, silu(a) * b over f = ffn_hidden / t elements a token: one fused
  // kernel (reads a and b, writes the product; backward reads both and the gradient, writes two
  // gradients), or, eager, silu (2e) and the product (3e) as kernels of their own, backward the
  // product's two gradients (3e each) and silu's (3e).
  void swiglu(bool forward) {
    const int t = s.tensor_parallel;
    if (!s.eager) {
      if (forward)
        memory("swiglu", e * tokens() * (ffn_in() + m.ffn_hidden / t));
      else
        memory("swiglu.bwd", e * tokens() * (ffn_in() + 2.0 * m.ffn_hidden / t));
      return;
    }
    const double f = static_cast<double>(tokens()) * (m.ffn_hidden / t);
    if (forward) {
      memory("swiglu.silu", 2 * e * f);
      memory("swiglu.mul", 3 * e * f);
    } else {
      memory("swiglu.mul.bwd_a", 3 * e * f);
      memory("swiglu.mul.bwd_b", 3 * e * f);
      memory("swiglu.silu.bwd", 3 * e * f);
    }
  }
  int64_t ffn_in() const {
    return (m.activation == Activation::swiglu ? 2 : 1) * static_cast<int64_t>(m.ffn_hidden) /
           s.tensor_parallel;
  }
};

}  // namespace

namespace {

// Multi-head latent attention (DeepSeek-V2/V3, as Megatron-Core's MLA runs it): the down-
// projections to the query and key/value latents on every tensor-parallel rank in full (they are
// narrow), their norms, the per-head up-projections split over the ranks like the heads, the
// rotary parts, attention over head_dim (queries, keys) and v_head_dim (values), the output
// projection row-parallel.
void mla_forward(Builder& b) {
  const ModelConfig& m = b.m;
  const int t = b.s.tensor_parallel;
  const int64_t h = m.hidden, heads = m.heads / t;
  const int64_t tokens = b.tokens();
  b.enter_tp_fwd();
  if (m.q_lora_rank > 0) {
    b.gemm("q_down", tokens, m.q_lora_rank, h);
    b.memory("norm_q", b.e * tokens * m.q_lora_rank * 2);
    b.linear_fwd("q_up", m.q_lora_rank, heads * m.head_dim);
  } else {
    b.linear_fwd("q", h, heads * m.head_dim);
  }
  b.gemm("kv_down", tokens, m.kv_lora_rank + m.rope_head_dim, h);
  b.memory("norm_kv", b.e * tokens * m.kv_lora_rank * 2);
  b.linear_fwd("kv_up", m.kv_lora_rank, heads * (m.head_dim - m.rope_head_dim + m.v_head_dim));
  b.memory("rotary", b.e * tokens * (heads + 1) * m.rope_head_dim * 2);
  b.context_comm(CommKind::allgather, true);
  b.attention(true);
  b.fp8_cast_transpose("proj.input", static_cast<double>(tokens) * heads * m.v_head_dim);
  b.linear_fwd("proj", heads * m.v_head_dim, h);
  b.leave_tp_fwd();
}

void mla_backward(Builder& b) {
  const ModelConfig& m = b.m;
  const int t = b.s.tensor_parallel;
  const int64_t h = m.hidden, heads = m.heads / t;
  const int64_t tokens = b.tokens();
  const int64_t kv_up = heads * (m.head_dim - m.rope_head_dim + m.v_head_dim);
  b.fp8_cast_transpose("proj.grad_output", b.local_tokens() * h);
  b.enter_tp_fwd();
  b.linear_dgrad("proj", heads * m.v_head_dim, h);
  b.linear_wgrad("proj", heads * m.v_head_dim, h);
  b.context_comm(CommKind::allgather, true);
  b.attention(false);
  b.context_comm(CommKind::reducescatter, false);
  b.memory("rotary.bwd", b.e * tokens * (heads + 1) * m.rope_head_dim * 2);
  b.fp8_cast_transpose("kv_up.grad_output", static_cast<double>(tokens) * kv_up);
  b.linear_dgrad("kv_up", m.kv_lora_rank, kv_up);
  b.fp8_transpose("kv_up.input", static_cast<double>(tokens) * m.kv_lora_rank);
  b.linear_wgrad("kv_up", m.kv_lora_rank, kv_up);
  b.memory("norm_kv.bwd", b.e * tokens * m.kv_lora_rank * 3);
  // The layer's input, kept as this rank's slice under sequence parallelism, gathered again for
  // the down-projections' weight gradients.
  b.regather_input();
  b.fp8_cast_transpose("kv_down.grad_output",
                       static_cast<double>(tokens) * (m.kv_lora_rank + m.rope_head_dim));
  b.gemm("kv_down.dgrad", tokens, h, m.kv_lora_rank + m.rope_head_dim);
  b.fp8_transpose("down.input", static_cast<double>(tokens) * h);
  b.gemm("kv_down.wgrad", h, m.kv_lora_rank + m.rope_head_dim, tokens);
  if (m.q_lora_rank > 0) {
    b.fp8_cast_transpose("q_up.grad_output", static_cast<double>(tokens) * heads * m.head_dim);
    b.linear_dgrad("q_up", m.q_lora_rank, heads * m.head_dim);
    b.fp8_transpose("q_up.input", static_cast<double>(tokens) * m.q_lora_rank);
    b.linear_wgrad("q_up", m.q_lora_rank, heads * m.head_dim);
    b.memory("norm_q.bwd", b.e * tokens * m.q_lora_rank * 3);
    b.fp8_cast_transpose("q_down.grad_output", static_cast<double>(tokens) * m.q_lora_rank);
    b.gemm("q_down.dgrad", tokens, h, m.q_lora_rank);
    b.comm(b.s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce,
           b.boundary_bytes(), true);
    b.gemm("q_down.wgrad", h, m.q_lora_rank, tokens);
  } else {
    b.fp8_cast_transpose("q.grad_output", static_cast<double>(tokens) * heads * m.head_dim);
    b.linear_dgrad("q", h, heads * m.head_dim);
    b.comm(b.s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce,
           b.boundary_bytes(), true);
    b.linear_wgrad("q", h, heads * m.head_dim);
  }
}

// The mixture of experts in place of the FFN (Megatron-LM's MoE layer with the all-to-all token
// dispatcher): the router scores each rank's tokens, the tokens are permuted by expert and sent
// to the ranks that hold their experts (all-to-all over the expert-parallel group), gathered
// over the tensor-parallel ranks that split those experts (sequence parallelism splits the
// tokens), run through the local experts as one grouped GEMM, and return the same way. Shared
// experts run as a dense FFN after them.
struct Moe {
  int64_t local_experts;    // experts / expert_parallel
  double tokens;            // routed tokens the most loaded rank's experts process: T k load
  int64_t per_expert;       // rows of each local expert's GEMM there
  double model_per_expert;  // the same at uniform, dropless routing (the MFU numerator's)
  int64_t ffn, ffn_in;      // one expert's FFN widths over the tensor-parallel ranks
  double local_routed;      // routed tokens one rank dispatches: T_local k load

  Moe(const ModelConfig& m, const LayerShape& s, double local_tokens) {
    // The tokens of the replica's micro-batch; with experts whole, each rank's own share.
    const double T = static_cast<double>(s.micro_batch) * s.sequence /
                     (s.experts_whole ? static_cast<double>(s.tensor_parallel) : 1.0);
    local_experts = m.experts / s.expert_parallel;
    tokens = T * m.experts_per_token * s.expert_load;
    model_per_expert = T * m.experts_per_token / static_cast<double>(local_experts);
    per_expert = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(tokens / static_cast<double>(local_experts))));
    ffn = m.expert_ffn_hidden / (s.experts_whole ? 1 : s.tensor_parallel);
    ffn_in = (m.activation == Activation::swiglu ? 2 : 1) * ffn;
    local_routed = local_tokens * m.experts_per_token * s.expert_load;
  }
};

int64_t shared_ffn(const ModelConfig& m, const LayerShape& s) {
  return static_cast<int64_t>(m.shared_experts) * m.expert_ffn_hidden / s.tensor_parallel;
}

void moe_forward(Builder& b) {
  const ModelConfig& m = b.m;
  const LayerShape& s = b.s;
  const int64_t h = m.hidden;
  const Moe x(m, s, b.local_tokens());
  const auto local = static_cast<int64_t>(b.local_tokens());
  b.gemm("router", local, m.experts, h, false);
  b.memory("router.topk", 4.0 * b.local_tokens() * m.experts * 3);
  b.memory("moe.permute", b.e * x.local_routed * h * 2);
  b.expert_alltoall("ep.dispatch", b.e * x.local_routed * h);
  const bool gather = s.sequence_parallel && !s.experts_whole;
  if (gather) b.comm(CommKind::allgather, b.e * x.tokens * h);
  b.fp8_cast_transpose("experts.fc1.input", x.tokens * h);
  b.grouped_gemm("experts.fc1", x.local_experts, x.per_expert, x.ffn_in, h, x.model_per_expert);
  b.memory(m.activation == Activation::swiglu ? "experts.swiglu" : "experts.gelu",
           b.e * x.tokens * (x.ffn_in + x.ffn));
  b.fp8_cast_transpose("experts.fc2.input", x.tokens * x.ffn);
  b.grouped_gemm("experts.fc2", x.local_experts, x.per_expert, h, x.ffn, x.model_per_expert);
  if (gather) b.comm(CommKind::reducescatter, b.e * x.tokens * h);
  b.expert_alltoall("ep.combine", b.e * x.local_routed * h);
  b.memory("moe.unpermute", b.e * x.local_routed * h * 2);
  if (m.shared_experts > 0) {
    const int64_t ffn = shared_ffn(m, s);
    const int64_t ffn_in = (m.activation == Activation::swiglu ? 2 : 1) * ffn;
    b.enter_tp_fwd();
    b.fp8_cast_transpose("shared.fc1.input", static_cast<double>(b.tokens()) * h);
    b.linear_fwd("shared.fc1", h, ffn_in);
    b.memory(m.activation == Activation::swiglu ? "shared.swiglu" : "shared.gelu",
             b.e * b.tokens() * (ffn_in + ffn));
    b.fp8_cast_transpose("shared.fc2.input", static_cast<double>(b.tokens()) * ffn);
    b.linear_fwd("shared.fc2", ffn, h);
    b.leave_tp_fwd();
  }
}

void moe_backward(Builder& b) {
  const ModelConfig& m = b.m;
  const LayerShape& s = b.s;
  const int64_t h = m.hidden;
  const Moe x(m, s, b.local_tokens());
  const auto local = static_cast<int64_t>(b.local_tokens());
  if (m.shared_experts > 0) {
    const int64_t ffn = shared_ffn(m, s);
    const int64_t ffn_in = (m.activation == Activation::swiglu ? 2 : 1) * ffn;
    b.fp8_cast_transpose("shared.fc2.grad_output", b.local_tokens() * h);
    b.enter_tp_fwd();
    b.linear_dgrad("shared.fc2", ffn, h);
    b.linear_wgrad("shared.fc2", ffn, h);
    b.memory(m.activation == Activation::swiglu ? "shared.swiglu.bwd" : "shared.gelu.bwd",
             b.e * b.tokens() * (ffn_in + 2.0 * ffn));
    b.fp8_cast_transpose("shared.fc1.grad_output", static_cast<double>(b.tokens()) * ffn_in);
    b.regather_input();
    b.linear_dgrad("shared.fc1", h, ffn_in);
    b.comm(s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce, b.boundary_bytes(),
           true);
    b.linear_wgrad("shared.fc1", h, ffn_in);
  }
  b.memory("moe.unpermute.bwd", b.e * x.local_routed * h * 2);
  b.expert_alltoall("ep.combine.bwd", b.e * x.local_routed * h);
  const bool gather = s.sequence_parallel && !s.experts_whole;
  if (gather) b.comm(CommKind::allgather, b.e * x.tokens * h);
  // Per local expert: dgrad (rows x h) . (h x ffn), wgrad (ffn x rows) . (rows x h).
  b.fp8_cast_transpose("experts.fc2.grad_output", x.tokens * h);
  b.grouped_gemm("experts.fc2.dgrad", x.local_experts, x.per_expert, x.ffn, h, x.model_per_expert);
  b.grouped_wgrad("experts.fc2.wgrad", x.local_experts, x.ffn, h, x.per_expert, x.model_per_expert);
  b.memory(m.activation == Activation::swiglu ? "experts.swiglu.bwd" : "experts.gelu.bwd",
           b.e * x.tokens * (x.ffn_in + 2.0 * x.ffn));
  b.fp8_cast_transpose("experts.fc1.grad_output", x.tokens * x.ffn_in);
  b.grouped_gemm("experts.fc1.dgrad", x.local_experts, x.per_expert, h, x.ffn_in,
                 x.model_per_expert);
  if (gather) b.comm(CommKind::reducescatter, b.e * x.tokens * h, true);
  b.grouped_wgrad("experts.fc1.wgrad", x.local_experts, h, x.ffn_in, x.per_expert,
                  x.model_per_expert);
  b.expert_alltoall("ep.dispatch.bwd", b.e * x.local_routed * h);
  b.memory("moe.permute.bwd", b.e * x.local_routed * h * 2);
  b.memory("router.topk.bwd", 4.0 * b.local_tokens() * m.experts * 3);
  b.gemm("router.dgrad", local, h, m.experts, false);
  b.gemm("router.wgrad", h, m.experts, local, false);
}

}  // namespace

namespace {

// A norm over the queries and keys after their projection (ModelConfig::qk_norm): read and
// written once, its backward half as much again.
void qk_norm(Builder& b, bool forward) {
  const ModelConfig& m = b.m;
  if (m.qk_norm == QkNorm::none) return;
  const double n =
      static_cast<double>(b.tokens()) * (m.q_width() + m.kv_width()) / b.s.tensor_parallel;
  if (forward)
    b.memory("qk_norm", b.e * n * 2);
  else
    b.memory("qk_norm.bwd", b.e * n * 3);
}

// The attention block from its normed input to the projection's output; `reduce`: leaving the
// tensor-parallel region (a parallel layer reduces attention's and the MLP's sum once instead).
void attention_fwd(Builder& b, bool reduce) {
  const ModelConfig& m = b.m;
  const int t = b.s.tensor_parallel;
  const int64_t qkv = (m.q_width() + 2 * m.kv_width()) / t;
  if (m.mla()) {
    mla_forward(b);
    return;
  }
  if (reduce) b.enter_tp_fwd(true);
  b.linear_fwd("qkv", m.hidden, qkv);
  qk_norm(b, true);
  if (m.position == Position::rotary) b.rotary(true, qkv);
  b.repeat_kv(true);
  b.context_comm(CommKind::allgather, true);
  b.attention(true);
  b.attention_reshape(true);
  b.fp8_cast_transpose("proj.input", static_cast<double>(b.tokens()) * (m.q_width() / t));
  if (reduce)
    b.row_parallel_fwd("proj", m.q_width() / t, m.hidden);
  else
    b.linear_fwd("proj", m.q_width() / t, m.hidden);
}

void mlp_fwd(Builder& b, bool reduce) {
  const ModelConfig& m = b.m;
  const int t = b.s.tensor_parallel;
  if (b.s.moe_layer) {
    moe_forward(b);
    return;
  }
  if (reduce) b.enter_tp_fwd(true);
  b.linear_fwd("fc1", m.hidden, b.ffn_in());
  if (m.activation == Activation::swiglu)
    b.swiglu(true);
  else
    b.memory("gelu", b.e * b.tokens() * (b.ffn_in() + m.ffn_hidden / t));
  b.fp8_cast_transpose("fc2.input", static_cast<double>(b.tokens()) * (m.ffn_hidden / t));
  if (reduce)
    b.row_parallel_fwd("fc2", m.ffn_hidden / t, m.hidden);
  else
    b.linear_fwd("fc2", m.ffn_hidden / t, m.hidden);
}

// The MLP block's backward from its output's gradient to its input's; `reduce`: the input
// gradient summed over the tensor-parallel ranks (asynchronously, beside fc1's weight gradient).
void mlp_bwd(Builder& b, bool reduce) {
  const ModelConfig& m = b.m;
  const LayerShape& s = b.s;
  const int t = s.tensor_parallel;
  const int64_t h = m.hidden;
  if (s.moe_layer) {
    moe_backward(b);
    return;
  }
  b.fp8_cast_transpose("fc2.grad_output", b.local_tokens() * h);
  if (reduce) b.enter_tp_fwd(true);
  b.linear_dgrad("fc2", m.ffn_hidden / t, h);
  b.linear_wgrad("fc2", m.ffn_hidden / t, h);
  if (m.activation == Activation::swiglu)
    b.swiglu(false);
  else
    b.memory("gelu.bwd", b.e * b.tokens() * (b.ffn_in() + 2.0 * m.ffn_hidden / t));
  b.fp8_cast_transpose("fc1.grad_output", static_cast<double>(b.tokens()) * b.ffn_in());
  b.regather_input();
  b.linear_dgrad("fc1", h, b.ffn_in());
  b.fp8_transpose("fc1.input", static_cast<double>(b.tokens()) * h);
  if (reduce)
    b.comm(s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce, b.boundary_bytes(),
           true);
  b.linear_wgrad("fc1", h, b.ffn_in());
}

void attention_bwd(Builder& b, bool reduce) {
  const ModelConfig& m = b.m;
  const LayerShape& s = b.s;
  const int t = s.tensor_parallel;
  const int64_t h = m.hidden;
  const int64_t qkv = (m.q_width() + 2 * m.kv_width()) / t;
  if (m.mla()) {
    mla_backward(b);
    return;
  }
  b.fp8_cast_transpose("proj.grad_output", b.local_tokens() * h);
  if (reduce) b.enter_tp_fwd(true);
  b.linear_dgrad("proj", m.q_width() / t, h);
  b.linear_wgrad("proj", m.q_width() / t, h);
  b.attention_reshape(false);
  b.context_comm(CommKind::allgather, true);
  b.attention(false);
  b.context_comm(CommKind::reducescatter, false);
  b.repeat_kv(false);
  if (m.position == Position::rotary) b.rotary(false, qkv);
  qk_norm(b, false);
  b.fp8_cast_transpose("qkv.grad_output", static_cast<double>(b.tokens()) * qkv);
  if (reduce) b.regather_input();  // a parallel layer's MLP gathered the shared input
  b.linear_dgrad("qkv", h, qkv);
  b.fp8_transpose("qkv.input", static_cast<double>(b.tokens()) * h);
  b.comm(s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce, b.boundary_bytes(),
         true);
  b.linear_wgrad("qkv", h, qkv);
}

// A parallel layer (ModelConfig::parallel_attention): attention and the MLP on the same normed
// input, their outputs added and reduced over the tensor-parallel ranks once.
std::vector<Step> parallel_layer_forward(Builder& b) {
  b.norm_fwd("norm1");
  if (b.m.parallel_norms == 2) b.norm_fwd("norm2");
  b.cast_for_matmul("norm1");
  b.enter_tp_fwd(true);
  attention_fwd(b, false);
  mlp_fwd(b, false);
  b.memory("branch_add", b.e * b.tokens() * b.m.hidden * 3);
  b.leave_tp_fwd();
  b.dropout_residual("dropout_residual", b.m.bias || b.m.mlp_bias);
  return b.steps;
}

// Its backward: the MLP's and attention's input gradients added before their one reduction
// (attention's), which overlaps qkv's weight gradient.
std::vector<Step> parallel_layer_backward(Builder& b) {
  b.dropout_residual_bwd("dropout_residual");
  b.enter_tp_fwd(true);
  mlp_bwd(b, false);
  attention_bwd(b, false);
  b.cast_back("norm1");
  if (b.m.parallel_norms == 2) b.norm_bwd("norm2");
  b.norm_bwd("norm1");
  b.residual_sum("residual");
  return b.steps;
}

}  // namespace

bool fused_softmax_runs(const ModelConfig& m, const LayerShape& s, int64_t rows) {
  // A framework file without `masked_softmax` keeps the fused kernel everywhere; an eager
  // framework's attention counts its own kernels.
  if (s.eager || !s.softmax.given) return true;
  const int64_t sq = s.sequence, sk = s.sequence * s.context_parallel;
  const int64_t pow2 = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(sk)));
  const int64_t per_block = (128 / std::min<int64_t>(pow2, 32)) * (pow2 <= 128 ? 2 : 1);
  return s.precision != Precision::fp32 && sk > 16 &&
         (s.softmax.fused_up_to == 0 || sk <= s.softmax.fused_up_to) && sq % 4 == 0 &&
         rows % 4 == 0 && (m.causal ? rows : sq) % per_block == 0;
}

bool softmax_upcast(const ModelConfig& m, const LayerShape& s, int64_t rows) {
  return !s.flash_attention && s.softmax.unfused_fp32 && s.precision != Precision::fp32 &&
         !fused_softmax_runs(m, s, rows);
}

// Pre-norm (GPT, Llama): norm, block, residual add; post-norm (OLMo 2): block, norm, add;
// sandwich (Gemma 2 and 3): norm, block, norm, add.
std::vector<Step> layer_forward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  if (m.parallel_attention) return parallel_layer_forward(b);
  const bool pre = m.norm_placement != NormPlacement::post;
  const bool post = m.norm_placement != NormPlacement::pre;
  if (pre) b.norm_fwd("norm1");
  b.cast_for_matmul("norm1");
  attention_fwd(b, true);
  if (post) b.norm_fwd("post_norm1");
  b.dropout_residual("dropout_residual1", m.bias);
  if (pre) b.norm_fwd("norm2");
  b.cast_for_matmul("norm2");
  mlp_fwd(b, true);
  if (post) b.norm_fwd("post_norm2");
  b.dropout_residual("dropout_residual2", m.mlp_bias);
  return b.steps;
}

// The MLP block, then attention, in reverse. The row-parallel fc2's input gradient needs the
// whole output gradient (all-gather with sequence parallelism); the column-parallel fc1's input
// gradient is summed over ranks (all-reduce, or reduce-scatter), overlapped with fc1's weight
// gradient.
std::vector<Step> layer_backward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  if (m.parallel_attention) return parallel_layer_backward(b);
  const bool pre = m.norm_placement != NormPlacement::post;
  const bool post = m.norm_placement != NormPlacement::pre;
  b.dropout_residual_bwd("dropout_residual2");
  if (post) b.norm_bwd("post_norm2");
  mlp_bwd(b, true);
  b.cast_back("norm2");
  if (pre) b.norm_bwd("norm2");
  b.residual_sum("residual2");
  b.dropout_residual_bwd("dropout_residual1");
  if (post) b.norm_bwd("post_norm1");
  attention_bwd(b, true);
  b.cast_back("norm1");
  if (pre) b.norm_bwd("norm1");
  b.residual_sum("residual1");
  return b.steps;
}

std::vector<Step> embedding_forward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  // Vocabulary-parallel lookup: each rank holds V/t rows, the partial results are summed.
  b.memory("embedding", b.r * b.tokens() * m.hidden * 2);
  b.leave_tp_fwd();
  if (m.position == Position::learned)
    b.memory("position_embedding", b.r * b.local_tokens() * m.hidden * 3);
  // Eager: the embedding's dropout, its own kernel.
  if (s.eager && m.dropout > 0)
    b.memory("embedding.dropout", (2 * b.r + 1) * b.local_tokens() * m.hidden);
  return b.steps;
}

std::vector<Step> embedding_backward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  b.enter_tp_fwd();
  if (s.eager && m.dropout > 0)
    b.memory("embedding.dropout.bwd", (2 * b.r + 1) * b.local_tokens() * m.hidden);
  b.memory("embedding.bwd", b.r * b.tokens() * m.hidden * 3);
  // Autocast: the table's dense fp32 gradient written from zero, then added to its .grad.
  if (s.autocast)
    b.grad_accumulate("embedding",
                      16.0 * static_cast<double>(m.vocab) / s.tensor_parallel * m.hidden);
  // A separate accumulation: the table's gradient added into its .grad (3 e bytes an entry).
  if (s.grad_accumulate)
    b.grad_accumulate("embedding",
                      3.0 * b.e * static_cast<double>(m.vocab) / s.tensor_parallel * m.hidden);
  return b.steps;
}

// A sequence classifier (Megatron-LM's Classification model, as BERT's GLUE finetuning runs it):
// the final norm over every token, then on each sequence's first token the pooler (a dense layer
// and tanh) and the classifier, neither split over the tensor-parallel ranks: each rank holds the
// whole hidden state after the last layer's all-reduce, or gathers it from the ranks under
// sequence parallelism (Megatron-LM's Pooler; its backward takes the rank's own part back, no
// collective).
std::vector<Step> classifier_forward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  const int64_t mb = s.micro_batch, h = m.hidden;
  b.norm_fwd("final_norm");
  b.enter_tp_fwd();
  b.gemm("pooler", mb, h, h);
  b.memory("pooler.tanh", 2 * b.e * mb * h);
  b.gemm("classifier", mb, m.classes, h);
  b.memory("classifier.loss", 8.0 * mb * m.classes);
  return b.steps;
}

std::vector<Step> classifier_backward(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  const int64_t mb = s.micro_batch, h = m.hidden;
  b.memory("classifier.loss.bwd", 8.0 * mb * m.classes);
  b.gemm("classifier.dgrad", mb, h, m.classes);
  b.gemm("classifier.wgrad", h, m.classes, mb);
  b.memory("pooler.tanh.bwd", 3 * b.e * mb * h);
  b.gemm("pooler.dgrad", mb, h, h);
  b.gemm("pooler.wgrad", h, h, mb);
  b.norm_bwd("final_norm");
  return b.steps;
}

std::vector<Step> head_forward(const ModelConfig& m, const LayerShape& s) {
  if (m.head == Head::classification) return classifier_forward(m, s);
  Builder b(m, s);
  const int64_t v = m.vocab / s.tensor_parallel;
  b.norm_fwd("final_norm");
  b.cast_for_matmul("final_norm");
  b.enter_tp_fwd();
  b.linear_fwd("logits", m.hidden, v);
  // The loss over fp32 logits, in the bytes per logit its kernels move: the logits cast to
  // fp32 (from a 16-bit matmul: e + 4), then
  // - Megatron-LM's vocabulary-parallel cross-entropy (mpu/cross_entropy.py, on
  //   `output.float()`): max (4), subtract the max in place (8), exp in place (8), sum (4),
  //   divide by the sum in place (8), keeping the softmax for the backward pass; the max and the
  //   sum-exp all-reduced over the ranks (fp32, per token);
  // - eager PyTorch (F.cross_entropy): log_softmax (8), the gather of the targets per token.
  b.loss("cross_entropy", v, s.eager ? 8.0 : 32.0);
  if (!s.eager) b.comm(CommKind::allreduce, 4.0 * 2 * b.tokens());
  return b.steps;
}

std::vector<Step> head_backward(const ModelConfig& m, const LayerShape& s) {
  if (m.head == Head::classification) return classifier_backward(m, s);
  Builder b(m, s);
  const int64_t v = m.vocab / s.tensor_parallel;
  // Megatron-LM: the kept softmax, less one at the targets, times the loss's gradient in place
  // (8); eager: nll_loss's gradient written over the logits (4) and log_softmax's backward (12).
  // Then the gradient cast back to the matmul's precision.
  b.loss("cross_entropy.bwd", v, s.eager ? 16.0 : 8.0);
  b.linear_dgrad("logits", m.hidden, v);
  b.comm(s.sequence_parallel ? CommKind::reducescatter : CommKind::allreduce, b.boundary_bytes(),
         true);
  b.linear_wgrad("logits", m.hidden, v);
  b.cast_back("final_norm");
  b.norm_bwd("final_norm");
  return b.steps;
}

std::vector<Step> attention_recompute(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  if (!s.flash_attention) {
    b.context_comm(CommKind::allgather, true);
    b.attention(true);
  }
  return b.steps;
}

Step gather_copy_out(double weight_bytes) {
  Step st;
  st.op.name = "zero3.copy_out";
  st.op.kind = OpKind::memory;
  st.op.bytes = 2 * weight_bytes;
  return st;
}

std::vector<Step> selective_op_recompute(const ModelConfig& m, const LayerShape& s) {
  Builder b(m, s);
  const int t = s.tensor_parallel;
  const int64_t h = m.hidden;
  // torchtitan's policy counts a layer's matmuls in the order they run (wq, wk, wv, wo, w1, w3,
  // w2) and keeps every odd one's output: the keys' (wk), the output projection (wo) and w3 run
  // again, with every elementwise op of the forward pass up to the last output the backward
  // pass needs; attention's output is kept.
  b.norm_fwd("norm1");
  b.cast_for_matmul("norm1");
  b.linear_fwd("k", h, m.kv_width() / t);
  if (m.position == Position::rotary) b.rotary(true, (m.q_width() + 2 * m.kv_width()) / t);
  b.repeat_kv(true);
  b.attention_reshape(true);
  b.linear_fwd("proj", m.q_width() / t, h);
  b.dropout_residual("dropout_residual1", m.bias);
  b.norm_fwd("norm2");
  b.cast_for_matmul("norm2");
  b.linear_fwd("w3", h, m.ffn_hidden / t);
  b.swiglu(true);
  return b.steps;
}

std::string to_string(Optimizer o) {
  switch (o) {
    case Optimizer::adam:
      return "adam";
    case Optimizer::sgd:
      return "sgd";
    case Optimizer::sgd_momentum:
      return "sgd_momentum";
  }
  return "?";
}

double optimizer_state_bytes(Optimizer o) {
  return o == Optimizer::adam ? 8 : o == Optimizer::sgd_momentum ? 4 : 0;
}

Op optimizer_step(double params, Precision p, Optimizer o) {
  Op op;
  op.name = "optimizer." + to_string(o);
  op.kind = OpKind::memory;
  op.streaming = true;
  // Reads the gradient (fp32 main gradients, Megatron), reads and writes the fp32 master
  // weights and the optimizer's state (Adam's two moments, SGD's momentum), and writes the
  // low-precision weights: 4 + 2 x (4 + state) + (2 or 0) bytes per parameter (Adam 30, plain
  // SGD 14). FLOPs: Adam's update about 12 a parameter, SGD's 2, with momentum 4.
  const double grad = 4;
  op.bytes = params * (grad + 2 * (4 + optimizer_state_bytes(o)) + (p == Precision::fp32 ? 0 : 2));
  op.flops = params * (o == Optimizer::adam ? 12 : o == Optimizer::sgd_momentum ? 4 : 2);
  return op;
}

double model_flops_per_iteration(const ModelConfig& m, int64_t batch, int64_t sequence) {
  LayerShape s;
  s.micro_batch = batch;
  s.sequence = sequence;
  double f = 0;
  auto add = [&](const std::vector<Step>& steps) {
    for (const Step& st : steps) f += st.op.model_flops;
  };
  // One layer of each kind, forward and backward, times its count.
  auto layers = [&](const LayerShape& x, int count) {
    const double before = f;
    f = 0;
    add(layer_forward(m, x));
    add(layer_backward(m, x));
    f = before + f * count;
  };
  const int moe = m.moe_layers_in(0, m.layers);
  layers(s, m.layers - moe);
  if (moe > 0) {
    LayerShape x = s;
    x.moe_layer = true;
    layers(x, moe);
  }
  add(head_forward(m, s));
  add(head_backward(m, s));
  return f;
}

Op conv_op(const std::string& name, const ConvShape& c, int element_bytes) {
  Op op;
  op.name = name;
  op.kind = OpKind::conv;
  op.conv = c;
  const int64_t p = c.p(), q = c.q();
  switch (c.pass) {
    case ConvPass::forward:
      op.m = c.n * p * q, op.n = c.k, op.k = c.c * c.r * c.s;
      break;
    case ConvPass::data_grad:
      op.m = c.n * c.h * c.w, op.n = c.c, op.k = c.k * c.r * c.s;
      break;
    case ConvPass::weight_grad:
      op.m = c.k, op.n = c.c * c.r * c.s, op.k = c.n * p * q;
      break;
  }
  op.flops = 2 * c.macs();
  op.model_flops = op.flops;
  const double input = static_cast<double>(c.n) * c.c * c.h * c.w;
  const double filters = static_cast<double>(c.k) * c.c * c.r * c.s;
  const double output = static_cast<double>(c.n) * c.k * p * q;
  op.bytes = element_bytes * (input + filters + output);
  return op;
}

}  // namespace hetsim::workload
