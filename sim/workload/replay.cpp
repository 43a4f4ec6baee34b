// The training replay; see replay.h.
#include "sim/workload/replay.h"

#include <deque>
#include <list>
#include <map>
#include <memory>

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
    case CommKind::none:
      break;
  }
  return network::Op::allreduce;
}

class Replayer {
 public:
  Replayer(const TrainingJob& job, ReplayObserver* obs, ReplayOptions options)
      : job_(job), c_(*job.cluster), obs_(obs), opt_(options), net_(engine_, c_.capacities()) {
    const size_t n = job.groups.size();
    st_.resize(n);
    const int chunks = job.chunks;
    for (size_t g = 0; g < n; ++g) {
      const uint32_t mbs = job.plan->replicas[job.groups[g].replica].micro_batches;
      st_[g].arrived.assign(2 * chunks * mbs, 0);
      st_[g].mbs = mbs;
    }
    stages_ = job.plan->stages();
    replicas_ = static_cast<uint32_t>(job.plan->replicas.size());
    dp_ready_.resize(stages_);
  }

  ReplayResult run() {
    for (uint32_t g = 0; g < job_.groups.size(); ++g) {
      engine_.schedule_at(Time(), [this, g] { advance(g); });
    }
    ProgressPoll poll(*this);  // outlives every event: the engine runs only here
    if (opt_.progress) engine_.add_observer(&poll);
    engine_.run();
    ReplayResult r;
    for (uint32_t g = 0; g < job_.groups.size(); ++g) {
      const State& s = st_[g];
      if (s.pc < job_.groups[g].program.size()) {
        const Task& t = job_.groups[g].program[s.pc];
        throw RunError("replay stalled: replica " + std::to_string(job_.groups[g].replica) +
                       " stage " + std::to_string(job_.groups[g].stage) + " waits at task " +
                       std::to_string(s.pc) + " (kind " + std::to_string(int(t.kind)) +
                       ", micro-batch " + std::to_string(t.micro_batch) + ")");
      }
      r.groups.push_back(s.times);
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
      for (const Group& g : r.job_.groups) total_ += g.program.size();
    }
    void on_event(Time now) override {
      if (++count_ < r_.opt_.progress_every) return;
      count_ = 0;
      ReplayStatus s;
      s.now = now;
      s.events = r_.engine_.events_executed();
      s.tasks_total = total_;
      for (const State& st : r_.st_) s.tasks_done += st.pc;
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
    bool dp_busy = false;
    std::vector<uint8_t> arrived;  // [dir][chunk][mb]
    uint32_t mbs = 0;
    GroupTimes times;
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
    const Group& grp = job_.groups[g];
    State& s = st_[g];
    while (s.pc < grp.program.size()) {
      const Task& t = grp.program[s.pc];
      switch (t.kind) {
        case TaskKind::compute: {
          const Time start = engine_.now();
          const Time d = grp.segments[t.index].duration;
          engine_.schedule_in(d, [this, g, start, d] {
            State& st = st_[g];
            st.times.compute += d;
            if (obs_)
              obs_->on_compute(job_, g, job_.groups[g].program[st.pc], start, engine_.now());
            ++st.pc;
            advance(g);
          });
          return;
        }
        case TaskKind::tp_comm: {
          if (opt_.free_communication) {
            ++s.pc;
            continue;
          }
          const CommTemplate& ct = grp.comms[t.index];
          const Time start = engine_.now();
          const size_t pc = s.pc;
          if (ct.async) {
            ++s.tp_inflight;
            launch(tp_plan(g, t.index), [this, g, start, pc] {
              State& st = st_[g];
              if (obs_)
                obs_->on_collective(job_, g, "tp",
                                    job_.groups[g].comms[job_.groups[g].program[pc].index].name,
                                    job_.groups[g].program[pc], start, engine_.now());
              if (--st.tp_inflight == 0 && st.blocked == WaitReason::tensor_parallel) resume(g);
            });
            ++s.pc;
            continue;
          }
          block(g, WaitReason::tensor_parallel);
          launch(tp_plan(g, t.index), [this, g, start, pc] {
            if (obs_)
              obs_->on_collective(job_, g, "tp",
                                  job_.groups[g].comms[job_.groups[g].program[pc].index].name,
                                  job_.groups[g].program[pc], start, engine_.now());
            resume(g);
          });
          return;
        }
        case TaskKind::tp_wait:
          if (s.tp_inflight == 0) {
            ++s.pc;
            continue;
          }
          block(g, WaitReason::tensor_parallel);
          return;
        case TaskKind::recv:
          if (s.arrived[key(g, t.pass == Pass::backward, t.chunk, t.micro_batch)]) {
            ++s.pc;
            continue;
          }
          block(g, WaitReason::pipeline);
          return;
        case TaskKind::send:
          if (job_.plan->framework.blocking_p2p) {
            // A blocking send (DeepSpeed's pipeline engine): the stage waits for its transfer.
            block(g, WaitReason::pipeline);
            send(g, t, true);
            return;
          }
          send(g, t, false);
          ++s.pc;
          continue;
        case TaskKind::dp_comm:
          ++s.dp_issued;
          if (opt_.free_communication) {
            s.dp_done = s.dp_issued;
            ++s.pc;
            continue;
          }
          if (!s.dp_busy) dp_offer(g);
          ++s.pc;
          continue;
        case TaskKind::tied:
          if (opt_.free_communication) {
            ++s.pc;
            continue;
          }
          block(g, WaitReason::data_parallel);
          tied_offer(g);
          return;
        case TaskKind::dp_wait:
          if (s.dp_done >= t.index) {
            ++s.pc;
            continue;
          }
          block(g, WaitReason::data_parallel);
          return;
      }
    }
    s.times.finish = engine_.now();
  }

  // ---- tensor parallel -------------------------------------------------------------------
  const network::CollectivePlan& tp_plan(uint32_t g, uint32_t index) {
    auto& slot = tp_plans_[{g, index}];
    if (!slot) {
      const CommTemplate& ct = job_.groups[g].comms[index];
      slot = std::make_unique<network::CollectivePlan>(
          plan_for(ct.kind, ct.bytes, job_.groups[g].devices));
    }
    return *slot;
  }

  network::CollectivePlan plan_for(CommKind kind, double bytes,
                                   const std::vector<platform::GpuId>& ranks) {
    network::CollectiveRequest req;
    req.op = to_op(kind);
    req.bytes = bytes;
    req.ranks = ranks;
    req.host_launch = false;  // inside an iteration, kernels are queued ahead on the stream
    return network::plan_collective(c_, req);
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
  // A pipeline transfer; with `blocking`, the sending group resumes when it has arrived.
  void send(uint32_t g, const Task& t, bool blocking) {
    const Group& src = job_.groups[g];
    const bool backward = t.pass == Pass::backward;
    uint32_t stage = src.stage, chunk = t.chunk;
    if (!backward) {
      if (stage + 1 < stages_) {
        ++stage;
      } else {
        stage = 0;
        ++chunk;
      }
    } else {
      if (stage > 0) {
        --stage;
      } else {
        stage = stages_ - 1;
        --chunk;
      }
    }
    const uint32_t dst = src.replica * stages_ + stage;
    if (opt_.free_communication) {
      engine_.schedule_in(Time(), [this, g, dst, t, backward, chunk, blocking] {
        arrive(dst, key(dst, backward, chunk, t.micro_batch));
        if (obs_) obs_->on_transfer(job_, g, dst, t, engine_.now(), engine_.now());
        if (blocking) resume(g);
      });
      return;
    }
    const auto& a = src.devices;
    const auto& b = job_.groups[dst].devices;
    const size_t n = std::max(a.size(), b.size());
    // Megatron's scatter-gather: each tensor-parallel rank sends its 1/t slice.
    const double bytes = job_.activation_bytes_per_transfer / static_cast<double>(n);
    auto left = std::make_shared<size_t>(n);
    const Time start = engine_.now();
    const size_t k = key(dst, backward, chunk, t.micro_batch);
    for (size_t j = 0; j < n; ++j) {
      const platform::GpuId from = a[j % a.size()], to = b[j % b.size()];
      network::FlowSpec f;
      const auto& route = route_of(from, to);
      for (platform::LinkId l : route) f.links.push_back({l, 1});
      f.bytes = bytes;
      f.latency = network::step_latency(network::Algorithm::direct, network::Protocol::simple,
                                        c_.route_kind(route)) +
                  c_.route_latency(route);
      f.on_done = [this, left, g, dst, k, t, start, blocking] {
        if (--*left > 0) return;
        if (obs_) obs_->on_transfer(job_, g, dst, t, start, engine_.now());
        arrive(dst, k);
        if (blocking) resume(g);
      };
      ++flows_;
      net_.start(std::move(f));
    }
  }

  void arrive(uint32_t dst, size_t k) {
    State& d = st_[dst];
    d.arrived[k] = 1;
    if (d.blocked == WaitReason::pipeline) {
      const Task& want = job_.groups[dst].program[d.pc];
      if (key(dst, want.pass == Pass::backward, want.chunk, want.micro_batch) == k) resume(dst);
    }
  }

  const std::vector<platform::LinkId>& route_of(platform::GpuId a, platform::GpuId b) {
    auto& r = routes_[(static_cast<uint64_t>(a) << 32) | b];
    if (r.empty() && a != b) r = c_.route(a, b);
    return r;
  }

  // ---- tied embedding --------------------------------------------------------------------
  // The first and last stage of a replica both wait at their `tied` task; when both are there,
  // each pair of their tensor-parallel ranks all-reduces its shard of the embedding gradients.
  void tied_offer(uint32_t g) {
    const uint32_t r = job_.groups[g].replica;
    if (++tied_ready_[r] < 2) return;
    tied_ready_.erase(r);
    const uint32_t a = r * stages_, b = r * stages_ + stages_ - 1;
    const auto& da = job_.groups[a].devices;
    const auto& db = job_.groups[b].devices;
    const size_t n = std::max(da.size(), db.size());
    const double bytes =
        job_.groups[a].tied_bytes * static_cast<double>(da.size()) / static_cast<double>(n);
    auto left = std::make_shared<size_t>(n);
    const Time start = engine_.now();
    for (size_t j = 0; j < n; ++j) {
      auto& slot = tied_plans_[{r, static_cast<uint32_t>(j)}];
      if (!slot) {
        slot = std::make_unique<network::CollectivePlan>(
            plan_for(CommKind::allreduce, bytes, {da[j % da.size()], db[j % db.size()]}));
      }
      launch(*slot, [this, left, a, b, start] {
        if (--*left > 0) return;
        for (uint32_t g2 : {a, b}) {
          if (obs_)
            obs_->on_collective(job_, g2, "dp", "tied.embedding.grads",
                                job_.groups[g2].program[st_[g2].pc], start, engine_.now());
          resume(g2);
        }
      });
    }
  }

  // ---- data parallel ---------------------------------------------------------------------
  // A group offers its next queued collective; it starts when every replica has offered it.
  void dp_offer(uint32_t g) {
    State& s = st_[g];
    if (s.dp_busy || s.dp_done >= s.dp_issued) return;
    s.dp_busy = true;
    const uint32_t stage = job_.groups[g].stage;
    const uint32_t index = s.dp_done;
    auto& ready = dp_ready_[stage][index];
    if (++ready < replicas_) return;
    dp_ready_[stage].erase(index);
    dp_launch(stage, index);
  }

  void dp_launch(uint32_t stage, uint32_t index) {
    const Group& g0 = job_.groups[stage];
    const DpCollective& dc = g0.dp[index];
    const size_t t = g0.devices.size();
    auto left = std::make_shared<size_t>(t);
    const Time start = engine_.now();
    for (size_t j = 0; j < t; ++j) {
      auto& slot = dp_plans_[{stage, index, static_cast<uint32_t>(j)}];
      if (!slot) {
        std::vector<platform::GpuId> ranks;
        for (uint32_t r = 0; r < replicas_; ++r)
          ranks.push_back(job_.groups[r * stages_ + stage].devices[j]);
        slot = std::make_unique<network::CollectivePlan>(plan_for(dc.kind, dc.bytes, ranks));
      }
      launch(*slot, [this, left, stage, index, start] {
        if (--*left > 0) return;
        for (uint32_t r = 0; r < replicas_; ++r) {
          const uint32_t g = r * stages_ + stage;
          State& s = st_[g];
          if (obs_) {
            Task t;
            t.kind = TaskKind::dp_comm;
            t.index = index;
            obs_->on_collective(job_, g, "dp", job_.groups[g].dp[index].name, t, start,
                                engine_.now());
          }
          s.dp_done = index + 1;
          s.dp_busy = false;
          if (s.blocked == WaitReason::data_parallel &&
              s.dp_done >= job_.groups[g].program[s.pc].index) {
            resume(g);
          }
          dp_offer(g);
        }
      });
    }
  }

  const TrainingJob& job_;
  const platform::Cluster& c_;
  ReplayObserver* obs_;
  ReplayOptions opt_;
  Engine engine_;
  network::FlowNetwork net_;
  std::vector<State> st_;
  uint32_t stages_ = 1, replicas_ = 1;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<network::CollectivePlan>> tp_plans_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::unique_ptr<network::CollectivePlan>>
      dp_plans_;
  std::vector<std::map<uint32_t, uint32_t>> dp_ready_;
  std::map<uint32_t, uint32_t> tied_ready_;  // replica -> end stages waiting
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<network::CollectivePlan>> tied_plans_;
  std::list<std::unique_ptr<network::CollectiveRun>> runs_;
  std::map<uint64_t, std::vector<platform::LinkId>> routes_;
  uint64_t flows_ = 0;
};

}  // namespace

ReplayResult replay(const TrainingJob& job, ReplayObserver* observer, ReplayOptions options) {
  return Replayer(job, observer, options).run();
}

}  // namespace hetsim::workload
