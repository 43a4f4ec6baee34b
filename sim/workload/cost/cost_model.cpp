// The datasheet cost model; see cost_model.h.
#include "sim/workload/cost/cost_model.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "sim/config/embedded_data.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::workload {

namespace {

// The profile's peak keys a training precision runs on: fp32 training takes TF32 tensor cores
// where they exist (PyTorch's and Megatron's default for matmuls since Ampere).
std::vector<const char*> peak_keys(Precision p) {
  switch (p) {
    case Precision::fp32:
      return {"tf32", "fp32"};
    case Precision::fp16:
      return {"fp16"};
    case Precision::bf16:
      return {"bf16"};
    case Precision::fp8:
      return {"fp8"};
  }
  return {};
}

}  // namespace

bool has_precision(const config::GpuProfile& gpu, Precision p) {
  for (const char* k : peak_keys(p)) {
    auto it = gpu.peak_flops.find(k);
    if (it != gpu.peak_flops.end() && it->second > 0) return true;
  }
  return false;
}

std::string training_precisions(const config::GpuProfile& gpu) {
  std::string out;
  for (Precision p : {Precision::fp32, Precision::fp16, Precision::bf16, Precision::fp8}) {
    if (has_precision(gpu, p)) out += (out.empty() ? "" : ", ") + to_string(p);
  }
  return out.empty() ? "none" : out;
}

double peak_flops(const config::GpuProfile& gpu, Precision p) {
  double v = 0;
  for (const char* k : peak_keys(p)) {
    auto it = gpu.peak_flops.find(k);
    if (it != gpu.peak_flops.end()) v = std::max(v, it->second);
  }
  if (v <= 0) {
    throw InputError("GPU type " + gpu.name + " has no " + to_string(p) + " (it has " +
                     training_precisions(gpu) + "; " + gpu.source + ")");
  }
  return v;
}

double throttle_factor(const config::GpuProfile& gpu, Precision p, double gemm_max) {
  // The key peak_flops takes its rate from (the larger where two apply, as TF32 over FP32).
  const char* key = nullptr;
  double peak = 0;
  for (const char* k : peak_keys(p)) {
    auto it = gpu.peak_flops.find(k);
    if (it != gpu.peak_flops.end() && it->second > peak) key = k, peak = it->second;
  }
  if (key == nullptr) return 1;
  auto it = gpu.sustained_flops.find(key);
  if (it == gpu.sustained_flops.end()) return 1;
  return std::min(1.0, it->second / (peak * gemm_max));
}

DatasheetEfficiency load_datasheet_efficiency(const std::string& path) {
  using namespace config;
  std::string text, file = path;
  if (path.empty()) {
    file = "calibrate/datasheet_efficiency.yaml";
    for (const EmbeddedFile& f : embedded_files()) {
      if (file == f.path) text = f.text;
    }
    if (text.empty()) throw RunError("built-in data is missing " + file);
  } else {
    text = read_text_file(path);
  }
  const YAML::Node root = load_yaml(text, file);
  check_keys(file, root, "",
             {"gemm", "attention", "memory", "conv", "kernel_overhead", "host_per_kernel",
              "architectures"});
  DatasheetEfficiency e;
  const YAML::Node g = require(file, root, "", "gemm");
  check_keys(file, g, "gemm", {"max_efficiency", "tile", "k_half"});
  e.gemm_max = get_number(file, g, "gemm", "max_efficiency");
  e.tile = get_number(file, g, "gemm", "tile");
  e.k_half = get_number(file, g, "gemm", "k_half");
  const YAML::Node a = require(file, root, "", "attention");
  check_keys(file, a, "attention", {"forward", "backward"});
  e.attention_forward = get_number(file, a, "attention", "forward");
  e.attention_backward = get_number(file, a, "attention", "backward");
  const YAML::Node m = require(file, root, "", "memory");
  check_keys(file, m, "memory", {"efficiency"});
  e.memory = get_number(file, m, "memory", "efficiency");
  if (const YAML::Node c = root["conv"]) {
    check_keys(file, c, "conv", {"relative_to_gemm", "k_half"});
    e.conv = get_number(file, c, "conv", "relative_to_gemm");
    e.conv_k_half = get_number(file, c, "conv", "k_half", e.conv_k_half);
    if (!(e.conv_k_half >= 0)) throw InputError(file + ": conv.k_half: expected 0 or more");
  }
  e.kernel_overhead =
      Time::from_seconds(get_quantity(file, root, "", "kernel_overhead", Dimension::time));
  e.host_per_kernel =
      Time::from_seconds(get_quantity(file, root, "", "host_per_kernel", Dimension::time, 0.0));
  for (double v : {e.gemm_max, e.attention_forward, e.attention_backward, e.memory, e.conv}) {
    if (!(v > 0 && v <= 1)) throw InputError(file + ": efficiencies must lie in (0, 1]");
  }
  if (const YAML::Node arch = root["architectures"]) {
    if (!arch.IsMap()) throw InputError(where(file, arch) + ": architectures: expected a map");
    for (const auto& kv : arch) {
      const std::string name = kv.first.as<std::string>();
      const std::string path = "architectures." + name;
      check_keys(file, kv.second, path, {"memory", "streaming_memory"});
      const std::pair<const char*, std::map<std::string, double>*> keys[] = {
          {"memory", &e.memory_by_architecture},
          {"streaming_memory", &e.streaming_memory_by_architecture}};
      for (const auto& [key, into] : keys) {
        if (!kv.second[key]) continue;
        const double m = get_number(file, kv.second, path, key);
        if (!(m > 0 && m <= 1))
          throw InputError(where(file, kv.second[key]) + ": " + path + "." + key +
                           ": expected an efficiency in (0, 1]");
        (*into)[name] = m;
      }
    }
  }
  return e;
}

// The reduction-length term's k_half for a GEMM whose math runs on the vector units (fp32 on a
// board without TF32 whose 16-bit math has faster tensor or matrix cores: Volta, Turing, AMD's
// CDNA2), from the tensor-core one the constants were fitted with (a board whose 16-bit math is
// no faster, as the P100's, keeps it).
// A tile's loads and its output are hidden once its main loop is long against them: the loop
// takes k / (the board's FLOP rate) a tile row, the loads and stores bytes per element / (the
// same memory and shared-memory bandwidth), so the k that hides them scales with FLOP rate x
// element bytes. On a V100, FP32 on the CUDA cores (15.7 TFLOPS, 4-byte elements) against FP16 on
// the tensor cores (125 TFLOPS, 2 bytes): a quarter of the k_half. The H200 calibration
// (calibrate/data/h200-sxm-141gb.h5, whose FP32 GEMMs cuBLAS ran on the CUDA cores, TF32 off;
// hetsim itself runs an H200's fp32 plans at the TF32 rate) shows it: 72-74% of the FP32 peak at
// k = 1024 and 75-76% at k = 8192 (2048-8192 square), where its BF16 GEMMs go from 48-66% to
// 69-79% of theirs.
double DatasheetCostModel::simt_k_half(const config::GpuProfile& gpu, Precision math) const {
  if (math != Precision::fp32) return e_.k_half;
  auto peak = [&](const char* key) {
    auto it = gpu.peak_flops.find(key);
    return it == gpu.peak_flops.end() ? 0.0 : it->second;
  };
  const double fp32 = peak("fp32"), tensor = std::max(peak("fp16"), peak("bf16"));
  // TF32 (Ampere and later) runs fp32 math on the tensor cores: the fitted term applies.
  if (peak("tf32") > fp32 || !(fp32 > 0) || !(tensor > fp32)) return e_.k_half;
  return e_.k_half * (fp32 * 4) / (tensor * 2);
}

double DatasheetCostModel::gemm_shape_efficiency(const Op& op, const config::GpuProfile& gpu,
                                                 Precision math) const {
  const double t = e_.tile;
  const double tiles_m = std::ceil(op.m / t), tiles_n = std::ceil(op.n / t);
  const double tiles = tiles_m * tiles_n * std::max<int64_t>(1, op.batch);
  const double sms = std::max(1, gpu.sms);
  const double waves = std::ceil(tiles / sms);
  const double wave_eff = tiles / (waves * sms);
  const double tile_eff = (double(op.m) * op.n) / (tiles_m * t * tiles_n * t);
  const double k_eff = op.k / (op.k + simt_k_half(gpu, math));
  return wave_eff * tile_eff * k_eff;
}

double DatasheetCostModel::conv_shape_efficiency(const Op& op,
                                                 const config::GpuProfile& gpu) const {
  const double t = e_.tile;
  const double tiles_m = std::ceil(op.m / t), tiles_n = std::ceil(op.n / t);
  const double sms = std::max(1, gpu.sms);
  // Split-K: as many slices of the reduction as fill the SMs, each at least 8 tiles long.
  const double tiles0 = tiles_m * tiles_n;
  const double split =
      tiles0 >= sms ? 1.0
                    : std::max(1.0, std::min(std::floor(sms / tiles0), std::floor(op.k / (8 * t))));
  const double tiles = tiles0 * split;
  const double waves = std::ceil(tiles / sms);
  const double wave_eff = tiles / (waves * sms);
  const double tile_eff = (double(op.m) * op.n) / (tiles_m * t * tiles_n * t);
  const double k = op.k / split;
  return wave_eff * tile_eff * k / (k + e_.conv_k_half);
}

double DatasheetCostModel::sustained_share(const config::GpuProfile& gpu, Precision p) const {
  return throttle_factor(gpu, p, e_.gemm_max);
}

double DatasheetCostModel::sustained_flops(const config::GpuProfile& gpu, Precision p) const {
  const double s = throttle_factor(gpu, p, e_.gemm_max);
  return s < 1 ? s * peak_flops(gpu, p) * e_.gemm_max : 0;
}

Time DatasheetCostModel::duration(const Op& op, const config::GpuProfile& gpu, Precision p) const {
  // A power- or clock-capped board lowers its SM clock under sustained matmul load: GEMMs and
  // attention slow by the same factor; memory-bound kernels keep their bandwidth. 1 (exactly)
  // for a profile without `sustained:`.
  return duration_throttled(op, gpu, p, throttle_factor(gpu, p, e_.gemm_max));
}

Time DatasheetCostModel::duration_at_clock(const Op& op, const config::GpuProfile& gpu, Precision p,
                                           double clock) const {
  return duration_throttled(op, gpu, p,
                            std::min(1.0, throttle_factor(gpu, p, e_.gemm_max) * clock));
}

Time DatasheetCostModel::duration_throttled(const Op& op, const config::GpuProfile& gpu,
                                            Precision p, double matmul_share) const {
  const double bw =
      gpu.memory_bandwidth_Bps *
      (op.streaming ? e_.streaming_memory_for(gpu.architecture) : e_.memory_for(gpu.architecture));
  const double throttle = op.kind == OpKind::memory ? 1.0 : matmul_share;
  double seconds = 0;
  switch (op.kind) {
    case OpKind::gemm: {
      // Tile quantisation: partial tiles at the edges do full work. Wave quantisation: tiles run
      // in waves of one per SM; the last wave may be mostly empty [nv-mm].
      const Precision math = math_precision(op, p);
      const double compute = op.flops / (peak_flops(gpu, math) * e_.gemm_max *
                                         gemm_shape_efficiency(op, gpu, math) * throttle);
      seconds = std::max(compute, op.bytes / bw);
      break;
    }
    case OpKind::attention_forward:
    case OpKind::attention_backward: {
      const double eff =
          op.kind == OpKind::attention_forward ? e_.attention_forward : e_.attention_backward;
      // At the board's clock (the throttle is the plan precision's) and its math's peak.
      seconds = std::max(op.flops / (peak_flops(gpu, math_precision(op, p)) * eff * throttle),
                         op.bytes / bw);
      break;
    }
    case OpKind::memory:
      seconds = op.bytes / bw;
      break;
    case OpKind::conv: {
      // cuDNN runs a convolution as an implicit GEMM of Op::m x n x k: the GEMM's quantisation
      // and reduction-length terms apply to that shape, times what implicit GEMM keeps of an
      // explicit one (the im2col gather inside the kernel).
      const double compute = op.flops / (peak_flops(gpu, p) * e_.gemm_max * e_.conv *
                                         conv_shape_efficiency(op, gpu) * throttle);
      seconds = std::max(compute, op.bytes / bw);
      break;
    }
  }
  return Time::from_seconds_ceil(seconds) + e_.kernel_overhead;
}

double power_clock(const std::vector<PowerSegment>& segments, double sustained_share,
                   double sustained_flops) {
  const double s = sustained_share, rs = sustained_flops;
  if (!(s < 1) || !(s > 0) || !(rs > 0)) return 1;
  double flops = 0, memory = 0;
  for (const PowerSegment& x : segments) {
    flops += x.count * x.flops;
    memory += x.count * x.other_s;
  }
  if (!(flops > 0)) return 1;
  auto excess = [&](double c) {  // the power over the cap's, less 1
    double total = 0;
    for (const PowerSegment& x : segments) {
      total += x.count * std::max(x.matmul_s / c + x.other_s, x.host_s);
    }
    return c * c * flops / (total * rs) + memory / total - 1;
  };
  double lo = 1, hi = 1 / s;
  if (excess(lo) >= 0) return 1;
  if (excess(hi) <= 0) return hi;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (excess(mid) < 0 ? lo : hi) = mid;
  }
  return lo;
}

Precision math_precision(const Op& op, Precision p) {
  if (p != Precision::fp8) return p;
  switch (op.kind) {
    case OpKind::attention_forward:
    case OpKind::attention_backward:
      return Precision::bf16;
    case OpKind::gemm: {
      // The output layer (its forward, dgrad and wgrad GEMMs are named logits*), and any GEMM
      // with a dimension that is no multiple of 16.
      const bool output_layer = op.name.rfind("logits", 0) == 0;
      const bool unaligned = op.m % 16 != 0 || op.n % 16 != 0 || op.k % 16 != 0;
      return output_layer || unaligned ? Precision::bf16 : p;
    }
    default:
      return p;
  }
}

double matmul_work(const Op& op, const config::GpuProfile& gpu, Precision p) {
  if (op.kind == OpKind::memory) return 0;
  const Precision m = math_precision(op, p);
  return m == p ? op.flops : op.flops * peak_flops(gpu, p) / peak_flops(gpu, m);
}

Time host_time(const CostModel& cost, const Op& op, const Framework& framework) {
  if (framework.host_per_kernel && cost.issues_kernels()) return *framework.host_per_kernel;
  return cost.host_time(op);
}

}  // namespace hetsim::workload
