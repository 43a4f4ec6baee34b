// DeepSpeed: the `deepspeed` launcher running Megatron-DeepSpeed's pretrain_gpt.py (tensor
// parallelism from Megatron, the pipeline as DeepSpeed's PipelineModule) and its ds_config.json:
// batch, gradient accumulation, ZeRO stage and bucket, precision, activation checkpointing.
#include <cmath>

#include "sim/launch/launcher.h"
#include "sim/workload/plan/plan_keys.h"

namespace hetsim::launch {

namespace {

// The launcher's own words before the script: every node and GPU, or the hosts and GPUs of
// --include.
void add_launcher(Launch& l, int nodes, int per_node, const std::string& script) {
  std::vector<std::string>& a = l.command;
  if (l.hosts.empty()) {
    a = {"deepspeed", "--num_nodes", std::to_string(nodes), "--num_gpus", std::to_string(per_node),
         script};
  } else {
    // The launcher sets CUDA_VISIBLE_DEVICES itself from --include (host:gpus@host:gpus), which
    // excludes --num_nodes/--num_gpus; the hostfile lists the nodes in l.hosts' order.
    std::string include;
    for (const HostRanks& h : l.hosts) {
      include += (include.empty() ? "" : "@") + h.node + ":";
      for (size_t k = 0; k < h.local_gpus.size(); ++k) {
        include += (k ? "," : "") + std::to_string(h.local_gpus[k]);
      }
    }
    l.env.clear();
    a = {"deepspeed", "--hostfile", "hostfile", "--include", include, script};
  }
}

// Recomputation and precision as Megatron-DeepSpeed's flags say them, and what they cannot say.
void add_recompute_and_precision(const workload::Plan& p, Launch& l) {
  std::vector<std::string>& a = l.command;
  if (p.recompute == workload::Recompute::full) {
    a.insert(a.end(), {"--checkpoint-activations", "--deepspeed-activation-checkpointing"});
    if (p.recompute_layers > 0)
      l.unsupported.push_back(
          "recompute_layers: Megatron v1.1.5's --checkpoint-activations checkpoints every "
          "layer; exported with every layer recomputed");
  } else if (p.recompute == workload::Recompute::selective_op) {
    l.unsupported.push_back(
        "recompute selective_op: DeepSpeed's activation checkpointing recomputes whole layers; "
        "exported without recompute");
  } else if (p.recompute == workload::Recompute::selective) {
    l.unsupported.push_back(
        "recompute selective: DeepSpeed's activation checkpointing recomputes whole layers; "
        "exported without recompute");
  }
  if (p.precision == workload::Precision::bf16) a.emplace_back("--bf16");
  if (p.precision == workload::Precision::fp16) a.emplace_back("--fp16");
  if (p.precision == workload::Precision::fp8) {
    l.unsupported.push_back(
        "precision fp8: DeepSpeed's engine trains in fp32, fp16 or bf16; "
        "exported as bf16");
    a.emplace_back("--bf16");
  }
}

// What DeepSpeed's pipeline engine does its own way: its schedule, ZeRO's stages beside it, and
// its split of the layers.
void note_pipeline_engine(const workload::Plan& p, const Layout& lay, Launch& l) {
  if (lay.pp > 1 && p.schedule != workload::Schedule::one_f_one_b) {
    l.unsupported.push_back("schedule " + workload::to_string(p.schedule) +
                            ": DeepSpeed's pipeline engine runs its own 1F1B schedule "
                            "(TrainSchedule); exported as 1F1B");
  }
  if (lay.pp > 1 && p.zero_stage >= 2) {
    l.unsupported.push_back("zero_stage " + std::to_string(p.zero_stage) +
                            " with pipeline parallel " + std::to_string(lay.pp) +
                            ": DeepSpeed's pipeline engine allows ZeRO stage 0 or 1 only");
  }
  bool even = true;
  for (int x : lay.stage_layers) even = even && x == lay.stage_layers.front();
  if (lay.pp > 1 && (!even || lay.interleave > 1)) {
    l.unsupported.push_back("the plan splits the layers " + split_text(lay.stage_layers) +
                            " over its pipeline stages: DeepSpeed's PipelineModule partitions "
                            "the transformer layers by its own method (uniform)");
  }
}

// ds_config.json: the batch, ZeRO, precision and activation checkpointing.
void write_ds_config(const workload::Plan& p, const Layout& lay, Launch& l) {
  nlohmann::ordered_json& c = l.config;
  c["train_batch_size"] = lay.global_batch;
  c["train_micro_batch_size_per_gpu"] = lay.micro_batch;
  c["gradient_accumulation_steps"] = lay.micro_batches;
  c["zero_optimization"] = {
      {"stage", p.zero_stage},
      // DeepSpeed counts its bucket in elements (fp32 gradients: 4 bytes each).
      {"reduce_bucket_size", std::llround(p.bucket_bytes / 4)},
      {"overlap_comm", p.gradient_reduction == workload::GradReduction::overlapped}};
  if (p.precision == workload::Precision::fp16) {
    c["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  } else if (p.precision != workload::Precision::fp32) {
    c["bf16"] = {{"enabled", true}};
  }
  if (p.recompute == workload::Recompute::full) {
    c["activation_checkpointing"] = {{"partition_activations", false},
                                     {"contiguous_memory_optimization", false},
                                     {"cpu_checkpointing", false}};
  }
}

class DeepSpeedLauncher final : public Launcher {
 public:
  const char* name() const override { return "deepspeed"; }
  const char* summary() const override {
    return "DeepSpeed: deepspeed ... pretrain_gpt.py (Megatron-DeepSpeed) and ds_config.json";
  }

  Launch make(const Target& t) const override {
    const workload::Plan& p = *t.plan;
    const workload::ModelConfig& m = *t.model;
    Launch l;
    l.framework = name();
    l.config_file = "ds_config.json";
    const Layout lay = uniform_layout(t, "DeepSpeed");
    l.unsupported = lay.unsupported;
    add_megatron_only(t, l.unsupported);
    const auto [nodes, per_node] = place_ranks(t, lay, "deepspeed", l);
    std::vector<std::string>& a = l.command;
    auto add = [&a](const char* flag, long value) {
      a.emplace_back(flag);
      a.push_back(std::to_string(value));
    };
    const std::string script = m.causal ? "pretrain_gpt.py" : "pretrain_bert.py";
    add_launcher(l, nodes, per_node, script);
    add("--tensor-model-parallel-size", lay.tp);
    check_megatron_shapes(m, lay.tp, "Megatron-DeepSpeed", l.unsupported);
    if (lay.pp > 1) {
      add("--pipeline-model-parallel-size", lay.pp);
    } else {
      a.emplace_back("--no-pipeline-parallel");
    }
    // The plan's flag keys, as the plan keys' table gives Megatron-DeepSpeed's flags.
    for (std::string& f :
         workload::launch_flags(p, workload::FlagLauncher::deepspeed, &l.unsupported))
      a.push_back(std::move(f));
    add("--micro-batch-size", lay.micro_batch);
    add("--global-batch-size", lay.global_batch);
    add("--seq-length", p.sequence_length);
    add_megatron_model_flags(m, a);
    add_recompute_and_precision(p, l);
    add("--zero-stage", p.zero_stage);
    a.insert(a.end(), {"--deepspeed", "--deepspeed_config", l.config_file});

    note_pipeline_engine(p, lay, l);
    write_ds_config(p, lay, l);
    if (!l.unsupported.empty()) l.approximation = approximation_text(lay, p.global_batch_size);
    return l;
  }
};

}  // namespace

const Launcher& deepspeed_launcher() {
  static const DeepSpeedLauncher l;
  return l;
}

}  // namespace hetsim::launch
