// Spearman's rank correlation, for the validation tests: a planner needs the ranking of
// configurations right more than their absolute times.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hetsim::validation {

// Ranks from 1, ties sharing their average rank.
inline std::vector<double> ranks_of(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
    i = j + 1;
  }
  return r;
}

// Spearman's rho: the Pearson correlation of the ranks; NaN for fewer than 3 points or no spread.
inline double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 3 || a.size() != b.size()) return NAN;
  const auto ra = ranks_of(a), rb = ranks_of(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n;
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  return (va == 0 || vb == 0) ? NAN : cov / std::sqrt(va * vb);
}

}  // namespace hetsim::validation
