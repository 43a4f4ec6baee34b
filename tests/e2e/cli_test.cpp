// The hetsim command end to end: help and version, the JSON report and its nccl-tests
// arithmetic, every collective on every built-in cluster, overrides, determinism and bench.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

// Runs hetsim with --json and parses its stdout; fails the test unless it exits 0.
nlohmann::json run_json(std::vector<std::string> args) {
  args.push_back("--json");
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  EXPECT_EQ(r.exit_code, 0) << command_line(args);
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << command_line(args) << " printed no JSON:\n" << r.output;
  return j;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in:\n" << text;
}

double relative_difference(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(Help, TopLevelHelpExitsZeroAndListsCommands) {
  const CommandResult r = run_hetsim({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"collective", "bench", "--version", "--help"}) {
    expect_contains(r.output, part);
  }
}

TEST(Help, CollectiveHelpExitsZeroAndListsOptions) {
  const CommandResult r = run_hetsim({"collective", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"--cluster", "--nodes", "--set", "--op", "--bytes", "--ranks",
                           "--algorithm", "--protocol", "--expansion", "--json"}) {
    expect_contains(r.output, part);
  }
}

TEST(Help, SweepHelpExitsZeroAndListsOptions) {
  const CommandResult r = run_hetsim({"sweep", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"STUDY", "--store", "--jobs", "--csv", "--json", "--quiet"}) {
    expect_contains(r.output, part);
  }
}

TEST(Version, PrintsNameAndProjectVersion) {
  const CommandResult r = run_hetsim({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, std::string("hetsim ") + HETSIM_VERSION + "\n");
}

TEST(CollectiveJson, AllreduceReportsNcclTestsAlgbwAndBusbw) {
  const nlohmann::json j = run_json({"collective", "--cluster", "dgx-a100", "--op", "allreduce",
                                     "--bytes", "1GiB", "--ranks", "8"});
  ASSERT_TRUE(j.is_object());
  for (const char* key : {"time_s", "algbw_Bps", "busbw_Bps", "bytes", "ranks"}) {
    ASSERT_TRUE(j.contains(key)) << "no key " << key << " in " << j.dump();
  }
  const double bytes = j["bytes"].get<double>();
  const double time_s = j["time_s"].get<double>();
  const double algbw = j["algbw_Bps"].get<double>();
  const double busbw = j["busbw_Bps"].get<double>();
  EXPECT_EQ(bytes, 1073741824.0);
  EXPECT_EQ(j["ranks"].get<int>(), 8);
  ASSERT_GT(time_s, 0);
  // nccl-tests: algbw = S / t; all-reduce busbw = algbw * 2 (n - 1) / n.
  EXPECT_LE(relative_difference(algbw, bytes / time_s), 1e-12)
      << "algbw " << algbw << " vs bytes / time_s " << bytes / time_s;
  EXPECT_LE(relative_difference(busbw, algbw * 2 * 7 / 8), 1e-12)
      << "busbw " << busbw << " vs algbw * 2*7/8 " << algbw * 2 * 7 / 8;
}

TEST(CollectiveJson, PerturbTakesLinkWhatIfsOnly) {
  // node0's first NIC cable down on two DGX A100: two of the eight rings share NIC 1, and the
  // ring all-reduce takes twice as long (tests/unit/failed_link_test.cpp has the oracle).
  const std::vector<std::string> base = {"collective", "--cluster",  "dgx-a100", "--nodes",
                                         "2",          "--bytes",    "4GiB",     "--algorithm",
                                         "ring",       "--protocol", "Simple"};
  std::vector<std::string> down = base;
  down.insert(down.end(), {"--perturb", "link: {link: \"node0.nic15<->unit0.rail0\", factor: 0}"});
  const double t0 = run_json(base)["time_s"].get<double>();
  const double t1 = run_json(down)["time_s"].get<double>();
  EXPECT_NEAR(t1 / t0, 2.0, 0.02);
  std::vector<std::string> slow = base;
  slow.insert(slow.end(), {"--perturb", "slow: {gpu: 1, factor: 2}"});
  const CommandResult r = run_hetsim(slow);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "hetsim: error: --perturb: a collective takes link what-ifs only (slow GPUs and "
            "stragglers change kernels, and a collective has none; a lost node ends a training "
            "step)\n");
}

// ---- Every op on every cluster -----------------------------------------------------------

const char* const kOps[] = {"allreduce", "allgather", "reducescatter",
                            "alltoall",  "broadcast", "sendrecv"};

// Built-in names, and one file path to check the path form of --cluster.
const std::vector<std::string> kClusters = {
    "dgx-a100",        "dgx1-v100",
    "mixed-a100-v100", "mixed-explicit",
    "mixed-h100-a100", std::string(HETSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml",
};

class EveryOpOnEveryCluster : public testing::TestWithParam<std::tuple<std::string, const char*>> {
};

TEST_P(EveryOpOnEveryCluster, RunsAndReportsAPositiveTime) {
  const auto& [cluster, op] = GetParam();
  const nlohmann::json j =
      run_json({"collective", "--cluster", cluster, "--op", op, "--bytes", "1MiB"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.value("op", ""), op);
  EXPECT_GT(j.value("time_s", 0.0), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Clusters, EveryOpOnEveryCluster,
    testing::Combine(testing::ValuesIn(kClusters), testing::ValuesIn(kOps)),
    [](const testing::TestParamInfo<std::tuple<std::string, const char*>>& info) {
      std::string name = std::get<0>(info.param);
      if (name.find('/') != std::string::npos) name = "file_" + name.substr(name.rfind('/') + 1);
      name += std::string("_") + std::get<1>(info.param);
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// ---- Overrides ---------------------------------------------------------------------------

TEST(Overrides, NodesSetsTheGpuCountOfASingleGroupCluster) {
  const nlohmann::json base = run_json({"collective", "--cluster", "dgx-a100", "--bytes", "1MiB"});
  const nlohmann::json two =
      run_json({"collective", "--cluster", "dgx-a100", "--nodes", "2", "--bytes", "1MiB"});
  EXPECT_EQ(base.value("ranks", 0), 32);  // the file's 4 nodes of 8 GPUs
  EXPECT_EQ(two.value("ranks", 0), 16);
  EXPECT_EQ(two.value("nodes", 0), 2);
}

TEST(Overrides, SetGroupCountSetsTheGpuCount) {
  const nlohmann::json j = run_json(
      {"collective", "--cluster", "dgx-a100", "--set", "groups[0].count=2", "--bytes", "1MiB"});
  EXPECT_EQ(j.value("ranks", 0), 16);
  EXPECT_EQ(j.value("nodes", 0), 2);
}

// ---- Determinism and the two expansions --------------------------------------------------

TEST(Determinism, SameCommandTwiceGivesByteIdenticalOutput) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"collective", "--cluster", "mixed-explicit", "--op", "alltoall",
                                 "--bytes", "16MiB"},
        std::vector<std::string>{"collective", "--cluster", "dgx1-v100", "--op", "allreduce",
                                 "--bytes", "64MiB", "--json"}}) {
    const CommandResult first = run_hetsim(args, Capture::stdout_only);
    const CommandResult second = run_hetsim(args, Capture::stdout_only);
    EXPECT_EQ(first.exit_code, 0) << command_line(args);
    EXPECT_FALSE(first.output.empty()) << command_line(args);
    EXPECT_EQ(first.output, second.output) << command_line(args);
  }
}

TEST(Expansion, StepwiseRingAllreduceMatchesSteadyOnOneNode) {
  std::vector<std::string> args = {
      "collective", "--cluster", "dgx-a100",    "--op", "allreduce",  "--bytes", "64MiB",
      "--ranks",    "8",         "--algorithm", "ring", "--protocol", "Simple",  "--expansion"};
  args.push_back("steady");
  const nlohmann::json steady = run_json(args);
  args.back() = "stepwise";
  const nlohmann::json stepwise = run_json(args);
  const double t_steady = steady.value("time_s", 0.0);
  const double t_stepwise = stepwise.value("time_s", 0.0);
  ASSERT_GT(t_steady, 0);
  EXPECT_LE(relative_difference(t_stepwise, t_steady), 1e-6)
      << "steady " << t_steady << " s, stepwise " << t_stepwise << " s";
}

// ---- bench -------------------------------------------------------------------------------

TEST(Bench, NetworkPrintsHeaderAndOneRowPerGpuCount) {
  const CommandResult r = run_hetsim({"bench", "network", "--gpus", "64"}, Capture::stdout_only);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t eol = r.output.find('\n');
  ASSERT_NE(eol, std::string::npos) << r.output;
  const std::string header = r.output.substr(0, eol);
  expect_contains(header, "wall_s");
  expect_contains(header, "peak_MiB");
  const std::string row = r.output.substr(eol + 1);
  EXPECT_EQ(row.find_first_not_of(' '), row.find("64")) << "row does not start with 64:\n" << row;
}

// The MoE case is the shipped experiment's plan file, replayed as simulate replays it; its 64-way
// all-to-alls replay in about a second (each class of alike rank pairs one flow).
TEST(Bench, TrainingsDeepSeekCaseIsTheExperimentsPlanAsSimulateReplaysIt) {
  const CommandResult b =
      run_hetsim({"bench", "training", "--cases", "deepseek-v3", "--quiet"}, Capture::stdout_only);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  std::istringstream rows(b.output);
  std::string header, name;
  std::getline(rows, header);
  long gpus = 0;
  double wall = 0, peak = 0, iteration = 0;
  rows >> name >> gpus >> wall >> peak >> iteration;
  EXPECT_EQ(name, "deepseek-v3") << b.output;
  EXPECT_EQ(gpus, 2048) << b.output;
  const CommandResult s = run_hetsim(
      {"simulate", "--model", "deepseek-v3", "--cluster", "dgx-h100", "--nodes", "256", "--plan",
       std::string(HETSIM_SOURCE_DIR) + "/experiments/deepseek-v3/deepseek-v3-2048.yaml", "--json"},
      Capture::stdout_only);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const double simulated = nlohmann::json::parse(s.output)["iteration_time_s"].get<double>();
  EXPECT_NEAR(iteration, simulated, 0.0005 + 1e-9) << b.output;  // the bench prints 3 decimals
}

}  // namespace
}  // namespace hetsim::e2e

namespace hetsim::e2e {
namespace {

// `hetsim plan`: the JSON lists replayed candidates best first; the plan written with --out is
// one `simulate` accepts and replays to the predicted time.
TEST(PlanCommand, WritesTheBestPlanWhichSimulateReplaysToThePredictedTime) {
  const std::string out = ::testing::TempDir() + "best-plan.yaml";
  const CommandResult r =
      run_hetsim({"plan", "--model", "gpt3-125m", "--cluster", "dgx-a100", "--nodes", "1",
                  "--global-batch-size", "16", "--sequence-length", "1024", "--out", out, "--json"},
                 Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_GE(j["candidates"].size(), 5u);
  double last = 0;
  for (const auto& c : j["candidates"]) {
    EXPECT_GE(c["iteration_time_s"].get<double>(), last);
    last = c["iteration_time_s"].get<double>();
    EXPECT_FALSE(c["oom"].get<bool>());
  }
  const double best = j["candidates"][0]["iteration_time_s"].get<double>();
  const CommandResult sim = run_hetsim({"simulate", "--model", "gpt3-125m", "--cluster", "dgx-a100",
                                        "--nodes", "1", "--plan", out, "--json"},
                                       Capture::stdout_only);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_EQ(nlohmann::json::parse(sim.output)["iteration_time_s"].get<double>(), best);
  // The text report names the best plan per policy.
  const CommandResult text =
      run_hetsim({"plan", "--model", "gpt3-125m", "--cluster", "dgx-a100", "--nodes", "1",
                  "--global-batch-size", "16", "--sequence-length", "1024", "--policy", "zero"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("  best per policy\n    zero "), std::string::npos) << text.output;
  const CommandResult bad = run_hetsim(
      {"plan", "--model", "gpt3-125m", "--global-batch-size", "16", "--policy", "whales"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.output,
            "hetsim: error: --policy: unknown policy \"whales\" (expected all or one of megatron, "
            "zero, whale, cannikin, amp, metis, hetpipe, flashflex, cephalo)\n");
}

}  // namespace
}  // namespace hetsim::e2e
