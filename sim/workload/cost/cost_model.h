// The cost of one kernel on one GPU type. The datasheet model uses peak FLOP/s and memory
// bandwidth with efficiency curves (tile and wave quantisation against the SM count, short
// reductions, memory-bound kernels); calibration data plugs in behind the same interface.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "sim/config/cluster_config.h"
#include "sim/core/time.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/model/ops.h"

namespace hetsim::workload {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual Time duration(const Op& op, const config::GpuProfile& gpu, Precision p) const = 0;
  // Host time to issue the kernel (framework dispatch and launch). Between synchronisation
  // points the host runs ahead of the GPU, so a run of kernels takes the longer of its GPU time
  // and its host time: small kernels are host-bound.
  virtual Time host_time(const Op& op) const = 0;
  // Whether a host issues the ops to a device at a host cost each (host_time), which a
  // framework's own per-kernel time may replace; a CPU backend's measured ops hold their own.
  virtual bool issues_kernels() const { return true; }
  // Where the figure comes from: "datasheet", "measured", "derived".
  virtual std::string source(const Op& op, const config::GpuProfile& gpu) const = 0;
  // How this one op's figure was found, for the report's tally: "measured", "beyond the table
  // (measured edge, datasheet-scaled)", "datasheet (no ... table)", ...; the source by default.
  virtual std::string coverage(const Op& op, const config::GpuProfile& gpu, Precision) const {
    return source(op, gpu);
  }
  // The measured time of a collective (nccl-tests size) over `ranks` GPUs of this type on
  // `nodes` nodes, where calibration measured that collective at that rank and node count on
  // this type; nullopt leaves it to the network model.
  virtual std::optional<Time> collective_time(CommKind, double /*bytes*/, int /*ranks*/,
                                              int /*nodes*/, const config::GpuProfile&) const {
    return std::nullopt;
  }
  // Whether collective_time can ever answer: a job built without measured collectives skips
  // asking for each of its collectives.
  virtual bool measures_collectives() const { return false; }
  // The share of its unthrottled matmul rate a power-capped GPU keeps when it runs matmuls back
  // to back, as duration() applies it (throttle_factor); 1 where nothing is throttled, and for
  // measured figures, which carry the clock they ran at.
  virtual double sustained_share(const config::GpuProfile&, Precision) const { return 1; }
  // The board's measured matmul rate under continuous load (FLOP/s; the profile's `sustained:`
  // figure, at most what the datasheet model gives its matmuls); 0 where there is none.
  virtual double sustained_flops(const config::GpuProfile&, Precision) const { return 0; }
  // duration() on a board whose clock runs `clock` times its sustained one (a board below its
  // power cap; see power_cap in training_job.cpp): matmuls faster, up to the unthrottled rate;
  // memory-bound kernels as they were.
  virtual Time duration_at_clock(const Op& op, const config::GpuProfile& gpu, Precision p,
                                 double /*clock*/) const {
    return duration(op, gpu, p);
  }
};

struct DatasheetEfficiency {
  double gemm_max = 0.8;
  double tile = 128;
  double k_half = 64;
  double attention_forward = 0.55;
  double attention_backward = 0.45;
  double memory = 0.8;
  double conv = 0.8;        // an implicit-GEMM convolution's share of a GEMM of the same shape
  double conv_k_half = 64;  // its reduction-length term, k / (k + conv_k_half)
  Time kernel_overhead = Time::us(3);
  Time host_per_kernel;  // host issue time per kernel (eager PyTorch dispatch + launch)
  // Per GPU architecture ("turing", ...): the share of memory bandwidth its memory-bound kernels
  // reach, where it differs from `memory` (the file's `architectures:` section).
  std::map<std::string, double> memory_by_architecture;
  // Per GPU architecture: the share its streaming passes reach (Op::streaming: the optimizer
  // step, one fused multi-tensor kernel as DeepSpeed's FusedAdam and apex's Adam, gradient
  // accumulation, the loss over the logits), where the file gives one apart from the layers'
  // elementwise kernels (`architectures.NAME.streaming_memory`).
  std::map<std::string, double> streaming_memory_by_architecture;
  double memory_for(const std::string& architecture) const {
    auto it = memory_by_architecture.find(architecture);
    return it == memory_by_architecture.end() ? memory : it->second;
  }
  // Those kernels' share: the architecture's `streaming_memory` where given, else memory_for.
  double streaming_memory_for(const std::string& architecture) const {
    auto it = streaming_memory_by_architecture.find(architecture);
    return it == streaming_memory_by_architecture.end() ? memory_for(architecture) : it->second;
  }
};

// The built-in constants (calibrate/datasheet_efficiency.yaml), or a file of the same form.
DatasheetEfficiency load_datasheet_efficiency(const std::string& path = "");

class DatasheetCostModel : public CostModel {
 public:
  explicit DatasheetCostModel(DatasheetEfficiency e = load_datasheet_efficiency()) : e_(e) {}
  Time duration(const Op& op, const config::GpuProfile& gpu, Precision p) const override;
  Time host_time(const Op&) const override { return e_.host_per_kernel; }
  std::string source(const Op&, const config::GpuProfile&) const override { return "datasheet"; }
  double sustained_share(const config::GpuProfile& gpu, Precision p) const override;
  double sustained_flops(const config::GpuProfile& gpu, Precision p) const override;
  Time duration_at_clock(const Op& op, const config::GpuProfile& gpu, Precision p,
                         double clock) const override;
  const DatasheetEfficiency& efficiency() const { return e_; }
  // The share of peak a GEMM of this shape keeps after tile and wave quantisation and its
  // reduction length: measured tables interpolate in units of it, so the steps stay.
  // `math`: the precision the GEMM's math runs in (math_precision); fp32 on a board without TF32
  // runs on the CUDA cores (see simt_k_half).
  double gemm_shape_efficiency(const Op& op, const config::GpuProfile& gpu,
                               Precision math = Precision::bf16) const;
  double simt_k_half(const config::GpuProfile& gpu, Precision math) const;
  // The same for a convolution's implicit GEMM, whose kernels split a long reduction over
  // several tiles' worth of SMs when the output has too few tiles to fill the GPU (the weight
  // gradient: k x c r s outputs, n p q long).
  double conv_shape_efficiency(const Op& op, const config::GpuProfile& gpu) const;

 private:
  // duration() with the matmuls' share of the datasheet rate `throttle`.
  Time duration_throttled(const Op& op, const config::GpuProfile& gpu, Precision p,
                          double throttle) const;
  DatasheetEfficiency e_;
};

// One compute segment (kernels issued back to back, between collectives) as the power model
// sees it: its matmuls' time at the sustained clock and their FLOPs, its memory-bound kernels'
// time, its host's issue time, and how many times the device runs it.
struct PowerSegment {
  double matmul_s = 0, flops = 0, other_s = 0, host_s = 0;
  double count = 1;
};

// The clock a power-capped board settles at, over the clock of its measured sustained matmuls
// (1 to 1 / sustained_share; 1 where the board is not capped). Its dynamic power goes as the
// switching activity times the clock times the voltage squared, the voltage scaling with the
// clock: for matmuls, their work per second (achieved FLOP/s R, itself proportional to the
// clock) times the clock squared; memory-bound kernels are taken at the cap's power for the time
// they run. The profile's `sustained:` figure is the board's own measurement: continuous large
// matmuls at R_s. The cap then holds c^2 R(c) / R_s + M / T(c) = 1, with T the time the device
// spends in its compute segments (each the longer of its kernels and its host's issue time) and
// M the memory-bound kernels' part of it. A device whose matmuls reach less of the peak (small
// shapes, tile and wave losses) or that waits on its host between kernels draws less at the
// same clock, and runs faster, up to the unthrottled clock. The segments leave out the device's
// waits for transfers, collectives and the pipeline's bubble: a power controller averages over
// milliseconds, and those waits are longer (the board cools, then computes at its capped clock
// again). The left side rises with c: one root in [1, 1 / s], found by bisection.
double power_clock(const std::vector<PowerSegment>& segments, double sustained_share,
                   double sustained_flops);

// The host time of issuing `op` under a framework: the framework's own per-kernel time where it
// has one and a host issues the ops (CostModel::issues_kernels), else the cost model's.
Time host_time(const CostModel& cost, const Op& op, const Framework& framework);

// The precision an op's math runs at under a plan's precision p: p, except under fp8, where
// these run in bf16 as Transformer Engine and Megatron-LM run them: attention (TE's fp8 recipes
// quantise the linear layers' GEMMs; fp8 dot-product attention is opt-in, NVTE_FP8_DPA, off by
// default), the output layer's GEMMs (Megatron-LM's output layer is its own ColumnParallelLinear,
// outside TE's fp8 autocast), and GEMMs with a dimension that is no multiple of 16 (TE asserts
// it for fp8; cuBLASLt has no fp8 algorithm for such shapes, which stopped fp8 programs of GPT-3
// with its 50257-token vocabulary on an H200).
Precision math_precision(const Op& op, Precision p);
// An op's matmul work in FLOPs at precision p's rate, as the power model counts it (the
// PowerSegment's flops): attention run in bf16 under an fp8 plan counts its FLOPs times fp8's
// peak over bf16's (a bf16 FLOP takes the tensor cores twice as long); 0 for memory-bound ops.
double matmul_work(const Op& op, const config::GpuProfile& gpu, Precision p);

// Peak dense FLOP/s of a GPU at a training precision (fp32 GEMMs use TF32 where the GPU has it,
// as cuBLAS does when allowed). Throws InputError when the GPU lacks the precision.
double peak_flops(const config::GpuProfile& gpu, Precision p);
// The share of its datasheet compute rate a power- or clock-capped GPU keeps under continuous
// matmul load: min(1, sustained / (peak x gemm_max)) for the peak key precision p runs on, where
// the profile gives a `sustained:` rate for that key; exactly 1 where it gives none. gemm_max is
// the GEMM efficiency the datasheet model already applies, so a board that sustains gemm_max of
// its peak is not throttled twice. (T4 fp16: 24 / (65 x 0.74) = 0.499.)
double throttle_factor(const config::GpuProfile& gpu, Precision p, double gemm_max);
// Whether the GPU runs training at precision p at its own rate: its profile gives a peak for it
// (bf16 needs Ampere or later, fp8 Ada or Hopper). A precision it lacks is not emulated: hetsim
// refuses it rather than cost it as another (see plan.h).
bool has_precision(const config::GpuProfile& gpu, Precision p);
// "fp32, fp16": the training precisions the GPU has.
std::string training_precisions(const config::GpuProfile& gpu);

}  // namespace hetsim::workload
