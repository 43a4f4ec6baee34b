// A progress display for long replays on standard error: silent while a run is short, then a
// line (or one line rewritten in place on a terminal) every second or so.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include "sim/workload/replay/replay.h"

namespace hetsim::report {

class ProgressMeter {
 public:
  // Nothing is printed before `after_s` seconds of wall time since construction; then at most one
  // update per `every_s`. `rewrite`: one line updated with '\r' (a terminal), else a line each.
  ProgressMeter(std::ostream& out, std::string label, double after_s = 2.0, double every_s = 1.0,
                bool rewrite = false);
  // Cheap when called often: one clock read, and a line only when one is due.
  void update(const workload::ReplayStatus& s);
  // For work counted in items: "plan: 12.0 s, 120 of 412 plans, about 29 s left".
  void update_count(size_t done, size_t total, const std::string& items);
  // For work resumed part-way (a study): "sweep: 12.0 s, 120 of 412 runs done (40 done before),
  // 292 left, 6.7 runs/s, about 44 s left"; the rate counts only what this process did.
  void update_rate(size_t done, size_t total, size_t done_before, const std::string& items);
  static std::string rate_line(const std::string& label, double wall_s, size_t done, size_t total,
                               size_t done_before, const std::string& items);
  // Ends a rewritten line, so what follows starts on its own line.
  void finish();
  // "simulate: 12.0 s, simulated 1.23 s, 4567890 events, 45% of tasks, about 15 s left".
  static std::string line(const std::string& label, double wall_s, const workload::ReplayStatus& s);

 private:
  using Clock = std::chrono::steady_clock;
  // The wall time when a line is due, else a negative number.
  double due();
  void emit(const std::string& text);
  std::ostream& out_;
  std::string label_;
  Clock::time_point start_;
  double after_s_, every_s_, next_s_;
  bool rewrite_, printed_ = false;
};

// Whether standard error is a terminal (progress then rewrites one line).
bool stderr_is_terminal();

}  // namespace hetsim::report
