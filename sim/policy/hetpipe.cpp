// hetpipe: virtual workers, each a pipeline over its own GPUs, with data parallelism across them
// (Park et al., "HetPipe: Enabling Large DNN Training on (Whimpy) Heterogeneous GPU Clusters
// through Integration of Pipelined Model Parallelism and Data Parallelism", USENIX ATC'20;
// ../shared/reference/policies.md section 9).
//
// HetPipe groups the GPUs into virtual workers (VWs) by one of its allocation policies: NP, each
// node one VW (a VW of one GPU type, VWs of different speeds), or ED, every VW an equal mix of
// the types (VWs alike, each a heterogeneous pipeline). Inside a VW each GPU is one pipeline
// stage, and the layers are split by the GPUs' profiled per-layer times so that the slowest stage
// is as fast as it can be. The VWs train as data-parallel workers at their own pace.
//
// Where hetsim's version differs:
// - HetPipe synchronises the VWs through a parameter server under Wave Synchronous Parallel,
//   which lets a fast VW run up to a staleness bound ahead. hetsim replays synchronous training
//   (staleness 0): the gradients are all-reduced layer segment by layer segment among the VWs'
//   stages that hold them (asymmetric replicas), and a fast VW's extra speed becomes a larger
//   share of the batch (its micro-batches in proportion to its pipeline's speed), as Whale and
//   Cannikin do, instead of extra waves.
// - Its pipelines run PipeDream-style without flushes, with weight stashing; hetsim's nearest
//   synchronous schedule is 1F1B, one pipeline flush per iteration.
// - The layer split minimises the VW's pipeline time ((M - 1) x the slowest stage + the sum of
//   the stages: amp_partition), a refinement of HetPipe's min-max that also weighs the fill and
//   drain; the memory of a stage is left to the planner's memory check, which drops splits that
//   do not fit (HetPipe's partitioner bounds each stage's memory itself). The HD (hybrid)
//   allocation is not proposed.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/policy/policy.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

// One allocation: the VWs, each its GPUs in pipeline order.
struct Allocation {
  std::string name;
  std::vector<std::vector<platform::GpuId>> workers;
};

class HetPipe final : public Policy {
 public:
  const char* name() const override { return "hetpipe"; }
  const char* summary() const override {
    return "virtual workers: a pipeline per GPU group, layers by GPU speed, data parallel "
           "across them (HetPipe)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const workload::Precision precision = cluster_precision(*r.cluster);
    for (const Allocation& a : allocations(*r.cluster, r.model->layers)) {
      for (int64_t mb = 1; mb <= 16; mb *= 2) {
        if (r.global_batch % mb != 0) continue;
        const int64_t total = r.global_batch / mb;
        if (total < static_cast<int64_t>(a.workers.size())) continue;
        for (const char* recompute : {"none", "full"}) {
          if (auto p = candidate(r, a, precision, mb, total, recompute))
            out.push_back(std::move(*p));
        }
      }
    }
    return out;
  }

 private:
  static std::vector<Allocation> allocations(const platform::Cluster& c, int layers) {
    std::vector<Allocation> out;
    // NP: each node one VW.
    Allocation np{"NP", {}};
    for (platform::GpuId g = 0; g < c.gpu_count(); ++g) {
      const uint32_t node = c.gpu(g).node;
      if (np.workers.size() <= node) np.workers.resize(node + 1);
      np.workers[node].push_back(g);
    }
    std::erase_if(np.workers, [](const auto& w) { return w.empty(); });
    // ED: V VWs, each with an equal share of every type's GPUs (V divides every type's count);
    // the most V that leaves each VW with at least one GPU of each type, for each order of the
    // types along the pipeline that puts the one with the most memory first (1F1B's first stage
    // holds the most activations) or keeps the cluster's order.
    const auto types = gpu_types(c);
    std::vector<Allocation> ed;
    if (types.size() > 1) {
      // Each type's GPUs, by the type's name: a stable key, not the profile's address (the map
      // is only looked up, the types taken in `types`' or `by_memory`'s order).
      std::map<std::string, std::vector<platform::GpuId>> of;
      for (platform::GpuId g = 0; g < c.gpu_count(); ++g) of[c.gpu(g).profile->name].push_back(g);
      size_t V = c.gpu_count();
      for (const auto* t : types) V = std::min(V, of[t->name].size());
      while (V > 1 && std::any_of(types.begin(), types.end(),
                                  [&](const auto* t) { return of[t->name].size() % V != 0; })) {
        --V;
      }
      std::vector<const config::GpuProfile*> by_memory = types;
      std::stable_sort(by_memory.begin(), by_memory.end(), [](const auto* a, const auto* b) {
        return a->memory_bytes > b->memory_bytes;
      });
      for (const auto& order : {types, by_memory}) {
        Allocation a{"ED", std::vector<std::vector<platform::GpuId>>(V)};
        std::string names;
        // Round robin over each type's GPUs in id order: VW v takes the type's GPUs v, v + V,
        // v + 2V, ... So a VW takes its GPUs of a type from as many nodes as it can (HetPipe's
        // ED takes one GPU from every node), and a stage's copies in the other VWs, which
        // reduce its gradients, are neighbours in id order: in one node where they can be, and
        // in node order along the ring.
        for (const auto* t : order) {
          const auto& gpus = of[t->name];
          for (size_t i = 0; i < gpus.size(); ++i) a.workers[i % V].push_back(gpus[i]);
          names += (names.empty() ? "" : " > ") + t->name;
        }
        a.name = "ED " + names;
        if (!ed.empty() && ed.front().workers == a.workers) continue;
        ed.push_back(std::move(a));
      }
    }
    out.push_back(std::move(np));
    for (Allocation& a : ed) out.push_back(std::move(a));
    // A VW needs at least one layer per stage.
    std::erase_if(out, [&](const Allocation& a) {
      return std::any_of(a.workers.begin(), a.workers.end(),
                         [&](const auto& w) { return static_cast<int>(w.size()) > layers; });
    });
    return out;
  }

  std::optional<Proposal> candidate(const Request& r, const Allocation& a,
                                    workload::Precision precision, int64_t mb, int64_t total,
                                    const char* recompute) const {
    const workload::ModelConfig& m = *r.model;
    const platform::Cluster& c = *r.cluster;
    LayerProfiler profile(r, precision, 1, mb, std::string(recompute) == "full");
    const size_t V = a.workers.size();
    // Each VW's stage costs (one GPU per stage).
    std::vector<PipelineCosts> costs(V);
    for (size_t v = 0; v < V; ++v) {
      const auto& w = a.workers[v];
      const size_t S = w.size();
      costs[v].fixed.assign(S, 0.0);
      for (size_t s = 0; s < S; ++s) {
        const LayerProfiler::Times& t = profile.of(*c.gpu(w[s]).profile);
        costs[v].cost.emplace_back(m.layers, t.layer);
        if (s == 0) costs[v].fixed[s] += t.embedding;
        if (s + 1 == S) costs[v].fixed[s] += t.head;
      }
    }
    // Shares in proportion to each VW's speed at an even share, then each VW split again for
    // its own share.
    const std::vector<int64_t> shares = speed_shares(costs, total);
    if (shares.empty()) return std::nullopt;
    double predicted = 0;
    std::string plan =
        fmt::format("micro_batch_size: {}\nsequence_length: {}\nrecompute: {}\nschedule: 1f1b\n",
                    mb, r.sequence, recompute);
    if (!r.framework.empty()) plan += "framework: " + r.framework + "\n";
    plan += "replicas:\n";
    std::string splits;
    for (size_t v = 0; v < V; ++v) {
      const PipelineSplit cut = split_pipeline(costs[v], shares[v]);
      const std::vector<int>& layers = cut.layers;
      predicted = std::max(predicted, cut.time);
      plan += fmt::format("  - micro_batches: {}\n    stages:\n", shares[v]);
      std::string split;
      for (size_t s = 0; s < layers.size(); ++s) {
        plan += fmt::format("      - {{layers: {}, devices: [{}]}}\n", layers[s], a.workers[v][s]);
        split += (split.empty() ? "" : "/") + std::to_string(layers[s]);
      }
      splits += (splits.empty() ? "" : ", ") + split;
    }
    std::string share_list;
    for (int64_t s : shares) share_list += (share_list.empty() ? "" : "/") + std::to_string(s);
    Proposal p;
    p.policy = name();
    p.label = fmt::format(
        "{}: {} virtual workers, mb {}, micro-batches {}, layers {}, recompute {} (HetPipe's "
        "partitioner: {:.4g} s of pipeline)",
        a.name, V, mb, share_list, splits, recompute, predicted);
    p.plan = fmt::format("# {} policy: {}\n", name(), p.label) + plan;
    return p;
  }
};

}  // namespace

const Policy& hetpipe_policy() {
  static const HetPipe p;
  return p;
}

}  // namespace hetsim::policy
