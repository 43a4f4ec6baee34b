// Runs a CollectivePlan on a FlowNetwork: waits the start delay, then starts each step when its
// dependencies have finished, and reports when the last step ends.
#pragma once

#include <memory>

#include "sim/network/collective.h"

namespace hetsim::network {

class CollectiveRun {
 public:
  // The plan must outlive the run. `done` is called at the simulated end time.
  CollectiveRun(Engine& engine, FlowNetwork& net, const CollectivePlan& plan, Callback done);
  void start();
  bool finished() const { return remaining_ == 0; }
  Time started_at() const { return started_at_; }
  Time finished_at() const { return finished_at_; }

 private:
  void launch(uint32_t step);
  void complete(uint32_t step);

  Engine& engine_;
  FlowNetwork& net_;
  const CollectivePlan& plan_;
  Callback done_;
  std::vector<uint32_t> waiting_;
  std::vector<uint32_t> succ_start_, succ_;
  size_t remaining_ = 0;
  Time started_at_, finished_at_;
};

struct CollectiveResult {
  CollectivePlan plan;
  Time time;  // from the call to the end of the last flow
  uint64_t events = 0;
  uint64_t rate_recomputations = 0;
};

// Plans and simulates one collective alone on the cluster.
CollectiveResult simulate_collective(const platform::Cluster& c, const CollectiveRequest& r,
                                     FlowObserver* observer = nullptr);

}  // namespace hetsim::network
