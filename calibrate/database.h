// The calibration database: measured kernel and collective times with their provenance, stored
// in HDF5 (schema version 1, calibrate/README.md), and the CSV interchange the backends append to
// while they measure (so an interrupted run keeps its data and can resume).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

struct Database {
  std::string source;                                  // file it was read from
  std::map<std::string, std::string> attrs;            // provenance: backend, device_type, ...
  std::map<std::string, std::vector<GemmPoint>> gemm;  // by dtype
  std::map<std::string, std::vector<AttentionPoint>> attention;  // by dtype
  std::map<std::string, std::vector<SizePoint>> memory;          // by kernel
  std::map<std::string, std::vector<SizePoint>> collective;      // by op
  std::map<std::string, std::vector<SizePoint>> copy;            // by direction
  std::string device_type() const;
  size_t size() const;  // number of measurements
};

// Throws InputError naming the file (and group) for a missing, corrupt, truncated or foreign
// file, or another schema version.
Database read_database(const std::string& path);
// Writes atomically (a temporary file renamed over the target).
void write_database(const std::string& path, const Database& db);

// CSV interchange: header, "# key=value" provenance lines, one measurement per line.
Database read_csv(const std::string& path);
std::string csv_header();
std::string csv_line(const std::string& kind, const std::string& dtype_or_name, const GemmPoint* g,
                     const AttentionPoint* a, const SizePoint* s);

}  // namespace hetsim::calibrate
