// hetsim simulate's report and its guards end to end (issue 9): calibration sanity warnings,
// the missing price, out-of-range trace selections and trace paths, the grouped report of a
// multi-node run, and progress lines on standard error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kPlans = std::string(HETSIM_SOURCE_DIR) + "/tests/data/plans/";
const std::string kCalibration = std::string(HETSIM_SOURCE_DIR) + "/tests/data/calibration/";

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Standard output and standard error apart (run_command.h merges or drops stderr).
struct Split {
  int exit_code = -1;
  std::string out, err;
};
Split run_split(const std::vector<std::string>& args) {
  // One file per call and process: ctest runs tests of this file in parallel processes.
  static int calls = 0;
  const std::string err = ::testing::TempDir() + "hetsim-report-test." + std::to_string(getpid()) +
                          "." + std::to_string(++calls) + ".stderr";
  std::string cmd = shell_quote(HETSIM_BINARY);
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  const CommandResult r =
      run_program("/bin/sh", {"-c", cmd + " 2>" + shell_quote(err)}, Capture::stdout_only);
  std::stringstream s;
  {
    std::ifstream in(err);
    s << in.rdbuf();
  }
  std::filesystem::remove(err);
  return Split{r.exit_code, r.output, s.str()};
}

// A hand-made CSV (tests/data/calibration) as a database in the test's temporary folder.
std::string database(const std::string& csv) {
  // Named after the test too: ctest runs the tests of this file in parallel processes.
  const std::string out = ::testing::TempDir() +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                          csv + ".h5";
  const CommandResult r = run_hetsim({"calibrate", "import", kCalibration + csv, "--out", out});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// ---- calibration sanity -----------------------------------------------------------------------
// cpu-noisy.csv: 27 GEMMs with p90 - p10 = 980% of the median and erratic medians (a loaded
// machine), and a quiet layernorm table; cpu-quiet.csv: the same grid measured quietly.

TEST(CalibrationSanity, CheckWarnsOncePerOffendingTableAndSummarises) {
  const std::string db = database("cpu-noisy.csv");
  const CommandResult r = run_hetsim({"calibrate", "check", db});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "WARNING: gemm/fp32: median spread 980% over 27 points exceeds 50%"))
      << r.output;
  EXPECT_TRUE(has(r.output, "WARNING: gemm/fp32: held-out error ")) << r.output;
  EXPECT_TRUE(has(r.output, "exceeds 25%")) << r.output;
  EXPECT_FALSE(has(r.output, "WARNING: memory/layernorm")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "sanity: 1 of 2 tables beyond reason (median spread > 50% or "
                  "held-out error > 25%)"))
      << r.output;
}

TEST(CalibrationSanity, StrictMakesANoisyDatabaseBadInputAndPassesAQuietOne) {
  const std::string noisy = database("cpu-noisy.csv");
  const CommandResult bad = run_hetsim({"calibrate", "check", noisy, "--strict"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output,
                  "hetsim: error: " + noisy + ": 1 table(s) beyond the sanity bounds (--strict)"))
      << bad.output;
  const CommandResult good =
      run_hetsim({"calibrate", "check", database("cpu-quiet.csv"), "--strict"});
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_FALSE(has(good.output, "WARNING")) << good.output;
  EXPECT_TRUE(has(good.output,
                  "sanity: all 2 tables within bounds (median spread <= 50%, "
                  "held-out error <= 25%)"))
      << good.output;
}

TEST(CalibrationSanity, SimulateWarnsOnStderrInTheTextAndInTheJson) {
  const std::string db = database("cpu-noisy.csv");
  const std::vector<std::string> args = {"simulate",          "--model",       "gpt3-125m",
                                         "--cluster",         "cpu-host",      "--plan",
                                         kPlans + "cpu.yaml", "--calibration", db};
  const std::string warning =
      "calibration " + db + " table gemm/fp32: median spread 980% over 27 points exceeds 50%";
  const Split text = run_split(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(has(text.err, "hetsim: warning: " + warning)) << text.err;
  EXPECT_TRUE(has(text.out, "  WARNING: " + warning)) << text.out;
  EXPECT_FALSE(has(text.out, "layernorm")) << text.out;
  // How many kernel shapes the table covered and how many fell beyond it, in text and JSON.
  EXPECT_TRUE(has(text.out, "op costs from  cpu: measured (" + db + ") (kernel shapes: "))
      << text.out;
  EXPECT_TRUE(has(text.out, " beyond the table (datasheet-scaled from it)")) << text.out;
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const Split json = run_split(json_args);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(has(json.err, "hetsim: warning: " + warning)) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"];
  EXPECT_TRUE(has(j["warnings"][0].get<std::string>(), warning));
  EXPECT_TRUE(has(j["op_costs_from"][0].get<std::string>(), " beyond the table")) << j;
  // A quiet database: no warning anywhere.
  json_args[8] = database("cpu-quiet.csv");
  const Split quiet = run_split(json_args);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_FALSE(has(quiet.err, "warning")) << quiet.err;
  EXPECT_TRUE(nlohmann::json::parse(quiet.out)["warnings"].empty());
}

// ---- price ------------------------------------------------------------------------------------

TEST(Price, AGpuWithoutAPriceIsNamedNotSilentlyDropped) {
  const std::vector<std::string> args = {"simulate",  "--model",   "gpt3-1.3b",
                                         "--cluster", "pcie-a100", "--nodes",
                                         "1",         "--plan",    kPlans + "good.yaml"};
  const CommandResult text = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(has(text.output, "  cost           no price for GPU a100-pcie-80gb")) << text.output;
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const CommandResult json = run_hetsim(json_args, Capture::stdout_only);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  EXPECT_TRUE(j["cost_per_iteration_usd"].is_null()) << j["cost_per_iteration_usd"];
  EXPECT_EQ(j["gpus_without_price"], nlohmann::json::array({"a100-pcie-80gb"}));
  // Priced GPUs: a figure and no list.
  const CommandResult priced =
      run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "1",
                  "--plan", kPlans + "good.yaml", "--json"},
                 Capture::stdout_only);
  const nlohmann::json p = nlohmann::json::parse(priced.output);
  EXPECT_GT(p["cost_per_iteration_usd"].get<double>(), 0);
  EXPECT_FALSE(p.contains("gpus_without_price"));
}

// ---- trace selections and paths -----------------------------------------------------------------

std::vector<std::string> four_nodes(std::vector<std::string> more) {
  std::vector<std::string> a = {"simulate",
                                "--model",
                                "gpt3-1.3b",
                                "--cluster",
                                "dgx-a100",
                                "--nodes",
                                "4",
                                "--plan",
                                kPlans + "good.yaml",
                                "--plan-set",
                                "data_parallel=4",
                                "--plan-set",
                                "global_batch_size=64"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(TraceSelection, DevicesBeyondTheClusterAreBadInputNamingTheValidRange) {
  const std::string path = ::testing::TempDir() + "never.json";
  std::filesystem::remove(path);
  const CommandResult r = run_hetsim(four_nodes({"--trace", path, "--trace-devices", "40-50"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output,
                  "hetsim: error: --trace-devices 40-50: GPU(s) 40-50 out of range "
                  "(the cluster has 32 GPUs: valid 0-31)"))
      << r.output;
  // One item out of range in a list is enough; the rest in range does not hide it.
  const CommandResult part = run_hetsim(four_nodes({"--trace", path, "--trace-devices", "0-3,32"}));
  EXPECT_EQ(part.exit_code, 2) << part.output;
  EXPECT_TRUE(has(part.output, "--trace-devices 0-3,32: GPU(s) 32 out of range")) << part.output;
  EXPECT_FALSE(std::filesystem::exists(path));
  // Without --trace a selection would do nothing: said, not ignored.
  const CommandResult alone = run_hetsim(four_nodes({"--trace-devices", "0-7"}));
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_TRUE(has(alone.output,
                  "hetsim: error: --trace-devices: selects what --trace FILE "
                  "writes; give --trace too"))
      << alone.output;
}

TEST(TraceSelection, MicroBatchesBeyondThePlanAreBadInputNamingTheValidRange) {
  // 64 samples over 4 replicas at micro-batch 1: 16 micro-batches per replica.
  const std::string path = ::testing::TempDir() + "micro-batch-15.json";
  const CommandResult r =
      run_hetsim(four_nodes({"--trace", path, "--trace-micro-batches", "100-200"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output,
                  "hetsim: error: --trace-micro-batches 100-200: micro-batch(es) 100-200 out of "
                  "range (the plan has 16 micro-batches per replica: valid 0-15)"))
      << r.output;
  const CommandResult edge = run_hetsim(four_nodes({"--trace", path, "--trace-micro-batches", "15",
                                                    "--trace-devices", "0", "--json"}),
                                        Capture::stdout_only);
  EXPECT_EQ(edge.exit_code, 0) << edge.output;
}

TEST(TracePath, AMissingFolderOrADirectoryFailsBeforeTheSimulation) {
  const std::string missing = ::testing::TempDir() + "no-such-folder/trace.json";
  const CommandResult r = run_hetsim(four_nodes({"--trace", missing}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "hetsim: error: --trace " + missing + ": folder " +
                                ::testing::TempDir() + "no-such-folder does not exist"))
      << r.output;
  EXPECT_FALSE(has(r.output, "iteration")) << r.output;
  const std::string dir = ::testing::TempDir() + "a-trace-folder";
  std::filesystem::create_directories(dir);
  const CommandResult d = run_hetsim(four_nodes({"--trace", dir}));
  EXPECT_EQ(d.exit_code, 2) << d.output;
  EXPECT_TRUE(has(d.output, "hetsim: error: --trace " + dir + ": is a directory")) << d.output;
}

// ---- the grouped report ------------------------------------------------------------------------

TEST(GroupedReport, IdenticalNodesShareOneRowWithTheMemorySplit) {
  const CommandResult r = run_hetsim(four_nodes({}), Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Four data-parallel replicas of one 8-GPU stage: one row for 32 GPUs, replicas 0-3.
  EXPECT_TRUE(has(r.output, "  nodes 0-3 gpu0-7              32 a100-sxm4-80gb       0-3       0 "))
      << r.output;
  EXPECT_FALSE(has(r.output, "node1.gpu0-7")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "  memory per device             weights  gradients  optimizer activations  "
                  "workspace\n  nodes 0-3 gpu0-7  "))
      << r.output;
  EXPECT_TRUE(has(r.output,
                  "  replay         4 identical data-parallel replicas replayed as one, in "
                  "lockstep (--exact replays each)\n"))
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 16) << r.output;
  // The framework the run used, with its era.
  EXPECT_TRUE(has(r.output, "  framework      megatron: Megatron-LM (Megatron-Core)")) << r.output;
}

TEST(GroupedReport, OutOfMemoryIsSummarisedByShortfallAcrossNodes) {
  const CommandResult r = run_hetsim(
      {"simulate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "2", "--plan",
       kPlans + "good.yaml", "--plan-set", "data_parallel=2", "--plan-set", "global_batch_size=2"},
      Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "  OUT OF MEMORY: 16 of 16 devices over capacity, worst ")) << r.output;
  EXPECT_TRUE(has(r.output, "    16 devices need ")) << r.output;
  EXPECT_TRUE(has(r.output, "over): nodes 0-1 gpu0-7\n")) << r.output;
  // One line for the 16 devices, not one each.
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 18) << r.output;
}

// ---- progress ---------------------------------------------------------------------------------

TEST(Progress, LinesOnStderrWhenForcedNoneWithQuietOrJsonAndStdoutUnchanged) {
  // Under the threshold (here far beyond the run's length) nothing is printed.
  const Split plain = run_split(four_nodes({"--progress-after", "1000"}));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  const Split forced = run_split(four_nodes({"--progress-after", "0"}));
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(forced.err.rfind("simulate: ", 0), 0u) << forced.err;
  EXPECT_TRUE(has(forced.err, " events, ")) << forced.err;
  EXPECT_TRUE(has(forced.err, "% of tasks")) << forced.err;
  EXPECT_EQ(forced.out, plain.out);
  const Split quiet = run_split(four_nodes({"--progress-after", "0", "--quiet"}));
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, plain.out);
  const Split json = run_split(four_nodes({"--progress-after", "0", "--json"}));
  ASSERT_EQ(json.exit_code, 0);
  EXPECT_EQ(json.err, "");
}

}  // namespace
}  // namespace hetsim::e2e
