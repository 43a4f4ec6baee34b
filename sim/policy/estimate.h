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
// first plans of a search; the caches make it single-threaded (one per thread).
#pragma once

#include <cstdint>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "sim/core/hash.h"
#include "sim/platform/cluster.h"
#include "sim/workload/cost_model.h"
#include "sim/workload/plan.h"

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
    Piece layer_f, layer_b, recompute, embedding_f, embedding_b, head_f, head_b;
  };
  // Rank lists that run one collective each, concurrently, and a key that says where they sit
  // as far as the collectives' time can tell: inside one node, its node type and local indices
  // (every node of a type is wired alike); across nodes, the ranks themselves.
  struct Groups {
    uint64_t key = 0;
    std::vector<std::vector<platform::GpuId>> ranks;
  };
  // What an estimate needs of where a plan's stages sit, worked out once per device layout
  // (the proposals of a search share a few layouts and differ in micro-batch, schedule, ...).
  struct Layout {
    std::vector<size_t> evaluated;  // replicas that stand for the others
    std::vector<Groups> peers;      // per stage: each tensor-parallel rank's data-parallel peers
    std::vector<std::vector<Groups>> tp;  // per evaluated replica, per stage
    std::vector<Groups> tied;             // per evaluated replica: its end stages' rank pairs
    // per evaluated replica, per stage boundary: every slice of a transfer (of every alike
    // replica), as (from, to)
    std::vector<std::vector<std::vector<std::pair<platform::GpuId, platform::GpuId>>>> hops;
    std::vector<std::vector<uint64_t>> hop_keys;  // hashes of `hops`
  };
  const Layout& layout(const workload::Plan& plan);
  // Replicas whose stages differ (Plan::asymmetric): each replica's pipeline on its own, then
  // each layer segment's gradient buckets among the stages that hold it.
  Estimate asymmetric(const workload::Plan& plan);
  Groups groups(std::vector<std::vector<platform::GpuId>> ranks) const;
  const Pieces& pieces(const workload::Plan& plan, const config::GpuProfile& gpu, const Groups& tp);
  Piece piece(const std::vector<workload::Step>& steps, const config::GpuProfile& gpu,
              workload::Precision p, const Groups& tp);
  // Concurrent collectives of one kind and size (one per rank list), run together on an idle
  // network: the time until the last is done.
  double collectives_s(workload::CommKind kind, double bytes, const Groups& g);
  // One micro-batch's activations across a stage boundary, every slice at once.
  double hop_s(uint64_t key, const std::vector<std::pair<platform::GpuId, platform::GpuId>>& ends,
               double bytes);
  double optimizer_s(const config::GpuProfile& gpu, double params, workload::Precision p);

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
  std::unordered_map<
      std::tuple<const config::GpuProfile*, int64_t, int64_t, bool, bool, int, uint64_t>, Pieces,
      KeyHash>
      pieces_;
  std::unordered_map<std::tuple<uint64_t, int, double>, double, KeyHash> collectives_;
  std::unordered_map<std::tuple<uint64_t, double>, double, KeyHash> hops_;
  std::unordered_map<std::tuple<const config::GpuProfile*, double, int>, double, KeyHash>
      optimizer_;
};

}  // namespace hetsim::policy
