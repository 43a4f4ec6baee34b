// (model, plan, cluster, cost model) -> the programs every stage copy runs in one training
// iteration: kernels merged into segments between communication points, tensor-parallel
// collectives, pipeline sends and receives in the schedule's order, gradient buckets, the
// optimizer. One copy (StageCopy) is one pipeline stage of one data-parallel replica: its
// tensor-parallel ranks run identical kernels at identical times (same GPU type, same shapes), so
// one program stands for all of them, while every rank's communication is simulated as flows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/core/shared_vector.h"
#include "sim/platform/cluster.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::workload {

enum class TaskKind : uint8_t {
  compute,  // a segment of kernels
  tp_comm,  // a tensor-parallel collective (sync, or async: see tp_wait)
  tp_wait,  // wait for the async tensor-parallel collectives in flight
  recv,     // wait for a pipeline transfer to arrive
  send,     // start a pipeline transfer (does not block)
  dp_comm,  // queue a data-parallel collective (gradient bucket, ZeRO gather)
  dp_wait,  // wait until `index` data-parallel collectives have completed
  tied,     // all-reduce the tied embedding's gradients with the replica's other end stage
  ep_comm,  // a MoE layer's all-to-all over the expert-parallel group (the same stage of
            // expert_parallel consecutive replicas, rank by rank); blocks until done
  cp_comm,  // ring attention's exchange over the context-parallel group (the same stage of
            // context_parallel consecutive replicas); an async one is waited for by tp_wait
};

enum class Pass : uint8_t { forward, backward, recompute, other };

struct Task {
  TaskKind kind = TaskKind::compute;
  Pass pass = Pass::other;
  uint16_t chunk = 0;  // model chunk (interleaved schedule)
  uint32_t index = 0;  // segment, comm template or data-parallel collective
  int32_t layer = -1;  // model layer, -1 outside the layers
  uint32_t micro_batch = 0;
};

struct Segment {
  Time duration;
  Time host;  // the host's issue time of its kernels (duration is at least this)
  double flops = 0, model_flops = 0;
  std::vector<std::pair<uint32_t, Time>> ops;  // op index into StageCopy::ops, duration
};

struct CommTemplate {
  CommKind kind = CommKind::allreduce;
  double bytes = 0;
  bool async = false;
  std::string name;
  // Calibration measured this collective on these GPUs (CostModel::collective_time): it takes
  // that long, and the network model is not asked.
  std::optional<Time> measured = std::nullopt;
  bool expert = false;   // over the expert-parallel group (an ep_comm task), not the stage's ranks
  bool context = false;  // over the context-parallel group (a cp_comm task)
};

// A data-parallel collective: one per tensor-parallel rank, over that rank's peers in the other
// copies of its DpSync (every replica's copy of the stage, or of the layer segment).
struct DpCollective {
  CommKind kind = CommKind::allreduce;
  double bytes = 0;  // per rank
  std::string name;
  std::optional<Time> measured = std::nullopt;  // as CommTemplate::measured
  uint32_t sync = 0;                            // TrainingJob::dp_syncs
  // The replicas it runs among: 0 for all of them; else the expert-data-parallel group of a MoE
  // plan's experts (replicas / expert_parallel: those with the same expert-parallel rank).
  uint32_t replicas = 0;
  // Over every device of every member copy in one collective, not shard by shard among the
  // members' ranks: a domain-parallel layer's gradients, which every rank of a grid holds whole.
  bool grid = false;
};

// One data-parallel collective as the copies that run it together: each member's own
// DpCollective (copy, index into its dp list), one member per replica. Replicas that share
// their stages synchronise stage s with stage s; asymmetric replicas (Plan::asymmetric) each
// layer segment among the stages that hold it.
//
// The members may split the layers over different tensor-parallel degrees t_m. The gradients are
// then reduced in `pieces` = lcm(t_m) shards: shard p among rank p x t_m / pieces of each member
// (the rank that holds it), each of bytes x t / pieces. With one degree throughout, shard j is
// tensor-parallel rank j's share, as Megatron-LM reduces it.
struct DpSync {
  std::vector<std::pair<uint32_t, uint32_t>> members;
  uint32_t peers = 0;   // index into TrainingJob::dp_peers: the member copies, as a set
  uint32_t pieces = 1;  // shards, each reduced among its holders (one per member)
  double piece_bytes = 0;
  // Member m's rank that holds shard p.
  uint32_t holder(uint32_t p, size_t tensor_parallel) const {
    return static_cast<uint32_t>(p * tensor_parallel / pieces);
  }
};

// One replica's copy of one pipeline stage: its devices, the micro-batches it runs, its kernels
// and its program.
struct StageCopy {
  uint32_t replica = 0, stage = 0;  // of a staged plan: Plan::dp_stages[stage].groups[replica]
  uint32_t micro_batches = 0;       // micro-batches the copy runs
  int64_t batch = 0;                // samples of each micro-batch it takes
  std::vector<platform::GpuId> devices;
  const config::GpuProfile* gpu = nullptr;
  // The kernels, segments and program, shared with every copy built alike (the same stage of
  // identical replicas) until one of them is changed.
  SharedVector<Op> ops;
  SharedVector<Segment> segments;
  SharedVector<CommTemplate> comms;
  SharedVector<DpCollective> dp;
  SharedVector<Task> program;
  double tied_bytes = 0;              // per rank, when the program holds a `tied` task
  std::optional<Time> tied_measured;  // as CommTemplate::measured
  // A slowdown from a time into the iteration on (a perturbation): (from, factor), sorted by
  // time; a compute segment's part past `from` takes `factor` times as long.
  std::vector<std::pair<Time, double>> slow_from;
  double params = 0;         // parameters held per device
  double expert_params = 0;  // of which routed experts' (a MoE model's, over expert_parallel)
  double compute_flops = 0;  // executed FLOPs per device over the iteration
  double model_flops = 0;    // MFU numerator per device
};

struct TrainingJob {
  const ModelConfig* model = nullptr;
  const Plan* plan = nullptr;
  const platform::Cluster* cluster = nullptr;
  std::vector<StageCopy> copies;     // replica-major: replica r's stages from first_copy[r] on
  std::vector<uint32_t> first_copy;  // per replica, and the copy count last
  std::vector<DpSync> dp_syncs;      // every data-parallel collective, in issue order
  std::vector<std::vector<uint32_t>> dp_peers;  // the distinct member sets of dp_syncs
  double activation_bytes_per_transfer = 0;     // one micro-batch's layer-boundary activation
  int chunks = 1;
  // A staged plan's pipeline transfers (Plan::staged; its copies are stage-major, and
  // first_copy does not apply): per copy, the copies of the next stage (forward) and of the
  // stage before (backward) that share samples of each micro-batch with it, and the share of a
  // whole micro-batch's activation each transfer carries (the shared samples over the
  // micro-batch). A copy's receive waits for every peer's transfer.
  struct Peer {
    uint32_t copy = 0;  // index into copies
    double share = 0;
  };
  std::vector<std::vector<Peer>> next_peers, prev_peers;
  bool staged() const { return !next_peers.empty(); }
  std::vector<std::string> op_sources;  // "datasheet", ... by GPU type, for the report

  // Replica `replica`'s copy of stage `stage`.
  const StageCopy& copy(uint32_t replica, uint32_t stage) const {
    return copies[first_copy[replica] + stage];
  }
  // The replicas a cross-replica collective runs among: a MoE layer's expert-parallel group
  // (Plan::expert_group_replicas), context_parallel for ring attention's exchange.
  uint32_t group_size(const CommTemplate& ct) const {
    return static_cast<uint32_t>(ct.context ? plan->context_parallel
                                            : plan->expert_group_replicas());
  }
  // The copies of `copy`'s stage in the `size` consecutive replicas that hold its replica (its
  // expert- or context-parallel group), in replica order.
  std::vector<uint32_t> peer_copies(uint32_t copy, uint32_t size) const {
    const StageCopy& g = copies[copy];
    std::vector<uint32_t> out;
    for (uint32_t r = g.replica - g.replica % size; r < g.replica - g.replica % size + size; ++r)
      out.push_back(first_copy[r] + g.stage);
    return out;
  }
  // The ranks of `copy`'s cross-replica collective `ct` for its tensor-parallel rank j: rank j
  // of each peer copy; a MoE all-to-all with experts whole (Plan::experts_whole) runs once over
  // every rank of them, whatever j.
  std::vector<platform::GpuId> peer_ranks(uint32_t copy, const CommTemplate& ct, size_t j) const {
    const bool whole = ct.expert && plan->experts_whole();
    std::vector<platform::GpuId> out;
    for (uint32_t m : peer_copies(copy, group_size(ct))) {
      const auto& d = copies[m].devices;
      if (whole) {
        out.insert(out.end(), d.begin(), d.end());
      } else {
        out.push_back(d[j]);
      }
    }
    return out;
  }
  uint32_t stages_of(uint32_t replica) const {
    return first_copy[replica + 1] - first_copy[replica];
  }
};

// The order in which one stage runs forward and backward passes: (pass, micro-batch, chunk).
struct ScheduleItem {
  bool forward = true;
  uint32_t micro_batch = 0;
  uint16_t chunk = 0;
};
// `group`: the interleaved schedule's micro-batches per group (0: `stages`).
std::vector<ScheduleItem> stage_schedule(Schedule s, int stage, int stages, int micro_batches,
                                         int chunks, int group = 0);

TrainingJob build_training_job(const ModelConfig& model, const Plan& plan,
                               const platform::Cluster& cluster, const CostModel& cost);

// The copies without their programs (devices, GPU type, parameters): what the memory model
// reads, at a fraction of the cost of the whole job (the planner checks hundreds of plans).
TrainingJob skeleton_job(const ModelConfig& model, const Plan& plan,
                         const platform::Cluster& cluster);
// Bytes each pair of end-stage ranks all-reduces for replica `replica`'s tied embedding: the
// first stage's shard, spread over the wider of the two stages' tensor-parallel groups.
double tied_pair_bytes(const TrainingJob& job, uint32_t replica);
// Parameters one device of stage `stage` of a `stages`-stage pipeline holds (its layers, the
// embedding on the first stage, the head and a tied output copy on the last), over its
// tensor-parallel degree; a MoE layer's routed experts also over expert_parallel.
double params_per_device(const ModelConfig& model, const StagePlan& st, int stage, int stages,
                         int expert_parallel = 1);
// Of those, the routed experts' (0 for a dense model).
double expert_params_per_device(const ModelConfig& model, const StagePlan& st, int expert_parallel);
// The data-parallel key of a MoE plan's expert gradients on stage `stage` of the replicas of
// expert-parallel rank `rank` (DpCollective::sync before pairing).
uint32_t expert_sync_key(uint32_t rank, uint32_t stage);

}  // namespace hetsim::workload
