// Simulated time: a strong integer count of picoseconds. Doubles appear only inside rate
// arithmetic and come back to Time through from_seconds(), the one rounding function.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace hetsim {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ps(int64_t v) { return Time(v); }
  static constexpr Time ns(int64_t v) { return Time(v * 1000); }
  static constexpr Time us(int64_t v) { return Time(v * 1000000); }
  static constexpr Time max() { return Time(std::numeric_limits<int64_t>::max()); }
  // Rounds up to the next picosecond, so a completion is never reported before it happens.
  static Time from_seconds_ceil(double s) {
    return Time(static_cast<int64_t>(std::ceil(s * 1e12)));
  }
  // Rounds to the nearest picosecond (for configured latencies).
  static Time from_seconds(double s) { return Time(static_cast<int64_t>(std::llround(s * 1e12))); }

  constexpr int64_t ps() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }

  constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time& operator+=(Time o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr Time operator*(int64_t k) const { return Time(ps_ * k); }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(int64_t v) : ps_(v) {}
  int64_t ps_ = 0;
};

}  // namespace hetsim
