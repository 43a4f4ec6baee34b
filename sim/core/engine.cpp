// Engine main loop; see engine.h.
#include "sim/core/engine.h"

#include <string>

#include "sim/core/error.h"

namespace hetsim {

EventId Engine::schedule_at(Time t, Callback cb) {
  if (t < now_) {
    throw RunError("engine: event scheduled in the past (" + std::to_string(t.ps()) + " ps < " +
                   std::to_string(now_.ps()) + " ps)");
  }
  return queue_.push(t, std::move(cb));
}

void Engine::step() {
  auto [t, cb] = queue_.pop();
  now_ = t;
  ++executed_;
  cb();
  for (EngineObserver* o : observers_) o->on_event(now_);
}

void Engine::run() {
  while (!queue_.empty()) step();
}

void Engine::run_until(Time limit) {
  while (!queue_.empty() && queue_.next_time() <= limit) step();
}

}  // namespace hetsim
