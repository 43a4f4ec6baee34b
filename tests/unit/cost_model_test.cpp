// The datasheet cost model against figures worked by hand: GEMM tile and wave quantisation, the
// `sustained:` throttle of power-capped boards (GEMMs and attention slow, memory-bound kernels do
// not), GeForce FP32-accumulate peaks, and the profile checks behind them.
#include "sim/workload/cost/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/config/cluster_config.h"
#include "sim/core/error.h"

namespace hetsim::workload {
namespace {

// The shipped constants (calibrate/datasheet_efficiency.yaml), pinned so a refit of that file
// does not move the hand-worked figures below.
DatasheetEfficiency shipped() {
  DatasheetEfficiency e;
  e.gemm_max = 0.74;
  e.tile = 128;
  e.k_half = 256;
  e.attention_forward = 0.80;
  e.attention_backward = 0.39;
  e.memory = 0.95;
  e.kernel_overhead = Time::us(10);
  return e;
}

Op gemm(int64_t m, int64_t n, int64_t k, Precision p) {
  Op op;
  op.kind = OpKind::gemm;
  op.m = m, op.n = n, op.k = k, op.batch = 1;
  op.flops = 2.0 * m * n * k;
  op.bytes = double(m * k + k * n + m * n) * element_bytes(p);
  return op;
}

Op attention_forward(double flops, double bytes) {
  Op op;
  op.kind = OpKind::attention_forward;
  op.flops = flops;
  op.bytes = bytes;
  return op;
}

Op memory(double bytes) {
  Op op;
  op.kind = OpKind::memory;
  op.bytes = bytes;
  return op;
}

const config::GpuProfile& gpu(const std::string& name) { return config::builtin_gpus().at(name); }

// The same board with its `sustained:` rates removed: the datasheet model as before them.
config::GpuProfile unthrottled(const std::string& name) {
  config::GpuProfile g = gpu(name);
  g.sustained_flops.clear();
  return g;
}

double seconds(Time t) { return t.seconds(); }

TEST(DatasheetCostModel, T4ThrottleFactorIsSustainedOverPeakTimesGemmMax) {
  // 24 TFLOPS sustained (NVIDIA forum 264462) / (65 TFLOPS peak x 0.74) = 0.498960...
  const double f = throttle_factor(gpu("t4"), Precision::fp16, 0.74);
  std::printf("T4 fp16 throttle: expected %.6f, actual %.6f\n", 24.0 / (65 * 0.74), f);
  EXPECT_NEAR(f, 0.498960, 1e-6);
  // A board that sustains more than gemm_max of its peak is not sped up: the factor caps at 1.
  EXPECT_EQ(throttle_factor(gpu("t4"), Precision::fp16, 0.3), 1.0);
  // fp32 runs on the T4's fp32 peak, which has no sustained figure.
  EXPECT_EQ(throttle_factor(gpu("t4"), Precision::fp32, 0.74), 1.0);
}

TEST(DatasheetCostModel, T4Fp16Gemm4096CubeRunsAtTheSustainedRate) {
  // 4096^3 fp16 on a T4 (40 SMs), tile 128, k_half 256:
  //   tiles 32 x 32 = 1024; waves ceil(1024 / 40) = 26; wave eff 1024 / (26 x 40) = 0.984615
  //   tile eff 1 (4096 = 32 x 128); k eff 4096 / (4096 + 256) = 0.941176
  //   shape eff 0.984615 x 0.941176 = 0.926697
  //   rate 65e12 x 0.74 x 0.926697 x 0.498960 = 24e12 x 0.926697 = 22.2407e12 FLOP/s
  //   compute 2 x 4096^3 / 22.2407e12 = 6.179608 ms (memory 100.7 MB / 304 GB/s = 0.33 ms, less)
  //   + kernel overhead 10 us = 6.189608 ms
  const DatasheetCostModel cost(shipped());
  const Op op = gemm(4096, 4096, 4096, Precision::fp16);
  EXPECT_NEAR(cost.gemm_shape_efficiency(op, gpu("t4")), 0.926697, 1e-6);
  const double t = seconds(cost.duration(op, gpu("t4"), Precision::fp16));
  std::printf("T4 fp16 4096^3 GEMM: expected 6.189608 ms, actual %.6f ms\n", t * 1e3);
  EXPECT_NEAR(t, 6.189608e-3, 1e-9);
  // Without the throttle the datasheet model had it at 3.083380 + 0.010 ms, twice as fast.
  const double t0 = seconds(cost.duration(op, unthrottled("t4"), Precision::fp16));
  EXPECT_NEAR(t0, 3.093380e-3, 1e-9);
}

TEST(DatasheetCostModel, Fp32GemmsOnCudaCoresHideTheirLoadsAtAShorterReduction) {
  // A V100 has no TF32: fp32 math runs on its CUDA cores at 15.7 TFLOPS, 4-byte elements, against
  // 125 TFLOPS and 2 bytes on its tensor cores: k_half 256 x (15.7 x 4) / (125 x 2) = 64.3072.
  const DatasheetCostModel cost(shipped());
  EXPECT_NEAR(cost.simt_k_half(gpu("v100-sxm2-16gb"), Precision::fp32), 64.3072, 1e-9);
  EXPECT_EQ(cost.simt_k_half(gpu("v100-sxm2-16gb"), Precision::fp16), 256);
  // TF32 runs an A100's or H100's fp32 math on the tensor cores: the fitted term.
  EXPECT_EQ(cost.simt_k_half(gpu("a100-sxm4-80gb"), Precision::fp32), 256);
  EXPECT_EQ(cost.simt_k_half(gpu("h100-sxm5-80gb"), Precision::fp32), 256);
  // 2048 x 8192 x 2048 (GPT-3 XL's fc1 at micro-batch 1) on the V100's 80 SMs, tile 128:
  //   tiles 16 x 64 = 1024, waves ceil(1024 / 80) = 13, wave eff 1024 / 1040 = 0.984615
  //   k eff 2048 / (2048 + 64.3072) = 0.972130 (0.888889 at k_half 256)
  const Op op = gemm(2048, 8192, 2048, Precision::fp32);
  EXPECT_NEAR(cost.gemm_shape_efficiency(op, gpu("v100-sxm2-16gb"), Precision::fp32),
              1024.0 / 1040 * 2048 / (2048 + 64.3072), 1e-9);
  EXPECT_NEAR(cost.gemm_shape_efficiency(op, gpu("v100-sxm2-16gb"), Precision::fp16),
              1024.0 / 1040 * 2048 / (2048 + 256), 1e-12);
}

TEST(DatasheetCostModel, AProfileWithoutSustainedIsUnchanged) {
  const DatasheetCostModel cost(shipped());
  for (const std::string name : {"a100-sxm4-80gb", "a100-pcie-80gb", "v100-sxm2-32gb"}) {
    const config::GpuProfile& g = gpu(name);
    EXPECT_TRUE(g.sustained_flops.empty()) << name;
    for (Precision p : {Precision::fp32, Precision::fp16, Precision::bf16}) {
      if (!has_precision(g, p)) continue;
      EXPECT_EQ(throttle_factor(g, p, 0.74), 1.0) << name;
    }
  }
  // The A100 4096^3 bf16 GEMM, by the formula that predates `sustained:`, to the picosecond:
  // tiles 1024 on 108 SMs: waves 10, wave eff 1024 / 1080; k eff 4096 / 4352.
  const config::GpuProfile& a100 = gpu("a100-sxm4-80gb");
  const Op op = gemm(4096, 4096, 4096, Precision::bf16);
  const double shape = (1024.0 / 1080) * (4096.0 / 4352);
  const Time expected = Time::from_seconds_ceil(op.flops / (312e12 * 0.74 * shape)) + Time::us(10);
  EXPECT_EQ(cost.duration(op, a100, Precision::bf16), expected);
}

TEST(DatasheetCostModel, HopperBoardsAreThrottledToTheMeasuredH200Rate) {
  // 659 TFLOP/s sustained bf16 (our H200 at its 700 W cap) / (989 x 0.74) = 0.900445...;
  // fp16 627 / (989 x 0.74) = 0.856722..., fp8 1135 / (1979 x 0.74) = 0.775034...
  for (const std::string name : {"h100-sxm5-80gb", "h200-sxm-141gb"}) {
    EXPECT_NEAR(throttle_factor(gpu(name), Precision::bf16, 0.74), 659.0 / (989 * 0.74), 1e-9);
    EXPECT_NEAR(throttle_factor(gpu(name), Precision::fp16, 0.74), 627.0 / (989 * 0.74), 1e-9);
    EXPECT_NEAR(throttle_factor(gpu(name), Precision::fp8, 0.74), 1135.0 / (1979 * 0.74), 1e-9);
  }
  const DatasheetCostModel cost(shipped());
  EXPECT_NEAR(cost.sustained_flops(gpu("h100-sxm5-80gb"), Precision::bf16), 659e12, 1e3);
  EXPECT_EQ(cost.sustained_flops(gpu("a100-sxm4-80gb"), Precision::bf16), 0.0);
}

TEST(DatasheetCostModel, UnderFp8AttentionTheOutputLayerAndUnalignedGemmsRunInBf16) {
  auto op = [](OpKind kind, const char* name, int64_t m, int64_t n, int64_t k) {
    Op o;
    o.kind = kind;
    o.name = name;
    o.m = m, o.n = n, o.k = k;
    o.flops = 2.0 * m * n * k;
    return o;
  };
  const Op fc1 = op(OpKind::gemm, "fc1", 2048, 8192, 2048);
  const Op logits = op(OpKind::gemm, "logits.wgrad", 2048, 50304, 2048);  // aligned, still bf16
  const Op vocab = op(OpKind::gemm, "lm", 2048, 50257, 2048);             // 50257 % 16 = 1
  Op attention = op(OpKind::attention_forward, "attention", 0, 0, 0);
  attention.flops = 1e12;
  EXPECT_EQ(math_precision(fc1, Precision::fp8), Precision::fp8);
  EXPECT_EQ(math_precision(logits, Precision::fp8), Precision::bf16);
  EXPECT_EQ(math_precision(vocab, Precision::fp8), Precision::bf16);
  EXPECT_EQ(math_precision(attention, Precision::fp8), Precision::bf16);
  for (const Op* o : std::initializer_list<const Op*>{&fc1, &logits, &vocab, &attention})
    EXPECT_EQ(math_precision(*o, Precision::bf16), Precision::bf16) << o->name;
  // The power model's work: a bf16 FLOP takes the tensor cores twice an fp8 one's time on an
  // H100 (989 against 1979 TFLOP/s), so it counts 1979 / 989 fp8 FLOPs.
  const config::GpuProfile& h100 = gpu("h100-sxm5-80gb");
  EXPECT_EQ(matmul_work(fc1, h100, Precision::fp8), fc1.flops);
  EXPECT_NEAR(matmul_work(attention, h100, Precision::fp8), 1e12 * 1979.0 / 989.0, 1e3);
  EXPECT_EQ(matmul_work(op(OpKind::memory, "gelu", 0, 0, 0), h100, Precision::fp8), 0.0);
  // The datasheet model times a bf16-run GEMM at bf16's peak, at the board clock of the plan's
  // precision (its throttle): the output layer under fp8 takes its bf16 time times the ratio of
  // the two throttles (the 10 us launch gap aside: within 2% for this 0.4 TFLOP GEMM).
  const DatasheetCostModel cost(shipped());
  auto seconds = [&](const Op& o, Precision p) {
    return cost.duration_at_clock(o, h100, p, 1.0).seconds();
  };
  EXPECT_NEAR(
      seconds(logits, Precision::fp8) / seconds(logits, Precision::bf16),
      throttle_factor(h100, Precision::bf16, 0.74) / throttle_factor(h100, Precision::fp8, 0.74),
      0.02);
  // The layers' GEMMs at fp8's twice-as-high peak, at its lower clock: 0.5 x 0.900 / 0.775 =
  // 0.58 of the bf16 time (0.61 with the launch gap).
  EXPECT_LT(seconds(fc1, Precision::fp8), 0.62 * seconds(fc1, Precision::bf16));
  EXPECT_GT(seconds(fc1, Precision::fp8), 0.58 * seconds(fc1, Precision::bf16));
}

// The power model's clock (power_clock), worked by hand. R_s = 1 FLOP/s, sustained share 0.5
// (1 / s = 2, the unthrottled clock); c is the clock over the sustained one.
TEST(PowerModel, ContinuousMatmulsAtTheSustainedRateKeepTheSustainedClock) {
  // 1 s of matmuls doing 1 FLOP: c^2 x 1 / (1 / c) = c^3 = 1.
  EXPECT_EQ(power_clock({{1.0, 1.0, 0, 0, 1}}, 0.5, 1.0), 1.0);
  // Memory-bound kernels count at the cap's power: 1 s more of them changes nothing
  // (c^2 / T + 1 / T = 1 with T = 1 / c + 1: c^3 = 1).
  EXPECT_EQ(power_clock({{1.0, 1.0, 1.0, 0, 1}}, 0.5, 1.0), 1.0);
}

TEST(PowerModel, MatmulsBelowTheSustainedRateRunAtAFasterClock) {
  // Matmuls at 0.6 of the measured rate (small shapes): 0.6 c^3 = 1, c = (1 / 0.6)^(1/3).
  EXPECT_NEAR(power_clock({{1.0, 0.6, 0, 0, 1}}, 0.5, 1.0), std::cbrt(1 / 0.6), 1e-12);
  // The same with as long again of memory-bound kernels: 0.6 c^2 + 1 = 1 / c + 1, the same c.
  EXPECT_NEAR(power_clock({{1.0, 0.6, 1.0, 0, 1}}, 0.5, 1.0), std::cbrt(1 / 0.6), 1e-12);
  // Split over two segments, one run twice: the counts weigh them (0.3 + 2 x 0.15 FLOPs over
  // 0.5 + 2 x 0.25 s of matmuls: the same work).
  EXPECT_NEAR(power_clock({{0.5, 0.3, 0, 0, 1}, {0.25, 0.15, 0, 0, 2}}, 0.5, 1.0),
              std::cbrt(1 / 0.6), 1e-12);
}

TEST(PowerModel, ADeviceWaitingOnItsHostRunsUnthrottled) {
  // 1 s of matmuls at the sustained rate inside 2 s of the host's issue time: T = 2 for any
  // c >= 1/2, so c^2 / 2 = 1, c = sqrt(2), above the unthrottled clock 1 / s = 1.25: capped.
  EXPECT_EQ(power_clock({{1.0, 1.0, 0, 2.0, 1}}, 0.8, 1.0), 1.25);
  // 1.2 s of host time: T = max(1 / c, 1.2); at c = 1.25, T = 1.2 and c^2 / 1.2 = 1.30 > 1,
  // so the root is below: c^2 / 1.2 = 1, c = sqrt(1.2) = 1.0954 (1 / c = 0.913 < 1.2).
  EXPECT_NEAR(power_clock({{1.0, 1.0, 0, 1.2, 1}}, 0.8, 1.0), std::sqrt(1.2), 1e-12);
  // Nothing capped: clock 1 whatever the segments.
  EXPECT_EQ(power_clock({{1.0, 0.1, 0, 5.0, 1}}, 1.0, 1.0), 1.0);
}

TEST(DatasheetCostModel, AttentionIsThrottledByTheSameFactor) {
  // 1 TFLOP of forward attention on a T4: 1e12 / (65e12 x 0.80 x 0.498960) = 38.541667 ms
  // (= 1e12 / (24e12 x 0.80 / 0.74)); 1 MB of traffic is far below that. + 10 us.
  const DatasheetCostModel cost(shipped());
  const Op op = attention_forward(1e12, 1e6);
  const double t = seconds(cost.duration(op, gpu("t4"), Precision::fp16));
  std::printf("T4 fp16 attention, 1 TFLOP: expected 38.551667 ms, actual %.6f ms\n", t * 1e3);
  EXPECT_NEAR(t, 38.551667e-3, 1e-9);
  const double t0 = seconds(cost.duration(op, unthrottled("t4"), Precision::fp16));
  EXPECT_NEAR((t - 10e-6) / (t0 - 10e-6), 1 / 0.498960, 1e-5);
}

TEST(DatasheetCostModel, MemoryBoundKernelsKeepTheirBandwidthOnAThrottledBoard) {
  // 1 GB on a T4: 1e9 / (320e9 x 0.95) = 3.289474 ms + 10 us, with or without `sustained:`.
  const DatasheetCostModel cost(shipped());
  const Op op = memory(1e9);
  const Time t = cost.duration(op, gpu("t4"), Precision::fp16);
  EXPECT_NEAR(seconds(t), 3.299474e-3, 1e-9);
  EXPECT_EQ(t, cost.duration(op, unthrottled("t4"), Precision::fp16));
}

TEST(DatasheetCostModel, L4ThrottlesEachTensorPrecisionByItsOwnMeasurement) {
  // L4 (72 W), torch.mm 10240^3 (torch-performance-test-data issue 120):
  //   fp16 52.47 / (121 x 0.74) = 0.585995; bf16 56.90 / 89.54 = 0.635470;
  //   fp32 training runs on TF32: 26.17 / (60 x 0.74) = 0.589414.
  const config::GpuProfile& l4 = gpu("l4");
  EXPECT_NEAR(throttle_factor(l4, Precision::fp16, 0.74), 0.585995, 1e-6);
  EXPECT_NEAR(throttle_factor(l4, Precision::bf16, 0.74), 0.635470, 1e-6);
  EXPECT_NEAR(throttle_factor(l4, Precision::fp32, 0.74), 0.589414, 1e-6);
  // fp8 has no sustained figure: not throttled.
  EXPECT_EQ(throttle_factor(l4, Precision::fp8, 0.74), 1.0);
  // 4096^3 fp16 on 58 SMs: tiles 1024; waves ceil(1024 / 58) = 18; wave eff 1024 / 1044 =
  // 0.980843; k eff 0.941176; shape eff 0.923146; rate 52.47e12 x 0.923146 = 48.4375e12;
  // compute 2 x 4096^3 / 48.4375e12 = 2.837450 ms (memory 100.7 MB / 285 GB/s = 0.35 ms);
  // + 10 us = 2.847450 ms.
  const DatasheetCostModel cost(shipped());
  const double t =
      seconds(cost.duration(gemm(4096, 4096, 4096, Precision::fp16), l4, Precision::fp16));
  std::printf("L4 fp16 4096^3 GEMM: expected 2.847450 ms, actual %.6f ms\n", t * 1e3);
  EXPECT_NEAR(t, 2.847450e-3, 1e-9);
}

TEST(DatasheetCostModel, V100PcieSustainsMoreThanGemmMaxSoIsNotThrottled) {
  // cuBLAS fp16 8192^3 at ~101 TFLOPS (NVIDIA forum 79781) > 112 x 0.74 = 82.88: factor 1,
  // exactly, so its times are those of the profile without `sustained:`.
  const config::GpuProfile& v100 = gpu("v100-pcie-32gb");
  EXPECT_EQ(v100.sustained_flops.at("fp16"), 101e12);
  EXPECT_EQ(throttle_factor(v100, Precision::fp16, 0.74), 1.0);
  const DatasheetCostModel cost(shipped());
  const Op op = gemm(4096, 4096, 4096, Precision::fp16);
  EXPECT_EQ(cost.duration(op, v100, Precision::fp16),
            cost.duration(op, unthrottled("v100-pcie-32gb"), Precision::fp16));
}

TEST(DatasheetCostModel, Rtx3090Fp16GemmRunsAtTheFp32AccumulateRate) {
  // GeForce tensor cores run FP16 with FP32 accumulate (what training uses) at half the
  // FP16-accumulate rate: 71 TFLOPS dense, not 142 (GA102 whitepaper, App. A). 4096^3 fp16 on
  // 82 SMs: tiles 1024; waves ceil(1024 / 82) = 13; wave eff 1024 / 1066 = 0.960600; k eff
  // 0.941176; shape eff 0.904094; rate 71e12 x 0.74 x 0.904094 = 47.5011e12 FLOP/s;
  // compute 2 x 4096^3 / 47.5011e12 = 2.893383 ms (memory 100.7 MB / 889 GB/s = 0.11 ms);
  // + 10 us = 2.903383 ms.
  const DatasheetCostModel cost(shipped());
  const config::GpuProfile& g = gpu("rtx-3090");
  EXPECT_EQ(g.peak_flops.at("fp16"), 71e12);
  EXPECT_EQ(g.peak_flops.at("bf16"), 71e12);
  const Op op = gemm(4096, 4096, 4096, Precision::fp16);
  const double t = seconds(cost.duration(op, unthrottled("rtx-3090"), Precision::fp16));
  std::printf("RTX 3090 fp16 4096^3 GEMM: expected 2.903383 ms, actual %.6f ms\n", t * 1e3);
  EXPECT_NEAR(t, 2.903383e-3, 1e-9);
}

TEST(DatasheetCostModel, Rtx4090TensorPeaksAreTheFp32AccumulateRates) {
  // Ada whitepaper: RTX 4090 FP16/BF16 tensor 165.2 TFLOPS dense with FP32 accumulate (330.3
  // with FP16 accumulate).
  const config::GpuProfile& g = gpu("rtx-4090");
  EXPECT_EQ(g.peak_flops.at("fp16"), 165.2e12);
  EXPECT_EQ(g.peak_flops.at("bf16"), 165.2e12);
}

// ---- The `sustained:` field of a GPU profile ---------------------------------------------

std::string cluster_with_gpu(const std::string& sustained) {
  return "name: tiny\n"
         "gpu_types:\n"
         "  - name: capped\n"
         "    sms: 40\n"
         "    memory: 16GiB\n"
         "    memory_bandwidth: 320GB/s\n"
         "    peak: {fp32: 8.1TFLOPS, fp16: 65TFLOPS}\n" +
         sustained +
         "node_types:\n"
         "  - name: n\n"
         "    gpu: capped\n"
         "    gpus: 2\n"
         "    intra: {kind: nvswitch, link_class: nvlink3, bandwidth: 300GB/s}\n"
         "groups:\n"
         "  - {node_type: n, count: 1}\n";
}

std::string load_error(const std::string& text) {
  try {
    config::load_cluster_text(text, "capped.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GpuProfileSustained, ParsesPerPrecisionBesideThePeak) {
  const config::ClusterConfig c =
      config::load_cluster_text(cluster_with_gpu("    sustained: {fp16: 24TFLOPS}\n"), "c.yaml");
  const config::GpuProfile& g = c.gpu_types.at("capped");
  EXPECT_EQ(g.sustained_flops.size(), 1u);
  EXPECT_EQ(g.sustained_flops.at("fp16"), 24e12);
  // Equal to the peak is allowed (a board that holds its boost clock).
  EXPECT_EQ(load_error(cluster_with_gpu("    sustained: {fp16: 65TFLOPS}\n")), "(no error)");
}

TEST(GpuProfileSustained, AboveThePeakIsAClearError) {
  EXPECT_EQ(load_error(cluster_with_gpu("    sustained: {fp16: 70TFLOPS}\n")),
            "capped.yaml:8: gpu_types[0].sustained.fp16: 70TFLOPS exceeds peak.fp16 (65TFLOPS); "
            "a board cannot sustain more than its peak");
}

TEST(GpuProfileSustained, APrecisionWithoutAPeakIsAnError) {
  EXPECT_EQ(load_error(cluster_with_gpu("    sustained: {bf16: 24TFLOPS}\n")),
            "capped.yaml:8: gpu_types[0].sustained.bf16: no peak.bf16 to sustain (give the peak "
            "first)");
}

TEST(GpuProfileSustained, UnknownPrecisionAndBadUnitAreErrors) {
  EXPECT_EQ(load_error(cluster_with_gpu("    sustained: {fp_16: 24TFLOPS}\n")),
            "capped.yaml:8: gpu_types[0].sustained.fp_16: unknown key (did you mean \"fp16\"?)");
  EXPECT_NE(load_error(cluster_with_gpu("    sustained: {fp16: 24TB}\n")).find("sustained.fp16"),
            std::string::npos);
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// architectures.NAME.streaming_memory: streaming passes (the optimizer step, a gradient
// accumulation, the loss) on that architecture take their own share of its bandwidth; a
// layer's elementwise kernels keep `memory`. T4: 1 GB at 0.9 of 320 GB/s is 3.472 ms, at 0.3
// 10.417 ms, each plus the 10 us kernel overhead.
TEST(DatasheetCostModel, StreamingPassesTakeTheirArchitecturesOwnShare) {
  DatasheetEfficiency e = shipped();
  e.memory_by_architecture["turing"] = 0.3;
  e.streaming_memory_by_architecture["turing"] = 0.9;
  const DatasheetCostModel cost(e);
  const config::GpuProfile& t4 = gpu("t4");
  Op adam = memory(1e9);
  adam.name = "optimizer.adam";
  adam.streaming = true;
  Op acc = memory(1e9);
  acc.name = "fc1.grad_accumulate";
  acc.streaming = true;
  Op gelu = memory(1e9);
  gelu.name = "gelu";
  EXPECT_NEAR(seconds(cost.duration(adam, t4, Precision::fp16)), 1e9 / (320e9 * 0.9) + 10e-6,
              1e-12);
  EXPECT_NEAR(seconds(cost.duration(acc, t4, Precision::fp16)), 1e9 / (320e9 * 0.9) + 10e-6, 1e-12);
  EXPECT_NEAR(seconds(cost.duration(gelu, t4, Precision::fp16)), 1e9 / (320e9 * 0.3) + 10e-6,
              1e-12);
  // Another architecture keeps the file's `memory` for both.
  const config::GpuProfile& a100 = gpu("a100-sxm4-80gb");
  EXPECT_EQ(cost.duration(adam, a100, Precision::fp16), cost.duration(gelu, a100, Precision::fp16));
  // The shipped file gives the T4 both figures.
  const DatasheetEfficiency built = load_datasheet_efficiency();
  EXPECT_GT(built.streaming_memory_for("turing"), built.memory_for("turing"));
  EXPECT_EQ(built.streaming_memory_for("ampere"), built.memory);
}

}  // namespace
}  // namespace hetsim::workload
