// The CUDA calibration backend (calibrate/cuda/) as far as this machine allows: its plan (a dry
// run needs no GPU), its input errors, the shipped model-shapes file against the models, and a
// real measurement, which skips with the reason when there is no GPU or the backend was not built.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <cmath>

#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "sim/config/cluster_config.h"
#include "sim/workload/cost/cost_model.h"
#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kShapes = std::string(HETSIM_SOURCE_DIR) + "/calibrate/model_shapes.csv";

std::string cuda_program() {
#ifdef HETSIM_CUDA_PROGRAM
  return HETSIM_CUDA_PROGRAM;
#else
  return "";
#endif
}

#define REQUIRE_CUDA_PROGRAM() \
  if (cuda_program().empty())  \
  GTEST_SKIP() << "the CUDA backend was not built (no CUDA toolkit, or -DHETSIM_CUDA=OFF)"

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ModelShapes, TheShippedFileIsWhatTheModelsRun) {
  // calibrate/model_shapes.csv is generated: regenerate it with
  //   build/hetsim calibrate shapes --out calibrate/model_shapes.csv
  const std::string out = ::testing::TempDir() + "shapes.csv";
  const CommandResult r = run_hetsim({"calibrate", "shapes", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(out), read(kShapes))
      << "calibrate/model_shapes.csv is stale: build/hetsim calibrate shapes --out "
         "calibrate/model_shapes.csv";
}

TEST(ModelShapes, OneModelGivesItsLayerGemmsAndAttention) {
  // GPT-3 125M (h 768, FFN 3072, 12 heads of 64, sequence 2048, vocabulary 50257), TP 1, micro-
  // batch 1: 2048 tokens. QKV forward is (2048 x 768) . (768 x 2304); its weight gradient is
  // (768 x 2048) . (2048 x 2304); the logits (2048 x 768) . (768 x 50257).
  const CommandResult r = run_hetsim(
      {"calibrate", "shapes", "--models", "gpt3-125m", "--tp", "1", "--micro-batch", "1"},
      Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\ngemm,2048,2304,768,1,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ngemm,768,2304,2048,1,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ngemm,2048,50257,768,1,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nattention,0,0,0,1,12,2048,64,1\n"), std::string::npos) << r.output;
  const CommandResult bad = run_hetsim({"calibrate", "shapes", "--tp", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--tp: expected positive integers separated by commas, got \"0\""),
            std::string::npos)
      << bad.output;
}

TEST(CudaBackend, DryRunPlansEveryKindWithinTheBudget) {
  REQUIRE_CUDA_PROGRAM();
  for (const bool quick : {false, true}) {
    std::vector<std::string> args = {"--dry-run", "--shapes", kShapes};
    if (quick) args.push_back("--quick");
    const CommandResult r = run_program(cuda_program(), args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Every kind, in the order they run: the GEMMs (the most valuable data) before attention
    // (cuDNN, the likeliest to fail) and the collectives.
    size_t previous = 0;
    for (const char* kind : {"copy", "memory", "gemm", "attention", "collective"}) {
      const size_t at = r.output.find(std::string("\n  ") + kind);
      ASSERT_NE(at, std::string::npos) << kind << r.output;
      EXPECT_GT(at, previous) << kind << " out of order\n" << r.output;
      previous = at;
    }
    // "  total      ~198.1 s against a budget of 240 s": the whole calibration fits the budget
    // (under five minutes on one GPU). (No std::regex: GCC 12's sanitizer build warns in it.)
    const size_t total = r.output.find("  total ");
    ASSERT_NE(total, std::string::npos) << r.output;
    double planned = 0, budget = 0;
    ASSERT_EQ(std::sscanf(r.output.c_str() + total, " total ~%lf s against a budget of %lf s",
                          &planned, &budget),
              2)
        << r.output;
    EXPECT_GT(planned, 0);
    EXPECT_LT(planned, budget) << r.output;
    EXPECT_EQ(r.output.find("over:"), std::string::npos) << r.output;
  }
}

// A rehearsal of the GPU run without a GPU: the dry run writes the points a run on 8 x H200 would
// measure, as the CSV lines it would write; hetsim reads them with its CSV reader; the datasheet
// model (tile and wave quantisation included) stands in for the device's times; and
// `calibrate check` predicts every fifth point of each table from the others. This exercises the
// plan's irregular grids (models' shapes, log grids, caps) through the same reader and
// interpolation a real database takes.
TEST(CudaBackend, RehearsalThePlannedPointsReadAndInterpolate) {
  REQUIRE_CUDA_PROGRAM();
  const std::string plan = ::testing::TempDir() + "plan.csv";
  std::filesystem::remove(plan);
  const CommandResult r =
      run_program(cuda_program(), {"--dry-run", "--shapes", kShapes, "--out", plan});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // hetsim refuses it as measurements...
  const CommandResult imported =
      run_hetsim({"calibrate", "import", plan, "--out", ::testing::TempDir() + "plan.h5"});
  EXPECT_EQ(imported.exit_code, 2);
  EXPECT_NE(imported.output.find("a dry run's plan"), std::string::npos) << imported.output;
  // ...but its reader takes every line.
  calibrate::Database db = calibrate::read_csv(plan);
  ASSERT_EQ(db.device_type(), "h200-sxm-141gb");
  for (const char* dtype : {"bf16", "fp16", "fp8", "tf32", "fp32"})
    EXPECT_GT(db.gemm[dtype].size(), 100u) << dtype;
  EXPECT_GT(db.gemm["bf16"].size(), 2000u);  // the models' shapes
  ASSERT_TRUE(db.attention.count("bf16"));
  for (const auto& a : db.attention.at("bf16")) EXPECT_TRUE(a.fused);
  EXPECT_EQ(db.memory.size(), 10u);
  ASSERT_EQ(db.collective.size(), 6u);
  EXPECT_EQ(db.collective.at("allreduce").front().ranks, 8);
  EXPECT_EQ(db.collective.at("allreduce").front().nodes, 1);
  EXPECT_EQ(db.copy.size(), 2u);

  // The stand-in device is not hetsim's datasheet model: other efficiencies and reduction-length
  // curve, a 4 us launch floor, and a slow ripple in size, as a real GPU differs from the
  // datasheet. (Its tiles and waves stay those of the datasheet, 128 x 128 on 132 SMs: a device
  // whose steps fall elsewhere needs its own measurements around them.)
  const config::GpuProfile& h200 = config::builtin_gpus().at("h200-sxm-141gb");
  workload::DatasheetEfficiency other = workload::load_datasheet_efficiency();
  other.gemm_max = 0.66;
  other.k_half = 512;
  other.memory = 0.88;
  other.kernel_overhead = Time::us(4);
  const workload::DatasheetCostModel device(other);
  auto ripple = [](double x) { return 1 + 0.05 * std::sin(std::log2(x)); };
  auto precision = [](const std::string& dtype) {
    return dtype == "fp8"                       ? workload::Precision::fp8
           : dtype == "fp16"                    ? workload::Precision::fp16
           : dtype == "tf32" || dtype == "fp32" ? workload::Precision::fp32
                                                : workload::Precision::bf16;
  };
  for (auto& [dtype, points] : db.gemm) {
    const int element = dtype == "fp8" ? 1 : dtype == "tf32" || dtype == "fp32" ? 4 : 2;
    for (calibrate::GemmPoint& p : points) {
      workload::Op op;
      op.kind = workload::OpKind::gemm;
      op.m = p.m, op.n = p.n, op.k = p.k, op.batch = p.batch;
      op.flops = 2.0 * p.m * p.n * p.k * p.batch;
      op.bytes = element * (double(p.m) * p.k + double(p.k) * p.n + double(p.m) * p.n) * p.batch;
      const double t = device.duration(op, h200, precision(dtype)).seconds() * ripple(p.m) *
                       ripple(2.0 * p.n) * ripple(4.0 * p.k);
      p.t = calibrate::Timing{t, t, t, 5};
    }
  }
  for (auto& [kernel, points] : db.memory) {
    for (calibrate::SizePoint& p : points) {
      workload::Op op;
      op.kind = workload::OpKind::memory;
      op.name = kernel;
      op.bytes = p.bytes;
      const double t =
          device.duration(op, h200, workload::Precision::bf16).seconds() * ripple(p.bytes);
      p.t = calibrate::Timing{t, t, t, 5};
    }
  }
  for (calibrate::AttentionPoint& a : db.attention.at("bf16")) {
    // A fused kernel: 4 b h s^2 d FLOPs forward (half of them when causal), 2.5x that backward;
    // Q, K, V, O (and their gradients) moved once.
    workload::Op op;
    op.kind =
        a.backward ? workload::OpKind::attention_backward : workload::OpKind::attention_forward;
    const double forward = 4.0 * a.batch * a.heads * double(a.seq) * a.seq * a.head_dim;
    op.flops = (a.causal ? 0.5 : 1.0) * (a.backward ? 2.5 : 1.0) * forward;
    op.bytes = (a.backward ? 2 : 1) * 2.0 * 4 * a.batch * a.heads * a.seq * a.head_dim;
    // A launch of fewer thread blocks (one per 128 rows of a head) than the 132 multiprocessors
    // leaves the rest idle, as the H200's cuDNN kernels do (2 heads of 2048 tokens: 24 us, 16
    // heads of 512: 13 us).
    const double blocks = double(a.batch) * a.heads * std::ceil(a.seq / 128.0);
    const double launch = other.kernel_overhead.seconds();
    const double t = ((device.duration(op, h200, workload::Precision::bf16).seconds() - launch) *
                          std::max(1.0, 132 / blocks) +
                      launch) *
                     ripple(double(a.seq) * a.heads * a.batch);
    a.t = calibrate::Timing{t, t, t, 5};
  }
  for (const auto& row : calibrate::check_database(db, h200)) {
    if (row.table.rfind("gemm/", 0) == 0 || row.table.rfind("memory/", 0) == 0 ||
        row.table.rfind("attention/", 0) == 0) {
      std::printf("  rehearsal %-22s %5zu held out  mean %.3f%%  max %.3f%%\n", row.table.c_str(),
                  row.held_out, 100 * row.mean_error, 100 * row.max_error);
      // The target for GEMMs (and the memory kernels); attention's grid is sparser (a
      // cuDNN plan to build per point) and its smallest kernels sit on the device's floor.
      const bool attention = row.table.rfind("attention/", 0) == 0;
      EXPECT_LT(row.mean_error, attention ? 0.10 : 0.05) << row.table;
    }
  }
}

// run_gpu.sh's rerun after a crash inside cuDNN: --no-cudnn plans attention on the unfused path
// (no plan builds budgeted) and says so loudly.
TEST(CudaBackend, NoCudnnPlansAttentionUnfusedAndSaysSo) {
  REQUIRE_CUDA_PROGRAM();
  const std::string fused = ::testing::TempDir() + "plan-fused.csv";
  const std::string unfused = ::testing::TempDir() + "plan-unfused.csv";
  std::filesystem::remove(fused);
  std::filesystem::remove(unfused);
  const CommandResult with =
      run_program(cuda_program(), {"--dry-run", "--ops", "attention", "--out", fused});
  const CommandResult without = run_program(
      cuda_program(), {"--dry-run", "--ops", "attention", "--no-cudnn", "--out", unfused});
  ASSERT_EQ(with.exit_code, 0) << with.output;
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_NE(without.output.find("*** --no-cudnn: attention is measured UNFUSED only ***"),
            std::string::npos)
      << without.output;
  const std::string plan = read(unfused);
  EXPECT_NE(plan.find("\nattention,bf16,unfused,"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("\nattention,bf16,cudnn,"), std::string::npos) << plan;
  // Without plan builds to budget, the unfused plan is shorter.
  double fused_s = 0, unfused_s = 0;
  const size_t a = with.output.find("  total "), b = without.output.find("  total ");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  ASSERT_EQ(std::sscanf(with.output.c_str() + a, " total ~%lf", &fused_s), 1);
  ASSERT_EQ(std::sscanf(without.output.c_str() + b, " total ~%lf", &unfused_s), 1);
  EXPECT_LT(unfused_s, fused_s) << with.output << without.output;
}

TEST(CudaBackend, BadOptionsAndShapesFilesAreClearErrors) {
  REQUIRE_CUDA_PROGRAM();
  const std::string bad = ::testing::TempDir() + "bad-shapes.csv";
  std::ofstream(bad) << "kind,m,n,k,batch,heads,seq,head_dim,causal\ngemm,128,x,64,1,0,0,0,0\n";
  const std::string huge = ::testing::TempDir() + "huge-shapes.csv";
  std::ofstream(huge) << "kind,m,n,k,batch,heads,seq,head_dim,causal\r\n"
                      << "gemm,99999999999,1,1,1,0,0,0,0\r\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--dry-run", "--shapes", bad},
       bad + ":2: field 3: expected an integer from 0 to 16777215, got \"x\""},
      {{"--dry-run", "--shapes", "/no/such/file.csv"}, "--shapes /no/such/file.csv: cannot open"},
      {{"--dry-run", "--ops", "gemm,fft"}, "--ops: unknown kind \"fft\""},
      {{"--dry-run", "--budget-s", "soon"}, "--budget-s: not a positive number: soon"},
      {{"--device", "x", "--out", "a.csv"}, "--device: not a device index: x"},
      {{"--quick"}, "--out FILE.csv is required"},
      {{"--dry-run", "--shapes", huge},
       huge + ":2: field 2: expected an integer from 0 to 16777215"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_program(cuda_program(), c.args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.message << "\n" << r.output;
  }
}

TEST(CudaBackend, UnderMpiEachRankNeedsItsOwnGpu) {
  REQUIRE_CUDA_PROGRAM();
  // Two ranks on this machine: without two GPUs, every rank says so and the job stops (no hang).
  const CommandResult probe = run_program(cuda_program(), {"--print-device-type"});
  if (probe.exit_code == 0) GTEST_SKIP() << "a GPU is present: the no-GPU path is not reachable";
  const std::string csv = ::testing::TempDir() + "cuda-mpi.csv";
  const std::string cmd = "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                          shell_quote(cuda_program()) + " --ops collective --out " +
                          shell_quote(csv) + " 2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124)
      << r.output;
  if (r.output.find("built without MPI") != std::string::npos) return;  // also a clear answer
  EXPECT_NE(r.output.find("2 rank(s) on this node but 0 CUDA device(s)"), std::string::npos)
      << r.output;
}

TEST(CudaBackend, ThroughHetsimWithoutAGpuFailsClearlyAndSaysWhy) {
  const std::string db = ::testing::TempDir() + "through-hetsim.h5";
  const CommandResult r =
      run_hetsim({"calibrate", "--backend", "cuda", "--out", db, "--quick", "--ops", "gemm"});
  if (cuda_program().empty()) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("the CUDA backend was not built"), std::string::npos) << r.output;
    return;
  }
  const CommandResult probe = run_program(cuda_program(), {"--print-device-type"});
  if (probe.exit_code == 0) GTEST_SKIP() << "a GPU is present: the no-GPU path is not reachable";
  // The cause, not the runtime's "CUDA driver version is insufficient" that a GPU-less machine
  // gets; and no CSV named that was never written.
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no CUDA GPU found (cudaGetDeviceCount: "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("no CUDA device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the CUDA backend failed (exit status 1); it wrote no measurements"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find(".csv keeps"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(db + ".csv"));
  // The models' shapes were handed to it.
  std::ifstream shapes(db + ".shapes.csv");
  std::string header;
  std::getline(shapes, header);
  EXPECT_EQ(header, "kind,m,n,k,batch,heads,seq,head_dim,causal");
}

TEST(CudaBackend, ThroughHetsimAFailedRunNamesTheCsvItResumesWithItsRows) {
  if (cuda_program().empty()) GTEST_SKIP() << "the CUDA backend was not built";
  const CommandResult probe = run_program(cuda_program(), {"--print-device-type"});
  if (probe.exit_code == 0) GTEST_SKIP() << "a GPU is present: the no-GPU path is not reachable";
  // An earlier run's CSV (two measurements) beside the database: the failed rerun names it.
  const std::string db = ::testing::TempDir() + "resumed-through-hetsim.h5";
  std::ofstream(db + ".csv")
      << "# backend=cuda\n# device_name=NVIDIA H200\n"
      << "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,nodes,"
         "median_s,p10_s,p90_s,repetitions\n"
      << "gemm,bf16,,1024,1024,1024,1,0,0,0,0,0,0,0,0,1e-05,1e-05,1e-05,100\n"
      << "gemm,bf16,,2048,2048,2048,1,0,0,0,0,0,0,0,0,5e-05,5e-05,5e-05,100\n";
  const CommandResult r =
      run_hetsim({"calibrate", "--backend", "cuda", "--out", db, "--quick", "--ops", "gemm"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the CUDA backend failed (exit status 1); " + db +
                          ".csv keeps the 2 measurement(s) it took: run the same command again "
                          "to resume"),
            std::string::npos)
      << r.output;
}

TEST(CudaBackend, WithoutAGpuTheProgramSaysNoGpuFound) {
  REQUIRE_CUDA_PROGRAM();
  const CommandResult r = run_program(cuda_program(), {"--print-device-type"});
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU is present: the no-GPU path is not reachable";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hetsim-calibrate-cuda: no CUDA GPU found (cudaGetDeviceCount: "),
            std::string::npos)
      << r.output;
}

TEST(CudaBackend, MeasuresGemmsOnAGpuIntoTheDatabase) {
  REQUIRE_CUDA_PROGRAM();
  const CommandResult probe = run_program(cuda_program(), {"--print-device-type"});
  if (probe.exit_code != 0) GTEST_SKIP() << "no usable GPU here: " << probe.output;
  const std::string csv = ::testing::TempDir() + "cuda-quick.csv";
  std::filesystem::remove(csv);
  const CommandResult r = run_program(
      cuda_program(), {"--out", csv, "--quick", "--ops", "gemm,memory", "--budget-s", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const calibrate::Database db = calibrate::read_csv(csv);
  ASSERT_TRUE(db.gemm.count("bf16")) << r.output;
  EXPECT_GT(db.gemm.at("bf16").size(), 20u);
  for (const calibrate::GemmPoint& p : db.gemm.at("bf16")) {
    EXPECT_LE(p.t.p10_s, p.t.median_s);
    EXPECT_GE(p.t.p90_s, p.t.median_s);
    EXPECT_GE(p.t.repetitions, 5);
  }
}

}  // namespace
}  // namespace hetsim::e2e
