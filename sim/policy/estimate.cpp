// The planner's analytic estimate; see estimate.h.
#include "sim/policy/estimate.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <string_view>

#include "sim/network/collective.h"
#include "sim/network/protocol.h"
#include "sim/workload/ops.h"
#include "sim/workload/training_job.h"

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

}  // namespace

Estimator::Groups Estimator::groups(std::vector<std::vector<platform::GpuId>> ranks) const {
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
  return Groups{h.h, std::move(ranks)};
}

const Estimator::Layout& Estimator::layout(const Plan& plan) {
  const size_t R = plan.replicas.size();
  const int S = plan.stages();
  Hash h;
  h.add(plan.uniform);
  h.add(R);
  for (const workload::ReplicaPlan& rep : plan.replicas) {
    h.add(rep.stages.size());
    for (const StagePlan& st : rep.stages) {
      // The device list as bytes: std::hash over them is far quicker than a value at a time.
      h.add(std::hash<std::string_view>{}(
          std::string_view(reinterpret_cast<const char*>(st.devices.data()),
                           st.devices.size() * sizeof(platform::GpuId))));
    }
  }
  auto [it, fresh] = layouts_.try_emplace(h.h);
  Layout& l = it->second;
  if (!fresh) return l;
  // Replicas of a uniform plan on GPUs of one type are alike: one stands for all the replicas
  // of its GPU types (the data-parallel collectives still span every replica).
  std::set<std::vector<const config::GpuProfile*>> seen;
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
    l.peers.push_back(groups(std::move(peers)));
  }
  for (size_t r : l.evaluated) {
    const workload::ReplicaPlan& rep = plan.replicas[r];
    auto& tp = l.tp.emplace_back();
    for (const StagePlan& st : rep.stages) tp.push_back(groups({st.devices}));
    const auto& da = rep.stages.front().devices;
    const auto& db = rep.stages.back().devices;
    std::vector<std::vector<platform::GpuId>> pairs(std::max(da.size(), db.size()));
    for (size_t j = 0; j < pairs.size(); ++j) pairs[j] = {da[j % da.size()], db[j % db.size()]};
    l.tied.push_back(groups(std::move(pairs)));
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
  return l;
}

double Estimator::collectives_s(CommKind kind, double bytes, const Groups& g) {
  auto [it, fresh] = collectives_.try_emplace({g.key, static_cast<int>(kind), bytes}, 0.0);
  if (!fresh) return it->second;
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
  return it->second;
}

double Estimator::hop_s(uint64_t key,
                        const std::vector<std::pair<platform::GpuId, platform::GpuId>>& ends,
                        double bytes) {
  auto [it, fresh] = hops_.try_emplace(std::tuple<uint64_t, double>{key, bytes}, 0.0);
  if (!fresh) return it->second;
  network::CollectivePlan all;
  for (const auto& [a, b] : ends) {
    const auto route = cluster_.route(a, b);
    network::PlanStep step;
    for (platform::LinkId l : route) step.links.push_back({l, 1});
    network::merge_links(step.links);
    step.bytes = bytes;
    step.latency = network::step_latency(network::Algorithm::direct, network::Protocol::simple,
                                         cluster_.route_kind(route)) +
                   cluster_.route_latency(route);
    all.steps.push_back(std::move(step));
  }
  it->second = network::estimate_seconds(cluster_, all);
  return it->second;
}

double Estimator::optimizer_s(const config::GpuProfile& gpu, double params, workload::Precision p) {
  auto [it, fresh] = optimizer_.try_emplace({&gpu, params, static_cast<int>(p)}, 0.0);
  if (!fresh) return it->second;
  const workload::Op op = workload::optimizer_step(params, p);
  it->second = std::max(cost_.duration(op, gpu, p), cost_.host_time(op)).seconds();
  return it->second;
}

Estimator::Piece Estimator::piece(const std::vector<workload::Step>& steps,
                                  const config::GpuProfile& gpu, workload::Precision p,
                                  const Groups& tp) {
  // As the job builder cuts segments: kernels between collectives run as one segment taking the
  // longer of its GPU and host time; an asynchronous collective runs beside the one kernel after
  // it.
  Piece out;
  Time gpu_time, host_time;
  bool open = false;
  double overlapping = -1;  // an asynchronous collective beside the segment being cut
  bool cut_after_next = false;
  auto flush = [&] {
    if (!open) return;
    const double d = std::max(gpu_time, host_time).seconds();
    out.kernels_s += d;
    if (overlapping >= 0) out.comm_s += std::max(0.0, overlapping - d);
    overlapping = -1;
    gpu_time = host_time = Time();
    open = false;
  };
  for (const workload::Step& st : steps) {
    if (st.comm != CommKind::none) {
      flush();
      const double c = collectives_s(st.comm, st.comm_bytes, tp);
      if (overlapping >= 0) out.comm_s += overlapping;  // two in a row: no kernel between
      overlapping = -1;
      if (st.async) {
        overlapping = c;
        cut_after_next = true;
      } else {
        out.comm_s += c;
      }
      continue;
    }
    gpu_time += cost_.duration(st.op, gpu, p);
    host_time += cost_.host_time(st.op);
    open = true;
    if (cut_after_next) {
      flush();
      cut_after_next = false;
    }
  }
  flush();
  if (overlapping >= 0) out.comm_s += overlapping;
  return out;
}

const Estimator::Pieces& Estimator::pieces(const Plan& plan, const config::GpuProfile& gpu,
                                           const Groups& tp) {
  const int t = static_cast<int>(tp.ranks.front().size());
  const workload::LayerShape shape = workload::stage_shape(plan, t);
  auto [it, fresh] =
      pieces_.try_emplace({&gpu, shape.micro_batch, shape.sequence, shape.sequence_parallel,
                           shape.flash_attention, static_cast<int>(shape.precision), tp.key});
  Pieces& ps = it->second;
  if (!fresh) return ps;
  const auto p = plan.precision;
  ps.layer_f = piece(workload::layer_forward(model_, shape), gpu, p, tp);
  ps.layer_b = piece(workload::layer_backward(model_, shape), gpu, p, tp);
  ps.embedding_f = piece(workload::embedding_forward(model_, shape), gpu, p, tp);
  ps.embedding_b = piece(workload::embedding_backward(model_, shape), gpu, p, tp);
  ps.head_f = piece(workload::head_forward(model_, shape), gpu, p, tp);
  ps.head_b = piece(workload::head_backward(model_, shape), gpu, p, tp);
  ps.recompute = piece(workload::attention_recompute(model_, shape), gpu, p, tp);
  return ps;
}

Estimate Estimator::estimate(const Plan& plan) {
  if (plan.asymmetric()) return asymmetric(plan);
  const int S = plan.stages();
  const int v = plan.interleave;
  const int V = S * v;
  const size_t R = plan.replicas.size();
  const bool dp = R > 1;
  const double e = workload::element_bytes(plan.precision);
  const double grad_bytes = plan.fp32_main_grads ? 4 : e;
  const double activation =
      e * static_cast<double>(plan.micro_batch_size) * plan.sequence_length * model_.hidden;
  const workload::Framework& fw = plan.framework;
  const double per_pass = fw.host_per_pass.seconds();
  const Layout& lay = layout(plan);
  const std::vector<Groups>& peers = lay.peers;

  Estimate out;
  // Per stage: the latest end of its last backward pass over the replicas (the data-parallel
  // collectives wait for every replica), and of the replicas' end stages for the tied reduction.
  std::vector<double> end(S, 0.0);
  std::vector<double> last_backward(S, 0.0);  // one micro-batch's backward kernels of the stage
  std::vector<double> layer_backward(S, 0.0);
  for (size_t i = 0; i < lay.evaluated.size(); ++i) {
    const workload::ReplicaPlan& rep = plan.replicas[lay.evaluated[i]];
    const int m = rep.micro_batches;
    std::vector<double> w(S, 0.0), fwd(S, 0.0), bwd(S, 0.0), hop(S, 0.0);
    double once = 0;  // layered accumulation's per-layer collectives, waited for
    for (int s = 0; s + 1 < S; ++s) {
      const size_t n = std::max(rep.stages[s].devices.size(), rep.stages[s + 1].devices.size());
      hop[s] = hop_s(lay.hop_keys[i][s], lay.hops[i][s], activation / static_cast<double>(n));
    }
    for (int s = 0; s < S; ++s) {
      const StagePlan& st = rep.stages[s];
      const Pieces& ps = pieces(plan, *cluster_.gpu(st.devices.front()).profile, lay.tp[i][s]);
      // ZeRO-3: each layer's weights gathered before each use and waited for; in the backward
      // pass the gather queues behind the previous layer's gradient reduce-scatter on the one
      // data-parallel stream.
      double gather = 0, scatter = 0;
      if (dp && plan.zero_stage == 3) {
        gather = collectives_s(CommKind::allgather,
                               e * model_.layer_params() / st.tensor_parallel(), peers[s]);
        scatter =
            collectives_s(CommKind::reducescatter,
                          grad_bytes * model_.layer_params() / st.tensor_parallel(), peers[s]);
      }
      const double rc = plan.recompute == workload::Recompute::full        ? ps.layer_f.total()
                        : plan.recompute == workload::Recompute::selective ? ps.recompute.total()
                                                                           : 0.0;
      double kernels = 0;
      const double rc_kernels = plan.recompute == workload::Recompute::full ? ps.layer_f.kernels_s
                                : plan.recompute == workload::Recompute::selective
                                    ? ps.recompute.kernels_s
                                    : 0.0;
      for (int c = 0; c < v; ++c) {
        const int vs = c * S + s;
        const int layers = st.layers_of(c);
        // Layered accumulation gathers and reduce-scatters once per layer, not per micro-batch
        // (added to the pipeline below).
        const double g_mb = plan.layered ? 0 : gather, s_mb = plan.layered ? 0 : scatter;
        double f = per_pass + layers * (ps.layer_f.total() + g_mb);
        double b = per_pass + layers * (ps.layer_b.total() + rc + g_mb + s_mb);
        if (plan.layered) once = std::max(once, layers * (2 * gather + scatter));
        kernels += layers * (ps.layer_f.kernels_s + ps.layer_b.kernels_s + rc_kernels);
        if (vs == 0) {
          f += ps.embedding_f.total();
          b += ps.embedding_b.total();
          kernels += ps.embedding_f.kernels_s + ps.embedding_b.kernels_s;
        }
        if (vs == V - 1) {
          f += ps.head_f.total();
          b += ps.head_b.total();
          kernels += ps.head_f.kernels_s + ps.head_b.kernels_s;
        }
        if (fw.blocking_p2p) {
          if (vs < V - 1) f += hop[s < S - 1 ? s : 0];
          if (vs > 0) b += hop[s > 0 ? s - 1 : 0];
        }
        fwd[s] += f;
        bwd[s] += b;
      }
      w[s] = fwd[s] + bwd[s];
      // With this group's optimizer step: the busiest group's compute, no more (a bound).
      const double params = workload::group_params(model_, st, s, S);
      const double shard =
          plan.zero_stage >= 1 && dp ? plan.sharded(params, lay.evaluated[i]) : params;
      const double opt =
          optimizer_s(*cluster_.gpu(st.devices.front()).profile, shard, plan.precision);
      out.compute_s = std::max(out.compute_s, m * kernels + opt);
      layer_backward[s] = ps.layer_b.total() + rc + gather + scatter;
      last_backward[s] = bwd[s];
    }
    // The period of the steady state: the slowest stage, or two neighbours and the transfers
    // between them (1F1B's loop: a stage's forward, the next stage's forward and backward, the
    // backward's return, once per model chunk).
    double slowest = *std::max_element(w.begin(), w.end());
    for (int s = 0; s + 1 < S; ++s) slowest = std::max(slowest, (w[s] + w[s + 1]) / 2 + v * hop[s]);
    double sum = 0, hops = 0;
    for (int s = 0; s < S; ++s) sum += w[s];
    for (int s = 0; s + 1 < S; ++s) hops += 2 * hop[s];
    double pipeline;
    if (plan.schedule == workload::Schedule::gpipe) {
      const double f_max = *std::max_element(fwd.begin(), fwd.end());
      const double b_max = *std::max_element(bwd.begin(), bwd.end());
      pipeline = sum + (m - 1) * (f_max + b_max) + hops;
    } else {
      pipeline = (m - 1.0 / v) * slowest + sum / v + hops;
    }
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

  // The tied embedding's gradients, all-reduced between the end stages once both are done.
  const workload::TiedReduction tied = fw.tied_embedding_reduction;
  std::vector<double> ready = end;
  if (tied != workload::TiedReduction::none && model_.tied_embeddings && S > 1) {
    const double bytes_per = (tied == workload::TiedReduction::main_grads ? grad_bytes : e) *
                             static_cast<double>(model_.vocab) * model_.hidden;
    double worst = 0;
    for (size_t i = 0; i < lay.evaluated.size(); ++i) {
      const Groups& pairs = lay.tied[i];
      worst = std::max(worst,
                       collectives_s(CommKind::allreduce,
                                     bytes_per / static_cast<double>(pairs.ranks.size()), pairs));
    }
    const double both = std::max(end.front(), end.back()) + worst;
    ready.front() = both;
    ready.back() = both;
  }

  double iteration = 0;
  for (int s = 0; s < S; ++s) {
    const StagePlan& st = plan.replicas.front().stages[s];
    const int t = st.tensor_parallel();
    const double layer_grad = grad_bytes * model_.layer_params() / t;
    const double extra =
        grad_bytes *
        ((s == 0 ? model_.embedding_params() : 0) + (s == S - 1 ? model_.output_params() : 0)) / t;
    double finish = ready[s];
    if (dp) {
      const CommKind kind = plan.zero_stage >= 1 ? CommKind::reducescatter : CommKind::allreduce;
      if (plan.zero_stage >= 2) {
        // A reduce-scatter per layer per micro-batch, streamed beside the backward passes.
        const int m = plan.replicas.front().micro_batches;
        const double one = collectives_s(CommKind::reducescatter, layer_grad, peers[s]);
        if (plan.zero_stage == 3) {
          finish = std::max(finish, end[s] + one);  // the stream already counted per layer
        } else {
          const int per_layer = plan.layered ? 1 : m;  // reduce-scatters of each layer
          const double stream = one * st.layers * per_layer;
          const double window = layer_backward[s] * st.layers * m;
          finish = std::max(finish, end[s] + std::max(one, stream - window));
        }
      } else {
        // Buckets in the order backward fills them; the last takes the embedding and head.
        std::vector<double> buckets;
        double bucket = 0;
        for (int l = 0; l < st.layers; ++l) {
          bucket += layer_grad;
          if (bucket >= plan.bucket_bytes) {
            buckets.push_back(bucket);
            bucket = 0;
          }
        }
        bucket += extra;
        const bool overlapped = plan.gradient_reduction == workload::GradReduction::overlapped;
        double stream = overlapped ? end[s] - last_backward[s] : finish;
        double filled = stream;
        int layers_done = 0;
        for (double bytes : buckets) {
          const int layers = static_cast<int>(bytes / layer_grad + 0.5);
          layers_done += layers;
          const double issue =
              overlapped ? end[s] - last_backward[s] + layers_done * layer_backward[s] : filled;
          stream = std::max(stream, issue) + collectives_s(kind, bytes, peers[s]);
        }
        if (bucket > 0) stream = std::max(stream, finish) + collectives_s(kind, bucket, peers[s]);
        finish = std::max(finish, stream);
      }
      out.dp_exposed_s = std::max(out.dp_exposed_s, finish - ready[s]);
    }
    finish += fw.host_per_step.seconds();
    const double params = workload::group_params(model_, st, s, S);
    // The largest shard's optimizer step (state shares may differ by replica).
    double shard = plan.zero_stage >= 1 && dp ? plan.sharded(params, 0) : params;
    if (plan.zero_stage >= 1 && dp) {
      for (size_t r = 1; r < R; ++r) shard = std::max(shard, plan.sharded(params, r));
    }
    const double optimizer =
        optimizer_s(*cluster_.gpu(st.devices.front()).profile, shard, plan.precision);
    finish += optimizer;
    if (dp && (plan.zero_stage == 1 || plan.zero_stage == 2))
      finish += collectives_s(CommKind::allgather, e * params, peers[s]);
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
    // Shards: lcm of the holders' tensor-parallel degrees, shard p on rank p x t / shards of
    // each (workload::DpSync); buckets cut by the bytes per rank of the narrowest holder.
    int shards = 1, narrowest = holders.front()->tensor_parallel();
    for (const StagePlan* h : holders) {
      shards = std::lcm(shards, h->tensor_parallel());
      narrowest = std::min(narrowest, h->tensor_parallel());
    }
    std::vector<std::vector<platform::GpuId>> ranks(shards);
    for (int j = 0; j < shards; ++j) {
      for (const StagePlan* h : holders)
        ranks[j].push_back(h->devices[static_cast<size_t>(j) * h->devices.size() / shards]);
    }
    const Groups peers = groups(std::move(ranks));
    const double layer_grad = grad_bytes * model_.layer_params();  // whole layer, every shard
    double bucket = k + 1 == K ? grad_bytes * model_.output_params() : 0;
    auto flush = [&] {
      if (bucket <= 0) return;
      last_s[k] = collectives_s(kind, bucket / shards, peers);
      segment_s[k] += last_s[k];
      bucket = 0;
    };
    for (int l = cuts[k + 1] - 1; l >= cuts[k]; --l) {
      bucket += layer_grad;
      if (bucket >= plan.bucket_bytes * narrowest) flush();
    }
    if (k == 0) bucket += grad_bytes * model_.embedding_params();
    flush();
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
