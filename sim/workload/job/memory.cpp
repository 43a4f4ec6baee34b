// The memory model; see memory.h.
#include "sim/workload/job/memory.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "sim/workload/job/pass_rules.h"
#include "sim/workload/model/cnn.h"

namespace hetsim::workload {

double layer_activation_bytes(const ModelConfig& m, const LayerShape& s, Recompute r) {
  const double e = element_bytes(s.precision);
  const double t = s.tensor_parallel;
  const double sb = static_cast<double>(s.sequence) * s.micro_batch;
  const double h = m.hidden;
  const double outside = s.sequence_parallel ? 1.0 / t : 1.0;  // regions sequence parallel splits
  if (r == Recompute::full) return e * sb * h * outside;       // the layer input only
  // torchtitan's op-level checkpointing (no tensor parallelism): the layer's input and the outputs
  // it keeps: the query and value projections', attention's (and its fp32 log-sum-exp per head
  // and token), w1's and w2's.
  if (r == Recompute::selective_op)
    return sb * e * (h + m.q_width() + m.kv_width() + m.q_width() + m.ffn_hidden + h) +
           sb * 4.0 * m.heads;
  // Outside the tensor-parallel regions: both norm inputs and the QKV and fc1 inputs (4 tensors
  // of e bytes), two 1-byte dropout masks: 10 s b h at 16 bits (Korthikanti Table 2); no masks
  // without dropout (Llama).
  // Sandwich norms keep their two extra inputs (the blocks' outputs); a parallel layer keeps its
  // input and one normed output per norm, and has one dropout.
  const bool dropout = m.dropout > 0;
  const double tensors = m.parallel_attention                          ? 1.0 + m.parallel_norms
                         : m.norm_placement == NormPlacement::sandwich ? 6.0
                                                                       : 4.0;
  const double masks = m.parallel_attention ? 1.0 : 2.0;
  const double outside_bytes = sb * (tensors * e * h + (dropout ? masks * h : 0.0));
  // Inside: Q, K, V, the projection input, the activation input(s) and fc2's input.
  const double glu = m.activation == Activation::swiglu ? 2.0 : 1.0;
  const double ffn = s.moe_layer ? static_cast<double>(m.shared_experts) * m.expert_ffn_hidden
                                 : static_cast<double>(m.ffn_hidden);
  // Q, K, V and the projection's input (and the q/k norms' inputs); with MLA also the latents
  // (on every rank in full).
  const double attention =
      m.mla() ? static_cast<double>(m.heads) * (2.0 * m.head_dim + 2.0 * m.v_head_dim)
              : m.q_width() + 2.0 * m.kv_width() + m.q_width() +
                    (m.qk_norm != QkNorm::none ? m.q_width() + m.kv_width() : 0.0);
  const double latents = m.mla() ? sb * e * (m.q_lora_rank + m.kv_lora_rank + m.rope_head_dim) : 0;
  double inside = sb * e * (attention + (glu + 1) * ffn) / t + latents;
  if (s.moe_layer) {
    // The routed experts: the tokens this rank's experts took (T k load, gathered over the
    // tensor-parallel ranks) at their fc1 input (h), activation input(s) and fc2 input (over t),
    // the dispatched tokens before that gather, and the router's fp32 probabilities.
    // Experts whole (Plan::experts_whole): the rank's own share of the tokens, nothing gathered.
    const double routed = sb * m.experts_per_token * s.expert_load / (s.experts_whole ? t : 1);
    const double split = s.experts_whole ? 1 : t;
    inside += routed * e * (m.hidden + (glu + 1) * m.expert_ffn_hidden / split) +
              (s.experts_whole ? 0 : routed / t * e * m.hidden) + sb * outside * 4.0 * m.experts;
  }
  // Standard attention stores the softmax output (16-bit), its dropout mask (1 byte) and the
  // dropout's output: 5 a s^2 b; without dropout the softmax output alone, 2 a s^2 b; flash
  // attention and selective recompute store none of them. A softmax taken in fp32 from 16-bit
  // scores (softmax_upcast) keeps its output in fp32: 2 bytes more.
  const bool fp32_softmax = softmax_upcast(m, s, s.micro_batch * (m.heads / s.tensor_parallel));
  const double scores = (!s.flash_attention && r == Recompute::none)
                            ? ((dropout ? 5.0 : 2.0) * (e / 2) + (fp32_softmax ? 2.0 : 0.0)) *
                                  m.heads * static_cast<double>(s.sequence) * sb / t
                            : 0.0;
  return outside_bytes * outside + inside + scores;
}

namespace {

// A convolutional network on a grid, trained as PyTorch trains it (automatic mixed precision):
// fp32 weights, gradients and SGD momentum for the parameters a rank holds; the activations
// each layer keeps for its backward, one micro-batch at a time; the gradient buckets and the
// framework's own.
std::vector<DeviceMemory> grid_memory(const TrainingJob& job) {
  const Plan& p = *job.plan;
  const std::vector<CnnLayerProgram> programs = cnn_programs(
      *job.model, p.layer_splits, p.tensor_parallel, p.micro_batch_size, p.precision, p.source);
  double activations = 0;
  for (const CnnLayerProgram& l : programs) activations += l.activations;
  std::vector<DeviceMemory> out;
  for (const StageCopy& g : job.copies) {
    DeviceMemory mem;
    mem.capacity = g.gpu->memory_bytes;
    const double grad = p.fp32_main_grads ? 4 : element_bytes(p.precision);
    mem.weights = 4 * g.params;
    mem.gradients = grad * g.params;
    mem.optimizer = 4 * g.params;  // momentum
    mem.activations = activations;
    mem.workspace = 2 * std::min(p.bucket_bytes, mem.gradients) + p.framework.reserved_memory;
    mem.peak = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.workspace;
    out.push_back(mem);
  }
  return out;
}

}  // namespace

namespace {

// The weights, gradients and optimizer state on each of a copy's devices, sharded as the ZeRO
// stage says.
void copy_states(const TrainingJob& job, const StageCopy& g, DeviceMemory& mem) {
  const Plan& p = *job.plan;
  const ModelConfig& m = *job.model;
  const double e = element_bytes(p.precision);
  const double params = g.params;
  const double grad_bytes = p.fp32_main_grads ? 4 : e;
  const double master = p.precision == Precision::fp32 ? 0 : 4;  // fp32 master copy
  // Sharded among the replicas: an even share, or the replica's state_share.
  auto shard = [&](double x, int from) {
    return p.zero_stage >= from ? p.sharded(x, g.replica) : x;
  };
  // A MoE plan's experts are sharded among the replicas of one expert-parallel rank.
  const bool split = m.moe() && p.expert_group_replicas() > 1;
  const double experts = split ? g.expert_params : 0;
  const double edp = static_cast<double>(p.replicas.size()) / p.expert_group_replicas();
  auto shard_experts = [&](double x, int from) { return p.zero_stage >= from ? x / edp : x; };
  mem.weights = shard((params - experts) * e, 3) + shard_experts(experts * e, 3);
  mem.gradients =
      shard((params - experts) * grad_bytes, 2) + shard_experts(experts * grad_bytes, 2);
  const double state = master + optimizer_state_bytes(p.optimizer);
  mem.optimizer = shard((params - experts) * state, 1) + shard_experts(experts * state, 1);
}

// Each chunk's stored activations for one micro-batch: dense layers alike, MoE layers by their
// load.
std::vector<double> chunk_activations(const TrainingJob& job, const StagePlan& st,
                                      const LayerShape& s, const std::vector<double>& loads) {
  const Plan& p = *job.plan;
  const ModelConfig& m = *job.model;
  // A dense layer's activations under the recompute it runs (past recompute_layers' first N:
  // none).
  const double per_layer =
      layer_activation_bytes(m, s, p.recompute_layers == 0 ? p.recompute : Recompute::none);
  std::vector<double> chunk_act(static_cast<size_t>(std::max(1, job.chunks)), 0.0);
  for (size_t c = 0; c < chunk_act.size(); ++c) {
    const int first = st.first_of(static_cast<int>(c)), n = st.layers_of(static_cast<int>(c));
    // Dense layers counted by the recompute they run (with recompute_layers, the chunk's first
    // in full, keeping their input only, the others none), MoE layers one by one by their load.
    const int recomputed = p.recompute_layers == 0 ? 0 : std::min(n, p.recompute_layers);
    const int dense_recomputed = recomputed - m.moe_layers_in(first, recomputed);
    const int dense = n - m.moe_layers_in(first, n);
    chunk_act[c] = per_layer * (dense - dense_recomputed);
    if (dense_recomputed > 0)
      chunk_act[c] += layer_activation_bytes(m, s, Recompute::full) * dense_recomputed;
    for (int l = first; m.moe() && l < first + n; ++l) {
      if (m.is_moe(l))
        chunk_act[c] += layer_activation_bytes(m, moe_shape(s, p, loads[static_cast<size_t>(l)]),
                                               p.layer_recompute(l - first));
    }
  }
  return chunk_act;
}

// What a device holds for a moment: the layer being recomputed, the last stage's fp32 logits and
// their gradient, the gradient buckets in flight, ZeRO-3's gathered layers, the framework's own.
double workspace(const TrainingJob& job, const StageCopy& g, const StagePlan& st,
                 const LayerShape& s, const std::vector<double>& chunk_act,
                 const std::vector<double>& loads, const DeviceMemory& mem) {
  const Plan& p = *job.plan;
  const ModelConfig& m = *job.model;
  const double e = element_bytes(p.precision);
  double work = 0;
  if (p.recompute == Recompute::full) {
    double most = layer_activation_bytes(m, s, Recompute::none);
    for (size_t c = 0; m.moe() && c < chunk_act.size(); ++c) {
      const int first = st.first_of(static_cast<int>(c));
      for (int l = first; l < first + st.layers_of(static_cast<int>(c)); ++l) {
        if (m.is_moe(l))
          most = std::max(most,
                          layer_activation_bytes(m, moe_shape(s, p, loads[static_cast<size_t>(l)]),
                                                 Recompute::none));
      }
    }
    work += most;
  } else if (p.recompute == Recompute::selective_op) {
    // The layer being recomputed: what its forward pass makes beyond what the policy kept.
    work += std::max(0.0, layer_activation_bytes(m, s, Recompute::none) -
                              layer_activation_bytes(m, s, Recompute::selective_op));
  }
  if (g.stage + 1 == static_cast<uint32_t>(p.stages(g.replica))) {
    work += m.logits_bytes(s.micro_batch, s.sequence, s.tensor_parallel);
  }
  if (p.data_parallel_of(g.stage) > 1) {
    work += 2 * std::min(p.bucket_bytes, mem.gradients);
    // ZeRO-3: the layer running and the next, prefetched, held whole (job builder).
    if (p.zero_stage == 3) {
      int64_t largest = 0;
      for (int c = 0; c < std::max(1, job.chunks); ++c) {
        for (int l = st.first_of(c); l < st.first_of(c) + st.layers_of(c); ++l)
          largest = std::max(largest, m.layer_params(l));
      }
      // And what lies outside the layers, held whole from the forward pass to the end of
      // the backward pass (FSDP's root unit).
      const int P = p.stages(g.replica);
      const double outer = outer_params(m, P, s.tensor_parallel)
                               .weights_on(g.stage == 0, static_cast<int>(g.stage) == P - 1);
      work += e * (2 * static_cast<double>(largest) / s.tensor_parallel + outer);
    }
  }
  work += p.framework.reserved_memory;  // the process's own: context, libraries, allocator
  return work;
}

}  // namespace

std::vector<DeviceMemory> memory_per_copy(const TrainingJob& job) {
  if (job.model->convolutional()) return grid_memory(job);
  const Plan& p = *job.plan;
  const ModelConfig& m = *job.model;
  const std::vector<double> loads = m.moe() ? expert_loads(m, p) : std::vector<double>{};
  std::vector<DeviceMemory> out;
  out.reserve(job.copies.size());
  std::map<std::tuple<uint32_t, int, int>, std::vector<ScheduleItem>> orders;
  for (const StageCopy& g : job.copies) {
    DeviceMemory mem;
    mem.capacity = g.gpu->memory_bytes;
    copy_states(job, g, mem);
    const LayerShape s = stage_shape(p, static_cast<int>(g.devices.size()), g.batch);
    const StagePlan& st = p.stage_plan(g.replica, g.stage);
    const std::vector<double> chunk_act = chunk_activations(job, st, s, loads);
    // Walk the schedule: a forward pass stores its chunk's activations until its backward.
    // Layered accumulation keeps every micro-batch's activations until the backward pass, as
    // GPipe does.
    // One schedule per stage, stage count and micro-batch count: the same stage of every
    // replica walks the same one.
    const std::tuple<uint32_t, int, int> which{g.stage, p.stages(g.replica),
                                               p.micro_batches_of(g.replica)};
    auto [at, fresh] = orders.try_emplace(which);
    if (fresh) {
      at->second =
          stage_schedule(p.layered ? Schedule::gpipe : p.schedule, static_cast<int>(g.stage),
                         std::get<1>(which), std::get<2>(which), job.chunks, p.microbatch_group);
    }
    const std::vector<ScheduleItem>& order = at->second;
    double live = 0, peak = 0;
    for (const ScheduleItem& it : order) {
      const double chunk_bytes = chunk_act[it.chunk];
      live += it.forward ? chunk_bytes : -chunk_bytes;
      peak = std::max(peak, live);
    }
    mem.activations = peak;
    mem.workspace = workspace(job, g, st, s, chunk_act, loads, mem);
    mem.peak = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.workspace;
    out.push_back(mem);
  }
  return out;
}

}  // namespace hetsim::workload
