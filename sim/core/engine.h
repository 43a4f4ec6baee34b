// The discrete-event engine: owns the clock and the event queue. It knows nothing about
// networks or training; models schedule callbacks on it. No globals: engines are independent.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/core/event_queue.h"
#include "sim/core/time.h"

namespace hetsim {

// Attaches tracing or statistics to an engine without the models knowing.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_event(Time now) = 0;
};

class Engine {
 public:
  Time now() const { return now_; }
  // Schedules cb at absolute time t >= now().
  EventId schedule_at(Time t, Callback cb);
  EventId schedule_in(Time dt, Callback cb) { return schedule_at(now_ + dt, std::move(cb)); }
  bool cancel(EventId id) { return queue_.cancel(id); }
  // Runs events until none is left.
  void run();
  // Runs events with time <= limit; the clock ends at the last event run.
  void run_until(Time limit);
  uint64_t events_executed() const { return executed_; }
  size_t pending() const { return queue_.size(); }
  void add_observer(EngineObserver* o) { observers_.push_back(o); }

 private:
  void step();

  EventQueue queue_;
  Time now_;
  uint64_t executed_ = 0;
  std::vector<EngineObserver*> observers_;
};

}  // namespace hetsim
