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
#include "sim/workload/training_job.h"

namespace hetsim::workload {

// One GPU's kernels take `factor` times as long (thermal throttling, a bad board). factor >= 1.
// With `after`, only from that many seconds into the iteration (a GPU that starts throttling
// mid-step): a kernel running then finishes its remaining part at the slower pace.
struct SlowDevice {
  std::string gpu;  // a global index ("3") or a name ("node0.gpu3")
  double factor = 1;
  std::optional<double> after_s;
};

// Links named "A->B" (one direction) or "A<->B" (both), as Cluster::link_name writes them, carry
// `factor` of their capacity. factor 0: the link is down, and routes go around it
// (Cluster::fail_link: fabric links and NIC cables; a link inside a node cannot fail).
struct SlowLink {
  std::string link;
  double factor = 1;
};

// Each GPU, with probability `probability`, computes slower by a factor drawn uniformly from
// [min, max]; the draws depend only on the seed and the GPU's index.
struct Stragglers {
  uint64_t seed = 0;
  double probability = 1;
  double min = 1, max = 1;
};

struct Perturbations {
  std::vector<SlowDevice> slow;
  std::vector<SlowLink> links;
  std::optional<Stragglers> stragglers;

  bool empty() const { return slow.empty() && links.empty() && !stragglers; }
  // One line that names every field, in a fixed order ("" when empty): a study's label and key.
  std::string canonical() const;
  // Adds `o`'s perturbations to these (repeated --perturb options).
  void merge(const Perturbations& o);
};

// Reads the perturbation keys of `map` (`slow`, `link`, `stragglers`; each of the first two a map
// or a list of maps) into `out`; `extra` keys are allowed and ignored (a study's `name`). Errors
// name the file, line and field. Throws InputError.
void read_perturbations(const std::string& file, const YAML::Node& map, const std::string& path,
                        const std::vector<std::string>& extra, Perturbations& out);
// `simulate --perturb TEXT`: TEXT is one such map in YAML ("slow: {gpu: 3, factor: 2}").
Perturbations parse_perturbation(const std::string& text);
// A plan file's own `perturbations:` map (the same keys), so that a what-if travels with the
// plan; empty when the plan has none. `text` is the plan file's text. Errors name the file, line
// and field. Throws InputError.
Perturbations plan_perturbations(const std::string& text, const std::string& file);

// The perturbations against one cluster: a compute factor per GPU and the links to scale.
struct ResolvedPerturbations {
  std::vector<double> compute_factor;  // per GPU; empty when no GPU is slowed
  // Slowdowns from a time into the iteration on: (GPU, from, factor).
  std::vector<std::tuple<platform::GpuId, Time, double>> timed;
  std::vector<std::pair<platform::LinkId, double>> links;
  std::vector<std::string> description;  // one line each, for the report
  bool empty() const { return compute_factor.empty() && links.empty() && timed.empty(); }
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
// (Group::slow_from; the replay scales the part of a segment past it).
void slow_down_from(TrainingJob& job, const ResolvedPerturbations& r);

// The straggler factor of GPU `gpu` (1 when it is not one): splitmix64 of (seed, gpu), so the
// same on every platform and independent of the cluster's size.
double straggler_factor(const Stragglers& s, uint64_t gpu);

}  // namespace hetsim::workload
