// Unit parser and formatter rules: conversions on both sides of each prefix, exact error text.
#include "sim/config/units.h"

#include <gtest/gtest.h>

#include <string>

#include "sim/core/error.h"

namespace hetsim::config {
namespace {

// The InputError message parse_quantity throws, or "" when it does not throw.
std::string error_of(std::string_view text, Dimension dim) {
  try {
    parse_quantity(text, dim);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kByteUnits = "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB";
const std::string kBandwidthUnits =
    "bps, Kbps, Mbps, Gbps, Tbps, B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, Bps, "
    "KBps, MBps, GBps, TBps";
const std::string kTimeUnits = "ps, ns, us, \u00b5s, ms, s";

TEST(Units, DecimalBytePrefixesArePowersOfTen) {
  EXPECT_DOUBLE_EQ(parse_quantity("1B", Dimension::bytes), 1);
  EXPECT_DOUBLE_EQ(parse_quantity("1KB", Dimension::bytes), 1e3);
  EXPECT_DOUBLE_EQ(parse_quantity("40MB", Dimension::bytes), 40e6);
  EXPECT_DOUBLE_EQ(parse_quantity("80GB", Dimension::bytes), 80e9);
  EXPECT_DOUBLE_EQ(parse_quantity("2TB", Dimension::bytes), 2e12);
  EXPECT_DOUBLE_EQ(parse_quantity("1PB", Dimension::bytes), 1e15);
}

TEST(Units, BinaryBytePrefixesArePowersOf1024) {
  EXPECT_DOUBLE_EQ(parse_quantity("1KiB", Dimension::bytes), 1024);
  EXPECT_DOUBLE_EQ(parse_quantity("1MiB", Dimension::bytes), 1024.0 * 1024);
  EXPECT_DOUBLE_EQ(parse_quantity("80GiB", Dimension::bytes), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_quantity("1TiB", Dimension::bytes), 0x1p40);
  EXPECT_DOUBLE_EQ(parse_quantity("1PiB", Dimension::bytes), 0x1p50);
}

TEST(Units, BareNumberIsBytesOnly) {
  EXPECT_DOUBLE_EQ(parse_quantity("4096", Dimension::bytes), 4096);
  EXPECT_DOUBLE_EQ(parse_quantity("0", Dimension::bytes), 0);
  EXPECT_EQ(error_of("400", Dimension::bandwidth),
            "missing unit in \"400\" (expected one of " + kBandwidthUnits + ")");
  EXPECT_EQ(error_of("25", Dimension::time),
            "missing unit in \"25\" (expected one of " + kTimeUnits + ")");
}

TEST(Units, GbpsIsBitsPerSecondDividedByEight) {
  EXPECT_DOUBLE_EQ(parse_quantity("8bps", Dimension::bandwidth), 1);
  EXPECT_DOUBLE_EQ(parse_quantity("1Kbps", Dimension::bandwidth), 125);
  EXPECT_DOUBLE_EQ(parse_quantity("1Mbps", Dimension::bandwidth), 125e3);
  EXPECT_DOUBLE_EQ(parse_quantity("200Gbps", Dimension::bandwidth), 25e9);
  EXPECT_DOUBLE_EQ(parse_quantity("1.6Tbps", Dimension::bandwidth), 200e9);
}

TEST(Units, GBpsAndGBPerSecondAreBytes) {
  EXPECT_DOUBLE_EQ(parse_quantity("25GBps", Dimension::bandwidth), 25e9);
  EXPECT_DOUBLE_EQ(parse_quantity("25GB/s", Dimension::bandwidth), 25e9);
  EXPECT_DOUBLE_EQ(parse_quantity("1B/s", Dimension::bandwidth), 1);
  EXPECT_DOUBLE_EQ(parse_quantity("1Bps", Dimension::bandwidth), 1);
  EXPECT_DOUBLE_EQ(parse_quantity("3KB/s", Dimension::bandwidth), 3e3);
  EXPECT_DOUBLE_EQ(parse_quantity("3KBps", Dimension::bandwidth), 3e3);
  EXPECT_DOUBLE_EQ(parse_quantity("5MBps", Dimension::bandwidth), 5e6);
  EXPECT_DOUBLE_EQ(parse_quantity("2TB/s", Dimension::bandwidth), 2e12);
  EXPECT_DOUBLE_EQ(parse_quantity("2TBps", Dimension::bandwidth), 2e12);
}

TEST(Units, BinaryBandwidthPrefixesArePowersOf1024) {
  EXPECT_DOUBLE_EQ(parse_quantity("1KiB/s", Dimension::bandwidth), 1024);
  EXPECT_DOUBLE_EQ(parse_quantity("1MiB/s", Dimension::bandwidth), 0x1p20);
  EXPECT_DOUBLE_EQ(parse_quantity("1GiB/s", Dimension::bandwidth), 0x1p30);
  EXPECT_DOUBLE_EQ(parse_quantity("1TiB/s", Dimension::bandwidth), 0x1p40);
}

TEST(Units, TimeUnitsScaleByThousands) {
  EXPECT_DOUBLE_EQ(parse_quantity("1ps", Dimension::time), 1e-12);
  EXPECT_DOUBLE_EQ(parse_quantity("25ns", Dimension::time), 25e-9);
  EXPECT_DOUBLE_EQ(parse_quantity("1.5us", Dimension::time), 1.5e-6);
  EXPECT_DOUBLE_EQ(parse_quantity("1.5\u00b5s", Dimension::time), 1.5e-6);
  EXPECT_DOUBLE_EQ(parse_quantity("2ms", Dimension::time), 2e-3);
  EXPECT_DOUBLE_EQ(parse_quantity("3s", Dimension::time), 3);
}

TEST(Units, FlopRateAcceptsFlopsAndFlopPerSecond) {
  EXPECT_DOUBLE_EQ(parse_quantity("1FLOPS", Dimension::flop_rate), 1);
  EXPECT_DOUBLE_EQ(parse_quantity("1KFLOPS", Dimension::flop_rate), 1e3);
  EXPECT_DOUBLE_EQ(parse_quantity("1MFLOPS", Dimension::flop_rate), 1e6);
  EXPECT_DOUBLE_EQ(parse_quantity("19.5TFLOPS", Dimension::flop_rate), 19.5e12);
  EXPECT_DOUBLE_EQ(parse_quantity("312TFLOP/s", Dimension::flop_rate), 312e12);
  EXPECT_DOUBLE_EQ(parse_quantity("1GFLOPS", Dimension::flop_rate), 1e9);
  EXPECT_DOUBLE_EQ(parse_quantity("1GFLOP/s", Dimension::flop_rate), 1e9);
  EXPECT_DOUBLE_EQ(parse_quantity("2PFLOPS", Dimension::flop_rate), 2e15);
  EXPECT_DOUBLE_EQ(parse_quantity("2PFLOP/s", Dimension::flop_rate), 2e15);
  EXPECT_DOUBLE_EQ(parse_quantity("7FLOP/s", Dimension::flop_rate), 7);
}

TEST(Units, PowerIsWattsOrKilowatts) {
  EXPECT_DOUBLE_EQ(parse_quantity("400W", Dimension::power), 400);
  EXPECT_DOUBLE_EQ(parse_quantity("1.2kW", Dimension::power), 1200);
}

TEST(Units, WhitespaceBetweenNumberAndUnitIsOptional) {
  EXPECT_DOUBLE_EQ(parse_quantity("400 Gbps", Dimension::bandwidth), 50e9);
  EXPECT_DOUBLE_EQ(parse_quantity("400\tGbps", Dimension::bandwidth), 50e9);
  EXPECT_DOUBLE_EQ(parse_quantity(" 400Gbps ", Dimension::bandwidth), 50e9);
}

TEST(Units, NumberMayHaveDecimalsAndExponent) {
  EXPECT_DOUBLE_EQ(parse_quantity("2e9Bps", Dimension::bandwidth), 2e9);
  EXPECT_DOUBLE_EQ(parse_quantity("2.5E-3s", Dimension::time), 2.5e-3);
  EXPECT_DOUBLE_EQ(parse_quantity(".5us", Dimension::time), 0.5e-6);
  EXPECT_DOUBLE_EQ(parse_quantity("1e3 B", Dimension::bytes), 1000);
}

TEST(Units, UnitsAreCaseSensitive) {
  EXPECT_DOUBLE_EQ(parse_quantity("8Gbps", Dimension::bandwidth), 1e9);
  EXPECT_DOUBLE_EQ(parse_quantity("8GBps", Dimension::bandwidth), 8e9);
  EXPECT_NE(error_of("8gbps", Dimension::bandwidth), "");
  EXPECT_NE(error_of("1kb", Dimension::bytes), "");
  EXPECT_NE(error_of("1KW", Dimension::power), "");
  EXPECT_NE(error_of("1US", Dimension::time), "");
}

TEST(Units, UnknownUnitListsTheDimensionsUnits) {
  EXPECT_EQ(error_of("100Gbs", Dimension::bandwidth),
            "unknown unit \"Gbs\" (expected one of bps, Kbps, Mbps, Gbps, Tbps, B/s, KB/s, MB/s, "
            "GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, Bps, KBps, MBps, GBps, TBps)");
  EXPECT_EQ(error_of("1 sec", Dimension::time),
            "unknown unit \"sec\" (expected one of ps, ns, us, \u00b5s, ms, s)");
  EXPECT_EQ(error_of("80Gib", Dimension::bytes),
            "unknown unit \"Gib\" (expected one of B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, "
            "PiB)");
  EXPECT_EQ(error_of("1TFLOPs", Dimension::flop_rate),
            "unknown unit \"TFLOPs\" (expected one of FLOPS, KFLOPS, MFLOPS, GFLOPS, TFLOPS, "
            "PFLOPS, FLOP/s, KFLOP/s, MFLOP/s, GFLOP/s, TFLOP/s, PFLOP/s)");
  EXPECT_EQ(error_of("1MW", Dimension::power), "unknown unit \"MW\" (expected one of W, kW)");
}

TEST(Units, UnitOfAnotherDimensionIsUnknown) {
  EXPECT_EQ(error_of("80GB", Dimension::bandwidth),
            "unknown unit \"GB\" (expected one of " + kBandwidthUnits + ")");
  EXPECT_EQ(error_of("25GB/s", Dimension::bytes),
            "unknown unit \"GB/s\" (expected one of " + kByteUnits + ")");
  EXPECT_EQ(error_of("5W", Dimension::time),
            "unknown unit \"W\" (expected one of " + kTimeUnits + ")");
}

TEST(Units, MissingNumberIsAnError) {
  EXPECT_EQ(error_of("abc", Dimension::bandwidth),
            "expected a number followed by a unit, got \"abc\"");
  EXPECT_EQ(error_of("", Dimension::bytes), "expected a number followed by a unit, got \"\"");
  EXPECT_EQ(error_of("GB/s", Dimension::bandwidth),
            "expected a number followed by a unit, got \"GB/s\"");
  EXPECT_EQ(error_of("+5GB", Dimension::bytes),
            "expected a number followed by a unit, got \"+5GB\"");
  EXPECT_EQ(error_of("infGB", Dimension::bytes),
            "expected a number followed by a unit, got \"infGB\"");
  EXPECT_EQ(error_of("nan s", Dimension::time),
            "expected a number followed by a unit, got \"nan s\"");
  EXPECT_EQ(error_of("1e999GB", Dimension::bytes),
            "expected a number followed by a unit, got \"1e999GB\"");
}

TEST(Units, NegativeQuantityIsAnErrorButZeroIsNot) {
  EXPECT_EQ(error_of("-3GB/s", Dimension::bandwidth),
            "expected a non-negative quantity, got \"-3GB/s\"");
  EXPECT_EQ(error_of("-1e-9s", Dimension::time),
            "expected a non-negative quantity, got \"-1e-9s\"");
  EXPECT_DOUBLE_EQ(parse_quantity("0GB/s", Dimension::bandwidth), 0);
  EXPECT_DOUBLE_EQ(parse_quantity("1e-300s", Dimension::time), 1e-300);
}

TEST(Units, TrailingTextAfterTheUnitIsAnError) {
  EXPECT_EQ(error_of("1GB/s x", Dimension::bandwidth),
            "unknown unit \"GB/s x\" (expected one of " + kBandwidthUnits + ")");
  EXPECT_EQ(error_of("1 2GB", Dimension::bytes),
            "unknown unit \"2GB\" (expected one of " + kByteUnits + ")");
}

TEST(Units, DimensionNamesAreReadable) {
  EXPECT_EQ(dimension_name(Dimension::bytes), "bytes");
  EXPECT_EQ(dimension_name(Dimension::bandwidth), "bandwidth");
  EXPECT_EQ(dimension_name(Dimension::time), "time");
  EXPECT_EQ(dimension_name(Dimension::flop_rate), "flop rate");
  EXPECT_EQ(dimension_name(Dimension::power), "power");
}

TEST(Units, FormatBytesUsesBinaryPrefixesAndThreeDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(0x1p30 - 1), "1024 MiB");
  EXPECT_EQ(format_bytes(0x1p30), "1.00 GiB");
  EXPECT_EQ(format_bytes(80e9), "74.5 GiB");
  EXPECT_EQ(format_bytes(512 * 0x1p30), "512 GiB");
  EXPECT_EQ(format_bytes(2 * 0x1p50), "2.00 PiB");
}

TEST(Units, FormatBandwidthUsesDecimalPrefixesAndOneDecimal) {
  EXPECT_EQ(format_bandwidth(229.3e9), "229.3 GB/s");
  EXPECT_EQ(format_bandwidth(999e6), "999.0 MB/s");
  EXPECT_EQ(format_bandwidth(1e9), "1.0 GB/s");
  EXPECT_EQ(format_bandwidth(25e9), "25.0 GB/s");
  EXPECT_EQ(format_bandwidth(3.35e12), "3.4 TB/s");
  EXPECT_EQ(format_bandwidth(500), "500.0 B/s");
  EXPECT_EQ(format_bandwidth(0), "0.0 B/s");
}

TEST(Units, FormatTimeUsesThreeSignificantDigits) {
  EXPECT_EQ(format_time(8.19e-3), "8.19 ms");
  EXPECT_EQ(format_time(93e-6), "93.0 us");
  EXPECT_EQ(format_time(999e-9), "999 ns");
  EXPECT_EQ(format_time(1e-6), "1.00 us");
  EXPECT_EQ(format_time(9.996e-3), "10.0 ms");
  EXPECT_EQ(format_time(1.5), "1.50 s");
  EXPECT_EQ(format_time(120), "120 s");
  EXPECT_EQ(format_time(25e-12), "25.0 ps");
  EXPECT_EQ(format_time(0), "0.00 s");
}

}  // namespace
}  // namespace hetsim::config
