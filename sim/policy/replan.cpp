// Re-planning around slow devices; see replan.h.
#include "sim/policy/replan.h"

#include <algorithm>

#include "sim/policy/policy.h"

namespace hetsim::policy {

bool rebalance_batch(workload::Plan& plan, const std::vector<double>& compute_factor) {
  // ZeRO-2 and -3 pair their per-micro-batch collectives across replicas: the counts must stay
  // equal (workload/plan.cpp refuses uneven ones in a plan file).
  if (compute_factor.empty() || plan.replicas.size() < 2 || plan.zero_stage >= 2) return false;
  std::vector<double> speed;
  int64_t total = 0;
  double sum = 0;
  for (const workload::ReplicaPlan& r : plan.replicas) {
    double slowest = 1;
    for (const workload::StagePlan& s : r.stages)
      for (platform::GpuId g : s.devices) slowest = std::max(slowest, compute_factor.at(g));
    speed.push_back(1 / slowest);
    sum += speed.back();
    total += r.micro_batches;
  }
  std::vector<double> exact;
  for (double v : speed) exact.push_back(static_cast<double>(total) * v / sum);
  const std::vector<int64_t> shares = whole_shares(total, exact);
  bool changed = false;
  for (size_t i = 0; i < plan.replicas.size(); ++i) {
    const int m = static_cast<int>(shares[i]);
    changed = changed || m != plan.replicas[i].micro_batches;
    plan.replicas[i].micro_batches = m;
  }
  if (changed) plan.uniform = false;  // no longer tensor x pipeline x data degrees alone
  return changed;
}

}  // namespace hetsim::policy
