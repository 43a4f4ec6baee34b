// A parallel plan: how a model's layers and batch are split over a cluster's GPUs. Uniform
// Megatron-style plans (tensor x pipeline x data parallel) and heterogeneous plans (replicas
// with their own batch share, stages with their own layers, devices and tensor-parallel degree)
// resolve to the same layout of replicas and stages.
#pragma once

#include <string>
#include <vector>

#include "sim/platform/cluster.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"
#include "sim/workload/plan/what_if.h"

namespace hetsim::workload {

enum class Schedule { gpipe, one_f_one_b, interleaved };
// What a layer's backward pass recomputes: nothing; the attention core (Megatron-LM's selective);
// the whole forward pass (full); or, selective_op, torchtitan's op-level selective checkpointing
// (selective_ac_option "op"): every matmul's and attention's output kept but every second
// matmul's in a layer (the keys', the output projection's and the gate's up-projection w3), the
// rest of the forward pass run again.
enum class Recompute { none, selective, full, selective_op };
std::string to_string(Schedule s);
std::string to_string(Recompute r);

struct StagePlan {
  int first_layer = 0;
  int layers = 0;  // all of the stage's layers (every model chunk's, when interleaved)
  // Interleaved: each model chunk's layers and first layer (chunk c is virtual stage c x P + s).
  // The chunks are equal unless pipeline_parallel x interleave does not divide the layers; then
  // the virtual stages at the ends get fewer (Llama 3's first chunk holds only the embedding).
  std::vector<int> chunk_layers, chunk_first;
  std::vector<platform::GpuId> devices;  // the tensor-parallel group, rank order
  int tensor_parallel() const { return static_cast<int>(devices.size()); }
  int layers_of(int chunk) const { return chunk_layers.empty() ? layers : chunk_layers[chunk]; }
  int first_of(int chunk) const { return chunk_first.empty() ? first_layer : chunk_first[chunk]; }
};

struct ReplicaPlan {
  std::vector<StagePlan> stages;
  int micro_batches = 0;
  // The share of the sharded training state (ZeRO / FSDP) each of the replica's devices holds,
  // decoupled from its share of the batch (Cephalo); 0: an even share, 1 / replicas.
  double state_share = 0;
};

// A pipeline stage of a staged plan (Plan::dp_stages; Metis): its devices form data-parallel
// groups, each a tensor-parallel group of its own degree that takes `batch[j]` samples of every
// micro-batch; the groups of one stage reduce its gradients among them.
struct DataParallelStage {
  int first_layer = 0, layers = 0;
  std::vector<StagePlan> groups;  // each with the stage's layers and its own devices
  std::vector<int64_t> batch;     // per group: samples of each micro-batch, adding up to it
};

struct Plan {
  std::string source;
  // The plan file's own what-ifs (`perturbations:`, the same map as a study's entry), applied by
  // the runs that replay it (sim/study/run.h) on top of the study's or --perturb's.
  Perturbations perturbations;
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 0;
  int64_t sequence_length = 0;
  Schedule schedule = Schedule::one_f_one_b;
  int interleave = 1;  // model chunks per stage (interleaved schedule)
  // Interleaved: micro-batches that run one chunk before the next (Megatron-LM's
  // microbatch_group_size_per_vp_stage; 0: pipeline_parallel, Megatron's default).
  int microbatch_group = 0;
  Recompute recompute = Recompute::none;
  // `recompute_layers: N` with `recompute: full`: only the first N transformer layers of each
  // stage's model chunk are recomputed, the others keep their activations (Megatron-LM's
  // --recompute-method block --recompute-num-layers N; torchtitan's selective layer
  // checkpointing of every k-th layer recomputes as many and keeps as much). 0: every layer.
  int recompute_layers = 0;
  // The recompute the layer at `index` within its chunk (0 the chunk's first) runs: the plan's,
  // or, with recompute_layers (which needs recompute: full), full for the chunk's first N layers
  // and none for the others.
  Recompute layer_recompute(int index) const {
    if (recompute_layers == 0) return recompute;
    return index < recompute_layers ? Recompute::full : Recompute::none;
  }
  bool sequence_parallel = false;
  // How the layers' kernels run (ops.h): `tp_comm_overlap: true` (Megatron-LM's
  // --tp-comm-overlap, Transformer Engine's userbuffers; NVIDIA's NeMo / Megatron-Bridge
  // performance recipes turn it on) runs each transformer layer's sequence-parallel all-gathers
  // and reduce-scatters beside the GEMMs that read and write them (needs sequence_parallel where
  // tensor_parallel > 1); `bias_dropout_fusion: false` unfuses the bias-dropout-add. Neither
  // changes eager frameworks' kernels.
  KernelChoices kernels;
  int zero_stage = 0;
  Precision precision = Precision::bf16;
  bool precision_defaulted = false;  // not given: bf16 where every GPU has it, else fp16
  bool flash_attention = true;
  bool attention_defaulted = false;       // `attention:` not given (flash)
  bool fp32_main_grads = true;            // Megatron keeps fp32 gradients: 18 bytes per parameter
  Optimizer optimizer = Optimizer::adam;  // `optimizer:` adam, sgd or sgd_momentum
  double bucket_bytes = 40e6 * 4;  // gradient all-reduce bucket (Megatron: 40M fp32 elements)
  Framework framework;             // `framework:` (default megatron)
  GradReduction gradient_reduction = GradReduction::overlapped;  // the framework's, or the plan's
  // `gradient_accumulation: layered` (Lamy-Poirier 2021; Cephalo): every micro-batch runs through
  // a layer before the next layer, so a sharded layer is gathered and its gradients reduced once
  // per iteration, not once per micro-batch; all micro-batches' activations are live at once.
  // Replicas of one stage only.
  bool layered = false;
  // Mixture of experts: each MoE layer's experts split over `expert_parallel` consecutive
  // data-parallel replicas (Megatron-LM's expert-parallel group, carved out of the data-parallel
  // one); expert gradients are reduced among the replicas / expert_parallel that hold the same
  // experts. `capacity_factor` (0: dropless) caps each expert's tokens at that multiple of an
  // even share; `routing_skew` > 0 draws each layer's expert popularity from a Zipf law of that
  // exponent over a seeded permutation of the experts (expert_loads).
  int expert_parallel = 1;
  // Expert tensor parallelism (Megatron-LM's --expert-tensor-parallel-size): 0, the stage's
  // tensor-parallel degree (the experts split over its ranks like the dense FFN); 1 with
  // tensor_parallel t > 1 (uniform plans), every expert whole on one rank: each rank dispatches
  // its own sequence-parallel share of the tokens, and the expert-parallel group of
  // expert_parallel ranks is every rank of expert_parallel / t consecutive replicas.
  int expert_tensor_parallel = 0;
  // Whether the experts are whole on each rank while the dense layers are split (above).
  bool experts_whole() const { return expert_tensor_parallel == 1 && tensor_parallel > 1; }
  // The replicas one expert-parallel group spans.
  int expert_group_replicas() const {
    return experts_whole() ? expert_parallel / tensor_parallel : expert_parallel;
  }
  // Context parallelism (uniform plans): each replica's sequences split over context_parallel
  // consecutive replicas (Megatron-LM's order: tensor, context, data, pipeline), which run ring
  // attention among them; replicas = data_parallel x context_parallel, gradients reduced over
  // all of them.
  int context_parallel = 1;
  double capacity_factor = 0;
  double routing_skew = 0;
  uint64_t routing_seed = 1;
  bool uniform = true;
  int tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1;  // uniform plans
  // A convolutional network's process grid (`grid: {rows, columns}`, Gholami et al.): the
  // columns are the replicas (data_parallel), each a one-stage group of `rows` ranks
  // (tensor_parallel) over which every layer is split as layer_splits says (one per layer).
  std::vector<LayerSplit> layer_splits;
  std::string split_policy;  // how they were chosen: "gholami", "model", "domain", "listed"
  std::vector<ReplicaPlan> replicas;
  // A staged plan (`stages:`): one pipeline whose stages each hold their own data-parallel
  // groups (Metis), every micro-batch split over each stage's groups and its activations
  // re-sharded between stages. Then `replicas` holds one replica, the stages' first groups (the
  // layer split and micro-batch count), and a group is (replica j, stage s): group j of stage s.
  std::vector<DataParallelStage> dp_stages;
  bool staged() const { return !dp_stages.empty(); }
  // The stage of replica r (of a staged plan: group r of stage s).
  const StagePlan& stage_plan(size_t r, size_t s) const {
    return staged() ? dp_stages[s].groups[r] : replicas[r].stages[s];
  }
  // Samples of each micro-batch that replica r's stage s takes.
  int64_t batch_of(size_t r, size_t s) const {
    return staged() ? dp_stages[s].batch[r] : micro_batch_size;
  }
  // The copies among which stage s of replica r reduces its gradients.
  size_t data_parallel_of(size_t s) const {
    return staged() ? dp_stages[s].groups.size() : replicas.size();
  }

  // Replica r's pipeline stages. Replicas may differ in their stages (asymmetric pipelines:
  // HetPipe's virtual workers, FlashFlex): see asymmetric().
  int stages(size_t r = 0) const {
    return static_cast<int>(staged() ? dp_stages.size() : replicas[r].stages.size());
  }
  int micro_batches_of(size_t r) const {
    return staged() ? replicas[0].micro_batches : replicas[r].micro_batches;
  }
  // What each device of replica r holds of `x` sharded: its state_share, else x / replicas.
  double sharded(double x, size_t r) const {
    return replicas[r].state_share > 0 ? x * replicas[r].state_share
                                       : x / static_cast<double>(replicas.size());
  }
  // Whether some replica's stages differ from replica 0's in number, layers or tensor-parallel
  // degree. Then gradients are reduced layer segment by layer segment (layer_segments) among the
  // stages that hold each segment, not stage by stage.
  bool asymmetric() const;
};

// A staged plan's re-sharding between stage `stage` and the next: each pair of groups (group
// `from` of the stage, `to` of the next) whose samples of a micro-batch overlap, and how many
// they share (a micro-batch's samples lie in order over each stage's groups). From first, then
// to, ascending.
struct SharedSamples {
  size_t from = 0, to = 0;
  int64_t samples = 0;
};
std::vector<SharedSamples> shared_samples(const Plan& plan, size_t stage);

// The cut points of an asymmetric plan: every stage's first layer in any replica, and the layer
// count; segment i is layers [cuts[i], cuts[i + 1]). Every replica holds each segment whole on one
// of its stages. For a plan whose replicas share their stages, the stage boundaries.
std::vector<int> layer_segments(const Plan& plan, int layers);

struct PlanOptions {
  std::vector<std::string> sets;  // --plan-set PATH=VALUE
};

// Reads and validates a plan against the model and the cluster. Throws InputError for
// impossible plans: degrees that do not multiply to the device count, a batch that does not
// divide, tensor parallelism wider than the heads, a stage with no layers, ...
Plan load_plan(const std::string& path, const ModelConfig& model, const platform::Cluster& cluster,
               const PlanOptions& options = {});
Plan load_plan_text(const std::string& text, const std::string& file, const ModelConfig& model,
                    const platform::Cluster& cluster, const PlanOptions& options = {});

// The precision a plan without `precision:` trains in on these GPUs: bf16 where all have it,
// else fp16 (V100, T4 and P100 train in fp16 with loss scaling).
Precision default_precision(const std::vector<const config::GpuProfile*>& gpus);

// The shape of one dense layer on a stage of `tensor_parallel` ranks under this plan, for
// `batch` samples a micro-batch (0: the plan's micro_batch_size; a staged plan's group its share).
LayerShape stage_shape(const Plan& plan, int tensor_parallel, int64_t batch = 0);

// One micro-batch's activation at a layer boundary, whole (a context-parallel rank's share of the
// sequence): what a pipeline transfer carries, split over the tensor-parallel ranks.
double boundary_activation_bytes(const ModelConfig& model, const Plan& plan);

// Whether a stage of `tensor_parallel` ranks all-gathers the pipeline transfers it receives in
// slices (Framework::pipeline_gathers_*): tensor-parallel, without sequence parallelism (whose
// stage input is already split by sequence), on a framework that gathers.
bool gathers_pipeline_slices(const Plan& plan, int tensor_parallel);
// The same shape as a MoE layer's whose most loaded expert-parallel rank takes `load` times an
// even share (expert_loads).
LayerShape moe_shape(LayerShape dense, const Plan& plan, double load);

// Per layer, the tokens the most loaded expert-parallel rank's experts process over an even,
// dropless share (1 for dense layers): EP x max over ranks of the sum over the rank's experts of
// min(popularity, capacity_factor / experts). Uniform popularity gives 1, or capacity_factor
// where that is below 1 (tokens dropped). The same in every expert-parallel group and
// micro-batch (popularity is a property of the model and the data), so identical replicas stay
// identical. Deterministic in routing_seed.
std::vector<double> expert_loads(const ModelConfig& model, const Plan& plan);

// A uniform plan built in code (used by the benchmark and tests).
Plan uniform_plan(const ModelConfig& model, const platform::Cluster& cluster, int tp, int pp,
                  int dp, int64_t micro_batch, int64_t global_batch, int64_t sequence);

}  // namespace hetsim::workload
