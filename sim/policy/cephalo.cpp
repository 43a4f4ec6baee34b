// cephalo: sharded data parallelism with compute and training state decoupled (Guo, Anand, Chen,
// Daudjee, "Cephalo: Harnessing Heterogeneous GPU Clusters for Training Transformer Models",
// ICS'25, arXiv 2411.01075; ../shared/reference/policies.md section 3).
//
// Cephalo trains with FSDP (the parameters, gradients and optimizer state sharded over every
// GPU) and decides two things per GPU: its share of the batch (compute, through gradient
// accumulation) and its share of the training state, which prior systems tie together; a GPU
// with much compute and little memory takes a large batch share and a small state share. Its
// layered gradient accumulation runs every micro-batch through a layer before the next, so each
// layer is gathered and its gradients reduce-scattered once per iteration, not once per
// micro-batch. Its optimizer minimises the slowest GPU's compute plus the collectives subject to
// every GPU's memory.
//
// hetsim's version: replicas are tensor-parallel groups inside a node (every degree the model
// allows; Cephalo itself has none), micro-batches in proportion to each group's speed (its
// profiled layer, embedding and head time per micro-batch), state shares in proportion to the
// memory each group has left after its activations (all of its micro-batches', as layered
// accumulation keeps them) and the framework's reservation, for micro-batch sizes 1 to 8 and
// recompute none or full. The paper's solver (a DP or MILP, not verified) is replaced by these
// two closed forms: compute shares that equalise the groups' compute, state shares that leave
// every group the same fraction of its memory free. Collectives with uneven shards are replayed
// as even ones of the same total (a ring moves the same bytes either way).
#include <fmt/format.h>

#include <algorithm>

#include "sim/policy/policy.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

class Cephalo final : public Policy {
 public:
  const char* name() const override { return "cephalo"; }
  const char* summary() const override {
    return "FSDP with batch shares by speed and state shares by free memory, layered gradient "
           "accumulation (Cephalo)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const workload::Precision precision = cluster_precision(c);
    const std::string framework = r.framework.empty() ? "pytorch-fsdp" : r.framework;
    const double reserved = workload::load_framework(framework).reserved_memory;
    const double e = workload::element_bytes(precision);
    // The whole training state per rank of a tensor-parallel degree: weights, fp32 gradients,
    // fp32 master weights and Adam's two moments.
    const double params =
        static_cast<double>(m.layers) * m.layer_params() + m.embedding_params() + m.output_params();
    for (int tp : tensor_parallel_degrees(m, min_gpus_per_node(c))) {
      const auto groups = node_groups(c, tp);
      if (groups.size() < 2) continue;
      const double state = params / tp * (e + 4 + 4 + 8);
      for (int64_t mb = 1; mb <= 8; mb *= 2) {
        if (r.global_batch % mb != 0) continue;
        const int64_t total = r.global_batch / mb;
        if (total < static_cast<int64_t>(groups.size())) continue;
        for (const char* recompute : {"none", "full"}) {
          const bool full = std::string(recompute) == "full";
          LayerProfiler profile(r, precision, tp, mb, full);
          std::vector<double> speed;
          double sum = 0;
          for (const auto& g : groups) {
            const LayerProfiler::Times& t = profile.of(*c.gpu(g.front()).profile);
            speed.push_back(1.0 / (m.layers * t.layer + t.embedding + t.head));
            sum += speed.back();
          }
          std::vector<double> exact;
          for (double s : speed) exact.push_back(static_cast<double>(total) * s / sum);
          const std::vector<int64_t> shares = whole_shares(total, exact);
          // Memory left for the state on each group, after every micro-batch's activations, the
          // last layer's logits and their gradient, and the framework's own.
          workload::LayerShape shape;
          shape.micro_batch = mb;
          shape.sequence = r.sequence;
          shape.tensor_parallel = tp;
          shape.sequence_parallel = sequence_parallel(r, tp > 1);
          shape.precision = precision;
          const double per_layer = workload::layer_activation_bytes(
              m, shape, full ? workload::Recompute::full : workload::Recompute::none);
          const double logits = m.logits_bytes(mb, r.sequence, tp);
          std::vector<double> free;
          double free_sum = 0;
          for (size_t i = 0; i < groups.size(); ++i) {
            const double used =
                static_cast<double>(shares[i]) * m.layers * per_layer + logits + reserved;
            free.push_back(c.gpu(groups[i].front()).profile->memory_bytes - used);
            free_sum += std::max(0.0, free.back());
          }
          if (*std::min_element(free.begin(), free.end()) <= 0 || free_sum < state) continue;
          out.push_back(
              proposal(r, framework, groups, tp, mb, recompute, shares, free, free_sum, state));
        }
      }
    }
    return out;
  }

 private:
  Proposal proposal(const Request& r, const std::string& framework,
                    const std::vector<std::vector<platform::GpuId>>& groups, int tp, int64_t mb,
                    const char* recompute, const std::vector<int64_t>& shares,
                    const std::vector<double>& free, double free_sum, double state) const {
    // State shares in proportion to the memory left, written so that they add up to one.
    std::vector<double> share;
    double given = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      const double s =
          i + 1 < groups.size() ? std::round(free[i] / free_sum * 1e9) / 1e9 : 1.0 - given;
      share.push_back(s);
      given += s;
    }
    const auto [lo, hi] = std::minmax_element(share.begin(), share.end());
    const auto [blo, bhi] = std::minmax_element(shares.begin(), shares.end());
    Proposal p;
    p.policy = name();
    p.label = fmt::format(
        "fsdp {} x tp {}, mb {}, micro-batches {}..{} by speed, state shares {:.3f}..{:.3f} by "
        "free memory ({:.0f}% of it used), layered, recompute {}",
        groups.size(), tp, mb, *blo, *bhi, *lo, *hi, 100 * state / free_sum, recompute);
    std::string plan = fmt::format(
        "# {} policy: {}\nmicro_batch_size: {}\nsequence_length: {}\nrecompute: {}\n"
        "sequence_parallel: {}\nzero_stage: 3\ngradient_accumulation: layered\nframework: {}\n"
        "replicas:\n",
        name(), p.label, mb, r.sequence, recompute, sequence_parallel_value(r, tp > 1), framework);
    for (size_t i = 0; i < groups.size(); ++i) {
      std::string list;
      for (platform::GpuId g : groups[i]) list += (list.empty() ? "" : ", ") + std::to_string(g);
      plan += fmt::format(
          "  - micro_batches: {}\n    state_share: {:.12g}\n    stages:\n"
          "      - {{layers: {}, tensor_parallel: {}, devices: [{}]}}\n",
          shares[i], share[i], r.model->layers, tp, list);
    }
    p.plan = std::move(plan);
    return p;
  }
};

}  // namespace

const Policy& cephalo_policy() {
  static const Cephalo p;
  return p;
}

}  // namespace hetsim::policy
