// whale: hardware-aware data parallelism (Jia et al., "Whale: Efficient Giant Model Training
// over Heterogeneous GPUs", USENIX ATC'22; ../shared/reference/policies.md section 1).
//
// Decides each data-parallel replica's share of the batch in proportion to its compute capacity,
// B_i = B C_i / sum_j C_j, with C_i the replica's GPUs' datasheet FLOP/s at the training
// precision (Whale's "GPU FLOPS"; its alternative, profiled throughput, is what the replay then
// measures). Replicas are tensor-parallel groups inside a node, every one of the same degree (the
// plan format all-reduces gradients stage by stage, so the replicas' stages must match), for each
// degree that divides the heads and the smallest node; micro-batch sizes and recompute as the
// other policies. Shares are whole micro-batches (largest remainder, at least one each).
// With pipelines (Whale's intra-TaskGraph balancing), the layers are shared over the stages in
// proportion to each stage's capacity instead (the slowest replica's copy of the stage, as all
// replicas run the same split), and then Whale's memory-constrained step: while a stage's GPUs
// do not fit, a layer moves off the fullest of them to the stage with the most memory left.
// Stages take node-aligned tensor-parallel groups in Megatron-LM's rank order (so on clusters
// whose GPU types lie in id order, stages take the types in turn).
//
// Where hetsim's version differs: in pure data parallelism the memory step has nothing to move,
// since with gradient accumulation a replica's peak memory does not grow with its share (one
// micro-batch in flight); plans that still do not fit are dropped by the planner's memory check.
#include <fmt/format.h>

#include <algorithm>

#include "sim/core/error.h"
#include "sim/policy/policy.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

class Whale final : public Policy {
 public:
  const char* name() const override { return "whale"; }
  const char* summary() const override {
    return "data-parallel batch shares in proportion to GPU FLOP/s (Whale)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    const platform::Cluster& c = *r.cluster;
    const workload::Precision precision = cluster_precision(c);  // the plan's default
    for (int tp : tensor_parallel_degrees(*r.model, min_gpus_per_node(c))) {
      const auto groups = node_groups(c, tp);
      if (groups.size() < 2) continue;
      std::vector<double> capacity;
      double sum = 0;
      for (const auto& g : groups) {
        double flops = 0;
        for (platform::GpuId d : g) flops += workload::peak_flops(*c.gpu(d).profile, precision);
        capacity.push_back(flops);
        sum += flops;
      }
      for (int64_t mb = 1; mb <= 16; mb *= 2) {
        if (r.global_batch % mb != 0) continue;
        const int64_t total = r.global_batch / mb;
        if (total < static_cast<int64_t>(groups.size())) continue;
        std::vector<double> exact;
        for (double f : capacity) exact.push_back(static_cast<double>(total) * f / sum);
        const std::vector<int64_t> shares = whole_shares(total, exact);
        for (const char* recompute : {"none", "full"}) {
          Proposal p;
          p.policy = name();
          p.label =
              fmt::format("dp {} x tp {}, micro-batch {}, shares {}..{} by FLOP/s, recompute {}",
                          groups.size(), tp, mb, *std::min_element(shares.begin(), shares.end()),
                          *std::max_element(shares.begin(), shares.end()), recompute);
          p.plan = replicas_plan(r, fmt::format("# {} policy: {}\n", name(), p.label), mb,
                                 recompute, tp, groups, shares);
          out.push_back(std::move(p));
        }
      }
    }
    // Pipelines where the GPUs differ (on one type the split is even: megatron's plans).
    if (gpu_types(c).size() > 1) pipelines(r, precision, out);
    return out;
  }

 private:
  // Pipelines: layers by stage capacity, then moved off stages over their memory.
  void pipelines(const Request& r, workload::Precision precision,
                 std::vector<Proposal>& out) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const std::string sets = plan_set_lines(r.plan_sets);
    for (int tp : tensor_parallel_degrees(m, min_gpus_per_node(c))) {
      const auto groups = node_groups(c, tp);
      const auto n = static_cast<int>(groups.size());
      for (int S = 2; S <= std::min(n, m.layers); S *= 2) {
        if (n % S != 0) continue;
        const int R = n / S;
        if (r.global_batch % R != 0) continue;
        // Stage s of replica q: group s x R + q; a stage's capacity is its slowest copy's.
        std::vector<double> capacity(static_cast<size_t>(S), 0.0);
        std::vector<std::vector<std::vector<platform::GpuId>>> devices(static_cast<size_t>(R));
        double sum = 0;
        for (int s = 0; s < S; ++s) {
          double least = 0;
          for (int q = 0; q < R; ++q) {
            const auto& g = groups[static_cast<size_t>(s * R + q)];
            devices[static_cast<size_t>(q)].push_back(g);
            double flops = 0;
            for (platform::GpuId d : g) flops += workload::peak_flops(*c.gpu(d).profile, precision);
            least = q == 0 ? flops : std::min(least, flops);
          }
          capacity[static_cast<size_t>(s)] = least;
          sum += least;
        }
        std::vector<double> exact;
        for (double f : capacity) exact.push_back(static_cast<double>(m.layers) * f / sum);
        const std::vector<int64_t> by_capacity = whole_shares(m.layers, exact);
        for (int64_t mb : micro_batch_sizes(r.global_batch / R)) {
          const int64_t M = r.global_batch / R / mb;
          for (const char* recompute : {"none", "full"}) {
            std::vector<int> layers(by_capacity.begin(), by_capacity.end());
            int moved = 0;
            std::string plan;
            for (;;) {
              plan = pipelines_plan(r, "", mb, M, recompute, tp, layers, devices);
              // The fullest stage over its memory, and the stage with the most memory left (a
              // stage's fill and room are its fullest copy's).
              std::vector<StageMemory> mem;
              try {
                mem = stage_memory(m, workload::load_plan_text(plan + sets, "whale", m, c), c);
              } catch (const InputError&) {
                break;  // the planner says why
              }
              int fullest = -1, roomiest = -1;
              double worst = 1, most = 0;
              for (int st = 0; st < S; ++st) {
                if (mem[static_cast<size_t>(st)].fill > worst) {
                  worst = mem[static_cast<size_t>(st)].fill;
                  fullest = st;
                }
                if (mem[static_cast<size_t>(st)].room > most) {
                  most = mem[static_cast<size_t>(st)].room;
                  roomiest = st;
                }
              }
              if (fullest < 0) break;  // every stage fits
              if (roomiest < 0 || roomiest == fullest ||
                  layers[static_cast<size_t>(fullest)] <= 1 || moved >= m.layers) {
                break;  // nothing can move: the planner drops it
              }
              --layers[static_cast<size_t>(fullest)];
              ++layers[static_cast<size_t>(roomiest)];
              ++moved;
            }
            std::string split;
            for (int l : layers) split += (split.empty() ? "" : "/") + std::to_string(l);
            Proposal p;
            p.policy = name();
            p.label = fmt::format(
                "pp {} x dp {} x tp {}, layers {} by FLOP/s{}, micro-batch {}, recompute {}", S, R,
                tp, split, moved > 0 ? fmt::format(" ({} moved for memory)", moved) : "", mb,
                recompute);
            p.plan = fmt::format("# {} policy: {}\n", name(), p.label) + plan;
            out.push_back(std::move(p));
          }
        }
      }
    }
  }
};

}  // namespace

const Policy& whale_policy() {
  static const Whale p;
  return p;
}

}  // namespace hetsim::policy
