// The cost model that reads calibration data: interpolates between measured points (in log
// space; a GPU's GEMMs as their ratio to the datasheet kernel time, so tile and wave steps and
// the compute/memory crossover survive) and falls back to the datasheet roofline outside the
// table, scaled to meet the table at its edge. GPU
// types nobody measured get costs derived from a measured type and the datasheet ratios.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "calibrate/database.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::calibrate {

struct CheckRow;

// The database's memory-bound kernel (`layernorm`, `gelu`, `adam`, `copy`, ...) that stands for
// a memory op of the workload, by the op's name.
const char* memory_kernel_of(const std::string& op_name);

class MeasuredCostModel : public workload::CostModel {
 public:
  MeasuredCostModel(Database db, workload::DatasheetCostModel datasheet);
  ~MeasuredCostModel() override;
  Time duration(const workload::Op& op, const config::GpuProfile& gpu,
                workload::Precision p) const override;
  // A CPU database's device is the host itself: its kernels' measured times already hold the
  // host's work, with no separate stream to run ahead of (and hetsim execute calls them
  // directly, with no framework dispatch between them).
  Time host_time(const workload::Op& op) const override {
    return cpu_ ? Time() : datasheet_.host_time(op);
  }
  bool issues_kernels() const override { return !cpu_; }
  std::string source(const workload::Op& op, const config::GpuProfile& gpu) const override;
  std::string coverage(const workload::Op& op, const config::GpuProfile& gpu,
                       workload::Precision p) const override;
  // From the database's collective table of that op, rank and node count (measured on this
  // GPU type only; interpolated in log time over log bytes, bandwidth-bound past its ends).
  std::optional<Time> collective_time(workload::CommKind kind, double bytes, int ranks, int nodes,
                                      const config::GpuProfile& gpu) const override;
  bool measures_collectives() const override { return true; }

  // Predicted seconds of a measurement kind from the table alone, for `calibrate check`;
  // nullopt where the table has nothing to offer.
  std::optional<double> predict_gemm(const std::string& dtype, const GemmPoint& q,
                                     const config::GpuProfile& gpu) const;
  std::optional<double> predict_size(const std::string& kind, const std::string& name,
                                     const SizePoint& q) const;
  std::optional<double> predict_attention(const std::string& dtype, const AttentionPoint& q,
                                          const config::GpuProfile& gpu) const;
  // A convolution: the measured time of that shape and pass; else the nearest measured point of
  // the pass (of the same filter size and stride where the table has any; nearest in log n, c,
  // h, w, k and padding) scaled by the ratio of the two shapes' references (below): "measured
  // edge, datasheet-scaled", as GEMMs beyond their table.
  std::optional<double> predict_conv(const std::string& dtype, const workload::ConvShape& q,
                                     const config::GpuProfile& gpu) const;
  const Database& database() const { return db_; }

  // Every measured kernel (GEMM, attention, memory-bound) against the datasheet model's kernel
  // time (no launch gap), per table: how far this GPU is from hetsim's uncalibrated model.
  std::vector<CheckRow> compare_datasheet(const config::GpuProfile& gpu) const;

  struct Tables;  // the interpolation tables, built on first use (measured_cost_model.cpp)

 private:
  const config::GpuProfile* reference() const;  // the measured type's profile, if a GPU
  // What a GEMM table is normalised by (see predict_gemm): FLOPs on a CPU, the datasheet
  // kernel time on a GPU.
  double gemm_reference(const workload::Op& op, const config::GpuProfile& gpu,
                        const std::string& dtype) const;
  // The same for an attention point (its FLOPs on a CPU, its datasheet kernel time on a GPU).
  double attention_reference(const AttentionPoint& a, const config::GpuProfile& gpu) const;
  // The same for a convolution (its FLOPs on a CPU, its datasheet implicit-GEMM kernel time on a
  // GPU), in the table's element type.
  double conv_reference(const workload::ConvShape& c, const config::GpuProfile& gpu,
                        const std::string& dtype) const;
  Database db_;
  workload::DatasheetCostModel datasheet_;
  std::unique_ptr<Tables> tables_;
  bool cpu_ = false;  // the measured device is a CPU (its profile's architecture)
};

// Held-out check: every fifth point of each table is predicted from the others. Returns lines
// "kind/name  points  mean error %  max error %" and fills the mean error per kind.
struct CheckPoint {
  std::string label;  // the point's key, e.g. "m=512 n=64 k=1024" or "bytes=1048576"
  double measured_s = 0, predicted_s = 0;
  double spread = 0;  // (p90 - p10) / median of the measurement itself
};
struct CheckRow {
  std::string table;
  size_t held_out = 0;
  double mean_error = 0, max_error = 0;
  double mean_spread = 0;          // the measurements' own (p90 - p10) / median, for scale
  std::vector<CheckPoint> points;  // every held-out point
};
std::vector<CheckRow> check_database(const Database& db, const config::GpuProfile& gpu);
// Fills held_out, mean_error, max_error and mean_spread from the row's points.
void summarise_row(CheckRow& r);
// A point of a row: its label, measured median, the prediction, and the measurement's spread.
CheckPoint check_point(std::string label, const Timing& t, double predicted);
// "m=.. n=.. k=.. batch=.." for a GEMM point, "batch=.. heads=.. seq=.. head_dim=..[ causal]
// [ backward][ fused]" for an attention point.
template <typename Point>
std::string point_label(const Point& p);
template <>
std::string point_label(const GemmPoint& p);
template <>
std::string point_label(const AttentionPoint& p);
// "n=.. c=.. h=.. w=.. k=.. r=.. s=.. stride=.. pad=..x.. <pass>" for a convolution point.
template <>
std::string point_label(const ConvPoint& p);

}  // namespace hetsim::calibrate
