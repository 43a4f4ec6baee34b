// Partitioning policies: each proposes plans for a model on a cluster by its own reasoning, as
// its paper does; the planner (planner.h) then judges every proposal with the same replay. A plan
// is a value: its YAML text, validated by load_plan_text like any plan file and written out as
// the file `hetsim simulate --plan` reads. Policies register in one table (policy.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "sim/platform/cluster.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

struct Request {
  const workload::ModelConfig* model = nullptr;
  const platform::Cluster* cluster = nullptr;
  int64_t global_batch = 0;  // sequences per iteration
  int64_t sequence = 0;      // tokens per sequence
  std::string framework;     // a `framework:` value for every proposal; empty: the policy's own
  // Plan keys the policies do not choose, for every proposal (KEY=VALUE: attention=standard,
  // precision=fp16, main_grads=same, bucket_size=..., gradient_reduction=...). check_plan_sets
  // refuses keys the policies choose.
  std::vector<std::string> plan_sets;
  // Kernel costs, for policies whose own model profiles (Cannikin); the planner sets it.
  const workload::CostModel* cost = nullptr;
};

struct Proposal {
  std::string policy;
  std::string label;  // one line: the degrees and choices
  std::string plan;   // plan file text (YAML)
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  virtual const char* summary() const = 0;  // one line for --help and errors
  virtual std::vector<Proposal> propose(const Request& r) const = 0;
};

// Whether a proposal runs sequence parallelism: where it is `wanted` (the policies want it with
// tensor parallelism) and the request's framework has it (Framework::sequence_parallel).
bool sequence_parallel(const Request& r, bool wanted);
// The same as a plan's YAML value.
inline const char* sequence_parallel_value(const Request& r, bool wanted) {
  return sequence_parallel(r, wanted) ? "true" : "false";
}

// Throws InputError for a plan set that is not KEY=VALUE or names a key the policies choose.
void check_plan_sets(const std::vector<std::string>& sets);
// The YAML lines that add the sets to a proposal's plan text.
std::string plan_set_lines(const std::vector<std::string>& sets);

// Every registered policy, in the table's order.
const std::vector<const Policy*>& policies();
// "all" or a name; an unknown name is an InputError that lists the valid ones.
std::vector<const Policy*> select_policies(const std::string& name);

// Facts about a request that several policies use.
// The cluster's GPU types, in order of first appearance.
std::vector<const config::GpuProfile*> gpu_types(const platform::Cluster& c);
// The precision a plan without `precision:` trains in on this cluster
// (workload::default_precision).
workload::Precision cluster_precision(const platform::Cluster& c);
int min_gpus_per_node(const platform::Cluster& c);
// Tensor-parallel degrees the model's shapes allow, up to `limit` (powers of two).
std::vector<int> tensor_parallel_degrees(const workload::ModelConfig& m, int limit);
// Micro-batch sizes (powers of two) that divide `per_replica` sequences.
std::vector<int64_t> micro_batch_sizes(int64_t per_replica);

// Tensor-parallel groups of `tp` consecutive GPUs inside each node, in id order.
std::vector<std::vector<platform::GpuId>> node_groups(const platform::Cluster& c, int tp);
// `total` whole units split as close to `exact` (summing to `total`) as whole numbers of at least
// one allow: largest remainder.
std::vector<int64_t> whole_shares(int64_t total, const std::vector<double>& exact);
// A replicas: plan with one stage per replica (all layers), each replica a group with its share.
std::string replicas_plan(const Request& r, const std::string& header, int64_t micro_batch,
                          const char* recompute, int tp,
                          const std::vector<std::vector<platform::GpuId>>& groups,
                          const std::vector<int64_t>& shares);

// Kernel time of one pass's steps on one GPU type, without their collectives: what a policy's
// profiler measures of a layer.
double kernel_seconds(const std::vector<workload::Step>& steps, const config::GpuProfile& gpu,
                      workload::Precision p, const workload::CostModel& cost);

// What a policy's profiler measures of one micro-batch on a GPU type at a tensor-parallel degree:
// a layer's forward and backward kernels (with the forward again under full recomputation), the
// embedding's and the head's. The layers' kernel lists are built once; each type is costed once.
class LayerProfiler {
 public:
  struct Times {
    double layer = 0, embedding = 0, head = 0;
  };
  LayerProfiler(const Request& r, workload::Precision p, int tp, int64_t micro_batch,
                bool full_recompute);
  const Times& of(const config::GpuProfile& gpu);

 private:
  const workload::CostModel& cost_;
  workload::Precision precision_;
  bool full_;
  std::vector<workload::Step> lf_, lb_, ef_, eb_, hf_, hb_;
  std::map<std::string, Times> times_;  // by the profile's name, not its address (never iterated)
};

// AMP's dynamic programme over layer cut points: layer l on stage s costs cost[s][l], stage s adds
// fixed[s] (the embedding, the head); returns each stage's layer count (at least one each) that
// minimises (B - 1) x the slowest stage + the sum of the stages, B = micro_batches; empty when
// there are fewer layers than stages.
std::vector<int> amp_partition(const std::vector<std::vector<double>>& cost,
                               const std::vector<double>& fixed, int64_t micro_batches);

// One pipeline's costs for amp_partition: cost[s][l] of layer l on stage s, fixed[s] per stage.
struct PipelineCosts {
  std::vector<std::vector<double>> cost;
  std::vector<double> fixed;
};
struct PipelineSplit {
  std::vector<int> layers;  // per stage; empty: fewer layers than stages
  double slowest = 0;       // the busiest stage's time per micro-batch
  double time = 0;          // (M - 1) x slowest + the sum of the stages
};
PipelineSplit split_pipeline(const PipelineCosts& p, int64_t micro_batches);
// `total` micro-batches shared over pipelines of their own stages (HetPipe's virtual workers,
// FlashFlex's pipelines) in proportion to each one's speed, 1 / its slowest stage when split for
// an even share (whole_shares); empty when a pipeline has more stages than layers.
std::vector<int64_t> speed_shares(const std::vector<PipelineCosts>& pipelines, int64_t total);

// "0-7,16": GPU ids as a plan's `devices` text, runs of consecutive ids as ranges.
std::string gpu_ranges(const std::vector<platform::GpuId>& ids);

// Per pipeline stage of a plan, by the memory model over its groups alone: the fullest GPU's
// peak over its capacity, and the least memory any of its GPUs has left (negative: over).
struct StageMemory {
  double fill = 0;
  double room = std::numeric_limits<double>::infinity();
};
std::vector<StageMemory> stage_memory(const workload::ModelConfig& m, const workload::Plan& plan,
                                      const platform::Cluster& c);

// A plan in which every replica runs the same pipeline (the uniform form with stage_layers and
// the devices in its rank order): stage s holds layers[s];
// devices[r][s] are replica r's stage s devices (its tensor-parallel group).
std::string pipelines_plan(const Request& r, const std::string& header, int64_t micro_batch,
                           int64_t micro_batches, const char* recompute, int tp,
                           const std::vector<int>& layers,
                           const std::vector<std::vector<std::vector<platform::GpuId>>>& devices);

// The policies (one file each).
const Policy& megatron_policy();
const Policy& zero_policy();
const Policy& whale_policy();
const Policy& cannikin_policy();
const Policy& amp_policy();
const Policy& metis_policy();
const Policy& hetpipe_policy();
const Policy& flashflex_policy();
const Policy& cephalo_policy();

}  // namespace hetsim::policy
