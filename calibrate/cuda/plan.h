// The calibration plan: which points each kind measures (full and --quick grids), with a rough
// duration guess per point so the run is budgeted before it starts (a full run must finish in
// 5 minutes on one H200).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "measurement.h"

namespace hetsim::calibrate::cuda {

// Rough achieved rates used only for the time budget (about 70 % of hardware.md §1 peaks).
struct RateGuess {
  double bf16_flops, tf32_flops, fp32_flops, fp8_flops;
  double memory_Bps, nvlink_bus_Bps, pcie_Bps;
  static RateGuess for_compute_capability(int major, int minor);
};

// One row of a shapes file (`hetsim calibrate shapes`, calibrate/model_shapes.csv): a GEMM
// (m, n, k, batch) or an attention call (batch, heads, seq, head_dim, causal) a model runs.
struct ModelShape {
  bool attention = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 0, heads = 0, seq = 0, head_dim = 0;
  int causal = 0;
};
// Throws std::invalid_argument naming the file, the line and what was expected.
std::vector<ModelShape> read_model_shapes(const std::string& path);

struct PlanConfig {
  bool quick = false;
  int cc_major = 9, cc_minor = 0;
  int gpus = 1;  // GPUs in the node (collectives need 2 or more)
  RateGuess rates = RateGuess::for_compute_capability(9, 0);
  std::vector<ModelShape> model_shapes;  // measured in bf16 besides the grids (--shapes)
  bool cudnn = false;  // cuDNN usable: attention's fused kernels (plans to build), convolutions
  bool nccl = false;   // built with NCCL: collectives can be measured

  bool has_fp8() const { return cc_major * 10 + cc_minor >= 89; }
};

std::vector<PlanItem> plan_gemm(const PlanConfig& config);
std::vector<PlanItem> plan_attention(const PlanConfig& config);
std::vector<PlanItem> plan_memory(const PlanConfig& config);
// Convolutions through cuDNN (nothing without it): ResNet-50's and the first layers' shapes,
// each in its three passes, bf16 NHWC.
std::vector<PlanItem> plan_conv(const PlanConfig& config);
std::vector<PlanItem> plan_collective(const PlanConfig& config);
std::vector<PlanItem> plan_copy(const PlanConfig& config);

// Wall time the harness spends on one point whose kernel takes `kernel_s` (warm-up,
// repetitions under RepetitionPolicy, the L2 flush before each, set-up).
double harness_seconds(double kernel_s, bool flush_l2);
// The same for a collective point (no flush, a costlier multi-GPU launch).
double collective_harness_seconds(double kernel_s);

}  // namespace hetsim::calibrate::cuda
