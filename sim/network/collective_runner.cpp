// Dependency-driven execution of a collective's flows; see collective_runner.h.
#include "sim/network/collective_runner.h"

namespace hetsim::network {

CollectiveRun::CollectiveRun(Engine& engine, FlowNetwork& net, const CollectivePlan& plan,
                             Callback done)
    : engine_(engine), net_(net), plan_(plan), done_(std::move(done)) {
  const size_t n = plan.steps.size();
  waiting_.assign(n, 0);
  succ_start_.assign(n + 1, 0);
  for (const PlanStep& s : plan.steps) {
    for (uint32_t d : s.deps) ++succ_start_[d + 1];
  }
  for (size_t i = 0; i < n; ++i) succ_start_[i + 1] += succ_start_[i];
  succ_.resize(succ_start_[n]);
  std::vector<uint32_t> fill(succ_start_.begin(), succ_start_.end() - 1);
  for (uint32_t i = 0; i < n; ++i) {
    waiting_[i] = static_cast<uint32_t>(plan.steps[i].deps.size());
    for (uint32_t d : plan.steps[i].deps) succ_[fill[d]++] = i;
  }
  remaining_ = n;
}

void CollectiveRun::start() {
  started_at_ = engine_.now();
  engine_.schedule_in(plan_.start_delay, [this] {
    if (remaining_ == 0) {
      finished_at_ = engine_.now();
      if (done_) done_();
      return;
    }
    for (uint32_t i = 0; i < plan_.steps.size(); ++i) {
      if (waiting_[i] == 0) launch(i);
    }
  });
}

void CollectiveRun::launch(uint32_t step) {
  const PlanStep& s = plan_.steps[step];
  FlowSpec spec;
  spec.links = s.links;
  spec.bytes = s.bytes;
  spec.latency = s.latency;
  spec.max_rate_Bps = s.max_rate_Bps;
  spec.tag = step;
  spec.on_done = [this, step] { complete(step); };
  net_.start(std::move(spec));
}

void CollectiveRun::complete(uint32_t step) {
  for (uint32_t k = succ_start_[step]; k < succ_start_[step + 1]; ++k) {
    if (--waiting_[succ_[k]] == 0) launch(succ_[k]);
  }
  if (--remaining_ == 0) {
    finished_at_ = engine_.now();
    if (done_) done_();
  }
}

CollectiveResult simulate_collective(const platform::Cluster& c, const CollectiveRequest& r,
                                     FlowObserver* observer) {
  CollectiveResult result;
  result.plan = plan_collective(c, r);
  Engine engine;
  FlowNetwork net(engine, c.capacities());
  if (observer) net.add_observer(observer);
  CollectiveRun run(engine, net, result.plan, nullptr);
  run.start();
  engine.run();
  result.time = run.finished_at() - run.started_at();
  result.events = engine.events_executed();
  result.rate_recomputations = net.recomputations();
  return result;
}

}  // namespace hetsim::network
