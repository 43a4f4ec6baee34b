// Max-min fair flow model by progressive filling over the changed component, with lazy
// settling of progress and a heap of completion times; see flow_network.h.
#include "sim/network/flow_network.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <span>
#include <tuple>
#include <unordered_map>

#include "sim/core/error.h"
#include "sim/core/hash.h"

namespace hetsim::network {

namespace {
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kDuplicate = kNone - 1;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A flow's contribution to the fingerprint of each link it crosses (splitmix64).
uint64_t crossing_hash(FlowId id, uint32_t count) {
  return splitmix64(static_cast<uint64_t>(id) << 32 | count);
}
}  // namespace

void merge_links(std::vector<LinkUse>& links) {
  // Already in that form (a collective plan's steps are): one pass, no rewrite.
  if (std::adjacent_find(links.begin(), links.end(), [](const LinkUse& a, const LinkUse& b) {
        return a.link >= b.link;
      }) == links.end()) {
    return;
  }
  auto by_link = [](const LinkUse& a, const LinkUse& b) { return a.link < b.link; };
  if (!std::is_sorted(links.begin(), links.end(), by_link))
    std::sort(links.begin(), links.end(), by_link);
  size_t out = 0;
  for (size_t i = 0; i < links.size(); ++i) {
    if (out > 0 && links[out - 1].link == links[i].link) {
      links[out - 1].count += links[i].count;
    } else {
      links[out++] = links[i];
    }
  }
  links.resize(out);
}

void keep_binding_links(const std::vector<std::vector<LinkUse>*>& templates,
                        const std::vector<double>& cap) {
  const size_t links = cap.size();
  std::vector<uint32_t> start(links + 1, 0);
  for (auto* l : templates) {
    merge_links(*l);
    for (const LinkUse& u : *l) ++start[u.link + 1];
  }
  for (size_t l = 0; l < links; ++l) start[l + 1] += start[l];
  // Per link, (template, count) in template order.
  std::vector<std::pair<uint32_t, uint32_t>> by_link(start[links]);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  std::vector<uint64_t> hash(links, 0);
  for (uint32_t t = 0; t < templates.size(); ++t) {
    for (const LinkUse& u : *templates[t]) {
      by_link[fill[u.link]++] = {t, u.count};
      hash[u.link] = hash[u.link] * 0x100000001b3ULL ^ (uint64_t{t} << 32 | u.count);
    }
  }
  auto crossings = [&](uint32_t l) {
    return std::span(by_link.begin() + start[l], by_link.begin() + start[l + 1]);
  };
  std::unordered_map<uint64_t, std::vector<uint32_t>> seen;  // hash -> first links
  std::vector<uint8_t> keep(links, 1);
  for (uint32_t l = 0; l < links; ++l) {
    if (start[l] == start[l + 1]) continue;
    auto& firsts = seen[hash[l]];
    for (uint32_t f : firsts) {
      if (cap[f] == cap[l] && std::ranges::equal(crossings(f), crossings(l))) {
        keep[l] = 0;
        break;
      }
    }
    if (keep[l]) firsts.push_back(l);
  }
  for (auto* l : templates) {
    std::erase_if(*l, [&](const LinkUse& u) { return !keep[u.link]; });
  }
  // Whether every (template, count) of a is in b with at least that count (both by template).
  auto dominated_by = [&](uint32_t a, uint32_t b) {
    const auto x = crossings(a), y = crossings(b);
    auto j = y.begin();
    for (const auto& [t, count] : x) {
      while (j != y.end() && j->first < t) ++j;
      if (j == y.end() || j->first != t || j->second < count) return false;
    }
    return true;
  };
  std::vector<uint8_t> dominated(links, 0);
  for (uint32_t l = 0; l < links; ++l) {
    if (start[l] == start[l + 1] || !keep[l]) continue;
    // A link that dominates l crosses every template l crosses: look in the shortest of them.
    uint32_t fewest = by_link[start[l]].first;
    for (const auto& [t, count] : crossings(l)) {
      if (templates[t]->size() < templates[fewest]->size()) fewest = t;
    }
    for (const LinkUse& u : *templates[fewest]) {
      if (u.link != l && cap[u.link] == cap[l] && dominated_by(l, u.link)) {
        dominated[l] = 1;
        break;
      }
    }
  }
  for (auto* l : templates) {
    std::erase_if(*l, [&](const LinkUse& u) { return dominated[u.link]; });
  }
}

FlowNetwork::FlowNetwork(Engine& engine, std::vector<double> capacity_Bps)
    : engine_(engine), capacity_(std::move(capacity_Bps)) {
  for (double c : capacity_) {
    if (!(c > 0) || !std::isfinite(c)) throw RunError("flow network: link capacity must be > 0");
  }
  link_flows_.resize(capacity_.size());
  link_hash_.assign(capacity_.size(), 0);
  joining_.assign(capacity_.size(), 0);
  local_.assign(capacity_.size(), kNone);
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
  merge_links(spec.links);
  Flow& f = flows_[id];
  f.weight = 0;
  for (const LinkUse& u : spec.links) {
    if (u.link >= capacity_.size()) throw RunError("flow network: unknown link id");
    f.weight += u.count;
  }
  f.remaining = spec.bytes;
  f.rate = 0;
  f.active = false;
  f.queued = false;
  ++f.version;
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

double FlowNetwork::remaining_now(const Flow& f) const {
  const double dt = (engine_.now() - f.since).seconds();
  return std::max(0.0, f.remaining - f.rate * dt);
}

void FlowNetwork::update() {
  in_update_ = true;
  const Time now = engine_.now();
  // Flows whose completion time has come (the scratch vectors are members: an update runs for
  // every flow that starts or ends, and none is nested in another).
  std::vector<FlowId>& done = done_;
  done.clear();
  while (!completions_.empty() && completions_.top().at <= now) {
    const Completion c = completions_.top();
    completions_.pop();
    Flow& f = flows_[c.flow];
    if (f.active && f.queued && f.version == c.version) {
      f.queued = false;
      done.push_back(c.flow);
    }
  }
  std::sort(done.begin(), done.end());
  std::vector<FlowId>& seeds = seeds_;
  seeds.clear();
  for (FlowId id : done) {
    Flow& f = flows_[id];
    f.active = false;
    f.remaining = 0;
    --active_count_;
    finished_bytes_ += f.spec.bytes * f.weight;
    const uint64_t once = crossing_hash(id, 1);  // most links are crossed once
    for (const LinkUse& u : f.spec.links) {
      link_hash_[u.link] -= u.count == 1 ? once : crossing_hash(id, u.count);
      auto& on = link_flows_[u.link];
      on.erase(std::find(on.begin(), on.end(), id));
      // One seed per run of links that the same flow leads (a flow's links are in order, and
      // its neighbours cross many of them): the component search skips repeats anyway.
      if (!on.empty() && (seeds.empty() || seeds.back() != on.front())) seeds.push_back(on.front());
    }
    if (f.spec.links.empty()) unlinked_.erase(std::find(unlinked_.begin(), unlinked_.end(), id));
    for (FlowObserver* o : observers_) o->on_flow_end(*this, id, now);
  }
  // Their callbacks may start flows; those join this same recomputation.
  for (FlowId id : done) {
    Callback cb = std::move(flows_[id].spec.on_done);
    flows_[id].spec.on_done = nullptr;
    ++flows_[id].version;
    if (cb) cb();
  }
  for (FlowId id : done) free_ids_.push_back(id);
  std::vector<FlowId>& started = joined_;
  started.clear();
  started.swap(pending_);
  // Each link's list grows once by all the flows that join it here, not by doubling: a
  // collective's channels start together and meet on every node's links.
  for (FlowId id : started) {
    for (const LinkUse& u : flows_[id].spec.links) ++joining_[u.link];
  }
  for (FlowId id : started) {
    for (const LinkUse& u : flows_[id].spec.links) {
      if (joining_[u.link] == 0) continue;
      auto& on = link_flows_[u.link];
      on.reserve(on.size() + joining_[u.link]);
      joining_[u.link] = 0;
    }
  }
  for (FlowId id : started) {
    Flow& f = flows_[id];
    f.active = true;
    f.since = now;
    ++active_count_;
    const uint64_t once = crossing_hash(id, 1);
    for (const LinkUse& u : f.spec.links) {
      link_flows_[u.link].push_back(id);
      link_hash_[u.link] += u.count == 1 ? once : crossing_hash(id, u.count);
    }
    if (f.spec.links.empty()) unlinked_.push_back(id);
    seeds.push_back(id);
    for (FlowObserver* o : observers_) o->on_flow_start(*this, id, now);
  }
  if (!seeds.empty()) recompute_rates(component(seeds));
  schedule_next_completion();
  in_update_ = false;
  if (!pending_.empty()) request_update();
}

const std::vector<FlowId>& FlowNetwork::component(const std::vector<FlowId>& seeds) {
  ++mark_;
  std::vector<FlowId>& out = component_;
  out.clear();
  // Once every active flow is in, there is nothing left to find: where all flows share links (a
  // collective's channels meet on every node's NVSwitch) the search ends after a few links
  // instead of crossing every link of every flow.
  auto search = [&] {
    for (FlowId s : seeds) {
      if (flows_[s].mark == mark_ || !flows_[s].active) continue;
      flows_[s].mark = mark_;
      out.push_back(s);
      for (size_t k = out.size() - 1; k < out.size(); ++k) {
        for (const LinkUse& u : flows_[out[k]].spec.links) {
          for (FlowId g : link_flows_[u.link]) {
            if (flows_[g].mark != mark_) {
              flows_[g].mark = mark_;
              out.push_back(g);
            }
          }
          if (out.size() == active_count_) return;
        }
      }
    }
  };
  search();
  std::sort(out.begin(), out.end());  // a fixed order, whatever the seeds' order
  return out;
}

void FlowNetwork::recompute_rates(const std::vector<FlowId>& flows) {
  ++recomputations_;
  const Time now = engine_.now();
  if (flows.size() == 1 && alone(flows.front())) {
    // Nothing shares its links: its rate is its tightest link or cap, as the filling below
    // would find it (a private link's share is capacity / count; the cap constraint's share is
    // that over a weight of 1), without numbering a constraint. A third of the recomputations
    // of SimAI's example are such.
    Flow& f = flows_[flows.front()];
    f.remaining = remaining_now(f);
    f.since = now;
    double rate = f.spec.max_rate_Bps > 0 && !f.spec.links.empty() ? f.spec.max_rate_Bps : kInf;
    for (const LinkUse& u : f.spec.links) rate = std::min(rate, capacity_[u.link] / u.count);
    f.rate = rate;
  } else {
    number_constraints(flows, now);
    fill_rates(flows);
    for (LinkId l : touched_) local_[l] = kNone;  // the numbering is for this recomputation only
  }
  schedule_completions(flows, now);
  for (FlowObserver* o : observers_) o->on_rates(*this, now);
}

bool FlowNetwork::alone(FlowId id) const {
  for (const LinkUse& u : flows_[id].spec.links) {
    if (link_flows_[u.link].size() != 1) return false;
  }
  return true;
}

// Settles the flows' progress at their old rates and numbers the constraints they share: the
// links in use (rem_, weight_) and the flows' own caps (own_cap_, cap_local_).
void FlowNetwork::number_constraints(const std::vector<FlowId>& flows, Time now) {
  // A flow's own cap is one more constraint that only it crosses; so is each link no other
  // active flow crosses (capacity / count: the same share that link's constraint would give), and
  // the tightest of them stands for all (own_cap_, by position). Ring flows span many such links
  // (64% of the links of a recomputation in an interleaved GPT-3 replay): folding them shrinks
  // the filling's heap.
  touched_.clear();
  // Room for every link of the component at most half full.
  size_t crossings = 0;
  for (FlowId id : flows) crossings += flows_[id].spec.links.size();
  if (same_.size() < 2 * crossings) {
    same_.assign(std::bit_ceil(std::max<size_t>(64, 2 * crossings)), SameSlot{});
    same_stamp_ = 0;
  }
  if (++same_stamp_ == 0) {  // the stamp wrapped: no slot may look current
    std::fill(same_.begin(), same_.end(), SameSlot{});
    same_stamp_ = 1;
  }
  rem_.clear();
  weight_.clear();
  own_cap_.clear();
  cons_start_.clear();
  cons_.clear();
  if (pos_.size() < flows_.size()) pos_.resize(flows_.size());
  for (FlowId id : flows) {
    pos_[id] = static_cast<uint32_t>(cons_start_.size());
    cons_start_.push_back(static_cast<uint32_t>(cons_.size()));
    Flow& f = flows_[id];
    f.remaining = remaining_now(f);
    f.since = now;
    f.rate = f.spec.links.empty() ? kInf : -1;  // -1: not yet frozen
    double& cap = own_cap_.emplace_back(f.spec.max_rate_Bps > 0 ? f.spec.max_rate_Bps : kInf);
    for (const LinkUse& u : f.spec.links) {
      if (link_flows_[u.link].size() == 1) {  // private
        cap = std::min(cap, capacity_[u.link] / u.count);
        continue;
      }
      uint32_t& local = local_[u.link];
      if (local == kNone) {
        // A link with the same capacity and the same flows crossing it the same number of times
        // as one already numbered is the same constraint: only the first counts. (Folded
        // replicas: every copy's link of a transfer carries the same flows.)
        const LinkId first = first_alike(u.link);
        if (first != u.link && link_flows_[first] == link_flows_[u.link]) {
          local = kDuplicate;
          touched_.push_back(u.link);
          continue;
        }
        local = static_cast<uint32_t>(rem_.size());
        touched_.push_back(u.link);
        rem_.push_back(capacity_[u.link]);
        weight_.push_back(0);
      }
      if (local == kDuplicate) continue;
      weight_[local] += u.count;
      cons_.push_back(Crossing{local, u.count});
    }
  }
  cons_start_.push_back(static_cast<uint32_t>(cons_.size()));
  cap_local_.resize(flows_.size(), kNone);
  for (size_t i = 0; i < flows.size(); ++i) {
    if (own_cap_[i] < kInf && !flows_[flows[i]].spec.links.empty()) {
      cap_local_[flows[i]] = static_cast<uint32_t>(rem_.size());
      rem_.push_back(own_cap_[i]);
      weight_.push_back(1);
    }
  }
}

// Max-min fair rates by progressive filling over the numbered constraints.
void FlowNetwork::fill_rates(const std::vector<FlowId>& flows) {
  const size_t n = rem_.size();
  // CSR adjacency: local constraint -> flows under it.
  adj_start_.assign(n + 1, 0);
  for (FlowId id : flows) {
    for (const Crossing& c : constraints_of(id)) ++adj_start_[c.constraint + 1];
    if (cap_local_[id] != kNone) ++adj_start_[cap_local_[id] + 1];
  }
  for (size_t i = 0; i < n; ++i) adj_start_[i + 1] += adj_start_[i];
  adj_.resize(adj_start_[n]);
  std::vector<uint32_t>& fill = fill_;
  fill.assign(adj_start_.begin(), adj_start_.end() - 1);
  for (FlowId id : flows) {
    for (const Crossing& c : constraints_of(id)) adj_[fill[c.constraint]++] = id;
    if (cap_local_[id] != kNone) adj_[fill[cap_local_[id]]++] = id;
  }
  // Progressive filling: repeatedly saturate the constraint with the smallest fair share.
  // A binary heap in heap_ (share, local constraint, stamp), smallest share first.
  std::vector<HeapItem>& heap = heap_;
  heap.clear();
  auto push = [&heap](double share, uint32_t i, uint32_t stamp) {
    heap.emplace_back(share, i, stamp);
    std::push_heap(heap.begin(), heap.end(), std::greater<HeapItem>());
  };
  stamp_.assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) push(rem_[i] / weight_[i], i, 0);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<HeapItem>());
    auto [share, i, s] = heap.back();
    heap.pop_back();
    if (s != stamp_[i] || weight_[i] <= 0) continue;
    share = std::max(0.0, share);
    for (uint32_t k = adj_start_[i]; k < adj_start_[i + 1]; ++k) {
      const FlowId id = adj_[k];
      Flow& f = flows_[id];
      if (f.rate >= 0) continue;
      f.rate = share;
      for (const Crossing& c : constraints_of(id)) {
        const uint32_t j = c.constraint;
        rem_[j] -= share * c.count;
        weight_[j] -= c.count;
        ++stamp_[j];
        if (weight_[j] > 0) push(std::max(0.0, rem_[j]) / weight_[j], j, stamp_[j]);
      }
      if (cap_local_[id] != kNone) {
        weight_[cap_local_[id]] = 0;
        cap_local_[id] = kNone;
      }
    }
  }
}

// Each flow's completion at its new rate, queued where it moved.
void FlowNetwork::schedule_completions(const std::vector<FlowId>& flows, Time now) {
  for (FlowId id : flows) {
    Flow& f = flows_[id];
    const Time finish =
        f.remaining <= 0 || f.rate == kInf
            ? now
            : (f.rate > 0 ? now + Time::from_seconds_ceil(f.remaining / f.rate) : Time::max());
    if (!f.queued || finish != f.finish) {
      f.finish = finish;
      ++f.version;
      f.queued = finish != Time::max();
      if (f.queued) completions_.push(Completion{finish, id, f.version});
    }
  }
}

LinkId FlowNetwork::first_alike(LinkId link) {
  const uint64_t hash = link_hash_[link];
  const double capacity = capacity_[link];
  const size_t mask = same_.size() - 1;
  for (size_t i = splitmix64(hash ^ std::bit_cast<uint64_t>(capacity)) & mask;;
       i = (i + 1) & mask) {
    SameSlot& s = same_[i];
    if (s.stamp != same_stamp_) {
      s = SameSlot{hash, capacity, link, same_stamp_};
      return link;
    }
    if (s.hash == hash && s.capacity == capacity) return s.link;
  }
}

void FlowNetwork::schedule_next_completion() {
  while (!completions_.empty()) {
    const Completion& c = completions_.top();
    const Flow& f = flows_[c.flow];
    if (f.active && f.queued && f.version == c.version) break;
    completions_.pop();
  }
  const Time next = completions_.empty() ? Time::max() : completions_.top().at;
  if (next == completion_at_ && completion_event_.valid()) return;
  if (completion_event_.valid()) engine_.cancel(completion_event_);
  completion_event_ = EventId{};
  completion_at_ = next;
  if (next == Time::max()) return;
  completion_event_ = engine_.schedule_at(next, [this] {
    completion_event_ = EventId{};
    completion_at_ = Time::max();
    update();
  });
}

std::vector<FlowId> FlowNetwork::active_flows() const {
  std::vector<FlowId> out;
  for (FlowId id = 0; id < flows_.size(); ++id) {
    if (flows_[id].active) out.push_back(id);
  }
  return out;
}

std::vector<double> FlowNetwork::link_loads() const {
  std::vector<double> load(capacity_.size(), 0.0);
  for (size_t l = 0; l < link_flows_.size(); ++l) {
    for (FlowId id : link_flows_[l]) {
      for (const LinkUse& u : flows_[id].spec.links) {
        if (u.link == l) load[l] += flows_[id].rate * u.count;
      }
    }
  }
  return load;
}

double FlowNetwork::delivered_bytes() const {
  double d = finished_bytes_;
  for (const Flow& f : flows_) {
    if (f.active) d += (f.spec.bytes - remaining_now(f)) * f.weight;
  }
  return d;
}

}  // namespace hetsim::network
