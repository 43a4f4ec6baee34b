// The planner's analytic estimate; see estimate.h.
#include "sim/policy/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "sim/network/collective.h"
#include "sim/network/protocol.h"
#include "sim/workload/job/pass_rules.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/model/ops.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::policy {

using workload::CommKind;
using workload::Plan;
using workload::StagePlan;

namespace {

network::Op to_network(CommKind k) {
  switch (k) {
    case CommKind::allgather:
      return network::Op::allgather;
    case CommKind::reducescatter:
      return network::Op::reducescatter;
    default:
      return network::Op::allreduce;
  }
}

}  // namespace

Estimator::Estimator(const workload::ModelConfig& model, const platform::Cluster& cluster,
                     const workload::CostModel& cost)
    : model_(model), cluster_(cluster), cost_(cost) {}

namespace {

// A 64-bit running hash (sim/core/hash.h). Cache keys only: two layouts would have to collide in
// 64 bits to share an entry.
using Hash = Hasher;

// Doubles as the caches' keys compare them: by their bits.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
uint64_t bits_of(double x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// A framework's host time per kernel as the caches key it: picoseconds, -1 for the cost model's.
int64_t host_key(const workload::Framework& fw) {
  return fw.host_per_kernel ? fw.host_per_kernel->ps() : -1;
}

}  // namespace

Estimator::Scan Estimator::scan(const Plan& plan) {
  // The layout as two streams of 64-bit words, each hashed by its own running hash (so that one's
  // multiplication overlaps the other's): the shape (each replica's stage count; each stage's
  // device count and first device), which says how the other stream (the stages' other devices,
  // two to a word) divides. Each step is a bijection of the running hash, so layouts that differ
  // in one word never share a key.
  constexpr uint64_t mul = 0x9fb21c651e98df25ULL;
  auto mix = [](uint64_t& h, uint64_t v) {
    h = (h ^ v) * mul;
    h ^= h >> 29;
  };
  uint64_t shape = 0x9e3779b97f4a7c15ULL, rest = 0xc2b2ae3d27d4eb4fULL;
  Scan out;
  const size_t R = plan.replicas.size();
  mix(shape, plan.uniform ? 1 : 2);
  mix(shape, R);
  const std::vector<StagePlan>& first = plan.replicas.front().stages;
  // The loop waits on memory: a search's plans seldom stay in the cache, and each stage and its
  // device list lie apart. Ask for them ahead: the stages 16 replicas (or stages) ahead, their
  // device lists 8 ahead, by when the stages have come.
  auto stages_ahead = [](const std::vector<StagePlan>& v, size_t from, size_t n) {
    for (size_t s = from; s < v.size() && s < from + n; ++s) {
      __builtin_prefetch(&v[s]);
      __builtin_prefetch(reinterpret_cast<const char*>(&v[s]) + sizeof(StagePlan) - 1);
    }
  };
  auto devices_ahead = [](const std::vector<StagePlan>& v, size_t from, size_t n) {
    for (size_t s = from; s < v.size() && s < from + n; ++s)
      __builtin_prefetch(v[s].devices.data());
  };
  for (size_t r = 0; r < 16 && r < R; ++r) stages_ahead(plan.replicas[r].stages, 0, 16);
  for (size_t r = 0; r < 8 && r < R; ++r) devices_ahead(plan.replicas[r].stages, 0, 8);
  for (size_t r = 0; r < R; ++r) {
    const workload::ReplicaPlan& rep = plan.replicas[r];
    if (r + 16 < R) stages_ahead(plan.replicas[r + 16].stages, 0, 16);
    if (r + 8 < R) devices_ahead(plan.replicas[r + 8].stages, 0, 8);
    const size_t S = rep.stages.size();
    mix(shape, S);
    const bool same_count = S == first.size();
    if (!same_count) out.asymmetric = true;
    for (size_t s = 0; s < S; ++s) {
      const StagePlan& st = rep.stages[s];
      if (s + 16 < S) stages_ahead(rep.stages, s + 16, 1);
      if (s + 8 < S) devices_ahead(rep.stages, s + 8, 1);
      const platform::GpuId* d = st.devices.data();
      const size_t k = st.devices.size();
      // Plan::asymmetric: a stage's layers or tensor-parallel degree differ from replica 0's.
      if (same_count && (st.layers != first[s].layers || k != first[s].devices.size()))
        out.asymmetric = true;
      mix(shape, uint64_t{k} << 32 | (k > 0 ? d[0] : 0));
      size_t j = 1;
      for (; j + 1 < k; j += 2) mix(rest, uint64_t{d[j]} | uint64_t{d[j + 1]} << 32);
      if (j < k) mix(rest, uint64_t{d[j]} | uint64_t{0xffffffffU} << 32);
    }
  }
  out.key = splitmix64(splitmix64(shape) ^ rest);
  return out;
}

Estimator::RankSets Estimator::rank_sets(std::vector<std::vector<platform::GpuId>> ranks) const {
  Hash h;
  h.add(ranks.size());
  for (const auto& g : ranks) {
    const uint32_t node = cluster_.gpu(g.front()).node;
    bool one_node = true;
    for (platform::GpuId x : g) one_node = one_node && cluster_.gpu(x).node == node;
    h.add(g.size());
    if (one_node) {
      h.add(~uint64_t{0});
      h.add(cluster_.node(node).type);
      for (platform::GpuId x : g) h.add(cluster_.gpu(x).local);
    } else {
      for (platform::GpuId x : g) h.add(x);
    }
  }
  return RankSets{h.h, std::move(ranks)};
}

Estimator::Layout& Estimator::layout(const Plan& plan, uint64_t key) {
  const size_t R = plan.replicas.size();
  const int S = plan.stages();
  auto [it, fresh] = layouts_.try_emplace(key);
  Layout& l = it->second;
  if (!fresh) return l;
  // Replicas of a uniform plan on GPUs of one type are alike: one stands for all the replicas
  // of its GPU types (the data-parallel collectives still span every replica).
  std::set<std::vector<const config::GpuProfile*>> seen;  // by address: only asked, never iterated
  for (size_t r = 0; r < R; ++r) {
    std::vector<const config::GpuProfile*> types;
    for (const StagePlan& st : plan.replicas[r].stages)
      types.push_back(cluster_.gpu(st.devices.front()).profile);
    if (!plan.uniform || seen.insert(std::move(types)).second) l.evaluated.push_back(r);
  }
  for (int s = 0; s < S && R > 1; ++s) {
    size_t t = 0;
    for (const workload::ReplicaPlan& rep : plan.replicas)
      t = std::max(t, rep.stages[s].devices.size());
    std::vector<std::vector<platform::GpuId>> peers(t);
    for (size_t j = 0; j < t; ++j) {
      for (const workload::ReplicaPlan& rep : plan.replicas) {
        const auto& d = rep.stages[s].devices;
        peers[j].push_back(d[j % d.size()]);
      }
    }
    l.peers.push_back(rank_sets(std::move(peers)));
  }
  for (size_t r : l.evaluated) {
    const workload::ReplicaPlan& rep = plan.replicas[r];
    auto& tp = l.tp.emplace_back();
    for (const StagePlan& st : rep.stages) tp.push_back(rank_sets({st.devices}));
    const auto& da = rep.stages.front().devices;
    const auto& db = rep.stages.back().devices;
    std::vector<std::vector<platform::GpuId>> pairs(std::max(da.size(), db.size()));
    for (size_t j = 0; j < pairs.size(); ++j) pairs[j] = {da[j % da.size()], db[j % db.size()]};
    l.tied.push_back(rank_sets(std::move(pairs)));
    // Every slice of every alike replica's transfer: they move in lockstep over shared links.
    auto& hops = l.hops.emplace_back();
    auto& keys = l.hop_keys.emplace_back();
    for (int s = 0; s + 1 < S; ++s) {
      auto& ends = hops.emplace_back();
      Hash k;
      for (size_t q = r; q < (plan.uniform ? R : r + 1); ++q) {
        const auto& a = plan.replicas[q].stages[s].devices;
        const auto& b = plan.replicas[q].stages[s + 1].devices;
        const size_t n = std::max(a.size(), b.size());
        for (size_t j = 0; j < n; ++j) {
          ends.emplace_back(a[j % a.size()], b[j % b.size()]);
          k.add(ends.back().first);
          k.add(ends.back().second);
        }
      }
      keys.push_back(k.h);
    }
  }
  // A stage of one GPU has no tensor-parallel collectives (collectives_s costs a group of one
  // rank nothing), so its pieces are the same whichever GPU of the type it is.
  // Keyed by the profiles' addresses, but only looked up and counted, never iterated: a kind's
  // number is its order of first appearance.
  std::map<std::vector<std::pair<const config::GpuProfile*, uint64_t>>, uint32_t> kinds;
  for (size_t i = 0; i < l.evaluated.size(); ++i) {
    std::vector<std::pair<const config::GpuProfile*, uint64_t>> stages;
    for (int s = 0; s < S; ++s) {
      const StagePlan& st = plan.replicas[l.evaluated[i]].stages[s];
      stages.emplace_back(cluster_.gpu(st.devices.front()).profile,
                          st.devices.size() > 1 ? l.tp[i][s].key : 0);
    }
    const auto next = static_cast<uint32_t>(kinds.size());
    l.kind.push_back(kinds.try_emplace(std::move(stages), next).first->second);
  }
  l.kinds = kinds.size();
  return l;
}

const double* Estimator::hop_values(Layout& l, const Plan& plan, double activation) {
  for (const auto& [a, v] : l.hop_values) {
    if (same_bits(a, activation)) return v.data();
  }
  const int S = plan.stages();
  std::vector<double> v;
  v.reserve(l.evaluated.size() * static_cast<size_t>(S));
  for (size_t i = 0; i < l.evaluated.size(); ++i) {
    const workload::ReplicaPlan& rep = plan.replicas[l.evaluated[i]];
    for (int s = 0; s + 1 < S; ++s) {
      const size_t n = std::max(rep.stages[s].devices.size(), rep.stages[s + 1].devices.size());
      v.push_back(hop_s(l.hop_keys[i][s], l.hops[i][s], activation / static_cast<double>(n)));
    }
    v.push_back(0.0);
  }
  l.hop_values.emplace_back(activation, std::move(v));
  return l.hop_values.back().second.data();
}

double Estimator::dp_s(Layout& l, int stage, CommKind kind, double bytes) {
  const int k = static_cast<int>(kind);
  auto is = [&](const Layout::PerStage& e) { return e.kind == k && same_bits(e.bytes, bytes); };
  size_t e = l.dp_last;
  if (e >= l.dp.size() || !is(l.dp[e])) {
    e = 0;
    while (e < l.dp.size() && !is(l.dp[e])) ++e;
    if (e == l.dp.size()) {
      l.dp.push_back(
          {k, bytes,
           std::vector<double>(l.peers.size(), std::numeric_limits<double>::quiet_NaN())});
    }
    l.dp_last = e;
  }
  double& x = l.dp[e].seconds[static_cast<size_t>(stage)];
  if (std::isnan(x)) x = collectives_s(kind, bytes, l.peers[static_cast<size_t>(stage)]);
  return x;
}

double Estimator::tied_s(Layout& l, double bytes_per) {
  for (const auto& [b, worst] : l.tied_worst) {
    if (same_bits(b, bytes_per)) return worst;
  }
  double worst = 0;
  for (const RankSets& pairs : l.tied) {
    worst =
        std::max(worst, collectives_s(CommKind::allreduce,
                                      bytes_per / static_cast<double>(pairs.ranks.size()), pairs));
  }
  l.tied_worst.emplace_back(bytes_per, worst);
  return worst;
}

bool Estimator::alike(const Plan& plan, const Layout& l, const double* hops, size_t i,
                      size_t j) const {
  if (l.kind[i] != l.kind[j]) return false;
  const workload::ReplicaPlan& a = plan.replicas[l.evaluated[i]];
  const workload::ReplicaPlan& b = plan.replicas[l.evaluated[j]];
  if (a.micro_batches != b.micro_batches || !same_bits(a.state_share, b.state_share)) return false;
  const size_t S = a.stages.size();
  for (size_t s = 0; s < S; ++s) {
    const StagePlan& x = a.stages[s];
    const StagePlan& y = b.stages[s];
    if (x.first_layer != y.first_layer || x.layers != y.layers ||
        x.devices.size() != y.devices.size() || x.chunk_layers != y.chunk_layers ||
        x.chunk_first != y.chunk_first)
      return false;
  }
  return std::memcmp(hops + i * S, hops + j * S, S * sizeof(double)) == 0;
}

double Estimator::collectives_s(CommKind kind, double bytes, const RankSets& g) {
  auto& last = last_collective_;
  if (last.key == g.key && last.kind == static_cast<int>(kind) && last.bytes == bits_of(bytes))
    return last.seconds;
  auto [it, fresh] = collectives_.try_emplace({g.key, static_cast<int>(kind), bytes}, 0.0);
  if (!fresh) {
    last = {g.key, static_cast<int>(kind), bits_of(bytes), it->second};
    return it->second;
  }
  // One plan holding every group's steps: the analytic estimate shares links among the steps
  // that run together.
  network::CollectivePlan all;
  for (const auto& ranks : g.ranks) {
    if (ranks.size() < 2) continue;
    network::CollectiveRequest req;
    req.op = to_network(kind);
    req.bytes = bytes;
    req.ranks = ranks;
    req.host_launch = false;  // queued ahead on the stream, as in the replay
    network::CollectivePlan p = network::plan_collective(cluster_, req);
    const auto base = static_cast<uint32_t>(all.steps.size());
    for (network::PlanStep& s : p.steps) {
      for (uint32_t& d : s.deps) d += base;
      all.steps.push_back(std::move(s));
    }
    all.start_delay = std::max(all.start_delay, p.start_delay);
  }
  if (!all.steps.empty()) it->second = network::estimate_seconds(cluster_, all);
  last = {g.key, static_cast<int>(kind), bits_of(bytes), it->second};
  return it->second;
}

double Estimator::hop_s(uint64_t key,
                        const std::vector<std::pair<platform::GpuId, platform::GpuId>>& ends,
                        double bytes) {
  auto [it, fresh] = hops_.try_emplace(std::tuple<uint64_t, double>{key, bytes}, 0.0);
  if (!fresh) return it->second;
  network::CollectivePlan all;
  for (const auto& [a, b] : ends) all.steps.push_back(direct_step(a, b, bytes));
  it->second = network::estimate_seconds(cluster_, all);
  return it->second;
}

network::PlanStep Estimator::direct_step(platform::GpuId a, platform::GpuId b, double bytes) const {
  const auto route = cluster_.route(a, b);
  network::PlanStep step;
  for (platform::LinkId l : route) step.links.push_back({l, 1});
  network::merge_links(step.links);
  step.bytes = bytes;
  step.latency = network::step_latency(network::Algorithm::direct, network::Protocol::simple,
                                       cluster_.route_kind(route)) +
                 cluster_.route_latency(route);
  step.max_rate_Bps = cluster_.route_flow_cap(route);
  return step;
}

double Estimator::optimizer_s(const config::GpuProfile& gpu, double params, workload::Precision p,
                              workload::Optimizer o, const workload::Framework& fw) {
  auto& last = last_optimizer_;
  const int64_t host_ps = host_key(fw);
  // Precision and optimizer in one key: 4 precisions.
  const int kind = static_cast<int>(p) + 4 * static_cast<int>(o);
  if (last.gpu == &gpu && last.params == bits_of(params) && last.precision == kind &&
      last.host_ps == host_ps)
    return last.seconds;
  auto [it, fresh] = optimizer_.try_emplace({&gpu, params, kind, host_ps}, 0.0);
  if (fresh) {
    const workload::Op op = workload::optimizer_step(params, p, o);
    it->second = std::max(cost_.duration(op, gpu, p), workload::host_time(cost_, op, fw)).seconds();
  }
  last = {&gpu, bits_of(params), kind, host_ps, it->second};
  return it->second;
}

Estimator::Piece Estimator::piece(const std::vector<workload::Step>& steps,
                                  const config::GpuProfile& gpu, workload::Precision p,
                                  const RankSets& tp, const workload::Framework& fw, double clock,
                                  std::vector<workload::PowerSegment>* power) {
  // The steps as the job builder cuts them (workload::cut_steps): each segment takes the longer
  // of its GPU and host time; a collective that overlaps the kernel after it is exposed by what
  // outlasts that kernel, any other by the whole of it.
  Piece out;
  double overlapping = -1;  // an overlapping collective not yet set against its kernel
  for (const workload::StepCut& cut : workload::cut_steps(steps)) {
    switch (cut.kind) {
      case workload::StepCut::Kind::collective: {
        const workload::Step& st = steps[cut.first];
        const double c = collectives_s(st.comm, st.comm_bytes, tp);
        if (overlapping >= 0) out.comm_s += overlapping;  // two in a row: no kernel between
        overlapping = -1;
        if (cut.overlaps) {
          overlapping = c;
        } else {
          out.comm_s += c;
        }
        break;
      }
      case workload::StepCut::Kind::kernels: {
        const double d = segment_s(steps, cut, gpu, p, fw, clock, power);
        out.kernels_s += d;
        if (overlapping >= 0) out.comm_s += std::max(0.0, overlapping - d);
        overlapping = -1;
        break;
      }
      case workload::StepCut::Kind::wait:
        break;
    }
  }
  if (overlapping >= 0) out.comm_s += overlapping;
  return out;
}

double Estimator::segment_s(const std::vector<workload::Step>& steps, const workload::StepCut& cut,
                            const config::GpuProfile& gpu, workload::Precision p,
                            const workload::Framework& fw, double clock,
                            std::vector<workload::PowerSegment>* power) const {
  Time gpu_time, host_time;
  workload::PowerSegment seg;
  for (uint32_t i = cut.first; i < cut.first + cut.count; ++i) {
    const workload::Op& op = steps[i].op;
    const bool memory = op.kind == workload::OpKind::memory;
    const Time d = clock == 1 || memory ? cost_.duration(op, gpu, p)
                                        : cost_.duration_at_clock(op, gpu, p, clock);
    gpu_time += d;
    if (power != nullptr) {
      (memory ? seg.other_s : seg.matmul_s) += d.seconds();
      if (!memory) seg.flops += workload::matmul_work(op, gpu, p);
    }
    host_time += workload::host_time(cost_, op, fw);
  }
  if (power != nullptr) {
    seg.host_s = host_time.seconds();
    power->push_back(seg);
  }
  return std::max(gpu_time, host_time).seconds();
}

const Estimator::Pieces& Estimator::pieces(const Plan& plan, const config::GpuProfile& gpu,
                                           const RankSets& tp, int64_t batch) {
  const int t = static_cast<int>(tp.ranks.front().size());
  const workload::LayerShape shape = workload::stage_shape(plan, t, batch);
  auto [it, fresh] = pieces_.try_emplace(
      {reinterpret_cast<uintptr_t>(&gpu), shape, tp.key, host_key(plan.framework)});
  Pieces& ps = it->second;
  if (!fresh) return ps;
  const auto p = plan.precision;
  // A power-capped GPU's clock, as the replay sets it (workload::power_cap), from a layer's
  // forward and backward pass: the bulk of every stage.
  double clock = 1;
  if (cost_.sustained_share(gpu, p) < 1) {
    std::vector<workload::PowerSegment> segs;
    piece(workload::layer_forward(model_, shape), gpu, p, tp, plan.framework, 1, &segs);
    piece(workload::layer_backward(model_, shape), gpu, p, tp, plan.framework, 1, &segs);
    clock =
        workload::power_clock(segs, cost_.sustained_share(gpu, p), cost_.sustained_flops(gpu, p));
  }
  auto at_clock = [&](const std::vector<workload::Step>& steps) {
    return piece(steps, gpu, p, tp, plan.framework, clock);
  };
  ps.layer_f = at_clock(workload::layer_forward(model_, shape));
  ps.layer_b = at_clock(workload::layer_backward(model_, shape));
  ps.embedding_f = at_clock(workload::embedding_forward(model_, shape));
  ps.embedding_b = at_clock(workload::embedding_backward(model_, shape));
  ps.head_f = at_clock(workload::head_forward(model_, shape));
  ps.head_b = at_clock(workload::head_backward(model_, shape));
  ps.recompute = at_clock(workload::attention_recompute(model_, shape));
  if (!model_.moe() && !model_.mla() && model_.activation == workload::Activation::swiglu)
    ps.recompute_ops = at_clock(workload::selective_op_recompute(model_, shape));
  // Whatever the framework (the cache's key does not hold gather_copy_out): one kernel.
  ps.copy_out = at_clock({workload::gather_copy_out(
      workload::element_bytes(p) * static_cast<double>(model_.layer_params()) / t)});
  return ps;
}

const Estimator::Pieces& Estimator::stage_pieces(const Plan& plan, const config::GpuProfile& gpu,
                                                 const RankSets& tp) {
  const int t = static_cast<int>(tp.ranks.front().size());
  for (const PieceMemo& m : piece_memo_) {
    if (m.gpu == &gpu && m.key == tp.key && m.t == t) return *m.pieces;
  }
  const Pieces& ps = pieces(plan, gpu, tp);
  piece_memo_.push_back({&gpu, tp.key, t, &ps});
  return ps;
}

namespace {

// What a layer runs again before its backward pass (workload::layer_rerun), as a piece: that of
// the chunk's first layer, which runs it wherever any layer does.
template <typename Pieces>
Estimator::Piece recompute_of(const Plan& plan, const Pieces& ps) {
  switch (workload::layer_rerun(plan, 0)) {
    case workload::LayerRerun::forward:
      return ps.layer_f;
    case workload::LayerRerun::attention_core:
      return ps.recompute;
    case workload::LayerRerun::selected_ops:
      return ps.recompute_ops;
    case workload::LayerRerun::nothing:
      break;
  }
  return {};
}

// The share of a chunk's `layers` that run it (workload::rerun_layers).
double recompute_share(const Plan& plan, int layers) {
  if (plan.recompute == workload::Recompute::none || layers <= 0) return 1.0;
  return workload::rerun_layers(plan, layers) / static_cast<double>(layers);
}

// One virtual stage's forward (`f`) and backward (`b`) pass of one micro-batch, its kernels
// added to `kernels`: its layers with `rc` of recompute, and ZeRO-3's collectives of each layer
// (`gather` forward and backward, `scatter` backward) on the data-parallel stream: the pass's
// first gather waited for, each later one prefetched beside the layer before it (the job
// builder's order), so a layer takes the longer of its compute and the stream's work for it;
// and what the forward (`fe`) and backward (`be`) pass run besides the layers, as the job builder
// emits them (workload::pass_ends): the embedding, the head, the framework's all-gathers of a
// received slice, its blocking sends (`send_f` to the next stage, `send_b` to the one before).
// The sums in the order the estimate has always taken them.
struct StagePass {
  double f = 0, b = 0;
};
template <typename Pieces>
StagePass stage_pass(const Pieces& ps, int layers, double per_pass, double rc, double rc_kernels,
                     double gather, double scatter, const workload::PassEnds& fe,
                     const workload::PassEnds& be, const workload::Framework& fw,
                     double pipe_gather, double send_f, double send_b, double& kernels,
                     double copy = 0) {
  StagePass out;
  const double lf = ps.layer_f.total() + copy, lb = ps.layer_b.total() + rc + copy;
  out.f = per_pass + layers * lf;
  out.b = per_pass + layers * lb;
  if (layers > 0 && (gather > 0 || scatter > 0)) {
    out.f += gather + (layers - 1) * std::max(0.0, gather - lf);
    out.b += gather + (layers - 1) * std::max(0.0, gather + scatter - lb) + scatter;
  }
  kernels += layers * (ps.layer_f.kernels_s + ps.layer_b.kernels_s + rc_kernels + 2 * copy);
  // A virtual stage holds the embedding, or the head, in both of its passes.
  if (fe.embedding) {
    out.f += ps.embedding_f.total();
    out.b += ps.embedding_b.total();
    kernels += ps.embedding_f.kernels_s + ps.embedding_b.kernels_s;
  }
  if (fe.head) {
    out.f += ps.head_f.total();
    out.b += ps.head_b.total();
    kernels += ps.head_f.kernels_s + ps.head_b.kernels_s;
  }
  out.f += fe.gathers * pipe_gather;  // none without a receive
  out.b += be.gathers * pipe_gather;
  if (fw.blocking_p2p) {
    if (fe.send) out.f += send_f;
    if (be.send) out.b += send_b;
  }
  return out;
}

// One replica's forward and backward passes of its m micro-batches, bubbles included, in closed
// form from each stage's passes of one micro-batch (`w`: forward and backward; `fwd` and `bwd`
// apart), each stage boundary's transfer (`hop`) and the model chunks per stage (`v`). The
// period of the steady state: the slowest stage, or two neighbours and the transfers between
// them (1F1B's loop: a stage's forward, the next stage's forward and backward, the backward's
// return, once per model chunk).
double pipeline_closed_form(workload::Schedule schedule, int m, int v, const std::vector<double>& w,
                            const std::vector<double>& fwd, const std::vector<double>& bwd,
                            const double* hop) {
  const int S = static_cast<int>(w.size());
  double slowest = *std::max_element(w.begin(), w.end());
  for (int s = 0; s + 1 < S; ++s) slowest = std::max(slowest, (w[s] + w[s + 1]) / 2 + v * hop[s]);
  double sum = 0, hops = 0;
  for (int s = 0; s < S; ++s) sum += w[s];
  for (int s = 0; s + 1 < S; ++s) hops += 2 * hop[s];
  if (schedule == workload::Schedule::gpipe) {
    const double f_max = *std::max_element(fwd.begin(), fwd.end());
    const double b_max = *std::max_element(bwd.begin(), bwd.end());
    return sum + (m - 1) * (f_max + b_max) + hops;
  }
  return (m - 1.0 / v) * slowest + sum / v + hops;
}

// The largest share of the sharded state over the replicas (Plan::sharded): x / R for the
// replicas without a state share, x times the largest share for the others (rounding keeps
// the order, so the largest product is the product with the largest share).
struct StateShares {
  bool even = false;  // some replica has no state share of its own
  double most = 0;    // the largest state share
};
StateShares state_shares(const Plan& plan) {
  StateShares out;
  for (const workload::ReplicaPlan& rep : plan.replicas) {
    if (rep.state_share > 0) {
      out.most = std::max(out.most, rep.state_share);
    } else {
      out.even = true;
    }
  }
  return out;
}

// The largest of the R replicas' shards of a stage's `params`.
double largest_shard(double params, const StateShares& shares, size_t R) {
  const double by_share = params * shares.most;
  const double evenly = params / static_cast<double>(R);
  return shares.even && shares.most > 0 ? std::max(evenly, by_share)
         : shares.even                  ? evenly
                                        : by_share;
}

}  // namespace

std::pair<int, Estimator::RankSets> Estimator::shard_holders(
    const std::vector<const StagePlan*>& gs) const {
  int shards = 1;
  for (const StagePlan* g : gs) shards = std::lcm(shards, g->tensor_parallel());
  std::vector<std::vector<platform::GpuId>> ranks(static_cast<size_t>(shards));
  for (int p = 0; p < shards; ++p) {
    for (const StagePlan* g : gs)
      ranks[static_cast<size_t>(p)].push_back(
          g->devices[static_cast<size_t>(p) * g->devices.size() / static_cast<size_t>(shards)]);
  }
  return std::make_pair(shards, rank_sets(std::move(ranks)));
}

std::vector<double> Estimator::staged_hops(const Plan& plan) {
  const int S = plan.stages();
  const double whole = workload::boundary_activation_bytes(model_, plan);
  const double mb = static_cast<double>(plan.micro_batch_size);
  std::vector<double> hop(static_cast<size_t>(S), 0.0);
  // The transfers from each stage to the next: every pair of peers' slices at once, sharing
  // the links they cross (a group sends to several peers, several groups to one). Each
  // boundary's slices (ends and bytes) are hashed first and estimated once.
  for (int s = 0; s + 1 < S; ++s) {
    const workload::DataParallelStage& a = plan.dp_stages[static_cast<size_t>(s)];
    const workload::DataParallelStage& b = plan.dp_stages[static_cast<size_t>(s) + 1];
    // Calls f(from, to, bytes) for every slice of the boundary.
    const std::vector<workload::SharedSamples> shared =
        workload::shared_samples(plan, static_cast<size_t>(s));
    auto slices = [&](auto&& f) {
      for (const workload::SharedSamples& x : shared) {
        const auto& da = a.groups[x.from].devices;
        const auto& db = b.groups[x.to].devices;
        const size_t n = std::max(da.size(), db.size());
        const double bytes = whole * static_cast<double>(x.samples) / mb / static_cast<double>(n);
        for (size_t q = 0; q < n; ++q) f(da[q % da.size()], db[q % db.size()], bytes);
      }
    };
    Hash h;
    slices([&](platform::GpuId x, platform::GpuId y, double bytes) {
      h.add(x);
      h.add(y);
      h.add(bits_of(bytes));
    });
    auto [it, fresh] = hops_.try_emplace(std::tuple<uint64_t, double>{h.h, -1.0}, 0.0);
    if (fresh) {
      network::CollectivePlan all;
      slices([&](platform::GpuId x, platform::GpuId y, double bytes) {
        all.steps.push_back(direct_step(x, y, bytes));
      });
      it->second = network::estimate_seconds(cluster_, all);
    }
    hop[static_cast<size_t>(s)] = it->second;
  }
  return hop;
}

Estimator::StagedPasses Estimator::staged_passes(const Plan& plan, const std::vector<double>& hop,
                                                 double& compute_s) {
  const int S = plan.stages();
  const int m = plan.micro_batches_of(0);
  const workload::Framework& fw = plan.framework;
  const double per_pass = fw.host_per_pass.seconds();
  const double whole = workload::boundary_activation_bytes(model_, plan);
  const double mb = static_cast<double>(plan.micro_batch_size);
  StagedPasses out(static_cast<size_t>(S));
  // Each stage: its slowest group's passes.
  for (int s = 0; s < S; ++s) {
    const auto si = static_cast<size_t>(s);
    const workload::DataParallelStage& ds = plan.dp_stages[si];
    for (size_t j = 0; j < ds.groups.size(); ++j) {
      const StagePlan& st = ds.groups[j];
      const config::GpuProfile& gpu = *cluster_.gpu(st.devices.front()).profile;
      const RankSets tp = rank_sets({st.devices});
      const Pieces& ps = pieces(plan, gpu, tp, ds.batch[j]);
      const double pipe_gather =
          workload::gathers_pipeline_slices(plan, st.tensor_parallel())
              ? collectives_s(CommKind::allgather, whole * static_cast<double>(ds.batch[j]) / mb,
                              tp)
              : 0.0;
      const Estimator::Piece again = recompute_of(plan, ps);
      const double rc = again.total(), rc_kernels = again.kernels_s;
      double kernels = 0;
      const double q = recompute_share(plan, st.layers);
      const int t = st.tensor_parallel();
      const StagePass pass = stage_pass(ps, st.layers, per_pass, rc * q, rc_kernels * q, 0, 0,
                                        workload::pass_ends(plan, t, s, S, true),
                                        workload::pass_ends(plan, t, s, S, false), fw, pipe_gather,
                                        hop[si], s > 0 ? hop[si - 1] : 0.0, kernels);
      const double f = pass.f, b = pass.b;
      const double opt = optimizer_s(gpu, workload::params_per_device(model_, st, s, S),
                                     plan.precision, plan.optimizer, fw);
      out.optimizer[si] = std::max(out.optimizer[si], opt);
      compute_s = std::max(compute_s, m * kernels + opt);
      out.fwd[si] = std::max(out.fwd[si], f);
      out.bwd[si] = std::max(out.bwd[si], b);
      out.layer_backward[si] = std::max(out.layer_backward[si], ps.layer_b.total() + rc);
    }
    out.w[si] = out.fwd[si] + out.bwd[si];
  }
  return out;
}

double Estimator::staged_buckets(const Plan& plan, int s, double ready, const StagedPasses& x,
                                 const std::vector<double>& end, bool tied) {
  const int S = plan.stages();
  const auto si = static_cast<size_t>(s);
  const workload::DataParallelStage& ds = plan.dp_stages[si];
  const double e = workload::element_bytes(plan.precision);
  const double grad_bytes = plan.fp32_main_grads ? 4 : e;
  const double word = static_cast<double>(model_.vocab) * model_.hidden;
  const bool overlapped = plan.gradient_reduction == workload::GradReduction::overlapped;
  std::vector<const StagePlan*> gs;
  int narrowest = ds.groups.front().tensor_parallel();
  for (const StagePlan& g : ds.groups) {
    gs.push_back(&g);
    narrowest = std::min(narrowest, g.tensor_parallel());
  }
  const auto [shards, peers] = shard_holders(gs);
  // Buckets of whole layers' gradients, cut by the narrowest group's bytes per rank, each
  // reduced in shards; the last takes the embedding and the head.
  const double layer_grad = grad_bytes * static_cast<double>(model_.layer_params());
  const double extra =
      grad_bytes *
      ((s == 0 ? static_cast<double>(model_.embedding_params()) - (tied ? word : 0.0) : 0.0) +
       (s == S - 1 ? static_cast<double>(model_.output_params()) : 0.0));
  const double finish = ready;
  double stream = overlapped ? end[si] - x.bwd[si] : finish;
  workload::GradBuckets fill;
  for (int l = 0; l < ds.layers; ++l) {
    const double full = fill.add(layer_grad, plan.bucket_bytes * narrowest);
    if (full <= 0) continue;
    const double issue = overlapped ? end[si] - x.bwd[si] + (l + 1) * x.layer_backward[si] : stream;
    stream = std::max(stream, issue) + collectives_s(CommKind::allreduce, full / shards, peers);
  }
  const double bucket = fill.close(extra);
  if (bucket > 0)
    stream = std::max(stream, finish) + collectives_s(CommKind::allreduce, bucket / shards, peers);
  return std::max(finish, stream);
}

Estimate Estimator::staged(const Plan& plan) {
  const int S = plan.stages();
  const workload::Framework& fw = plan.framework;
  const double e = workload::element_bytes(plan.precision);
  const double grad_bytes = plan.fp32_main_grads ? 4 : e;
  Estimate out;
  const std::vector<double> hop = staged_hops(plan);
  const StagedPasses x = staged_passes(plan, hop, out.compute_s);
  // The pipeline, as for one replica of a uniform plan.
  const double pipeline = pipeline_closed_form(plan.schedule, plan.micro_batches_of(0), 1, x.w,
                                               x.fwd, x.bwd, hop.data());
  out.pipeline_s = pipeline;
  std::vector<double> end(static_cast<size_t>(S), 0.0);
  double before = 0;
  for (int s = 0; s < S; ++s) {
    end[static_cast<size_t>(s)] = pipeline - before;
    before += x.bwd[static_cast<size_t>(s)] + hop[static_cast<size_t>(s)];
  }
  // The tied embedding: one all-reduce among both end stages' groups once both are done.
  const workload::TiedReduction tied = fw.tied_embedding_reduction;
  const bool staged_tied = model_.tied_embeddings && S > 1 && tied != workload::TiedReduction::none;
  const double word = static_cast<double>(model_.vocab) * model_.hidden;
  double ready_front = end.front(), ready_back = end.back();
  if (staged_tied) {
    std::vector<const StagePlan*> ends;
    for (const StagePlan& g : plan.dp_stages.front().groups) ends.push_back(&g);
    for (const StagePlan& g : plan.dp_stages.back().groups) ends.push_back(&g);
    const auto [shards, peers] = shard_holders(ends);
    const double bytes = (tied == workload::TiedReduction::main_grads ? grad_bytes : e) * word;
    const double both = std::max(end.front(), end.back()) +
                        collectives_s(CommKind::allreduce, bytes / shards, peers);
    ready_front = both;
    ready_back = both;
  }
  double iteration = 0;
  for (int s = 0; s < S; ++s) {
    const auto si = static_cast<size_t>(s);
    const double ready = s == 0 ? ready_front : s == S - 1 ? ready_back : end[si];
    double finish = ready;
    if (plan.dp_stages[si].groups.size() > 1) {
      finish = staged_buckets(plan, s, ready, x, end, staged_tied);
      out.dp_exposed_s = std::max(out.dp_exposed_s, finish - ready);
    }
    finish += fw.host_per_step.seconds() + x.optimizer[si];
    iteration = std::max(iteration, finish);
  }
  out.iteration_s = iteration;
  return out;
}

Estimator::Terms::Terms(const workload::ModelConfig& model, const Plan& p, Layout& l,
                        const double* hops)
    : plan(p),
      lay(l),
      hop_rows(hops),
      S(p.stages()),
      v(p.interleave),
      V(S * v),
      R(p.replicas.size()),
      dp(R > 1),
      e(workload::element_bytes(p.precision)),
      grad_bytes(p.fp32_main_grads ? 4 : e),
      // What a framework's pipeline gather collects (Framework::pipeline_gathers_*).
      gathered(workload::boundary_activation_bytes(model, p)),
      per_pass(p.framework.host_per_pass.seconds()),
      layer_params(model.layer_params()) {}

void Estimator::pick_replicas(const Plan& plan, const Layout& lay, const double* hop_rows) {
  // Of an explicit plan's replicas, one of each set of alike replicas (the last of each, in
  // replica order, so that the per-stage numbers the last replica leaves below are its own). A
  // replica is held against the sets of its devices' kind, the latest first and at most 8 of
  // them, so that replicas all unlike cost no more than a pass each.
  picked_.clear();
  if (!plan.uniform && reduce_replicas_) {
    constexpr size_t none = std::numeric_limits<size_t>::max();
    kind_latest_.assign(lay.kinds, none);
    kind_before_.clear();
    for (size_t i = lay.evaluated.size(); i-- > 0;) {
      size_t& latest = kind_latest_[lay.kind[i]];
      bool found = false;
      for (size_t k = latest, tries = 0; k != none && tries < 8 && !found; ++tries) {
        found = alike(plan, lay, hop_rows, i, picked_[k]);
        k = kind_before_[k];
      }
      if (found) continue;
      kind_before_.push_back(latest);
      latest = picked_.size();
      picked_.push_back(i);
    }
    std::reverse(picked_.begin(), picked_.end());
  } else {
    for (size_t i = 0; i < lay.evaluated.size(); ++i) picked_.push_back(i);
  }
}

double Estimator::stage_params(const Plan& plan, const StagePlan& st, int s) const {
  const StagePlan& f = plan.replicas.front().stages[s];
  if (&st == &f || (st.first_layer == f.first_layer && st.layers == f.layers &&
                    st.devices.size() == f.devices.size() && st.chunk_layers == f.chunk_layers &&
                    st.chunk_first == f.chunk_first))
    return params_[s];
  return workload::params_per_device(model_, st, s, plan.stages());
}

std::pair<double, double> Estimator::outer_collectives(const Terms& terms, int s, int vs,
                                                       const StagePlan& st) {
  const workload::OuterParams outer = workload::outer_params(model_, terms.S, st.tensor_parallel());
  const bool first = vs == 0, last = vs == terms.V - 1;
  const double og = terms.plan.zero_stage == 3 ? dp_s(terms.lay, s, CommKind::allgather,
                                                      terms.e * outer.weights_on(first, last))
                                               : 0.0;
  const double os =
      dp_s(terms.lay, s, CommKind::reducescatter, terms.grad_bytes * outer.grads_on(first, last));
  return {og, os};
}

void Estimator::chunk_passes(const Terms& terms, const StagePlan& st, const StageCosts& k, int s,
                             int c, double& kernels, double& once) {
  const Plan& plan = terms.plan;
  const int S = terms.S, V = terms.V, m = k.m;
  const Pieces& ps = k.ps;
  std::vector<double>& fwd = fwd_;
  std::vector<double>& bwd = bwd_;
  const int vs = c * S + s;
  const int layers = st.layers_of(c);
  const double q = recompute_share(plan, layers);
  // Layered accumulation gathers and reduce-scatters once per layer, not per micro-batch
  // (added to the pipeline below).
  const double g_mb = plan.layered ? 0 : k.gather, s_mb = plan.layered ? 0 : k.scatter;
  // Each layer's collectives prefetched beside the layer before it, as in a pass.
  if (plan.layered && layers > 0) {
    const double lf = m * ps.layer_f.total() + k.copy,
                 lb = m * (ps.layer_b.total() + k.rc * q) + k.copy;
    once = std::max(once, 2 * k.gather + k.scatter +
                              (layers - 1) * (std::max(0.0, k.gather - lf) +
                                              std::max(0.0, k.gather + k.scatter - lb)));
  }
  const int t = st.tensor_parallel();
  const StagePass pass = stage_pass(ps, layers, terms.per_pass, k.rc * q, k.rc_kernels * q, g_mb,
                                    s_mb, workload::pass_ends(plan, t, vs, V, true),
                                    workload::pass_ends(plan, t, vs, V, false), plan.framework,
                                    k.pipe_gather, k.hop[s < S - 1 ? s : 0],
                                    k.hop[s > 0 ? s - 1 : 0], kernels, plan.layered ? 0.0 : k.copy);
  // Layered: each layer's copy once per pass, not per micro-batch.
  if (plan.layered) {
    fwd[s] += layers * k.copy / m;
    bwd[s] += layers * k.copy / m;
    kernels += 2 * layers * k.copy / m;
  }
  fwd[s] += pass.f;
  bwd[s] += pass.b;
  // What lies outside the layers (the job builder's embedding and head collectives): under
  // ZeRO-3 gathered first as the forward pass starts, under ZeRO-2 and 3 its gradients
  // reduce-scattered at the end of the backward pass; once per layered pass.
  if (terms.dp && plan.zero_stage >= 2 && (vs == 0 || vs == V - 1)) {
    const auto [og, os] = outer_collectives(terms, s, vs, st);
    if (plan.layered) {
      once += og + os;
    } else {
      fwd[s] += og;
      bwd[s] += os;
    }
  }
}

void Estimator::replica_stage(const Terms& terms, size_t i, int s, Estimate& out, double& once) {
  const Plan& plan = terms.plan;
  Layout& lay = terms.lay;
  const bool dp = terms.dp;
  const workload::ReplicaPlan& rep = plan.replicas[lay.evaluated[i]];
  const int m = rep.micro_batches;
  const StagePlan& st = rep.stages[s];
  const config::GpuProfile& gpu = *cluster_.gpu(st.devices.front()).profile;
  const Pieces& ps = stage_pieces(plan, gpu, lay.tp[i][s]);
  StageCosts k{ps, m, terms.hop_rows + i * static_cast<size_t>(terms.S)};
  // The framework's all-gathers of a received pipeline slice (Framework::pipeline_gathers_*),
  // on the stage's critical path as the job builder puts them.
  k.pipe_gather = workload::gathers_pipeline_slices(plan, st.tensor_parallel())
                      ? collectives_s(CommKind::allgather, terms.gathered, lay.tp[i][s])
                      : 0.0;
  // ZeRO-3: each layer's weights gathered before each use and waited for; in the backward
  // pass the gather queues behind the previous layer's gradient reduce-scatter on the one
  // data-parallel stream.
  if (dp && plan.zero_stage == 3) {
    k.gather =
        dp_s(lay, s, CommKind::allgather, terms.e * terms.layer_params / st.tensor_parallel());
    k.scatter = dp_s(lay, s, CommKind::reducescatter,
                     terms.grad_bytes * terms.layer_params / st.tensor_parallel());
  }
  // FSDP2: each gathered layer copied out of the collective's buffer on the compute stream
  // (the job builder's zero3.copy_out), once per gather.
  k.copy = dp && plan.zero_stage == 3 && plan.framework.gather_copy_out ? ps.copy_out.total() : 0.0;
  const Estimator::Piece again = recompute_of(plan, ps);
  k.rc = again.total();
  k.rc_kernels = again.kernels_s;
  double kernels = 0;
  for (int c = 0; c < terms.v; ++c) chunk_passes(terms, st, k, s, c, kernels, once);
  w_[s] = fwd_[s] + bwd_[s];
  // With this group's optimizer step: the busiest group's compute, no more (a bound).
  const double params = stage_params(plan, st, s);
  const double shard = plan.zero_stage >= 1 && dp ? plan.sharded(params, lay.evaluated[i]) : params;
  const double opt = optimizer_s(gpu, shard, plan.precision, plan.optimizer, plan.framework);
  out.compute_s = std::max(out.compute_s, m * kernels + opt);
  layer_backward_[s] = std::max(ps.layer_b.total() + k.rc, k.gather + k.scatter);
  last_backward_[s] = bwd_[s];
}

void Estimator::replica(const Terms& terms, size_t i, Estimate& out) {
  const int S = terms.S, v = terms.v;
  const int m = terms.plan.replicas[terms.lay.evaluated[i]].micro_batches;
  std::vector<double>& fwd = fwd_;
  std::vector<double>& bwd = bwd_;
  std::vector<double>& end = end_;
  w_.assign(static_cast<size_t>(S), 0.0);
  fwd.assign(static_cast<size_t>(S), 0.0);
  bwd.assign(static_cast<size_t>(S), 0.0);
  const double* const hop = terms.hop_rows + i * static_cast<size_t>(S);
  double once = 0;  // layered accumulation's per-layer collectives, waited for
  for (int s = 0; s < S; ++s) replica_stage(terms, i, s, out, once);
  double pipeline = pipeline_closed_form(terms.plan.schedule, m, v, w_, fwd, bwd, hop);
  pipeline += once;
  out.pipeline_s = std::max(out.pipeline_s, pipeline);
  // Stage s finishes its last backward before stage s - 1 does, by one chunk's backward and
  // the transfer between them.
  double before = 0;
  for (int s = 0; s < S; ++s) {
    end[s] = std::max(end[s], pipeline - before);
    before += bwd[s] / v + hop[s];
  }
}

double Estimator::bucket_stream(const Terms& terms, int s, CommKind kind, double ready) {
  const Plan& plan = terms.plan;
  const int S = terms.S;
  const double grad_bytes = terms.grad_bytes;
  const std::vector<double>& end = end_;
  const std::vector<double>& last_backward = last_backward_;
  const std::vector<double>& layer_backward = layer_backward_;
  const StagePlan& st = plan.replicas.front().stages[s];
  const int t = st.tensor_parallel();
  const double layer_grad = grad_bytes * terms.layer_params / t;
  const double extra =
      grad_bytes * workload::outer_params(model_, S, t).grads_on(s == 0, s == S - 1);
  const double finish = ready;
  // Buckets in the order backward fills them; the last takes the embedding and head.
  const bool overlapped = plan.gradient_reduction == workload::GradReduction::overlapped;
  const double filled = overlapped ? end[s] - last_backward[s] : finish;
  double stream = filled;
  workload::GradBuckets fill;
  for (int l = 0; l < st.layers; ++l) {
    const double full = fill.add(layer_grad, plan.bucket_bytes);
    if (full <= 0) continue;
    const double issue = overlapped ? filled + (l + 1) * layer_backward[s] : filled;
    stream = std::max(stream, issue) + dp_s(terms.lay, s, kind, full);
  }
  const double bucket = fill.close(extra);
  if (bucket > 0) stream = std::max(stream, finish) + dp_s(terms.lay, s, kind, bucket);
  return std::max(finish, stream);
}

double Estimator::reduce_gradients(const Terms& terms, int s, double ready) {
  const Plan& plan = terms.plan;
  const CommKind kind = plan.zero_stage >= 1 ? CommKind::reducescatter : CommKind::allreduce;
  if (plan.zero_stage < 2) return bucket_stream(terms, s, kind, ready);
  // A reduce-scatter per layer per micro-batch, streamed beside the backward passes.
  const StagePlan& st = plan.replicas.front().stages[s];
  const double layer_grad = terms.grad_bytes * terms.layer_params / st.tensor_parallel();
  const int m = plan.replicas.front().micro_batches;
  const double one = dp_s(terms.lay, s, CommKind::reducescatter, layer_grad);
  // ZeRO-3: the stream already counted per layer.
  if (plan.zero_stage == 3) return std::max(ready, end_[s] + one);
  const int per_layer = plan.layered ? 1 : m;  // reduce-scatters of each layer
  const double stream = one * st.layers * per_layer;
  const double window = layer_backward_[s] * st.layers * m;
  return std::max(ready, end_[s] + std::max(one, stream - window));
}

Estimate Estimator::estimate(const Plan& plan) {
  if (plan.staged()) return staged(plan);
  const Scan scanned = scan(plan);
  if (scanned.asymmetric) return asymmetric(plan);
  const double e = workload::element_bytes(plan.precision);
  const double activation =
      e * static_cast<double>(plan.micro_batch_size) * plan.sequence_length * model_.hidden;
  Layout& lay = layout(plan, scanned.key);
  const double* const hop_rows = hop_values(lay, plan, activation);
  piece_memo_.clear();
  const Terms terms(model_, plan, lay, hop_rows);
  const int S = terms.S;
  const bool dp = terms.dp;
  const double grad_bytes = terms.grad_bytes;
  const workload::Framework& fw = plan.framework;
  pick_replicas(plan, lay, hop_rows);
  // Replica 0's stages' parameters (every replica's, unless their layers differ).
  const std::vector<StagePlan>& front = plan.replicas.front().stages;
  params_.resize(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) params_[s] = workload::params_per_device(model_, front[s], s, S);

  Estimate out;
  // Per stage: the latest end of its last backward pass over the replicas (the data-parallel
  // collectives wait for every replica), and of the replicas' end stages for the tied reduction.
  std::vector<double>& end = end_;
  end.assign(static_cast<size_t>(S), 0.0);
  last_backward_.assign(static_cast<size_t>(S), 0.0);
  layer_backward_.assign(static_cast<size_t>(S), 0.0);
  for (size_t i : picked_) replica(terms, i, out);

  // The tied embedding's gradients, all-reduced between the end stages once both are done.
  const workload::TiedReduction tied = fw.tied_embedding_reduction;
  double ready_front = end.front(), ready_back = end.back();
  if (tied != workload::TiedReduction::none && model_.tied_embeddings && S > 1) {
    const double bytes_per = (tied == workload::TiedReduction::main_grads ? grad_bytes : e) *
                             static_cast<double>(model_.vocab) * model_.hidden;
    const double both = std::max(end.front(), end.back()) + tied_s(lay, bytes_per);
    ready_front = both;
    ready_back = both;
  }

  const bool sharded = plan.zero_stage >= 1 && dp;
  const StateShares shares = sharded ? state_shares(plan) : StateShares{};
  double iteration = 0;
  for (int s = 0; s < S; ++s) {
    const double ready = s == 0 ? ready_front : s == S - 1 ? ready_back : end[s];
    double finish = ready;
    if (dp) {
      finish = reduce_gradients(terms, s, ready);
      out.dp_exposed_s = std::max(out.dp_exposed_s, finish - ready);
    }
    finish += fw.host_per_step.seconds();
    const double params = params_[s];
    // The largest shard's optimizer step (state shares may differ by replica).
    const double shard = sharded ? largest_shard(params, shares, terms.R) : params;
    const double optimizer = optimizer_s(*cluster_.gpu(front[s].devices.front()).profile, shard,
                                         plan.precision, plan.optimizer, fw);
    finish += optimizer;
    if (dp && (plan.zero_stage == 1 || plan.zero_stage == 2))
      finish += dp_s(lay, s, CommKind::allgather, e * params);
    iteration = std::max(iteration, finish);
  }
  out.iteration_s = iteration;
  return out;
}

Estimate Estimator::asymmetric(const Plan& plan) {
  // Each replica alone: its passes, bubbles, tied reduction, host step and optimizer (ZeRO is
  // off for asymmetric plans, so the optimizer does not depend on the other replicas).
  Estimate out;
  double alone = 0;
  // One micro-batch's backward pass through the shortest of the pipelines (two thirds of its
  // forward and backward): what an overlapped reduction can hide under the last backward pass.
  double window = std::numeric_limits<double>::infinity();
  Plan one = plan;
  for (const workload::ReplicaPlan& rep : plan.replicas) {
    one.replicas = {rep};
    const Estimate e = estimate(one);
    alone = std::max(alone, e.iteration_s);
    out.compute_s = std::max(out.compute_s, e.compute_s);
    out.pipeline_s = std::max(out.pipeline_s, e.pipeline_s);
    one.replicas.front().micro_batches = 1;
    window = std::min(window, 2.0 / 3.0 * estimate(one).pipeline_s);
  }
  // Each layer segment's gradient buckets, as the job builder cuts them, over the segment's
  // holders (rank j of each). A group reduces its segments one after the other, top first:
  // overlapped, what the last backward pass does not hide, and at least its last bucket; after
  // the backward pass, all of them. Left out: the stages' streams sharing a node's NIC.
  const double e = workload::element_bytes(plan.precision);
  const double grad_bytes = plan.fp32_main_grads ? 4 : e;
  const bool overlapped = plan.gradient_reduction == workload::GradReduction::overlapped;
  const CommKind kind = CommKind::allreduce;
  const std::vector<int> cuts = workload::layer_segments(plan, model_.layers);
  const size_t K = cuts.size() - 1;
  std::vector<double> segment_s(K, 0.0), last_s(K, 0.0);
  for (size_t k = 0; k < K; ++k) {
    std::vector<const StagePlan*> holders;
    for (const workload::ReplicaPlan& rep : plan.replicas) {
      size_t s = 0;
      while (rep.stages[s].first_layer + rep.stages[s].layers <= cuts[k]) ++s;
      holders.push_back(&rep.stages[s]);
    }
    // Shards over the holders (shard_holders); buckets cut by the bytes per rank of the
    // narrowest holder.
    int narrowest = holders.front()->tensor_parallel();
    for (const StagePlan* h : holders) narrowest = std::min(narrowest, h->tensor_parallel());
    const std::pair<int, RankSets> held = shard_holders(holders);
    const int shards = held.first;
    const RankSets& peers = held.second;
    const double layer_grad = grad_bytes * model_.layer_params();  // whole layer, every shard
    const double size = plan.bucket_bytes * narrowest;
    auto reduce = [&](double bytes) {
      if (bytes <= 0) return;
      last_s[k] = collectives_s(kind, bytes / shards, peers);
      segment_s[k] += last_s[k];
    };
    // The head's gradients open the last segment's first bucket, as in the replay.
    workload::GradBuckets fill;
    if (k + 1 == K) reduce(fill.add(grad_bytes * model_.output_params(), size));
    for (int l = cuts[k + 1] - 1; l >= cuts[k]; --l) reduce(fill.add(layer_grad, size));
    reduce(fill.close(k == 0 ? grad_bytes * model_.embedding_params() : 0));
  }
  for (const workload::ReplicaPlan& rep : plan.replicas) {
    for (const StagePlan& st : rep.stages) {
      double stream = 0, last = 0;
      for (size_t k = 0; k < K; ++k) {
        if (cuts[k] < st.first_layer || cuts[k] >= st.first_layer + st.layers) continue;
        stream += segment_s[k];
        if (last == 0) last = last_s[k];  // the stage's lowest segment comes last
      }
      const double exposed = overlapped ? std::max(last, stream - window) : stream;
      out.dp_exposed_s = std::max(out.dp_exposed_s, exposed);
    }
  }
  out.iteration_s = alone + out.dp_exposed_s;
  return out;
}

}  // namespace hetsim::policy
