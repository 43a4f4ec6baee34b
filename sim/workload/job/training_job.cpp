// Builds the per-stage-copy programs of one iteration; see training_job.h.
#include "sim/workload/job/training_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "sim/core/error.h"
#include "sim/workload/job/pass_rules.h"
#include "sim/workload/model/cnn.h"

namespace hetsim::workload {

std::vector<ScheduleItem> stage_schedule(Schedule s, int stage, int stages, int m, int chunks,
                                         int group) {
  std::vector<ScheduleItem> out;
  out.reserve(2 * static_cast<size_t>(std::max(0, m)) * static_cast<size_t>(std::max(1, chunks)));
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

// Writes a StageCopy's kernels, segments, collectives and program tasks.
class CopyBuilder {
 public:
  CopyBuilder(StageCopy& g, const ModelConfig& m, const Plan& p, const CostModel& cost,
              const LayerShape& shape)
      : g_(g), m_(m), p_(p), cost_(cost), shape_(shape) {}

  // Steps -> tasks, cut as cut_steps says (the estimator takes the same cuts); cached by name
  // (the shapes never change within a copy).
  const std::vector<Task>& piece(const std::string& name, const std::vector<Step>& steps) {
    auto it = pieces_.find(name);
    if (it != pieces_.end()) return it->second;
    std::vector<Task> tasks;
    for (const StepCut& cut : cut_steps(steps)) {
      Task t;
      switch (cut.kind) {
        case StepCut::Kind::kernels:
          t.kind = TaskKind::compute;
          t.index = segment(steps, cut);
          break;
        case StepCut::Kind::collective: {
          const Step& st = steps[cut.first];
          t.kind = st.expert    ? TaskKind::ep_comm
                   : st.context ? TaskKind::cp_comm
                                : TaskKind::tp_comm;
          t.index = static_cast<uint32_t>(g_.comms.size());
          CommTemplate& ct =
              g_.comms.emplace_back(CommTemplate{st.comm, st.comm_bytes, cut.overlaps, st.op.name});
          ct.expert = st.expert;
          ct.context = st.context;
          break;
        }
        case StepCut::Kind::wait:
          t.kind = TaskKind::tp_wait;
          break;
      }
      tasks.push_back(t);
    }
    return pieces_.emplace(name, std::move(tasks)).first->second;
  }

  // One segment of kernels (a cut of cut_steps), added to the copy: its duration the longer of
  // its kernels' GPU time and the host's time to issue them (host-bound runs of small kernels).
  uint32_t segment(const std::vector<Step>& steps, const StepCut& cut) {
    Segment seg;
    Time host;
    for (uint32_t i = cut.first; i < cut.first + cut.count; ++i) {
      const Op& op = steps[i].op;
      const Time d = cost_.duration(op, *g_.gpu, p_.precision);
      g_.ops.push_back(op);
      seg.ops.emplace_back(static_cast<uint32_t>(g_.ops.size() - 1), d);
      seg.duration += d;
      host += host_time(cost_, op, p_.framework);
      seg.flops += op.flops;
      seg.model_flops += op.model_flops;
    }
    seg.duration = std::max(seg.duration, host);
    seg.host = host;
    g_.segments.push_back(std::move(seg));
    return static_cast<uint32_t>(g_.segments.size() - 1);
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
  // the job pairs the copies' collectives of one key in order (build_training_job).
  uint32_t dp_collective(CommKind kind, double bytes, const std::string& name, uint32_t key,
                         uint32_t replicas = 0) {
    g_.dp.push_back(DpCollective{kind, bytes, name, std::nullopt, key, replicas});
    emit_one(TaskKind::dp_comm, Pass::other, 0, 0, static_cast<uint32_t>(g_.dp.size() - 1));
    return static_cast<uint32_t>(g_.dp.size());  // collectives issued so far
  }
  void dp_wait(uint32_t issued) { emit_one(TaskKind::dp_wait, Pass::other, 0, 0, issued); }

  const ModelConfig& model() const { return m_; }

 private:
  StageCopy& g_;
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

double expert_params_per_device(const ModelConfig& model, const StagePlan& st, int ep) {
  return stage_layer_params(model, st).second / st.tensor_parallel() / ep;
}

uint32_t expert_sync_key(uint32_t rank, uint32_t stage) { return 0x80000000u | rank << 16 | stage; }

double params_per_device(const ModelConfig& model, const StagePlan& st, int stage, int P, int ep) {
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
    StageCopy g;
    g.replica = static_cast<uint32_t>(r);
    g.stage = static_cast<uint32_t>(s);
    g.micro_batches = static_cast<uint32_t>(plan.micro_batches_of(r));
    g.batch = plan.batch_of(r, static_cast<size_t>(s));
    g.devices = st.devices;
    g.gpu = cluster.gpu(st.devices.front()).profile;
    g.params = params_per_device(model, st, s, P, plan.expert_group_replicas());
    g.expert_params = expert_params_per_device(model, st, plan.expert_group_replicas());
    job.copies.push_back(std::move(g));
  };
  if (plan.staged()) {
    job.first_copy.push_back(0);
    for (int s = 0; s < plan.stages(); ++s) {
      for (size_t j = 0; j < plan.data_parallel_of(static_cast<size_t>(s)); ++j) add(j, s);
    }
  } else {
    for (size_t r = 0; r < plan.replicas.size(); ++r) {
      job.first_copy.push_back(static_cast<uint32_t>(job.copies.size()));
      for (int s = 0; s < plan.stages(r); ++s) add(r, s);
    }
  }
  job.first_copy.push_back(static_cast<uint32_t>(job.copies.size()));
  return job;
}

double tied_pair_bytes(const TrainingJob& job, uint32_t replica) {
  const StageCopy& a = job.copy(replica, 0);
  const StageCopy& b = job.copy(replica, job.stages_of(replica) - 1);
  const size_t n = std::max(a.devices.size(), b.devices.size());
  return a.tied_bytes * static_cast<double>(a.devices.size()) / static_cast<double>(n);
}

namespace {

// Pairs the copies' data-parallel collectives into DpSyncs: the k-th collective a copy issues
// under a key (DpCollective::sync holds the key until now) runs with every other copy's k-th
// under that key. Each must then have one member per replica, all of one kind and size: anything
// else is a plan the loader should have refused, and would hang the replay.
void pair_dp_collectives(TrainingJob& job) {
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> by_key;  // (key, k) -> sync
  // Copies that share their collectives (identical replicas) and pair them alike keep sharing
  // them: by the shared list, its paired copy and that copy's syncs.
  std::map<const void*, std::vector<std::pair<std::vector<uint32_t>, SharedVector<DpCollective>>>>
      paired;
  std::vector<uint32_t> syncs;
  for (uint32_t g = 0; g < job.copies.size(); ++g) {
    std::map<uint32_t, uint32_t> k;
    syncs.clear();
    for (uint32_t i = 0; i < job.copies[g].dp.size(); ++i) {
      const DpCollective& dc = job.copies[g].dp[i];
      const auto [it, fresh] =
          by_key.try_emplace({dc.sync, k[dc.sync]++}, static_cast<uint32_t>(job.dp_syncs.size()));
      if (fresh) job.dp_syncs.emplace_back();
      DpSync& sync = job.dp_syncs[it->second];
      if (!fresh) {
        const auto [g0, i0] = sync.members.front();
        const DpCollective& first = job.copies[g0].dp[i0];
        // The same gradients: bytes per rank x ranks alike, to rounding.
        const double mine = dc.bytes * static_cast<double>(job.copies[g].devices.size());
        const double theirs = first.bytes * static_cast<double>(job.copies[g0].devices.size());
        if (first.kind != dc.kind || std::abs(mine - theirs) > 1e-9 * theirs) {
          throw RunError(fmt::format(
              "job: data-parallel collective {} of replica {} stage {} ({} bytes) does not match "
              "replica {} stage {}'s ({} bytes)",
              i, job.copies[g].replica, job.copies[g].stage, mine, job.copies[g0].replica,
              job.copies[g0].stage, theirs));
        }
      }
      sync.members.emplace_back(g, i);
      syncs.push_back(it->second);
    }
    SharedVector<DpCollective>& dp = job.copies[g].dp;
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
    const uint32_t among = job.copies[g0].dp[i0].replicas;
    const size_t want = among > 0 ? among : job.plan->replicas.size();
    if (sync.members.size() != want) {
      throw RunError(fmt::format(
          "job: data-parallel collective {} of replica {} stage {} has {} of {} replicas", i0,
          job.copies[g0].replica, job.copies[g0].stage, sync.members.size(), want));
    }
    std::vector<uint32_t> member_copies;
    uint32_t pieces = 1;
    for (const auto& [g, i] : sync.members) {
      member_copies.push_back(g);
      pieces = std::lcm(pieces, static_cast<uint32_t>(job.copies[g].devices.size()));
    }
    const DpCollective& first = job.copies[g0].dp[i0];
    if (first.grid) pieces = 1;  // one collective over every member's devices
    sync.pieces = pieces;
    // A grid collective's bytes are already the whole layer's (every rank holds it all).
    sync.piece_bytes = first.grid || pieces == job.copies[g0].devices.size()
                           ? first.bytes
                           : first.bytes * static_cast<double>(job.copies[g0].devices.size()) /
                                 static_cast<double>(pieces);
    const auto [it, fresh] =
        sets.try_emplace(member_copies, static_cast<uint32_t>(job.dp_peers.size()));
    if (fresh) job.dp_peers.push_back(std::move(member_copies));
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
  for (uint32_t gi = 0; gi < job.copies.size(); ++gi) {
    StageCopy& g = job.copies[gi];
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
                      [&](uint32_t m) { return job.copies[m].devices.size() != sync.pieces; })) {
        continue;
      }
      std::vector<platform::GpuId> peers;  // tensor-parallel rank 0's, in every member
      for (uint32_t m : members) peers.push_back(job.copies[m].devices.front());
      if (!one_type(peers)) continue;
      dc.measured = cost.collective_time(dc.kind, dc.bytes, static_cast<int>(peers.size()),
                                         nodes(peers), *g.gpu);
    }
    if (g.tied_bytes <= 0) continue;
    const StageCopy& a = job.copy(g.replica, 0);
    const StageCopy& b = job.copy(g.replica, job.stages_of(g.replica) - 1);
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
  for (const StageCopy& g : job.copies) {
    type_source[g.gpu->name] = cost.source(Op{}, *g.gpu);
    // Each distinct kernel shape of a GPU type is classified once: copies of one type share
    // most of their kernels, and the lookup scans the tables. Copies that share their kernels
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

// The job's copies built: close the replica list, pair the data-parallel collectives, take the
// measured ones, and tally where the kernels' costs come from.
// The power model (power_clock) over each device's compute segments, each weighted by how often
// its program runs it: the matmuls of a capped board rescaled to the clock it settles at.
void power_cap(TrainingJob& job, const CostModel& cost) {
  const Precision p = job.plan->precision;
  // Copies that share their segments and program (identical replicas) settle at one clock: the
  // first one's rescaled segments are shared by the others.
  // By addresses (the segments', the program's, the profile's): only looked up, never iterated.
  std::map<std::tuple<const void*, const void*, const config::GpuProfile*>, uint32_t> capped;
  for (StageCopy& g : job.copies) {
    if (g.gpu == nullptr) continue;
    const double share = cost.sustained_share(*g.gpu, p);
    if (!(share < 1)) continue;
    const auto key = std::make_tuple(g.segments.id(), g.program.id(), g.gpu);
    if (auto it = capped.find(key); it != capped.end()) {
      g.segments = job.copies[it->second].segments;
      continue;
    }
    capped.emplace(key, static_cast<uint32_t>(&g - job.copies.data()));
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
  job.first_copy.push_back(static_cast<uint32_t>(job.copies.size()));
  power_cap(job, cost);
  pair_dp_collectives(job);
  measured_collectives(job, cost);
  tally_sources(job, cost);
}

// A convolutional network on a process grid (Plan::layer_splits): one copy per column, every
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
    job.first_copy.push_back(static_cast<uint32_t>(job.copies.size()));
    StageCopy g;
    g.replica = static_cast<uint32_t>(r);
    g.micro_batches = static_cast<uint32_t>(rep.micro_batches);
    g.batch = plan.micro_batch_size;
    g.devices = rep.stages.front().devices;
    g.gpu = cluster.gpu(g.devices.front()).profile;
    CopyBuilder b(g, model, plan, cost, stage_shape(plan, rows));
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
    job.copies.push_back(std::move(g));
  }
  finish_job(job, cost);
  return job;
}
}  // namespace

namespace {

// What makes two copies of a uniform plan alike: the stage, its devices' count and GPU type, its
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

// A copy of `like` (the same stage of another replica, built alike) on replica r's devices: it
// shares the kernels, segments, program and collectives. Its expert-parallel rank only names the
// replicas its experts' gradients are reduced among: those keys are renamed.
StageCopy alike_copy(const StageCopy& like, size_t r, const StagePlan& st, int ep,
                     const platform::Cluster& cluster) {
  StageCopy g = like;
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

namespace {

// A staged plan's tied embedding: its gradients all-reduced among every copy of the first and
// the last stage at once (every copy's, the data-parallel reduction and Megatron's first-last
// exchange in one), keyed apart from the stages'.
constexpr uint32_t kTiedKey = 0x40000000u;

// What every copy of a transformer job reads beside its own stage (build_training_job).
struct JobContext {
  JobContext(const ModelConfig& m, const Plan& p, const platform::Cluster& c, const CostModel& k)
      : model(m), plan(p), cluster(c), cost(k) {
    v = plan.interleave;
    S = plan.stages();
    asymmetric = plan.asymmetric();
    if (asymmetric) cuts = layer_segments(plan, model.layers);
    // Per segment, the smallest tensor-parallel degree that holds it: buckets are cut at the
    // same layers in every replica, by the bytes per rank of that holder (Megatron-LM's bucket
    // size is per rank).
    min_tp.assign(cuts.empty() ? 0 : cuts.size() - 1, 0);
    for (const ReplicaPlan& rep : plan.replicas) {
      for (const StagePlan& st : rep.stages) {
        for (size_t k = 0; k < min_tp.size(); ++k) {
          if (cuts[k] < st.first_layer || cuts[k] >= st.first_layer + st.layers) continue;
          const int t = st.tensor_parallel();
          min_tp[k] = min_tp[k] == 0 ? t : std::min(min_tp[k], t);
        }
      }
    }
    e = element_bytes(plan.precision);
    grad_bytes = plan.fp32_main_grads ? 4 : e;
    activation_bytes = boundary_activation_bytes(model, plan);
    // Mixture of experts: each MoE layer's load (routing imbalance), and whether the experts'
    // gradients are reduced apart from the rest, among the replicas of one expert-parallel rank.
    if (model.moe()) loads = expert_loads(model, plan);
    // Replicas per expert-parallel group: each device holds 1 / (ep x t) of the routed experts,
    // split by tensor-parallel rank or (experts whole) by expert.
    ep = plan.expert_group_replicas();
    split_experts = model.moe() && ep > 1;
    edp = static_cast<uint32_t>(plan.replicas.size()) / static_cast<uint32_t>(ep);
    expert_sync = split_experts && edp > 1;
    staged_tied = plan.staged() && model.tied_embeddings && S > 1 &&
                  plan.framework.tied_embedding_reduction != TiedReduction::none;
  }

  const ModelConfig& model;
  const Plan& plan;
  const platform::Cluster& cluster;
  const CostModel& cost;
  int v = 1;  // chunks per stage
  int S = 1;  // stages
  // Asymmetric replicas reduce gradients by layer segment (cut at `cuts`); the others stage by
  // stage.
  bool asymmetric = false;
  std::vector<int> cuts, min_tp;
  double e = 2, grad_bytes = 2;
  double activation_bytes = 0;  // one micro-batch's boundary activation
  std::vector<double> loads;
  int ep = 1;
  bool split_experts = false;
  uint32_t edp = 1;
  bool expert_sync = false;
  bool staged_tied = false;
};

// One copy's place in the job and the state it holds.
struct StageFigures {
  size_t r = 0;
  int s = 0, P = 1, micro_batches = 1;
  uint32_t among =
      0;  // the copies of this stage that reduce its gradients together (0: every replica)
  bool dp = false;
  uint32_t ep_rank = 0;
  // Sharded state: the experts' among the replicas that hold them (none beside this one where
  // expert_parallel is the data-parallel degree).
  double params = 0, expert_params = 0, dense_params = 0, shard = 0;
};

StageFigures stage_figures(const JobContext& x, size_t r, int s) {
  const Plan& plan = x.plan;
  const StagePlan& st = plan.stage_plan(r, static_cast<size_t>(s));
  StageFigures f;
  f.r = r;
  f.s = s;
  f.P = plan.stages(r);
  f.micro_batches = plan.micro_batches_of(r);
  f.among =
      plan.staged() ? static_cast<uint32_t>(plan.data_parallel_of(static_cast<size_t>(s))) : 0;
  f.dp = plan.data_parallel_of(static_cast<size_t>(s)) > 1;
  f.ep_rank = static_cast<uint32_t>(r % static_cast<size_t>(x.ep));
  f.params = params_per_device(x.model, st, s, f.P, x.ep);
  f.expert_params = x.split_experts ? expert_params_per_device(x.model, st, x.ep) : 0;
  f.dense_params = f.params - f.expert_params;
  f.shard = plan.zero_stage >= 1 && f.dp ? plan.sharded(f.dense_params, r) + f.expert_params / x.edp
                                         : f.params;
  return f;
}

StageCopy new_copy(const JobContext& x, const StageFigures& f, const StagePlan& st) {
  StageCopy g;
  g.replica = static_cast<uint32_t>(f.r);
  g.stage = static_cast<uint32_t>(f.s);
  g.micro_batches = static_cast<uint32_t>(f.micro_batches);
  g.batch = x.plan.batch_of(f.r, static_cast<size_t>(f.s));
  g.devices = st.devices;
  g.gpu = x.cluster.gpu(st.devices.front()).profile;
  g.params = f.params;
  g.expert_params = expert_params_per_device(x.model, st, x.ep);
  return g;
}

// One copy's program (replica r's stage s; a staged plan's group r of stage s): its passes in
// the order its schedule runs them, with their pipeline transfers, the gradients' reductions as
// the framework issues them, the optimizer step.
class StageBuilder {
 public:
  StageBuilder(const JobContext& x, const StageFigures& f)
      : x_(x),
        m_(x.model),
        p_(x.plan),
        f_(f),
        st_(x.plan.stage_plan(f.r, static_cast<size_t>(f.s))),
        g_(new_copy(x, f, st_)),
        t_(st_.tensor_parallel()),
        shape_(stage_shape(p_, t_, g_.batch)),
        b_(g_, m_, p_, x.cost, shape_) {
    // A staged plan's groups cut their buckets at the same layers, by the bytes per rank of the
    // stage's narrowest group (as asymmetric replicas do by segment).
    stage_min_tp_ = t_;
    if (p_.staged()) {
      for (const StagePlan& y : p_.dp_stages[static_cast<size_t>(f_.s)].groups)
        stage_min_tp_ = std::min(stage_min_tp_, y.tensor_parallel());
    }
    V_ = f_.P * x_.v;
    make_pieces();
    order_ = stage_schedule(p_.schedule, f_.s, f_.P, f_.micro_batches, x_.v, p_.microbatch_group);
    // The last backward of each chunk is where its gradients become final.
    last_bwd_mb_.assign(static_cast<size_t>(x_.v), -1);
    for (const ScheduleItem& it : order_) {
      if (!it.forward) last_bwd_mb_[it.chunk] = static_cast<int>(it.micro_batch);
    }
    bucket_key_ = key_of(st_.first_layer);
    // Outside the layers (the embedding on the first virtual stage, the final norm and the head
    // on the last, with a tied word embedding's copy there when pipelined): under ZeRO-3
    // gathered as each forward pass starts and kept to the end of its backward pass (FSDP's root
    // unit, which is not resharded after the forward pass); under ZeRO-2 and 3 their gradients
    // reduce-scattered once the backward pass is done (a staged plan's tied word embedding is
    // reduced on its own, reduce_tied).
    const double e = x_.e, gb = x_.grad_bytes;
    outer_ = outer_params(m_, f_.P, t_, x_.staged_tied);
    embedding_weights_ = e * outer_.weights_on(true, false);
    head_weights_ = e * outer_.weights_on(false, true);
    embedding_grads_ = gb * outer_.grads_on(true, false);
    head_grads_ = gb * outer_.grads_on(false, true);
  }

  StageCopy build() && {
    if (p_.layered) {
      layered();
    } else {
      scheduled();
    }
    send_grad();
    reduce_tied();
    reduce_after_backward();
    step();
    return std::move(g_);
  }

 private:
  using Tasks = std::vector<Task>;

  bool overlapped() const { return p_.gradient_reduction == GradReduction::overlapped; }
  bool zero3() const { return f_.dp && p_.zero_stage == 3; }

  // ---- the stage's pieces ------------------------------------------------------------------
  void make_pieces() {
    // The dense layers' programs first (a model of MoE layers only has none).
    if (m_.moe_layers_in(st_.first_layer, st_.layers) < st_.layers || st_.layers == 0)
      dense_pieces();
    ef_ = &b_.piece("embedding.fwd", embedding_forward(m_, shape_));
    eb_ = &b_.piece("embedding.bwd", embedding_backward(m_, shape_));
    hf_ = &b_.piece("head.fwd", head_forward(m_, shape_));
    hb_ = &b_.piece("head.bwd", head_backward(m_, shape_));
    // What a layer recomputes before its backward pass under selective recompute: the attention
    // core (Megatron-LM), or torchtitan's op-level policy's share of the forward pass.
    ar_ = p_.recompute == Recompute::selective_op
              ? &b_.piece("ops.recompute", selective_op_recompute(m_, shape_))
              : &b_.piece("attention.recompute", attention_recompute(m_, shape_));
    // The framework's all-gathers of a received pipeline slice (Framework::pipeline_gathers_*),
    // each one micro-batch's boundary activation for this copy's samples.
    std::vector<Step> gather_steps;
    if (gathers_pipeline_slices(p_, t_)) {
      Step gs;
      gs.op.name = "pp.gather";
      gs.comm = CommKind::allgather;
      gs.comm_bytes = x_.activation_bytes * static_cast<double>(g_.batch) /
                      static_cast<double>(p_.micro_batch_size);
      gather_steps.push_back(gs);
    }
    pg_ = &b_.piece("pipeline.gather", gather_steps);
  }

  std::pair<const Tasks*, const Tasks*> dense_pieces() {
    if (!dense_fwd_) {
      dense_fwd_ = &b_.piece("layer.fwd", layer_forward(m_, shape_));
      dense_bwd_ = &b_.piece("layer.bwd", layer_backward(m_, shape_));
    }
    return {dense_fwd_, dense_bwd_};
  }

  // Layer l's programs: a MoE layer's by its load (layers of one load share them).
  std::pair<const Tasks*, const Tasks*> pieces_of(int l) {
    if (!m_.is_moe(l)) return dense_pieces();
    const double load = x_.loads[static_cast<size_t>(l)];
    auto it = moe_pieces_.find(load);
    if (it == moe_pieces_.end()) {
      const LayerShape y = moe_shape(shape_, p_, load);
      const std::string key = fmt::format("{}", load);
      it = moe_pieces_
               .emplace(load, std::make_pair(&b_.piece("moe.fwd/" + key, layer_forward(m_, y)),
                                             &b_.piece("moe.bwd/" + key, layer_backward(m_, y))))
               .first;
    }
    return it->second;
  }
  const Tasks& fwd_of(int l) { return *pieces_of(l).first; }
  const Tasks& bwd_of(int l) { return *pieces_of(l).second; }

  // What layer l (`index` in its model chunk) runs again before its backward pass.
  void rerun(int l, int index, uint32_t mb, uint16_t chunk) {
    switch (layer_rerun(p_, index)) {
      case LayerRerun::forward:
        b_.emit(fwd_of(l), Pass::recompute, l, mb, chunk);
        break;
      case LayerRerun::attention_core:
      case LayerRerun::selected_ops:
        b_.emit(*ar_, Pass::recompute, l, mb, chunk);
        break;
      case LayerRerun::nothing:
        break;
    }
  }

  void gathers(int count, Pass pass, const ScheduleItem& it) {
    for (int k = 0; k < count; ++k) b_.emit(*pg_, pass, -1, it.micro_batch, it.chunk);
  }

  // ---- gradients -----------------------------------------------------------------------------
  // Layer l's gradients reduced among every replica, and its routed experts' among the replicas
  // of this expert-parallel rank (with them where expert parallelism is 1).
  double layer_grad_of(int l) const {
    return x_.grad_bytes *
           static_cast<double>(m_.layer_params(l) -
                               (x_.split_experts ? m_.expert_layer_params(l) : 0)) /
           t_;
  }
  double expert_grad_of(int l) const {
    return x_.split_experts
               ? x_.grad_bytes * static_cast<double>(m_.expert_layer_params(l)) / t_ / x_.ep
               : 0.0;
  }
  double layer_weights_of(int l) const {
    return x_.e * static_cast<double>(m_.layer_params(l)) / t_;
  }
  // The key of layer l's gradients: its segment (asymmetric), else the stage.
  uint32_t key_of(int l) const {
    if (!x_.asymmetric) return static_cast<uint32_t>(f_.s);
    return static_cast<uint32_t>(std::upper_bound(x_.cuts.begin(), x_.cuts.end(), l) -
                                 x_.cuts.begin() - 1);
  }
  uint32_t expert_key() const { return expert_sync_key(f_.ep_rank, static_cast<uint32_t>(f_.s)); }
  CommKind reduction() const {
    return p_.zero_stage >= 1 ? CommKind::reducescatter : CommKind::allreduce;
  }

  // A closed bucket of `bytes` reduced among the replicas.
  void reduce_bucket(double bytes) {
    if (!f_.dp || bytes <= 0) return;
    issued_ = b_.dp_collective(reduction(), bytes, "dp.grads", bucket_key_, f_.among);
  }
  void flush_bucket() { reduce_bucket(bucket_.close()); }
  // The experts' gradients fill buckets of their own (Megatron-LM's expert-data-parallel
  // buffers).
  void reduce_experts(double bytes) {
    if (!x_.expert_sync || bytes <= 0) return;
    issued_ = b_.dp_collective(reduction(), bytes, "dp.expert_grads", expert_key(), x_.edp);
  }
  void flush_experts() { reduce_experts(expert_bucket_.close()); }
  void add_experts(int l) {
    if (!x_.expert_sync) return;
    reduce_experts(expert_bucket_.add(expert_grad_of(l), p_.bucket_bytes));
  }
  // ZeRO-2: each micro-batch's gradients of layer l reduce-scattered as soon as they are.
  void scatter_layer(int l, uint32_t key) {
    issued_ = b_.dp_collective(CommKind::reducescatter, layer_grad_of(l), "zero.grads", key);
    if (x_.expert_sync && m_.is_moe(l)) {
      issued_ = b_.dp_collective(CommKind::reducescatter, expert_grad_of(l), "zero.expert_grads",
                                 expert_key(), x_.edp);
    }
  }
  // Gradients of layer l (or of the head, with l the last layer) join the bucket; a bucket holds
  // one segment's.
  void add(int l, double bytes) {
    const uint32_t k = key_of(l);
    if (bucket_.held() > 0 && k != bucket_key_) flush_bucket();
    bucket_key_ = k;
    // Cut by the bytes per rank of the segment's (or the stage's) narrowest holder.
    const int holder = x_.asymmetric ? x_.min_tp[k] : p_.staged() ? stage_min_tp_ : 0;
    reduce_bucket(holder > 0 ? bucket_.add(bytes, p_.bucket_bytes * holder, t_)
                             : bucket_.add(bytes, p_.bucket_bytes));
  }
  // Layer l's backward is done: its gradients reduce-scattered at once (ZeRO-2 and 3), or, on the
  // last micro-batch with overlapped reduction, into the buckets.
  void layer_done(int l, uint32_t key, bool last) {
    if (f_.dp && p_.zero_stage >= 2) {
      scatter_layer(l, key);
    } else if (last && overlapped()) {
      add(l, layer_grad_of(l));
      add_experts(l);
    }
  }

  // ---- ZeRO-3 --------------------------------------------------------------------------------
  // Layer l's weights gathered among the replicas (issued, not waited for).
  uint32_t gather_layer(int l, uint32_t key) {
    return b_.dp_collective(CommKind::allgather, layer_weights_of(l), "zero3.params", key);
  }
  // A pass's layers in the order it runs them: `count` layers from `start`, a step of +1
  // (forward) or -1 (backward); their collectives keyed with the stage's key (`stage_key`:
  // layered accumulation) or each with its layer's (key_of).
  struct LayerWalk {
    int start, count, step;
    std::optional<uint32_t> stage_key = {};
    int at(int i) const { return start + i * step; }
  };
  uint32_t key_in(const LayerWalk& w, int l) const {
    return w.stage_key ? *w.stage_key : key_of(l);
  }
  // ZeRO-3 gathers layer weights one layer ahead of the walk (PyTorch FSDP's BACKWARD_PRE and its
  // host running ahead of the device, DeepSpeed's and Megatron-FSDP's prefetch): the first
  // layer's as the pass starts (first_gather, issued where the caller says), each later layer's
  // while the one before it runs, and each waited for before its layer runs. `run(l)` emits
  // layer l's work. Without ZeRO-3, the layers alone.
  uint32_t first_gather(const LayerWalk& w) {
    return zero3() && w.count > 0 ? gather_layer(w.at(0), key_in(w, w.at(0))) : 0;
  }
  template <class Run>
  void prefetched(const LayerWalk& w, uint32_t issued, Pass pass, uint32_t mb, uint32_t chunk,
                  Run run) {
    const bool zero3 = this->zero3();
    for (int i = 0; i < w.count; ++i) {
      const int l = w.at(i);
      const uint32_t mine = issued;
      if (zero3 && i + 1 < w.count) issued = gather_layer(w.at(i + 1), key_in(w, w.at(i + 1)));
      if (zero3) wait_layer(mine, l, pass, mb, chunk);
      run(l);
    }
  }
  // Waiting for layer l's gathered weights, and, under FSDP2 (Framework::gather_copy_out),
  // copying them out of the all-gather's buffer into the layer's parameters: a kernel on the
  // compute stream that reads and writes the layer's weights.
  void wait_layer(uint32_t issued, int l, Pass pass, uint32_t mb, uint32_t chunk) {
    b_.dp_wait(issued);
    if (!p_.framework.gather_copy_out) return;
    const double weights = layer_weights_of(l);
    b_.emit(b_.piece(fmt::format("zero3.copy_out.{}", weights), {gather_copy_out(weights)}), pass,
            l, mb, chunk);
  }
  // A pass's gathers of what is outside the layers: the embedding's on the first virtual stage,
  // the head's on the last; the last issued, or 0. The embedding's collectives are keyed with the
  // first layer's, the head's with the last layer's (the stage's key in a uniform plan).
  uint32_t gather_outer(bool first_virtual, bool last_virtual, uint32_t first_key,
                        uint32_t last_key) {
    uint32_t last = 0;
    if (first_virtual && embedding_weights_ > 0)
      last =
          b_.dp_collective(CommKind::allgather, embedding_weights_, "zero3.embedding", first_key);
    if (last_virtual && head_weights_ > 0)
      last = b_.dp_collective(CommKind::allgather, head_weights_, "zero3.head", last_key);
    return last;
  }
  // Their gradients reduce-scattered (ZeRO-2 and 3), head first.
  void scatter_outer(bool first_virtual, bool last_virtual, uint32_t first_key, uint32_t last_key) {
    if (last_virtual && head_grads_ > 0)
      issued_ = b_.dp_collective(CommKind::reducescatter, head_grads_, "zero.head_grads", last_key);
    if (first_virtual && embedding_grads_ > 0)
      issued_ = b_.dp_collective(CommKind::reducescatter, embedding_grads_, "zero.embedding_grads",
                                 first_key);
  }

  // ---- the passes ----------------------------------------------------------------------------
  // Layered accumulation (one stage): each layer for every micro-batch in turn, forward then
  // backward; a sharded layer gathered once per pass, its gradients reduced once. ZeRO-3's
  // gathers issued a layer ahead, the first beside the embedding (and in the backward pass
  // beside the head), as in the per-micro-batch order of scheduled().
  void layered() {
    const uint32_t M = static_cast<uint32_t>(f_.micro_batches);
    const auto key = static_cast<uint32_t>(f_.s);
    const bool zero3 = this->zero3();
    const Time per_pass = p_.framework.host_per_pass;
    const LayerWalk up{0, st_.layers, 1, key}, down{st_.layers - 1, st_.layers, -1, key};
    const uint32_t outer = zero3 ? gather_outer(true, true, key, key) : 0;
    const uint32_t first_up = first_gather(up);
    if (outer > 0) b_.dp_wait(outer);
    for (uint32_t mb = 0; mb < M; ++mb) {
      b_.host(per_pass, Pass::forward, mb, 0);
      b_.emit(*ef_, Pass::forward, -1, mb, 0);
    }
    prefetched(up, first_up, Pass::forward, 0, 0, [&](int l) {
      for (uint32_t mb = 0; mb < M; ++mb) b_.emit(fwd_of(l), Pass::forward, l, mb, 0);
    });
    const uint32_t first_down = first_gather(down);
    for (uint32_t mb = 0; mb < M; ++mb) {
      b_.emit(*hf_, Pass::forward, -1, mb, 0);
      b_.host(per_pass, Pass::backward, mb, 0);
      b_.emit(*hb_, Pass::backward, -1, mb, 0);
    }
    prefetched(down, first_down, Pass::backward, 0, 0, [&](int l) {
      for (uint32_t mb = 0; mb < M; ++mb) {
        rerun(l, l, mb, 0);
        b_.emit(bwd_of(l), Pass::backward, l, mb, 0);
      }
      layer_done(l, key, true);
    });
    for (uint32_t mb = 0; mb < M; ++mb) b_.emit(*eb_, Pass::backward, -1, mb, 0);
    if (f_.dp && p_.zero_stage >= 2) scatter_outer(true, true, key, key);
  }

  // Every pass in the schedule's order. ZeRO-3: the pass's first layer's weights gathered as it
  // starts, and each later layer's while the one before it computes (prefetch one layer ahead, as
  // PyTorch FSDP's BACKWARD_PRE and its host running ahead of the device, DeepSpeed's and
  // Megatron-FSDP's prefetch do), each waited for before its layer runs. The gathers share the
  // one data-parallel stream with the reduce-scatters, in the order they are issued.
  void scheduled() {
    const bool zero3 = this->zero3();
    for (const ScheduleItem& it : order_) {
      const int vs = it.chunk * f_.P + f_.s;
      const int first = st_.first_of(it.chunk);
      if (!it.forward) send_grad();
      b_.host(p_.framework.host_per_pass, it.forward ? Pass::forward : Pass::backward,
              it.micro_batch, it.chunk);
      const int n = st_.layers_of(it.chunk);
      const uint32_t outer = zero3 && it.forward ? gather_outer(vs == 0, vs == V_ - 1, key_of(0),
                                                                key_of(m_.layers - 1))
                                                 : 0;
      const LayerWalk walk = it.forward ? LayerWalk{first, n, 1} : LayerWalk{first + n - 1, n, -1};
      const uint32_t next = first_gather(walk);
      if (it.forward) {
        forward(it, vs, walk, outer, next);
      } else {
        backward(it, vs, walk, next);
      }
    }
  }

  void forward(const ScheduleItem& it, int vs, const LayerWalk& walk, uint32_t outer,
               uint32_t next) {
    const PassEnds ends = pass_ends(p_, t_, vs, V_, true);
    if (ends.receive) {
      b_.emit_one(TaskKind::recv, Pass::forward, it.micro_batch, it.chunk);
      gathers(ends.gathers, Pass::forward, it);
    }
    send_grad();
    if (ends.embedding) {
      if (outer > 0) b_.dp_wait(outer);
      b_.emit(*ef_, Pass::forward, -1, it.micro_batch, it.chunk);
    }
    prefetched(walk, next, Pass::forward, it.micro_batch, it.chunk,
               [&](int l) { b_.emit(fwd_of(l), Pass::forward, l, it.micro_batch, it.chunk); });
    if (ends.head) {
      if (outer > 0) b_.dp_wait(outer);
      b_.emit(*hf_, Pass::forward, -1, it.micro_batch, it.chunk);
    }
    if (ends.send) b_.emit_one(TaskKind::send, Pass::forward, it.micro_batch, it.chunk);
  }

  void backward(const ScheduleItem& it, int vs, const LayerWalk& walk, uint32_t next) {
    const int first = walk.at(walk.count - 1);  // the chunk's first layer, the walk's last
    const PassEnds ends = pass_ends(p_, t_, vs, V_, false);
    if (ends.receive) {
      b_.emit_one(TaskKind::recv, Pass::backward, it.micro_batch, it.chunk);
      gathers(ends.gathers, Pass::backward, it);
    }
    if (ends.head) b_.emit(*hb_, Pass::backward, -1, it.micro_batch, it.chunk);
    const bool last = static_cast<int>(it.micro_batch) == last_bwd_mb_[it.chunk];
    // Asymmetric: the head's gradients open the last segment's first bucket, in every replica
    // alike (with shared stages, they join the stage's last bucket).
    if (x_.asymmetric && f_.dp && vs == V_ - 1 && last && overlapped())
      add(m_.layers - 1, head_grads_);
    prefetched(walk, next, Pass::backward, it.micro_batch, it.chunk, [&](int l) {
      rerun(l, l - first, it.micro_batch, it.chunk);
      b_.emit(bwd_of(l), Pass::backward, l, it.micro_batch, it.chunk);
      layer_done(l, key_of(l), last);
    });
    if (ends.embedding) b_.emit(*eb_, Pass::backward, -1, it.micro_batch, it.chunk);
    if (f_.dp && p_.zero_stage >= 2)
      scatter_outer(ends.embedding, ends.head, key_of(0), key_of(m_.layers - 1));
    if (ends.send) {
      // DeepSpeed's order (Framework::send_grad_after_next_receive; one chunk per stage, as its
      // TrainSchedule has): a backward pass's gradient waits until the next forward pass has
      // received its activation, or goes before the next backward pass.
      if (p_.framework.send_grad_after_next_receive && x_.v == 1) {
        unsent_grad_ = it;
        grad_unsent_ = true;
      } else {
        b_.emit_one(TaskKind::send, Pass::backward, it.micro_batch, it.chunk);
      }
    }
  }

  void send_grad() {
    if (!grad_unsent_) return;
    b_.emit_one(TaskKind::send, Pass::backward, unsent_grad_.micro_batch, unsent_grad_.chunk);
    grad_unsent_ = false;
  }

  // ---- after the last backward pass ----------------------------------------------------------
  // The tied embedding's gradients, between the first and the last stage.
  void reduce_tied() {
    const TiedReduction tied = p_.framework.tied_embedding_reduction;
    const int s = f_.s, P = f_.P;
    const double tied_grads = static_cast<double>(m_.vocab) * m_.hidden / t_ *
                              (tied == TiedReduction::main_grads ? x_.grad_bytes : x_.e);
    if (x_.staged_tied && (s == 0 || s == P - 1)) {
      issued_ =
          b_.dp_collective(CommKind::allreduce, tied_grads, "tied.embedding.grads", kTiedKey,
                           static_cast<uint32_t>(p_.data_parallel_of(0) +
                                                 p_.data_parallel_of(static_cast<size_t>(P - 1))));
    } else if (tied != TiedReduction::none && m_.tied_embeddings && P > 1 &&
               (s == 0 || s == P - 1)) {
      g_.tied_bytes = tied_grads;
      b_.emit_one(TaskKind::tied, Pass::other, 0, 0);
    }
  }

  // Reduced after the backward pass: every layer's gradients, in the order backward produced them
  // (last layer first), in buckets; then the embedding's (and, with shared stages, the head's),
  // which join the last bucket.
  void reduce_after_backward() {
    if (!f_.dp || p_.zero_stage >= 2) return;
    const bool first_virtual_holder = f_.s == 0;
    const bool last_virtual_holder = f_.s == f_.P - 1;
    if (!overlapped()) {
      if (x_.asymmetric && last_virtual_holder) add(m_.layers - 1, head_grads_);
      for (int c = x_.v - 1; c >= 0; --c) {
        for (int l = st_.layers_of(c) - 1; l >= 0; --l) {
          add(st_.first_of(c) + l, layer_grad_of(st_.first_of(c) + l));
          add_experts(st_.first_of(c) + l);
        }
      }
    }
    if (bucket_.held() <= 0) bucket_key_ = key_of(st_.first_layer);
    // The embedding's and the head's gradients (a staged plan's tied word embedding is reduced on
    // its own, reduce_tied; asymmetric replicas added the head's first).
    reduce_bucket(
        bucket_.close(x_.grad_bytes * outer_.grads_on(first_virtual_holder,
                                                      last_virtual_holder && !x_.asymmetric)));
    flush_experts();
  }

  // The optimizer step, once every reduction is through; ZeRO-1 and 2 then gather the updated
  // parameters.
  void step() {
    if (issued_ > 0) b_.dp_wait(issued_);
    b_.host(p_.framework.host_per_step, Pass::other, 0, 0);
    const auto& opt =
        b_.piece("optimizer", {Step{optimizer_step(f_.shard, p_.precision, p_.optimizer)}});
    b_.emit(opt, Pass::other, -1, 0, 0);
    if (f_.dp && (p_.zero_stage == 1 || p_.zero_stage == 2)) {
      const uint32_t gathered = b_.dp_collective(CommKind::allgather, x_.e * f_.dense_params,
                                                 "zero.params", static_cast<uint32_t>(f_.s));
      const uint32_t experts = x_.expert_sync && f_.expert_params > 0
                                   ? b_.dp_collective(CommKind::allgather, x_.e * f_.expert_params,
                                                      "zero.expert_params", expert_key(), x_.edp)
                                   : gathered;
      b_.dp_wait(experts);
    }
  }

  const JobContext& x_;
  const ModelConfig& m_;
  const Plan& p_;
  const StageFigures f_;
  const StagePlan& st_;
  StageCopy g_;
  int t_;
  LayerShape shape_;
  CopyBuilder b_;  // writes g_
  int stage_min_tp_ = 1, V_ = 1;
  const Tasks* dense_fwd_ = nullptr;
  const Tasks* dense_bwd_ = nullptr;
  const Tasks *ef_ = nullptr, *eb_ = nullptr, *hf_ = nullptr, *hb_ = nullptr;
  const Tasks *ar_ = nullptr, *pg_ = nullptr;
  std::map<double, std::pair<const Tasks*, const Tasks*>> moe_pieces_;
  std::vector<ScheduleItem> order_;
  std::vector<int> last_bwd_mb_;
  GradBuckets bucket_, expert_bucket_;
  uint32_t bucket_key_ = 0;
  uint32_t issued_ = 0;  // data-parallel collectives issued so far, as the last returned
  OuterParams outer_;
  double embedding_weights_ = 0, head_weights_ = 0, embedding_grads_ = 0, head_grads_ = 0;
  ScheduleItem unsent_grad_{};
  bool grad_unsent_ = false;
};

// The copies to build, replica by replica (a staged plan's stage by stage), and whether each
// opens a replica.
struct CopySpec {
  size_t r;
  int s;
  bool opens_replica;
};

std::vector<CopySpec> copy_specs(const Plan& plan) {
  std::vector<CopySpec> specs;
  if (plan.staged()) {
    for (int s = 0; s < plan.stages(); ++s) {
      for (size_t j = 0; j < plan.data_parallel_of(static_cast<size_t>(s)); ++j)
        specs.push_back({j, s, false});
    }
  } else {
    for (size_t r = 0; r < plan.replicas.size(); ++r) {
      for (int s = 0; s < plan.stages(r); ++s) specs.push_back({r, s, s == 0});
    }
  }
  return specs;
}

// Each micro-batch's samples in order over a staged plan's stage's copies: a copy sends its
// activation to the next stage's copies whose samples overlap its own, and they send back the
// gradients of those samples.
void link_staged_peers(TrainingJob& job, const Plan& plan) {
  job.next_peers.resize(job.copies.size());
  job.prev_peers.resize(job.copies.size());
  const double whole = static_cast<double>(plan.micro_batch_size);
  uint32_t first = 0;
  for (int s = 0; s + 1 < plan.stages(); ++s) {
    const auto next = static_cast<uint32_t>(first + plan.data_parallel_of(static_cast<size_t>(s)));
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

}  // namespace

TrainingJob build_training_job(const ModelConfig& model, const Plan& plan,
                               const platform::Cluster& cluster, const CostModel& cost) {
  if (model.convolutional()) return build_grid_job(model, plan, cluster, cost);
  TrainingJob job;
  job.model = &model;
  job.plan = &plan;
  job.cluster = &cluster;
  job.chunks = plan.interleave;
  const JobContext x(model, plan, cluster, cost);
  job.activation_bytes_per_transfer = x.activation_bytes;
  if (plan.staged()) job.first_copy.push_back(0);
  // Replicas whose stages are alike share their programs (issue 38): the first copy of each
  // kind by its description, the others that copy on their own devices (alike_copy).
  const bool alike = !plan.staged() && !x.asymmetric;
  std::map<std::string, uint32_t> built;
  for (const CopySpec& spec : copy_specs(plan)) {
    if (spec.opens_replica) job.first_copy.push_back(static_cast<uint32_t>(job.copies.size()));
    const StageFigures f = stage_figures(x, spec.r, spec.s);
    if (alike) {
      const StagePlan& st = plan.stage_plan(spec.r, static_cast<size_t>(spec.s));
      const std::string same =
          alike_key(plan, st, spec.s, f.micro_batches,
                    plan.batch_of(spec.r, static_cast<size_t>(spec.s)), f.shard, cluster);
      if (auto it = built.find(same); it != built.end()) {
        job.copies.push_back(alike_copy(job.copies[it->second], spec.r, st, x.ep, cluster));
        continue;
      }
      built.emplace(same, static_cast<uint32_t>(job.copies.size()));
    }
    job.copies.push_back(StageBuilder(x, f).build());
  }
  if (plan.staged()) link_staged_peers(job, plan);
  finish_job(job, cost);
  return job;
}

}  // namespace hetsim::workload
