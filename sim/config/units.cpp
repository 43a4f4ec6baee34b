// Unit parser and formatters: one {unit, factor} table per dimension, nothing else knows units.
#include "sim/config/units.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <span>

#include "sim/core/error.h"

namespace hetsim::config {
namespace {

struct Unit {
  std::string_view name;
  double factor;  // to the dimension's base unit
};

constexpr std::array<Unit, 11> kBytes{{{"B", 1},
                                       {"KB", 1e3},
                                       {"MB", 1e6},
                                       {"GB", 1e9},
                                       {"TB", 1e12},
                                       {"PB", 1e15},
                                       {"KiB", 0x1p10},
                                       {"MiB", 0x1p20},
                                       {"GiB", 0x1p30},
                                       {"TiB", 0x1p40},
                                       {"PiB", 0x1p50}}};
// Network rates are quoted in bits (decimal prefixes), memory and bus rates in bytes.
constexpr std::array<Unit, 19> kBandwidth{{{"bps", 1.0 / 8},
                                           {"Kbps", 1e3 / 8},
                                           {"Mbps", 1e6 / 8},
                                           {"Gbps", 1e9 / 8},
                                           {"Tbps", 1e12 / 8},
                                           {"B/s", 1},
                                           {"KB/s", 1e3},
                                           {"MB/s", 1e6},
                                           {"GB/s", 1e9},
                                           {"TB/s", 1e12},
                                           {"KiB/s", 0x1p10},
                                           {"MiB/s", 0x1p20},
                                           {"GiB/s", 0x1p30},
                                           {"TiB/s", 0x1p40},
                                           {"Bps", 1},
                                           {"KBps", 1e3},
                                           {"MBps", 1e6},
                                           {"GBps", 1e9},
                                           {"TBps", 1e12}}};
constexpr std::array<Unit, 6> kTime{
    {{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"\u00b5s", 1e-6}, {"ms", 1e-3}, {"s", 1}}};
constexpr std::array<Unit, 12> kFlopRate{{{"FLOPS", 1},
                                          {"KFLOPS", 1e3},
                                          {"MFLOPS", 1e6},
                                          {"GFLOPS", 1e9},
                                          {"TFLOPS", 1e12},
                                          {"PFLOPS", 1e15},
                                          {"FLOP/s", 1},
                                          {"KFLOP/s", 1e3},
                                          {"MFLOP/s", 1e6},
                                          {"GFLOP/s", 1e9},
                                          {"TFLOP/s", 1e12},
                                          {"PFLOP/s", 1e15}}};
constexpr std::array<Unit, 2> kPower{{{"W", 1}, {"kW", 1e3}}};

std::span<const Unit> units_of(Dimension dim) {
  switch (dim) {
    case Dimension::bytes:
      return kBytes;
    case Dimension::bandwidth:
      return kBandwidth;
    case Dimension::time:
      return kTime;
    case Dimension::flop_rate:
      return kFlopRate;
    case Dimension::power:
      return kPower;
  }
  return {};
}

std::string unit_list(Dimension dim) {
  std::string out;
  for (const Unit& u : units_of(dim)) out += (out.empty() ? "" : ", ") + std::string(u.name);
  return out;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Thresholds sit just below the rounding point, so 9.996 prints "10.0", not "10.00".
std::string three_significant(double v) {
  const double a = std::fabs(v);
  return fixed(v, a < 9.995 ? 2 : a < 99.95 ? 1 : 0);
}

// The largest unit that keeps |v| >= 1 (the smallest unit below that; the base unit for 0).
const Unit& scale_for(double v, std::span<const Unit> ascending) {
  const Unit* best = &ascending.front();
  for (const Unit& u : ascending) {
    if (std::fabs(v) >= u.factor || (v == 0 && u.factor == 1)) best = &u;
  }
  return *best;
}

}  // namespace

double parse_quantity(std::string_view text, Dimension dim) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  const std::string_view s = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || !std::isfinite(value)) {
    throw InputError("expected a number followed by a unit, got " + quoted);
  }
  if (value < 0) throw InputError("expected a non-negative quantity, got " + quoted);
  const std::string_view unit = trim(std::string_view(end, s.data() + s.size()));
  if (unit.empty()) {
    if (dim == Dimension::bytes) return value;
    throw InputError("missing unit in " + quoted + " (expected one of " + unit_list(dim) + ")");
  }
  for (const Unit& u : units_of(dim)) {
    if (u.name == unit) return value * u.factor;
  }
  throw InputError("unknown unit \"" + std::string(unit) + "\" (expected one of " + unit_list(dim) +
                   ")");
}

std::string dimension_name(Dimension dim) {
  switch (dim) {
    case Dimension::bytes:
      return "bytes";
    case Dimension::bandwidth:
      return "bandwidth";
    case Dimension::time:
      return "time";
    case Dimension::flop_rate:
      return "flop rate";
    case Dimension::power:
      return "power";
  }
  return "?";
}

std::string format_bytes(double bytes) {
  if (std::fabs(bytes) < 1024) return fixed(bytes, 0) + " B";
  constexpr std::array<Unit, 6> kScales{{{"B", 1},
                                         {"KiB", 0x1p10},
                                         {"MiB", 0x1p20},
                                         {"GiB", 0x1p30},
                                         {"TiB", 0x1p40},
                                         {"PiB", 0x1p50}}};
  const Unit& u = scale_for(bytes, kScales);
  return three_significant(bytes / u.factor) + " " + std::string(u.name);
}

std::string format_bandwidth(double bytes_per_second) {
  constexpr std::array<Unit, 5> kScales{
      {{"B/s", 1}, {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}}};
  const Unit& u = scale_for(bytes_per_second, kScales);
  return fixed(bytes_per_second / u.factor, 1) + " " + std::string(u.name);
}

std::string format_time(double seconds) {
  constexpr std::array<Unit, 5> kScales{
      {{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}}};
  const Unit& u = scale_for(seconds, kScales);
  return three_significant(seconds / u.factor) + " " + std::string(u.name);
}

}  // namespace hetsim::config
