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
// Where hetsim's version differs: Whale's memory-constrained greedy step (move load off a GPU
// over its memory) has nothing to move here, since with gradient accumulation a replica's peak
// memory does not grow with its share (one micro-batch in flight); plans that still do not fit
// are dropped by the planner's memory check. Its pipeline-level balancing (layers by stage
// capacity) needs plans with per-replica stage layouts: not proposed yet.
#include <fmt/format.h>

#include <algorithm>

#include "sim/policy/policy.h"
#include "sim/workload/cost_model.h"
#include "sim/workload/plan.h"

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
    return out;
  }
};

}  // namespace

const Policy& whale_policy() {
  static const Whale p;
  return p;
}

}  // namespace hetsim::policy
