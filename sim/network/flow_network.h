// The flow model: transfers ("flows") cross directional links and share each link's capacity
// max-min fairly; rates are recomputed whenever a flow starts or ends, but only for the flows
// that share links, directly or through other flows, with the one that changed (its
// component), and progress is settled lazily, so an event costs O(component), not O(all flows). A
// flow may cross a link several times (count > 1) and may span many links at once: a ring
// collective in steady state is one flow whose links are all of its ring edges, progressing at one
// common rate. The model talks to the engine only through scheduled events, and reports to
// observers.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "sim/core/engine.h"

namespace hetsim::network {

using LinkId = uint32_t;
using FlowId = uint32_t;

struct LinkUse {
  LinkId link;
  uint32_t count;  // how many times the flow crosses this link (its weight in max-min sharing)
};

// Sorts crossings by link and merges repeats into one entry whose count is their sum (the form
// FlowNetwork::start keeps; cheap on a list already in that form).
void merge_links(std::vector<LinkUse>& links);

// Where every flow a run will start is an instance of one of `templates` (its links, with how many
// times it crosses each), keeps in each template only the links that can bind a flow's rate, and
// merges its crossings by link. Dropped, both exact:
// - a link crossed by the same templates the same number of times as one before it, with the same
//   capacity: the two carry the same active flows at every instant, so they are one constraint.
//   Folded replicas make many: every copy of a transfer crosses its own NIC and PCIe links, that
//   only the same templates cross;
// - a link that another of the same capacity dominates: every template crossing it crosses the
//   other at least as many times. The other then carries at least its load at every instant, and
//   in max-min fair sharing a constraint that another dominates never binds first: the other's
//   fair share is never larger, so the other saturates first and fixes the rates of every flow
//   both carry (progressive filling; Bertsekas and Gallager, Data Networks, 6.5). Folded
//   replicas make many of these too: a fabric link that some copies' hashed routes share with
//   a link that more of them share. Dominance between distinct links is a strict order, so the
//   links kept (those nothing dominates) dominate every link dropped.
void keep_binding_links(const std::vector<std::vector<LinkUse>*>& templates,
                        const std::vector<double>& capacity);

struct FlowSpec {
  std::vector<LinkUse> links;  // empty: a local transfer, done right after its latency
  double bytes = 0;            // bytes carried on each crossing
  Time latency;                // paid before the first byte moves
  double max_rate_Bps = 0;     // a cap of the flow's own (0: none), e.g. one NCCL channel's link
  Callback on_done;
  uint64_t tag = 0;  // free for the caller; passed to observers
};

class FlowNetwork;

class FlowObserver {
 public:
  virtual ~FlowObserver() = default;
  virtual void on_flow_start(const FlowNetwork&, FlowId, Time) {}
  virtual void on_flow_end(const FlowNetwork&, FlowId, Time) {}
  // After every rate recomputation; query the network for rates and loads.
  virtual void on_rates(const FlowNetwork&, Time) {}
};

class FlowNetwork {
 public:
  FlowNetwork(Engine& engine, std::vector<double> capacity_Bps);

  FlowId start(FlowSpec spec);
  void add_observer(FlowObserver* o) { observers_.push_back(o); }

  size_t link_count() const { return capacity_.size(); }
  double capacity(LinkId l) const { return capacity_[l]; }
  // Current rate of an active flow (bytes/s per crossing).
  double rate(FlowId f) const { return flows_[f].rate; }
  const FlowSpec& spec(FlowId f) const { return flows_[f].spec; }
  // Active flows in ascending id order.
  std::vector<FlowId> active_flows() const;
  // Sum over active flows of rate * count on each link (bytes/s); sized link_count().
  std::vector<double> link_loads() const;
  // Bytes moved so far, counting every crossing: sum of bytes * count over links.
  double delivered_bytes() const;
  double started_bytes() const { return started_; }
  uint64_t recomputations() const { return recomputations_; }

 private:
  struct Flow {
    FlowSpec spec;
    double remaining = 0;  // as of `since`
    double rate = 0;
    Time since;
    Time finish;
    uint32_t weight = 0;  // sum of counts
    uint32_t version = 0;
    uint32_t mark = 0;  // component search stamp
    bool active = false;
    bool queued = false;  // has a valid entry in completions_
  };
  struct Completion {
    Time at;
    FlowId flow;
    uint32_t version;
    bool operator>(const Completion& o) const { return at != o.at ? at > o.at : flow > o.flow; }
  };

  void request_update();
  void update();
  // The active flows that share links with the seeds, directly or through others (component_).
  const std::vector<FlowId>& component(const std::vector<FlowId>& seeds);
  void recompute_rates(const std::vector<FlowId>& flows);
  bool alone(FlowId id) const;  // no other active flow crosses its links
  void number_constraints(const std::vector<FlowId>& flows, Time now);
  void fill_rates(const std::vector<FlowId>& flows);
  void schedule_completions(const std::vector<FlowId>& flows, Time now);
  void schedule_next_completion();
  double remaining_now(const Flow& f) const;

  Engine& engine_;
  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_ids_;
  std::vector<std::vector<FlowId>> link_flows_;  // active flows crossing each link
  std::vector<FlowId> unlinked_;                 // active flows with no links
  std::vector<FlowId> pending_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<Completion>> completions_;
  std::vector<FlowObserver*> observers_;
  // Per link: the sum of crossing_hash(flow, count) over the active flows crossing it, so that
  // links crossed by the same flows the same number of times are found in one lookup.
  std::vector<uint64_t> link_hash_;
  std::vector<uint32_t> joining_;  // update's scratch: flows joining each link, zero between calls
  // recompute_rates' scratch: the first link of each fingerprint (the link's hash and capacity)
  // in an open-addressing table whose slots are valid for one recomputation (`stamp`), so that
  // it is neither allocated nor cleared link by link.
  struct SameSlot {
    uint64_t hash = 0;
    double capacity = 0;
    LinkId link = 0;
    uint32_t stamp = 0;
  };
  // The first link numbered with this fingerprint, or `link` itself after recording it as the
  // first.
  LinkId first_alike(LinkId link);
  std::vector<SameSlot> same_;
  uint32_t same_stamp_ = 0;
  EventId update_event_;
  EventId completion_event_;
  Time completion_at_ = Time::max();
  bool in_update_ = false;
  size_t active_count_ = 0;
  uint32_t mark_ = 0;
  double finished_bytes_ = 0;
  double started_ = 0;
  uint64_t recomputations_ = 0;

  // Scratch for recompute_rates, kept to avoid reallocating.
  std::vector<uint32_t> local_;  // link -> local index, kNone outside a recomputation
  std::vector<double> rem_;
  std::vector<double> weight_;
  std::vector<uint32_t> stamp_;
  std::vector<uint32_t> adj_start_;
  std::vector<FlowId> adj_;
  std::vector<LinkId> touched_;
  std::vector<uint32_t> cap_local_;  // per flow id: local index of its own cap
  // The numbered constraints each flow of the component crosses, in the order of its links
  // (private links and duplicates left out), by the flow's position in it (pos_, per flow id).
  struct Crossing {
    uint32_t constraint, count;
  };
  std::vector<Crossing> cons_;
  std::vector<uint32_t> cons_start_, pos_;
  std::span<const Crossing> constraints_of(FlowId id) const {
    return {cons_.data() + cons_start_[pos_[id]], cons_.data() + cons_start_[pos_[id] + 1]};
  }
  std::vector<double> own_cap_;  // by position: the tightest of its cap and private links
  std::vector<uint32_t> fill_;
  using HeapItem = std::tuple<double, uint32_t, uint32_t>;
  std::vector<HeapItem> heap_;
  // Scratch for update and component.
  std::vector<FlowId> done_, seeds_, joined_, component_;
};

}  // namespace hetsim::network
