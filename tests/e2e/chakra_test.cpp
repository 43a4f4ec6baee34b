// `hetsim export-chakra` and `hetsim replay-chakra` end to end: a small job (GPT-3 125M, tensor
// parallel 2 x pipeline 2 x data parallel 2 on one DGX A100) exported and replayed takes the
// iteration time `hetsim simulate` gives it; bad input exits 2 naming the file and what was
// expected.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "sim/chakra/et_io.h"
#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

namespace fs = std::filesystem;
const std::string kSource = HETSIM_SOURCE_DIR;
const std::string kPlan = kSource + "/tests/data/plans/chakra_tp2_pp2_dp2.yaml";

// A fresh folder under the temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("hetsim_chakra_e2e_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub = "") const {
    return sub.empty() ? path.string() : (path / sub).string();
  }
};

double iteration_s(const std::vector<std::string>& args) {
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  EXPECT_EQ(r.exit_code, 0) << command_line(args) << "\n" << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  if (j.is_discarded() || !j.contains("iteration_time_s")) return -1;
  return j["iteration_time_s"].get<double>();
}

void export_small(const std::string& out, const std::vector<std::string>& plan_sets = {},
                  const std::string& model = "gpt3-125m") {
  std::vector<std::string> args = {"export-chakra", "--model", model, "--cluster",
                                   "dgx-a100",      "--nodes", "1",   "--plan",
                                   kPlan,           "--out",   out};
  args.insert(args.end(), plan_sets.begin(), plan_sets.end());
  const CommandResult r = run_hetsim(args);
  ASSERT_EQ(r.exit_code, 0) << command_line(args) << "\n" << r.output;
  EXPECT_NE(r.output.find("wrote 8 Chakra traces"), std::string::npos) << r.output;
}

// Every replica replayed on its own (simulate --exact), as the Chakra replay does, is the same
// program over the same flows: the times agree to the picosecond. What could differ, and does not
// here: each rank of a transfer or collective resumes when its own slice is done, not when its
// group's last one is (the slices are alike), and byte counts rounded to whole bytes. Folded
// replicas (simulate's default) move in lockstep, the same here as the replicas are symmetric.
void expect_agreement(const std::string& name, const std::vector<std::string>& plan_sets,
                      const std::string& model = "gpt3-125m") {
  const TempDir dir("agree_" + name);
  export_small(dir.str("et"), plan_sets, model);
  for (int r = 0; r < 8; ++r)
    EXPECT_TRUE(fs::exists(dir.path / "et" / ("et." + std::to_string(r) + ".et")));
  EXPECT_TRUE(fs::exists(dir.path / "et" / "comm_group.json"));
  const double replayed = iteration_s(
      {"replay-chakra", dir.str("et"), "--cluster", "dgx-a100", "--nodes", "1", "--json"});
  std::vector<std::string> sim = {"simulate", "--model", model,    "--cluster", "dgx-a100",
                                  "--nodes",  "1",       "--plan", kPlan,       "--json"};
  sim.insert(sim.end(), plan_sets.begin(), plan_sets.end());
  std::vector<std::string> exact = sim;
  exact.push_back("--exact");
  const double simulated = iteration_s(sim);
  const double simulated_exact = iteration_s(exact);
  std::printf(
      "  %s: replay-chakra %.6f ms, simulate --exact %.6f ms (%+.6f%%), simulate %.6f ms "
      "(%+.6f%%)\n",
      name.c_str(), replayed * 1e3, simulated_exact * 1e3,
      100 * (replayed - simulated_exact) / simulated_exact, simulated * 1e3,
      100 * (replayed - simulated) / simulated);
  EXPECT_NEAR(replayed, simulated_exact, 1e-9 * simulated_exact);
  EXPECT_NEAR(replayed, simulated, 1e-9 * simulated);
}

TEST(ChakraCommand, ExportThenReplayGivesSimulatesIterationTime) {
  expect_agreement("megatron", {});
}

TEST(ChakraCommand,
     ExportThenReplayGivesSimulatesIterationTimeWithDeepSpeedsBlockingSendsAndTiedEmbedding) {
  expect_agreement("deepspeed", {"--plan-set", "framework=deepspeed"});
}

TEST(ChakraCommand, ExportThenReplayGivesSimulatesIterationTimeOnTheInterleavedSchedule) {
  expect_agreement("interleaved",
                   {"--plan-set", "schedule=interleaved", "--plan-set", "interleave=3"});
}

TEST(ChakraCommand, ExportThenReplayGivesSimulatesIterationTimeWithExpertParallelAllToAlls) {
  // A mixture of experts over the two replicas (expert parallel 2): each layer's all-to-alls
  // become ALL_TO_ALL nodes over the pair of ranks that hold the experts.
  expect_agreement("moe",
                   {"--plan-set", "expert_parallel=2", "--plan-set", "sequence_parallel=true"},
                   kSource + "/tests/data/gpt-moe-small.yaml");
}

TEST(ChakraCommand, ExportThenReplayGivesSimulatesIterationTimeForAGridPlansHaloExchanges) {
  // experiments/gholami's AlexNet on 64 A100 as an 8 x 8 grid: halo exchanges as sends to and
  // receives from each neighbour, the fully connected layers' collectives within a column, the
  // domain-parallel layers' gradients over all 64 ranks.
  const TempDir dir("grid");
  const std::string plan = kSource + "/experiments/gholami/alexnet-64.yaml";
  const std::vector<std::string> job = {"--model", "alexnet", "--cluster", "dgx-a100",
                                        "--nodes", "8",       "--plan",    plan};
  std::vector<std::string> ex = {"export-chakra", "--out", dir.str("et")};
  ex.insert(ex.end(), job.begin(), job.end());
  const CommandResult r = run_hetsim(ex);
  ASSERT_EQ(r.exit_code, 0) << command_line(ex) << "\n" << r.output;
  EXPECT_NE(r.output.find("wrote 64 Chakra traces"), std::string::npos) << r.output;
  // Rank 9 is row 1 of column 1: a halo send to rank 8 and to rank 10 in its trace.
  const chakra::TraceSet t = chakra::read_traces(dir.str("et"));
  std::set<int64_t> to;
  for (const chakra::Node& n : t.ranks[9].nodes)
    if (n.type == chakra::NodeType::send) to.insert(*n.comm_dst);
  EXPECT_EQ(to, (std::set<int64_t>{8, 10}));
  const double replayed = iteration_s(
      {"replay-chakra", dir.str("et"), "--cluster", "dgx-a100", "--nodes", "8", "--json"});
  std::vector<std::string> sim = {"simulate", "--json"};
  sim.insert(sim.end(), job.begin(), job.end());
  const double simulated = iteration_s(sim);
  std::printf("  alexnet 8 x 8: replay-chakra %.9f ms, simulate %.9f ms\n", replayed * 1e3,
              simulated * 1e3);
  EXPECT_NEAR(replayed, simulated, 1e-9 * simulated);
}

TEST(ChakraCommand, ReplayPrintsTheIterationAndEachRank) {
  const TempDir dir("text");
  export_small(dir.str("et"));
  const CommandResult r =
      run_hetsim({"replay-chakra", dir.str("et"), "--cluster", "dgx-a100", "--nodes", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(8 ranks) on dgx-a100"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  iteration "), std::string::npos) << r.output;
}

// ---- bad input: exit 2, the file and what was expected ----------------------------------
void expect_bad(const std::vector<std::string>& args, const std::string& message) {
  const CommandResult r = run_hetsim(args);
  EXPECT_EQ(r.exit_code, 2) << command_line(args) << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos)
      << command_line(args) << "\nexpected: " << message << "\ngot: " << r.output;
}

TEST(ChakraBadInput, AMissingFolder) {
  expect_bad({"replay-chakra", "/nonexistent/et", "--cluster", "dgx-a100", "--nodes", "1"},
             "hetsim: error: /nonexistent/et: no such folder (expected a folder of Chakra "
             "traces: /nonexistent/et/et.0.et, /nonexistent/et/et.1.et, ...)");
}

TEST(ChakraBadInput, AFolderWithoutTraces) {
  const TempDir dir("empty");
  expect_bad({"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str() + ": no Chakra traces in the folder");
}

TEST(ChakraBadInput, ATruncatedFile) {
  const TempDir dir("truncated");
  export_small(dir.str("et"));
  const fs::path f = dir.path / "et" / "et.3.et";
  fs::resize_file(f, fs::file_size(f) - 5);
  expect_bad({"replay-chakra", dir.str("et"), "--cluster", "dgx-a100", "--nodes", "1"},
             f.string() + ": truncated or not a Chakra trace: message ");
}

TEST(ChakraBadInput, AFileThatIsNotAChakraTrace) {
  const TempDir dir("foreign");
  std::ofstream(dir.path / "et.0.et") << "tensor_parallel: 2\npipeline_parallel: 2\n";
  expect_bad({"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str("et.0.et") + ": truncated or not a Chakra trace");
}

TEST(ChakraBadInput, AMissingRank) {
  const TempDir dir("gap");
  export_small(dir.str("et"));
  fs::remove(dir.path / "et" / "et.2.et");
  expect_bad({"replay-chakra", dir.str("et"), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str("et/et.2.et") + ": missing (expected one file per rank, 0 to 7)");
}

TEST(ChakraBadInput, MoreRanksThanTheClusterHasGpus) {
  const TempDir dir("toomany");
  chakra::TraceSet t;
  t.ranks.resize(9);
  chakra::write_traces(dir.str(), t);
  expect_bad({"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str() +
                 ": 9 ranks but the cluster has 8 GPUs (rank i runs on GPU i; expected "
                 "at most 8 trace files)");
}

TEST(ChakraBadInput, ADependencyOnAMissingNode) {
  const TempDir dir("dep");
  chakra::TraceSet t;
  t.ranks.resize(1);
  chakra::Node a, b;
  a.id = 0;
  a.name = "first";
  b.id = 1;
  b.name = "second";
  b.ctrl_deps = {5};
  t.ranks[0].nodes = {a, b};
  chakra::write_traces(dir.str(), t);
  expect_bad(
      {"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
      dir.str("et.0.et") + ": node 1 \"second\": ctrl_deps names node 5, which is not in the file");
}

TEST(ChakraBadInput, ACollectiveOneMemberNeverReachesStalls) {
  const TempDir dir("stall");
  chakra::TraceSet t;
  t.ranks.resize(2);
  chakra::Node ar;
  ar.id = 0;
  ar.name = "grads";
  ar.type = chakra::NodeType::collective;
  ar.comm_type = chakra::CommType::all_reduce;
  ar.comm_size = 1 << 20;
  ar.pg_name = "dp";
  t.ranks[0].nodes = {ar};
  t.groups["dp"] = {0, 1};
  chakra::write_traces(dir.str(), t);
  expect_bad({"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str() + ": replay stalled at 0.000000 ms:\n  " + dir.str("et.0.et") +
                 ": node 0 \"grads\" (COMM_COLL_NODE): collective #0 of group \"dp\" waits for "
                 "ranks 1 (has no such collective) that never reach it");
}

TEST(ChakraBadInput, AProcessGroupThatIsNotInCommGroupJson) {
  const TempDir dir("pg");
  chakra::TraceSet t;
  t.ranks.resize(2);
  chakra::Node ar;
  ar.name = "grads";
  ar.type = chakra::NodeType::collective;
  ar.comm_type = chakra::CommType::all_reduce;
  ar.comm_size = 1024;
  ar.pg_name = "7";
  t.ranks[0].nodes = {ar};
  t.ranks[1].nodes = {ar};
  t.groups["dp"] = {0, 1};
  chakra::write_traces(dir.str(), t);
  expect_bad({"replay-chakra", dir.str(), "--cluster", "dgx-a100", "--nodes", "1"},
             dir.str("et.0.et") +
                 ": node 0 \"grads\": pg_name \"7\" is not a group of "
                 "comm_group.json");
}

TEST(ChakraBadInput, ExportWithoutOut) {
  expect_bad({"export-chakra", "--model", "gpt3-125m", "--nodes", "1", "--plan", kPlan},
             "--out is required");
}

}  // namespace
}  // namespace hetsim::e2e
