// The what-ifs a run can carry (sim/workload/replay/perturbation.h applies them): devices that
// compute slower, links that carry a fraction of their capacity or are down, seeded stragglers, a
// node lost mid-iteration; and their YAML reader, shared by studies, `--perturb` and a plan file's
// own `perturbations:` map.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// A node lost `at` seconds into the iteration (its host, a board or its power gone). Synchronous
// training cannot finish that step: the other ranks wait in their next collective with the lost
// ranks until the framework's timeout (`detect`; default 600 s, the 10 minutes of Megatron-LM's
// --distributed-timeout-minutes and of PyTorch's NCCL process-group timeout), then the job is
// relaunched (`restart` seconds: rendezvous, process start, checkpoint load; default 0, as it
// depends on the storage) and runs the step again: on a spare node in the lost one's place
// (`replace: spare`, the plan unchanged), or on the survivors (`replace: shrink`, the default):
// the replicas that held a GPU of the node are dropped and the rest share their micro-batches
// (sim/policy/replan.h, drop_node).
struct LostNode {
  std::string node;  // an index ("3") or a name ("node3")
  double at_s = 0;
  double detect_s = 600;
  double restart_s = 0;
  bool spare = false;
};

struct Perturbations {
  std::vector<SlowDevice> slow;
  std::vector<SlowLink> links;
  std::optional<Stragglers> stragglers;
  std::optional<LostNode> lost;

  bool empty() const { return slow.empty() && links.empty() && !stragglers && !lost; }
  // One line that names every field, in a fixed order ("" when empty): a study's label and key.
  std::string canonical() const;
  // Adds `o`'s perturbations to these (repeated --perturb options).
  void merge(const Perturbations& o);
};

// Reads the perturbation keys of `map` (`slow`, `link`, `stragglers`, `lost`; the first two a map
// or a list of maps) into `out`; `extra` keys are allowed and ignored (a study's `name`). Errors
// name the file, line and field. Throws InputError.
void read_perturbations(const std::string& file, const YAML::Node& map, const std::string& path,
                        const std::vector<std::string>& extra, Perturbations& out);
// `simulate --perturb TEXT`: TEXT is one such map in YAML ("slow: {gpu: 3, factor: 2}").
Perturbations parse_perturbation(const std::string& text);

}  // namespace hetsim::workload
