// PyTorch profiler traces as calibration measurements (calibrate/trace_import.h) and compared with
// the replay (sim/execute/trace_compare.h): a real CPU trace of tiny-gpt (tests/data/traces/), a
// GPU trace's layout (kernels launched by operators, an NCCL collective) and malformed files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "calibrate/compare.h"
#include "calibrate/cost_models.h"
#include "calibrate/trace_import.h"
#include "sim/core/error.h"
#include "sim/execute/trace_compare.h"
#include "sim/study/run.h"

namespace hetsim::calibrate {
namespace {

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/";
const std::string kTrace = kData + "traces/tiny-gpt-cpu.json.gz";

const TraceImport& cpu_import() {
  static const TraceImport r = [] {
    ImportOptions o;
    o.device_type = "cpu";
    return import_trace(read_kineto_trace(kTrace), o);
  }();
  return r;
}

size_t runs(const TraceImport& r, const std::string& table) {
  return static_cast<size_t>(std::count_if(r.ops.begin(), r.ops.end(),
                                           [&](const TraceOp& op) { return op.table == table; }));
}

const GemmPoint* gemm(const Database& db, int64_t m, int64_t n, int64_t k) {
  for (const GemmPoint& g : db.gemm.at("fp32"))
    if (g.m == m && g.n == n && g.k == k && g.batch == 1) return &g;
  return nullptr;
}

// tiny-gpt: 4 layers of hidden 256 (FFN 1024), vocabulary 2048, 128 positions, tied embeddings;
// micro-batch 2 x 128 = 256 tokens.
constexpr double kParams = 2048 * 256 + 128 * 256 + 4 * (12 * 256 * 256 + 13 * 256) + 2 * 256;

TEST(TraceImport, RealCpuTraceTimeIsConservedBetweenMappedAndUnmapped) {
  const TraceImport& r = cpu_import();
  ASSERT_EQ(r.iteration_s.size(), 3u);
  ASSERT_EQ(r.steps.size(), 3u);
  double iterations = 0;
  for (double s : r.iteration_s) iterations += s;
  // Every microsecond of the recorded iterations is an operator's, mapped or not, or the host's
  // between operators (listed as unmapped): one thread, nothing counted twice.
  EXPECT_NEAR(r.mapped_s + r.unmapped_s, iterations, 1e-9);
  EXPECT_GT(r.mapped_s / iterations, 0.85);
  for (const StepTimes& s : r.steps) {
    EXPECT_NEAR(s.compute + s.communication + s.idle, s.iteration, 1e-12);
    EXPECT_EQ(s.communication, 0);
    EXPECT_GT(s.idle, 0);
  }
}

TEST(TraceImport, RealCpuTraceGemmsHaveTheModelsShapes) {
  const TraceImport& r = cpu_import();
  // Per iteration 17 forward GEMMs (4 per layer, the logits) and two per GEMM backward.
  EXPECT_EQ(runs(r, "gemm/fp32"), 3u * 51);
  const GemmPoint* qkv = gemm(r.db, 256, 768, 256);
  const GemmPoint* fc1 = gemm(r.db, 256, 1024, 256);
  const GemmPoint* logits = gemm(r.db, 256, 2048, 256);
  const GemmPoint* logits_wgrad = gemm(r.db, 2048, 256, 256);  // dY^T x, as PyTorch calls it
  ASSERT_TRUE(qkv && fc1 && logits && logits_wgrad);
  EXPECT_EQ(qkv->t.repetitions, 3 * 4);
  EXPECT_EQ(logits->t.repetitions, 3);
  EXPECT_GT(fc1->t.median_s, 0);
  EXPECT_LE(fc1->t.p10_s, fc1->t.median_s);
  EXPECT_LE(fc1->t.median_s, fc1->t.p90_s);
}

TEST(TraceImport, RealCpuTraceAttentionOptimizerAndDropoutAreEachOneKernel) {
  const TraceImport& r = cpu_import();
  ASSERT_EQ(r.db.attention.at("fp32").size(), 2u);
  for (const AttentionPoint& a : r.db.attention.at("fp32")) {
    EXPECT_EQ(a.batch, 2);
    EXPECT_EQ(a.heads, 4);
    EXPECT_EQ(a.seq, 128);
    EXPECT_EQ(a.head_dim, 64);
    EXPECT_TRUE(a.causal);
    EXPECT_FALSE(a.fused);
    EXPECT_EQ(a.t.repetitions, 3 * 4);  // one forward and one backward a layer
  }
  // The optimizer: one adam kernel over every parameter, 28 bytes each (ops.cpp).
  ASSERT_EQ(r.db.memory.at("adam").size(), 1u);
  EXPECT_EQ(r.db.memory.at("adam")[0].bytes, 28 * kParams);
  // Dropout: the embedding's and two a layer, forward and (by sequence number) backward.
  EXPECT_EQ(runs(r, "memory/dropout"), 3u * 18);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("fp32 assumed"), std::string::npos);
}

TEST(TraceImport, RealCpuTraceAgainstTheReplayIsWithinExecutesBounds) {
  const TraceImport& measured = cpu_import();
  study::RunSpec spec;
  spec.model = kData + "execute/tiny-gpt.yaml";
  spec.cluster = "cpu-host";
  spec.plan = kData + "traces/tiny-gpt-cpu-plan.yaml";
  const study::RunInputs inputs(spec);
  const CostModels own("", measured.db);
  const workload::TrainingJob job =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, own.get());
  workload::ReplayOptions ro;
  ro.exact = true;
  const workload::ReplayResult predicted = workload::replay(job, nullptr, ro);
  const execute::TraceComparison c = execute::compare_trace(job, predicted, measured, 0);
  // With the trace's own kernel times, what is left is hetsim's op list and schedule: held to
  // execute's bound on a replay with measured compute (10%).
  EXPECT_LT(std::abs(c.error), 0.10) << execute::to_text(c);
  EXPECT_NEAR(c.measured_median_s, 0.0743, 0.001);
  // Every GEMM of the iteration is one of the trace's, shape for shape (a GEMM and its
  // transpose alike).
  for (const auto& row : c.kernels) {
    if (row.what.rfind("gemm/", 0) != 0) continue;
    EXPECT_NEAR(row.predicted_calls, row.measured_calls, 1e-9) << row.what;
  }
  // A point's time is its runs' mean: where hetsim runs the kernels the trace ran, shape for
  // shape, the replay gives back the trace's time to rounding (GEMMs: the transposes of the
  // weight gradients, interpolated from their counterparts, within 2%).
  for (const auto& t : c.tables) {
    if (t.what == "attention/fp32" || t.what == "memory/adam" || t.what == "memory/dropout" ||
        t.what == "memory/layernorm" || t.what == "memory/gelu") {
      EXPECT_NEAR(t.predicted_s, t.measured_s, 1e-6 * t.measured_s) << t.what;
    }
    if (t.what == "gemm/fp32") {
      EXPECT_LT(std::abs(t.predicted_s / t.measured_s - 1), 0.02);
    }
  }
  // The prediction reads the trace: the datasheet model alone gives another iteration.
  const CostModels datasheet("", "");
  const workload::TrainingJob other =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, datasheet.get());
  EXPECT_NE(workload::replay(other, nullptr, ro).iteration, predicted.iteration);
}

// The point of a calibration: another plan. Micro-batch 4 and two micro-batches an iteration,
// predicted with the kernels of the micro-batch-2 trace, against its own trace: within execute's
// bound for a calibrated prediction (15%).
TEST(TraceImport, AnotherPlanPredictedFromTheFirstTracesKernels) {
  ImportOptions o;
  o.device_type = "cpu";
  const TraceImport measured =
      import_trace(read_kineto_trace(kData + "traces/tiny-gpt-cpu-mb4x2.json.gz"), o);
  study::RunSpec spec;
  spec.model = kData + "execute/tiny-gpt.yaml";
  spec.cluster = "cpu-host";
  spec.plan = kData + "traces/tiny-gpt-cpu-mb4x2-plan.yaml";
  const study::RunInputs inputs(spec);
  const CostModels first("", cpu_import().db);
  const workload::TrainingJob job =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, first.get());
  workload::ReplayOptions ro;
  ro.exact = true;
  const execute::TraceComparison c =
      execute::compare_trace(job, workload::replay(job, nullptr, ro), measured, 0);
  EXPECT_LT(std::abs(c.error), 0.15) << execute::to_text(c);
  // Two micro-batches: twice the GEMM calls of the first trace, every one of them matched.
  const auto gemms = std::find_if(c.tables.begin(), c.tables.end(),
                                  [](const auto& t) { return t.what == "gemm/fp32"; });
  ASSERT_NE(gemms, c.tables.end());
  EXPECT_NEAR(gemms->measured_calls, 102, 1e-9);
  EXPECT_NEAR(gemms->predicted_calls, 102, 1e-9);
}

// `calibrate diff`: a database against itself is exact point for point (every key is its own
// measurement); the second trace's GEMMs against the first's model are near (interpolated).
TEST(TraceImport, DatabasesComparePointForPoint) {
  const config::GpuProfile& cpu = config::builtin_gpus().at("cpu");
  const Database& a = cpu_import().db;
  for (const CheckRow& r : compare_databases(a, a, cpu)) {
    ASSERT_FALSE(r.points.empty()) << r.table;
    EXPECT_LT(r.max_error, 1e-12) << r.table;
  }
  ImportOptions o;
  o.device_type = "cpu";
  const Database b =
      import_trace(read_kineto_trace(kData + "traces/tiny-gpt-cpu-mb4x2.json.gz"), o).db;
  const std::vector<CheckRow> rows = compare_databases(a, b, cpu);
  const auto gemm = std::find_if(rows.begin(), rows.end(),
                                 [](const CheckRow& r) { return r.table == "gemm/fp32"; });
  ASSERT_NE(gemm, rows.end());
  EXPECT_EQ(gemm->points.size(), b.gemm.at("fp32").size());
  EXPECT_LT(gemm->mean_error, 0.15);
}

// A GPU trace's layout, as Kineto writes it: operators on the host, the runtime calls they make,
// kernels on the GPU joined to their launch by "correlation"; record_param_comms around NCCL.
const char* kGpuTrace = R"json({"schemaVersion": 1, "traceEvents": [
 {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1,
  "ts": 1000, "dur": 500},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1010, "dur": 30,
  "args": {"Input Dims": [[64, 128], [128, 32]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1020,
  "dur": 5, "args": {"correlation": 7}},
 {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 7,
  "ts": 1100, "dur": 10, "args": {"correlation": 7}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mystery", "pid": 1, "tid": 1, "ts": 1050, "dur": 20,
  "args": {"Input Dims": [[8]]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1055,
  "dur": 5, "args": {"correlation": 8}},
 {"ph": "X", "cat": "kernel", "name": "mystery_kernel", "pid": 0, "tid": 7, "ts": 1110,
  "dur": 4, "args": {"correlation": 8}},
 {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1080,
  "dur": 20, "args": {"Collective name": "allreduce", "In msg nelems": 1048576,
  "Out msg nelems": 1048576, "Group size": 16, "dtype": "BFloat16"}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1085,
  "dur": 5, "args": {"correlation": 9}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
  "tid": 20, "ts": 1105, "dur": 100, "args": {"correlation": 9}},
 {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#4", "pid": 0, "tid": 7,
  "ts": 1100, "dur": 105},
 {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 1200, "dur": 30,
  "args": {"Input Dims": [[1024], [1024]], "Input type": ["float", "float"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 1205,
  "dur": 5, "args": {"correlation": 10}},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
  "tid": 7, "ts": 1210, "dur": 50, "args": {"correlation": 10}},
 {"ph": "X", "cat": "python_function", "name": "nn.Module: CausalSelfAttention_0", "pid": 1,
  "tid": 1, "ts": 1300, "dur": 50},
 {"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "pid": 1, "tid": 1, "ts": 1310, "dur": 20,
  "args": {"Input Dims": [[8, 16, 64], [8, 64, 16]], "Input type": ["c10::BFloat16",
  "c10::BFloat16"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1315,
  "dur": 5, "args": {"correlation": 11}},
 {"ph": "X", "cat": "kernel", "name": "ampere_bf16_gemm", "pid": 0, "tid": 7, "ts": 1400,
  "dur": 6, "args": {"correlation": 11}}
]})json";

TEST(TraceImport, GpuKernelsAreTimedAndFiledByTheOperatorThatLaunchedThem) {
  ImportOptions o;
  o.device_type = "h100-sxm5-80gb";
  const TraceImport r = import_trace(parse_kineto_trace(kGpuTrace, "gpu.json"), o);
  ASSERT_EQ(r.db.gemm.at("bf16").size(), 2u);
  const GemmPoint& g = r.db.gemm.at("bf16")[0];
  EXPECT_EQ(g.m, 64);
  EXPECT_EQ(g.n, 32);
  EXPECT_EQ(g.k, 128);
  EXPECT_DOUBLE_EQ(g.t.median_s, 10e-6);  // the kernel's time, not the operator's 30 us
  ASSERT_EQ(r.db.collective.at("allreduce").size(), 1u);
  const SizePoint& c = r.db.collective.at("allreduce")[0];
  EXPECT_EQ(c.bytes, 2.0 * 1048576);
  EXPECT_EQ(c.ranks, 16);
  EXPECT_EQ(c.nodes, 2);  // 16 ranks over 8 GPUs a node
  EXPECT_DOUBLE_EQ(c.t.median_s, 100e-6);
  // The host-to-device copy is the bus's time, listed by name, not a copy kernel's.
  ASSERT_EQ(r.unmapped.size(), 2u);
  EXPECT_EQ(r.unmapped[0].name, "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(r.unmapped[1].name, "mystery_kernel");
  EXPECT_DOUBLE_EQ(r.unmapped[1].seconds, 4e-6);
  EXPECT_EQ(r.db.memory.count("copy"), 0u);
  // A Python frame named after an attention module is not an attention range: its bmm is a GEMM.
  EXPECT_EQ(r.db.attention.count("bf16"), 0u);
  ASSERT_EQ(r.db.gemm.at("bf16").size(), 2u);
  EXPECT_EQ(r.db.gemm.at("bf16")[1].batch, 8);
  // One iteration, though Kineto draws its range on the GPU's timeline too. Kernels 1100-1110,
  // 1110-1114 and 1400-1406 compute; NCCL 1105-1205 exposed for 1114-1205.
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NEAR(r.steps[0].compute, 20e-6, 1e-12);
  EXPECT_NEAR(r.steps[0].communication, 91e-6, 1e-12);
  EXPECT_NEAR(r.steps[0].idle, 500e-6 - 111e-6, 1e-12);
}

std::string import_error(const std::string& text) {
  ImportOptions o;
  o.device_type = "cpu";
  try {
    import_trace(parse_kineto_trace(text, "t.json"), o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceImport, MalformedTracesAreRefusedNamingTheFileAndField) {
  EXPECT_NE(import_error("[{\"name\": \"aten::mm\", \"ph\": \"X\"}]").find("legacy profiler"),
            std::string::npos);
  EXPECT_NE(import_error("{\"events\": []}").find("t.json: no \"traceEvents\""), std::string::npos);
  EXPECT_NE(import_error("{\"traceEvents\": [").find("t.json: not JSON"), std::string::npos);
  const std::string bad =
      import_error(R"({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": "long"}]})");
  EXPECT_NE(bad.find("t.json: traceEvents[0] (\"aten::mm\"): field \"dur\": expected a number"),
            std::string::npos)
      << bad;
  const std::string dims = import_error(
      R"({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2,
          "args": {"Input Dims": [[2, -3]]}}]})");
  EXPECT_NE(dims.find("\"Input Dims\": expected sizes of 0 or more"), std::string::npos) << dims;
  // Shapes not recorded: nothing maps, and the error says what to do.
  EXPECT_NE(import_error(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm",
            "ts": 1, "dur": 2}]})")
                .find("record_shapes=True"),
            std::string::npos);
  EXPECT_THROW(read_kineto_trace(kData + "traces/missing.json"), InputError);
}

// What a trace can hold that a careless reading gets wrong.
TEST(TraceImport, EdgeCasesAreFiledOrRefusedAsTheyShouldBe) {
  ImportOptions o;
  o.device_type = "cpu";
  auto import = [&](const std::string& events) {
    return import_trace(
        parse_kineto_trace(R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name":
          "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
          {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1, "tid": 1, "ts": 10,
          "dur": 50, "args": {"Input Dims": [[1024]], "Input type": ["float"]}})" +
                               events + "]}",
                           "t.json"),
        o);
  };
  // An operator timed at 0 us every run (integer microseconds): left out, with a note, since a
  // measurement of no time cannot be read back.
  const TraceImport zero = import(R"(,{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
      "tid": 1, "ts": 100, "dur": 0, "args": {"Input Dims": [[2, 2], [2, 2]]}})");
  EXPECT_EQ(zero.db.gemm.count("fp32"), 0u);
  EXPECT_NE(zero.notes.back().find("1 shape(s) ran in 0 us"), std::string::npos);
  // A dropout with nothing inside it did nothing (p = 0, or evaluation).
  const TraceImport idle = import(R"(,{"ph": "X", "cat": "cpu_op", "name": "aten::dropout",
      "pid": 1, "tid": 1, "ts": 100, "dur": 1, "args": {"Input Dims": [[1024], []]}})");
  EXPECT_EQ(idle.db.memory.count("dropout"), 0u);
  // A collective of 64-bit integers: 8 bytes an element.
  const TraceImport longs = import(R"(,{"ph": "X", "cat": "cpu_op", "name":
      "record_param_comms", "pid": 1, "tid": 1, "ts": 100, "dur": 30, "args": {"Collective name":
      "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 2, "dtype":
      "Long"}})");
  EXPECT_EQ(longs.db.collective.at("allreduce")[0].bytes, 8000);
  // Kernels with no runtime event to join them to their operators: said, not guessed.
  try {
    import(R"(,{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100,
        "dur": 5, "args": {"correlation": 3}})");
    FAIL() << "kernels without their launches were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("none is joined to the runtime call"), std::string::npos)
        << e.what();
  }
  o.gpus_per_node = 0;
  EXPECT_THROW(import(""), InputError);
}

TEST(TraceImport, MeasurementKeyOfAnOpIsTheImportersKey) {
  workload::Op op;
  op.name = "fc1";
  op.kind = workload::OpKind::gemm;
  op.m = 256, op.n = 1024, op.k = 256;
  EXPECT_EQ(measurement_key(op, workload::Precision::fp32),
            std::make_pair(std::string("gemm/fp32"), std::string("m=256 n=1024 k=256 batch=1")));
  op.name = "norm1.bwd";
  op.kind = workload::OpKind::memory;
  op.bytes = 786432;
  EXPECT_EQ(measurement_key(op, workload::Precision::bf16),
            std::make_pair(std::string("memory/layernorm"), std::string("bytes=786432")));
}

}  // namespace
}  // namespace hetsim::calibrate
