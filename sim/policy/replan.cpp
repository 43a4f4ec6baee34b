// Re-planning around slow devices; see replan.h.
#include "sim/policy/replan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "sim/core/error.h"
#include "sim/policy/policy.h"

namespace hetsim::policy {

bool rebalance_batch(workload::Plan& plan, const std::vector<double>& compute_factor) {
  // ZeRO-2 and -3 pair their per-micro-batch collectives across replicas: the counts must stay
  // equal (workload/plan/plan.cpp refuses uneven ones in a plan file).
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

bool holds_node(const workload::Plan& plan, const platform::Cluster& cluster, uint32_t node) {
  for (const workload::DataParallelStage& ds : plan.dp_stages) {
    for (const workload::StagePlan& st : ds.groups) {
      for (platform::GpuId g : st.devices) {
        if (cluster.gpu(g).node == node) return true;
      }
    }
  }
  for (const workload::ReplicaPlan& r : plan.replicas) {
    for (const workload::StagePlan& st : r.stages) {
      for (platform::GpuId g : st.devices) {
        if (cluster.gpu(g).node == node) return true;
      }
    }
  }
  return false;
}

Shrunk drop_node(workload::Plan& plan, const platform::Cluster& cluster, uint32_t node) {
  Shrunk out;
  if (plan.staged() && holds_node(plan, cluster, node)) {
    throw InputError(fmt::format(
        "perturbation lost.node: node{} holds GPUs of a staged plan (each stage its own "
        "data-parallel groups), which hetsim does not shrink; replace: spare runs the plan on a "
        "spare node",
        node));
  }
  const size_t n = plan.replicas.size();
  out.replicas_before = n;
  out.global_batch_before = plan.global_batch_size;
  // Expert- and context-parallel groups are runs of consecutive replicas (plan.h).
  const size_t block = std::lcm(static_cast<size_t>(std::max(1, plan.expert_group_replicas())),
                                static_cast<size_t>(std::max(1, plan.context_parallel)));
  std::vector<bool> lost(n, false);
  for (size_t r = 0; r < n; ++r) {
    for (const workload::StagePlan& s : plan.replicas[r].stages) {
      for (platform::GpuId g : s.devices) {
        if (cluster.gpu(g).node == node) {
          const size_t first = r / block * block;
          for (size_t k = first; k < std::min(n, first + block); ++k) lost[k] = true;
        }
      }
    }
  }
  int64_t total = 0;
  std::vector<workload::ReplicaPlan> kept;
  double share = 0;
  for (size_t r = 0; r < n; ++r) {
    total += plan.replicas[r].micro_batches;
    if (lost[r]) continue;
    kept.push_back(plan.replicas[r]);
    share += plan.replicas[r].state_share;
  }
  if (std::none_of(lost.begin(), lost.end(), [](bool b) { return b; })) {
    out.replicas_after = n;
    out.global_batch_after = plan.global_batch_size;
    return out;
  }
  if (kept.empty()) {
    throw InputError(fmt::format(
        "perturbation lost.node: every replica of the plan holds a GPU of node{} (or shares an "
        "expert- or context-parallel group with one that does), so the job cannot go on without "
        "it; replace: spare runs the plan on a spare node",
        node));
  }
  const size_t m = kept.size();
  // ZeRO-2/3's per-micro-batch collectives (unless accumulated layer by layer) and the expert-
  // and context-parallel groups' all-to-alls and rings pair every micro-batch across replicas,
  // and the interleaved schedule runs whole groups of micro-batches (plan.cpp): equal counts,
  // rounded up to such a group.
  const bool interleaved = plan.schedule == workload::Schedule::interleaved;
  if ((plan.zero_stage >= 2 && !plan.layered) || block > 1 || interleaved) {
    int64_t each = (total + static_cast<int64_t>(m) - 1) / static_cast<int64_t>(m);
    if (interleaved) {
      const int64_t group = plan.microbatch_group > 0 ? plan.microbatch_group : plan.stages();
      each = (each + group - 1) / group * group;
    }
    for (workload::ReplicaPlan& r : kept) r.micro_batches = static_cast<int>(each);
  } else {
    const std::vector<int64_t> shares =
        whole_shares(total, std::vector<double>(m, static_cast<double>(total) / m));
    for (size_t i = 0; i < m; ++i) kept[i].micro_batches = static_cast<int>(shares[i]);
  }
  if (share > 0) {
    for (workload::ReplicaPlan& r : kept) r.state_share /= share;
  }
  int64_t micro = 0;
  bool even = true;
  for (const workload::ReplicaPlan& r : kept) {
    micro += r.micro_batches;
    even = even && r.micro_batches == kept.front().micro_batches;
  }
  plan.replicas = std::move(kept);
  // A context-parallel group's replicas share their sequences.
  plan.global_batch_size = micro * plan.micro_batch_size / std::max(1, plan.context_parallel);
  plan.data_parallel = static_cast<int>(m) / std::max(1, plan.context_parallel);
  if (!even) plan.uniform = false;  // no longer tensor x pipeline x data degrees alone
  out.replicas_after = m;
  out.global_batch_after = plan.global_batch_size;
  return out;
}

}  // namespace hetsim::policy
