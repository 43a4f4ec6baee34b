// flashflex: asymmetric 3D parallelism (Yan et al., "FlashFlex: Accommodating Large Language
// Model Training over Heterogeneous Environment", arXiv 2409.01143, v2 "HexiScale";
// ../shared/reference/policies.md section 7).
//
// FlashFlex lets every pipeline have its own stages, batch and micro-batch count, and every stage
// its own tensor-parallel degree and layer count. It allocates by hierarchical graph
// partitioning: first the GPUs into pipelines of balanced compute, then each pipeline's GPUs into
// stages and tensor-parallel groups. Its cost model is analytic on peak FLOP/s: per layer and
// micro-batch 72 MB S H^2 (1 + S / 6H + V / 16LH) / (TFLOPS x tp) of compute, 8 MB S H bytes /
// (tp bw) of tensor-parallel traffic, the pipeline's GPipe cost, and the gradient all-reduce
// 2 x 12 H^2 bytes / (tp_min dp bw) per layer; total max_pipeline x 1.8 + DP x 1.1.
//
// hetsim's version: the units it partitions are tensor-parallel-sized groups of consecutive GPUs
// inside a node (every node size halved down to one GPU); pipelines are formed by balancing the
// units' datasheet FLOP/s (longest processing time first: the heaviest unit to the lightest
// pipeline), for 1 to 8 pipelines; each GPU type gets its own tensor-parallel degree (every
// combination that divides the unit); a pipeline's stages keep the cluster's order (neighbours in
// a node stay neighbours); the layers of each pipeline are split by AMP's programme over the
// stages' profiled layer times plus FlashFlex's tensor-parallel term, and the micro-batches in
// proportion to each pipeline's speed. The graph partitioner's bandwidth-aware cuts (METIS over
// the link graph) are replaced by these node-aligned units; FlashFlex's prediction is printed in
// each label, and hetsim's replay judges the plans.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sim/policy/policy.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

struct Stage {
  std::vector<platform::GpuId> devices;
  const config::GpuProfile* gpu = nullptr;
};

class FlashFlex final : public Policy {
 public:
  const char* name() const override { return "flashflex"; }
  const char* summary() const override {
    return "asymmetric pipelines: balanced GPU groups, each with its own stages, tensor degrees, "
           "layers and batch (FlashFlex)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const workload::Precision precision = cluster_precision(c);
    const auto types = gpu_types(c);
    std::set<std::string> seen;  // plans (without their label) proposed already
    for (int u = min_gpus_per_node(c); u >= 1; u /= 2) {
      const auto units = node_groups(c, u);
      // The tensor-parallel degree of each GPU type: every combination of those dividing u.
      const std::vector<int> degrees = tensor_parallel_degrees(m, u);
      std::vector<size_t> pick(types.size(), 0);
      while (true) {
        // By the type's name: a stable key, not the profile's address (the map is only looked
        // up; the label takes the types in gpu_types' order).
        std::map<std::string, int> tp;
        bool divides = true;
        for (size_t i = 0; i < types.size(); ++i) {
          tp[types[i]->name] = degrees[pick[i]];
          divides = divides && u % degrees[pick[i]] == 0;
        }
        for (size_t D = 1; divides && D <= std::min<size_t>(8, units.size()); D *= 2) {
          const auto pipelines = partition(c, units, D, tp);
          if (pipelines.empty()) continue;
          for (int64_t mb = 1; mb <= 8; mb *= 2) {
            if (r.global_batch % mb != 0) continue;
            const int64_t total = r.global_batch / mb;
            if (total < static_cast<int64_t>(D)) continue;
            for (const char* recompute : {"none", "full"}) {
              auto p = candidate(r, precision, pipelines, tp, mb, total, recompute);
              if (!p || !seen.insert(p->plan.substr(p->plan.find('\n'))).second) continue;
              out.push_back(std::move(*p));
            }
          }
        }
        size_t i = 0;  // next combination
        while (i < pick.size() && ++pick[i] == degrees.size()) pick[i++] = 0;
        if (i == pick.size()) break;
      }
      if (u == 1) break;
    }
    return out;
  }

 private:
  // D pipelines of units balanced by FLOP/s, each split into stages of its type's degree; empty
  // when D pipelines cannot be formed.
  static std::vector<std::vector<Stage>> partition(
      const platform::Cluster& c, const std::vector<std::vector<platform::GpuId>>& units, size_t D,
      const std::map<std::string, int>& tp) {
    const workload::Precision p = cluster_precision(c);
    std::vector<size_t> order(units.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto flops = [&](size_t i) {
      return workload::peak_flops(*c.gpu(units[i].front()).profile, p) *
             static_cast<double>(units[i].size());
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return flops(a) > flops(b); });
    std::vector<double> load(D, 0.0);
    std::vector<std::vector<size_t>> members(D);
    for (size_t i : order) {
      const size_t k =
          static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[k] += flops(i);
      members[k].push_back(i);
    }
    std::vector<std::vector<Stage>> out(D);
    for (size_t k = 0; k < D; ++k) {
      if (members[k].empty()) return {};
      std::sort(members[k].begin(), members[k].end());  // the cluster's order
      for (size_t i : members[k]) {
        const config::GpuProfile* gpu = c.gpu(units[i].front()).profile;
        const size_t t = static_cast<size_t>(tp.at(gpu->name));
        for (size_t a = 0; a < units[i].size(); a += t) {
          out[k].push_back(Stage{{units[i].begin() + static_cast<long>(a),
                                  units[i].begin() + static_cast<long>(a + t)},
                                 gpu});
        }
      }
    }
    return out;
  }

  std::optional<Proposal> candidate(const Request& r, workload::Precision precision,
                                    const std::vector<std::vector<Stage>>& pipelines,
                                    const std::map<std::string, int>& tp, int64_t mb, int64_t total,
                                    const char* recompute) const {
    const workload::ModelConfig& m = *r.model;
    const platform::Cluster& c = *r.cluster;
    const bool full = std::string(recompute) == "full";
    const size_t D = pipelines.size();
    for (const auto& stages : pipelines)
      if (static_cast<int>(stages.size()) > m.layers) return std::nullopt;
    std::map<int, LayerProfiler> profilers;
    auto profile = [&](int t) -> LayerProfiler& {
      auto it = profilers.find(t);
      if (it == profilers.end()) it = profilers.try_emplace(t, r, precision, t, mb, full).first;
      return it->second;
    };
    const double e = workload::element_bytes(precision);
    const double activation = e * static_cast<double>(mb) * r.sequence * m.hidden;
    // Per pipeline and stage: a layer's time (kernels, and FlashFlex's tensor-parallel term
    // over the group's link, forward and backward) and the embedding's or head's.
    std::vector<PipelineCosts> costs(D);
    for (size_t k = 0; k < D; ++k) {
      const size_t S = pipelines[k].size();
      costs[k].fixed.assign(S, 0.0);
      for (size_t s = 0; s < S; ++s) {
        const Stage& st = pipelines[k][s];
        const int t = static_cast<int>(st.devices.size());
        const LayerProfiler::Times& times = profile(t).of(*st.gpu);
        double comm = 0;
        if (t > 1) {
          const double bw = c.route_capacity(c.route(st.devices[0], st.devices[1]));
          comm = (full ? 12.0 : 8.0) * activation / (t * bw);
        }
        costs[k].cost.emplace_back(m.layers, times.layer + comm);
        if (s == 0) costs[k].fixed[s] += times.embedding;
        if (s + 1 == S) costs[k].fixed[s] += times.head;
      }
    }
    const std::vector<int64_t> shares = speed_shares(costs, total);
    if (shares.empty()) return std::nullopt;
    // FlashFlex's prediction: the slowest pipeline x 1.8, the gradient all-reduce x 1.1 (over
    // the slowest link between the pipelines' first GPUs, at the narrowest degree).
    double slowest_pipeline = 0;
    bool sequence_parallel = false;
    int tp_min = std::numeric_limits<int>::max();
    std::string replicas, splits;
    for (size_t k = 0; k < D; ++k) {
      const PipelineSplit cut = split_pipeline(costs[k], shares[k]);
      const std::vector<int>& layers = cut.layers;
      slowest_pipeline = std::max(slowest_pipeline, cut.time);
      replicas += fmt::format("  - micro_batches: {}\n    stages:\n", shares[k]);
      std::string split;
      for (size_t s = 0; s < layers.size(); ++s) {
        const auto& d = pipelines[k][s].devices;
        std::string list;
        for (platform::GpuId g : d) list += (list.empty() ? "" : ", ") + std::to_string(g);
        replicas += fmt::format("      - {{layers: {}, tensor_parallel: {}, devices: [{}]}}\n",
                                layers[s], d.size(), list);
        split += fmt::format("{}{}x{}", split.empty() ? "" : "/", layers[s], d.size());
        sequence_parallel = sequence_parallel || d.size() > 1;
        tp_min = std::min(tp_min, static_cast<int>(d.size()));
      }
      splits += (splits.empty() ? "" : ", ") + split;
    }
    double dp = 0;
    if (D > 1) {
      double bw = std::numeric_limits<double>::infinity();
      for (size_t k = 0; k + 1 < D; ++k) {
        bw = std::min(bw, c.route_capacity(c.route(pipelines[k].front().devices.front(),
                                                   pipelines[k + 1].front().devices.front())));
      }
      dp = m.layers * 2.0 * 12.0 * m.hidden * static_cast<double>(m.hidden) * e /
           (tp_min * static_cast<double>(D) * bw);
    }
    const double predicted = 1.8 * slowest_pipeline + 1.1 * dp;
    std::string share_list, degrees;
    for (int64_t s : shares) share_list += (share_list.empty() ? "" : "/") + std::to_string(s);
    // The types in the cluster's order of first appearance (not the map's, which is by name).
    for (const config::GpuProfile* gpu : gpu_types(*r.cluster))
      degrees +=
          fmt::format("{}{} tp {}", degrees.empty() ? "" : ", ", gpu->name, tp.at(gpu->name));
    Proposal p;
    p.policy = name();
    p.label = fmt::format(
        "{} pipelines ({}), mb {}, micro-batches {}, layers x tp {}, recompute {} (FlashFlex "
        "predicts {:.4g} s)",
        D, degrees, mb, share_list, splits, recompute, predicted);
    p.plan = fmt::format("# {} policy: {}\n", name(), p.label) +
             fmt::format(
                 "micro_batch_size: {}\nsequence_length: {}\nrecompute: {}\nschedule: 1f1b\n"
                 "sequence_parallel: {}\n",
                 mb, r.sequence, recompute, sequence_parallel_value(r, sequence_parallel));
    if (!r.framework.empty()) p.plan += "framework: " + r.framework + "\n";
    p.plan += "replicas:\n" + replicas;
    return p;
  }
};

}  // namespace

const Policy& flashflex_policy() {
  static const FlashFlex p;
  return p;
}

}  // namespace hetsim::policy
