// The training replay; see replay.h.
#include "sim/workload/replay/replay.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>

#include "sim/core/error.h"
#include "sim/network/collective_runner.h"

namespace hetsim::workload {

namespace {

network::Op to_op(CommKind k) {
  switch (k) {
    case CommKind::allreduce:
      return network::Op::allreduce;
    case CommKind::allgather:
      return network::Op::allgather;
    case CommKind::reducescatter:
      return network::Op::reducescatter;
    case CommKind::alltoall:
      return network::Op::alltoall;
    case CommKind::halo:
      return network::Op::halo;
    case CommKind::none:
      break;
  }
  return network::Op::allreduce;
}

// Whether every replica runs the same program on the same GPU types: then one can stand for all.
// How long `d` of compute started at `now` takes under slowdowns from given times on: at each
// moment the largest factor of those begun runs the kernels that much slower.
Time stretched(const std::vector<std::pair<Time, double>>& slow_from, Time now, Time d) {
  auto factor_at = [&](Time t) {
    double f = 1;
    for (const auto& [from, x] : slow_from)
      if (from <= t) f = std::max(f, x);
    return f;
  };
  double t = now.seconds(), work = d.seconds();
  for (const auto& [from, x] : slow_from) {
    if (from.seconds() <= t) continue;
    const double f = factor_at(Time::from_seconds(t));
    if (t + work * f <= from.seconds()) break;
    work -= (from.seconds() - t) / f;
    t = from.seconds();
  }
  t += work * factor_at(Time::from_seconds(t));
  return Time::from_seconds(t) - now;
}

bool replicas_identical(const TrainingJob& job) {
  const Plan& p = *job.plan;
  const size_t stages = static_cast<size_t>(p.stages());
  for (size_t r = 1; r < p.replicas.size(); ++r) {
    const ReplicaPlan& a = p.replicas[0];
    const ReplicaPlan& b = p.replicas[r];
    if (a.micro_batches != b.micro_batches || a.stages.size() != b.stages.size()) return false;
    for (size_t s = 0; s < stages; ++s) {
      const StageCopy& ga = job.copies[s];
      const StageCopy& gb = job.copies[r * stages + s];
      if (a.stages[s].first_layer != b.stages[s].first_layer ||
          a.stages[s].layers != b.stages[s].layers ||
          a.stages[s].chunk_layers != b.stages[s].chunk_layers ||
          ga.devices.size() != gb.devices.size() || ga.gpu != gb.gpu ||
          ga.program.size() != gb.program.size() || ga.segments.size() != gb.segments.size() ||
          ga.comms.size() != gb.comms.size() || ga.dp.size() != gb.dp.size() ||
          ga.tied_bytes != gb.tied_bytes || ga.slow_from != gb.slow_from) {
        return false;
      }
      // Shared programs (built alike: training_job.cpp) are the same without a look.
      for (size_t i = 0; i < ga.segments.size() && !gb.segments.shares_with(ga.segments); ++i) {
        if (ga.segments[i].duration != gb.segments[i].duration) return false;
      }
      for (size_t i = 0; i < ga.comms.size() && !gb.comms.shares_with(ga.comms); ++i) {
        if (ga.comms[i].kind != gb.comms[i].kind || ga.comms[i].bytes != gb.comms[i].bytes ||
            ga.comms[i].async != gb.comms[i].async) {
          return false;
        }
      }
      for (size_t i = 0; i < ga.program.size() && !gb.program.shares_with(ga.program); ++i) {
        const Task& x = ga.program[i];
        const Task& y = gb.program[i];
        if (x.kind != y.kind || x.index != y.index || x.chunk != y.chunk || x.pass != y.pass ||
            x.micro_batch != y.micro_batch) {
          return false;
        }
      }
    }
  }
  return true;
}

// The copies of one collective in every replica as one plan whose flows cross every copy's
// links, when the copies have the same structure (steps, dependencies, bytes); nullopt if not.
std::optional<network::CollectivePlan> fold(const std::vector<network::CollectivePlan>& copies) {
  network::CollectivePlan out = copies.front();
  for (size_t r = 1; r < copies.size(); ++r) {
    const network::CollectivePlan& c = copies[r];
    if (c.algorithm != out.algorithm || c.protocol != out.protocol ||
        c.steps.size() != out.steps.size()) {
      return std::nullopt;
    }
    out.start_delay = std::max(out.start_delay, c.start_delay);
    for (size_t i = 0; i < c.steps.size(); ++i) {
      network::PlanStep& o = out.steps[i];
      const network::PlanStep& x = c.steps[i];
      if (x.bytes != o.bytes || x.deps != o.deps || x.max_rate_Bps != o.max_rate_Bps) {
        return std::nullopt;
      }
      o.latency = std::max(o.latency, x.latency);
      o.links.insert(o.links.end(), x.links.begin(), x.links.end());
    }
  }
  return out;
}

class Replayer {
 public:
  Replayer(const TrainingJob& job, ReplayObserver* obs, ReplayOptions options)
      : job_(job), c_(*job.cluster), obs_(obs), opt_(options), net_(engine_, c_.capacities()) {
    stages_ = job.plan->stages();
    replicas_ = static_cast<uint32_t>(job.plan->replicas.size());
    // A link whose capacity a what-if scaled breaks the symmetry between the replicas' copies:
    // folded, every replica would move at the degraded copy's pace.
    fold_ = !opt_.exact && replicas_ > 1 && !c_.links_scaled() && replicas_identical(job);
    const size_t n = fold_ ? stages_ : job.copies.size();
    st_.resize(n);
    const int chunks = job.chunks;
    for (size_t g = 0; g < n; ++g) {
      const uint32_t mbs = job.copies[g].micro_batches;
      st_[g].arrived.assign(2 * chunks * mbs, 0);
      if (rendezvous()) st_[g].posted.assign(2 * chunks * mbs, 0);
      st_[g].mbs = mbs;
      if (job.staged()) {
        // A staged plan's receive waits for a transfer from every peer that shares its samples.
        st_[g].need[0] = static_cast<uint8_t>(std::max<size_t>(1, job.prev_peers[g].size()));
        st_[g].need[1] = static_cast<uint8_t>(std::max<size_t>(1, job.next_peers[g].size()));
      }
    }
  }

  ReplayResult run() {
    prepare();
    for (uint32_t g = 0; g < st_.size(); ++g) {
      engine_.schedule_at(Time(), [this, g] { advance(g); });
    }
    ProgressPoll poll(*this);  // outlives every event: the engine runs only here
    if (opt_.progress) engine_.add_observer(&poll);
    engine_.run();
    ReplayResult r;
    r.folded_replicas = fold_ ? replicas_ : 1;
    for (uint32_t g = 0; g < job_.copies.size(); ++g) {
      const State& s = st_[fold_ ? g % stages_ : g];
      if (s.pc < job_.copies[g].program.size()) {
        const Task& t = job_.copies[g].program[s.pc];
        throw RunError("replay stalled: replica " + std::to_string(job_.copies[g].replica) +
                       " stage " + std::to_string(job_.copies[g].stage) + " waits at task " +
                       std::to_string(s.pc) + " (kind " + std::to_string(int(t.kind)) +
                       ", micro-batch " + std::to_string(t.micro_batch) + ")");
      }
      r.copies.push_back(s.times);
      r.iteration = std::max(r.iteration, s.times.finish);
    }
    r.events = engine_.events_executed();
    r.flows = flows_;
    return r;
  }

 private:
  // Engine observer that reports the replay's status every opt_.progress_every events.
  class ProgressPoll : public EngineObserver {
   public:
    explicit ProgressPoll(const Replayer& r) : r_(r) {
      for (const StageCopy& g : r.job_.copies) total_ += g.program.size();
    }
    void on_event(Time now) override {
      if (++count_ < r_.opt_.progress_every) return;
      count_ = 0;
      ReplayStatus s;
      s.now = now;
      s.events = r_.engine_.events_executed();
      s.tasks_total = total_;
      for (const State& st : r_.st_) s.tasks_done += st.pc;
      if (r_.fold_) s.tasks_done *= r_.replicas_;  // every replica is where the replayed one is
      r_.opt_.progress(s);
    }

   private:
    const Replayer& r_;
    uint64_t count_ = 0, total_ = 0;
  };

  struct State {
    size_t pc = 0;
    WaitReason blocked = WaitReason::none;
    Time wait_start;
    int tp_inflight = 0;
    uint32_t dp_issued = 0, dp_done = 0;
    uint32_t ep_reached = 0, cp_reached = 0;  // expert- and context-parallel collectives so far
    bool dp_busy = false;
    std::vector<uint8_t> arrived;  // [dir][chunk][mb]: transfers arrived
    std::vector<uint8_t> posted;   // [dir][chunk][mb]: receives reached (with rendezvous())
    uint8_t need[2] = {1, 1};      // transfers a receive waits for: forward, backward
    uint32_t mbs = 0;
    CopyTimes times;
  };

  size_t key(uint32_t g, bool backward, uint32_t chunk, uint32_t mb) const {
    return (static_cast<size_t>(backward) * job_.chunks + chunk) * st_[g].mbs + mb;
  }

  void resume(uint32_t g) {
    State& s = st_[g];
    const Time waited = engine_.now() - s.wait_start;
    switch (s.blocked) {
      case WaitReason::tensor_parallel:
        s.times.tp_wait += waited;
        break;
      case WaitReason::pipeline:
        s.times.pp_wait += waited;
        break;
      case WaitReason::data_parallel:
        s.times.dp_wait += waited;
        break;
      case WaitReason::expert_parallel:
        s.times.ep_wait += waited;
        break;
      case WaitReason::context_parallel:
        s.times.cp_wait += waited;
        break;
      case WaitReason::none:
        break;
    }
    s.blocked = WaitReason::none;
    ++s.pc;
    advance(g);
  }

  void block(uint32_t g, WaitReason why) {
    st_[g].blocked = why;
    st_[g].wait_start = engine_.now();
  }

  void advance(uint32_t g) {
    const StageCopy& copy = job_.copies[g];
    State& s = st_[g];
    while (s.pc < copy.program.size()) {
      if (!step(g, copy.program[s.pc])) return;
    }
    s.times.finish = engine_.now();
  }

  // Starts the copy's next task, `t`: true when the copy moves on to the task after it at
  // once, false when it waits (for a kernel, a transfer, a collective) and resumes later.
  bool step(uint32_t g, const Task& t) {
    const StageCopy& copy = job_.copies[g];
    State& s = st_[g];
    switch (t.kind) {
      case TaskKind::compute:
        start_compute(g, t);
        return false;
      case TaskKind::tp_comm:
        return start_tp_comm(g, t);
      case TaskKind::tp_wait:
        if (s.tp_inflight == 0) {
          ++s.pc;
          return true;
        }
        block(g, WaitReason::tensor_parallel);
        return false;
      case TaskKind::recv:
        return receive(g, t);
      case TaskKind::send:
        if (job_.plan->framework.blocking_p2p) {
          // A blocking send (DeepSpeed's pipeline engine): the stage waits for its transfer.
          block(g, WaitReason::pipeline);
          send(g, t, true);
          return false;
        }
        send(g, t, false);
        ++s.pc;
        return true;
      case TaskKind::dp_comm:
        ++s.dp_issued;
        if (opt_.free_communication) {
          s.dp_done = s.dp_issued;
        } else if (!s.dp_busy) {
          dp_offer(g);
        }
        ++s.pc;
        return true;
      case TaskKind::tied:
        if (opt_.free_communication) {
          ++s.pc;
          return true;
        }
        block(g, WaitReason::data_parallel);
        tied_offer(g);
        return false;
      case TaskKind::dp_wait:
        if (s.dp_done >= t.index) {
          ++s.pc;
          return true;
        }
        block(g, WaitReason::data_parallel);
        return false;
      case TaskKind::ep_comm:
      case TaskKind::cp_comm:
        if (opt_.free_communication) {
          ++s.pc;
          return true;
        }
        if (copy.comms[t.index].async) {
          group_offer(g, t.index, s.pc);
          ++s.pc;
          return true;
        }
        block(g, t.kind == TaskKind::ep_comm ? WaitReason::expert_parallel
                                             : WaitReason::context_parallel);
        group_offer(g, t.index, s.pc);
        return false;
    }
    return false;
  }

  // A segment of kernels: the copy resumes when it ends, stretched where the GPU is slowed.
  void start_compute(uint32_t g, const Task& t) {
    const StageCopy& copy = job_.copies[g];
    const Time start = engine_.now();
    const Segment& seg = copy.segments[t.index];
    const Time d = copy.slow_from.empty() || seg.ops.empty()
                       ? seg.duration
                       : stretched(copy.slow_from, start, seg.duration);
    engine_.schedule_in(d, [this, g, start, d] {
      State& st = st_[g];
      st.times.compute += d;
      if (obs_) {
        for_copies(g, [&](uint32_t c) {
          obs_->on_compute(job_, c, job_.copies[g].program[st.pc], start, engine_.now());
        });
      }
      ++st.pc;
      advance(g);
    });
  }

  // A tensor-parallel collective: an asynchronous one runs beside the kernels after it (a
  // tp_wait joins it), a synchronous one holds the copy until it ends.
  bool start_tp_comm(uint32_t g, const Task& t) {
    State& s = st_[g];
    if (opt_.free_communication) {
      ++s.pc;
      return true;
    }
    const CommTemplate& ct = job_.copies[g].comms[t.index];
    const Time start = engine_.now();
    const size_t pc = s.pc;
    if (ct.async) {
      ++s.tp_inflight;
      collective(ct.measured, g, t.index, [this, g, start, pc] {
        State& st = st_[g];
        tp_observed(g, pc, start);
        if (--st.tp_inflight == 0 && st.blocked == WaitReason::tensor_parallel) resume(g);
      });
      ++s.pc;
      return true;
    }
    block(g, WaitReason::tensor_parallel);
    collective(ct.measured, g, t.index, [this, g, start, pc] {
      tp_observed(g, pc, start);
      resume(g);
    });
    return false;
  }

  // A pipeline receive: posting it lets a send that waited for it move; the copy goes on once
  // its transfers have arrived.
  bool receive(uint32_t g, const Task& t) {
    State& s = st_[g];
    const size_t k = key(g, t.pass == Pass::backward, t.chunk, t.micro_batch);
    if (!s.posted.empty() && !s.posted[k]) {
      s.posted[k] = 1;
      // A send that waited for this receive to be posted moves now.
      if (auto w = waiting_sends_.find({g, k}); w != waiting_sends_.end()) {
        const std::function<void()> go = std::move(w->second);
        waiting_sends_.erase(w);
        go();
      }
    }
    if (s.arrived[k] >= s.need[t.pass == Pass::backward]) {
      ++s.pc;
      return true;
    }
    block(g, WaitReason::pipeline);
    return false;
  }

  // ---- flow templates ----------------------------------------------------------------------
  // Every flow the replay can start is built before it starts, so that the links that can never
  // bind a rate are found once and left out of every flow (keep_binding_links).
  void prepare() {
    if (opt_.free_communication) return;
    for (uint32_t g = 0; g < st_.size(); ++g) {
      const StageCopy& copy = job_.copies[g];
      for (uint32_t i = 0; i < copy.comms.size(); ++i) {
        if (copy.comms[i].measured) continue;
        if (copy.comms[i].expert || copy.comms[i].context) {
          group_plan(g, i);
        } else {
          tp_plan(g, i);
        }
      }
      if (job_.staged()) {
        // A staged plan's peers: the copies that share samples with this one.
        for (const auto* peers : {&job_.next_peers[g], &job_.prev_peers[g]}) {
          for (const TrainingJob::Peer& q : *peers) {
            const size_t n = std::max(copy.devices.size(), job_.copies[q.copy].devices.size());
            for (uint32_t j = 0; j < n; ++j) path_of(g, q.copy, j);
          }
        }
        continue;
      }
      const uint32_t s = copy.stage, first = g - s, P = job_.stages_of(copy.replica);
      // Where send() can go: the next stage forward (the first, past the last: interleaved),
      // the previous one backward.
      for (uint32_t d : {first + (s + 1 < P ? s + 1 : 0), first + (s > 0 ? s - 1 : P - 1)}) {
        const size_t n = std::max(copy.devices.size(), job_.copies[d].devices.size());
        for (uint32_t j = 0; j < n; ++j) path_of(g, d, j);
      }
      const bool tied = std::any_of(copy.program.begin(), copy.program.end(),
                                    [](const Task& t) { return t.kind == TaskKind::tied; });
      if (tied && s == 0 && !copy.tied_measured) {
        const size_t n = std::max(copy.devices.size(), job_.copies[first + P - 1].devices.size());
        for (uint32_t j = 0; j < n; ++j) tied_plan(copy.replica, j);
      }
    }
    for (uint32_t k = 0; k < job_.dp_syncs.size(); ++k) {
      const auto [g, i] = job_.dp_syncs[k].members.front();
      if (job_.copies[g].dp[i].measured) continue;
      // Folded, replica 0's collectives run for every copy: an expert sync among the other
      // expert-parallel ranks' replicas is never launched (dp_plan runs it in replica 0's).
      if (fold_ && job_.copies[g].replica != 0) continue;
      for (uint32_t j = 0; j < job_.dp_syncs[k].pieces; ++j) dp_plan(k, j);
    }
    sealed_ = true;
    // The templates in a fixed order.
    std::vector<std::vector<network::LinkUse>*> lists;
    auto add_plan = [&](network::CollectivePlan& p) {
      for (network::PlanStep& st : p.steps) lists.push_back(&st.links);
    };
    for (auto& [k, plans] : tp_plans_)
      for (auto& p : *plans) add_plan(p);
    for (auto& [k, plans] : tied_plans_)
      for (auto& p : *plans) add_plan(p);
    for (auto& [k, plans] : dp_plans_)
      for (auto& p : *plans) add_plan(p);
    for (auto& [k, plans] : group_plans_)
      for (auto& p : *plans) add_plan(p);
    for (auto& [k, p] : paths_) lists.push_back(&p->links);
    network::keep_binding_links(lists, c_.capacities());
  }

  void unsealed(const char* what) const {
    if (sealed_) throw RunError(std::string("replay: a ") + what + " flow it did not prepare");
  }

  // Calls f for copy g and, when replicas are folded, for its stage's copy in every replica.
  template <class F>
  void for_copies(uint32_t g, F f) const {
    if (!fold_) return f(g);
    for (uint32_t r = 0; r < replicas_; ++r) f(r * stages_ + g);
  }

  // The plans one collective of a copy runs: its own, or with folded replicas either one plan
  // over every copy's links or, where the copies differ in structure, every copy's own plan
  // (the copy resumes when the last is done).
  using Plans = std::vector<network::CollectivePlan>;
  Plans plans_for(CommKind kind, double bytes,
                  const std::function<std::vector<platform::GpuId>(uint32_t)>& ranks_of) {
    Plans copies;
    for (uint32_t r = 0; r < (fold_ ? replicas_ : 1); ++r) {
      copies.push_back(plan_for(kind, bytes, ranks_of(r)));
    }
    if (copies.size() == 1) return copies;
    if (auto f = fold(copies)) return Plans{std::move(*f)};
    return copies;
  }

  // ---- tensor parallel -------------------------------------------------------------------
  const Plans& tp_plan(uint32_t g, uint32_t index) {
    const CommTemplate& ct = job_.copies[g].comms[index];
    auto& slot = tp_plans_[{g, static_cast<uint32_t>(ct.kind), ct.bytes}];
    if (!slot) {
      unsealed("tensor-parallel");
      slot = std::make_unique<Plans>(plans_for(
          ct.kind, ct.bytes, [&](uint32_t r) { return job_.copies[r * stages_ + g].devices; }));
    }
    return *slot;
  }

  // A tensor-parallel collective: its measured time where calibration has one, else its flows.
  void collective(const std::optional<Time>& measured, uint32_t g, uint32_t index, Callback done) {
    if (measured) {
      engine_.schedule_in(*measured, std::move(done));
      return;
    }
    launch(tp_plan(g, index), std::move(done));
  }

  void tp_observed(uint32_t g, size_t pc, Time start) {
    if (!obs_) return;
    const Task& t = job_.copies[g].program[pc];
    for_copies(g, [&](uint32_t c) {
      obs_->on_collective(job_, c, "tp", job_.copies[g].comms[t.index].name, t, start,
                          engine_.now());
    });
  }

  network::CollectivePlan plan_for(CommKind kind, double bytes,
                                   const std::vector<platform::GpuId>& ranks) {
    network::CollectiveRequest req;
    req.op = to_op(kind);
    req.bytes = bytes;
    req.ranks = ranks;
    req.host_launch = false;  // inside an iteration, kernels are queued ahead on the stream
    // --exact: every pair of an all-to-all its own flow (network::Expansion).
    if (opt_.exact && req.op == network::Op::alltoall) req.expansion = network::Expansion::stepwise;
    return node_plans_.plan(req);
  }

  // Runs every plan; `done` when the last has finished.
  void launch(const Plans& plans, Callback done) {
    if (plans.size() == 1) return launch(plans.front(), std::move(done));
    auto left = std::make_shared<size_t>(plans.size());
    for (const network::CollectivePlan& p : plans) {
      launch(p, [left, done] {
        if (--*left == 0) done();
      });
    }
  }

  void launch(const network::CollectivePlan& plan, Callback done) {
    runs_.emplace_back();
    auto it = std::prev(runs_.end());
    *it = std::make_unique<network::CollectiveRun>(engine_, net_, plan, [this, it, done] {
      done();
      // Free the finished run after this event (it is still on the stack).
      engine_.schedule_in(Time(), [this, it] { runs_.erase(it); });
    });
    flows_ += plan.steps.size();
    (*it)->start();
  }

  // ---- pipeline --------------------------------------------------------------------------
  // A pipeline transfer; with `blocking`, the sending copy resumes when it has arrived.
  void send(uint32_t g, const Task& t, bool blocking) {
    if (job_.staged()) {
      send_resharded(g, t, blocking);
      return;
    }
    const StageCopy& src = job_.copies[g];
    const bool backward = t.pass == Pass::backward;
    const uint32_t P = job_.stages_of(src.replica);
    uint32_t stage = src.stage, chunk = t.chunk;
    if (!backward) {
      if (stage + 1 < P) {
        ++stage;
      } else {
        stage = 0;
        ++chunk;
      }
    } else {
      if (stage > 0) {
        --stage;
      } else {
        stage = P - 1;
        --chunk;
      }
    }
    const uint32_t dst = g - src.stage + stage;
    auto observed = [this, g, dst](const Task& task, Time start) {
      if (!obs_) return;
      for_copies(g, [&](uint32_t c) {
        obs_->on_transfer(job_, c, c - g + dst, task, start, engine_.now());
      });
    };
    if (opt_.free_communication) {
      engine_.schedule_in(Time(), [this, g, dst, t, backward, chunk, blocking, observed] {
        arrive(dst, key(dst, backward, chunk, t.micro_batch));
        observed(t, engine_.now());
        if (blocking) resume(g);
      });
      return;
    }
    const auto& a = src.devices;
    const auto& b = job_.copies[dst].devices;
    const size_t n = std::max(a.size(), b.size());
    // Megatron's scatter-gather: each tensor-parallel rank sends its 1/t slice.
    const double bytes = job_.activation_bytes_per_transfer / static_cast<double>(n);
    const size_t k = key(dst, backward, chunk, t.micro_batch);
    auto go = [this, g, dst, n, bytes, k, t, blocking, observed] {
      const Time start = engine_.now();
      send_slices(g, dst, n, bytes, [this, g, dst, k, t, start, blocking, observed] {
        observed(t, start);
        arrive(dst, k);
        if (blocking) resume(g);
      });
    };
    // Rendezvous: more than the connection's buffer moves only once the receiver is there.
    if (rendezvous() && job_.plan->framework.send_waits_for_receiver(bytes) &&
        !st_[dst].posted[k]) {
      waiting_sends_.emplace(std::make_pair(dst, k), std::move(go));
      return;
    }
    go();
  }

  // Whether sends may wait for their receivers (Framework::send_waits_for_receiver): not between
  // shared stages (staged plans), whose receives gather from several peers, nor when
  // communication is free.
  bool rendezvous() const {
    return job_.plan->framework.p2p_buffer_bytes && !job_.staged() && !opt_.free_communication;
  }

  // The n slices of a transfer from copy g to dst, `bytes` each, slice j over tensor-parallel
  // rank j's path; `done` runs when the last has arrived.
  void send_slices(uint32_t g, uint32_t dst, size_t n, double bytes, std::function<void()> done) {
    auto left = std::make_shared<size_t>(n);
    auto finish = std::make_shared<std::function<void()>>(std::move(done));
    for (size_t j = 0; j < n; ++j) {
      const Path& path = path_of(g, dst, static_cast<uint32_t>(j));
      network::FlowSpec f;
      f.bytes = bytes;
      f.links = path.links;
      f.latency = path.latency;
      f.max_rate_Bps = path.cap;
      f.on_done = [left, finish] {
        if (--*left == 0) (*finish)();
      };
      ++flows_;
      net_.start(std::move(f));
    }
  }

  // A staged plan's pipeline transfer: to every copy of the next stage (forward) or of the one
  // before (backward) that shares samples with this copy, each peer's share of the activation
  // in 1/t slices as between any two stages; with `blocking`, the sender resumes when all have
  // arrived.
  void send_resharded(uint32_t g, const Task& t, bool blocking) {
    const StageCopy& src = job_.copies[g];
    const bool backward = t.pass == Pass::backward;
    const auto& peers = backward ? job_.prev_peers[g] : job_.next_peers[g];
    auto pending = std::make_shared<size_t>(peers.size());
    const Time start = engine_.now();
    auto one_done = [this, g, t, start, blocking, pending](uint32_t dst, size_t k) {
      if (obs_) obs_->on_transfer(job_, g, dst, t, start, engine_.now());
      arrive(dst, k);
      if (--*pending == 0 && blocking) resume(g);
    };
    for (const TrainingJob::Peer& q : peers) {
      const uint32_t dst = q.copy;
      const size_t k = key(dst, backward, t.chunk, t.micro_batch);
      if (opt_.free_communication) {
        engine_.schedule_in(Time(), [one_done, dst, k] { one_done(dst, k); });
        continue;
      }
      const size_t n = std::max(src.devices.size(), job_.copies[dst].devices.size());
      const double bytes = job_.activation_bytes_per_transfer * q.share / static_cast<double>(n);
      send_slices(g, dst, n, bytes, [one_done, dst, k] { one_done(dst, k); });
    }
  }

  // The links and latency of tensor-parallel rank j's slice of a pipeline transfer between two
  // copies; folded, the routes of every replica's copy, with the latency of the slowest.
  struct Path {
    std::vector<network::LinkUse> links;  // sorted by link, repeated crossings counted
    Time latency;
    double cap = 0;  // NCCL's socket transport's cap on one connection (0: none)
  };
  const Path& path_of(uint32_t g, uint32_t dst, uint32_t j) {
    auto& slot = paths_[{g, dst, j}];
    if (slot) return *slot;
    unsealed("pipeline");
    slot = std::make_unique<Path>();
    for (uint32_t r = 0; r < (fold_ ? replicas_ : 1); ++r) {
      const auto& da = job_.copies[r * stages_ + g].devices;
      const auto& db = job_.copies[r * stages_ + dst].devices;
      const auto route = c_.route(da[j % da.size()], db[j % db.size()]);
      for (platform::LinkId l : route) slot->links.push_back({l, 1});
      slot->latency = std::max(
          slot->latency, network::step_latency(network::Algorithm::direct,
                                               network::Protocol::simple, c_.route_kind(route)) +
                             c_.route_latency(route));
      const double cap = c_.route_flow_cap(route);
      if (cap > 0) slot->cap = slot->cap == 0 ? cap : std::min(slot->cap, cap);
    }
    network::merge_links(slot->links);
    return *slot;
  }

  void arrive(uint32_t dst, size_t k) {
    State& d = st_[dst];
    ++d.arrived[k];
    if (d.blocked == WaitReason::pipeline) {
      const Task& want = job_.copies[dst].program[d.pc];
      const bool backward = want.pass == Pass::backward;
      if (want.kind == TaskKind::recv && key(dst, backward, want.chunk, want.micro_batch) == k &&
          d.arrived[k] >= d.need[backward])
        resume(dst);
    }
  }

  // ---- tied embedding --------------------------------------------------------------------
  // The first and last stage of a replica both wait at their `tied` task; when both are there,
  // each pair of their tensor-parallel ranks all-reduces its shard of the embedding gradients.
  void tied_offer(uint32_t g) {
    const uint32_t r = job_.copies[g].replica;
    if (++tied_ready_[r] < 2) return;
    tied_ready_.erase(r);
    const uint32_t a = job_.first_copy[r], b = job_.first_copy[r + 1] - 1;
    const size_t n = std::max(job_.copies[a].devices.size(), job_.copies[b].devices.size());
    auto left = std::make_shared<size_t>(n);
    const Time start = engine_.now();
    for (size_t j = 0; j < n; ++j) {
      auto done = [this, left, a, b, start] {
        if (--*left > 0) return;
        for (uint32_t g2 : {a, b}) {
          if (obs_) {
            for_copies(g2, [&](uint32_t c) {
              obs_->on_collective(job_, c, "dp", "tied.embedding.grads",
                                  job_.copies[g2].program[st_[g2].pc], start, engine_.now());
            });
          }
          resume(g2);
        }
      };
      if (job_.copies[a].tied_measured) {
        engine_.schedule_in(*job_.copies[a].tied_measured, done);
      } else {
        launch(tied_plan(r, static_cast<uint32_t>(j)), done);
      }
    }
  }

  // Pair j of the end stages' tensor-parallel ranks: its plans for the tied embedding's gradients.
  const Plans& tied_plan(uint32_t r, uint32_t j) {
    auto& slot = tied_plans_[{r, j}];
    if (slot) return *slot;
    unsealed("tied embedding");
    // Folded, replica c's copy of a stage is stages_ copies on per replica (all alike).
    const uint32_t a = job_.first_copy[r], b = job_.first_copy[r + 1] - 1;
    slot = std::make_unique<Plans>(
        plans_for(CommKind::allreduce, tied_pair_bytes(job_, r), [&](uint32_t c) {
          const auto& ca = job_.copies[c * stages_ + a].devices;
          const auto& cb = job_.copies[c * stages_ + b].devices;
          return std::vector<platform::GpuId>{ca[j % ca.size()], cb[j % cb.size()]};
        }));
    return *slot;
  }

  // ---- expert and context parallel ----------------------------------------------------------
  // A collective among the same stage of `size` consecutive replicas, one per tensor-parallel
  // rank j among the members' rank j: a MoE layer's all-to-all over the expert-parallel group,
  // or ring attention's exchange over the context-parallel group. Folded, every group's copies
  // move in lockstep with replica 0's: one plan over every group's links.
  const Plans& group_plan(uint32_t g, uint32_t index) {
    const StageCopy& copy = job_.copies[g];
    const CommTemplate& ct = copy.comms[index];
    const uint32_t size = job_.group_size(ct), q0 = copy.replica / size;
    auto& slot =
        group_plans_[{q0, copy.stage, ct.context, static_cast<uint32_t>(ct.kind), ct.bytes}];
    if (slot) return *slot;
    unsealed(ct.context ? "context-parallel" : "expert-parallel");
    slot = std::make_unique<Plans>();
    const uint32_t groups = fold_ ? replicas_ / size : 1;
    // Experts whole on each rank (Plan::experts_whole): one all-to-all over every rank of the
    // group's replicas; else one per tensor-parallel rank j, among the replicas' rank j.
    const bool whole = ct.expert && job_.plan->experts_whole();
    for (size_t j = 0; j < (whole ? 1 : copy.devices.size()); ++j) {
      Plans copies;
      for (uint32_t q = q0; q < q0 + groups; ++q) {
        copies.push_back(plan_for(ct.kind, ct.bytes,
                                  job_.peer_ranks(job_.first_copy[q * size] + copy.stage, ct, j)));
      }
      if (copies.size() > 1) {
        if (auto f = fold(copies)) copies = Plans{std::move(*f)};
      }
      for (auto& c : copies) slot->push_back(std::move(c));
    }
    return *slot;
  }

  // A copy reaches its n-th such collective (task `pc`); the members' n-th run together when
  // all are there (folded: replica 0's copy stands for its whole group). A blocking one resumes
  // each member when done; an async one (ring attention's key/value exchange) counts among the
  // member's collectives in flight, which its next tp_wait waits for.
  void group_offer(uint32_t g, uint32_t index, size_t pc) {
    const StageCopy& copy = job_.copies[g];
    const CommTemplate& ct = copy.comms[index];
    State& s = st_[g];
    const uint32_t n = ct.context ? s.cp_reached++ : s.ep_reached++;
    if (ct.async) ++s.tp_inflight;
    std::vector<std::pair<uint32_t, size_t>> members;
    if (fold_) {
      members.emplace_back(g, pc);
    } else {
      const uint32_t size = job_.group_size(ct), q = copy.replica / size;
      auto& ready = group_ready_[{q, copy.stage, ct.context, n}];
      ready.emplace_back(g, pc);
      if (ready.size() < size) return;
      members = std::move(ready);
      group_ready_.erase({q, copy.stage, ct.context, n});
    }
    const Time start = engine_.now();
    const bool async = ct.async;
    const char* stream = ct.context ? "cp" : "ep";
    auto done = [this, members, start, async, stream] {
      for (const auto& [m, at] : members) {
        if (obs_) {
          const Task& t = job_.copies[m].program[at];
          for_copies(m, [&](uint32_t c) {
            obs_->on_collective(job_, c, stream, job_.copies[m].comms[t.index].name, t, start,
                                engine_.now());
          });
        }
        State& st = st_[m];
        if (!async) {
          resume(m);
        } else if (--st.tp_inflight == 0 && st.blocked == WaitReason::tensor_parallel) {
          resume(m);
        }
      }
    };
    if (ct.measured) {
      engine_.schedule_in(*ct.measured, std::move(done));
      return;
    }
    launch(group_plan(g, index), std::move(done));
  }

  // ---- data parallel ---------------------------------------------------------------------
  // Shard j of a data-parallel collective (tensor-parallel rank j's part, where the members
  // share one degree): among the member ranks that hold it.
  // Folded, a sync among some of the replicas (a MoE plan's expert gradients, among those of
  // one expert-parallel rank) stands for the copies among the others: replica 0's members, each
  // shifted by c replicas, for c below replicas / members. 1 for a sync of every replica.
  uint32_t sync_copies(const DpSync& ds) const {
    return fold_ ? replicas_ / static_cast<uint32_t>(job_.dp_peers[ds.peers].size()) : 1;
  }

  const Plans& dp_plan(uint32_t sync, uint32_t j) {
    const DpSync& ds = job_.dp_syncs[sync];
    const DpCollective& dc = job_.copies[ds.members.front().first].dp[ds.members.front().second];
    // A grid collective (over every member rank) shares no plan with a shard's among them.
    const uint32_t shard = dc.grid ? 0x80000000u | j : j;
    auto& slot = dp_plans_[{ds.peers, shard, static_cast<uint32_t>(dc.kind), ds.piece_bytes}];
    if (slot) return *slot;
    unsealed("data-parallel");
    const uint32_t copies = sync_copies(ds);
    Plans plans;
    for (uint32_t c = 0; c < copies; ++c) {
      std::vector<platform::GpuId> ranks;
      for (uint32_t g : job_.dp_peers[ds.peers]) {
        const auto& d = job_.copies[g + c * stages_].devices;
        if (dc.grid) {
          ranks.insert(ranks.end(), d.begin(), d.end());
        } else {
          ranks.push_back(d[ds.holder(j, d.size())]);
        }
      }
      plans.push_back(plan_for(dc.kind, ds.piece_bytes, ranks));
    }
    if (plans.size() > 1) {
      if (auto f = fold(plans)) plans = Plans{std::move(*f)};
    }
    slot = std::make_unique<Plans>(std::move(plans));
    return *slot;
  }

  // A copy offers its next queued collective; it starts when every member copy has offered it
  // (folded: the one replayed).
  void dp_offer(uint32_t g) {
    State& s = st_[g];
    if (s.dp_busy || s.dp_done >= s.dp_issued) return;
    s.dp_busy = true;
    const uint32_t sync = job_.copies[g].dp[s.dp_done].sync;
    auto& ready = dp_ready_[sync];
    if (++ready < (fold_ ? 1 : job_.dp_syncs[sync].members.size())) return;
    dp_ready_.erase(sync);
    dp_launch(sync);
  }

  void dp_launch(uint32_t sync) {
    const DpSync& ds = job_.dp_syncs[sync];
    const auto [g0, i0] = ds.members.front();
    const size_t t = ds.pieces;
    auto left = std::make_shared<size_t>(t);
    const Time start = engine_.now();
    const std::optional<Time> measured = job_.copies[g0].dp[i0].measured;
    for (size_t j = 0; j < t; ++j) {
      auto done = [this, left, sync, start] {
        if (--*left > 0) return;
        const DpSync& d = job_.dp_syncs[sync];
        if (obs_) {
          // Folded, a sync among some of the replicas ran for every copy (dp_plan).
          const uint32_t copies = sync_copies(d);
          for (uint32_t c = 0; c < copies; ++c) {
            for (const auto& [g, index] : d.members) {
              Task t;
              t.kind = TaskKind::dp_comm;
              t.index = index;
              obs_->on_collective(job_, g + c * stages_, "dp", job_.copies[g].dp[index].name, t,
                                  start, engine_.now());
            }
          }
        }
        // Folded, replica 0's copy (the first member) stands for every copy.
        for (size_t m = 0; m < (fold_ ? 1 : d.members.size()); ++m) {
          const auto [g, index] = d.members[m];
          State& s = st_[g];
          s.dp_done = index + 1;
          s.dp_busy = false;
          if (s.blocked == WaitReason::data_parallel &&
              s.dp_done >= job_.copies[g].program[s.pc].index) {
            resume(g);
          }
          dp_offer(g);
        }
      };
      if (measured) {
        engine_.schedule_in(*measured, done);
      } else {
        launch(dp_plan(sync, static_cast<uint32_t>(j)), done);
      }
    }
  }

  const TrainingJob& job_;
  const platform::Cluster& c_;
  ReplayObserver* obs_;
  ReplayOptions opt_;
  Engine engine_;
  network::FlowNetwork net_;
  network::NodePlans node_plans_{c_};  // tensor-parallel plans, one per node type and ranks
  std::vector<State> st_;
  uint32_t stages_ = 1, replicas_ = 1;
  bool fold_ = false;    // one replica stands for all (see ReplayOptions::exact)
  bool sealed_ = false;  // every flow template built (prepare)
  // Plans by copy, kind and bytes: every layer's collectives of one kind and size share one.
  std::map<std::tuple<uint32_t, uint32_t, double>, std::unique_ptr<Plans>> tp_plans_;
  // Plans by member set, tensor-parallel rank, kind and bytes: buckets of one size share one.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, double>, std::unique_ptr<Plans>> dp_plans_;
  std::map<uint32_t, uint32_t> dp_ready_;  // sync -> members that offered it
  // Expert- and context-parallel plans by group, stage, which, kind and bytes; the members
  // waiting (copy, task) by group, stage, which and the collective's ordinal.
  std::map<std::tuple<uint32_t, uint32_t, bool, uint32_t, double>, std::unique_ptr<Plans>>
      group_plans_;
  std::map<std::tuple<uint32_t, uint32_t, bool, uint32_t>, std::vector<std::pair<uint32_t, size_t>>>
      group_ready_;
  std::map<uint32_t, uint32_t> tied_ready_;  // replica -> end stages waiting
  // Rendezvous sends issued before their receive: (receiving copy, key) -> start the transfer.
  std::map<std::pair<uint32_t, size_t>, std::function<void()>> waiting_sends_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Plans>> tied_plans_;
  std::list<std::unique_ptr<network::CollectiveRun>> runs_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::unique_ptr<Path>> paths_;
  uint64_t flows_ = 0;
};

}  // namespace

ReplayResult replay(const TrainingJob& job, ReplayObserver* observer, ReplayOptions options) {
  return Replayer(job, observer, options).run();
}

}  // namespace hetsim::workload
