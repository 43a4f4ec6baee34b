// Progress display; see progress.h.
#include "sim/report/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "sim/config/units.h"

namespace hetsim::report {

ProgressMeter::ProgressMeter(std::ostream& out, std::string label, double after_s, double every_s,
                             bool rewrite)
    : out_(out),
      label_(std::move(label)),
      start_(Clock::now()),
      after_s_(after_s),
      every_s_(every_s),
      next_s_(after_s),
      rewrite_(rewrite) {}

std::string ProgressMeter::line(const std::string& label, double wall_s,
                                const workload::ReplayStatus& s) {
  const double done =
      s.tasks_total ? static_cast<double>(s.tasks_done) / static_cast<double>(s.tasks_total) : 0;
  std::string text =
      fmt::format("{}: {:.1f} s, simulated {}, {} events, {:.0f}% of tasks", label, wall_s,
                  config::format_time(s.now.seconds()), s.events, 100 * done);
  // Tasks finish at a roughly even pace in wall time, so the remaining fraction extrapolates;
  // too early (under 5%) the rate says little, so no estimate.
  if (done >= 0.05 && done < 1)
    text += fmt::format(", about {:.0f} s left", wall_s * (1 - done) / done);
  return text;
}

double ProgressMeter::due() {
  const double wall_s = std::chrono::duration<double>(Clock::now() - start_).count();
  if (wall_s < next_s_) return -1;
  // A line rewritten in place costs nothing to repeat; lines in a log file space out as the run
  // goes on (10% of the time so far), so an hour's run writes a few dozen, not thousands.
  next_s_ = wall_s + (rewrite_ ? every_s_ : std::max(every_s_, 0.1 * wall_s));
  return wall_s;
}

void ProgressMeter::update(const workload::ReplayStatus& s) {
  const double wall_s = due();
  if (wall_s >= 0) emit(line(label_, wall_s, s));
}

void ProgressMeter::update_count(size_t done, size_t total, const std::string& items) {
  const double wall_s = due();
  if (wall_s < 0) return;
  std::string text = fmt::format("{}: {:.1f} s, {} of {} {}", label_, wall_s, done, total, items);
  if (done > 0 && done < total) {
    text += fmt::format(", about {:.0f} s left",
                        wall_s * static_cast<double>(total - done) / static_cast<double>(done));
  }
  emit(text);
}

std::string ProgressMeter::rate_line(const std::string& label, double wall_s, size_t done,
                                     size_t total, size_t done_before, const std::string& items) {
  std::string text =
      fmt::format("{}: {:.1f} s, {} of {} {} done", label, wall_s, done, total, items);
  if (done_before > 0) text += fmt::format(" ({} done before)", done_before);
  text += fmt::format(", {} left", total - std::min(done, total));
  const size_t now = done - std::min(done, done_before);
  if (now > 0 && wall_s > 0) {
    const double rate = static_cast<double>(now) / wall_s;
    text += fmt::format(", {:.1f} {}/s", rate, items);
    if (done < total)
      text += fmt::format(", about {:.0f} s left", static_cast<double>(total - done) / rate);
  }
  return text;
}

void ProgressMeter::update_rate(size_t done, size_t total, size_t done_before,
                                const std::string& items) {
  const double wall_s = due();
  if (wall_s >= 0) emit(rate_line(label_, wall_s, done, total, done_before, items));
}

void ProgressMeter::emit(const std::string& text) {
  if (rewrite_) {
    // Pad over a longer previous line.
    out_ << "\r" << fmt::format("{:<100}", text) << std::flush;
  } else {
    out_ << text << "\n" << std::flush;
  }
  printed_ = true;
}

void ProgressMeter::finish() {
  if (rewrite_ && printed_) out_ << "\n" << std::flush;
  printed_ = false;
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }

}  // namespace hetsim::report
