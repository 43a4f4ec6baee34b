// Max-min fair flow model by progressive filling; see flow_network.h.
#include "sim/network/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <tuple>

#include "sim/core/error.h"

namespace hetsim::network {

namespace {
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

FlowNetwork::FlowNetwork(Engine& engine, std::vector<double> capacity_Bps)
    : engine_(engine), capacity_(std::move(capacity_Bps)) {
  for (double c : capacity_) {
    if (!(c > 0) || !std::isfinite(c)) throw RunError("flow network: link capacity must be > 0");
  }
  version_.assign(capacity_.size(), kNone);  // doubles as link -> local index map
}

FlowId FlowNetwork::start(FlowSpec spec) {
  FlowId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[id];
  f.weight = 0;
  for (const LinkUse& u : spec.links) {
    if (u.link >= capacity_.size()) throw RunError("flow network: unknown link id");
    f.weight += u.count;
  }
  f.remaining = spec.bytes;
  f.rate = 0;
  f.live = true;
  started_ += spec.bytes * f.weight;
  const Time latency = spec.latency;
  f.spec = std::move(spec);
  if (latency > Time()) {
    engine_.schedule_in(latency, [this, id] {
      pending_.push_back(id);
      request_update();
    });
  } else {
    pending_.push_back(id);
    request_update();
  }
  return id;
}

void FlowNetwork::request_update() {
  if (in_update_ || update_event_.valid()) return;
  update_event_ = engine_.schedule_in(Time(), [this] {
    update_event_ = EventId{};
    update();
  });
}

void FlowNetwork::settle() {
  const Time now = engine_.now();
  const double dt = (now - last_settle_).seconds();
  last_settle_ = now;
  if (dt <= 0) return;
  for (FlowId id : active_) {
    Flow& f = flows_[id];
    const double moved = std::min(f.remaining, f.rate * dt);
    f.remaining -= moved;
    delivered_ += moved * f.weight;
  }
}

void FlowNetwork::update() {
  in_update_ = true;
  settle();
  std::vector<FlowId> done;
  auto is_done = [this](FlowId id) {
    const Flow& f = flows_[id];
    return f.remaining <= 0 || f.remaining / f.rate < 0.5e-12;
  };
  auto split = std::stable_partition(active_.begin(), active_.end(),
                                     [&](FlowId id) { return !is_done(id); });
  done.assign(split, active_.end());
  active_.erase(split, active_.end());
  for (FlowId id : done) {
    Flow& f = flows_[id];
    delivered_ += f.remaining * f.weight;  // the sub-picosecond remainder
    f.remaining = 0;
    for (FlowObserver* o : observers_) o->on_flow_end(*this, id, engine_.now());
  }
  const bool changed = !done.empty() || !pending_.empty();
  for (FlowId id : pending_) {
    active_.push_back(id);
    for (FlowObserver* o : observers_) o->on_flow_start(*this, id, engine_.now());
  }
  pending_.clear();
  if (changed) {
    recompute_rates();
    // Flows with nothing left (local or empty transfers) finish at once.
    if (std::any_of(active_.begin(), active_.end(), is_done)) request_update_now_ = true;
  }
  schedule_next_completion();
  in_update_ = false;
  if (request_update_now_) {
    request_update_now_ = false;
    request_update();
  }
  for (FlowId id : done) {
    Callback cb = std::move(flows_[id].spec.on_done);
    flows_[id].spec.on_done = nullptr;
    flows_[id].live = false;
    free_ids_.push_back(id);
    if (cb) cb();
  }
}

void FlowNetwork::recompute_rates() {
  ++recomputations_;
  // Local numbering of the links in use; version_ holds link -> local index between passes.
  touched_.clear();
  rem_.clear();
  weight_.clear();
  for (FlowId id : active_) {
    Flow& f = flows_[id];
    f.rate = -1;  // unfrozen
    if (f.spec.links.empty()) f.rate = kInf;
    for (const LinkUse& u : f.spec.links) {
      uint32_t& local = version_[u.link];
      if (local == kNone) {
        local = static_cast<uint32_t>(touched_.size());
        touched_.push_back(u.link);
        rem_.push_back(capacity_[u.link]);
        weight_.push_back(0);
      }
      weight_[local] += u.count;
    }
  }
  // A flow's own cap is one more constraint that only it crosses.
  capped_local_.resize(flows_.size(), kNone);
  for (FlowId id : active_) {
    if (flows_[id].spec.max_rate_Bps > 0 && !flows_[id].spec.links.empty()) {
      capped_local_[id] = static_cast<uint32_t>(rem_.size());
      rem_.push_back(flows_[id].spec.max_rate_Bps);
      weight_.push_back(1);
    }
  }
  const size_t n = rem_.size();
  // CSR adjacency: local link -> flows crossing it.
  adj_start_.assign(n + 1, 0);
  for (FlowId id : active_) {
    for (const LinkUse& u : flows_[id].spec.links) ++adj_start_[version_[u.link] + 1];
    if (capped_local_[id] != kNone) ++adj_start_[capped_local_[id] + 1];
  }
  for (size_t i = 0; i < n; ++i) adj_start_[i + 1] += adj_start_[i];
  adj_.resize(adj_start_[n]);
  std::vector<uint32_t> fill(adj_start_.begin(), adj_start_.end() - 1);
  for (FlowId id : active_) {
    for (const LinkUse& u : flows_[id].spec.links) adj_[fill[version_[u.link]]++] = id;
    if (capped_local_[id] != kNone) adj_[fill[capped_local_[id]]++] = id;
  }
  // Progressive filling: repeatedly saturate the link with the smallest fair share.
  using Item = std::tuple<double, uint32_t, uint32_t>;  // share, local link, stamp
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  std::vector<uint32_t> stamp(n, 0);
  for (uint32_t i = 0; i < n; ++i) heap.emplace(rem_[i] / weight_[i], i, 0);
  while (!heap.empty()) {
    auto [share, i, s] = heap.top();
    heap.pop();
    if (s != stamp[i] || weight_[i] <= 0) continue;
    share = std::max(0.0, share);
    for (uint32_t k = adj_start_[i]; k < adj_start_[i + 1]; ++k) {
      Flow& f = flows_[adj_[k]];
      if (f.rate >= 0) continue;
      f.rate = share;
      for (const LinkUse& u : f.spec.links) {
        const uint32_t j = version_[u.link];
        rem_[j] -= share * u.count;
        weight_[j] -= u.count;
        ++stamp[j];
        if (weight_[j] > 0) heap.emplace(std::max(0.0, rem_[j]) / weight_[j], j, stamp[j]);
      }
      if (capped_local_[adj_[k]] != kNone) {
        weight_[capped_local_[adj_[k]]] = 0;
        capped_local_[adj_[k]] = kNone;
      }
    }
  }
  for (LinkId l : touched_) version_[l] = kNone;
  for (FlowObserver* o : observers_) o->on_rates(*this, engine_.now());
}

void FlowNetwork::schedule_next_completion() {
  if (completion_event_.valid()) {
    engine_.cancel(completion_event_);
    completion_event_ = EventId{};
  }
  double best = kInf;
  for (FlowId id : active_) {
    const Flow& f = flows_[id];
    if (f.rate > 0) best = std::min(best, f.remaining / f.rate);
  }
  if (best == kInf) return;
  completion_event_ = engine_.schedule_in(Time::from_seconds_ceil(best), [this] {
    completion_event_ = EventId{};
    update();
  });
}

std::vector<double> FlowNetwork::link_loads() const {
  std::vector<double> load(capacity_.size(), 0.0);
  for (FlowId id : active_) {
    const Flow& f = flows_[id];
    if (!std::isfinite(f.rate)) continue;
    for (const LinkUse& u : f.spec.links) load[u.link] += f.rate * u.count;
  }
  return load;
}

}  // namespace hetsim::network
