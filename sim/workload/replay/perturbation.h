// What-ifs (perturbations) on a run: devices that compute slower by a factor, links that carry a
// fraction of their capacity, random stragglers from a seeded distribution. Read from YAML (an
// entry of a study's `perturbations:` list, or `simulate --perturb`), resolved against a cluster
// (GPU and link names checked), then applied: link capacities to the cluster, compute slowdowns to
// the built job's segments.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/platform/cluster.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/plan/what_if.h"

namespace hetsim::workload {

// The perturbations against one cluster: a compute factor per GPU and the links to scale.
struct ResolvedPerturbations {
  std::vector<double> compute_factor;  // per GPU; empty when no GPU is slowed
  // Slowdowns from a time into the iteration on: (GPU, from, factor).
  std::vector<std::tuple<platform::GpuId, Time, double>> timed;
  std::vector<std::pair<platform::LinkId, double>> links;
  // A node lost mid-iteration (LostNode), its name resolved to an index.
  struct Loss {
    uint32_t node = 0;
    double at_s = 0, detect_s = 0, restart_s = 0;
    bool spare = false;
  };
  std::optional<Loss> lost;
  std::vector<std::string> description;  // one line each, for the report
  bool empty() const { return compute_factor.empty() && links.empty() && timed.empty() && !lost; }
};

// Throws InputError naming a GPU or a link the cluster lacks (and the names it has).
ResolvedPerturbations resolve_perturbations(const Perturbations& p,
                                            const platform::Cluster& cluster);
void scale_links(const ResolvedPerturbations& r, platform::Cluster& cluster);

// Scales the kernel time of every group's compute segments by the largest factor among its
// devices (its tensor-parallel ranks run in lockstep: the slowest sets the pace). A segment bound
// by host issue time stays at least that long; framework host segments (no kernels) do not scale.
void slow_down(TrainingJob& job, const std::vector<double>& compute_factor);
// The timed ones: each group's kernels from `from` on at the largest factor of its devices'
// (StageCopy::slow_from; the replay scales the part of a segment past it).
void slow_down_from(TrainingJob& job, const ResolvedPerturbations& r);

// The straggler factor of GPU `gpu` (1 when it is not one): splitmix64 of (seed, gpu), so the
// same on every platform and independent of the cluster's size.
double straggler_factor(const Stragglers& s, uint64_t gpu);

}  // namespace hetsim::workload
