// Transformer layers as kernels with exact shapes, FLOPs and bytes, and the tensor-parallel
// communication between them, in the order Megatron-LM runs them.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/workload/model/model.h"

namespace hetsim::workload {

enum class Precision { fp32, fp16, bf16, fp8 };
std::string to_string(Precision p);
// The optimizer a plan trains with (`optimizer:`): Adam (mixed precision: fp32 master weights
// and two fp32 moments), plain SGD, or SGD with momentum (one fp32 buffer).
enum class Optimizer { adam, sgd, sgd_momentum };
std::string to_string(Optimizer o);
// Bytes of optimizer state per parameter beyond the fp32 master copy (8, 0, 4).
double optimizer_state_bytes(Optimizer o);
// Bytes of one activation or weight element.
int element_bytes(Precision p);

enum class OpKind { gemm, attention_forward, attention_backward, memory, conv };

// A 2-D convolution (NCHW, cross-correlation as cuDNN computes it): n images of c channels of
// h x w, k filters of r x s, one stride and padding per axis. Its three kernels (forward, the
// data gradient, the weight gradient) run as implicit GEMMs; Op::m, n, k hold that GEMM's shape.
enum class ConvPass : uint8_t { forward, data_grad, weight_grad };
struct ConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, r = 0, s = 0;         // filters
  int64_t stride = 1, pad_h = 0, pad_w = 0;
  ConvPass pass = ConvPass::forward;
  int64_t p() const { return (h + 2 * pad_h - r) / stride + 1; }  // output height
  int64_t q() const { return (w + 2 * pad_w - s) / stride + 1; }  // output width
  double macs() const {
    return static_cast<double>(n) * k * c * r * s * static_cast<double>(p()) * q();
  }
};

// FLOPs one attention kernel executes over `heads` heads: Q K^T and P V, 4 b s^2 d per head
// forward. A fused (flash) kernel skips the masked half of causal attention and recomputes the
// forward inside its backward (FlashAttention-2: backward = 2.5x forward); an unfused one
// computes every score, backward 2x.
double attention_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal,
                       bool fused, bool backward);

// One kernel on one GPU (of a tensor-parallel group: shapes are per rank).
struct Op {
  std::string name;  // e.g. "fc1.dgrad"
  OpKind kind = OpKind::memory;
  int64_t m = 0, n = 0, k = 0;  // gemm: (m x k) . (k x n)
  // attention: batch, local heads, sequence, head size
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool causal = false;
  bool fused = false;  // attention: one fused (flash) kernel; else GEMMs and a softmax
  // attention: the share of the causal kernel's score blocks a fused kernel computes under the
  // model's local attention (ModelConfig::attention_span; 1 without), already in `flops`.
  double span = 1;
  // memory: a long pass over one large flat buffer with little work per byte (an optimizer
  // step or a gradient accumulation over the parameters, the loss over the logits), unlike a
  // layer's elementwise kernels over activations (dropout's random numbers, norms' reductions,
  // the attention scores' softmax); the cost model may give it its own share of bandwidth
  // (DatasheetEfficiency::streaming_memory_for).
  bool streaming = false;
  double flops = 0;        // executed floating-point operations
  double model_flops = 0;  // the MFU numerator's count (Narayanan et al.: GEMMs and attention)
  double bytes = 0;        // bytes moved to and from device memory
  ConvShape conv;          // conv: the convolution (kind conv only)
};

// The convolution kernel of this shape and pass: FLOPs 2 n k c r s p q for each pass, the bytes
// of its input, filters and output at e bytes an element, and the implicit GEMM's shape
// (forward: n p q x k x c r s; data gradient: n h w x c x k r s; weight gradient:
// k x c r s x n p q).
Op conv_op(const std::string& name, const ConvShape& shape, int element_bytes);

// halo: each rank sends comm_bytes to each neighbour in rank order (network::Op::halo).
enum class CommKind { none, allreduce, allgather, reducescatter, alltoall, halo };

// One step of a layer's program: a kernel, or a collective over the tensor-parallel group (or,
// `expert`, over the expert-parallel group: a MoE layer's token dispatch and combine). A
// collective marked `async` runs beside the next kernel; the kernel after that waits for it.
struct Step {
  Op op;
  CommKind comm = CommKind::none;
  double comm_bytes = 0;  // nccl-tests size of the collective (per rank; total for AG / RS)
  bool async = false;
  bool expert = false;
  // Over the context-parallel group (ring attention's key/value exchange); `async` ones overlap
  // the attention kernel after them.
  bool context = false;
};

// The plan's choices of how a transformer layer's kernels run, each a plan key bound to its field
// here (plan_keys.cpp), copied whole into every stage's LayerShape: a new such key is its row, its
// field and its mechanism in the layer programs below, and the estimator's cache of layer costs
// (which keys on the whole LayerShape) tells plans that differ in it apart by itself.
struct KernelChoices {
  // Plan key tp_comm_overlap, with sequence parallelism on a fused framework: each layer's
  // sequence-parallel all-gather runs beside the column-parallel GEMM that reads it, and each
  // reduce-scatter beside the row-parallel GEMM that writes it (Transformer Engine's userbuffers
  // overlap, chunk by chunk), instead of before or after it.
  bool tp_comm_overlap = false;
  // Plan key bias_dropout_fusion: false runs a fused framework's bias-dropout-add as PyTorch's
  // own kernels (Megatron-LM's --no-bias-dropout-fusion): the bias add, the dropout and the
  // residual add each a pass over the activations, where the fused kernel makes one.
  bool bias_dropout_fusion = true;
  auto operator<=>(const KernelChoices&) const = default;
};

// Standard attention's scale-mask-softmax in a fused framework (a framework file's
// `masked_softmax`, Framework::masked_softmax, copied whole into every LayerShape): whether the
// framework says where its fused kernel runs (without it, the fused kernel everywhere), the
// longest key length the kernel takes (0: any), and whether the unfused path casts the scores up
// to fp32, scales and masks them before the softmax and casts back (Megatron-LM with
// apply_query_key_layer_scaling) rather than masking and taking the softmax in place.
struct MaskedSoftmax {
  bool given = false;
  int64_t fused_up_to = 0;
  bool unfused_fp32 = false;
  auto operator<=>(const MaskedSoftmax&) const = default;
};

struct LayerShape {
  int64_t micro_batch = 1;
  int64_t sequence = 1;
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  bool flash_attention = true;
  Precision precision = Precision::bf16;
  // A mixture-of-experts layer (ModelConfig::is_moe): its experts split over `expert_parallel`
  // ranks (each holds experts / expert_parallel, tensor-parallel over the same ranks as the
  // layer, Megatron-LM's default expert_tensor_parallel), and the tokens that the most loaded
  // of them processes over the uniform share (routing imbalance, capacity dropping; see
  // expert_loads in plan.h). Every rank of the expert-parallel group waits for that one at the
  // combine, so each runs its program.
  bool moe_layer = false;
  int expert_parallel = 1;
  // Plan::experts_whole: each expert whole on one of the tensor-parallel ranks, which dispatch
  // their own sequence-parallel shares (no gather over the ranks around the expert GEMMs).
  bool experts_whole = false;
  double expert_load = 1;
  // Context parallelism (ring attention, Megatron-LM's context_parallel_size): `sequence` is this
  // rank's share of the whole sequence of sequence x context_parallel tokens; attention runs the
  // rank's queries against every rank's keys and values, passed around the group while it
  // computes, with the causal work balanced over the ranks (two chunks each).
  int context_parallel = 1;
  // The framework's kernels (Framework::eager_kernels, Framework::autocast): eager PyTorch runs
  // each elementwise op as its own kernel; under autocast the parameters and the residual stream
  // are fp32, so norms run in fp32, their outputs and every weight are cast for the matmuls, and
  // every weight gradient is cast back and added to the parameter's fp32 gradient.
  bool eager = false;
  bool autocast = false;
  MaskedSoftmax softmax;  // the framework's (Framework::masked_softmax)
  // Framework::separate_grad_accumulation outside autocast: every weight gradient added into the
  // parameter's gradient (in the plan's precision) by a kernel of its own, each micro-batch.
  bool grad_accumulate = false;
  KernelChoices kernels;  // the plan's (Plan::kernels)
  // Every field compared (the estimator's cache key).
  auto operator<=>(const LayerShape&) const = default;
};

// Whether standard attention's scale-mask-softmax runs as the framework's fused kernel
// (Megatron-LM's FusedScaleMaskSoftmax, is_kernel_available): 16-bit scores of more than 16 and
// at most MaskedSoftmax::fused_up_to keys, the queries and `rows` (micro-batch x local
// heads) in multiples of 4, and a kernel block's rows (4 warps of one row each past 128 keys, of
// two rows up to 128) dividing `rows` (causal) or the queries. Elsewhere PyTorch's kernels run it.
bool fused_softmax_runs(const ModelConfig& m, const LayerShape& s, int64_t rows);
// Whether standard attention's softmax runs unfused in fp32 from 16-bit scores
// (MaskedSoftmax::unfused_fp32 where the fused kernel does not run): its extra passes over the
// scores (the layer programs) and its output kept in fp32 (layer_activation_bytes).
bool softmax_upcast(const ModelConfig& m, const LayerShape& s, int64_t rows);

// The programs of one transformer layer (a MoE layer where shape.moe_layer), and of the embedding
// (first stage) and the head (last stage: final norm, logits, cross-entropy), forward and backward.
std::vector<Step> layer_forward(const ModelConfig& m, const LayerShape& s);
std::vector<Step> layer_backward(const ModelConfig& m, const LayerShape& s);
std::vector<Step> embedding_forward(const ModelConfig& m, const LayerShape& s);
std::vector<Step> embedding_backward(const ModelConfig& m, const LayerShape& s);
std::vector<Step> head_forward(const ModelConfig& m, const LayerShape& s);
std::vector<Step> head_backward(const ModelConfig& m, const LayerShape& s);
// Selective recomputation (Korthikanti et al.): the attention core, forward, again before the
// layer's backward. Empty with flash attention, which recomputes inside its backward kernel.
std::vector<Step> attention_recompute(const ModelConfig& m, const LayerShape& s);
// FSDP2's copy of a gathered layer out of the all-gather's buffer into its parameters
// (Framework::gather_copy_out): one memory-bound kernel that reads and writes `weight_bytes`.
Step gather_copy_out(double weight_bytes);
// torchtitan's op-level selective checkpointing (Recompute::selective_op) of a Llama-style layer
// (SwiGLU; separate query, key and value projections): what runs again before the layer's
// backward pass. Every second matmul's output is recomputed (the keys' projection, the output
// projection and SwiGLU's w3), and every elementwise op; attention's output and the other
// matmuls' are kept (layer_activation_bytes).
std::vector<Step> selective_op_recompute(const ModelConfig& m, const LayerShape& s);

// The optimizer step over `params` local parameters (master weights and the optimizer's state in
// fp32), as one memory-bound kernel.
Op optimizer_step(double params, Precision p, Optimizer o = Optimizer::adam);

// Model FLOPs of one iteration over `tokens` tokens (forward + backward, no recompute), the
// sum of the ops above: equals 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) for GPT (formulas.md).
double model_flops_per_iteration(const ModelConfig& m, int64_t batch, int64_t sequence);

}  // namespace hetsim::workload
