// metis: GPU types ordered along the pipeline, stage device groups, a layer split balanced by
// stage capacity, data parallelism preferred over tensor parallelism inside a stage (Um et al.,
// "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs", USENIX ATC'24;
// ../shared/reference/policies.md section 5).
//
// Metis enumerates the order of GPU types along the pipeline (every permutation), the number of
// stages and each stage's device group, and the micro-batches; inside a stage it starts from
// data parallelism over the whole group and trades it for tensor parallelism only where memory
// runs out; its layer balancer gives each stage layers in proportion to its capacity (1 / its
// per-layer time, the slowest GPU type of the stage setting the pace). Its cost model is
// (M - 1) x the slowest stage + the sum of the stages + the data-parallel all-reduce over the
// group's slowest link + the transfers between stages.
//
// Where hetsim's version differs: stages are equal groups of GPUs with one data and tensor
// degree throughout (hetsim's plans cannot yet give each stage its own degrees, nor split a
// mixed-type stage's batch unevenly: issue 12's plan shapes), so a stage's groups follow the type
// order and a stage that mixes types runs at its slowest type's pace; the memory-driven step
// from data to tensor parallelism is left to the planner (every tensor degree is proposed, data
// parallel first, and the memory model drops what cannot fit); the layer balancer is exact (the
// split that minimises the slowest stage, amp_partition with the micro-batch count's weight),
// where Metis fills sub-layer units greedily and refines by swaps.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "sim/policy/policy.h"
#include "sim/workload/cost_model.h"
#include "sim/workload/plan.h"

namespace hetsim::policy {

namespace {

class Metis final : public Policy {
 public:
  const char* name() const override { return "metis"; }
  const char* summary() const override {
    return "GPU types ordered along the pipeline, layers by stage capacity (Metis)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    // GPUs of each type, in id order; the types in order of first appearance.
    std::vector<const config::GpuProfile*> types;
    std::map<const config::GpuProfile*, std::vector<platform::GpuId>> of_type;
    for (platform::GpuId g = 0; g < c.gpu_count(); ++g) {
      const config::GpuProfile* t = c.gpu(g).profile;
      if (of_type[t].empty()) types.push_back(t);
      of_type[t].push_back(g);
    }
    const workload::Precision precision = cluster_precision(c);
    const auto G = static_cast<int>(c.gpu_count());
    std::vector<size_t> perm(types.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    do {
      std::vector<platform::GpuId> order;
      std::string type_order;
      for (size_t i : perm) {
        order.insert(order.end(), of_type[types[i]].begin(), of_type[types[i]].end());
        type_order += (type_order.empty() ? "" : " > ") + types[i]->name;
      }
      for (int S = 1; S <= std::min(G, m.layers); S *= 2) {
        if (G % S != 0) continue;
        const int group = G / S;
        for (int tp : tensor_parallel_degrees(m, min_gpus_per_node(c))) {
          if (group % tp != 0) continue;
          const int dp = group / tp;
          if (r.global_batch % dp != 0) continue;
          for (int64_t mb : micro_batch_sizes(r.global_batch / dp)) {
            for (const char* recompute : {"none", "full"}) {
              if (auto p = candidate(r, order, type_order, precision, S, tp, dp, mb, recompute))
                out.push_back(std::move(*p));
            }
          }
        }
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
    return out;
  }

 private:
  std::optional<Proposal> candidate(const Request& r, const std::vector<platform::GpuId>& order,
                                    const std::string& type_order, workload::Precision precision,
                                    int S, int tp, int dp, int64_t mb,
                                    const char* recompute) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const int group = tp * dp;
    // A tensor-parallel group must sit in one node.
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < dp; ++i) {
        const size_t first = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
        for (int j = 1; j < tp; ++j) {
          if (c.gpu(order[first + j]).node != c.gpu(order[first]).node) return std::nullopt;
        }
      }
    }
    const int64_t M = r.global_batch / dp / mb;
    LayerProfiler profile(r, precision, tp, mb, std::string(recompute) == "full");
    // Per stage: the slowest type's per-layer time (its data-parallel ranks wait for it).
    std::vector<std::vector<double>> cost(S, std::vector<double>(m.layers));
    std::vector<double> fixed(S, 0.0);
    for (int s = 0; s < S; ++s) {
      double layer = 0, embedding = 0, head = 0;
      for (int i = 0; i < group; ++i) {
        const LayerProfiler::Times& t =
            profile.of(*c.gpu(order[static_cast<size_t>(s) * group + i]).profile);
        layer = std::max(layer, t.layer);
        embedding = std::max(embedding, t.embedding);
        head = std::max(head, t.head);
      }
      std::fill(cost[s].begin(), cost[s].end(), layer);
      if (s == 0) fixed[s] += embedding;
      if (s == S - 1) fixed[s] += head;
    }
    const std::vector<int> layers = amp_partition(cost, fixed, M);
    if (layers.empty()) return std::nullopt;
    // Metis' prediction: the pipeline, the gradient all-reduce of the largest stage over its
    // group's slowest link, the transfers between stages.
    const double e = workload::element_bytes(precision);
    double slowest = 0, sum = 0, allreduce = 0, transfers = 0;
    for (int s = 0, first = 0; s < S; ++s) {
      double t = fixed[s];
      for (int l = first; l < first + layers[s]; ++l) t += cost[s][l];
      slowest = std::max(slowest, t);
      sum += t;
      const double params = static_cast<double>(m.layer_params()) * layers[s] / tp +
                            (s == 0 ? static_cast<double>(m.embedding_params()) / tp : 0.0);
      if (dp > 1) {
        double bw = std::numeric_limits<double>::infinity();
        for (int i = 0; i + 1 < dp; ++i) {
          const size_t a = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
          bw = std::min(bw, c.route_capacity(c.route(order[a], order[a + tp])));
        }
        allreduce = std::max(allreduce, 2.0 * (dp - 1) / dp * e * params / bw);
      }
      if (s + 1 < S) {
        const size_t a = static_cast<size_t>(s) * group, b = a + group;
        transfers += e * static_cast<double>(mb) * r.sequence * m.hidden /
                     c.route_capacity(c.route(order[a], order[b]));
      }
      first += layers[s];
    }
    const double predicted = static_cast<double>(M - 1) * slowest + sum + allreduce + transfers;
    Proposal p;
    p.policy = name();
    std::string split;
    for (int l : layers) split += (split.empty() ? "" : "/") + std::to_string(l);
    p.label = fmt::format(
        "{}: {} stages x (dp {} x tp {}), mb {}, layers {}, recompute {} (Metis predicts {:.4g} s)",
        type_order, S, dp, tp, mb, split, recompute, predicted);
    std::vector<std::vector<std::vector<platform::GpuId>>> devices(dp);
    for (int i = 0; i < dp; ++i) {
      for (int s = 0; s < S; ++s) {
        const size_t a = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
        devices[i].emplace_back(order.begin() + a, order.begin() + a + tp);
      }
    }
    std::string plan = pipelines_plan(r, fmt::format("# {} policy: {}\n", name(), p.label), mb, M,
                                      recompute, tp, layers, devices);
    p.plan = std::move(plan);
    return p;
  }
};

}  // namespace

const Policy& metis_policy() {
  static const Metis p;
  return p;
}

}  // namespace hetsim::policy
