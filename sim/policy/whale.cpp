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
#include <cmath>
#include <map>
#include <numeric>

#include "sim/policy/policy.h"
#include "sim/workload/cost_model.h"

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
    // The precision the plan will default to: bf16 where every GPU has it, else fp16.
    bool all_bf16 = true;
    for (platform::GpuId g = 0; g < c.gpu_count(); ++g) {
      all_bf16 = all_bf16 && workload::has_precision(*c.gpu(g).profile, workload::Precision::bf16);
    }
    const workload::Precision precision =
        all_bf16 ? workload::Precision::bf16 : workload::Precision::fp16;
    // GPUs by node, in id order.
    std::map<uint32_t, std::vector<platform::GpuId>> nodes;
    for (platform::GpuId g = 0; g < c.gpu_count(); ++g) nodes[c.gpu(g).node].push_back(g);
    for (int tp : tensor_parallel_degrees(*r.model, min_gpus_per_node(c))) {
      std::vector<std::vector<platform::GpuId>> groups;
      for (const auto& [node, gpus] : nodes) {
        for (size_t i = 0; i + tp <= gpus.size(); i += tp) {
          groups.emplace_back(gpus.begin() + i, gpus.begin() + i + tp);
        }
      }
      if (groups.size() < 2) continue;
      std::vector<double> capacity;
      for (const auto& g : groups) {
        double sum = 0;
        for (platform::GpuId d : g) sum += workload::peak_flops(*c.gpu(d).profile, precision);
        capacity.push_back(sum);
      }
      for (int64_t mb = 1; mb <= 16; mb *= 2) {
        if (r.global_batch % mb != 0) continue;
        const int64_t total = r.global_batch / mb;
        if (total < static_cast<int64_t>(groups.size())) continue;
        const std::vector<int64_t> shares = proportional_shares(total, capacity);
        for (const char* recompute : {"none", "full"}) {
          Proposal p;
          p.policy = name();
          p.label =
              fmt::format("dp {} x tp {}, micro-batch {}, shares {}..{} by FLOP/s, recompute {}",
                          groups.size(), tp, mb, *std::min_element(shares.begin(), shares.end()),
                          *std::max_element(shares.begin(), shares.end()), recompute);
          p.plan = fmt::format(
              "# {} policy: {}\nmicro_batch_size: {}\nsequence_length: {}\nrecompute: {}\n"
              "sequence_parallel: {}\n",
              name(), p.label, mb, r.sequence, recompute, tp > 1 ? "true" : "false");
          if (!r.framework.empty()) p.plan += "framework: " + r.framework + "\n";
          p.plan += "replicas:\n";
          for (size_t i = 0; i < groups.size(); ++i) {
            p.plan += fmt::format(
                "  - micro_batches: {}   # {:.0f} TFLOP/s\n    stages:\n"
                "      - {{layers: {}, tensor_parallel: {}, devices: \"{}-{}\"}}\n",
                shares[i], capacity[i] / 1e12, r.model->layers, tp, groups[i].front(),
                groups[i].back());
          }
          out.push_back(std::move(p));
        }
      }
    }
    return out;
  }

  // `total` whole units in proportion to `weight`, at least one each (largest remainder).
  static std::vector<int64_t> proportional_shares(int64_t total,
                                                  const std::vector<double>& weight) {
    const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
    const int64_t n = static_cast<int64_t>(weight.size());
    std::vector<int64_t> share(n, 1);
    const int64_t rest = total - n;
    std::vector<double> exact(n);
    int64_t given = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact[i] = static_cast<double>(total) * weight[i] / sum - 1;
      const int64_t whole = std::max<int64_t>(0, static_cast<int64_t>(exact[i]));
      share[i] += whole;
      given += whole;
    }
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return exact[a] - std::floor(exact[a]) > exact[b] - std::floor(exact[b]);
    });
    for (int64_t k = 0; given < rest; k = (k + 1) % n) {
      ++share[order[k]];
      ++given;
    }
    for (int64_t k = n - 1; given > rest; k = (k + n - 1) % n) {
      if (share[order[k]] > 1) {
        --share[order[k]];
        --given;
      }
    }
    return share;
  }
};

}  // namespace

const Policy& whale_policy() {
  static const Whale p;
  return p;
}

}  // namespace hetsim::policy
