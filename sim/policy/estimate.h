// The planner's fast estimate of a plan's iteration time: closed forms over the same kernel
// costs and collective plans the replay uses, without running the replay. Per stage, the time of
// one micro-batch's forward and backward pieces (kernels, exposed tensor-parallel collectives,
// the framework's host time, blocking sends); per replica, the pipeline's closed form
// (m - 1/v) x slowest stage + sum of stages / v, plus the transfers of the fill and drain; per
// stage, the data-parallel gradient reduction as a stream of bucket collectives that starts as
// the last backward fills them (or after it), the tied-embedding reduction, the optimizer step
// and ZeRO's parameter gather. Collectives run concurrently over shared links are estimated
// together (the tensor-parallel ranks' data-parallel rings share the NICs).
//
// What it leaves out, and so where it differs from the replay: contention between different
// kinds of traffic (pipeline transfers beside gradient buckets), the exact order of interleaved
// chunks, and the waits a heterogeneous pipeline's slower stages cause beyond its slowest stage.
// tests/unit/estimate_test.cpp bounds the difference over hundreds of plans.
//
// An Estimator caches kernel pieces and collective times by shape, so it is cheap after the
// first plans of a search; the caches make it single-threaded (one per thread). Replicas spelled
// out one by one (explicit plans) that are alike (the same GPU types and tensor-parallel groups
// stage by stage, the same layers, micro-batches, state share and transfer times) are estimated
// once, as one replica of a uniform plan stands for the others: the same estimate to the bit,
// since alike replicas give the same numbers and the estimate keeps their maximum.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/core/hash.h"
#include "sim/network/collective.h"
#include "sim/platform/cluster.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/job/pass_rules.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

struct Estimate {
  double iteration_s = 0;
  double compute_s = 0;     // the busiest group's kernels, back to back (no replay beats it)
  double pipeline_s = 0;    // the slowest replica's forward and backward passes, with bubbles
  double dp_exposed_s = 0;  // gradient reduction beyond the backward pass (the worst stage)
};

class Estimator {
 public:
  Estimator(const workload::ModelConfig& model, const platform::Cluster& cluster,
            const workload::CostModel& cost);
  Estimate estimate(const workload::Plan& plan);
  // Off: every replica of an explicit plan estimated on its own (the tests compare the two).
  void set_reduce_replicas(bool on) { reduce_replicas_ = on; }

  // One transformer layer's (or embedding's, head's) pass on one GPU type and shape: its kernel
  // time (runs of kernels take the longer of GPU and host time, as the replay's segments do) and
  // the time its tensor-parallel collectives add (a synchronous one whole, an asynchronous one
  // beyond the kernel it overlaps).
  struct Piece {
    double kernels_s = 0;
    double comm_s = 0;
    double total() const { return kernels_s + comm_s; }
  };

 private:
  struct Pieces {
    // recompute: the attention core (selective); recompute_ops: torchtitan's op-level policy's
    // share of a layer's forward pass (selective_op, Llama-style dense layers only).
    // copy_out: FSDP2's copy of a gathered layer out of the collective's buffer
    // (Framework::gather_copy_out).
    Piece layer_f, layer_b, recompute, recompute_ops, copy_out, embedding_f, embedding_b, head_f,
        head_b;
  };
  // Rank lists that run one collective each, concurrently, and a key that says where they sit
  // as far as the collectives' time can tell: inside one node, its node type and local indices
  // (every node of a type is wired alike); across nodes, the ranks themselves.
  struct RankSets {
    uint64_t key = 0;
    std::vector<std::vector<platform::GpuId>> ranks;
  };
  // What an estimate needs of where a plan's stages sit, worked out once per device layout
  // (the proposals of a search share a few layouts and differ in micro-batch, schedule, ...).
  struct Layout {
    std::vector<size_t> evaluated;  // replicas that stand for the others
    std::vector<RankSets> peers;    // per stage: each tensor-parallel rank's data-parallel peers
    std::vector<std::vector<RankSets>> tp;  // per evaluated replica, per stage
    std::vector<RankSets> tied;             // per evaluated replica: its end stages' rank pairs
    // per evaluated replica, per stage boundary: every slice of a transfer (of every alike
    // replica), as (from, to)
    std::vector<std::vector<std::vector<std::pair<platform::GpuId, platform::GpuId>>>> hops;
    std::vector<std::vector<uint64_t>> hop_keys;  // hashes of `hops`
    // Per evaluated replica: its devices' kind (of `kinds`), alike where every stage's GPU type
    // and tensor-parallel group (RankSets::key; any one GPU for a stage of one) are.
    std::vector<uint32_t> kind;
    size_t kinds = 0;
    // Worked out once per layout and size, as a search's plans share both: per activation size,
    // each evaluated replica's transfer per stage boundary (S per replica, the last 0); per
    // collective kind and size, its time over each stage's data-parallel peers; per size, the
    // slowest tied-embedding reduction.
    std::vector<std::pair<double, std::vector<double>>> hop_values;
    struct PerStage {
      int kind;
      double bytes;
      std::vector<double> seconds;  // per stage; NaN until asked for
    };
    std::vector<PerStage> dp;
    size_t dp_last = 0;  // the entry asked for last
    std::vector<std::pair<double, double>> tied_worst;
  };
  // A hash of the plan's device layout (the key of `layouts_`), and whether it is asymmetric
  // (Plan::asymmetric), in one pass over the replicas' stages.
  struct Scan {
    uint64_t key = 0;
    bool asymmetric = false;
  };
  static Scan scan(const workload::Plan& plan);
  Layout& layout(const workload::Plan& plan, uint64_t key);
  const double* hop_values(Layout& l, const workload::Plan& plan, double activation);
  double dp_s(Layout& l, int stage, workload::CommKind kind, double bytes);
  double tied_s(Layout& l, double bytes_per);
  // Whether replicas i and j (indices into Layout::evaluated) of an explicit plan give the same
  // numbers.
  bool alike(const workload::Plan& plan, const Layout& l, const double* hops, size_t i,
             size_t j) const;
  // Replicas whose stages differ (Plan::asymmetric): each replica's pipeline on its own, then
  // each layer segment's gradient buckets among the stages that hold it.
  Estimate asymmetric(const workload::Plan& plan);
  // A staged plan (Plan::staged): one pipeline whose stage takes its slowest group's time, the
  // re-sharded transfers between stages as the slowest pair of peers, and each stage's gradient
  // buckets over its own groups (in lcm shards over their tensor-parallel degrees).
  Estimate staged(const workload::Plan& plan);
  // The steps of staged(). Per stage boundary: the re-sharded transfer of one micro-batch, every
  // pair of peers' slices at once.
  std::vector<double> staged_hops(const workload::Plan& plan);
  // Per stage, its slowest group's: one micro-batch's forward and backward passes (`w`: both), a
  // layer's backward pass with its recompute, and the optimizer step.
  struct StagedPasses {
    explicit StagedPasses(size_t n) : fwd(n), bwd(n), w(n), layer_backward(n), optimizer(n) {}
    std::vector<double> fwd, bwd, w, layer_backward, optimizer;
  };
  // Raises `compute_s` to the busiest group's kernels and optimizer step.
  StagedPasses staged_passes(const workload::Plan& plan, const std::vector<double>& hop,
                             double& compute_s);
  // Stage s's gradient buckets, all-reduced among its groups (more than one), from `ready`: when
  // the last is done. `x`: the stages' passes; `end`: each stage's last backward pass's end;
  // `tied`: whether the tied embedding's gradients are reduced apart (not in stage 0's buckets).
  double staged_buckets(const workload::Plan& plan, int s, double ready, const StagedPasses& x,
                        const std::vector<double>& end, bool tied);
  // The holders of a set of groups' shards, reduced together: lcm of their tensor-parallel
  // degrees in shards, shard p on rank p x t / shards of each group (workload::DpSync); the
  // shards and the rank lists.
  std::pair<int, RankSets> shard_holders(const std::vector<const workload::StagePlan*>& gs) const;

  // The steps of estimate() for a uniform or explicit plan: what every step reads, worked out
  // once per estimate.
  struct Terms {
    Terms(const workload::ModelConfig& model, const workload::Plan& p, Layout& l,
          const double* hops);
    const workload::Plan& plan;
    Layout& lay;
    const double* hop_rows;  // hop_values: per evaluated replica, per stage
    int S, v, V;             // stages, model chunks per stage, virtual stages
    size_t R;                // replicas
    bool dp;                 // more than one replica
    double e, grad_bytes;    // bytes of an element and of a gradient's
    double gathered;         // what a framework's pipeline gather collects
    double per_pass;         // the framework's host time per pass
    int64_t layer_params;
  };
  // One stage's costs that each of its model chunks adds (replica_stage, chunk_passes).
  struct StageCosts {
    const Pieces& ps;
    int m;                           // the replica's micro-batches
    const double* hop;               // the replica's transfers per stage boundary
    double pipe_gather = 0;          // the framework's all-gathers of a received pipeline slice
    double gather = 0, scatter = 0;  // ZeRO-3's collectives of each layer
    double copy = 0;                 // FSDP2's copy of each gathered layer
    double rc = 0, rc_kernels = 0;   // a layer's recompute: all of it, and its kernels
  };
  // The replicas to estimate, into picked_ (indices into Layout::evaluated).
  void pick_replicas(const workload::Plan& plan, const Layout& lay, const double* hop_rows);
  // The parameters of stage s of a replica: replica 0's (params_), unless their layers differ.
  double stage_params(const workload::Plan& plan, const workload::StagePlan& st, int s) const;
  // Evaluated replica i: its stages' passes, then its pipeline in closed form; raises out's
  // compute and pipeline times and each stage's latest end (end_).
  void replica(const Terms& terms, size_t i, Estimate& out);
  // Stage s of evaluated replica i: one micro-batch's forward and backward passes over its model
  // chunks (fwd_, bwd_, w_) and a layer's backward pass (layer_backward_; last_backward_ the
  // stage's); raises out.compute_s by the group's kernels and optimizer step, `once` by
  // layered accumulation's per-layer collectives.
  void replica_stage(const Terms& terms, size_t i, int s, Estimate& out, double& once);
  // Model chunk c of stage s (virtual stage c x S + s): one micro-batch's forward and backward
  // passes added to fwd_[s] and bwd_[s], their kernels to `kernels`; layered accumulation's
  // per-layer collectives, waited for once per pass, to `once`.
  void chunk_passes(const Terms& terms, const workload::StagePlan& st, const StageCosts& k, int s,
                    int c, double& kernels, double& once);
  // ZeRO-2 and 3's collectives outside virtual stage vs's layers (the embedding's on the first,
  // the head's on the last): the weights' all-gather (ZeRO-3 only) and the gradients'
  // reduce-scatter.
  std::pair<double, double> outer_collectives(const Terms& terms, int s, int vs,
                                              const workload::StagePlan& st);
  // Stage s's data-parallel gradient reduction (replica 0's stage; the others' are alike), from
  // `ready`, when the gradients are: when it is done.
  double reduce_gradients(const Terms& terms, int s, double ready);
  // Without ZeRO-2 or 3: stage s's gradient buckets of collective `kind`, streamed as the last
  // backward pass fills them (or after it), from `ready`: when the last is done.
  double bucket_stream(const Terms& terms, int s, workload::CommKind kind, double ready);

  RankSets rank_sets(std::vector<std::vector<platform::GpuId>> ranks) const;
  // `batch`: samples a micro-batch (0: the plan's micro_batch_size; a staged plan's group share).
  const Pieces& pieces(const workload::Plan& plan, const config::GpuProfile& gpu,
                       const RankSets& tp, int64_t batch = 0);
  // pieces(), remembered for the plan being estimated (its stages share a few GPU types and
  // tensor-parallel rank sets).
  const Pieces& stage_pieces(const workload::Plan& plan, const config::GpuProfile& gpu,
                             const RankSets& tp);
  // `clock`: a power-capped GPU's clock over its sustained one (workload::power_clock); `power`,
  // where given, gathers the piece's segments as the power model sees them.
  Piece piece(const std::vector<workload::Step>& steps, const config::GpuProfile& gpu,
              workload::Precision p, const RankSets& tp, const workload::Framework& fw,
              double clock = 1, std::vector<workload::PowerSegment>* power = nullptr);
  // One segment of `steps` (a cut of workload::cut_steps): the longer of its kernels' GPU time
  // and the host's time to issue them; `power`, where given, takes the segment.
  double segment_s(const std::vector<workload::Step>& steps, const workload::StepCut& cut,
                   const config::GpuProfile& gpu, workload::Precision p,
                   const workload::Framework& fw, double clock,
                   std::vector<workload::PowerSegment>* power) const;
  // Concurrent collectives of one kind and size (one per rank list), run together on an idle
  // network: the time until the last is done.
  double collectives_s(workload::CommKind kind, double bytes, const RankSets& g);
  // One micro-batch's activations across a stage boundary, every slice at once.
  double hop_s(uint64_t key, const std::vector<std::pair<platform::GpuId, platform::GpuId>>& ends,
               double bytes);
  // One transfer of `bytes` from a to b over its route, as the replay sends a pipeline slice.
  network::PlanStep direct_step(platform::GpuId a, platform::GpuId b, double bytes) const;
  double optimizer_s(const config::GpuProfile& gpu, double params, workload::Precision p,
                     workload::Optimizer o, const workload::Framework& fw);

  const workload::ModelConfig& model_;
  const platform::Cluster& cluster_;
  const workload::CostModel& cost_;
  // The caches' keys hashed field by field (integers, pointers, doubles by their bits): a
  // search looks each up hundreds of times per plan (a stage hop, a piece per stage).
  struct KeyHash {
    template <class... T>
    size_t operator()(const std::tuple<T...>& k) const {
      Hasher h;
      std::apply([&h](const auto&... x) { (h.add(x), ...); }, k);
      return static_cast<size_t>(h.h);
    }
    size_t operator()(uint64_t k) const { return (*this)(std::tuple<uint64_t>(k)); }
  };
  std::unordered_map<uint64_t, Layout, KeyHash> layouts_;
  std::map<std::tuple<uintptr_t, workload::LayerShape, uint64_t, int64_t>, Pieces>
      pieces_;  // by GPU, the stage's whole layer shape (a field added to LayerShape joins the key
                // by itself), tensor-parallel group and the framework's host time per kernel (-1:
                // the cost model's); the GPU by its profile's address, harmless as pieces_ is only
                // looked up, never iterated
  std::unordered_map<std::tuple<uint64_t, int, double>, double, KeyHash> collectives_;
  std::unordered_map<std::tuple<uint64_t, double>, double, KeyHash> hops_;
  std::unordered_map<std::tuple<const config::GpuProfile*, double, int, int64_t>, double, KeyHash>
      optimizer_;  // the GPU by its profile's address: only looked up, never iterated
  // The last look-up of collectives_ and optimizer_ (a plan's stages ask the same in a row).
  struct {
    uint64_t key = 0;
    int kind = -1;
    uint64_t bytes = 0;
    double seconds = 0;
  } last_collective_;
  struct {
    const config::GpuProfile* gpu = nullptr;
    uint64_t params = 0;
    int precision = -1;  // precision + 4 x optimizer
    int64_t host_ps = -1;
    double seconds = 0;
  } last_optimizer_;
  bool reduce_replicas_ = true;
  // Scratch of one estimate, kept to spare the allocations.
  struct PieceMemo {
    const config::GpuProfile* gpu;
    uint64_t key;
    int t;
    const Pieces* pieces;
  };
  std::vector<PieceMemo> piece_memo_;
  std::vector<size_t> picked_;
  std::vector<size_t> kind_latest_, kind_before_;  // per kind, per picked replica
  std::vector<double> end_, last_backward_, layer_backward_, params_;
  std::vector<double> w_, fwd_, bwd_;
};

}  // namespace hetsim::policy
