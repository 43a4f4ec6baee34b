// Builds the per-group programs of one iteration; see training_job.h.
#include "sim/workload/training_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "sim/core/error.h"
#include "sim/workload/cnn.h"

namespace hetsim::workload {

std::vector<ScheduleItem> stage_schedule(Schedule s, int stage, int stages, int m, int chunks,
                                         int group) {
  std::vector<ScheduleItem> out;
  const int p = stages;
  auto F = [&](int mb, int c) {
    out.push_back({true, static_cast<uint32_t>(mb), static_cast<uint16_t>(c)});
  };
  auto B = [&](int mb, int c) {
    out.push_back({false, static_cast<uint32_t>(mb), static_cast<uint16_t>(c)});
  };
  if (s == Schedule::gpipe) {
    for (int i = 0; i < m; ++i) F(i, 0);
    for (int i = 0; i < m; ++i) B(i, 0);
    return out;
  }
  if (s == Schedule::one_f_one_b) {
    const int warmup = std::min(p - stage - 1, m);
    for (int i = 0; i < warmup; ++i) F(i, 0);
    for (int i = 0; i < m - warmup; ++i) {
      F(warmup + i, 0);
      B(i, 0);
    }
    for (int i = m - warmup; i < m; ++i) B(i, 0);
    return out;
  }
  // Interleaved 1F1B (Narayanan et al. SC'21; Megatron-LM's schedule): virtual micro-batch k
  // runs chunk (k mod nv) / n forward and the mirror chunk backward, in groups of n micro-batches
  // (Megatron-LM's microbatch_group_size_per_vp_stage, p by default; Llama 3's N).
  const int v = chunks, total = m * v, n = group > 0 ? group : p;
  auto mb_of = [&](int k) { return (k / (n * v)) * n + k % n; };
  auto chunk_fwd = [&](int k) { return (k % (n * v)) / n; };
  auto chunk_bwd = [&](int k) { return v - 1 - (k % (n * v)) / n; };
  const int warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * n, total);
  for (int k = 0; k < warmup; ++k) F(mb_of(k), chunk_fwd(k));
  for (int i = 0; i < total - warmup; ++i) {
    F(mb_of(warmup + i), chunk_fwd(warmup + i));
    B(mb_of(i), chunk_bwd(i));
  }
  for (int k = total - warmup; k < total; ++k) B(mb_of(k), chunk_bwd(k));
  return out;
}

namespace {

class GroupBuilder {
 public:
  GroupBuilder(Group& g, const ModelConfig& m, const Plan& p, const CostModel& cost,
               const LayerShape& shape)
      : g_(g), m_(m), p_(p), cost_(cost), shape_(shape) {}

  // Steps -> tasks, merging consecutive kernels; cached by name (the shapes never change within
  // a group).
  const std::vector<Task>& piece(const std::string& name, const std::vector<Step>& steps) {
    auto it = pieces_.find(name);
    if (it != pieces_.end()) return it->second;
    std::vector<Task> tasks;
    Segment seg;
    Time host;
    auto flush = [&] {
      if (seg.ops.empty()) return;
      seg.duration = std::max(seg.duration, host);  // host-bound runs of small kernels
      seg.host = host;
      host = Time();
      Task t;
      t.kind = TaskKind::compute;
      t.index = static_cast<uint32_t>(g_.segments.size());
      g_.segments.push_back(std::move(seg));
      seg = Segment{};
      tasks.push_back(t);
    };
    bool wait_after_next = false;
    for (const Step& st : steps) {
      if (st.comm != CommKind::none) {
        flush();
        Task t;
        t.kind = st.expert ? TaskKind::ep_comm : st.context ? TaskKind::cp_comm : TaskKind::tp_comm;
        t.index = static_cast<uint32_t>(g_.comms.size());
        CommTemplate& ct = g_.comms.emplace_back(
            CommTemplate{st.comm, st.comm_bytes, st.async && !st.expert, st.op.name});
        ct.expert = st.expert;
        ct.context = st.context;
        tasks.push_back(t);
        wait_after_next = st.async && !st.expert;
        continue;
      }
      const Time d = cost_.duration(st.op, *g_.gpu, p_.precision);
      g_.ops.push_back(st.op);
      seg.ops.emplace_back(static_cast<uint32_t>(g_.ops.size() - 1), d);
      seg.duration += d;
      host += host_time(cost_, st.op, p_.framework);
      seg.flops += st.op.flops;
      seg.model_flops += st.op.model_flops;
      if (wait_after_next) {
        flush();
        Task w;
        w.kind = TaskKind::tp_wait;
        tasks.push_back(w);
        wait_after_next = false;
      }
    }
    flush();
    if (wait_after_next) {
      Task w;
      w.kind = TaskKind::tp_wait;
      tasks.push_back(w);
    }
    return pieces_.emplace(name, std::move(tasks)).first->second;
  }

  void emit(const std::vector<Task>& tasks, Pass pass, int layer, uint32_t mb, uint16_t chunk) {
    for (Task t : tasks) {
      t.pass = pass;
      t.layer = layer;
      t.micro_batch = mb;
      t.chunk = chunk;
      if (t.kind == TaskKind::compute) {
        const Segment& s = g_.segments[t.index];
        g_.compute_flops += s.flops;
        if (pass != Pass::recompute) g_.model_flops += s.model_flops;
      }
      g_.program.push_back(t);
    }
  }

  void emit_one(TaskKind k, Pass pass, uint32_t mb, uint16_t chunk, uint32_t index = 0) {
    Task t;
    t.kind = k;
    t.pass = pass;
    t.micro_batch = mb;
    t.chunk = chunk;
    t.index = index;
    g_.program.push_back(t);
  }

  // Host time of the framework (its pipeline engine's per-pass work, its per-step work): the
  // device waits, as for a compute segment without kernels. One segment per distinct duration.
  void host(Time d, Pass pass, uint32_t mb, uint16_t chunk) {
    if (d <= Time()) return;
    auto it = host_segments_.find(d.ps());
    if (it == host_segments_.end()) {
      Segment seg;
      seg.duration = d;
      g_.segments.push_back(std::move(seg));
      it = host_segments_.emplace(d.ps(), static_cast<uint32_t>(g_.segments.size() - 1)).first;
    }
    emit_one(TaskKind::compute, pass, mb, chunk, it->second);
  }

  // `key`: what the collective synchronises (the stage, or an asymmetric plan's layer segment);
  // the job pairs the groups' collectives of one key in order (build_training_job).
  uint32_t dp_collective(CommKind kind, double bytes, const std::string& name, uint32_t key,
                         uint32_t replicas = 0) {
    g_.dp.push_back(DpCollective{kind, bytes, name, std::nullopt, key, replicas});
    emit_one(TaskKind::dp_comm, Pass::other, 0, 0, static_cast<uint32_t>(g_.dp.size() - 1));
    return static_cast<uint32_t>(g_.dp.size());  // collectives issued so far
  }
  void dp_wait(uint32_t issued) { emit_one(TaskKind::dp_wait, Pass::other, 0, 0, issued); }

  const ModelConfig& model() const { return m_; }

 private:
  Group& g_;
  const ModelConfig& m_;
  const Plan& p_;
  const CostModel& cost_;
  LayerShape shape_;
  std::map<std::string, std::vector<Task>> pieces_;
  std::map<int64_t, uint32_t> host_segments_;  // duration (ps) -> segment
};

}  // namespace

namespace {

// Parameters of the stage's layers (every chunk's) and of their routed experts.
std::pair<double, double> stage_layer_params(const ModelConfig& model, const StagePlan& st) {
  double all = 0, experts = 0;
  const int chunks = st.chunk_layers.empty() ? 1 : static_cast<int>(st.chunk_layers.size());
  for (int c = 0; c < chunks; ++c) {
    all += static_cast<double>(model.layers_params(st.first_of(c), st.layers_of(c)));
    experts += static_cast<double>(model.layers_expert_params(st.first_of(c), st.layers_of(c)));
  }
  return {all, experts};
}

}  // namespace

double group_expert_params(const ModelConfig& model, const StagePlan& st, int ep) {
  return stage_layer_params(model, st).second / st.tensor_parallel() / ep;
}

uint32_t expert_sync_key(uint32_t rank, uint32_t stage) { return 0x80000000u | rank << 16 | stage; }

double group_params(const ModelConfig& model, const StagePlan& st, int stage, int P, int ep) {
  const int t = st.tensor_parallel();
  const auto [layers, experts] = stage_layer_params(model, st);
  const bool split_head = model.output_ranks(t) == t;
  double params = (layers - experts + experts / ep + (stage == 0 ? model.embedding_params() : 0) +
                   (stage == P - 1 && split_head ? model.output_params() : 0)) /
                  t;
  // A classifier is whole on every rank.
  if (stage == P - 1 && !split_head) params += static_cast<double>(model.output_params());
  if (stage == P - 1 && model.tied_embeddings && P > 1) {
    params += static_cast<double>(model.vocab) * model.hidden / t;  // the output copy
  }
  return params;
}

TrainingJob skeleton_job(const ModelConfig& model, const Plan& plan,
                         const platform::Cluster& cluster) {
  TrainingJob job;
  job.model = &model;
  job.plan = &plan;
  job.cluster = &cluster;
  job.chunks = plan.interleave;
  job.activation_bytes_per_transfer = boundary_activation_bytes(model, plan);
  auto add = [&](size_t r, int s) {
    const StagePlan& st = plan.stage_plan(r, static_cast<size_t>(s));
    const int P = plan.stages(r);
    Group g;
    g.replica = static_cast<uint32_t>(r);
    g.stage = static_cast<uint32_t>(s);
    g.micro_batches = static_cast<uint32_t>(plan.micro_batches_of(r));
    g.batch = plan.batch_of(r, static_cast<size_t>(s));
    g.devices = st.devices;
    g.gpu = cluster.gpu(st.devices.front()).profile;
    g.params = group_params(model, st, s, P, plan.expert_group_replicas());
    g.expert_params = group_expert_params(model, st, plan.expert_group_replicas());
    job.groups.push_back(std::move(g));
  };
  if (plan.staged()) {
    job.first_group.push_back(0);
    for (int s = 0; s < plan.stages(); ++s) {
      for (size_t j = 0; j < plan.data_parallel_of(static_cast<size_t>(s)); ++j) add(j, s);
    }
  } else {
    for (size_t r = 0; r < plan.replicas.size(); ++r) {
      job.first_group.push_back(static_cast<uint32_t>(job.groups.size()));
      for (int s = 0; s < plan.stages(r); ++s) add(r, s);
    }
  }
  job.first_group.push_back(static_cast<uint32_t>(job.groups.size()));
  return job;
}

double tied_pair_bytes(const TrainingJob& job, uint32_t replica) {
  const Group& a = job.group(replica, 0);
  const Group& b = job.group(replica, job.stages_of(replica) - 1);
  const size_t n = std::max(a.devices.size(), b.devices.size());
  return a.tied_bytes * static_cast<double>(a.devices.size()) / static_cast<double>(n);
}

namespace {

// Pairs the groups' data-parallel collectives into DpSyncs: the k-th collective a group issues
// under a key (DpCollective::sync holds the key until now) runs with every other group's k-th
// under that key. Each must then have one member per replica, all of one kind and size: anything
// else is a plan the loader should have refused, and would hang the replay.
void pair_dp_collectives(TrainingJob& job) {
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> by_key;  // (key, k) -> sync
  // Groups that share their collectives (identical replicas) and pair them alike keep sharing
  // them: by the shared list, its paired copy and that copy's syncs.
  std::map<const void*, std::vector<std::pair<std::vector<uint32_t>, SharedVector<DpCollective>>>>
      paired;
  std::vector<uint32_t> syncs;
  for (uint32_t g = 0; g < job.groups.size(); ++g) {
    std::map<uint32_t, uint32_t> k;
    syncs.clear();
    for (uint32_t i = 0; i < job.groups[g].dp.size(); ++i) {
      const DpCollective& dc = job.groups[g].dp[i];
      const auto [it, fresh] =
          by_key.try_emplace({dc.sync, k[dc.sync]++}, static_cast<uint32_t>(job.dp_syncs.size()));
      if (fresh) job.dp_syncs.emplace_back();
      DpSync& sync = job.dp_syncs[it->second];
      if (!fresh) {
        const auto [g0, i0] = sync.members.front();
        const DpCollective& first = job.groups[g0].dp[i0];
        // The same gradients: bytes per rank x ranks alike, to rounding.
        const double mine = dc.bytes * static_cast<double>(job.groups[g].devices.size());
        const double theirs = first.bytes * static_cast<double>(job.groups[g0].devices.size());
        if (first.kind != dc.kind || std::abs(mine - theirs) > 1e-9 * theirs) {
          throw RunError(fmt::format(
              "job: data-parallel collective {} of replica {} stage {} ({} bytes) does not match "
              "replica {} stage {}'s ({} bytes)",
              i, job.groups[g].replica, job.groups[g].stage, mine, job.groups[g0].replica,
              job.groups[g0].stage, theirs));
        }
      }
      sync.members.emplace_back(g, i);
      syncs.push_back(it->second);
    }
    SharedVector<DpCollective>& dp = job.groups[g].dp;
    auto& copies = paired[dp.id()];
    const auto same =
        std::find_if(copies.begin(), copies.end(), [&](const auto& c) { return c.first == syncs; });
    if (same != copies.end()) {
      dp = same->second;
      continue;
    }
    const void* id = dp.id();
    std::vector<DpCollective>& mine = dp.write();
    for (size_t i = 0; i < syncs.size(); ++i) mine[i].sync = syncs[i];
    paired[id].emplace_back(syncs, dp);
  }
  std::map<std::vector<uint32_t>, uint32_t> sets;
  for (DpSync& sync : job.dp_syncs) {
    const auto [g0, i0] = sync.members.front();
    const uint32_t among = job.groups[g0].dp[i0].replicas;
    const size_t want = among > 0 ? among : job.plan->replicas.size();
    if (sync.members.size() != want) {
      throw RunError(fmt::format(
          "job: data-parallel collective {} of replica {} stage {} has {} of {} replicas", i0,
          job.groups[g0].replica, job.groups[g0].stage, sync.members.size(), want));
    }
    std::vector<uint32_t> groups;
    uint32_t pieces = 1;
    for (const auto& [g, i] : sync.members) {
      groups.push_back(g);
      pieces = std::lcm(pieces, static_cast<uint32_t>(job.groups[g].devices.size()));
    }
    const DpCollective& first = job.groups[g0].dp[i0];
    if (first.grid) pieces = 1;  // one collective over every member's devices
    sync.pieces = pieces;
    // A grid collective's bytes are already the whole layer's (every rank holds it all).
    sync.piece_bytes = first.grid || pieces == job.groups[g0].devices.size()
                           ? first.bytes
                           : first.bytes * static_cast<double>(job.groups[g0].devices.size()) /
                                 static_cast<double>(pieces);
    const auto [it, fresh] = sets.try_emplace(groups, static_cast<uint32_t>(job.dp_peers.size()));
    if (fresh) job.dp_peers.push_back(std::move(groups));
    sync.peers = it->second;
  }
}

// The collectives calibration measured on the job's GPUs, at their rank and node counts.
void measured_collectives(TrainingJob& job, const CostModel& cost) {
  if (!cost.measures_collectives()) return;
  const platform::Cluster& c = *job.cluster;
  auto nodes = [&](const std::vector<platform::GpuId>& ranks) {
    std::set<uint32_t> n;
    for (platform::GpuId g : ranks) n.insert(c.gpu(g).node);
    return static_cast<int>(n.size());
  };
  // A table measured on one GPU type says nothing of a collective among several types.
  auto one_type = [&](const std::vector<platform::GpuId>& ranks) {
    return std::all_of(ranks.begin(), ranks.end(), [&](platform::GpuId g) {
      return c.gpu(g).profile == c.gpu(ranks.front()).profile;
    });
  };
  for (uint32_t gi = 0; gi < job.groups.size(); ++gi) {
    Group& g = job.groups[gi];
    const int tp = static_cast<int>(g.devices.size());
    for (CommTemplate& ct : g.comms.write()) {
      if (ct.expert || ct.context) {
        // Tensor-parallel rank 0 of this stage in each replica of the group (every rank, experts
        // whole).
        const std::vector<platform::GpuId> peers = job.peer_ranks(gi, ct, 0);
        if (one_type(peers))
          ct.measured = cost.collective_time(ct.kind, ct.bytes, static_cast<int>(peers.size()),
                                             nodes(peers), *g.gpu);
        continue;
      }
      ct.measured = cost.collective_time(ct.kind, ct.bytes, tp, nodes(g.devices), *g.gpu);
    }
    for (DpCollective& dc : g.dp.write()) {
      if (dc.grid) continue;  // over every rank: a table of tensor-parallel rank 0's says nothing
      const DpSync& sync = job.dp_syncs[dc.sync];
      // Shards over mixed tensor-parallel degrees: a table of one group size says nothing.
      const auto& members = job.dp_peers[sync.peers];
      if (std::any_of(members.begin(), members.end(),
                      [&](uint32_t m) { return job.groups[m].devices.size() != sync.pieces; })) {
        continue;
      }
      std::vector<platform::GpuId> peers;  // tensor-parallel rank 0's, in every member
      for (uint32_t m : members) peers.push_back(job.groups[m].devices.front());
      if (!one_type(peers)) continue;
      dc.measured = cost.collective_time(dc.kind, dc.bytes, static_cast<int>(peers.size()),
                                         nodes(peers), *g.gpu);
    }
    if (g.tied_bytes <= 0) continue;
    const Group& a = job.group(g.replica, 0);
    const Group& b = job.group(g.replica, job.stages_of(g.replica) - 1);
    if (one_type({a.devices.front(), b.devices.front()})) {
      g.tied_measured =
          cost.collective_time(CommKind::allreduce, tied_pair_bytes(job, g.replica), 2,
                               nodes({a.devices.front(), b.devices.front()}), *g.gpu);
    }
  }
}

// "a100-sxm4-80gb: measured (a100.h5) (14 kernel shapes measured, 2 beyond the table ...)":
// the tally only when it says more than the source.
void tally_sources(TrainingJob& job, const CostModel& cost) {
  std::map<std::string, std::string> type_source;  // GPU type -> where its costs come from
  std::map<std::string, std::map<std::string, std::set<std::string>>> coverage;  // -> how, shapes
  std::map<std::string, std::set<std::string>> classified;  // GPU type -> shapes seen
  std::set<std::pair<std::string, const void*>> seen_ops;   // (GPU type, shared kernels)
  for (const Group& g : job.groups) {
    type_source[g.gpu->name] = cost.source(Op{}, *g.gpu);
    // Each distinct kernel shape of a GPU type is classified once: groups of one type share
    // most of their kernels, and the lookup scans the tables. Groups that share their kernels
    // (identical replicas) are looked at once.
    if (!seen_ops.emplace(g.gpu->name, g.ops.id()).second) continue;
    for (const Op& op : g.ops) {
      const ConvShape& c = op.conv;
      const std::string shape =
          fmt::format("{}/{}/{}x{}x{}x{}/{}x{}x{}x{}/{}/{}x{}x{}x{}x{}x{}x{}x{}x{}x{}x{}", op.name,
                      static_cast<int>(op.kind), op.m, op.n, op.k, op.batch, op.heads, op.seq,
                      op.head_dim, op.causal, op.bytes, c.n, c.c, c.h, c.w, c.k, c.r, c.s, c.stride,
                      c.pad_h, c.pad_w, static_cast<int>(c.pass));
      if (classified[g.gpu->name].insert(shape).second)
        coverage[g.gpu->name][cost.coverage(op, *g.gpu, job.plan->precision)].insert(shape);
    }
  }
  for (const auto& [gpu, source] : type_source) {
    std::string line = gpu + ": " + source;
    const auto& by = coverage[gpu];
    if (!(by.size() == 1 && by.begin()->first == source)) {
      // Measured first, then beyond the table, then the rest.
      std::vector<std::pair<std::string, size_t>> ordered;
      for (const auto& [label, shapes] : by) ordered.emplace_back(label, shapes.size());
      auto rank = [](const std::string& label) {
        return label.rfind("measured", 0) == 0 ? 0 : label.rfind("beyond", 0) == 0 ? 1 : 2;
      };
      std::stable_sort(ordered.begin(), ordered.end(),
                       [&](const auto& a, const auto& b) { return rank(a.first) < rank(b.first); });
      std::string parts;
      for (const auto& [label, count] : ordered)
        parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", count, label);
      line += " (kernel shapes: " + parts + ")";
    }
    job.op_sources.push_back(line);
  }
}

// The job's groups built: close the replica list, pair the data-parallel collectives, take the
// measured ones, and tally where the kernels' costs come from.
// The power model (power_clock) over each device's compute segments, each weighted by how often
// its program runs it: the matmuls of a capped board rescaled to the clock it settles at.
void power_cap(TrainingJob& job, const CostModel& cost) {
  const Precision p = job.plan->precision;
  // Groups that share their segments and program (identical replicas) settle at one clock: the
  // first one's rescaled segments are shared by the others.
  std::map<std::tuple<const void*, const void*, const config::GpuProfile*>, uint32_t> capped;
  for (Group& g : job.groups) {
    if (g.gpu == nullptr) continue;
    const double share = cost.sustained_share(*g.gpu, p);
    if (!(share < 1)) continue;
    const auto key = std::make_tuple(g.segments.id(), g.program.id(), g.gpu);
    if (auto it = capped.find(key); it != capped.end()) {
      g.segments = job.groups[it->second].segments;
      continue;
    }
    capped.emplace(key, static_cast<uint32_t>(&g - job.groups.data()));
    std::vector<PowerSegment> segs(g.segments.size());
    for (PowerSegment& x : segs) x.count = 0;
    for (const Task& t : g.program) {
      if (t.kind == TaskKind::compute) ++segs[t.index].count;
    }
    for (size_t i = 0; i < g.segments.size(); ++i) {
      const Segment& seg = g.segments[i];
      PowerSegment& x = segs[i];
      if (seg.ops.empty())
        x.host_s = seg.duration.seconds();  // the framework's host time
      else
        x.host_s = seg.host.seconds();
      for (const auto& [op, d] : seg.ops) {
        if (g.ops[op].kind == OpKind::memory) {
          x.other_s += d.seconds();
        } else {
          x.matmul_s += d.seconds();
          x.flops += matmul_work(g.ops[op], *g.gpu, p);
        }
      }
    }
    const double clock = power_clock(segs, share, cost.sustained_flops(*g.gpu, p));
    if (clock == 1) continue;
    for (Segment& seg : g.segments.write()) {
      if (seg.ops.empty()) continue;
      Time gpu;
      for (auto& [op, d] : seg.ops) {
        if (g.ops[op].kind != OpKind::memory) {
          d = cost.duration_at_clock(g.ops[op], *g.gpu, p, clock);
        }
        gpu += d;
      }
      seg.duration = std::max(gpu, seg.host);
    }
  }
}

void finish_job(TrainingJob& job, const CostModel& cost) {
  job.first_group.push_back(static_cast<uint32_t>(job.groups.size()));
  power_cap(job, cost);
  pair_dp_collectives(job);
  measured_collectives(job, cost);
  tally_sources(job, cost);
}

// A convolutional network on a process grid (Plan::layer_splits): one group per column, every
// micro-batch through the layers forward and back, each layer's gradients reduced when its last
// backward is done (PyTorch DDP reduces in buckets; one a layer is the paper's accounting), the
// SGD step.
TrainingJob build_grid_job(const ModelConfig& model, const Plan& plan,
                           const platform::Cluster& cluster, const CostModel& cost) {
  TrainingJob job;
  job.model = &model;
  job.plan = &plan;
  job.cluster = &cluster;
  const int rows = plan.tensor_parallel;
  const std::vector<CnnLayerProgram> programs = cnn_programs(
      model, plan.layer_splits, rows, plan.micro_batch_size, plan.precision, plan.source);
  const size_t L = model.cnn.size();
  const double grad_bytes = plan.fp32_main_grads ? 4 : element_bytes(plan.precision);
  const bool columns = plan.replicas.size() > 1;
  const bool overlapped = plan.gradient_reduction == GradReduction::overlapped;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const ReplicaPlan& rep = plan.replicas[r];
    job.first_group.push_back(static_cast<uint32_t>(job.groups.size()));
    Group g;
    g.replica = static_cast<uint32_t>(r);
    g.micro_batches = static_cast<uint32_t>(rep.micro_batches);
    g.batch = plan.micro_batch_size;
    g.devices = rep.stages.front().devices;
    g.gpu = cluster.gpu(g.devices.front()).profile;
    GroupBuilder b(g, model, plan, cost, stage_shape(plan, rows));
    std::vector<const std::vector<Task>*> fwd, bwd;
    for (size_t l = 0; l <= L; ++l) {
      const std::string name = l < L ? model.cnn[l].name : std::string("loss");
      fwd.push_back(&b.piece(name + ".fwd", programs[l].forward));
      bwd.push_back(&b.piece(name + ".bwd", programs[l].backward));
      g.params += programs[l].params;
    }
    uint32_t issued = 0;
    auto reduce = [&](size_t l) {
      const CnnLayerProgram& p = programs[l];
      if (p.params <= 0 || !(columns || p.grid_gradients)) return;
      issued = b.dp_collective(CommKind::allreduce, grad_bytes * p.params,
                               model.cnn[l].name + ".grads", static_cast<uint32_t>(l));
      g.dp.write().back().grid = p.grid_gradients;
    };
    const uint32_t M = static_cast<uint32_t>(rep.micro_batches);
    for (uint32_t mb = 0; mb < M; ++mb) {
      b.host(plan.framework.host_per_pass, Pass::forward, mb, 0);
      for (size_t l = 0; l <= L; ++l)
        b.emit(*fwd[l], Pass::forward, l < L ? static_cast<int>(l) : -1, mb, 0);
      b.host(plan.framework.host_per_pass, Pass::backward, mb, 0);
      for (size_t l = L + 1; l-- > 0;) {
        b.emit(*bwd[l], Pass::backward, l < L ? static_cast<int>(l) : -1, mb, 0);
        if (l < L && mb + 1 == M && overlapped) reduce(l);
      }
    }
    if (!overlapped) {
      for (size_t l = L; l-- > 0;) reduce(l);
    }
    if (issued > 0) b.dp_wait(issued);
    b.host(plan.framework.host_per_step, Pass::other, 0, 0);
    b.emit(b.piece("optimizer", {Step{sgd_step(g.params, grad_bytes)}}), Pass::other, -1, 0, 0);
    job.groups.push_back(std::move(g));
  }
  finish_job(job, cost);
  return job;
}
}  // namespace

namespace {

// What makes two groups of a uniform plan alike: the stage, its devices' count and GPU type, its
// layers and chunks, its micro-batches and samples, its optimizer shard.
std::string alike_key(const Plan& plan, const StagePlan& st, int s, int micro_batches,
                      int64_t batch, double shard, const platform::Cluster& cluster) {
  std::string key = fmt::format("{}/{}/{}/{}/{}/{}/{}/{}", s, st.devices.size(),
                                cluster.gpu(st.devices.front()).profile->name, micro_batches, batch,
                                shard, st.first_layer, st.layers);
  for (int c = 0; c < plan.interleave; ++c)
    key += fmt::format("/{}+{}", st.first_of(c), st.layers_of(c));
  return key;
}

// Group `like` (the same stage of another replica, built alike) on replica r's devices: it shares
// the kernels, segments, program and collectives. Its expert-parallel rank only names the
// replicas its experts' gradients are reduced among: those keys are renamed.
Group alike_group(const Group& like, size_t r, const StagePlan& st, int ep,
                  const platform::Cluster& cluster) {
  Group g = like;
  const uint32_t stage = g.stage;
  const uint32_t theirs = expert_sync_key(g.replica % static_cast<uint32_t>(ep), stage);
  const uint32_t mine = expert_sync_key(static_cast<uint32_t>(r % static_cast<size_t>(ep)), stage);
  auto renamed = [&](const DpCollective& dc) { return dc.sync == theirs; };
  if (mine != theirs && std::any_of(g.dp.begin(), g.dp.end(), renamed)) {
    for (DpCollective& dc : g.dp.write())
      if (renamed(dc)) dc.sync = mine;
  }
  g.replica = static_cast<uint32_t>(r);
  g.devices = st.devices;
  g.gpu = cluster.gpu(st.devices.front()).profile;
  return g;
}

}  // namespace

TrainingJob build_training_job(const ModelConfig& model, const Plan& plan,
                               const platform::Cluster& cluster, const CostModel& cost) {
  if (model.convolutional()) return build_grid_job(model, plan, cluster, cost);
  TrainingJob job;
  job.model = &model;
  job.plan = &plan;
  job.cluster = &cluster;
  const int v = plan.interleave;
  job.chunks = v;
  // Asymmetric replicas reduce gradients by layer segment; the others stage by stage.
  const bool asymmetric = plan.asymmetric();
  const std::vector<int> cuts =
      asymmetric ? layer_segments(plan, model.layers) : std::vector<int>{};
  // Per segment, the smallest tensor-parallel degree that holds it: buckets are cut at the same
  // layers in every replica, by the bytes per rank of that holder (Megatron-LM's bucket size is
  // per rank).
  std::vector<int> min_tp(cuts.empty() ? 0 : cuts.size() - 1, 0);
  for (const ReplicaPlan& rep : plan.replicas) {
    for (const StagePlan& st : rep.stages) {
      for (size_t k = 0; k < min_tp.size(); ++k) {
        if (cuts[k] < st.first_layer || cuts[k] >= st.first_layer + st.layers) continue;
        const int t = st.tensor_parallel();
        min_tp[k] = min_tp[k] == 0 ? t : std::min(min_tp[k], t);
      }
    }
  }
  const double e = element_bytes(plan.precision);
  const double grad_bytes = plan.fp32_main_grads ? 4 : e;
  job.activation_bytes_per_transfer = boundary_activation_bytes(model, plan);
  // Mixture of experts: each MoE layer's load (routing imbalance), and whether the experts'
  // gradients are reduced apart from the rest, among the replicas of one expert-parallel rank.
  const std::vector<double> loads = model.moe() ? expert_loads(model, plan) : std::vector<double>{};
  // Replicas per expert-parallel group: each device holds 1 / (ep x t) of the routed experts,
  // split by tensor-parallel rank or (experts whole) by expert.
  const int ep = plan.expert_group_replicas();
  const bool split_experts = model.moe() && ep > 1;
  const uint32_t edp = static_cast<uint32_t>(plan.replicas.size()) / static_cast<uint32_t>(ep);
  const bool expert_sync = split_experts && edp > 1;
  // The groups to build, replica by replica (a staged plan's stage by stage).
  struct Spec {
    size_t r;
    int s;
    bool opens_replica;
  };
  std::vector<Spec> specs;
  if (plan.staged()) {
    for (int s = 0; s < plan.stages(); ++s) {
      for (size_t j = 0; j < plan.data_parallel_of(static_cast<size_t>(s)); ++j)
        specs.push_back({j, s, false});
    }
    job.first_group.push_back(0);
  } else {
    for (size_t r = 0; r < plan.replicas.size(); ++r) {
      for (int s = 0; s < plan.stages(r); ++s) specs.push_back({r, s, s == 0});
    }
  }
  const int S = plan.stages();
  // A staged plan's tied embedding: its gradients all-reduced among every group of the first
  // and the last stage at once (every copy's, the data-parallel reduction and Megatron's
  // first-last exchange in one), keyed apart from the stages'.
  const uint32_t tied_key = 0x40000000u;
  const bool staged_tied = plan.staged() && model.tied_embeddings && S > 1 &&
                           plan.framework.tied_embedding_reduction != TiedReduction::none;
  // Replicas whose stages are alike share their programs (issue 38): the first group of each kind
  // by its description.
  const bool alike = !plan.staged() && !asymmetric;
  std::map<std::string, uint32_t> built;
  for (const Spec& spec : specs) {
    const size_t r = spec.r;
    const int s = spec.s;
    const int P = plan.stages(r);
    const int V = P * v;
    const int micro_batches = plan.micro_batches_of(r);
    // The copies of this stage that reduce its gradients together (0: every replica).
    const uint32_t among =
        plan.staged() ? static_cast<uint32_t>(plan.data_parallel_of(static_cast<size_t>(s))) : 0;
    const bool dp = plan.data_parallel_of(static_cast<size_t>(s)) > 1;
    if (spec.opens_replica) job.first_group.push_back(static_cast<uint32_t>(job.groups.size()));
    {
      const StagePlan& st = plan.stage_plan(r, static_cast<size_t>(s));
      const uint32_t ep_rank = static_cast<uint32_t>(r % static_cast<size_t>(ep));
      // Sharded state: the experts' among the replicas that hold them (none beside this one
      // where expert_parallel is the data-parallel degree).
      const double params = group_params(model, st, s, P, ep);
      const double expert_params = split_experts ? group_expert_params(model, st, ep) : 0;
      const double dense_params = params - expert_params;
      const double shard =
          plan.zero_stage >= 1 && dp ? plan.sharded(dense_params, r) + expert_params / edp : params;
      // A group built like one before it is that group on its own devices (alike_group).
      std::string same;
      if (alike) {
        same = alike_key(plan, st, s, micro_batches, plan.batch_of(r, static_cast<size_t>(s)),
                         shard, cluster);
        if (auto it = built.find(same); it != built.end()) {
          job.groups.push_back(alike_group(job.groups[it->second], r, st, ep, cluster));
          continue;
        }
        built.emplace(same, static_cast<uint32_t>(job.groups.size()));
      }
      Group g;
      g.replica = static_cast<uint32_t>(r);
      g.stage = static_cast<uint32_t>(s);
      g.micro_batches = static_cast<uint32_t>(micro_batches);
      g.batch = plan.batch_of(r, static_cast<size_t>(s));
      g.devices = st.devices;
      g.gpu = cluster.gpu(st.devices.front()).profile;
      const int t = st.tensor_parallel();
      g.params = params;
      g.expert_params = group_expert_params(model, st, ep);
      const LayerShape shape = stage_shape(plan, t, g.batch);
      // A staged plan's groups cut their buckets at the same layers, by the bytes per rank of
      // the stage's narrowest group (as asymmetric replicas do by segment).
      int stage_min_tp = t;
      if (plan.staged()) {
        for (const StagePlan& x : plan.dp_stages[static_cast<size_t>(s)].groups)
          stage_min_tp = std::min(stage_min_tp, x.tensor_parallel());
      }
      // One micro-batch's boundary activation for this group's samples.
      const double act = job.activation_bytes_per_transfer * static_cast<double>(g.batch) /
                         static_cast<double>(plan.micro_batch_size);
      // Layers of each chunk: uniform plans interleave chunks over stages (Megatron).
      auto chunk_first = [&](int c) { return st.first_of(c); };
      const bool first_virtual_holder = s == 0;
      const bool last_virtual_holder = s == P - 1;
      GroupBuilder b(g, model, plan, cost, shape);
      // The dense layers' programs first (a model of MoE layers only has none).
      const std::vector<Task>* dense_fwd = nullptr;
      const std::vector<Task>* dense_bwd = nullptr;
      auto dense_pieces = [&] {
        if (!dense_fwd) {
          dense_fwd = &b.piece("layer.fwd", layer_forward(model, shape));
          dense_bwd = &b.piece("layer.bwd", layer_backward(model, shape));
        }
        return std::make_pair(dense_fwd, dense_bwd);
      };
      if (model.moe_layers_in(st.first_layer, st.layers) < st.layers || st.layers == 0)
        dense_pieces();
      const auto& ef = b.piece("embedding.fwd", embedding_forward(model, shape));
      const auto& eb = b.piece("embedding.bwd", embedding_backward(model, shape));
      const auto& hf = b.piece("head.fwd", head_forward(model, shape));
      const auto& hb = b.piece("head.bwd", head_backward(model, shape));
      // What a layer recomputes before its backward pass under selective recompute: the attention
      // core (Megatron-LM), or torchtitan's op-level policy's share of the forward pass.
      const auto& ar = plan.recompute == Recompute::selective_op
                           ? b.piece("ops.recompute", selective_op_recompute(model, shape))
                           : b.piece("attention.recompute", attention_recompute(model, shape));
      const bool partial =
          plan.recompute == Recompute::selective || plan.recompute == Recompute::selective_op;
      // The framework's all-gathers of a received pipeline slice (Framework::pipeline_gathers_*).
      std::vector<Step> gather_steps;
      if (gathers_pipeline_slices(plan, t)) {
        Step gs;
        gs.op.name = "pp.gather";
        gs.comm = CommKind::allgather;
        gs.comm_bytes = act;
        gather_steps.push_back(gs);
      }
      const auto& pg = b.piece("pipeline.gather", gather_steps);
      auto gathers = [&](int count, Pass pass, const ScheduleItem& it) {
        for (int k = 0; k < count; ++k) b.emit(pg, pass, -1, it.micro_batch, it.chunk);
      };
      // Layer l's programs: a MoE layer's by its load (layers of one load share them).
      std::map<double, std::pair<const std::vector<Task>*, const std::vector<Task>*>> moe_pieces;
      auto pieces_of = [&](int l) {
        if (!model.is_moe(l)) return dense_pieces();
        const double load = loads[static_cast<size_t>(l)];
        auto it = moe_pieces.find(load);
        if (it == moe_pieces.end()) {
          const LayerShape x = moe_shape(shape, plan, load);
          const std::string key = fmt::format("{}", load);
          it = moe_pieces
                   .emplace(load,
                            std::make_pair(&b.piece("moe.fwd/" + key, layer_forward(model, x)),
                                           &b.piece("moe.bwd/" + key, layer_backward(model, x))))
                   .first;
        }
        return it->second;
      };
      auto fwd_of = [&](int l) -> const std::vector<Task>& { return *pieces_of(l).first; };
      auto bwd_of = [&](int l) -> const std::vector<Task>& { return *pieces_of(l).second; };
      // Layer l's gradients reduced among every replica, and its routed experts' among the
      // replicas of this expert-parallel rank (with them where expert parallelism is 1).
      auto layer_grad_of = [&](int l) {
        return grad_bytes *
               static_cast<double>(model.layer_params(l) -
                                   (split_experts ? model.expert_layer_params(l) : 0)) /
               t;
      };
      auto expert_grad_of = [&](int l) {
        return split_experts
                   ? grad_bytes * static_cast<double>(model.expert_layer_params(l)) / t / ep
                   : 0.0;
      };
      auto layer_weights_of = [&](int l) {
        return e * static_cast<double>(model.layer_params(l)) / t;
      };
      const auto order =
          stage_schedule(plan.schedule, s, P, micro_batches, v, plan.microbatch_group);
      // The last backward of each chunk is where its gradients become final.
      std::vector<int> last_bwd_mb(v, -1);
      for (const ScheduleItem& it : order) {
        if (!it.forward) last_bwd_mb[it.chunk] = static_cast<int>(it.micro_batch);
      }
      // The key of layer l's gradients: its segment (asymmetric), else the stage.
      auto key_of = [&](int l) {
        if (!asymmetric) return static_cast<uint32_t>(s);
        return static_cast<uint32_t>(std::upper_bound(cuts.begin(), cuts.end(), l) - cuts.begin() -
                                     1);
      };
      double bucket = 0;
      uint32_t bucket_key = key_of(st.first_layer);
      uint32_t issued = 0;
      auto flush_bucket = [&] {
        if (!dp || bucket <= 0) return;
        issued =
            b.dp_collective(plan.zero_stage >= 1 ? CommKind::reducescatter : CommKind::allreduce,
                            bucket, "dp.grads", bucket_key, among);
        bucket = 0;
      };
      // The experts' gradients fill buckets of their own (Megatron-LM's expert-data-parallel
      // buffers).
      double expert_bucket = 0;
      auto flush_experts = [&] {
        if (!expert_sync || expert_bucket <= 0) return;
        issued = b.dp_collective(
            plan.zero_stage >= 1 ? CommKind::reducescatter : CommKind::allreduce, expert_bucket,
            "dp.expert_grads", expert_sync_key(ep_rank, static_cast<uint32_t>(s)), edp);
        expert_bucket = 0;
      };
      auto add_experts = [&](int l) {
        if (!expert_sync) return;
        expert_bucket += expert_grad_of(l);
        if (expert_bucket >= plan.bucket_bytes) flush_experts();
      };
      // ZeRO-2: each micro-batch's gradients of layer l reduce-scattered as soon as they are.
      auto scatter_layer = [&](int l, uint32_t key) {
        issued = b.dp_collective(CommKind::reducescatter, layer_grad_of(l), "zero.grads", key);
        if (expert_sync && model.is_moe(l)) {
          issued = b.dp_collective(CommKind::reducescatter, expert_grad_of(l), "zero.expert_grads",
                                   expert_sync_key(ep_rank, static_cast<uint32_t>(s)), edp);
        }
      };
      // Gradients of layer l (or of the head, with l the last layer) join the bucket; a bucket
      // holds one segment's.
      auto add = [&](int l, double bytes) {
        const uint32_t k = key_of(l);
        if (bucket > 0 && k != bucket_key) flush_bucket();
        bucket_key = k;
        bucket += bytes;
        const bool full = asymmetric      ? bucket * t >= plan.bucket_bytes * min_tp[k]
                          : plan.staged() ? bucket * t >= plan.bucket_bytes * stage_min_tp
                                          : bucket >= plan.bucket_bytes;
        if (full) flush_bucket();
      };
      const double head_grad = grad_bytes * model.output_params() / model.output_ranks(t);
      const bool overlapped = plan.gradient_reduction == GradReduction::overlapped;
      const bool zero3 = dp && plan.zero_stage == 3;
      // ZeRO-3: layer l's weights gathered among the replicas (issued, not waited for).
      auto gather_layer = [&](int l, uint32_t key) {
        return b.dp_collective(CommKind::allgather, layer_weights_of(l), "zero3.params", key);
      };
      // Waiting for layer l's gathered weights, and, under FSDP2 (Framework::gather_copy_out),
      // copying them out of the all-gather's buffer into the layer's parameters: a kernel on the
      // compute stream that reads and writes the layer's weights.
      auto wait_layer = [&](uint32_t issued, int l, Pass pass, uint32_t mb, uint32_t chunk) {
        b.dp_wait(issued);
        if (!plan.framework.gather_copy_out) return;
        const double weights = layer_weights_of(l);
        b.emit(b.piece(fmt::format("zero3.copy_out.{}", weights), {gather_copy_out(weights)}), pass,
               l, mb, chunk);
      };
      // Outside the layers (the embedding on the first virtual stage, the final norm and the
      // head on the last, with a tied word embedding's copy there when pipelined): under ZeRO-3
      // gathered as each forward pass starts and kept to the end of its backward pass (FSDP's
      // root unit, which is not resharded after the forward pass); under ZeRO-2 and 3 their
      // gradients reduce-scattered once the backward pass is done (a staged plan's tied word
      // embedding is reduced on its own, below).
      // The embedding's collectives are keyed with the first layer's, the head's with the last
      // layer's (the stage's key in a uniform plan).
      const double word = staged_tied ? static_cast<double>(model.vocab) * model.hidden : 0.0;
      const double embedding_weights = e * static_cast<double>(model.embedding_params()) / t;
      const double head_weights = e * model.head_params(P) / model.output_ranks(t);
      const double embedding_grads =
          grad_bytes * (static_cast<double>(model.embedding_params()) - word) / t;
      const double head_grads =
          grad_bytes * static_cast<double>(model.output_params()) / model.output_ranks(t);
      // A pass's gathers of what is outside the layers (ZeRO-3): the embedding's on the first
      // virtual stage, the head's on the last; the last issued, or 0.
      auto gather_outer = [&](bool first_virtual, bool last_virtual, uint32_t first_key,
                              uint32_t last_key) {
        uint32_t last = 0;
        if (first_virtual && embedding_weights > 0)
          last =
              b.dp_collective(CommKind::allgather, embedding_weights, "zero3.embedding", first_key);
        if (last_virtual && head_weights > 0)
          last = b.dp_collective(CommKind::allgather, head_weights, "zero3.head", last_key);
        return last;
      };
      // Their gradients reduce-scattered (ZeRO-2 and 3), head first.
      auto scatter_outer = [&](bool first_virtual, bool last_virtual, uint32_t first_key,
                               uint32_t last_key) {
        if (last_virtual && head_grads > 0)
          issued =
              b.dp_collective(CommKind::reducescatter, head_grads, "zero.head_grads", last_key);
        if (first_virtual && embedding_grads > 0)
          issued = b.dp_collective(CommKind::reducescatter, embedding_grads, "zero.embedding_grads",
                                   first_key);
      };
      const Time per_pass = plan.framework.host_per_pass;
      // Layered accumulation (one stage): each layer for every micro-batch in turn, forward then
      // backward; a sharded layer gathered once per pass, its gradients reduced once.
      if (plan.layered) {
        const uint32_t M = static_cast<uint32_t>(micro_batches);
        const auto key = static_cast<uint32_t>(s);
        // ZeRO-3's gathers issued a layer ahead, the first beside the embedding (and in the
        // backward pass beside the head), as in the per-micro-batch order below.
        const uint32_t outer = zero3 ? gather_outer(true, true, key, key) : 0;
        uint32_t next = zero3 && st.layers > 0 ? gather_layer(0, key) : 0;
        if (outer > 0) b.dp_wait(outer);
        for (uint32_t mb = 0; mb < M; ++mb) {
          b.host(per_pass, Pass::forward, mb, 0);
          b.emit(ef, Pass::forward, -1, mb, 0);
        }
        for (int l = 0; l < st.layers; ++l) {
          const uint32_t mine = next;
          if (zero3 && l + 1 < st.layers) next = gather_layer(l + 1, key);
          if (zero3) wait_layer(mine, l, Pass::forward, 0, 0);
          for (uint32_t mb = 0; mb < M; ++mb) b.emit(fwd_of(l), Pass::forward, l, mb, 0);
        }
        next = zero3 && st.layers > 0 ? gather_layer(st.layers - 1, key) : 0;
        for (uint32_t mb = 0; mb < M; ++mb) {
          b.emit(hf, Pass::forward, -1, mb, 0);
          b.host(per_pass, Pass::backward, mb, 0);
          b.emit(hb, Pass::backward, -1, mb, 0);
        }
        for (int l = st.layers - 1; l >= 0; --l) {
          const uint32_t mine = next;
          if (zero3 && l > 0) next = gather_layer(l - 1, key);
          if (zero3) wait_layer(mine, l, Pass::backward, 0, 0);
          for (uint32_t mb = 0; mb < M; ++mb) {
            if (plan.layer_recompute(l) == Recompute::full)
              b.emit(fwd_of(l), Pass::recompute, l, mb, 0);
            if (partial) b.emit(ar, Pass::recompute, l, mb, 0);
            b.emit(bwd_of(l), Pass::backward, l, mb, 0);
          }
          if (dp && plan.zero_stage >= 2) {
            scatter_layer(l, static_cast<uint32_t>(s));
          } else if (overlapped) {
            add(l, layer_grad_of(l));
            add_experts(l);
          }
        }
        for (uint32_t mb = 0; mb < M; ++mb) b.emit(eb, Pass::backward, -1, mb, 0);
        if (dp && plan.zero_stage >= 2) scatter_outer(true, true, key, key);
      }
      // DeepSpeed's order (Framework::send_grad_after_next_receive; one chunk per stage, as its
      // TrainSchedule has): a backward pass's gradient waits here until the next forward pass
      // has received its activation, or goes before the next backward pass.
      const bool defer_grad = plan.framework.send_grad_after_next_receive && v == 1;
      ScheduleItem unsent_grad{};
      bool grad_unsent = false;
      auto send_grad = [&] {
        if (!grad_unsent) return;
        b.emit_one(TaskKind::send, Pass::backward, unsent_grad.micro_batch, unsent_grad.chunk);
        grad_unsent = false;
      };
      for (const ScheduleItem& it : order) {
        if (plan.layered) break;
        const int vs = it.chunk * P + s;
        const int first = chunk_first(it.chunk);
        if (!it.forward) send_grad();
        b.host(per_pass, it.forward ? Pass::forward : Pass::backward, it.micro_batch, it.chunk);
        // ZeRO-3: the pass's first layer's weights gathered as it starts, and each later layer's
        // while the one before it computes (prefetch one layer ahead, as PyTorch FSDP's
        // BACKWARD_PRE and its host running ahead of the device, DeepSpeed's and Megatron-FSDP's
        // prefetch do), each waited for before its layer runs. The gathers share the one
        // data-parallel stream with the reduce-scatters, in the order they are issued.
        const int n = st.layers_of(it.chunk);
        const uint32_t outer = zero3 && it.forward ? gather_outer(vs == 0, vs == V - 1, key_of(0),
                                                                  key_of(model.layers - 1))
                                                   : 0;
        uint32_t next = zero3 && n > 0 ? gather_layer(it.forward ? first : first + n - 1,
                                                      key_of(it.forward ? first : first + n - 1))
                                       : 0;
        if (it.forward) {
          if (vs > 0) {
            b.emit_one(TaskKind::recv, Pass::forward, it.micro_batch, it.chunk);
            gathers(plan.framework.pipeline_gathers_forward, Pass::forward, it);
          }
          send_grad();
          if (outer > 0 && vs == 0) b.dp_wait(outer);
          if (vs == 0) b.emit(ef, Pass::forward, -1, it.micro_batch, it.chunk);
          for (int l = first; l < first + n; ++l) {
            const uint32_t mine = next;
            if (zero3 && l + 1 < first + n) next = gather_layer(l + 1, key_of(l + 1));
            if (zero3) wait_layer(mine, l, Pass::forward, it.micro_batch, it.chunk);
            b.emit(fwd_of(l), Pass::forward, l, it.micro_batch, it.chunk);
          }
          if (vs == V - 1) {
            if (outer > 0) b.dp_wait(outer);
            b.emit(hf, Pass::forward, -1, it.micro_batch, it.chunk);
          } else {
            b.emit_one(TaskKind::send, Pass::forward, it.micro_batch, it.chunk);
          }
        } else {
          if (vs < V - 1) {
            b.emit_one(TaskKind::recv, Pass::backward, it.micro_batch, it.chunk);
            gathers(plan.framework.pipeline_gathers_backward, Pass::backward, it);
          }
          if (vs == V - 1) b.emit(hb, Pass::backward, -1, it.micro_batch, it.chunk);
          const bool last = static_cast<int>(it.micro_batch) == last_bwd_mb[it.chunk];
          // Asymmetric: the head's gradients open the last segment's first bucket, in every
          // replica alike (with shared stages, they join the stage's last bucket).
          if (asymmetric && dp && vs == V - 1 && last && overlapped)
            add(model.layers - 1, head_grad);
          for (int l = first + n - 1; l >= first; --l) {
            const uint32_t mine = next;
            if (zero3 && l > first) next = gather_layer(l - 1, key_of(l - 1));
            if (zero3) wait_layer(mine, l, Pass::backward, it.micro_batch, it.chunk);
            if (plan.layer_recompute(l - first) == Recompute::full)
              b.emit(fwd_of(l), Pass::recompute, l, it.micro_batch, it.chunk);
            if (partial) b.emit(ar, Pass::recompute, l, it.micro_batch, it.chunk);
            b.emit(bwd_of(l), Pass::backward, l, it.micro_batch, it.chunk);
            if (dp && plan.zero_stage >= 2) {
              scatter_layer(l, key_of(l));
            } else if (last && overlapped) {
              add(l, layer_grad_of(l));
              add_experts(l);
            }
          }
          if (vs == 0) b.emit(eb, Pass::backward, -1, it.micro_batch, it.chunk);
          if (dp && plan.zero_stage >= 2)
            scatter_outer(vs == 0, vs == V - 1, key_of(0), key_of(model.layers - 1));
          if (vs > 0) {
            if (defer_grad) {
              unsent_grad = it;
              grad_unsent = true;
            } else {
              b.emit_one(TaskKind::send, Pass::backward, it.micro_batch, it.chunk);
            }
          }
        }
      }
      send_grad();
      // The tied embedding's gradients, between the first and the last stage.
      const TiedReduction tied = plan.framework.tied_embedding_reduction;
      const double tied_grads = static_cast<double>(model.vocab) * model.hidden / t *
                                (tied == TiedReduction::main_grads ? grad_bytes : e);
      if (staged_tied && (s == 0 || s == P - 1)) {
        issued = b.dp_collective(
            CommKind::allreduce, tied_grads, "tied.embedding.grads", tied_key,
            static_cast<uint32_t>(plan.data_parallel_of(0) +
                                  plan.data_parallel_of(static_cast<size_t>(P - 1))));
      } else if (tied != TiedReduction::none && model.tied_embeddings && P > 1 &&
                 (s == 0 || s == P - 1)) {
        g.tied_bytes = tied_grads;
        b.emit_one(TaskKind::tied, Pass::other, 0, 0);
      }
      // After the backward pass: every layer's gradients, in the order backward produced them
      // (last layer first), in buckets.
      if (!overlapped && dp && plan.zero_stage < 2) {
        if (asymmetric && last_virtual_holder) add(model.layers - 1, head_grad);
        for (int c = v - 1; c >= 0; --c) {
          for (int l = st.layers_of(c) - 1; l >= 0; --l) {
            add(st.first_of(c) + l, layer_grad_of(st.first_of(c) + l));
            add_experts(st.first_of(c) + l);
          }
        }
      }
      // Embedding (and, with shared stages, head) gradients join the last bucket.
      if (dp && plan.zero_stage < 2) {
        if (bucket <= 0) bucket_key = key_of(st.first_layer);
        // (A staged plan's tied word embedding is reduced on its own, above.)
        bucket += grad_bytes *
                  ((first_virtual_holder ? model.embedding_params() - word : 0) +
                   (last_virtual_holder && !asymmetric ? model.output_params() : 0)) /
                  t;
        flush_bucket();
        flush_experts();
      }
      if (issued > 0) b.dp_wait(issued);
      b.host(plan.framework.host_per_step, Pass::other, 0, 0);
      const auto& opt =
          b.piece("optimizer", {Step{optimizer_step(shard, plan.precision, plan.optimizer)}});
      b.emit(opt, Pass::other, -1, 0, 0);
      if (dp && (plan.zero_stage == 1 || plan.zero_stage == 2)) {
        const uint32_t gathered = b.dp_collective(CommKind::allgather, e * dense_params,
                                                  "zero.params", static_cast<uint32_t>(s));
        const uint32_t experts =
            expert_sync && expert_params > 0
                ? b.dp_collective(CommKind::allgather, e * expert_params, "zero.expert_params",
                                  expert_sync_key(ep_rank, static_cast<uint32_t>(s)), edp)
                : gathered;
        b.dp_wait(experts);
      }
      job.groups.push_back(std::move(g));
    }
  }
  if (plan.staged()) {
    // Each micro-batch's samples in order over a stage's groups: a group sends its activation
    // to the next stage's groups whose samples overlap its own, and they send back the
    // gradients of those samples.
    job.next_peers.resize(job.groups.size());
    job.prev_peers.resize(job.groups.size());
    const double whole = static_cast<double>(plan.micro_batch_size);
    uint32_t first = 0;
    for (int s = 0; s + 1 < S; ++s) {
      const auto next =
          static_cast<uint32_t>(first + plan.data_parallel_of(static_cast<size_t>(s)));
      for (const SharedSamples& x : shared_samples(plan, static_cast<size_t>(s))) {
        const double share = static_cast<double>(x.samples) / whole;
        const auto gj = static_cast<uint32_t>(first + x.from);
        const auto gk = static_cast<uint32_t>(next + x.to);
        job.next_peers[gj].push_back({gk, share});
        job.prev_peers[gk].push_back({gj, share});
      }
      first = next;
    }
  }
  finish_job(job, cost);
  return job;
}

}  // namespace hetsim::workload
