// The training framework a plan runs on, as data (frameworks/*.yaml): how it reduces gradients,
// whether its pipeline transfers block the sender, and the host time it spends per micro-batch
// pass and per step. Megatron-LM is hetsim's default; DeepSpeed's pipeline engine, PyTorch DDP
// and FSDP differ in these and so in time.
#pragma once

#include "sim/config/key_table.h"

#include <optional>
#include <string>
#include <vector>

#include "sim/core/time.h"
#include "sim/workload/model/ops.h"

namespace hetsim::workload {

// Whether and in which precision the tied embedding's gradients are all-reduced between the
// first and last pipeline stages after the backward pass (DeepSpeed's ReduceTiedGrads on the
// model's own gradients, Megatron-LM's embedding all-reduce on its fp32 main gradients).
enum class TiedReduction { none, model_grads, main_grads };

enum class GradReduction {
  overlapped,      // buckets all-reduced as the last backward pass fills them
  after_backward,  // all buckets after the whole backward pass (DeepSpeed without ZeRO,
                   // Megatron-LM before Megatron-Core)
};
std::string to_string(GradReduction g);

struct Framework {
  std::string name = "megatron";
  std::string description;
  std::string source;  // the file it came from ("frameworks/megatron.yaml")
  GradReduction gradient_reduction = GradReduction::overlapped;
  std::optional<double> bucket_bytes;  // the framework's gradient bucket, when it has one
  std::optional<int> zero_stage;       // a plan's default ZeRO stage (FSDP: 3)
  // The highest ZeRO stage the framework runs with a pipeline of more than one stage
  // (DeepSpeed's PipelineEngine asserts stage < 2: ZeRO-2 and -3 reduce and gather every
  // micro-batch, which its schedule does not); 3: no limit.
  int pipeline_zero_max = 3;
  // Whether the framework has Megatron-style sequence parallelism (Korthikanti et al., 2022:
  // Megatron-LM v3 on, Megatron-Core, PyTorch's tensor-parallel styles); DeepSpeed's 2021 stack
  // of Megatron-LM v1.1.5 layers has none.
  bool sequence_parallel = true;
  bool blocking_p2p = false;  // a pipeline send holds its stage until the data has arrived
  // Where a stage sends the gradient of its backward pass to the stage before. After the
  // backward pass (false: Megatron-LM, which sends as soon as it is computed), or, when the next
  // pass is a forward pass, after that pass's activation has been received (true: DeepSpeed's
  // TrainSchedule, deepspeed/runtime/pipe/schedule.py, whose forward step runs RecvActivation
  // before SendGrad of the previous step's backward pass). Both ends of a stage pair then issue
  // their transfers in one order, activation and gradient alternating.
  bool send_grad_after_next_receive = false;
  // A blocking send of more than this many bytes (per tensor-parallel rank) waits for its
  // receiver to reach the matching receive before any of it moves: NCCL's broadcast between two
  // ranks, which DeepSpeed's 2021 point-to-point is, pushes at most its connection buffer
  // (NCCL_BUFFSIZE, 4 MiB) ahead of a receiver whose kernel has not started. Unset: every send
  // moves as soon as it is issued.
  std::optional<double> p2p_buffer_bytes;
  // Whether a pipeline send of `bytes` (per tensor-parallel rank) waits for its receiver.
  bool send_waits_for_receiver(double bytes) const {
    return blocking_p2p && p2p_buffer_bytes && bytes > *p2p_buffer_bytes;
  }
  // Whether the framework runs interleaved schedules: not where its sends wait for their
  // receivers in its own one-chunk order (DeepSpeed's pipeline engine has no interleaving).
  bool interleaves() const { return !p2p_buffer_bytes; }
  Time host_per_pass;  // per forward or backward pass of one micro-batch on one stage
  Time host_per_step;  // per iteration on every device, before the optimizer step
  // The host's time to issue one kernel of hetsim's kernel list, where the framework's host
  // differs from the cost model's (CostModel::host_time); a segment of kernels takes the longer
  // of its GPU time and its host time.
  std::optional<Time> host_per_kernel;
  // How the framework runs a layer's elementwise work. Fused (Megatron-LM, DeepSpeed's Megatron
  // layers): bias with GeLU, bias with dropout and the residual add, one kernel each; the
  // residual stream in the plan's precision. Eager (PyTorch modules run op by op): dropout and
  // the residual add separate kernels, the attention output copied back to token-major order,
  // the logits copied to fp32 for the loss.
  bool eager_kernels = false;
  MaskedSoftmax masked_softmax;  // `masked_softmax` (ops.h)
  // Whether each micro-batch's weight gradients are added into the parameters' gradients by a
  // kernel of their own (`gradient_accumulation: add`: PyTorch autograd's AccumulateGrad, as
  // DeepSpeed's engine without ZeRO runs fp16 training: param.grad += the new gradient, a read of
  // both and a write per parameter) rather than inside the weight-gradient GEMM (`fused`:
  // Megatron-LM's gradient accumulation fusion into fp32 main gradients). Under autocast the
  // add is already in the kernel list (LayerShape::autocast).
  bool separate_grad_accumulation = false;
  // torch.autocast over fp32 parameters (eager only): the residual stream and layer norms in
  // fp32, each norm's output cast to the low precision for the next matmul, each weight cast in
  // every forward pass, and its gradient cast back to fp32 and added to the parameter's .grad in
  // every backward pass.
  bool autocast = false;
  TiedReduction tied_embedding_reduction = TiedReduction::none;
  // A tensor-parallel stage's pipeline transfers move 1/t of the boundary activation from each
  // rank (the replay's scatter-gather); the framework then all-gathers the whole activation over
  // the stage's ranks this many times per received activation (forward) and per received
  // gradient (backward). DeepSpeed's pipeline engine partitions activations and gradients
  // between stages (deepspeed/runtime/pipe/engine.py, is_pipe_partitioned and
  // is_grad_partitioned, on whenever the model is tensor-parallel): one gather of the received
  // activation before the forward pass, and before the backward pass one of the stage's own
  // output (kept only as its slice) and one of the received gradient. Not with sequence
  // parallelism, whose stage input is already split by sequence over the ranks.
  int pipeline_gathers_forward = 0;
  int pipeline_gathers_backward = 0;
  // Device memory the process holds beyond the training state, activations and buffers hetsim
  // counts: the CUDA context and libraries' workspace, communication buffers, allocator slack.
  double reserved_memory = 0;  // bytes
  // ZeRO-3: each gathered layer copied out of the all-gather's buffer into its parameters on the
  // compute stream before it runs (PyTorch FSDP2's per-parameter sharding: split_with_sizes_copy,
  // the layer's weights read and written); FSDP1's flat parameters are views of that buffer.
  bool gather_copy_out = false;
};

// The built-in framework names (frameworks/*.yaml), sorted.
std::vector<std::string> framework_names();

// A built-in name or a framework YAML file. InputError naming the valid names otherwise.
Framework load_framework(const std::string& name_or_path);
Framework load_framework_text(const std::string& text, const std::string& file);

// The keys of a framework file, declared once (config/key_table.h): the loader checks a file's
// keys and reads its choices from this table; `hetsim reference framework-keys` and
// `framework-schema` write docs/reference/framework-keys.md and
// docs/schemas/framework.schema.json from it.
const std::vector<config::Key>& framework_keys();
std::string framework_keys_markdown();
nlohmann::ordered_json framework_json_schema();

}  // namespace hetsim::workload
