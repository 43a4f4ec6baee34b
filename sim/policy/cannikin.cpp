// cannikin: data-parallel shares that make every replica finish at the same time (Nie,
// Maghakian, Liu, "Cannikin: Optimal Adaptive Distributed DNN Training over Heterogeneous
// Clusters", arXiv 2402.05302; ../shared/reference/policies.md section 2).
//
// Cannikin models each node's batch time as linear in its local batch, T_i(b) = k_i + a_i b, from
// profiles, and picks the local batches that equalise the finish time under the total batch B:
// T = (B + sum k_i / a_i) / sum (1 / a_i), b_i = (T - k_i) / a_i (its "OptPerf"). Here the profile
// is hetsim's own: each replica's iteration replayed alone with one and with two micro-batches
// gives a_i (a micro-batch's forward and backward) and k_i (what does not grow with the batch:
// the optimizer step, the last backward's wait). Unlike Whale's FLOP ratio this sees memory-bound
// kernels, small-GEMM efficiency and host overheads. Shares are whole micro-batches (largest
// remainder, at least one each). Where hetsim's version differs: Cannikin also chooses the total
// batch adaptively from the gradient noise scale (goodput); the total is the request's here. Its
// overlap-aware term for the gradient all-reduce is the same for every replica (same bytes), so
// it does not move the split, and the replay accounts for it.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sim/core/error.h"
#include "sim/policy/policy.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::policy {

namespace {

class Cannikin final : public Policy {
 public:
  const char* name() const override { return "cannikin"; }
  const char* summary() const override {
    return "data-parallel shares that equalise the replicas' finish time (Cannikin)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    for (int tp : tensor_parallel_degrees(*r.model, min_gpus_per_node(c))) {
      const auto groups = node_groups(c, tp);
      if (groups.size() < 2) continue;
      for (int64_t mb = 1; mb <= 16; mb *= 2) {
        if (r.global_batch % mb != 0) continue;
        const int64_t total = r.global_batch / mb;
        if (total < static_cast<int64_t>(groups.size())) continue;
        for (const char* recompute : {"none", "full"}) {
          const std::vector<Line> lines = profile(r, groups, tp, mb, recompute);
          if (lines.empty()) continue;
          double inv = 0, ratio = 0;
          for (const Line& l : lines) {
            inv += 1 / l.a;
            ratio += l.k / l.a;
          }
          const double finish = (static_cast<double>(total) + ratio) / inv;
          std::vector<double> exact;
          for (const Line& l : lines) exact.push_back(std::max(0.0, (finish - l.k) / l.a));
          double sum = 0;
          for (double e : exact) sum += e;
          for (double& e : exact) e *= static_cast<double>(total) / sum;  // clamped ones
          const std::vector<int64_t> shares = whole_shares(total, exact);
          Proposal p;
          p.policy = name();
          p.label = fmt::format(
              "dp {} x tp {}, micro-batch {}, shares {}..{} for equal finish, recompute {}",
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

 private:
  struct Line {
    double k = 0, a = 0;  // seconds: fixed, per micro-batch
  };

  // Each replica's T(b) = k + a b from replays of it alone with one and two micro-batches; the
  // same GPU type and degree give the same line, so each is profiled once. Empty if a profile
  // cannot be made (the plan is invalid on its own: the planner reports the proposal's reason).
  static std::vector<Line> profile(const Request& r,
                                   const std::vector<std::vector<platform::GpuId>>& groups, int tp,
                                   int64_t mb, const char* recompute) {
    std::map<std::string, Line> by_type;
    std::vector<Line> out;
    for (const auto& g : groups) {
      const std::string type = r.cluster->gpu(g.front()).profile->name;
      auto it = by_type.find(type);
      if (it == by_type.end()) {
        double t[2] = {0, 0};
        for (int n : {1, 2}) {
          try {
            const workload::Plan plan =
                workload::load_plan_text(replicas_plan(r, "", mb, recompute, tp, {g}, {n}),
                                         "cannikin profile", *r.model, *r.cluster);
            t[n - 1] =
                workload::replay(workload::build_training_job(*r.model, plan, *r.cluster, *r.cost))
                    .iteration.seconds();
          } catch (const InputError&) {
            return {};
          }
        }
        Line l;
        l.a = std::max(t[1] - t[0], 1e-12);
        l.k = std::max(0.0, t[0] - l.a);
        it = by_type.emplace(type, l).first;
      }
      out.push_back(it->second);
    }
    return out;
  }
};

}  // namespace

const Policy& cannikin_policy() {
  static const Cannikin p;
  return p;
}

}  // namespace hetsim::policy
