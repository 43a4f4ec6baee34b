// metis: GPU types ordered along the pipeline, stage device groups, a layer split balanced by
// stage capacity, data parallelism preferred over tensor parallelism inside a stage (Um et al.,
// "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs", USENIX ATC'24;
// ../shared/reference/policies.md section 5).
//
// Metis enumerates the order of GPU types along the pipeline (every permutation), the number of
// stages and each stage's device group, and the micro-batches; inside a stage it starts from
// data parallelism over the whole group and trades it for tensor parallelism only where memory
// runs out; its layer balancer gives each stage layers in proportion to its capacity (1 / its
// per-layer time, the slowest GPU type of the stage setting the pace). Its cost model is
// (M - 1) x the slowest stage + the sum of the stages + the data-parallel all-reduce over the
// group's slowest link + the transfers between stages.
//
// hetsim proposes two kinds of plan. Staged plans (workload::Plan::staged) are Metis's own
// shape: stages of their own device-group sizes (powers of two near G / S), each with its own
// data- and tensor-parallel degrees, a mixed-type stage's micro-batch split over its groups in
// proportion to their speed (the data balancer, by largest remainder), and each stage's tensor
// degree doubled, starting from pure data parallelism, on the stage nearest to running out of
// memory until every group fits (the intra-stage step, with hetsim's memory model in place of
// Metis's profiled memory x 5); they are ranked by Metis's cost model and its best few proposed.
// Uniform plans (every stage one data and tensor degree, in the uniform form) are proposed
// beside them for every degree, with the stages' types in order; there a stage that mixes types
// runs at its slowest type's pace, and the memory model drops what cannot fit.
//
// Where hetsim's version differs: the layer balancer is exact (the split that minimises the
// slowest stage, amp_partition with the micro-batch count's weight), where Metis fills sub-layer
// units greedily and refines by swaps; a batch share is costed at its own size, not as the sum
// of its binary pieces; staged plans are proposed on clusters of more than one GPU type only.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "sim/core/error.h"
#include "sim/policy/policy.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {

class Metis final : public Policy {
 public:
  const char* name() const override { return "metis"; }
  const char* summary() const override {
    return "GPU types ordered along the pipeline, layers by stage capacity (Metis)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    if (!r.cost) return out;
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    // The types in order of first appearance (device order), and of_type[i] the GPUs of
    // types[i] in id order: indexed by that order, not keyed by the profile's address.
    std::vector<const config::GpuProfile*> types;
    std::vector<std::vector<platform::GpuId>> of_type;
    for (platform::GpuId g = 0; g < c.gpu_count(); ++g) {
      const config::GpuProfile* t = c.gpu(g).profile;
      const auto i = static_cast<size_t>(std::find(types.begin(), types.end(), t) - types.begin());
      if (i == types.size()) {
        types.push_back(t);
        of_type.emplace_back();
      }
      of_type[i].push_back(g);
    }
    const workload::Precision precision = cluster_precision(c);
    const auto G = static_cast<int>(c.gpu_count());
    std::vector<size_t> perm(types.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    do {
      const auto [order, type_order] = ordered(perm, types, of_type);
      for (int S = 1; S <= std::min(G, m.layers); S *= 2) {
        if (G % S != 0) continue;
        const int group = G / S;
        for (int tp : tensor_parallel_degrees(m, min_gpus_per_node(c))) {
          if (group % tp != 0) continue;
          const int dp = group / tp;
          if (r.global_batch % dp != 0) continue;
          for (int64_t mb : micro_batch_sizes(r.global_batch / dp)) {
            for (const char* recompute : {"none", "full"}) {
              if (auto p = candidate(r, order, type_order, precision, S, tp, dp, mb, recompute))
                out.push_back(std::move(*p));
            }
          }
        }
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
    if (types.size() > 1) staged(r, types, of_type, precision, out);
    return out;
  }

 private:
  // The GPUs type by type in the order `perm` puts the types, and that order as text (of_type[i]
  // the GPUs of types[i]).
  static std::pair<std::vector<platform::GpuId>, std::string> ordered(
      const std::vector<size_t>& perm, const std::vector<const config::GpuProfile*>& types,
      const std::vector<std::vector<platform::GpuId>>& of_type) {
    std::vector<platform::GpuId> order;
    std::string text;
    for (size_t i : perm) {
      const auto& gpus = of_type.at(i);
      order.insert(order.end(), gpus.begin(), gpus.end());
      text += (text.empty() ? "" : " > ") + types[i]->name;
    }
    return {std::move(order), std::move(text)};
  }

  // Kernel times per (tensor degree, samples, full recompute), as Metis profiles them.
  class Profiles {
   public:
    Profiles(const Request& r, workload::Precision p) : r_(r), p_(p) {}
    workload::Precision precision() const { return p_; }
    const LayerProfiler::Times& of(int tp, int64_t b, bool full, const config::GpuProfile& gpu) {
      auto& slot = profilers_[{tp, b, full}];
      if (!slot) slot = std::make_unique<LayerProfiler>(r_, p_, tp, b, full);
      return slot->of(gpu);
    }

    // A staged plan with every key but its stages (one placeholder stage), loaded once per
    // micro-batch and recompute: the candidates' memory is checked on copies of it, their
    // stages filled in, without parsing each one.
    const workload::Plan& base(int64_t mbt, bool full, const std::string& sets) {
      auto& slot = bases_[{mbt, full}];
      if (!slot) {
        const workload::ModelConfig& m = *r_.model;
        std::string text = fmt::format(
            "micro_batch_size: {}\nglobal_batch_size: {}\nsequence_length: {}\nrecompute: {}\n"
            "sequence_parallel: {}\nzero_stage: 0\n",
            mbt, r_.global_batch, r_.sequence, full ? "full" : "none",
            sequence_parallel_value(r_, true));
        if (!r_.framework.empty()) text += "framework: " + r_.framework + "\n";
        text += fmt::format("stages:\n  - {{layers: {}, devices: [0]}}\n", m.layers);
        slot = std::make_unique<workload::Plan>(
            workload::load_plan_text(text + sets, "metis", m, *r_.cluster));
        // The whole cluster's precision, not GPU 0's (a staged plan uses every GPU).
        if (slot->precision_defaulted) slot->precision = p_;
      }
      return *slot;
    }

   private:
    const Request& r_;
    workload::Precision p_;
    std::map<std::tuple<int, int64_t, bool>, std::unique_ptr<LayerProfiler>> profilers_;
    std::map<std::pair<int64_t, bool>, std::unique_ptr<workload::Plan>> bases_;
  };
  struct Ranked {
    double predicted = 0;
    Proposal proposal;
  };

  // Staged proposals: Metis's best few by its own cost model (see the file's comment).
  void staged(const Request& r, const std::vector<const config::GpuProfile*>& types,
              const std::vector<std::vector<platform::GpuId>>& of_type,
              workload::Precision precision, std::vector<Proposal>& out) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const auto G = static_cast<int>(c.gpu_count());
    const std::vector<int> degrees = tensor_parallel_degrees(m, min_gpus_per_node(c));
    const std::string sets = plan_set_lines(r.plan_sets);
    Profiles profiles(r, precision);
    // Metis's best by its prediction for each stage count, micro-batch and recompute (the
    // layouts and type orders of one such choice differ little, and the planner's replay judges
    // what Metis's model ranks): the first found first in ties.
    std::map<std::tuple<int, int64_t, bool>, Ranked> best;
    std::vector<size_t> perm(types.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    do {
      const auto [order, type_order] = ordered(perm, types, of_type);
      for (int S = 2; S <= std::min({G, m.layers, 16}); S *= 2) {
        for (const std::vector<int>& sizes : stage_sizes(G, S)) {
          for (int64_t mbt = 1; mbt <= std::min<int64_t>(r.global_batch, 64); mbt *= 2) {
            if (r.global_batch % mbt != 0) continue;
            for (const bool full : {false, true}) {
              std::optional<Ranked> x =
                  staged_candidate(r, order, type_order, sizes, mbt, full, degrees, sets, profiles);
              if (!x) continue;
              auto [it, fresh] = best.try_emplace({S, mbt, full}, *x);
              if (!fresh && x->predicted < it->second.predicted) it->second = std::move(*x);
            }
          }
        }
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
    for (auto& [key, x] : best) out.push_back(std::move(x.proposal));
  }

  // Stage sizes for S stages of G GPUs: powers of two from half to twice G / S, adding up to G
  // (Metis's device groups; at most 32 layouts), and G / S each where that is whole but not a
  // power of two.
  static std::vector<std::vector<int>> stage_sizes(int G, int S) {
    std::vector<std::vector<int>> out;
    std::vector<int> cur;
    const double even = static_cast<double>(G) / S;
    std::function<void(int)> fill = [&](int left) {
      if (out.size() >= 32) return;
      if (static_cast<int>(cur.size()) == S) {
        if (left == 0) out.push_back(cur);
        return;
      }
      for (int p = 1; p <= left; p *= 2) {
        if (p < even / 2 || p > 2 * even) continue;
        cur.push_back(p);
        fill(left - p);
        cur.pop_back();
      }
    };
    fill(G);
    if (G % S == 0 && ((G / S) & (G / S - 1)) != 0) out.emplace_back(S, G / S);
    return out;
  }

  using StageGroups = std::vector<std::vector<std::vector<platform::GpuId>>>;

  // The stage whose memory is fullest past its capacity, or -1 when every group fits; nullopt
  // when the plan cannot be read (the candidate is dropped).
  std::optional<int> fullest_stage(const Request& r, Profiles& profiles, int64_t mbt, bool full,
                                   const std::string& sets, int64_t M,
                                   const std::vector<int>& layers, const StageGroups& groups,
                                   const std::vector<std::vector<int64_t>>& shares) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const auto S = static_cast<int>(layers.size());
    int worst = -1;
    try {
      workload::Plan p = profiles.base(mbt, full, sets);
      p.replicas.assign(1, workload::ReplicaPlan{});
      p.replicas[0].micro_batches = static_cast<int>(M);
      p.dp_stages.clear();
      for (int s = 0, at = 0; s < S; ++s) {
        workload::DataParallelStage ds;
        ds.first_layer = at;
        ds.layers = layers[static_cast<size_t>(s)];
        for (const auto& g : groups[static_cast<size_t>(s)]) {
          workload::StagePlan st;
          st.first_layer = ds.first_layer;
          st.layers = ds.layers;
          st.devices = g;
          ds.groups.push_back(std::move(st));
        }
        ds.batch = shares[static_cast<size_t>(s)];
        p.replicas[0].stages.push_back(ds.groups.front());
        p.dp_stages.push_back(std::move(ds));
        at += layers[static_cast<size_t>(s)];
      }
      double worst_fill = 1;
      const std::vector<StageMemory> mem = stage_memory(m, p, c);
      for (int s = 0; s < S; ++s) {
        if (mem[static_cast<size_t>(s)].fill > worst_fill) {
          worst_fill = mem[static_cast<size_t>(s)].fill;
          worst = s;
        }
      }
    } catch (const InputError&) {
      return std::nullopt;
    }
    return worst;
  }

  // Metis's prediction of a staged plan's iteration.
  double metis_prediction(const Request& r, const Profiles& profiles, int64_t mbt, int64_t M,
                          const std::vector<int>& layers, const StageGroups& groups,
                          const std::vector<std::vector<double>>& cost,
                          const std::vector<double>& fixed, const std::vector<int>& degrees,
                          const std::vector<size_t>& degree) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const auto S = static_cast<int>(layers.size());
    // Metis's prediction: (M - 1) x the slowest stage + the sum of the stages + the largest
    // stage all-reduce over its group's slowest link + the transfers between stages.
    const double e = workload::element_bytes(profiles.precision());
    double slowest = 0, sum = 0, allreduce = 0, transfers = 0;
    for (int s = 0, at = 0; s < S; ++s) {
      double t = fixed[static_cast<size_t>(s)];
      for (int l = at; l < at + layers[static_cast<size_t>(s)]; ++l)
        t += cost[static_cast<size_t>(s)][static_cast<size_t>(l)];
      slowest = std::max(slowest, t);
      sum += t;
      const auto& gs = groups[static_cast<size_t>(s)];
      const int tp = degrees[degree[static_cast<size_t>(s)]];
      const double dp = static_cast<double>(gs.size());
      if (gs.size() > 1) {
        double bw = std::numeric_limits<double>::infinity();
        for (size_t j = 0; j + 1 < gs.size(); ++j)
          bw = std::min(bw, c.route_capacity(c.route(gs[j].front(), gs[j + 1].front())));
        const double params =
            static_cast<double>(m.layer_params()) * layers[static_cast<size_t>(s)] / tp +
            (s == 0 ? static_cast<double>(m.embedding_params()) / tp : 0.0);
        allreduce = std::max(allreduce, 2.0 * (dp - 1) / dp * e * params / bw);
      }
      if (s + 1 < S) {
        transfers += e * static_cast<double>(mbt) * r.sequence * m.hidden /
                     c.route_capacity(c.route(gs.back().front(),
                                              groups[static_cast<size_t>(s) + 1].front().front()));
      }
      at += layers[static_cast<size_t>(s)];
    }
    return static_cast<double>(M - 1) * slowest + sum + allreduce + transfers;
  }

  // One staged plan: the stages' GPUs in `order` by `sizes`, micro-batches of `mbt` samples.
  // Every stage starts at tensor degree 1; while a group does not fit, the stage nearest to its
  // memory's end doubles its degree (Metis's intra-stage step). nullopt: no degree fits.
  std::optional<Ranked> staged_candidate(const Request& r,
                                         const std::vector<platform::GpuId>& order,
                                         const std::string& type_order,
                                         const std::vector<int>& sizes, int64_t mbt, bool full,
                                         const std::vector<int>& degrees, const std::string& sets,
                                         Profiles& profiles) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const auto S = static_cast<int>(sizes.size());
    const int64_t M = r.global_batch / mbt;
    std::vector<size_t> degree(static_cast<size_t>(S), 0);  // index into `degrees`
    for (int attempt = 0; attempt < 4 * S; ++attempt) {
      // Each stage's groups (tensor-parallel groups inside one node), their GPU type and share.
      std::vector<std::vector<std::vector<platform::GpuId>>> groups(static_cast<size_t>(S));
      std::vector<std::vector<int64_t>> shares(static_cast<size_t>(S));
      std::vector<std::vector<double>> cost(static_cast<size_t>(S),
                                            std::vector<double>(static_cast<size_t>(m.layers)));
      std::vector<double> fixed(static_cast<size_t>(S), 0.0);
      size_t first = 0;
      for (int s = 0; s < S; ++s) {
        const int tp = degrees[degree[static_cast<size_t>(s)]];
        const auto size = static_cast<size_t>(sizes[static_cast<size_t>(s)]);
        if (size % static_cast<size_t>(tp) != 0) return std::nullopt;
        auto& gs = groups[static_cast<size_t>(s)];
        for (size_t a = first; a < first + size; a += static_cast<size_t>(tp)) {
          gs.emplace_back(order.begin() + static_cast<long>(a),
                          order.begin() + static_cast<long>(a) + tp);
          for (platform::GpuId g : gs.back()) {
            if (c.gpu(g).node != c.gpu(gs.back().front()).node) return std::nullopt;
          }
        }
        first += size;
        if (static_cast<int64_t>(gs.size()) > mbt) return std::nullopt;  // a sample each at least
        // The data balancer: shares in proportion to each group's speed at one sample.
        std::vector<double> speed;
        double sum = 0;
        for (const auto& g : gs) {
          speed.push_back(1 / profiles.of(tp, 1, full, *c.gpu(g.front()).profile).layer);
          sum += speed.back();
        }
        std::vector<double> exact;
        for (double v : speed) exact.push_back(static_cast<double>(mbt) * v / sum);
        shares[static_cast<size_t>(s)] = whole_shares(mbt, exact);
        // The stage runs at its slowest group's pace.
        double layer = 0, embedding = 0, head = 0;
        for (size_t j = 0; j < gs.size(); ++j) {
          const LayerProfiler::Times& t = profiles.of(tp, shares[static_cast<size_t>(s)][j], full,
                                                      *c.gpu(gs[j].front()).profile);
          layer = std::max(layer, t.layer);
          embedding = std::max(embedding, t.embedding);
          head = std::max(head, t.head);
        }
        std::fill(cost[static_cast<size_t>(s)].begin(), cost[static_cast<size_t>(s)].end(), layer);
        if (s == 0) fixed[0] += embedding;
        if (s == S - 1) fixed[static_cast<size_t>(s)] += head;
      }
      const std::vector<int> layers = amp_partition(cost, fixed, M);
      if (layers.empty()) return std::nullopt;
      // Whether every group fits; if not, the stage nearest its memory's end doubles its degree.
      const std::optional<int> fullest =
          fullest_stage(r, profiles, mbt, full, sets, M, layers, groups, shares);
      if (!fullest) return std::nullopt;
      const int worst = *fullest;
      if (worst >= 0) {
        if (degree[static_cast<size_t>(worst)] + 1 >= degrees.size()) return std::nullopt;
        ++degree[static_cast<size_t>(worst)];
        continue;
      }
      // The plan's text and label.
      std::string label_stages, yaml;
      for (int s = 0; s < S; ++s) {
        const auto& gs = groups[static_cast<size_t>(s)];
        const int tp = degrees[degree[static_cast<size_t>(s)]];
        std::string share_text;  // "3*12,7*4": 12 groups of 3 samples, then 4 of 7
        const auto& sh = shares[static_cast<size_t>(s)];
        yaml += fmt::format("  - layers: {}\n    groups:\n", layers[static_cast<size_t>(s)]);
        for (size_t j = 0, run = 1; j < gs.size(); ++j, ++run) {
          yaml += fmt::format("      - {{devices: \"{}\", batch: {}}}\n", gpu_ranges(gs[j]), sh[j]);
          if (j + 1 < gs.size() && sh[j + 1] == sh[j]) continue;
          share_text += fmt::format("{}{}", share_text.empty() ? "" : ",", sh[j]);
          if (run > 1) share_text += fmt::format("*{}", run);
          run = 0;
        }
        label_stages +=
            fmt::format("{}{} x tp {} [{}]", s == 0 ? "" : " | ", gs.size(), tp, share_text);
      }
      std::string split;
      for (int l : layers) split += (split.empty() ? "" : "/") + std::to_string(l);
      const char* recompute = full ? "full" : "none";
      std::string plan = fmt::format(
          "micro_batch_size: {}\nglobal_batch_size: {}\nsequence_length: {}\nrecompute: {}\n"
          "sequence_parallel: {}\nzero_stage: 0\n",
          mbt, r.global_batch, r.sequence, recompute, sequence_parallel_value(r, true));
      if (!r.framework.empty()) plan += "framework: " + r.framework + "\n";
      plan += "stages:\n" + yaml;
      Ranked out;
      out.predicted =
          metis_prediction(r, profiles, mbt, M, layers, groups, cost, fixed, degrees, degree);
      out.proposal.policy = name();
      out.proposal.label = fmt::format(
          "{}: staged, {} stages ({}), micro-batches {} x {}, layers {}, recompute {} (Metis "
          "predicts {:.4g} s)",
          type_order, S, label_stages, M, mbt, split, recompute, out.predicted);
      out.proposal.plan = fmt::format("# {} policy: {}\n", name(), out.proposal.label) + plan;
      return out;
    }
    return std::nullopt;
  }

  std::optional<Proposal> candidate(const Request& r, const std::vector<platform::GpuId>& order,
                                    const std::string& type_order, workload::Precision precision,
                                    int S, int tp, int dp, int64_t mb,
                                    const char* recompute) const {
    const platform::Cluster& c = *r.cluster;
    const workload::ModelConfig& m = *r.model;
    const int group = tp * dp;
    // A tensor-parallel group must sit in one node.
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < dp; ++i) {
        const size_t first = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
        for (int j = 1; j < tp; ++j) {
          if (c.gpu(order[first + j]).node != c.gpu(order[first]).node) return std::nullopt;
        }
      }
    }
    const int64_t M = r.global_batch / dp / mb;
    LayerProfiler profile(r, precision, tp, mb, std::string(recompute) == "full");
    // Per stage: the slowest type's per-layer time (its data-parallel ranks wait for it).
    std::vector<std::vector<double>> cost(S, std::vector<double>(m.layers));
    std::vector<double> fixed(S, 0.0);
    for (int s = 0; s < S; ++s) {
      double layer = 0, embedding = 0, head = 0;
      for (int i = 0; i < group; ++i) {
        const LayerProfiler::Times& t =
            profile.of(*c.gpu(order[static_cast<size_t>(s) * group + i]).profile);
        layer = std::max(layer, t.layer);
        embedding = std::max(embedding, t.embedding);
        head = std::max(head, t.head);
      }
      std::fill(cost[s].begin(), cost[s].end(), layer);
      if (s == 0) fixed[s] += embedding;
      if (s == S - 1) fixed[s] += head;
    }
    const std::vector<int> layers = amp_partition(cost, fixed, M);
    if (layers.empty()) return std::nullopt;
    // Metis' prediction: the pipeline, the gradient all-reduce of the largest stage over its
    // group's slowest link, the transfers between stages.
    const double e = workload::element_bytes(precision);
    double slowest = 0, sum = 0, allreduce = 0, transfers = 0;
    for (int s = 0, first = 0; s < S; ++s) {
      double t = fixed[s];
      for (int l = first; l < first + layers[s]; ++l) t += cost[s][l];
      slowest = std::max(slowest, t);
      sum += t;
      const double params = static_cast<double>(m.layer_params()) * layers[s] / tp +
                            (s == 0 ? static_cast<double>(m.embedding_params()) / tp : 0.0);
      if (dp > 1) {
        double bw = std::numeric_limits<double>::infinity();
        for (int i = 0; i + 1 < dp; ++i) {
          const size_t a = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
          bw = std::min(bw, c.route_capacity(c.route(order[a], order[a + tp])));
        }
        allreduce = std::max(allreduce, 2.0 * (dp - 1) / dp * e * params / bw);
      }
      if (s + 1 < S) {
        const size_t a = static_cast<size_t>(s) * group, b = a + group;
        transfers += e * static_cast<double>(mb) * r.sequence * m.hidden /
                     c.route_capacity(c.route(order[a], order[b]));
      }
      first += layers[s];
    }
    const double predicted = static_cast<double>(M - 1) * slowest + sum + allreduce + transfers;
    Proposal p;
    p.policy = name();
    std::string split;
    for (int l : layers) split += (split.empty() ? "" : "/") + std::to_string(l);
    p.label = fmt::format(
        "{}: {} stages x (dp {} x tp {}), mb {}, layers {}, recompute {} (Metis predicts {:.4g} s)",
        type_order, S, dp, tp, mb, split, recompute, predicted);
    std::vector<std::vector<std::vector<platform::GpuId>>> devices(dp);
    for (int i = 0; i < dp; ++i) {
      for (int s = 0; s < S; ++s) {
        const size_t a = static_cast<size_t>(s) * group + static_cast<size_t>(i) * tp;
        devices[i].emplace_back(order.begin() + a, order.begin() + a + tp);
      }
    }
    std::string plan = pipelines_plan(r, fmt::format("# {} policy: {}\n", name(), p.label), mb, M,
                                      recompute, tp, layers, devices);
    p.plan = std::move(plan);
    return p;
  }
};

}  // namespace

const Policy& metis_policy() {
  static const Metis p;
  return p;
}

}  // namespace hetsim::policy
