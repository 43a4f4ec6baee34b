// Plan loading, placement and validation; see plan.h.
#include "sim/workload/plan/plan.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "sim/config/limits.h"
#include "sim/config/units.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/core/hash.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/model/cnn.h"
#include "sim/workload/plan/cnn_split.h"
#include "sim/workload/plan/plan_keys.h"

namespace hetsim::workload {

std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::interleaved:
      return "interleaved";
  }
  return "?";
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
    case Recompute::selective_op:
      return "selective_op";
  }
  return "?";
}

namespace {

using config::get_int;
using config::get_string;
using config::where;
namespace limits = config::limits;

// An integer plan key at the top of a plan file, in the range its row of the plan keys' table
// gives (plan_keys.cpp); `default_value` where the file leaves it out (none: it is required).
long plan_int(const std::string& file, const YAML::Node& root, std::string_view key,
              std::optional<long> default_value = std::nullopt) {
  const PlanKey& row = plan_key(key);
  return get_int(file, root, "", key, static_cast<long>(row.min), static_cast<long>(row.max),
                 default_value);
}

// "0-7,16" -> GPU ids, or a YAML list of ints.
std::vector<platform::GpuId> device_list(const std::string& file, const YAML::Node& n,
                                         const std::string& path, size_t gpu_count) {
  std::vector<platform::GpuId> out;
  auto add = [&](long v) {
    if (v < 0 || static_cast<size_t>(v) >= gpu_count) {
      throw InputError(where(file, n) + ": " + path + ": GPU " + std::to_string(v) +
                       " does not exist (the cluster has " + std::to_string(gpu_count) + " GPUs)");
    }
    out.push_back(static_cast<platform::GpuId>(v));
  };
  auto bad = [&](const YAML::Node& at, const std::string& got) {
    return InputError(where(file, at) + ": " + path +
                      ": expected GPU ids such as \"0-7,16\" or a list of them, got " + got);
  };
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      long v = -1;
      try {
        v = n[i].as<long>();
      } catch (const YAML::Exception&) {
        throw bad(n[i], n[i].IsScalar() ? "\"" + n[i].Scalar() + "\" in the list"
                                        : "a nested list or map in the list");
      }
      add(v);
    }
  } else if (!n.IsScalar()) {
    throw bad(n, "a map");
  } else {
    const std::string text = n.as<std::string>();
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const size_t dash = item.find('-');
      try {
        const long lo = std::stol(item.substr(0, dash));
        const long hi = dash == std::string::npos ? lo : std::stol(item.substr(dash + 1));
        if (hi < lo) throw std::invalid_argument("backwards");
        for (long v = lo; v <= hi; ++v) add(v);
      } catch (const std::logic_error&) {
        throw InputError(where(file, n) + ": " + path +
                         ": expected GPU ids such as \"0-7,16\" or a list, got \"" + text + "\"");
      }
    }
  }
  std::set<platform::GpuId> seen(out.begin(), out.end());
  if (seen.size() != out.size()) {
    throw InputError(where(file, n) + ": " + path + ": a GPU is listed twice");
  }
  return out;
}

// The replay holds a program per stage group and simulates every tensor-parallel rank's
// communication: its memory and time grow with ranks x micro-batches x layers (limits.h).
void check_work(const std::string& file, long units) {
  if (units > limits::kWorkUnits) {
    throw InputError(
        file + ": the plan asks for " + std::to_string(units) +
        " rank-micro-batch-layers in one iteration (GPUs x micro-batches x layers "
        "per stage), more than one run can hold (" +
        std::to_string(limits::kWorkUnits) +
        "); use fewer micro-batches per iteration, a larger micro-batch, or fewer GPUs");
  }
}

void check_work(const std::string& file, const Plan& p) {
  long units = 0;
  for (const ReplicaPlan& r : p.replicas) {
    for (const StagePlan& st : r.stages) {
      units += static_cast<long>(st.tensor_parallel()) * r.micro_batches * st.layers;
    }
  }
  check_work(file, units);
}

// Mixed precision as the frameworks run it: every GPU of the plan must have the precision at its
// own rate. Without `precision:` the plan takes bf16 where all its GPUs have it and fp16
// otherwise (V100, T4 and P100 train in fp16 with loss scaling); a precision some GPU lacks is
// refused, since cuBLAS would run it off the tensor cores (bf16 on Volta) or not at all (fp8
// before Ada), which no datasheet figure describes.
}  // namespace

Precision default_precision(const std::vector<const config::GpuProfile*>& gpus) {
  const bool bf16 = std::all_of(gpus.begin(), gpus.end(), [](const config::GpuProfile* g) {
    return has_precision(*g, Precision::bf16);
  });
  return bf16 ? Precision::bf16 : Precision::fp16;
}

namespace {

// Shards a layer segment's gradients may be reduced in (asymmetric replicas of mixed
// tensor-parallel degrees): lcm(8, 6) = 24 is plenty.
constexpr long kMaxShards = 64;
// Data-parallel groups a staged plan's stage may hold: a group receives a transfer from each
// group of the stage before whose samples it shares (the replay counts arrivals in a byte).
constexpr size_t kMaxStageGroups = 128;

void check_layered(const std::string& file, const YAML::Node& root, const Plan& p) {
  if (!p.layered) return;
  for (size_t r = 0; r < p.replicas.size(); ++r) {
    if (p.replicas[r].stages.size() == 1) continue;
    throw InputError(fmt::format(
        "{}: gradient_accumulation: layered runs every micro-batch through a layer before the "
        "next, which a pipeline cannot (replica {} has {} stages); use one stage per replica",
        where(file, root["gradient_accumulation"]), r, p.replicas[r].stages.size()));
  }
}

// A framework that runs pipelines with no more than a ZeRO stage (Framework::pipeline_zero_max).
void check_pipeline_zero(const std::string& file, const YAML::Node& root, const Plan& p) {
  if (p.zero_stage <= p.framework.pipeline_zero_max) return;
  for (size_t r = 0; r < p.replicas.size(); ++r) {
    if (p.replicas[r].stages.size() < 2) continue;
    throw InputError(fmt::format(
        "{}: zero_stage: {} with a pipeline of {} stages, which {} runs with ZeRO stage {} at "
        "most ({}); use zero_stage {} or one stage",
        where(file, root["zero_stage"] ? root["zero_stage"] : root), p.zero_stage,
        p.replicas[r].stages.size(), p.framework.name, p.framework.pipeline_zero_max,
        p.framework.source, p.framework.pipeline_zero_max));
  }
}

// Sequence parallelism only on a framework that has it (Framework::sequence_parallel), where a
// stage is tensor-parallel (at one rank it is nothing).
void check_sequence_parallel(const std::string& file, const YAML::Node& root, const Plan& p) {
  if (!p.sequence_parallel || p.framework.sequence_parallel) return;
  for (const ReplicaPlan& rep : p.replicas) {
    for (const StagePlan& st : rep.stages) {
      if (st.tensor_parallel() < 2) continue;
      throw InputError(
          fmt::format("{}: sequence_parallel: true, but {} has no sequence parallelism ({}); use "
                      "sequence_parallel: false",
                      where(file, root["sequence_parallel"] ? root["sequence_parallel"] : root),
                      p.framework.name, p.framework.source));
    }
  }
}

// A framework whose pipeline sends wait for their receivers (Framework::p2p_buffer_bytes) runs
// its own schedule's order, which has one chunk per stage: interleaving would deadlock it.
void check_pipeline_schedule(const std::string& file, const YAML::Node& root, const Plan& p) {
  if (p.framework.interleaves() || p.schedule != Schedule::interleaved) return;
  throw InputError(fmt::format(
      "{}: schedule: interleaved, which {} does not run ({}: its pipeline sends wait for their "
      "receivers in an order with one chunk per stage); use 1f1b or gpipe",
      where(file, root["schedule"] ? root["schedule"] : root), p.framework.name,
      p.framework.source));
}

// expert_parallel, capacity_factor, routing: read; checked against the replicas in check_moe.
void read_moe(const std::string& file, const YAML::Node& root, const ModelConfig& model, Plan& p) {
  // At most 2^15: the expert gradients' keys hold the expert-parallel rank in 15 bits.
  p.expert_parallel = static_cast<int>(plan_int(file, root, "expert_parallel", 1));
  if (!model.moe()) {
    for (const char* k :
         {"expert_parallel", "capacity_factor", "routing", "expert_tensor_parallel"}) {
      if (root[k] && !(std::string(k) == "expert_parallel" && p.expert_parallel == 1)) {
        throw InputError(where(file, root[k]) + ": " + k + ": " + model.name +
                         " has no experts (a dense model; expert parallelism and routing apply "
                         "to a mixture of experts)");
      }
    }
    return;
  }
  if (model.experts % p.expert_parallel != 0) {
    throw InputError(fmt::format(
        "{}: expert_parallel: {} does not divide the {} experts of {} (each rank of the "
        "expert-parallel group holds experts / expert_parallel of each MoE layer)",
        where(file, root["expert_parallel"]), p.expert_parallel, model.experts, model.name));
  }
  if (root["expert_tensor_parallel"]) {
    p.expert_tensor_parallel = static_cast<int>(plan_int(file, root, "expert_tensor_parallel", 1));
  }
  p.capacity_factor = config::get_number(file, root, "", "capacity_factor", 0.0);
  if (root["capacity_factor"] && !(p.capacity_factor > 0 && p.capacity_factor <= model.experts)) {
    throw InputError(fmt::format(
        "{}: capacity_factor: expected a number above 0 and at most the expert count ({}), got "
        "{} (leave it out for dropless routing)",
        where(file, root["capacity_factor"]), model.experts, p.capacity_factor));
  }
  if (const YAML::Node r = root["routing"]) {
    if (r.IsScalar() && r.as<std::string>() == "uniform") return;
    if (!r.IsMap()) {
      throw InputError(where(file, r) +
                       ": routing: expected uniform or a map {zipf: EXPONENT, seed: N}");
    }
    config::check_keys(file, r, "routing", {"zipf", "seed"});
    p.routing_skew = config::get_number(file, r, "routing", "zipf");
    if (!(p.routing_skew >= 0 && p.routing_skew <= 8)) {
      throw InputError(fmt::format("{}: routing.zipf: expected an exponent from 0 to 8, got {}",
                                   where(file, r["zipf"]), p.routing_skew));
    }
    p.routing_seed = static_cast<uint64_t>(
        get_int(file, r, "routing", "seed", 0, std::numeric_limits<int32_t>::max(), 1));
  }
}

// tp_comm_overlap overlaps sequence parallelism's collectives: refused without it wherever a
// stage is tensor parallel.
void check_tp_overlap(const std::string& file, const YAML::Node& root, const Plan& p) {
  if (!p.kernels.tp_comm_overlap || p.sequence_parallel) return;
  for (const ReplicaPlan& rep : p.replicas) {
    for (const StagePlan& st : rep.stages) {
      if (st.tensor_parallel() > 1) {
        throw InputError(where(file, root["tp_comm_overlap"]) +
                         ": tp_comm_overlap: overlaps sequence parallelism's all-gathers and "
                         "reduce-scatters with the GEMMs, so it needs sequence_parallel: true "
                         "(Megatron-LM refuses --tp-comm-overlap without --sequence-parallel)");
      }
    }
  }
}

// torchtitan's op-level checkpointing as hetsim replays it: dense layers with standard multi-head
// or grouped-query attention, no tensor or context parallelism (torchtitan's policy also keeps
// the tensor-parallel reduce-scatters' outputs, which this replay does not count).
void check_selective_op(const std::string& file, const YAML::Node& root, const ModelConfig& model,
                        const Plan& p) {
  if (p.recompute != Recompute::selective_op) return;
  auto refuse = [&](const std::string& why) {
    throw InputError(where(file, root["recompute"]) + ": recompute: selective_op " + why);
  };
  if (model.moe() || model.mla())
    refuse(
        "(torchtitan's op-level checkpointing) is replayed for dense layers with multi-head or "
        "grouped-query attention; " +
        model.name + " has " + (model.moe() ? "expert" : "latent-attention") + " layers");
  if (model.activation != Activation::swiglu)
    refuse(
        "(torchtitan's op-level checkpointing) is replayed for Llama-style layers (SwiGLU, "
        "separate query, key and value projections); " +
        model.name + " has a GeLU MLP");
  if (p.context_parallel > 1) refuse("is replayed without context parallelism");
  auto check = [&](const StagePlan& st) {
    if (st.tensor_parallel() > 1)
      refuse(
          "is replayed without tensor parallelism (torchtitan's policy then also keeps the "
          "reduce-scatters' outputs); use selective or full");
  };
  for (const ReplicaPlan& rep : p.replicas)
    for (const StagePlan& st : rep.stages) check(st);
  for (const DataParallelStage& ds : p.dp_stages)
    for (const StagePlan& st : ds.groups) check(st);
}

// Expert parallelism over the replicas: groups of expert_parallel consecutive replicas that run
// the same stages, so that every layer's all-to-all pairs up rank for rank.
void check_moe(const std::string& file, const YAML::Node& root, const ModelConfig& model,
               const Plan& p) {
  if (!model.moe()) return;
  for (const ReplicaPlan& rep : p.replicas) {
    for (const StagePlan& st : rep.stages) {
      if (st.tensor_parallel() > 1 && !p.sequence_parallel) {
        throw InputError(fmt::format(
            "{}: sequence_parallel: {} is a mixture of experts, and its layers' tokens are "
            "dispatched from sequence-parallel shards: with tensor_parallel {} it needs "
            "sequence_parallel: true (Megatron-LM requires it)",
            where(file, root["sequence_parallel"] ? root["sequence_parallel"] : root), model.name,
            st.tensor_parallel()));
      }
    }
  }
  if (const YAML::Node et = root["expert_tensor_parallel"]) {
    const int t = p.tensor_parallel;
    if (!p.uniform) {
      throw InputError(where(file, et) +
                       ": expert_tensor_parallel: applies to uniform plans (tensor_parallel, "
                       "pipeline_parallel, data_parallel), not to replicas spelled out");
    }
    if (p.expert_tensor_parallel != 1 && p.expert_tensor_parallel != t) {
      throw InputError(fmt::format(
          "{}: expert_tensor_parallel: expected 1 (each expert whole on one rank) or the "
          "tensor_parallel degree {} (the experts split as the dense layers), got {}",
          where(file, et), t, p.expert_tensor_parallel));
    }
    if (p.experts_whole() && p.expert_parallel % t != 0) {
      throw InputError(fmt::format(
          "{}: expert_parallel: {} is not a multiple of tensor_parallel {}: with "
          "expert_tensor_parallel 1 the expert-parallel group is every rank of expert_parallel / "
          "tensor_parallel replicas",
          where(file, root["expert_parallel"] ? root["expert_parallel"] : et), p.expert_parallel,
          t));
    }
  }
  const int ep = p.expert_group_replicas();
  if (p.expert_parallel == 1) return;
  const YAML::Node at = root["expert_parallel"];
  const size_t R = p.replicas.size();
  if (R % static_cast<size_t>(ep) != 0) {
    throw InputError(fmt::format(
        "{}: expert_parallel: {}{} does not divide the {} data-parallel replicas (the "
        "expert-parallel groups are consecutive replicas, as in Megatron-LM)",
        where(file, at), p.expert_parallel,
        p.experts_whole()
            ? fmt::format(" over {} ranks a replica ({} replicas a group)", p.tensor_parallel, ep)
            : std::string(),
        R));
  }
  if (p.zero_stage == 3) {
    throw InputError(where(file, at) +
                     ": expert_parallel: zero_stage 3 with expert parallelism is not modelled "
                     "(Megatron-LM shards with its distributed optimizer, zero_stage 1); use "
                     "zero_stage 0 to 2");
  }
  // Expert gradients are reduced stage by stage among the replicas of one expert-parallel rank
  // in different groups: with several groups, every replica must split the layers as replica 0;
  // with one, as the others of its group.
  const bool several = R > static_cast<size_t>(ep);
  for (size_t r = 0; r < R; ++r) {
    if (p.replicas[r].state_share > 0) {
      throw InputError(where(file, at) +
                       ": expert_parallel: state_share does not apply with expert parallelism "
                       "(the experts' state is sharded among fewer replicas than the rest)");
    }
    const size_t first = several ? 0 : r - r % static_cast<size_t>(ep);
    const ReplicaPlan& a = p.replicas[first];
    const ReplicaPlan& b = p.replicas[r];
    bool same = a.micro_batches == b.micro_batches && a.stages.size() == b.stages.size();
    for (size_t s = 0; same && s < a.stages.size(); ++s) {
      same = a.stages[s].first_layer == b.stages[s].first_layer &&
             a.stages[s].layers == b.stages[s].layers &&
             a.stages[s].tensor_parallel() == b.stages[s].tensor_parallel();
    }
    if (!same && several) {
      throw InputError(fmt::format(
          "{}: expert_parallel: replicas {} and {} differ in their stages or micro-batches; "
          "with {} expert-parallel groups, each layer's experts are reduced among replicas of "
          "different groups, and each all-to-all pairs the replicas of one group: every replica "
          "needs the same stages (layers, tensor-parallel degree) and micro-batches",
          where(file, at), first, r, R / static_cast<size_t>(ep)));
    }
    if (!same) {
      throw InputError(fmt::format(
          "{}: expert_parallel: replicas {} and {} share an expert-parallel group, so every "
          "layer's all-to-all pairs them up: they need the same stages (layers, "
          "tensor-parallel degree) and micro-batches",
          where(file, at), first, r));
    }
  }
}

void resolve_precision(const std::string& file, const YAML::Node& root,
                       const platform::Cluster& cluster, Plan& p) {
  std::vector<const config::GpuProfile*> gpus;
  auto add = [&](const StagePlan& st) {
    const config::GpuProfile* g = cluster.gpu(st.devices.front()).profile;
    if (std::find(gpus.begin(), gpus.end(), g) == gpus.end()) gpus.push_back(g);
  };
  for (const ReplicaPlan& r : p.replicas) {
    for (const StagePlan& st : r.stages) add(st);
  }
  for (const DataParallelStage& ds : p.dp_stages) {
    for (const StagePlan& st : ds.groups) add(st);
  }
  if (!root["precision"]) {
    p.precision = default_precision(gpus);
    p.precision_defaulted = true;
  }
  for (const config::GpuProfile* g : gpus) {
    if (has_precision(*g, p.precision)) continue;
    throw InputError(
        (root["precision"] ? where(file, root["precision"]) + ": precision" : file) + ": " +
        to_string(p.precision) + " is not available on " + g->name + " (it has " +
        training_precisions(*g) + ")" +
        (p.precision == Precision::bf16 && has_precision(*g, Precision::fp16)
             ? "; train in fp16 with loss scaling (precision: fp16) as frameworks do on it"
             : ""));
  }
}

void check_stage(const std::string& where_, const ModelConfig& model,
                 const platform::Cluster& cluster, const StagePlan& st) {
  const int t = st.tensor_parallel();
  if (model.heads % t != 0) {
    throw InputError(where_ + ": tensor_parallel " + std::to_string(t) + " does not divide the " +
                     std::to_string(model.heads) + " attention heads" +
                     (t > model.heads ? " (wider than the heads)" : ""));
  }
  if (model.kv_heads % t != 0 && t % model.kv_heads != 0) {
    throw InputError(where_ + ": tensor_parallel " + std::to_string(t) +
                     " does not divide the key/value heads (" + std::to_string(model.kv_heads) +
                     ")");
  }
  if (model.ffn_hidden % t != 0 || model.vocab % t != 0) {
    // Megatron pads the vocabulary; the FFN must split exactly.
    if (model.ffn_hidden % t != 0) {
      throw InputError(where_ + ": tensor_parallel " + std::to_string(t) +
                       " does not divide ffn_hidden (" + std::to_string(model.ffn_hidden) + ")");
    }
  }
  if (model.moe() && model.expert_ffn_hidden % t != 0) {
    throw InputError(where_ + ": tensor_parallel " + std::to_string(t) +
                     " does not divide expert_ffn_hidden (" +
                     std::to_string(model.expert_ffn_hidden) +
                     "): each expert's FFN splits over the tensor-parallel ranks");
  }
  const std::string gpu = cluster.gpu(st.devices.front()).profile->name;
  for (platform::GpuId g : st.devices) {
    if (cluster.gpu(g).profile->name != gpu) {
      throw InputError(where_ + ": a tensor-parallel group mixes GPU types (" + gpu + " and " +
                       cluster.gpu(g).profile->name + ")");
    }
  }
}

// The plan's GPUs: `devices:`, else the whole cluster in order.
std::vector<platform::GpuId> plan_devices(const std::string& file, const YAML::Node& root,
                                          const platform::Cluster& cluster) {
  if (root["devices"]) return device_list(file, root["devices"], "devices", cluster.gpu_count());
  std::vector<platform::GpuId> all(cluster.gpu_count());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// The keys every plan reads alike: its what-ifs, its precision, its gradients' precision, its
// framework (whose defaults the plan's own keys then override) and its gradient reduction.
void read_common(const std::string& file, const YAML::Node& root,
                 const std::string& framework_default, Plan& p) {
  if (const YAML::Node w = root["perturbations"]) {
    if (!w.IsMap()) {
      throw InputError(config::where(file, w) +
                       ": perturbations: expected a map of slow, link, stragglers and lost (e.g. "
                       "\"perturbations: {slow: {gpu: 3, factor: 2}}\")");
    }
    read_perturbations(file, w, "perturbations", {}, p.perturbations);
  }
  if (root["precision"]) {
    p.precision = static_cast<Precision>(
        config::get_choice(file, root, "", "precision", plan_choices("precision")));
  }
  p.fp32_main_grads =
      config::get_choice(file, root, "", "main_grads", plan_choices("main_grads"), "fp32") == 0;
  p.optimizer = static_cast<Optimizer>(
      config::get_choice(file, root, "", "optimizer", plan_choices("optimizer"), "adam"));
  const std::string framework = get_string(file, root, "", "framework", framework_default);
  try {
    p.framework = load_framework(framework);
  } catch (const InputError& e) {
    throw InputError(where(file, root["framework"]) + ": framework: " + e.what());
  }
  p.gradient_reduction = static_cast<GradReduction>(
      config::get_choice(file, root, "", "gradient_reduction", plan_choices("gradient_reduction"),
                         to_string(p.framework.gradient_reduction)));
}

// The grid's columns as replicas of one stage each: column c is the replica of ranks
// devices[rows c .. rows c + rows - 1], a column's rows on neighbouring GPUs (the same node where
// it fits), as the grid's frequent halo and activation traffic wants.
void add_grid_columns(const std::string& file, const ModelConfig& model,
                      const platform::Cluster& cluster, const std::vector<platform::GpuId>& devices,
                      long rows, long columns, int m, Plan& p) {
  for (long c = 0; c < columns; ++c) {
    ReplicaPlan rep;
    rep.micro_batches = m;
    StagePlan st;
    st.layers = model.layers;
    for (long r = 0; r < rows; ++r)
      st.devices.push_back(devices[static_cast<size_t>(r + rows * c)]);
    const config::GpuProfile* gpu = cluster.gpu(st.devices.front()).profile;
    for (platform::GpuId d : st.devices) {
      if (cluster.gpu(d).profile != gpu) {
        throw InputError(
            fmt::format("{}: grid column {} mixes GPU types ({} and {}); a column's "
                        "ranks split every layer evenly and must be alike",
                        file, c, gpu->name, cluster.gpu(d).profile->name));
      }
    }
    rep.stages.push_back(std::move(st));
    p.replicas.push_back(std::move(rep));
  }
}

// The layers' splits over the grid's rows (`split`): batch on one row; gholami (the paper's
// choice), model or domain for every layer; or one entry per weighted layer.
void read_layer_splits(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                       const platform::Cluster& cluster, long rows, long columns, Plan& p) {
  const YAML::Node split = root["split"];
  const size_t layers = model.cnn.size();
  auto every = [&](LayerSplit conv, LayerSplit fc) {
    std::vector<LayerSplit> out;
    for (const CnnLayer& l : model.cnn) out.push_back(l.kind == CnnKind::fc ? fc : conv);
    return out;
  };
  if (rows == 1) {
    // The policy's choice on one row is batch parallelism throughout.
    if (split && !(split.IsScalar() &&
                   (split.as<std::string>() == "batch" || split.as<std::string>() == "gholami"))) {
      throw InputError(where(file, split) +
                       ": split: a grid of one row is pure batch parallelism; give split: batch, "
                       "gholami or none, or more rows");
    }
    p.layer_splits.assign(layers, LayerSplit::batch);
    p.split_policy = "batch";
  } else if (!split || split.IsScalar()) {
    const size_t choice =
        config::get_choice(file, root, "", "split", {"gholami", "model", "domain"}, "gholami");
    if (choice == 1) {
      p.layer_splits = every(LayerSplit::model, LayerSplit::model);
      p.split_policy = "model";
    } else if (choice == 2) {
      p.layer_splits = every(LayerSplit::domain, LayerSplit::model);
      p.split_policy = "domain";
    } else {
      // The paper's choice on alpha and beta fitted to this grid's own collectives.
      const std::vector<platform::GpuId>& row = p.replicas.front().stages.front().devices;
      std::vector<platform::GpuId> column, all;
      for (const ReplicaPlan& r : p.replicas) {
        column.push_back(r.stages.front().devices.front());
        for (platform::GpuId d : r.stages.front().devices) all.push_back(d);
      }
      const double e = element_bytes(p.precision), g = p.fp32_main_grads ? 4 : e;
      p.layer_splits =
          gholami_splits(model, static_cast<int>(rows), static_cast<int>(columns),
                         p.micro_batch_size, e, g, fit_alpha_beta(cluster, row),
                         fit_alpha_beta(cluster, column), fit_alpha_beta(cluster, all));
      p.split_policy = "gholami";
    }
  } else {
    // One entry per convolution and fully connected layer, in order (pools follow their input).
    size_t weighted = 0;
    for (const CnnLayer& l : model.cnn) weighted += l.kind == CnnKind::pool ? 0 : 1;
    if (!split.IsSequence() || split.size() != weighted) {
      throw InputError(fmt::format(
          "{}: split: expected gholami, model, domain, or a list of {} entries (model or domain), "
          "one per convolution and fully connected layer of {}",
          where(file, split), weighted, model.name));
    }
    size_t k = 0;
    for (const CnnLayer& l : model.cnn) {
      if (l.kind == CnnKind::pool) {
        p.layer_splits.push_back(LayerSplit::batch);
        continue;
      }
      const YAML::Node v = split[k];
      const std::string s = v.IsScalar() ? v.as<std::string>() : "";
      if (s != "model" && s != "domain") {
        throw InputError(
            fmt::format("{}: split[{}] ({}): expected model or domain", where(file, v), k, l.name));
      }
      p.layer_splits.push_back(s == "model" ? LayerSplit::model : LayerSplit::domain);
      ++k;
    }
    p.split_policy = "listed";
  }
}

// A convolutional network's plan: a process grid (Gholami et al.), see Plan::layer_splits.
Plan load_grid_plan(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                    const platform::Cluster& cluster) {
  config::check_keys(
      file, root, "",
      {"grid", "devices", "global_batch_size", "micro_batch_size", "split", "precision",
       "framework", "main_grads", "optimizer", "gradient_reduction", "perturbations"});
  Plan p;
  p.source = file;
  read_common(file, root, "pytorch-ddp", p);
  const std::vector<platform::GpuId> devices = plan_devices(file, root, cluster);
  const long n = static_cast<long>(devices.size());
  long rows = 1, columns = n;
  if (const YAML::Node g = root["grid"]) {
    config::check_keys(file, g, "grid", {"rows", "columns"});
    rows = get_int(file, g, "grid", "rows", 1, limits::kGpus, 1);
    columns = get_int(file, g, "grid", "columns", 1, limits::kGpus, std::max(1L, n / rows));
  }
  if (rows * columns != n) {
    throw InputError(fmt::format(
        "{}: grid: rows x columns = {} x {} = {}, but the plan has {} GPUs{}", file, rows, columns,
        rows * columns, n,
        root["devices"] ? " (devices)" : " (the whole cluster; set devices to use fewer)"));
  }
  p.global_batch_size = plan_int(file, root, "global_batch_size");
  if (p.global_batch_size % columns != 0) {
    throw InputError(fmt::format(
        "{}: global_batch_size: {} images do not split over the grid's {} columns (batch "
        "parallel): use a multiple of {}",
        where(file, root["global_batch_size"]), p.global_batch_size, columns, columns));
  }
  p.micro_batch_size = plan_int(file, root, "micro_batch_size", p.global_batch_size / columns);
  if (p.global_batch_size % (p.micro_batch_size * columns) != 0) {
    throw InputError(fmt::format(
        "{}: micro_batch_size: {} does not divide the {} images of each column",
        where(file, root["micro_batch_size"]), p.micro_batch_size, p.global_batch_size / columns));
  }
  p.sequence_length = 1;
  p.uniform = true;
  p.tensor_parallel = static_cast<int>(rows);
  p.pipeline_parallel = 1;
  p.data_parallel = static_cast<int>(columns);
  const int m = static_cast<int>(p.global_batch_size / (p.micro_batch_size * columns));
  check_work(file, n * m * model.layers);
  add_grid_columns(file, model, cluster, devices, rows, columns, m, p);
  resolve_precision(file, root, cluster, p);
  read_layer_splits(root, file, model, cluster, rows, columns, p);
  // Every layer's split checked now (the width and kernel it needs): an error names the layer.
  cnn_programs(model, p.layer_splits, static_cast<int>(rows), p.micro_batch_size, p.precision,
               file);
  return p;
}

}  // namespace
namespace {

// What a staged plan cannot express (yet), each refused with its reason.
void refuse_for_staged(const YAML::Node& root, const std::string& file, const Plan& p) {
  for (const char* k : {"tensor_parallel", "pipeline_parallel", "data_parallel", "devices",
                        "stage_layers", "context_parallel", "replicas"}) {
    if (root[k]) {
      throw InputError(where(file, root[k]) + ": " + k +
                       ": a staged plan gives each stage its own groups (stages:); leave " + k +
                       " out");
    }
  }
  if (p.schedule == Schedule::interleaved) {
    throw InputError(where(file, root["schedule"]) +
                     ": schedule: interleaved applies to uniform plans only");
  }
  if (p.layered) {
    throw InputError(where(file, root["gradient_accumulation"]) +
                     ": gradient_accumulation: layered runs one stage a replica; a staged plan "
                     "is a pipeline");
  }
  if (p.zero_stage != 0) {
    throw InputError(where(file, root["zero_stage"] ? root["zero_stage"] : root) +
                     ": zero_stage: " + std::to_string(p.zero_stage) +
                     ": a staged plan keeps each stage's training state whole on every group "
                     "(Metis does); use zero_stage 0" +
                     (root["zero_stage"] ? "" : " (the framework's default is ZeRO)"));
  }
  if (p.expert_parallel > 1) {
    throw InputError(where(file, root["expert_parallel"]) +
                     ": expert_parallel: expert groups span replicas; a staged plan has none");
  }
}

// One stage's data-parallel groups and their batch shares (0: not given), as `groups: [{devices,
// batch}, ...]` or as `devices` cut into groups of `tensor_parallel` with `batch: [...]`.
struct StageGroups {
  std::vector<std::vector<platform::GpuId>> devices;
  std::vector<int64_t> batch;
};

StageGroups read_stage_groups(const std::string& file, const YAML::Node& n, const std::string& sp,
                              const platform::Cluster& cluster) {
  StageGroups out;
  if (n["groups"]) {
    for (const char* k : {"devices", "tensor_parallel", "batch"}) {
      if (n[k]) {
        throw InputError(where(file, n[k]) + ": " + sp + "." + k +
                         ": give either groups or devices, not both");
      }
    }
    const YAML::Node gs = n["groups"];
    if (!gs.IsSequence() || gs.size() == 0) {
      throw InputError(where(file, gs) + ": " + sp + ".groups: expected a non-empty list");
    }
    for (size_t j = 0; j < gs.size(); ++j) {
      const std::string gp = sp + ".groups[" + std::to_string(j) + "]";
      if (!gs[j].IsMap()) throw InputError(where(file, gs[j]) + ": " + gp + ": expected a map");
      config::check_keys(file, gs[j], gp, {"devices", "batch"});
      out.devices.push_back(device_list(file, config::require(file, gs[j], gp, "devices"),
                                        gp + ".devices", cluster.gpu_count()));
      out.batch.push_back(gs[j]["batch"] ? get_int(file, gs[j], gp, "batch", 1, limits::kBatch)
                                         : 0);
    }
    return out;
  }
  const std::vector<platform::GpuId> devices = device_list(
      file, config::require(file, n, sp, "devices"), sp + ".devices", cluster.gpu_count());
  const long tp = get_int(file, n, sp, "tensor_parallel", 1, limits::kGpus, 1);
  if (devices.size() % static_cast<size_t>(tp) != 0) {
    throw InputError(
        fmt::format("{}: {}: tensor_parallel {} does not divide the stage's {} devices into groups",
                    where(file, n), sp, tp, devices.size()));
  }
  for (size_t a = 0; a < devices.size(); a += static_cast<size_t>(tp))
    out.devices.emplace_back(devices.begin() + static_cast<long>(a),
                             devices.begin() + static_cast<long>(a) + tp);
  out.batch.assign(out.devices.size(), 0);
  if (const YAML::Node b = n["batch"]) {
    if (!b.IsSequence() || b.size() != out.devices.size()) {
      throw InputError(fmt::format(
          "{}: {}.batch: expected a list of {} sample counts, one per group of {} devices",
          where(file, b), sp, out.devices.size(), tp));
    }
    for (size_t j = 0; j < out.devices.size(); ++j)
      out.batch[j] =
          config::int_value(file, b[j], fmt::format("{}.batch[{}]", sp, j), 1, limits::kBatch);
  }
  return out;
}

// The groups' shares of a micro-batch of `mb`: all given, adding up to it, or none (even, when
// they divide it).
void settle_shares(const std::string& file, const YAML::Node& n, const std::string& sp, int64_t mb,
                   StageGroups& g) {
  const size_t count = g.devices.size();
  if (count > kMaxStageGroups) {
    throw InputError(fmt::format(
        "{}: {}: {} data-parallel groups; hetsim re-shards a stage's activations among at most "
        "{}",
        where(file, n), sp, count, kMaxStageGroups));
  }
  const size_t given = static_cast<size_t>(
      std::count_if(g.batch.begin(), g.batch.end(), [](int64_t b) { return b > 0; }));
  if (given == 0) {
    if (mb % static_cast<int64_t>(count) != 0) {
      throw InputError(fmt::format(
          "{}: {}: micro_batch_size {} does not split evenly over the stage's {} groups; give "
          "each group's batch",
          where(file, n), sp, mb, count));
    }
    g.batch.assign(count, mb / static_cast<int64_t>(count));
    return;
  }
  const int64_t sum = std::accumulate(g.batch.begin(), g.batch.end(), int64_t{0});
  if (given != count || sum != mb) {
    throw InputError(
        fmt::format("{}: {}: the groups' batch shares must be given for every group and add up to "
                    "micro_batch_size {} (given for {} of {}, adding up to {})",
                    where(file, n), sp, mb, given, count, sum));
  }
}

// The micro-batches of an iteration: global_batch_size (default one micro-batch) over
// micro_batch_size, within what hetsim simulates.
int64_t staged_micro_batches(const YAML::Node& root, const std::string& file, Plan& p) {
  const int64_t mb = p.micro_batch_size;
  p.global_batch_size = plan_int(file, root, "global_batch_size", mb);
  if (p.global_batch_size % mb != 0) {
    throw InputError(fmt::format(
        "{}: global_batch_size: {} is not a multiple of micro_batch_size {} (each micro-batch "
        "runs through every stage, split over its groups)",
        where(file, root["global_batch_size"]), p.global_batch_size, mb));
  }
  const int64_t M = p.global_batch_size / mb;
  if (M > limits::kMicroBatches) {
    throw InputError(
        fmt::format("{}: global_batch_size / micro_batch_size = {} micro-batches, "
                    "more than hetsim simulates ({})",
                    where(file, root["global_batch_size"]), M, limits::kMicroBatches));
  }
  return M;
}

// A staged plan (`stages:`, Plan::dp_stages): each stage its layers and its data-parallel
// groups, given as `groups: [{devices, batch}, ...]` or as `devices` cut into groups of
// `tensor_parallel` (with `batch: [...]` per group, or even shares).
Plan load_staged_plan(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                      const platform::Cluster& cluster, Plan& p) {
  p.uniform = false;
  refuse_for_staged(root, file, p);
  const YAML::Node stages = root["stages"];
  if (!stages.IsSequence() || stages.size() == 0) {
    throw InputError(where(file, stages) + ": stages: expected a non-empty list");
  }
  std::set<platform::GpuId> used;
  int next_layer = 0;
  long units = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const std::string sp = "stages[" + std::to_string(s) + "]";
    const YAML::Node n = stages[s];
    if (!n.IsMap()) throw InputError(where(file, n) + ": " + sp + ": expected a map");
    config::check_keys(file, n, sp, {"layers", "groups", "devices", "tensor_parallel", "batch"});
    DataParallelStage st;
    st.first_layer = next_layer;
    st.layers = static_cast<int>(get_int(file, n, sp, "layers", 1, limits::kLayers));
    next_layer += st.layers;
    StageGroups groups = read_stage_groups(file, n, sp, cluster);
    settle_shares(file, n, sp, p.micro_batch_size, groups);
    for (size_t j = 0; j < groups.devices.size(); ++j) {
      StagePlan g;
      g.first_layer = st.first_layer;
      g.layers = st.layers;
      g.devices = std::move(groups.devices[j]);
      for (platform::GpuId d : g.devices) {
        if (!used.insert(d).second) {
          throw InputError(where(file, n) + ": " + sp + ": GPU " + std::to_string(d) +
                           " is already used by another group");
        }
      }
      check_stage(where(file, n) + ": " + sp + " group " + std::to_string(j), model, cluster, g);
      units += static_cast<long>(g.tensor_parallel()) * st.layers;
      st.groups.push_back(std::move(g));
    }
    st.batch = std::move(groups.batch);
    p.dp_stages.push_back(std::move(st));
  }
  if (next_layer != model.layers) {
    throw InputError(where(file, stages) + ": stages: the layers add up to " +
                     std::to_string(next_layer) + ", but " + model.name + " has " +
                     std::to_string(model.layers));
  }
  const int64_t M = staged_micro_batches(root, file, p);
  check_work(file, units * M);
  // The stages' first groups as the one replica: the layer split and the micro-batches.
  ReplicaPlan rep;
  rep.micro_batches = static_cast<int>(M);
  for (const DataParallelStage& st : p.dp_stages) rep.stages.push_back(st.groups.front());
  p.replicas.push_back(std::move(rep));
  p.tensor_parallel = p.dp_stages[0].groups[0].tensor_parallel();
  p.pipeline_parallel = p.stages();
  p.data_parallel = static_cast<int>(p.dp_stages[0].groups.size());
  check_selective_op(file, root, model, p);
  resolve_precision(file, root, cluster, p);
  return p;
}

}  // namespace

Plan uniform_plan(const ModelConfig& model, const platform::Cluster& cluster, int tp, int pp,
                  int dp, int64_t micro_batch, int64_t global_batch, int64_t sequence) {
  std::ostringstream y;
  y << "tensor_parallel: " << tp << "\npipeline_parallel: " << pp << "\ndata_parallel: " << dp
    << "\nmicro_batch_size: " << micro_batch << "\nglobal_batch_size: " << global_batch
    << "\nsequence_length: " << sequence << "\n";
  return load_plan_text(y.str(), "<uniform plan>", model, cluster);
}

Plan load_plan(const std::string& path, const ModelConfig& model, const platform::Cluster& cluster,
               const PlanOptions& options) {
  return load_plan_text(config::read_text_file(path, "plan file"), path, model, cluster, options);
}

namespace {

// What every plan checks once its replicas are laid out.
void check_plan(const std::string& file, const YAML::Node& root, const ModelConfig& model,
                const Plan& p) {
  check_layered(file, root, p);
  check_pipeline_zero(file, root, p);
  check_pipeline_schedule(file, root, p);
  check_sequence_parallel(file, root, p);
  check_moe(file, root, model, p);
  check_tp_overlap(file, root, p);
  check_selective_op(file, root, model, p);
}

// The keys of a transformer plan that do not lay out devices: micro-batches and sequences, the
// schedule, recomputation, attention, buckets, sequence parallelism, ZeRO, accumulation, MoE.
void read_training_keys(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                        Plan& p) {
  read_bound_plan_keys(root, file, p);  // the flags, counts and choices the table binds
  p.micro_batch_size = plan_int(file, root, "micro_batch_size", 1);
  p.sequence_length = plan_int(file, root, "sequence_length", model.sequence);
  if (p.micro_batch_size * p.sequence_length > limits::kTokensPerMicroBatch) {
    throw InputError(file + ": micro_batch_size x sequence_length = " +
                     std::to_string(p.micro_batch_size * p.sequence_length) +
                     " tokens in one micro-batch, more than hetsim simulates (" +
                     std::to_string(limits::kTokensPerMicroBatch) + ")");
  }
  check_key_needs(root, file, p);  // interleave and microbatch_group, recompute_layers
  p.flash_attention =
      config::get_choice(file, root, "", "attention", plan_choices("attention"), "flash") == 0;
  p.attention_defaulted = !root["attention"];
  p.bucket_bytes = config::get_quantity(file, root, "", "bucket_size", config::Dimension::bytes,
                                        p.framework.bucket_bytes.value_or(p.bucket_bytes));
  p.zero_stage =
      static_cast<int>(plan_int(file, root, "zero_stage", p.framework.zero_stage.value_or(0)));
  read_moe(file, root, model, p);
}

// The replicas of a `replicas:` plan, each its micro-batches and its stages (layers, devices),
// into p.replicas: every layer in exactly one stage of each replica, no GPU twice.
void read_replicas(const YAML::Node& reps, const std::string& file, const ModelConfig& model,
                   const platform::Cluster& cluster, Plan& p) {
  std::set<platform::GpuId> used;
  for (size_t r = 0; r < reps.size(); ++r) {
    const std::string rp = "replicas[" + std::to_string(r) + "]";
    config::check_keys(file, reps[r], rp, {"micro_batches", "stages", "state_share"});
    ReplicaPlan rep;
    rep.micro_batches =
        static_cast<int>(get_int(file, reps[r], rp, "micro_batches", 1, limits::kMicroBatches));
    if (reps[r]["state_share"]) {
      rep.state_share = config::get_number(file, reps[r], rp, "state_share");
      if (!(rep.state_share > 0 && rep.state_share <= 1)) {
        throw InputError(fmt::format("{}: {}.state_share: expected a fraction in (0, 1], got {}",
                                     where(file, reps[r]["state_share"]), rp, rep.state_share));
      }
    }
    const YAML::Node stages = config::require(file, reps[r], rp, "stages");
    if (!stages.IsSequence() || stages.size() == 0) {
      throw InputError(where(file, stages) + ": " + rp + ".stages: expected a non-empty list");
    }
    int next_layer = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      const std::string sp = rp + ".stages[" + std::to_string(s) + "]";
      config::check_keys(file, stages[s], sp, {"layers", "tensor_parallel", "devices"});
      StagePlan st;
      const long layers = get_int(file, stages[s], sp, "layers", 0, limits::kLayers);
      if (layers == 0) {
        throw InputError(where(file, stages[s]["layers"]) + ": " + sp +
                         ".layers: a stage with no layers");
      }
      st.first_layer = next_layer;
      st.layers = static_cast<int>(layers);
      next_layer += st.layers;
      st.devices = device_list(file, config::require(file, stages[s], sp, "devices"),
                               sp + ".devices", cluster.gpu_count());
      const long tp = get_int(file, stages[s], sp, "tensor_parallel", 1, limits::kGpus,
                              static_cast<long>(st.devices.size()));
      if (static_cast<size_t>(tp) != st.devices.size()) {
        throw InputError(where(file, stages[s]) + ": " + sp + ": tensor_parallel " +
                         std::to_string(tp) + " but " + std::to_string(st.devices.size()) +
                         " devices");
      }
      for (platform::GpuId g : st.devices) {
        if (!used.insert(g).second) {
          throw InputError(where(file, stages[s]) + ": " + sp + ".devices: GPU " +
                           std::to_string(g) + " is already used by another stage");
        }
      }
      check_stage(where(file, stages[s]) + ": " + sp, model, cluster, st);
      rep.stages.push_back(std::move(st));
    }
    if (next_layer != model.layers) {
      throw InputError(where(file, stages) + ": " + rp + ".stages: the layers add up to " +
                       std::to_string(next_layer) + ", but " + model.name + " has " +
                       std::to_string(model.layers));
    }
    p.replicas.push_back(std::move(rep));
  }
}

// Heterogeneous: replicas and their stages spelled out (`replicas:`).
Plan load_replica_plan(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                       const platform::Cluster& cluster, Plan& p) {
  p.uniform = false;
  for (const char* k : {"tensor_parallel", "pipeline_parallel", "data_parallel", "devices",
                        "stage_layers", "context_parallel"}) {
    if (root[k]) {
      throw InputError(where(file, root[k]) + ": " + k +
                       ": give either uniform degrees or replicas, not both");
    }
  }
  const YAML::Node reps = root["replicas"];
  if (!reps.IsSequence() || reps.size() == 0) {
    throw InputError(where(file, reps) + ": replicas: expected a non-empty list");
  }
  read_replicas(reps, file, model, cluster, p);
  if (p.schedule == Schedule::interleaved) {
    throw InputError(where(file, root["schedule"]) +
                     ": schedule: interleaved applies to uniform plans only");
  }
  check_work(file, p);
  int64_t total = 0;
  for (const ReplicaPlan& r : p.replicas) total += r.micro_batches * p.micro_batch_size;
  p.global_batch_size = plan_int(file, root, "global_batch_size", total);
  if (p.global_batch_size != total) {
    throw InputError(where(file, root["global_batch_size"]) +
                     ": global_batch_size: " + std::to_string(p.global_batch_size) +
                     ", but the replicas' micro_batches x "
                     "micro_batch_size add up to " +
                     std::to_string(total));
  }
  // State shares: given for every replica or for none, summing to one, of sharded state.
  const size_t shared =
      static_cast<size_t>(std::count_if(p.replicas.begin(), p.replicas.end(),
                                        [](const ReplicaPlan& r) { return r.state_share > 0; }));
  if (shared > 0) {
    double sum = 0;
    for (const ReplicaPlan& r : p.replicas) sum += r.state_share;
    if (shared != p.replicas.size() || std::abs(sum - 1) > 1e-6) {
      throw InputError(fmt::format(
          "{}: replicas: state_share must be given for every replica and add up to 1 (given "
          "for {} of {}, adding up to {:.6g})",
          where(file, reps), shared, p.replicas.size(), sum));
    }
    if (p.zero_stage == 0) {
      throw InputError(where(file, reps) +
                       ": replicas: state_share shards the training state, which zero_stage 0 "
                       "does not; use zero_stage 1 to 3");
    }
  }
  // ZeRO-2 and -3 reduce-scatter each micro-batch's gradients (and ZeRO-3 gathers each layer's
  // parameters per micro-batch) among the replicas: they must run as many micro-batches, or
  // the collectives do not pair up (DeepSpeed and FSDP would hang the same way). Layered
  // accumulation reduces and gathers once per layer, whatever the micro-batches.
  if (p.zero_stage >= 2 && !p.layered) {
    for (size_t r = 1; r < p.replicas.size(); ++r) {
      if (p.replicas[r].micro_batches != p.replicas[0].micro_batches) {
        throw InputError(fmt::format(
            "{}: zero_stage: {} reduces gradients every micro-batch among the replicas, so each "
            "must run as many micro-batches (replica 0 runs {}, replica {} runs {}); use "
            "zero_stage 0 or 1 for uneven batch shares",
            where(file, root["zero_stage"] ? root["zero_stage"] : root), p.zero_stage,
            p.replicas[0].micro_batches, r, p.replicas[r].micro_batches));
      }
    }
  }
  // Replicas whose stages differ reduce each layer's gradients among the stages that hold it,
  // rank by rank: those stages must split the layer the same way.
  if (p.asymmetric()) {
    if (p.zero_stage != 0) {
      throw InputError(where(file, root["zero_stage"]) +
                       ": zero_stage: " + std::to_string(p.zero_stage) +
                       " shards the training state among stages that match replica for "
                       "replica; these replicas' stages differ (in number, layers or "
                       "tensor-parallel degree), so use zero_stage 0");
    }
    // A segment held over different tensor-parallel degrees is reduced in lcm(degrees)
    // shards (DpSync); bound them.
    const std::vector<int> cuts = layer_segments(p, model.layers);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      long shards = 1;
      for (const ReplicaPlan& rep : p.replicas) {
        for (const StagePlan& st : rep.stages) {
          if (cuts[i] < st.first_layer || cuts[i] >= st.first_layer + st.layers) continue;
          shards = std::lcm(shards, static_cast<long>(st.tensor_parallel()));
        }
      }
      if (shards > kMaxShards) {
        throw InputError(fmt::format(
            "{}: replicas: layers {}-{} are held with tensor-parallel degrees whose least common "
            "multiple is {}; their gradients would be reduced in that many shards (at most {}: "
            "use degrees that divide one another)",
            where(file, reps), cuts[i], cuts[i + 1] - 1, shards, kMaxShards));
      }
    }
  }
  p.tensor_parallel = p.replicas[0].stages[0].tensor_parallel();
  check_plan(file, root, model, p);
  p.pipeline_parallel = p.stages();
  p.data_parallel = static_cast<int>(p.replicas.size());
  resolve_precision(file, root, cluster, p);
  return p;
}

// Layers per virtual stage (model chunk c of stage s is virtual stage c x pp + s; without
// interleaving, the stages): equal, or when they do not divide, one more on the middle ones,
// so the first and last (which also hold the embedding and the head) get fewer: Llama 3
// 405B's 126 layers on 16 stages (Meta, 2024), and interleaved by 8, its first chunk with only
// the embedding and its last with only the head (Megatron-LM's
// --account-for-embedding/loss-in-pipeline-split).
// `stage_layers:` gives the split instead (one count per stage, as AMP's and Metis's uneven
// splits, DeepSpeed's partition_method), with the same rank order.
std::pair<std::vector<int>, std::vector<int>> virtual_stage_layers(const YAML::Node& root,
                                                                   const std::string& file,
                                                                   const ModelConfig& model, int pp,
                                                                   int v) {
  const int vstages = pp * v;
  const int extra = model.layers % vstages;
  const int extra_from = (vstages - extra) / 2;
  std::vector<int> vlayers(vstages, model.layers / vstages), vfirst(vstages, 0);
  for (int k = 0; k < vstages; ++k)
    if (k >= extra_from && k < extra_from + extra) ++vlayers[k];
  if (const YAML::Node given = root["stage_layers"]) {
    if (v > 1) {
      throw InputError(where(file, given) +
                       ": stage_layers: the interleaved schedule splits the layers evenly over "
                       "its model chunks; give stage_layers without interleave");
    }
    if (!given.IsSequence() || given.size() != static_cast<size_t>(pp)) {
      throw InputError(fmt::format(
          "{}: stage_layers: expected a list of {} layer counts, one per pipeline stage (got {})",
          where(file, given), pp,
          given.IsSequence() ? std::to_string(given.size()) + " entries" : "no list"));
    }
    long sum = 0;
    for (int k = 0; k < pp; ++k) {
      const long n =
          config::int_value(file, given[k], fmt::format("stage_layers[{}]", k), 1, limits::kLayers);
      vlayers[k] = static_cast<int>(n);
      sum += n;
    }
    if (sum != model.layers) {
      throw InputError(fmt::format("{}: stage_layers: the layers add up to {}, but {} has {}",
                                   where(file, given), sum, model.name, model.layers));
    }
  }
  for (int k = 1; k < vstages; ++k) vfirst[k] = vfirst[k - 1] + vlayers[k - 1];
  return {vlayers, vfirst};
}

// Uniform: Megatron's rank order, tensor-parallel fastest, then data, then pipeline.
Plan load_uniform_plan(const YAML::Node& root, const std::string& file, const ModelConfig& model,
                       const platform::Cluster& cluster, Plan& p) {
  const int v = p.interleave;
  const int tp = static_cast<int>(plan_int(file, root, "tensor_parallel", 1));
  const int pp = static_cast<int>(plan_int(file, root, "pipeline_parallel", 1));
  const std::vector<platform::GpuId> devices = plan_devices(file, root, cluster);
  const int cp = static_cast<int>(plan_int(file, root, "context_parallel", 1));
  p.context_parallel = cp;
  if (cp > 1) {
    // Megatron-LM splits each sequence into 2 cp chunks, two per rank (the first and the last
    // of the causal mask's rows), so that every rank's share of the causal work is the same.
    const long chunks = model.causal ? 2L * cp : cp;
    if (p.sequence_length % chunks != 0) {
      throw InputError(fmt::format(
          "{}: context_parallel: {} does not split sequence_length {} into {} equal chunks "
          "({} per rank, for the causal mask's balance); use a degree whose {} divides the "
          "sequence",
          where(file, root["context_parallel"]), cp, p.sequence_length, chunks,
          model.causal ? 2 : 1, model.causal ? "double" : "value"));
    }
    if (p.expert_parallel > 1) {
      throw InputError(where(file, root["context_parallel"]) +
                       ": context_parallel: with expert_parallel is not modelled yet (the expert "
                       "groups would fold over the context-parallel ranks); use one of them");
    }
  }
  const long dp_default = static_cast<long>(devices.size()) / (static_cast<long>(tp) * pp * cp);
  const int dp = static_cast<int>(plan_int(file, root, "data_parallel", std::max(1L, dp_default)));
  if (static_cast<size_t>(tp) * pp * dp * cp != devices.size()) {
    const std::string with_cp = cp > 1 ? " x context_parallel" : "";
    const std::string cp_n = cp > 1 ? " x " + std::to_string(cp) : "";
    throw InputError(
        file + ": tensor_parallel x pipeline_parallel x data_parallel" + with_cp + " = " +
        std::to_string(tp) + " x " + std::to_string(pp) + " x " + std::to_string(dp) + cp_n +
        " = " + std::to_string(static_cast<long>(tp) * pp * dp * cp) + ", but the plan has " +
        std::to_string(devices.size()) + " GPUs" +
        (root["devices"] ? " (devices)" : " (the whole cluster; set devices to use fewer)"));
  }
  p.uniform = true;
  p.tensor_parallel = tp;
  p.pipeline_parallel = pp;
  p.data_parallel = dp;
  p.global_batch_size = plan_int(file, root, "global_batch_size");
  if (p.global_batch_size % (p.micro_batch_size * dp) != 0) {
    throw InputError(where(file, root["global_batch_size"]) +
                     ": global_batch_size: " + std::to_string(p.global_batch_size) +
                     " is not divisible by micro_batch_size x "
                     "data_parallel = " +
                     std::to_string(p.micro_batch_size * dp));
  }
  const int m = static_cast<int>(p.global_batch_size / (p.micro_batch_size * dp));
  // Interleaved, the two virtual stages at the ends may hold no layer (only the embedding, only
  // the head); nothing else may be empty.
  if (model.layers < pp * v - (v > 1 ? 2 : 0)) {
    throw InputError(file + ": pipeline_parallel x interleave = " + std::to_string(pp * v) +
                     " exceeds the " + std::to_string(model.layers) + " layers" +
                     (v > 1 ? " by more than the two chunks that may hold only the embedding "
                              "and the head"
                            : ": a stage with no layers"));
  }
  const int group = p.microbatch_group > 0 ? p.microbatch_group : pp;
  if (group < pp) {
    // Fewer than one micro-batch per stage in a group: the first stage waits for the last
    // stage's output of a group it has not finished sending (the replay stalls, as Megatron would).
    throw InputError(where(file, root["microbatch_group"]) + ": microbatch_group: " +
                     std::to_string(group) + " is less than pipeline_parallel (" +
                     std::to_string(pp) + "); the interleaved schedule would stall");
  }
  if (p.schedule == Schedule::interleaved && m % group != 0) {
    throw InputError(file + ": schedule interleaved needs the micro-batches per replica (" +
                     std::to_string(m) + ") to be a multiple of " +
                     (p.microbatch_group > 0 ? "microbatch_group (" : "pipeline_parallel (") +
                     std::to_string(group) + ")");
  }
  // The work is known before the replicas are laid out: tp x dp ranks each run m micro-batches
  // over the whole model's layers, a pipeline stage's share of them each.
  check_work(file, static_cast<long>(tp) * dp * cp * m * model.layers);
  const auto [vlayers, vfirst] = virtual_stage_layers(root, file, model, pp, v);
  // Replica r = data-parallel rank x cp + context-parallel rank (tensor fastest, then context).
  const int replicas = dp * cp;
  for (int r = 0; r < replicas; ++r) {
    ReplicaPlan rep;
    rep.micro_batches = m;
    for (int s = 0; s < pp; ++s) {
      StagePlan st;
      st.first_layer = vfirst[s];
      for (int c = 0; c < v; ++c) {
        st.layers += vlayers[c * pp + s];
        if (v > 1) {
          st.chunk_layers.push_back(vlayers[c * pp + s]);
          st.chunk_first.push_back(vfirst[c * pp + s]);
        }
      }
      for (int t = 0; t < tp; ++t) st.devices.push_back(devices[t + tp * (r + replicas * s)]);
      check_stage(file + ": stage " + std::to_string(s), model, cluster, st);
      rep.stages.push_back(std::move(st));
    }
    p.replicas.push_back(std::move(rep));
  }
  check_plan(file, root, model, p);
  resolve_precision(file, root, cluster, p);
  return p;
}

}  // namespace

Plan load_plan_text(const std::string& text, const std::string& file, const ModelConfig& model,
                    const platform::Cluster& cluster, const PlanOptions& options) {
  YAML::Node root = config::load_yaml(text, file);
  if (!root.IsMap()) throw InputError(file + ": expected a map at the top level");
  for (const std::string& s : options.sets) {
    try {
      config::apply_override(root, s);
    } catch (const InputError& e) {
      throw InputError(file + ": " + e.what());
    }
  }
  if (model.convolutional()) return load_grid_plan(root, file, model, cluster);
  if (root["grid"] || root["split"]) {
    throw InputError(where(file, root["grid"] ? root["grid"] : root["split"]) + ": " +
                     (root["grid"] ? "grid" : "split") + ": applies to convolutional networks (" +
                     model.name +
                     " is a transformer: use tensor_parallel, pipeline_parallel, "
                     "data_parallel)");
  }
  config::check_keys(file, root, "", plan_key_names());
  Plan p;
  p.source = file;
  // The framework first: its defaults (bucket, ZeRO stage, gradient reduction) yield to the
  // plan's own keys.
  read_common(file, root, "megatron", p);
  read_training_keys(root, file, model, p);
  if (root["stages"]) return load_staged_plan(root, file, model, cluster, p);
  if (root["replicas"]) return load_replica_plan(root, file, model, cluster, p);
  return load_uniform_plan(root, file, model, cluster, p);
}

std::vector<SharedSamples> shared_samples(const Plan& plan, size_t stage) {
  const DataParallelStage& a = plan.dp_stages[stage];
  const DataParallelStage& b = plan.dp_stages[stage + 1];
  std::vector<SharedSamples> out;
  int64_t from_a = 0;
  for (size_t j = 0; j < a.groups.size(); ++j) {
    int64_t from_b = 0;
    for (size_t k = 0; k < b.groups.size(); ++k) {
      const int64_t lo = std::max(from_a, from_b);
      const int64_t hi = std::min(from_a + a.batch[j], from_b + b.batch[k]);
      if (hi > lo) out.push_back({j, k, hi - lo});
      from_b += b.batch[k];
    }
    from_a += a.batch[j];
  }
  return out;
}

bool Plan::asymmetric() const {
  for (size_t r = 1; r < replicas.size(); ++r) {
    const auto& a = replicas[0].stages;
    const auto& b = replicas[r].stages;
    if (a.size() != b.size()) return true;
    for (size_t s = 0; s < a.size(); ++s) {
      if (a[s].layers != b[s].layers || a[s].tensor_parallel() != b[s].tensor_parallel())
        return true;
    }
  }
  return false;
}

std::vector<int> layer_segments(const Plan& plan, int layers) {
  std::set<int> cuts{layers};
  for (const ReplicaPlan& r : plan.replicas)
    for (const StagePlan& st : r.stages) cuts.insert(st.first_layer);
  return {cuts.begin(), cuts.end()};
}

double boundary_activation_bytes(const ModelConfig& model, const Plan& plan) {
  return element_bytes(plan.precision) * static_cast<double>(plan.micro_batch_size) *
         (plan.sequence_length / plan.context_parallel) * model.hidden;
}

bool gathers_pipeline_slices(const Plan& plan, int tensor_parallel) {
  return tensor_parallel > 1 && !plan.sequence_parallel &&
         plan.framework.pipeline_gathers_forward + plan.framework.pipeline_gathers_backward > 0;
}

LayerShape stage_shape(const Plan& plan, int tensor_parallel, int64_t batch) {
  LayerShape shape;
  shape.micro_batch = batch > 0 ? batch : plan.micro_batch_size;
  shape.sequence = plan.sequence_length / plan.context_parallel;
  shape.context_parallel = plan.context_parallel;
  shape.tensor_parallel = tensor_parallel;
  shape.sequence_parallel = plan.sequence_parallel && tensor_parallel > 1;
  shape.kernels = plan.kernels;
  shape.flash_attention = plan.flash_attention;
  shape.precision = plan.precision;
  shape.eager = plan.framework.eager_kernels;
  shape.softmax = plan.framework.masked_softmax;
  // Autocast runs the matmuls in the plan's lower precision over fp32 parameters; an fp32 plan
  // trains without it (no casts: `hetsim compare` on a PyTorch CPU trace found them absent).
  shape.autocast =
      plan.framework.eager_kernels && plan.framework.autocast && plan.precision != Precision::fp32;
  shape.grad_accumulate = plan.framework.separate_grad_accumulation && !shape.autocast;
  return shape;
}

LayerShape moe_shape(LayerShape dense, const Plan& plan, double load) {
  dense.moe_layer = true;
  dense.expert_parallel = plan.expert_parallel;
  dense.experts_whole = plan.experts_whole();
  dense.expert_load = load;
  return dense;
}

std::vector<double> expert_loads(const ModelConfig& model, const Plan& plan) {
  std::vector<double> out(static_cast<size_t>(model.layers), 1.0);
  if (!model.moe()) return out;
  const int E = model.experts, ep = plan.expert_parallel, local = E / ep;
  const double cap = plan.capacity_factor > 0 ? plan.capacity_factor / E : 1.0;
  std::vector<double> pop(static_cast<size_t>(E));
  std::vector<int> order(static_cast<size_t>(E));
  for (int l = model.dense_layers; l < model.layers; ++l) {
    if (!model.is_moe(l)) continue;
    if (plan.routing_skew > 0) {
      // A Zipf law over a permutation of the experts drawn for this layer (Fisher-Yates on
      // splitmix64, so every platform draws the same).
      std::iota(order.begin(), order.end(), 0);
      uint64_t state =
          splitmix64(plan.routing_seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(l));
      for (int i = E - 1; i > 0; --i) {
        state = splitmix64(state);
        std::swap(order[static_cast<size_t>(i)],
                  order[static_cast<size_t>(state % static_cast<uint64_t>(i + 1))]);
      }
      double sum = 0;
      for (int i = 0; i < E; ++i) sum += std::pow(i + 1.0, -plan.routing_skew);
      for (int i = 0; i < E; ++i)
        pop[static_cast<size_t>(order[static_cast<size_t>(i)])] =
            std::pow(i + 1.0, -plan.routing_skew) / sum;
    } else {
      std::fill(pop.begin(), pop.end(), 1.0 / E);
    }
    // A token visits k distinct experts: none takes more than 1/k of the routed copies. The
    // excess of those above goes to the rest in proportion to their popularity.
    const double most_share = 1.0 / model.experts_per_token;
    for (int pass = 0; pass < E; ++pass) {
      double excess = 0, below = 0;
      for (double& x : pop) {
        if (x > most_share) {
          excess += x - most_share;
          x = most_share;
        } else if (x < most_share) {
          below += x;
        }
      }
      if (excess <= 1e-15 || below <= 0) break;
      for (double& x : pop)
        if (x < most_share) x += excess * x / below;
    }
    double most = 0;
    for (int q = 0; q < ep; ++q) {
      double load = 0;
      for (int e = q * local; e < (q + 1) * local; ++e)
        load += std::min(pop[static_cast<size_t>(e)], cap);
      most = std::max(most, load);
    }
    out[static_cast<size_t>(l)] = most * ep;
  }
  return out;
}

}  // namespace hetsim::workload
