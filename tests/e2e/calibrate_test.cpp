// The CPU calibration backend end to end: calibrate (quick), check, simulate with the database;
// MPI collectives under mpirun; resuming an interrupted run; a bad database as bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "calibrate/database.h"
#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kPlans = std::string(HETSIM_SOURCE_DIR) + "/tests/data/plans/";

// Open MPI keeps allocations until exit in plugins it unloads at MPI_Finalize, which
// LeakSanitizer reports without a symbol to suppress by; the sanitizer run turns leak checking
// off for the processes of these tests only (a no-op in other builds).
class CalibrateCpu : public ::testing::Test {
 protected:
  void SetUp() override { setenv("ASAN_OPTIONS", "detect_leaks=0", 1); }
};

std::string fresh(const std::string& name) {
  const std::string p = ::testing::TempDir() + name;
  std::filesystem::remove(p);
  std::filesystem::remove(p + ".journal.csv");
  return p;
}

TEST_F(CalibrateCpu, CalibrateCheckAndSimulateWithTheDatabase) {
  const std::string db = fresh("cpu-quick.h5");
  const CommandResult c =
      run_hetsim({"calibrate", "--backend", "cpu", "--out", db, "--quick", "--ops", "gemm,memory"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("measurements written to " + db), std::string::npos) << c.output;
  EXPECT_FALSE(std::filesystem::exists(db + ".journal.csv"));
  const calibrate::Database d = calibrate::read_database(db);
  EXPECT_EQ(d.device_type(), "cpu");
  EXPECT_EQ(d.gemm.at("fp32").size(), 27u);
  EXPECT_EQ(d.memory.size(), 10u);
  for (const auto& p : d.gemm.at("fp32")) {
    EXPECT_GE(p.t.p90_s, p.t.median_s);
    EXPECT_LE(p.t.p10_s, p.t.median_s);
    EXPECT_GE(p.t.repetitions, 3);
  }
  const CommandResult k = run_hetsim({"calibrate", "check", db, "--points"});
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("gemm/fp32"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("memory/layernorm"), std::string::npos) << k.output;
  // Every held-out point with its measurement, prediction and spread: index 2 of the 3x3x3 grid.
  EXPECT_NE(k.output.find("    m=64 n=64 k=256 batch=1 "), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("predicted"), std::string::npos) << k.output;
  // Against the uncalibrated models: the kernels against the cpu profile's datasheet figures.
  const CommandResult c2 = run_hetsim({"calibrate", "compare", db});
  ASSERT_EQ(c2.exit_code, 0) << c2.output;
  EXPECT_NE(c2.output.find("kernels against the datasheet model (kernel time, no launch gap) of "
                           "cpu"),
            std::string::npos)
      << c2.output;
  EXPECT_NE(c2.output.find("  gemm/fp32 "), std::string::npos) << c2.output;
  const CommandResult s = run_hetsim({"simulate", "--model", "gpt3-125m", "--cluster", "cpu-host",
                                      "--plan", kPlans + "cpu.yaml", "--calibration", db});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("op costs from  cpu: measured (" + db + ") (kernel shapes: "),
            std::string::npos)
      << s.output;
  // Which kernels came from the tables: the quick grid holds GEMMs up to 256 and no attention.
  EXPECT_NE(s.output.find(" measured, "), std::string::npos) << s.output;
  EXPECT_NE(s.output.find(" beyond the table (datasheet-scaled from it)"), std::string::npos)
      << s.output;
  EXPECT_NE(s.output.find(" datasheet (no fp32 causal forward attention table)"), std::string::npos)
      << s.output;
}

TEST_F(CalibrateCpu, ConvolutionsAloneMeasureTheConvTableInItsThreePasses) {
  const std::string db = fresh("cpu-conv.h5");
  const CommandResult c =
      run_hetsim({"calibrate", "--backend", "cpu", "--out", db, "--quick", "--ops", "conv"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const calibrate::Database d = calibrate::read_database(db);
  EXPECT_TRUE(d.gemm.empty());
  EXPECT_TRUE(d.memory.empty());
  ASSERT_EQ(d.conv.count("fp32"), 1u);
  const auto& points = d.conv.at("fp32");
  ASSERT_EQ(points.size(), 9u);  // the quick grid: 3 layers at batch 1, three passes each
  std::map<workload::ConvPass, int> passes;
  for (const auto& p : points) {
    ++passes[p.shape.pass];
    EXPECT_EQ(p.shape.n, 1);
    EXPECT_GE(p.t.p90_s, p.t.median_s);
    EXPECT_LE(p.t.p10_s, p.t.median_s);
    EXPECT_GE(p.t.repetitions, 3);
  }
  EXPECT_EQ(passes[workload::ConvPass::forward], 3);
  EXPECT_EQ(passes[workload::ConvPass::data_grad], 3);
  EXPECT_EQ(passes[workload::ConvPass::weight_grad], 3);
  const CommandResult k = run_hetsim({"calibrate", "check", db, "--points"});
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("  conv/fp32 "), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("    n=1 c=128 h=28 w=28 k=128 r=3 s=3 stride=1 pad=1x1 weight_grad "),
            std::string::npos)
      << k.output;
  const CommandResult bad =
      run_hetsim({"calibrate", "--backend", "cpu", "--out", db, "--ops", "conv,convolution"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--ops: unknown kind \"convolution\" for the CPU backend (expected "
                            "gemm, attention, memory, collective, conv)"),
            std::string::npos)
      << bad.output;
}

TEST_F(CalibrateCpu, MpiCollectivesBetweenTwoProcesses) {
  const std::string db = fresh("cpu-mpi.h5");
  const std::string cmd = "mpirun --allow-run-as-root --oversubscribe -np 2 " +
                          shell_quote(HETSIM_BINARY) +
                          " calibrate --backend cpu --quick --ops "
                          "collective --out " +
                          shell_quote(db) + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const calibrate::Database d = calibrate::read_database(db);
  for (const char* op :
       {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"}) {
    ASSERT_TRUE(d.collective.count(op)) << op;
    EXPECT_EQ(d.collective.at(op).front().ranks, 2) << op;
    EXPECT_EQ(d.collective.at(op).front().nodes, 1) << op;  // both processes on this machine
    EXPECT_GE(d.collective.at(op).size(), 5u) << op;
  }
  // Replayed on the network model of the cpu-host cluster: every op compared, none skipped.
  const CommandResult c = run_hetsim({"calibrate", "compare", db, "--cluster", "cpu-host"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  for (const char* op :
       {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"}) {
    EXPECT_NE(c.output.find(std::string("collective/") + op + " ranks=2 nodes=1 "),
              std::string::npos)
        << op << c.output;
  }
  EXPECT_EQ(c.output.find("skipped"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("note:"), std::string::npos) << c.output;
  // On a cluster of other GPUs the comparison says whose fabric it is.
  const CommandResult other =
      run_hetsim({"calibrate", "compare", db, "--cluster", "dgx-a100", "--nodes", "1"});
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(
      other.output.find("  note: the cluster has a100-sxm4-80gb GPUs; the database measured cpu\n"),
      std::string::npos)
      << other.output;
}

TEST_F(CalibrateCpu, AnInterruptedRunResumesAndKeepsWhatItHadMeasured) {
  const std::string db = fresh("cpu-resume.h5");
  // What an interrupted run leaves: a journal with one measurement and a half-written line.
  {
    std::ofstream j(db + ".journal.csv");
    j << "# backend=cpu\n# device_type=cpu\n" << calibrate::csv_header() << "\n";
    calibrate::SizePoint s{65536, 1, calibrate::Timing{1.25e-5, 1e-5, 2e-5, 7}};
    j << calibrate::csv_line("memory", "copy", nullptr, nullptr, &s) << "\n";
    j << "memory,,gelu,0,0";
  }
  const CommandResult c =
      run_hetsim({"calibrate", "--backend", "cpu", "--out", db, "--quick", "--ops", "memory"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const calibrate::Database d = calibrate::read_database(db);
  EXPECT_EQ(d.memory.at("copy").front().t.median_s, 1.25e-5);  // kept, not measured again
  EXPECT_EQ(d.memory.at("copy").front().t.repetitions, 7);
  EXPECT_EQ(d.memory.at("gelu").size(), d.memory.at("adam").size());   // the cut one was redone
  EXPECT_NE(c.output.find("(39/39)"), std::string::npos) << c.output;  // 40 planned, 1 kept
}

// A PyTorch profiler trace of tiny-gpt on this machine's CPU (tests/data/traces/): imported as a
// database that `simulate` and `calibrate check` read, and compared with the replay.
TEST(ImportTrace, ATraceBecomesADatabaseAndComparesWithTheReplay) {
  const std::string data = std::string(HETSIM_SOURCE_DIR) + "/tests/data/";
  const std::string trace = data + "traces/tiny-gpt-cpu.json.gz";
  const std::string db = fresh("trace-cpu.h5");
  const CommandResult c =
      run_hetsim({"calibrate", "import-trace", trace, "--device-type", "cpu", "--out", db});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("3 iterations recorded"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("unmapped:"), std::string::npos) << c.output;
  const calibrate::Database d = calibrate::read_database(db);
  EXPECT_EQ(d.device_type(), "cpu");
  EXPECT_EQ(d.attrs.at("backend"), "torch-profiler-trace");
  EXPECT_EQ(d.gemm.at("fp32").size(), 10u);
  const CommandResult check = run_hetsim({"calibrate", "check", db});
  EXPECT_EQ(check.exit_code, 0) << check.output;

  const std::vector<std::string> compare = {"compare",
                                            "--trace",
                                            trace,
                                            "--model",
                                            data + "execute/tiny-gpt.yaml",
                                            "--cluster",
                                            "cpu-host",
                                            "--plan",
                                            data + "traces/tiny-gpt-cpu-plan.yaml",
                                            "--json"};
  const CommandResult j = run_hetsim(compare, Capture::stdout_only);
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json r = nlohmann::json::parse(j.output);
  EXPECT_EQ(r["calibration"], "trace");
  EXPECT_LT(std::abs(r["error"].get<double>()), 0.10) << j.output;
  // With the imported database given as --calibration: the same kernel times, the same answer.
  std::vector<std::string> given = compare;
  given.insert(given.end(), {"--calibration", db});
  const CommandResult k = run_hetsim(given, Capture::stdout_only);
  ASSERT_EQ(k.exit_code, 0) << k.output;
  const nlohmann::json q = nlohmann::json::parse(k.output);
  EXPECT_EQ(q["predicted_iteration_s"], r["predicted_iteration_s"]);
  EXPECT_EQ(q["trace_calibrated_iteration_s"], r["predicted_iteration_s"]);
  // Side by side in one Chrome trace: the replayed device's streams and the measured iteration.
  const std::string chrome = fresh("side.json");
  std::vector<std::string> side = compare;
  side.insert(side.end(), {"--chrome-trace", chrome});
  ASSERT_EQ(run_hetsim(side, Capture::stdout_only).exit_code, 0);
  std::ifstream in(chrome);
  const nlohmann::json t = nlohmann::json::parse(in);
  std::map<int64_t, size_t> slices;  // by process
  bool named = false;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") ++slices[e["pid"].get<int64_t>()];
    if (e["ph"] == "M" && e["name"] == "process_name" &&
        e["args"]["name"].get<std::string>().find("ProfilerStep#") != std::string::npos)
      named = true;
  }
  EXPECT_EQ(slices.size(), 2u);
  EXPECT_TRUE(named);
}

TEST(ImportTrace, DiffComparesOneDatabaseWithAnother) {
  const std::string data = std::string(HETSIM_SOURCE_DIR) + "/tests/data/traces/";
  const std::string a = fresh("trace-a.h5"), b = fresh("trace-b.h5");
  for (const auto& [trace, db] : {std::pair{data + "tiny-gpt-cpu.json.gz", a},
                                  std::pair{data + "tiny-gpt-cpu-mb4x2.json.gz", b}}) {
    ASSERT_EQ(run_hetsim({"calibrate", "import-trace", trace, "--device-type", "cpu", "--out", db})
                  .exit_code,
              0);
  }
  const CommandResult d = run_hetsim({"calibrate", "diff", a, b, "--points"});
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("gemm/fp32                                     12"), std::string::npos)
      << d.output;
  EXPECT_NE(d.output.find("m=512 n=768 k=256 batch=1"), std::string::npos) << d.output;
  EXPECT_EQ(run_hetsim({"calibrate", "diff", a, data + "missing.h5"}).exit_code, 2);
}

TEST(ImportTrace, BadInputNamesWhatIsWrong) {
  const std::string trace =
      std::string(HETSIM_SOURCE_DIR) + "/tests/data/traces/tiny-gpt-cpu.json.gz";
  CommandResult c = run_hetsim(
      {"calibrate", "import-trace", trace, "--device-type", "nonesuch", "--out", fresh("x.h5")});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.output.find("--device-type: no GPU profile \"nonesuch\""), std::string::npos)
      << c.output;
  c = run_hetsim({"calibrate", "import-trace", kPlans + "good.yaml", "--device-type", "cpu",
                  "--out", fresh("x.h5")});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.output.find("good.yaml: not JSON"), std::string::npos) << c.output;
  c = run_hetsim({"compare", "--trace", trace, "--model", "gpt3-125m", "--cluster", "cpu-host",
                  "--plan",
                  std::string(HETSIM_SOURCE_DIR) + "/tests/data/traces/tiny-gpt-cpu-plan.yaml",
                  "--device", "7"});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.output.find("--device 7: the cluster has 2 devices"), std::string::npos) << c.output;
  c = run_hetsim({"compare", "--trace", trace, "--model", "gpt3-125m", "--cluster", "cpu-host",
                  "--plan",
                  std::string(HETSIM_SOURCE_DIR) + "/tests/data/traces/tiny-gpt-cpu-plan.yaml",
                  "--gpus-per-node", "0"});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.output.find("--gpus-per-node: expected 1 or more, got 0"), std::string::npos)
      << c.output;
}

TEST_F(CalibrateCpu, ACorruptDatabaseIsBadInput) {
  const std::string bad = fresh("corrupt.h5");
  std::ofstream(bad) << "not hdf5";
  const CommandResult s = run_hetsim({"simulate", "--model", "gpt3-125m", "--cluster", "cpu-host",
                                      "--plan", kPlans + "cpu.yaml", "--calibration", bad});
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_EQ(s.output, "hetsim: error: " + bad +
                          ": not an HDF5 file (corrupt, truncated or another format)\n");
  const CommandResult k = run_hetsim({"calibrate", "check", bad});
  EXPECT_EQ(k.exit_code, 2);
}

}  // namespace
}  // namespace hetsim::e2e
