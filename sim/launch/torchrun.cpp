// PyTorch without a parallelism library: torchrun and the settings a training script gives
// DistributedDataParallel or FullyShardedDataParallel. Data parallelism only: tensor and pipeline
// parallelism need Megatron-LM or DeepSpeed.
#include <cmath>

#include "sim/launch/launcher.h"

namespace hetsim::launch {

namespace {

class TorchrunLauncher final : public Launcher {
 public:
  const char* name() const override { return "torchrun"; }
  const char* summary() const override {
    return "PyTorch DDP/FSDP: torchrun ... train.py and the DDP or FSDP settings";
  }

  Launch make(const Target& t) const override {
    const workload::Plan& p = *t.plan;
    Launch l;
    l.framework = name();
    Layout lay = uniform_layout(t, "PyTorch DDP/FSDP");
    l.unsupported = lay.unsupported;
    add_megatron_only(t, l.unsupported);
    if (lay.tp > 1) {
      l.unsupported.push_back("tensor parallel " + std::to_string(lay.tp) +
                              ": plain DDP/FSDP has no tensor parallelism (use megatron or "
                              "deepspeed); exported as data parallel");
    }
    if (lay.pp > 1) {
      l.unsupported.push_back("pipeline parallel " + std::to_string(lay.pp) +
                              ": plain DDP/FSDP has no pipeline parallelism (use megatron or "
                              "deepspeed); exported as data parallel");
    }
    const auto [nodes, per_node] = place_ranks(t, lay, "torchrun", l);
    if (lay.tp * lay.pp > 1) {
      // Every GPU a data-parallel rank; as close to the plan's global batch as whole
      // micro-batches allow.
      lay.dp *= lay.tp * lay.pp;
      lay.tp = lay.pp = 1;
      lay.interleave = 1;
      lay.micro_batches =
          std::max(1, static_cast<int>(std::lround(static_cast<double>(p.global_batch_size) /
                                                   static_cast<double>(lay.micro_batch * lay.dp))));
      lay.global_batch = lay.micro_batches * lay.micro_batch * lay.dp;
    }
    l.command = {
        "torchrun", "--nnodes", std::to_string(nodes), "--nproc-per-node", std::to_string(per_node),
        "train.py"};

    nlohmann::ordered_json& c = l.config;
    if (p.zero_stage >= 2) {
      c["wrapper"] = "FullyShardedDataParallel";
      c["sharding_strategy"] = p.zero_stage == 3 ? "FULL_SHARD" : "SHARD_GRAD_OP";
      // ZeRO-3 as hetsim replays it: each layer's parameters gathered one layer ahead, forward
      // and backward (FSDP's prefetch; sim/workload/job/training_job.cpp).
      if (p.zero_stage == 3) {
        c["forward_prefetch"] = true;
        c["backward_prefetch"] = "BACKWARD_PRE";
      }
    } else {
      c["wrapper"] = "DistributedDataParallel";
      // PyTorch's bucket_cap_mb is in MiB.
      c["bucket_cap_mb"] = p.bucket_bytes / (1024.0 * 1024.0);
      if (p.zero_stage == 1) c["optimizer"] = "ZeroRedundancyOptimizer";
    }
    c["mixed_precision"] = workload::to_string(p.precision);
    c["micro_batch_size"] = lay.micro_batch;
    c["gradient_accumulation_steps"] = lay.micro_batches;
    c["global_batch_size"] = lay.global_batch;
    c["sequence_length"] = p.sequence_length;
    c["activation_checkpointing"] = p.recompute == workload::Recompute::full;
    if (p.recompute_layers > 0) {
      l.unsupported.push_back(
          "recompute_layers: the exported configuration checkpoints every wrapped layer; "
          "exported with every layer recomputed");
    }
    if (p.recompute == workload::Recompute::selective_op) {
      l.unsupported.push_back(
          "recompute selective_op: torchtitan's op-level checkpointing policy is not in the "
          "exported configuration; exported without recompute");
    }
    if (p.recompute == workload::Recompute::selective) {
      l.unsupported.push_back(
          "recompute selective: DDP/FSDP checkpoint whole wrapped modules "
          "(torch.utils.checkpoint); exported without recompute");
    }
    if (p.precision == workload::Precision::fp8) {
      l.unsupported.push_back("precision fp8: DDP/FSDP mixed precision is fp16 or bf16");
    }
    if (p.zero_stage < 2 && p.gradient_reduction == workload::GradReduction::after_backward) {
      l.unsupported.push_back(
          "gradient_reduction after_backward: DDP all-reduces its buckets while the backward pass "
          "runs");
    }
    if (!l.unsupported.empty()) l.approximation = approximation_text(lay, p.global_batch_size);
    return l;
  }
};

}  // namespace

const Launcher& torchrun_launcher() {
  static const TorchrunLauncher l;
  return l;
}

}  // namespace hetsim::launch
