// Key formatting and the percentile summary of repeated timings.
#include "measurement.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace hetsim::calibrate::cuda {

std::string Key::csv() const {
  std::ostringstream s;
  s << kind << ',' << dtype << ',' << name << ',' << m << ',' << n << ',' << k << ',' << batch
    << ',' << heads << ',' << seq << ',' << head_dim << ',' << causal << ',' << backward << ','
    << bytes << ',' << ranks << ',' << nodes << ',' << conv_n << ',' << conv_c << ',' << conv_h
    << ',' << conv_w << ',' << conv_k << ',' << conv_r << ',' << conv_s << ',' << conv_stride
    << ',' << conv_pad_h << ',' << conv_pad_w;
  return s.str();
}

std::string Key::label() const {
  std::ostringstream s;
  s << kind << ' ' << (name.empty() ? dtype : name);
  if (kind == "gemm") {
    s << ' ' << m << 'x' << n << 'x' << k;
    if (batch > 1) s << " batch " << batch;
  } else if (kind == "attention") {
    s << " b" << batch << " h" << heads << " s" << seq << " d" << head_dim
      << (causal ? " causal" : "") << (backward ? " bwd" : " fwd");
  } else if (kind == "conv") {
    s << " n" << conv_n << " c" << conv_c << ' ' << conv_h << 'x' << conv_w << " k" << conv_k
      << ' ' << conv_r << 'x' << conv_s << '/' << conv_stride;
  } else {
    s << ' ' << bytes << " B";
    if (ranks > 0) s << ' ' << ranks << " ranks";
    if (nodes > 1) s << " on " << nodes << " nodes";
  }
  return s.str();
}

namespace {
double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}
}  // namespace

Stats summarize(std::vector<double>& samples_s) {
  Stats stats;
  if (samples_s.empty()) return stats;
  std::sort(samples_s.begin(), samples_s.end());
  stats.median_s = percentile(samples_s, 0.5);
  stats.p10_s = percentile(samples_s, 0.1);
  stats.p90_s = percentile(samples_s, 0.9);
  stats.repetitions = static_cast<int>(samples_s.size());
  return stats;
}

}  // namespace hetsim::calibrate::cuda
