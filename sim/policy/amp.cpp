// amp: degrees by enumeration and layer cut points by a dynamic programme over AMP's own cost
// model (Li, Wang, Xing, Zhang, "AMP: Automatically Finding Model Parallel Strategies with
// Heterogeneity Awareness", NeurIPS'22; ../shared/reference/policies.md section 6).
//
// AMP enumerates (tensor, data, pipeline degree, micro-batch) with tp x dp x pp = the GPUs, keeps
// devices in rank order (no placement: tensor-parallel fastest, then data, then pipeline), and for
// each candidate chooses the layer cut points that minimise its pipeline cost
// (B - 1) x the slowest stage + the sum of the stages + the cut transfers, B the micro-batches
// per replica. A stage's time is the sum of its layers' times, each a profile weighted by the mix
// of GPU types the stage holds (AMP's `0.75 V100 + 0.25 T4`), plus a tensor-parallel term; AMP
// adds the data-parallel all-reduce of the largest stage over the slowest link. Here the profile is
// hetsim's kernel cost model (what AMP's profiler measures on real kernels), the tensor-parallel
// term the four all-reduces of a Megatron layer at the node's link rate, and the embedding and the
// head fixed on the first and last stage. Each candidate is proposed with AMP's own prediction in
// its label; the planner replays all of them. Where hetsim's version differs: hetsim also offers
// each candidate with full recomputation (AMP's runs had none), so that large models can fit; and
// the programme keeps the Pareto front of (slowest stage, sum) per state, which is exact, where
// AMP's code bounds the search, and among splits of equal cost takes the most even one (AMP's
// tie is arbitrary).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "sim/core/hash.h"
#include "sim/policy/policy.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/model/ops.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

// For stages s.. holding layers i.., the Pareto front of (slowest stage, sum of stages), each
// point with the end of stage s's layers: points[s][first[s][i] .. first[s][i + 1]). It does
// not depend on the micro-batch count, which only weighs the two in the final choice.
struct AmpPoint {
  double max = 0, sum = 0;
  double squares = 0;  // sum of the stages' squared times: among equal costs, the most even
  uint32_t cut = 0;    // stage s holds layers [i, cut)
  uint32_t child = 0;  // the point of stage s + 1's front at `cut` it continues with
};
struct AmpFronts {
  std::vector<std::vector<AmpPoint>> points;
  std::vector<std::vector<uint32_t>> first;
  size_t size = 0;  // points in all
};

AmpFronts amp_fronts(const std::vector<std::vector<double>>& cost,
                     const std::vector<double>& fixed) {
  const size_t S = cost.size(), L = cost.front().size();
  // prefix[s * (L + 1) + l]: the first l layers' cost on stage s.
  std::vector<double> prefix(S * (L + 1), 0.0);
  for (size_t s = 0; s < S; ++s) {
    for (size_t l = 0; l < L; ++l)
      prefix[s * (L + 1) + l + 1] = prefix[s * (L + 1) + l] + cost[s][l];
  }
  AmpFronts f;
  f.points.resize(S);
  f.first.assign(S, std::vector<uint32_t>(L + 2, 0));
  std::vector<AmpPoint> pts;
  for (size_t s = S; s-- > 0;) {
    // Stage 0 starts at layer 0; stages s..S-1 need a layer each.
    const size_t lo = s, hi = s == 0 ? 0 : L - (S - s);
    std::vector<AmpPoint>& out = f.points[s];
    std::vector<uint32_t>& at = f.first[s];
    const double* pre = prefix.data() + s * (L + 1);
    for (size_t i = 0; i <= L; ++i) {
      at[i] = static_cast<uint32_t>(out.size());
      if (i < lo || i > hi) continue;
      pts.clear();
      if (s + 1 == S) {
        const double t = pre[L] - pre[i] + fixed[s];
        pts.push_back({t, t, t * t, static_cast<uint32_t>(L), 0});
      } else {
        const std::vector<AmpPoint>& next = f.points[s + 1];
        const std::vector<uint32_t>& nat = f.first[s + 1];
        for (size_t j = i + 1; j <= L - (S - s - 1); ++j) {
          const double t = pre[j] - pre[i] + fixed[s];
          for (uint32_t k = nat[j]; k < nat[j + 1]; ++k) {
            const AmpPoint& n = next[k];
            pts.push_back({std::max(t, n.max), t + n.sum, t * t + n.squares,
                           static_cast<uint32_t>(j), k - nat[j]});
          }
        }
      }
      // Keep the points no other beats on both.
      std::sort(pts.begin(), pts.end(), [](const AmpPoint& a, const AmpPoint& b) {
        if (a.max != b.max) return a.max < b.max;
        if (a.sum != b.sum) return a.sum < b.sum;
        return a.squares < b.squares;
      });
      const size_t begin = out.size();
      for (const AmpPoint& p : pts) {
        if (out.size() == begin || p.sum < out.back().sum) out.push_back(p);
      }
    }
    at[L + 1] = static_cast<uint32_t>(out.size());
    f.size += out.size();
  }
  return f;
}

// The fronts of the last costs asked for. A search asks for the same pipeline's split at many
// micro-batch counts and from several policies (GPT-3 175B on 1024 A100: 3464 calls, 432
// distinct); the fronts are kept per thread, up to 32 MiB with their inputs, the exact inputs as
// keys.
const AmpFronts& cached_fronts(const std::vector<std::vector<double>>& cost,
                               const std::vector<double>& fixed) {
  struct Entry {
    uint64_t hash;
    std::vector<std::vector<double>> cost;
    std::vector<double> fixed;
    AmpFronts fronts;
  };
  struct Cache {
    std::vector<std::unique_ptr<Entry>> entries;
    size_t bytes = 0;
  };
  thread_local Cache cache;
  Hasher key;  // over the bits of every cost
  for (const auto& row : cost) {
    key.add(row.size());
    for (double x : row) key.add(x);
  }
  for (double x : fixed) key.add(x);
  const uint64_t h = key.h;
  for (const auto& e : cache.entries)
    if (e->hash == h && e->cost == cost && e->fixed == fixed) return e->fronts;
  AmpFronts f = amp_fronts(cost, fixed);
  const size_t bytes =
      f.size * sizeof(AmpPoint) + (cost.size() * cost.front().size() + fixed.size()) * 8;
  if (cache.bytes + bytes > (size_t{32} << 20)) {
    cache.entries.clear();
    cache.bytes = 0;
  }
  cache.bytes += bytes;
  cache.entries.push_back(std::make_unique<Entry>(Entry{h, cost, fixed, std::move(f)}));
  return cache.entries.back()->fronts;
}

}  // namespace

std::vector<int> amp_partition(const std::vector<std::vector<double>>& cost,
                               const std::vector<double>& fixed, int64_t micro_batches) {
  const size_t S = cost.size();
  const size_t L = S ? cost.front().size() : 0;
  if (S == 0 || L < S) return {};
  const AmpFronts& f = cached_fronts(cost, fixed);
  const double b1 = static_cast<double>(micro_batches - 1);
  const AmpPoint* best = nullptr;
  for (uint32_t k = f.first[0][0]; k < f.first[0][1]; ++k) {
    const AmpPoint& p = f.points[0][k];
    const double cost_k = b1 * p.max + p.sum;
    const double least = best ? b1 * best->max + best->sum : 0;
    if (!best || cost_k < least * (1 - 1e-12) ||
        (cost_k <= least * (1 + 1e-12) && p.squares < best->squares))
      best = &p;
  }
  if (!best) return {};
  // Follow the chosen point's cuts.
  std::vector<int> layers;
  size_t i = 0;
  const AmpPoint* p = best;
  for (size_t s = 0; s < S; ++s) {
    layers.push_back(static_cast<int>(p->cut - i));
    i = p->cut;
    if (s + 1 < S) p = &f.points[s + 1][f.first[s + 1][i] + p->child];
  }
  return layers;
}

namespace {

class Amp final : public Policy {
 public:
  const char* name() const override { return "amp"; }
  const char* summary() const override {
    return "degrees by enumeration, layer cut points by AMP's dynamic programme (AMP)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const auto G = static_cast<int>(c.gpu_count());
    const workload::Precision precision = cluster_precision(c);
    const double e = workload::element_bytes(precision);
    for (int tp : tensor_parallel_degrees(m, min_gpus_per_node(c))) {
      for (int pp = 1; pp <= m.layers && tp * pp <= G; ++pp) {
        if (G % (tp * pp) != 0) continue;
        const int dp = G / (tp * pp);
        if (r.global_batch % dp != 0) continue;
        for (int64_t mb : micro_batch_sizes(r.global_batch / dp)) {
          if (mb > 16) continue;
          const int64_t B = r.global_batch / dp / mb;
          for (const char* recompute : {"none", "full"}) {
            if (auto p = candidate(r, tp, pp, dp, mb, B, recompute, precision, e)) {
              out.push_back(std::move(*p));
            }
          }
        }
      }
    }
    return out;
  }

 private:
  // Stage s's devices in rank order: tensor-parallel fastest, then data, then pipeline.
  static platform::GpuId first_device(int tp, int dp, int replica, int stage) {
    return static_cast<platform::GpuId>(tp * (replica + dp * stage));
  }

  std::optional<Proposal> candidate(const Request& r, int tp, int pp, int dp, int64_t mb, int64_t B,
                                    const char* recompute, workload::Precision precision,
                                    double e) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    // Per GPU type: a layer's forward and backward (and the recomputed forward), the embedding's
    // and the head's, as AMP's profiler would time them.
    LayerProfiler profile(r, precision, tp, mb, std::string(recompute) == "full");
    // The tensor-parallel term: a Megatron layer all-reduces its activations twice forward and
    // twice backward, at the node's link rate with the ring's 2 (t - 1) / t.
    auto tp_term = [&](platform::GpuId first) {
      if (tp == 1) return 0.0;
      const double bytes = e * static_cast<double>(mb) * r.sequence * m.hidden;
      const double bw = c.route_capacity(c.route(first, first + 1));
      return 4 * 2.0 * (tp - 1) / tp * bytes / bw;
    };
    std::vector<std::vector<double>> layer_cost(pp, std::vector<double>(m.layers));
    std::vector<double> fixed(pp, 0.0);
    double largest_stage_params = 0;
    for (int s = 0; s < pp; ++s) {
      // The stage's mix of GPU types over all its devices (every replica's), in order of first
      // appearance (so that the weighted sums below add up in an order the heap does not set).
      std::vector<std::pair<const config::GpuProfile*, int>> mix;
      for (int rep = 0; rep < dp; ++rep) {
        for (int j = 0; j < tp; ++j) {
          const config::GpuProfile* gpu = c.gpu(first_device(tp, dp, rep, s) + j).profile;
          auto it =
              std::find_if(mix.begin(), mix.end(), [&](const auto& x) { return x.first == gpu; });
          if (it == mix.end()) {
            mix.emplace_back(gpu, 1);
          } else {
            ++it->second;
          }
        }
      }
      double layer = 0, embedding = 0, head = 0;
      for (const auto& [gpu, count] : mix) {
        const LayerProfiler::Times& t = profile.of(*gpu);
        const double w = static_cast<double>(count) / (tp * dp);
        layer += w * t.layer;
        embedding += w * t.embedding;
        head += w * t.head;
      }
      layer += tp_term(first_device(tp, dp, 0, s));
      std::fill(layer_cost[s].begin(), layer_cost[s].end(), layer);
      if (s == 0) fixed[s] += embedding;
      if (s == pp - 1) fixed[s] += head;
    }
    const std::vector<int> layers = amp_partition(layer_cost, fixed, B);
    if (layers.empty()) return std::nullopt;
    // AMP's prediction: the pipeline, the cut transfers over the slowest boundary, and the
    // data-parallel all-reduce of the largest stage over the slowest link.
    double slowest = 0, sum = 0;
    for (int s = 0, first = 0; s < pp; ++s) {
      double t = fixed[s];
      for (int l = first; l < first + layers[s]; ++l) t += layer_cost[s][l];
      slowest = std::max(slowest, t);
      sum += t;
      const double params = static_cast<double>(m.layer_params()) * layers[s] / tp +
                            (s == 0 ? static_cast<double>(m.embedding_params()) / tp : 0.0);
      largest_stage_params = std::max(largest_stage_params, params);
      first += layers[s];
    }
    double cut = 0;
    double bw_cut = std::numeric_limits<double>::infinity();
    for (int s = 0; s + 1 < pp; ++s) {
      const platform::GpuId a = first_device(tp, dp, 0, s), b = first_device(tp, dp, 0, s + 1);
      bw_cut = std::min(bw_cut, c.route_capacity(c.route(a, b)));
    }
    if (pp > 1) cut = 2.0 * (pp - 1) * e * static_cast<double>(mb) * r.sequence * m.hidden / bw_cut;
    double allreduce = 0;
    if (dp > 1) {
      double bw = std::numeric_limits<double>::infinity();
      for (int rep = 0; rep + 1 < dp; ++rep) {
        bw = std::min(bw, c.route_capacity(c.route(first_device(tp, dp, rep, 0),
                                                   first_device(tp, dp, rep + 1, 0))));
      }
      allreduce = 2.0 * (dp - 1) / dp * e * largest_stage_params / bw;
    }
    const double predicted = static_cast<double>(B - 1) * slowest + sum + cut + allreduce;
    Proposal p;
    p.policy = name();
    std::string split;
    for (int l : layers) split += (split.empty() ? "" : "/") + std::to_string(l);
    p.label = fmt::format("tp {} pp {} dp {} mb {} layers {} recompute {} (AMP predicts {:.4g} s)",
                          tp, pp, dp, mb, split, recompute, predicted);
    std::vector<std::vector<std::vector<platform::GpuId>>> devices(dp);
    for (int rep = 0; rep < dp; ++rep) {
      for (int s = 0; s < pp; ++s) {
        const platform::GpuId a = first_device(tp, dp, rep, s);
        auto& d = devices[rep].emplace_back();
        for (int j = 0; j < tp; ++j) d.push_back(a + j);
      }
    }
    std::string plan = pipelines_plan(r, fmt::format("# {} policy: {}\n", name(), p.label), mb, B,
                                      recompute, tp, layers, devices);
    p.plan = std::move(plan);
    return p;
  }
};

}  // namespace

const Policy& amp_policy() {
  static const Amp p;
  return p;
}

}  // namespace hetsim::policy
