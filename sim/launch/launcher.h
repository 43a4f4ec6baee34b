// Exporting a plan to the framework people deploy with: the launch command, configuration and
// environment that run the same degrees, batch, schedule, recompute and ZeRO stage in
// Megatron-LM, DeepSpeed or PyTorch (torchrun with DDP/FSDP). What a framework cannot express is
// listed, one line per feature; the closest uniform plan is exported beside it. Launchers
// register in one table (launcher.cpp), one file each.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/platform/cluster.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::launch {

// The GPUs one node runs, in local-rank order.
struct HostRanks {
  std::string node;                  // the cluster's node name ("node3")
  std::vector<uint32_t> local_gpus;  // CUDA_VISIBLE_DEVICES order
};

struct Launch {
  std::string framework;             // the registry name ("megatron")
  std::vector<std::string> command;  // argv, launcher first
  nlohmann::ordered_json config = nlohmann::ordered_json::object();  // DeepSpeed JSON; FSDP/DDP
  std::string config_file;  // the name the command gives the configuration, when it has one
  std::vector<std::pair<std::string, std::string>> env;  // variables to set on every node
  // Node-rank order and each node's GPUs, when the plan's rank order is not the default one
  // (nodes 0, 1, ... each with local GPUs 0, 1, ...); empty otherwise.
  std::vector<HostRanks> hosts;
  std::vector<std::string> unsupported;  // what the framework cannot express, one line each
  std::string approximation;  // the closest uniform plan exported instead (unsupported only)
};

// What to export: the plan as `hetsim simulate` reads it.
struct Target {
  const workload::ModelConfig* model = nullptr;
  const workload::Plan* plan = nullptr;
  const platform::Cluster* cluster = nullptr;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual const char* name() const = 0;
  virtual const char* summary() const = 0;  // one line for --help and errors
  virtual Launch make(const Target& t) const = 0;
};

// Every registered launcher, in the table's order.
const std::vector<const Launcher*>& launchers();
// A launcher by name; an unknown name is an InputError that lists the valid ones.
const Launcher& find_launcher(const std::string& name);

// The launch as shell text: environment, node order, the command (one flag a line) and the
// configuration file's contents; the same input gives the same bytes.
std::string to_text(const Launch& l);
// {"framework", "command", "config", "env", "hosts", "unsupported", "approximation"}.
nlohmann::ordered_json to_json(const Launch& l);

// ---- Shared by the launchers (layout.cpp) -------------------------------------------------

// The plan reduced to one tensor, pipeline and data-parallel degree, as every framework needs:
// exact for uniform plans; for heterogeneous ones the closest uniform plan, with what it changes
// in `unsupported`.
struct Layout {
  // dp counts the replicas, context-parallel ranks included (tensor fastest, then context,
  // then data: Megatron-LM's order); cp of them split each sequence.
  int tp = 1, pp = 1, dp = 1, interleave = 1, cp = 1;
  int64_t micro_batch = 1, global_batch = 0;
  int micro_batches = 0;  // per replica
  // Layers per virtual stage; virtual stage c x pp + s is model chunk c of stage s.
  std::vector<int> stage_layers;
  // The GPU of each rank (tensor-parallel fastest, then data, then pipeline: Megatron-LM's
  // order); empty when the plan's replicas or stages differ in shape.
  std::vector<platform::GpuId> ranks;
  std::vector<std::string> unsupported;
};
// `framework` names the framework in the lines ("Megatron-LM needs one pipeline degree").
Layout uniform_layout(const Target& t, const std::string& framework);
// What only the Megatron-LM export carries (context parallelism, a mixture of experts), as
// lines of `unsupported` for the other frameworks.
void add_megatron_only(const Target& t, std::vector<std::string>& unsupported);

// Processes per node and the node order for `ranks` (torchrun starts the same number on each
// node, ranks node by node). Sets l.hosts (when not the default order) and l.env, and adds to
// l.unsupported when the order cannot be given. Returns {nodes, processes per node}.
std::pair<int, int> place_ranks(const Target& t, const Layout& layout, const std::string& framework,
                                Launch& l);

// "27/13": layers per virtual stage.
std::string split_text(const std::vector<int>& layers);

// The closest-uniform-plan line for l.approximation; says so when its global batch differs from
// the plan's.
std::string approximation_text(const Layout& layout, int64_t plan_global_batch);

// Megatron-LM's model-shape flags (--num-layers ... --vocab-size), shared with Megatron-DeepSpeed.
void add_megatron_model_flags(const workload::ModelConfig& m, std::vector<std::string>& args);
// Model shapes Megatron's layers cannot split `tp` ways (key/value heads fewer than the
// tensor-parallel degree, which hetsim replicates), one line each into `unsupported`.
void check_megatron_shapes(const workload::ModelConfig& m, int tp, const std::string& framework,
                           std::vector<std::string>& unsupported);

// The launchers (one file each).
const Launcher& megatron_launcher();
const Launcher& deepspeed_launcher();
const Launcher& torchrun_launcher();

}  // namespace hetsim::launch
