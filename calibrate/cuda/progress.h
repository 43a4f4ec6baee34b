// Progress and ETA on stderr, weighted by the plan's time estimates, at most every two seconds.
#pragma once

#include <chrono>
#include <string>

namespace hetsim::calibrate::cuda {

class Progress {
 public:
  explicit Progress(double planned_s);
  // One point done (or skipped) whose planned wall time was `planned_s`.
  void advance(double planned_s, const std::string& label);
  double elapsed_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  double planned_total_s_, planned_done_s_ = 0;
  Clock::time_point start_, last_print_;
};

}  // namespace hetsim::calibrate::cuda
