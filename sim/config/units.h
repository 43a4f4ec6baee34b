// Quantities with units ("400Gbps", "1.5us", "80GiB"): the one parser every config file uses,
// and the formatters for human-readable output. Values are in SI base units (bytes, bytes/s, s,
// FLOP/s, W).
#pragma once

#include <string>
#include <string_view>

namespace hetsim::config {

enum class Dimension { bytes, bandwidth, time, flop_rate, power };

// Parses "<number>[ ]<unit>" into the dimension's base unit. Units are case-sensitive
// ("Gbps" is bits, "GBps" is bytes). A bare number is accepted only for bytes. Throws InputError.
double parse_quantity(std::string_view text, Dimension dim);

// "bytes", "bandwidth", "time", "flop rate", "power".
std::string dimension_name(Dimension dim);

// Three significant digits in the largest unit that keeps the number >= 1:
// format_bytes(1 << 30) == "1.00 GiB" (binary prefixes), format_time(8.19e-3) == "8.19 ms".
std::string format_bytes(double bytes);
std::string format_time(double seconds);
// One decimal, decimal prefixes: format_bandwidth(229.3e9) == "229.3 GB/s".
std::string format_bandwidth(double bytes_per_second);

}  // namespace hetsim::config
