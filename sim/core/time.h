// Simulated time: a strong integer count of picoseconds. Doubles appear only inside rate
// arithmetic and come back to Time through from_seconds(), the one rounding function.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>

#include "sim/core/error.h"

namespace hetsim {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ps(int64_t v) { return Time(v); }
  static constexpr Time ns(int64_t v) { return Time(v * 1000); }
  static constexpr Time us(int64_t v) { return Time(v * 1000000); }
  static constexpr Time max() { return Time(std::numeric_limits<int64_t>::max()); }
  // The longest span the clock holds: 2^62 ps, about 53 days, so that the sum of two spans
  // (a clock reading plus a duration) still fits before the check in operator+ sees it.
  static constexpr double kMaxSeconds = 4611686018427387904.0 * 1e-12;

  // Rounds up to the next picosecond, so a completion is never reported before it happens.
  static Time from_seconds_ceil(double s) {
    if (!(s * 1e12 < kMaxSeconds * 1e12)) out_of_range(s);
    return Time(static_cast<int64_t>(std::ceil(s * 1e12)));
  }
  // Rounds to the nearest picosecond (for configured latencies).
  static Time from_seconds(double s) {
    if (!(s * 1e12 < kMaxSeconds * 1e12)) out_of_range(s);
    return Time(static_cast<int64_t>(std::llround(s * 1e12)));
  }

  constexpr int64_t ps() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }

  constexpr Time operator+(Time o) const {
    int64_t sum = 0;
    if (__builtin_add_overflow(ps_, o.ps_, &sum)) out_of_range((seconds() + o.seconds()));
    return Time(sum);
  }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time& operator+=(Time o) { return *this = *this + o; }
  constexpr Time operator*(int64_t k) const { return Time(ps_ * k); }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(int64_t v) : ps_(v) {}
  // Inputs far beyond any real run (a model, a plan or a cluster that implies months of
  // simulated time, or an infinite or NaN duration) end with InputError, never with a wrapped
  // clock.
  [[noreturn, gnu::cold, gnu::noinline]] static void out_of_range(double s) {
    throw InputError("simulated time out of range: a span of " + std::to_string(s) +
                     " s is beyond the 53 days hetsim's clock holds; check the model, the "
                     "plan and the cluster for impossible sizes or rates");
  }
  int64_t ps_ = 0;
};

}  // namespace hetsim
