// Progress lines: "[ 42.1%] 01:05 elapsed, ETA 01:30  gemm bf16 4096x4096x4096".
#include "progress.h"

#include <algorithm>
#include <cstdio>

namespace hetsim::calibrate::cuda {

Progress::Progress(double planned_s)
    : planned_total_s_(std::max(planned_s, 1e-9)), start_(Clock::now()), last_print_(start_) {}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void Progress::advance(double planned_s, const std::string& label) {
  planned_done_s_ += planned_s;
  const auto now = Clock::now();
  const bool last = planned_done_s_ >= planned_total_s_ * (1 - 1e-9);
  if (!last && now - last_print_ < std::chrono::seconds(2)) return;
  last_print_ = now;
  const double elapsed = elapsed_s();
  const double fraction = std::min(planned_done_s_ / planned_total_s_, 1.0);
  // Scale the remaining plan by how fast the run has gone against it so far.
  const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
  const int e = static_cast<int>(elapsed), r = static_cast<int>(eta);
  std::fprintf(stderr, "[%5.1f%%] %02d:%02d elapsed, ETA %02d:%02d  %s\n", 100 * fraction, e / 60,
               e % 60, r / 60, r % 60, label.c_str());
  std::fflush(stderr);
}

}  // namespace hetsim::calibrate::cuda
