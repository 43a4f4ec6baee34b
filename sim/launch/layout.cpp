// What every launcher needs from a plan: one set of degrees and batch figures, the layer split and
// the rank order, with the lines that say where a heterogeneous plan cannot be followed.
#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "sim/launch/launcher.h"

namespace hetsim::launch {

namespace {

std::string join(const std::vector<uint32_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::string split_text(const std::vector<int>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) s += (i ? "/" : "") + std::to_string(layers[i]);
  return s;
}

void add_megatron_only(const Target& t, std::vector<std::string>& unsupported) {
  if (t.plan->context_parallel > 1) {
    unsupported.push_back("context parallel " + std::to_string(t.plan->context_parallel) +
                          ": exported for Megatron-LM only (--framework megatron); here the "
                          "context-parallel ranks run as data-parallel ones");
  }
  if (t.model->moe()) {
    unsupported.push_back("mixture of experts (expert_parallel " +
                          std::to_string(t.plan->expert_parallel) +
                          "): exported for Megatron-LM only (--framework megatron); here the "
                          "experts are left out of the launch");
  }
}

Layout uniform_layout(const Target& t, const std::string& framework) {
  const workload::Plan& p = *t.plan;
  const auto& reps = p.replicas;
  const workload::ReplicaPlan& r0 = reps.front();
  Layout l;
  l.tp = r0.stages.front().tensor_parallel();
  l.pp = static_cast<int>(r0.stages.size());
  l.dp = static_cast<int>(reps.size());
  l.interleave = p.interleave;
  l.micro_batch = p.micro_batch_size;
  bool same_shape = true;
  for (size_t r = 0; r < reps.size(); ++r) {
    const std::string rn = "replica " + std::to_string(r);
    const auto& stages = reps[r].stages;
    if (stages.size() != r0.stages.size()) {
      same_shape = false;
      l.unsupported.push_back(rn + " has " + std::to_string(stages.size()) +
                              " stages where replica 0 has " + std::to_string(r0.stages.size()) +
                              ": " + framework + " needs one pipeline degree");
    }
    for (size_t s = 0; s < stages.size(); ++s) {
      // Replica 0's stages against its first; every other replica's against replica 0's.
      const bool first = r == 0;
      if (!first && s >= r0.stages.size()) break;
      const workload::StagePlan& ref = first ? r0.stages.front() : r0.stages[s];
      const std::string sn =
          first ? "stage " + std::to_string(s) : rn + " stage " + std::to_string(s);
      const std::string refn = first ? "stage 0" : "replica 0's";
      if (stages[s].tensor_parallel() != ref.tensor_parallel()) {
        same_shape = false;
        l.unsupported.push_back(sn + " has tensor parallel " +
                                std::to_string(stages[s].tensor_parallel()) + " where " + refn +
                                " has " + std::to_string(ref.tensor_parallel()) + ": " + framework +
                                " needs one tensor-parallel degree");
      }
      if (!first && stages[s].layers != ref.layers) {
        l.unsupported.push_back(sn + " holds " + std::to_string(stages[s].layers) +
                                " layers where replica 0's holds " + std::to_string(ref.layers) +
                                ": " + framework +
                                " splits the layers the same way in every replica");
      }
    }
    if (reps[r].micro_batches != r0.micro_batches) {
      l.unsupported.push_back(rn + " runs " + std::to_string(reps[r].micro_batches) +
                              " micro-batches where replica 0 runs " +
                              std::to_string(r0.micro_batches) + ": " + framework +
                              " gives every data-parallel replica the same share of the batch");
    }
  }
  for (size_t s = 0; s < p.dp_stages.size(); ++s) {
    const workload::DataParallelStage& ds = p.dp_stages[s];
    const size_t dp0 = p.dp_stages[0].groups.size();
    bool even = true;
    for (size_t j = 0; j < ds.groups.size(); ++j) {
      even = even && ds.groups[j].tensor_parallel() == l.tp && ds.batch[j] == ds.batch[0];
    }
    if (ds.groups.size() == dp0 && even) continue;
    same_shape = false;
    const std::string why =
        ": " + framework +
        " runs one data-parallel degree, tensor-parallel degree and batch share throughout (the "
        "activations are not re-sharded between stages)";
    if (s == 0) {
      l.unsupported.push_back(
          "stage 0's data-parallel groups differ in tensor-parallel degree or "
          "batch share" +
          why);
    } else {
      l.unsupported.push_back(fmt::format(
          "stage {} holds {} data-parallel groups{} where stage 0 holds {} of tensor parallel {}{}",
          s, ds.groups.size(), even ? "" : " of other tensor-parallel degrees or batch shares", dp0,
          l.tp, why));
    }
  }
  if (p.staged()) {
    l.dp = static_cast<int>(p.dp_stages[0].groups.size());
    l.micro_batch = p.dp_stages[0].batch[0];
  }
  long total = 0;
  for (const auto& r : reps) total += r.micro_batches;
  l.micro_batches = std::max(1, static_cast<int>(std::lround(static_cast<double>(total) / l.dp)));
  if (p.staged()) l.micro_batches = reps.front().micro_batches;  // every group runs them all
  l.cp = p.context_parallel;
  l.global_batch = l.micro_batches * l.micro_batch * (l.dp / l.cp);
  for (int c = 0; c < l.interleave; ++c) {
    for (int s = 0; s < l.pp; ++s) l.stage_layers.push_back(r0.stages[s].layers_of(c));
  }
  if (same_shape) {
    l.ranks.resize(static_cast<size_t>(l.tp) * l.pp * l.dp);
    for (int s = 0; s < l.pp; ++s) {
      for (int r = 0; r < l.dp; ++r) {
        for (int k = 0; k < l.tp; ++k) {
          l.ranks[k + static_cast<size_t>(l.tp) * (r + l.dp * s)] =
              p.stage_plan(static_cast<size_t>(r), static_cast<size_t>(s)).devices[k];
        }
      }
    }
  }
  return l;
}

std::pair<int, int> place_ranks(const Target& t, const Layout& layout, const std::string& framework,
                                Launch& l) {
  const platform::Cluster& c = *t.cluster;
  const int world = layout.tp * layout.pp * layout.dp;
  // Without a rank order (the approximation of a plan whose stages differ in shape): the
  // cluster's first nodes, in order.
  const int first_node_gpus = static_cast<int>(c.node(0).gpu_count);
  const int fallback_per_node = std::min(world, first_node_gpus);
  const std::pair<int, int> fallback{(world + fallback_per_node - 1) / fallback_per_node,
                                     fallback_per_node};
  if (layout.ranks.empty()) return fallback;
  // Runs of consecutive ranks on one node.
  std::vector<uint32_t> run_node;
  std::vector<std::vector<uint32_t>> run_gpus;
  for (platform::GpuId g : layout.ranks) {
    const platform::Gpu& gpu = c.gpu(g);
    if (run_node.empty() || run_node.back() != gpu.node) {
      run_node.push_back(gpu.node);
      run_gpus.emplace_back();
    }
    run_gpus.back().push_back(gpu.local);
  }
  bool placeable = true;
  for (size_t i = 0; i < run_node.size(); ++i) {
    placeable = placeable && run_gpus[i].size() == run_gpus[0].size();
    for (size_t j = 0; j < i; ++j) placeable = placeable && run_node[j] != run_node[i];
  }
  if (!placeable) {
    std::string runs;
    for (size_t i = 0; i < run_node.size() && i < 8; ++i) {
      runs += std::string(i ? ", " : "") + "node" + std::to_string(run_node[i]) + " x" +
              std::to_string(run_gpus[i].size());
    }
    if (run_node.size() > 8) runs += ", ...";
    l.unsupported.push_back(
        "the plan's rank order (" + runs + ") " +
        "does not give each node one block of equally many consecutive ranks: " + framework +
        "'s launcher starts the same number of ranks on every node, node by node");
    return fallback;
  }
  const int per_node = static_cast<int>(run_gpus[0].size());
  bool default_order = true;
  bool same_gpus = true;
  for (size_t i = 0; i < run_node.size(); ++i) {
    default_order = default_order && run_node[i] == i;
    same_gpus = same_gpus && run_gpus[i] == run_gpus[0];
    for (int k = 0; k < per_node; ++k) {
      default_order = default_order && run_gpus[i][k] == static_cast<uint32_t>(k);
    }
  }
  if (!default_order) {
    for (size_t i = 0; i < run_node.size(); ++i) {
      l.hosts.push_back({"node" + std::to_string(run_node[i]), run_gpus[i]});
    }
    std::vector<uint32_t> identity(per_node);
    std::iota(identity.begin(), identity.end(), 0);
    if (same_gpus && run_gpus[0] != identity) {
      l.env.emplace_back("CUDA_VISIBLE_DEVICES", join(run_gpus[0], ","));
    }
  }
  return {static_cast<int>(run_node.size()), per_node};
}

std::string approximation_text(const Layout& layout, int64_t plan_global_batch) {
  std::string s = "closest uniform plan: tensor parallel " + std::to_string(layout.tp) +
                  ", pipeline parallel " + std::to_string(layout.pp) + ", data parallel " +
                  std::to_string(layout.dp) + " (" +
                  std::to_string(layout.tp * layout.pp * layout.dp) + " GPUs)";
  if (layout.interleave > 1) s += ", interleave " + std::to_string(layout.interleave);
  s += ", " + std::to_string(layout.micro_batches) +
       (layout.micro_batches == 1 ? " micro-batch of " : " micro-batches of ") +
       std::to_string(layout.micro_batch) + " per replica (global batch " +
       std::to_string(layout.global_batch) +
       (layout.global_batch != plan_global_batch
            ? " where the plan's is " + std::to_string(plan_global_batch)
            : std::string()) +
       ")";
  return s;
}

}  // namespace hetsim::launch
