// The calibration database: measured kernel and collective times with their provenance, stored
// in HDF5 (schema version 1, calibrate/README.md), and the CSV interchange the backends append to
// while they measure (so an interrupted run keeps its data and can resume).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/workload/model/ops.h"

namespace hetsim::calibrate {

constexpr int kSchemaVersion = 1;

struct Timing {
  double median_s = 0, p10_s = 0, p90_s = 0;
  int64_t repetitions = 0;
};

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  Timing t;
};

struct AttentionPoint {
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool causal = false, backward = false;
  Timing t;
  bool fused = false;  // a fused kernel (cuDNN's SDPA, flash-style); else unfused GEMMs + softmax
};

// Memory-bound kernels, collectives and copies: by size (and, for collectives, the ranks taking
// part and the nodes they span: 1 inside a node, more across nodes).
struct SizePoint {
  double bytes = 0;
  int64_t ranks = 1;
  Timing t;
  int64_t nodes = 1;
};

// A convolution (NCHW; cuDNN's cross-correlation) of one shape and pass.
struct ConvPoint {
  workload::ConvShape shape;
  Timing t;
};
// The pass's name in the CSV's name column ("forward", "data_grad", "weight_grad") and its code
// in the HDF5 `pass` dataset (0, 1, 2: the order of workload::ConvPass).
const char* conv_pass_name(workload::ConvPass p);
// nullopt for another name.
std::optional<workload::ConvPass> conv_pass_from_name(const std::string& name);

struct Database {
  std::string source;                                  // file it was read from
  std::map<std::string, std::string> attrs;            // provenance: backend, device_type, ...
  std::map<std::string, std::vector<GemmPoint>> gemm;  // by dtype
  std::map<std::string, std::vector<AttentionPoint>> attention;  // by dtype
  std::map<std::string, std::vector<SizePoint>> memory;          // by kernel
  std::map<std::string, std::vector<SizePoint>> collective;      // by op
  std::map<std::string, std::vector<SizePoint>> copy;            // by direction
  std::map<std::string, std::vector<ConvPoint>> conv;            // by dtype
  std::string device_type() const;
  size_t size() const;  // number of measurements
};

// Throws InputError naming the file (and group) for a missing, corrupt, truncated or foreign
// file, or another schema version.
Database read_database(const std::string& path);
// Writes atomically (a temporary file renamed over the target).
void write_database(const std::string& path, const Database& db);

// Sanity of a database's measurements. A kernel repeated on a quiet machine agrees with itself
// within a few percent: (p90 - p10) / median is 0.6-2% in the shipped H200 and A100 samples
// (tests/data/calibration) and typically under 20% for CPU kernels. A table whose *median* point
// spreads more than half its own median was measured on a loaded or throttling machine: its
// medians are not this machine's speed (issue 9's trial: a loaded CPU run put an iteration at
// 449 s against 34.8 s on a quiet rerun, with spreads over 1000%). 50% leaves a wide margin for
// honest noise and still catches that.
constexpr double kMaxMedianSpread = 0.5;
// Held-out points of a smooth grid come back within a few percent (calibrate check on the
// shipped samples); interpolation cannot be that wrong by shape alone, so a mean held-out error
// over 25% means neighbouring points disagree: noise, not the kernel's curve (the trial: 67-75%).
constexpr double kMaxHeldOutError = 0.25;

struct TableSpread {
  std::string table;  // "gemm/fp32", "memory/copy", "collective/allreduce", as calibrate check
  size_t points = 0;
  double median_spread = 0;  // median over points of (p90 - p10) / median
};
// Every table's spread, from the stored percentiles alone (cheap: no model is built).
std::vector<TableSpread> table_spreads(const Database& db);
// One sentence per table over kMaxMedianSpread, naming the table, the figure and the threshold.
std::vector<std::string> spread_warnings(const Database& db);

// CSV interchange: header, "# key=value" provenance lines, one measurement per line. Files with
// the earlier headers (before the conv_* columns, before `nodes`) are still read.
Database read_csv(const std::string& path);
std::string csv_header();
// The columns before the timings: what identifies a measurement (a run's resume key).
constexpr size_t kCsvKeyColumns = 25;
std::string csv_line(const std::string& kind, const std::string& dtype_or_name, const GemmPoint* g,
                     const AttentionPoint* a, const SizePoint* s, const ConvPoint* c = nullptr);

}  // namespace hetsim::calibrate
