// Megatron-LM: `torchrun ... pretrain_gpt.py` with the flags of megatron/training/arguments.py
// (Megatron-Core, 2024-2025): degrees, batch, the interleaved schedule, the layer split, recompute,
// sequence parallelism, the distributed optimizer (ZeRO-1), precision and gradient overlap.
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "sim/launch/launcher.h"
#include "sim/workload/plan/plan_keys.h"

namespace hetsim::launch {

namespace {

// Megatron-Core's MoE: experts, top-k, their FFN, the shared experts, which layers route
// (--moe-layer-freq: an interval, or a 0/1 list where dense layers lead), expert parallelism
// over the data-parallel ranks with the all-to-all dispatcher and grouped GEMMs (what hetsim
// replays), and the capacity factor where the plan drops tokens.
void add_moe_flags(const workload::ModelConfig& m, const workload::Plan& p,
                   std::vector<std::string>& a) {
  auto add = [&a](const char* flag, long value) {
    a.emplace_back(flag);
    a.push_back(std::to_string(value));
  };
  add("--num-experts", m.experts);
  add("--moe-router-topk", m.experts_per_token);
  add("--moe-ffn-hidden-size", m.expert_ffn_hidden);
  if (m.shared_experts > 0) {
    add("--moe-shared-expert-intermediate-size",
        static_cast<long>(m.shared_experts) * m.expert_ffn_hidden);
  }
  if (m.dense_layers > 0 || m.moe_phase > 0) {
    std::string pattern = "[";
    for (int l = 0; l < m.layers; ++l)
      pattern += (l ? "," : "") + std::string(m.is_moe(l) ? "1" : "0");
    a.emplace_back("--moe-layer-freq");
    a.push_back(pattern + "]");
  } else if (m.moe_every > 1) {
    add("--moe-layer-freq", m.moe_every);
  }
  add("--expert-model-parallel-size", p.expert_parallel);
  if (p.experts_whole()) add("--expert-tensor-parallel-size", 1);
  a.insert(a.end(), {"--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm"});
  if (p.capacity_factor > 0) {
    a.emplace_back("--moe-expert-capacity-factor");
    a.push_back(fmt::format("{}", p.capacity_factor));
  }
}

}  // namespace

void add_megatron_model_flags(const workload::ModelConfig& m, std::vector<std::string>& a) {
  auto add = [&a](const char* flag, long value) {
    a.emplace_back(flag);
    a.push_back(std::to_string(value));
  };
  add("--num-layers", m.layers);
  add("--hidden-size", m.hidden);
  add("--num-attention-heads", m.heads);
  add("--ffn-hidden-size", m.ffn_hidden);
  if (m.q_width() != m.hidden) add("--kv-channels", m.head_dim);
  if (m.kv_heads != m.heads) {
    a.emplace_back("--group-query-attention");
    add("--num-query-groups", m.kv_heads);
  }
  add("--max-position-embeddings", m.sequence);
  a.emplace_back("--position-embedding-type");
  a.emplace_back(m.position == workload::Position::rotary ? "rope" : "learned_absolute");
  if (m.norm == workload::Norm::rmsnorm) {
    a.emplace_back("--normalization");
    a.emplace_back("RMSNorm");
  }
  if (m.activation == workload::Activation::swiglu) a.emplace_back("--swiglu");
  if (!m.tied_embeddings) a.emplace_back("--untie-embeddings-and-output-weights");
  if (!m.bias) a.emplace_back("--disable-bias-linear");
  if (!m.bias && m.qkv_bias) a.emplace_back("--add-qkv-bias");
  if (m.qk_norm == workload::QkNorm::head) a.emplace_back("--qk-layernorm");
  // Megatron-LM's dropouts default to 0.1 (attention and hidden); the model's own otherwise.
  if (m.dropout != 0.1) {
    for (const char* flag : {"--attention-dropout", "--hidden-dropout"}) {
      a.emplace_back(flag);
      a.push_back(fmt::format("{}", m.dropout));
    }
  }
  add("--vocab-size", m.vocab);
}

void check_megatron_shapes(const workload::ModelConfig& m, int tp, const std::string& framework,
                           std::vector<std::string>& unsupported) {
  // Layer layouts Megatron-LM's GPT model has no argument for.
  auto lacks = [&](bool has, const std::string& what) {
    if (has) unsupported.push_back(m.name + "'s " + what + ": " + framework + " has no such layer");
  };
  lacks(m.parallel_attention, "parallel attention and MLP (parallel_attention)");
  lacks(m.norm_placement != workload::NormPlacement::pre,
        "norms after the blocks (norm_placement " +
            std::string(m.norm_placement == workload::NormPlacement::post ? "post" : "sandwich") +
            ")");
  lacks(m.qk_norm == workload::QkNorm::projection || m.qk_norm == workload::QkNorm::unweighted,
        "query/key norms over the projection or without weights (qk_norm)");
  lacks(m.window_kind != workload::WindowKind::none, "local attention (attention_window)");
  lacks(m.head_bias, "output-layer bias (head_bias)");
  if (m.head == workload::Head::classification) {
    unsupported.push_back(m.name + "'s classification head: " + framework +
                          "'s pretraining script trains a language model (the classifier is its "
                          "tasks/ finetuning, not exported)");
  }
  lacks(m.mlp_bias != m.bias, "MLP biases apart from attention's (mlp_bias)");
  // Megatron's attention divides the query groups among the tensor-parallel ranks exactly.
  if (m.kv_heads % tp != 0) {
    unsupported.push_back("tensor parallel " + std::to_string(tp) + " with " +
                          std::to_string(m.kv_heads) + " key/value heads: " + framework +
                          " needs the key/value heads divisible by the tensor-parallel degree");
  }
}

namespace {

struct Split {
  std::vector<std::string> flags;
  std::vector<int> layers;  // per virtual stage, as Megatron-LM would place them
};

// The layouts Megatron-LM can be asked for that come closest to `want` (layers per virtual stage):
// an even split; the embedding and/or the loss counted as a layer
// (--account-for-embedding/loss-in-pipeline-split); without interleaving, a first and last stage
// of their own size (--decoder-first/last-pipeline-num-layers) and the rest even.
std::vector<Split> megatron_splits(int layers, int pp, int v, const std::vector<int>& want) {
  std::vector<Split> out;
  const int n = pp * v;
  if (layers % n == 0) out.push_back({{}, std::vector<int>(n, layers / n)});
  for (const auto& [emb, loss] : {std::pair{1, 1}, {0, 1}, {1, 0}}) {
    if ((layers + emb + loss) % n != 0) continue;
    Split s{{}, std::vector<int>(n, (layers + emb + loss) / n)};
    s.layers.front() -= emb;
    s.layers.back() -= loss;
    if (emb) s.flags.emplace_back("--account-for-embedding-in-pipeline-split");
    if (loss) s.flags.emplace_back("--account-for-loss-in-pipeline-split");
    out.push_back(std::move(s));
  }
  if (v == 1 && pp >= 2) {
    const int first = want.front(), last = want.back();
    if (pp == 2) {
      if (first > 0 && first < layers) {
        out.push_back({{"--decoder-first-pipeline-num-layers", std::to_string(first)},
                       {first, layers - first}});
      }
    } else if (first + last < layers && (layers - first - last) % (pp - 2) == 0) {
      const int middle = (layers - first - last) / (pp - 2);
      Split s{{}, std::vector<int>(pp, middle)};
      s.layers.front() = first;
      s.layers.back() = last;
      if (first != middle) {
        s.flags.insert(s.flags.end(),
                       {"--decoder-first-pipeline-num-layers", std::to_string(first)});
      }
      if (last != middle) {
        s.flags.insert(s.flags.end(), {"--decoder-last-pipeline-num-layers", std::to_string(last)});
      }
      out.push_back(std::move(s));
    }
    // Closest for --force: the remainder on the first stage.
    const int base = layers / pp;
    if (layers % pp != 0 && base > 0) {
      Split s{{"--decoder-first-pipeline-num-layers", std::to_string(layers - base * (pp - 1))},
              std::vector<int>(pp, base)};
      s.layers.front() = layers - base * (pp - 1);
      out.push_back(std::move(s));
    }
  }
  return out;
}

class MegatronLauncher final : public Launcher {
 public:
  const char* name() const override { return "megatron"; }
  const char* summary() const override {
    return "Megatron-LM: torchrun ... pretrain_gpt.py with its parallelism and model flags";
  }

  Launch make(const Target& t) const override {
    const workload::Plan& p = *t.plan;
    const workload::ModelConfig& m = *t.model;
    Launch l;
    l.framework = name();
    Layout lay = uniform_layout(t, "Megatron-LM");
    l.unsupported = lay.unsupported;
    const auto [nodes, per_node] = place_ranks(t, lay, "torchrun", l);
    std::vector<std::string>& a = l.command;
    auto add = [&a](const char* flag, long value) {
      a.emplace_back(flag);
      a.push_back(std::to_string(value));
    };
    a = {"torchrun",
         "--nnodes",
         std::to_string(nodes),
         "--nproc-per-node",
         std::to_string(per_node),
         m.causal ? "pretrain_gpt.py" : "pretrain_bert.py"};
    add("--tensor-model-parallel-size", lay.tp);
    add("--pipeline-model-parallel-size", lay.pp);
    if (lay.cp > 1) add("--context-parallel-size", lay.cp);
    check_megatron_shapes(m, lay.tp, "Megatron-LM", l.unsupported);
    if (p.schedule == workload::Schedule::gpipe) {
      l.unsupported.push_back(
          "schedule gpipe (every forward pass before the first backward pass): Megatron-LM runs "
          "1F1B or interleaved 1F1B; exported as 1F1B");
    }
    if (lay.interleave > 1 && lay.pp < 2) {
      l.unsupported.push_back("interleave " + std::to_string(lay.interleave) +
                              " with pipeline parallel 1: Megatron-LM interleaves model chunks "
                              "across pipeline stages only; exported without interleaving");
      lay.interleave = 1;
      lay.stage_layers = {m.layers};
    }
    add_split(m, lay, l);
    if (lay.interleave > 1) {
      if (p.microbatch_group > 0) {
        add("--microbatch-group-size-per-virtual-pipeline-stage", p.microbatch_group);
      }
    }
    // The flags the plan keys' table gives (sequence parallelism, the layers' kernel choices).
    for (std::string& f : workload::megatron_flags(p)) a.push_back(std::move(f));
    add("--micro-batch-size", lay.micro_batch);
    add("--global-batch-size", lay.global_batch);
    add("--seq-length", p.sequence_length);
    add_megatron_model_flags(m, a);
    if (m.moe()) add_moe_flags(m, p, a);
    if (p.recompute == workload::Recompute::selective) {
      a.insert(a.end(), {"--recompute-granularity", "selective"});
    } else if (p.recompute == workload::Recompute::selective_op) {
      l.unsupported.push_back(
          "recompute selective_op: torchtitan's op-level checkpointing has no Megatron-LM flag; "
          "exported without recompute");
    } else if (p.recompute == workload::Recompute::full && p.recompute_layers > 0) {
      // The first N layers of each stage's chunk recomputed, the others kept.
      a.insert(a.end(), {"--recompute-granularity", "full", "--recompute-method", "block",
                         "--recompute-num-layers", std::to_string(p.recompute_layers)});
    } else if (p.recompute == workload::Recompute::full) {
      // One layer per checkpoint, every layer: what hetsim's full recompute replays.
      a.insert(a.end(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                         "--recompute-num-layers", "1"});
    }
    add_precision(p, l);
    if (p.flash_attention) a.emplace_back("--use-flash-attn");
    // Megatron-LM's SGD takes momentum 0.9 unless told otherwise.
    if (p.optimizer == workload::Optimizer::sgd)
      a.insert(a.end(), {"--optimizer", "sgd", "--sgd-momentum", "0"});
    if (p.optimizer == workload::Optimizer::sgd_momentum) a.insert(a.end(), {"--optimizer", "sgd"});
    if (p.zero_stage >= 1) a.emplace_back("--use-distributed-optimizer");
    if (p.zero_stage >= 2) {
      l.unsupported.push_back("zero_stage " + std::to_string(p.zero_stage) +
                              ": Megatron-LM's distributed optimizer shards the optimizer states "
                              "only (ZeRO-1); exported as --use-distributed-optimizer");
    }
    if (p.gradient_reduction == workload::GradReduction::overlapped) {
      a.emplace_back("--overlap-grad-reduce");
    }
    // Megatron-LM counts its bucket in elements (fp32 main gradients: 4 bytes each).
    add("--ddp-bucket-size", std::lround(p.bucket_bytes / 4));
    if (!l.unsupported.empty()) l.approximation = approximation_text(lay, p.global_batch_size);
    return l;
  }

 private:
  // The interleaving and the layer split: an exact match among Megatron-LM's layouts, or the
  // closest one with a line saying so.
  static void add_split(const workload::ModelConfig& m, Layout& lay, Launch& l) {
    std::vector<Split> splits = megatron_splits(m.layers, lay.pp, lay.interleave, lay.stage_layers);
    const Split* chosen = nullptr;
    for (const Split& s : splits) {
      if (s.layers == lay.stage_layers) chosen = &s;
      if (chosen) break;
    }
    if (!chosen) {
      std::string line = "the plan splits the layers " + split_text(lay.stage_layers) + " over " +
                         std::to_string(lay.stage_layers.size()) +
                         (lay.interleave > 1 ? " virtual" : "") +
                         " pipeline stages: Megatron-LM splits them evenly, with only the first "
                         "and last stage different";
      if (splits.empty() && lay.interleave > 1) {
        // Nothing fits with interleaving: the closest is 1F1B over the same stages.
        lay.interleave = 1;
        std::vector<int> stages(lay.pp, 0);
        for (size_t k = 0; k < lay.stage_layers.size(); ++k)
          stages[k % lay.pp] += lay.stage_layers[k];
        lay.stage_layers = stages;
        splits = megatron_splits(m.layers, lay.pp, 1, lay.stage_layers);
        line += "; exported without interleaving";
      }
      if (!splits.empty()) chosen = &splits.back();
      if (chosen) line += " (exported as " + split_text(chosen->layers) + ")";
      l.unsupported.push_back(line);
    }
    if (lay.interleave > 1) {
      l.command.emplace_back("--num-layers-per-virtual-pipeline-stage");
      l.command.push_back(std::to_string(chosen ? chosen->layers[lay.pp] : 1));
    }
    if (chosen) l.command.insert(l.command.end(), chosen->flags.begin(), chosen->flags.end());
  }

  static void add_precision(const workload::Plan& p, Launch& l) {
    std::vector<std::string>& a = l.command;
    switch (p.precision) {
      case workload::Precision::bf16:
        a.emplace_back("--bf16");
        if (!p.fp32_main_grads) {
          l.unsupported.push_back(
              "main_grads: same with bf16: Megatron-LM accumulates and all-reduces bf16 gradients "
              "in fp32");
        }
        break;
      case workload::Precision::fp16:
        a.emplace_back("--fp16");
        if (p.fp32_main_grads) a.emplace_back("--accumulate-allreduce-grads-in-fp32");
        break;
      case workload::Precision::fp8:
        a.insert(a.end(), {"--bf16", "--fp8-format", "hybrid"});
        break;
      case workload::Precision::fp32:
        break;
    }
  }
};

}  // namespace

const Launcher& megatron_launcher() {
  static const MegatronLauncher l;
  return l;
}

}  // namespace hetsim::launch
