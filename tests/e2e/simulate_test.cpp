// hetsim simulate end to end: the report's JSON keys, the trace file, OOM as a successful run,
// and impossible plans as bad input (exit code 2, exact message).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kPlans = std::string(HETSIM_SOURCE_DIR) + "/tests/data/plans/";

TEST(Simulate, JsonHasTheDesignKeysAndConsistentFigures) {
  const CommandResult r = run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100",
                                      "--nodes", "1", "--plan", kPlans + "good.yaml", "--json"},
                                     Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* k : {"iteration_time_s", "throughput_tokens_per_s", "throughput_samples_per_s",
                        "mfu", "oom", "devices", "breakdown_s"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  const double t = j["iteration_time_s"];
  EXPECT_NEAR(j["throughput_samples_per_s"].get<double>(), 8 / t, 1e-9 * 8 / t);
  EXPECT_NEAR(j["throughput_tokens_per_s"].get<double>(), 8 * 2048 / t, 1e-9 * 8 * 2048 / t);
  EXPECT_GT(j["mfu"].get<double>(), 0.05);
  EXPECT_LT(j["mfu"].get<double>(), 1.0);
  ASSERT_EQ(j["devices"].size(), 8u);
  for (const auto& d : j["devices"]) {
    for (const char* k : {"id", "gpu", "busy_s", "peak_memory_bytes", "oom"}) {
      EXPECT_TRUE(d.contains(k)) << k;
    }
  }
  const auto& b = j["breakdown_s"];
  EXPECT_NEAR(b["compute"].get<double>() + b["communication_exposed"].get<double>() +
                  b["bubble"].get<double>(),
              t, 1e-9);
}

TEST(Simulate, AConvolutionalNetworkRunsOnAGridAndSplitsThatDoNotFitExitTwo) {
  // AlexNet as an 8 x 8 grid on 64 A100 (experiments/gholami): the gholami policy splits the
  // convolutions by domain and the fully connected layers by model; it fits; folded = full.
  const std::string plan = std::string(HETSIM_SOURCE_DIR) + "/experiments/gholami/alexnet-64.yaml";
  const std::vector<std::string> args = {"simulate", "--model", "alexnet", "--cluster", "dgx-a100",
                                         "--nodes",  "8",       "--plan",  plan,        "--json"};
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["oom"], false);
  EXPECT_EQ(j["grid"]["rows"], 8);
  EXPECT_EQ(j["grid"]["splits"]["conv1"], "domain");
  EXPECT_EQ(j["grid"]["splits"]["fc8"], "model");
  EXPECT_GT(j["sent_bytes_per_device"]["group"].get<double>(), 0.0);
  std::vector<std::string> exact = args;
  exact.push_back("--exact");
  const CommandResult e = run_hetsim(exact, Capture::stdout_only);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NEAR(nlohmann::json::parse(e.output)["iteration_time_s"].get<double>(),
              j["iteration_time_s"].get<double>(), 1e-9 * j["iteration_time_s"].get<double>());
  // A split finer than the kernel, named by layer; the planner and the exports refuse networks.
  std::vector<std::string> bad = {
      "simulate",
      "--model",
      "alexnet",
      "--cluster",
      "dgx-a100",
      "--nodes",
      "2",
      "--plan",
      plan,
      "--plan-set",
      "grid.rows=16",
      "--plan-set",
      "grid.columns=1",
      "--plan-set",
      "split=[model, domain, model, model, model, model, model, model]"};
  const CommandResult x = run_hetsim(bad);
  EXPECT_EQ(x.exit_code, 2) << x.output;
  EXPECT_NE(x.output.find("layer conv2 (domain)"), std::string::npos) << x.output;
  EXPECT_NE(x.output.find("finer than the kernel"), std::string::npos) << x.output;
  const CommandResult p = run_hetsim(
      {"plan", "--model", "alexnet", "--cluster", "dgx-a100", "--global-batch-size", "512"});
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("convolutional network"), std::string::npos) << p.output;
  const CommandResult ex = run_hetsim({"export", "--model", "alexnet", "--cluster", "dgx-a100",
                                       "--plan", plan, "--framework", "megatron"});
  EXPECT_EQ(ex.exit_code, 2) << ex.output;
}

TEST(Simulate, MixtureOfExpertsRunsEndToEndAndRefusesExpertDegreesThatDoNotFit) {
  // Mixtral 8x7B on 64 H100 with its experts over 8 replicas (experiments/moe): the all-to-alls
  // cross the NICs and are exposed; the folded replay gives the full one's time; it fits.
  const std::string plan = std::string(HETSIM_SOURCE_DIR) + "/experiments/moe/mixtral-8x7b-64.yaml";
  const std::vector<std::string> args = {
      "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100",
      "--nodes",  "8",       "--plan",       plan,        "--json"};
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["oom"], false);
  EXPECT_GT(j["breakdown_s"]["expert_parallel_exposed"].get<double>(), 0.0);
  const auto& b = j["breakdown_s"];
  EXPECT_NEAR(b["communication_exposed"].get<double>(),
              b["tensor_parallel_exposed"].get<double>() +
                  b["data_parallel_exposed"].get<double>() +
                  b["expert_parallel_exposed"].get<double>(),
              1e-9);
  std::vector<std::string> exact = args;
  exact.push_back("--exact");
  const CommandResult e = run_hetsim(exact, Capture::stdout_only);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NEAR(nlohmann::json::parse(e.output)["iteration_time_s"].get<double>(),
              j["iteration_time_s"].get<double>(), 1e-9 * j["iteration_time_s"].get<double>());
  auto refused = [&](const std::string& set, const std::string& model) {
    std::vector<std::string> a = {"simulate", "--model", model, "--cluster",  "dgx-h100", "--nodes",
                                  "8",        "--plan",  plan,  "--plan-set", set};
    const CommandResult x = run_hetsim(a);
    EXPECT_EQ(x.exit_code, 2) << command_line(a) << "\n" << x.output;
    return x.output;
  };
  EXPECT_EQ(refused("expert_parallel=3", "mixtral-8x7b"),
            "hetsim: error: " + plan +
                ": expert_parallel: 3 does not divide the 8 experts of mixtral-8x7b (each rank of "
                "the expert-parallel group holds experts / expert_parallel of each MoE layer)\n");
  EXPECT_EQ(refused("expert_parallel=16", "deepseek-moe-16b"),
            "hetsim: error: " + plan +
                ": expert_parallel: 16 does not divide the 8 data-parallel replicas (the "
                "expert-parallel groups are consecutive replicas, as in Megatron-LM)\n");
  EXPECT_EQ(refused("expert_parallel=2", "llama2-7b"),
            "hetsim: error: " + plan +
                ": expert_parallel: llama2-7b has no experts (a dense model; expert parallelism "
                "and routing apply to a mixture of experts)\n");
}

TEST(Simulate, AsymmetricReplicasRunEachPipelineAndReduceGradientsBetweenThem) {
  // Two pipelines of different depths and splits (tests/data/plans/asymmetric.yaml): each
  // device is in its replica and stage; the batch is the replicas' shares; gradients cross
  // between the A100 and the V100 nodes, so data-parallel communication is exposed.
  const CommandResult r =
      run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "mixed-a100-v100", "--plan",
                  kPlans + "asymmetric.yaml", "--json"},
                 Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["devices"].size(), 6u);
  const double t = j["iteration_time_s"];
  EXPECT_NEAR(j["throughput_samples_per_s"].get<double>(), (12 + 4) * 2 / t, 1e-9 * 32 / t);
  EXPECT_EQ(j["oom"], false);
  EXPECT_GT(j["breakdown_s"]["communication_exposed"].get<double>(), 0.0);
  // No communication: the slower pipeline alone sets the pace, and nothing is exposed.
  const CommandResult free =
      run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "mixed-a100-v100", "--plan",
                  kPlans + "asymmetric.yaml", "--json", "--free-communication"},
                 Capture::stdout_only);
  ASSERT_EQ(free.exit_code, 0) << free.output;
  const nlohmann::json f = nlohmann::json::parse(free.output);
  EXPECT_LT(f["iteration_time_s"].get<double>(), t);
  EXPECT_EQ(f["breakdown_s"]["communication_exposed"].get<double>(), 0.0);
}

TEST(Simulate, AStagedPlanReshardsBetweenStagesOfTheirOwnDataParallelGroups) {
  // Stages of their own data-parallel degree, tensor-parallel degrees and batch shares
  // (tests/data/plans/staged.yaml): every device is listed, the batch is the micro-batches', and
  // the V100 stage's gradients cross nodes over Ethernet, so data-parallel time is exposed.
  const CommandResult r =
      run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "mixed-a100-v100", "--plan",
                  kPlans + "staged.yaml", "--json"},
                 Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["devices"].size(), 12u);
  const double t = j["iteration_time_s"];
  EXPECT_NEAR(j["throughput_samples_per_s"].get<double>(), 64 / t, 1e-9 * 64 / t);
  EXPECT_EQ(j["oom"], false);
  EXPECT_GT(j["breakdown_s"]["communication_exposed"].get<double>(), 0.0);
  const CommandResult free =
      run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "mixed-a100-v100", "--plan",
                  kPlans + "staged.yaml", "--json", "--free-communication"},
                 Capture::stdout_only);
  ASSERT_EQ(free.exit_code, 0) << free.output;
  EXPECT_LT(nlohmann::json::parse(free.output)["iteration_time_s"].get<double>(), t);
}

TEST(Simulate, TraceFileParsesAndTheSummarySaysWhereItWent) {
  const std::string path = ::testing::TempDir() + "hetsim-trace.json";
  const CommandResult r =
      run_hetsim({"simulate", "--model", "llama2-7b", "--cluster", "dgx-a100", "--nodes", "1",
                  "--plan", kPlans + "good.yaml", "--trace", path, "--trace-micro-batches", "0-1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trace          " + path), std::string::npos) << r.output;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_GT(j["traceEvents"].size(), 100u);
}

TEST(Simulate, OutOfMemoryIsASuccessfulRunNamingTheDevices) {
  const CommandResult r = run_hetsim({"simulate", "--model", "gpt3-175b", "--cluster", "dgx-a100",
                                      "--nodes", "1", "--plan", kPlans + "good.yaml"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OUT OF MEMORY"), std::string::npos) << r.output;
  // The eight GPUs of the one node share their figures, so one line names them all.
  EXPECT_NE(r.output.find("    8 devices need "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" over): node0.gpu0-7\n"), std::string::npos) << r.output;
}

TEST(Simulate, FreeCommunicationIsALowerBoundWithNothingExposed) {
  std::vector<std::string> args = {"simulate",           "--model", "gpt3-1.3b", "--cluster",
                                   "dgx-a100",           "--nodes", "1",         "--plan",
                                   kPlans + "good.yaml", "--json"};
  const nlohmann::json with = nlohmann::json::parse(run_hetsim(args, Capture::stdout_only).output);
  args.push_back("--free-communication");
  const nlohmann::json free = nlohmann::json::parse(run_hetsim(args, Capture::stdout_only).output);
  EXPECT_LT(free["iteration_time_s"].get<double>(), with["iteration_time_s"].get<double>());
  EXPECT_EQ(free["breakdown_s"]["communication_exposed"].get<double>(), 0.0);
  EXPECT_EQ(free["breakdown_s"]["compute"], with["breakdown_s"]["compute"]);
}

TEST(Simulate, SameCommandTwiceGivesIdenticalOutput) {
  const std::vector<std::string> args = {
      "simulate",          "--model",    "gpt3-350m",          "--cluster",
      "mixed-a100-v100",   "--plan",     kPlans + "good.yaml", "--plan-set",
      "tensor_parallel=4", "--plan-set", "precision=fp16",     "--json"};
  EXPECT_EQ(run_hetsim(args).output, run_hetsim(args).output);
}

TEST(Simulate, PerturbSlowsTheRunNamesItAndTokensPriceTheTrainingRun) {
  std::vector<std::string> args = {
      "simulate", "--model", "gpt3-350m",          "--cluster",  "dgx-a100",          "--nodes",
      "1",        "--plan",  kPlans + "good.yaml", "--plan-set", "tensor_parallel=2", "--json"};
  const nlohmann::json base = nlohmann::json::parse(run_hetsim(args, Capture::stdout_only).output);
  args.insert(args.end(),
              {"--perturb", "slow: {gpu: 5, factor: 2}", "--perturb",
               "link: {link: node0.gpu0<->node0.nvswitch8, factor: 0.5}", "--tokens", "1e9"});
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["iteration_time_s"].get<double>(), base["iteration_time_s"].get<double>());
  EXPECT_FALSE(base.contains("perturbations"));
  ASSERT_EQ(j["perturbations"].size(), 3u);
  EXPECT_EQ(j["perturbations"][0], "node0.gpu5 (GPU 5) computes 2x slower");
  EXPECT_EQ(j["perturbations"][1], "link node0.gpu0->node0.nvswitch8 carries 0.5 of its capacity");
  EXPECT_EQ(j["folded_replicas"], 1);
  const double per_mtok = j["cost_per_million_tokens_usd"];
  EXPECT_NEAR(j["training_run"]["cost_usd"].get<double>(), per_mtok * 1000, 1e-9 * per_mtok);
  EXPECT_NEAR(j["training_run"]["time_s"].get<double>(),
              1e9 / j["throughput_tokens_per_s"].get<double>(), 1e-3);
}

TEST(Simulate, AFailedNicSlowsTheAllReduceAndAPlanFileCarriesTheSameWhatIf) {
  // Data parallel 16 over two DGX A100, gradients all-reduced after the backward pass: with
  // node0's first NIC cable down, two of the eight rings share its neighbour.
  const std::string dir = ::testing::TempDir();
  const std::string plan =
      "data_parallel: 16\nglobal_batch_size: 64\nmicro_batch_size: 4\n"
      "sequence_length: 2048\ngradient_reduction: after_backward\n";
  const std::string healthy_file = dir + "hetsim-dp16.yaml";
  const std::string failed_file = dir + "hetsim-dp16-nic-down.yaml";
  std::ofstream(healthy_file) << plan;
  std::ofstream(failed_file) << plan
                             << "perturbations:\n  link: {link: \"node0.nic15<->unit0.rail0\", "
                                "factor: 0}\n";
  auto simulate = [](const std::string& file, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100",
                                  "--nodes",  "2",       "--plan",    file,        "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const CommandResult r = run_hetsim(a, Capture::stdout_only);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json base = simulate(healthy_file, {});
  const nlohmann::json down = simulate(
      healthy_file, {"--perturb", "link: {link: \"node0.nic15<->unit0.rail0\", factor: 0}"});
  const nlohmann::json carried = simulate(failed_file, {});
  EXPECT_GT(down["iteration_time_s"].get<double>(), base["iteration_time_s"].get<double>() * 1.05);
  EXPECT_EQ(down["iteration_time_s"], carried["iteration_time_s"]);
  ASSERT_EQ(carried["perturbations"].size(), 2u);
  EXPECT_EQ(carried["perturbations"][0],
            "link node0.nic15->unit0.rail0 is down, routes go around it");
  EXPECT_EQ(carried["folded_replicas"], 1);
  // What cannot fail, and a plan's perturbations that are not a map, exit 2 naming why.
  CommandResult r = run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100",
                                "--nodes", "2", "--plan", healthy_file, "--perturb",
                                "link: {link: \"node0.gpu0<->node0.nvswitch8\", factor: 0}"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "hetsim: error: perturbation link: node0.gpu0->node0.nvswitch8 is inside a node; "
            "hetsim cannot fail it (the routes inside a node are fixed): give it a factor above "
            "0\n");
  const std::string bad_file = dir + "hetsim-dp16-bad.yaml";
  std::ofstream(bad_file) << plan << "perturbations: [1]\n";
  r = run_hetsim({"simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "2",
                  "--plan", bad_file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "hetsim: error: " + bad_file +
                          ":6: perturbations: expected a map of slow, link, stragglers and lost "
                          "(e.g. \"perturbations: {slow: {gpu: 3, factor: 2}}\")\n");
}

TEST(Simulate, BadPerturbIsExitTwoNamingTheOptionAndField) {
  const std::vector<std::string> base = {"simulate",  "--model",  "gpt3-350m",
                                         "--cluster", "dgx-a100", "--nodes",
                                         "1",         "--plan",   kPlans + "good.yaml"};
  auto with = [&](const std::string& p) {
    std::vector<std::string> a = base;
    a.insert(a.end(), {"--perturb", p});
    return run_hetsim(a);
  };
  CommandResult r = with("slow: {gpu: 3, factor: 0}");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "hetsim: error: --perturb:1: slow.factor: expected a factor >= 1 (how many times "
            "longer its kernels take), got 0\n");
  r = with("slow: {gpu: 9, factor: 2}");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "hetsim: error: perturbation slow.gpu: no GPU \"9\" in cluster dgx-a100 (8 GPUs: an "
            "index from 0 to 7, or a name from node0.gpu0 to node0.gpu7)\n");
}

// A node lost mid-step: the report is of the step after the relaunch, on the survivors, and says
// what the step the loss hit took; a plan that cannot lose the node says how it can go on.
TEST(Simulate, ALostNodeShrinksTheJobAndTheReportSaysWhatTheStepItHitCost) {
  const std::vector<std::string> base = {"simulate",
                                         "--model",
                                         "gpt3-350m",
                                         "--cluster",
                                         "dgx-a100",
                                         "--nodes",
                                         "2",
                                         "--plan",
                                         kPlans + "good.yaml",
                                         "--plan-set",
                                         "tensor_parallel=1",
                                         "--plan-set",
                                         "data_parallel=16",
                                         "--plan-set",
                                         "global_batch_size=64"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_hetsim(a, Capture::stdout_only);
  };
  const CommandResult healthy = with({"--json"});
  ASSERT_EQ(healthy.exit_code, 0) << healthy.output;
  const CommandResult lost =
      with({"--perturb", "lost: {node: node1, at: 0.001, restart: 60}", "--json"});
  ASSERT_EQ(lost.exit_code, 0) << lost.output;
  const auto h = nlohmann::json::parse(healthy.output), j = nlohmann::json::parse(lost.output);
  const auto& l = j["lost_node"];
  EXPECT_EQ(l["replace"], "shrink");
  EXPECT_EQ(l["gpus_before"], 16);
  EXPECT_EQ(l["gpus_after"], 8);
  EXPECT_EQ(j["gpus"], 8);
  EXPECT_EQ(l["iteration_before_s"], h["iteration_time_s"]);
  EXPECT_EQ(l["iteration_after_s"], j["iteration_time_s"]);
  EXPECT_GT(j["iteration_time_s"].get<double>(), 1.5 * h["iteration_time_s"].get<double>());
  EXPECT_DOUBLE_EQ(l["failed_step_s"].get<double>(),
                   0.001 + 600 + 60 + j["iteration_time_s"].get<double>());
  const CommandResult text = with({"--perturb", "lost: {node: 1, at: 0.001, restart: 60}"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("  lost node      node1: the step it hit took "), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("on 8 of 16 GPUs (8 of 16 replicas, global batch"), std::string::npos)
      << text.output;
  // Tensor parallelism 16 over both nodes: losing one leaves no replica.
  const CommandResult none =
      run_hetsim({"simulate", "--model", "gpt3-350m", "--cluster", "dgx-a100", "--nodes", "2",
                  "--plan", kPlans + "good.yaml", "--plan-set", "tensor_parallel=16", "--perturb",
                  "lost: {node: 0, at: 1}"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("every replica of the plan holds a GPU of node0"), std::string::npos)
      << none.output;
}

struct BadPlan {
  const char* rule;
  const char* file;
  const char* model;
  int nodes;
  std::string message;  // after "hetsim: error: <file>"
};

class BadPlanFile : public ::testing::TestWithParam<BadPlan> {};

TEST_P(BadPlanFile, ExitsWithCode2AndExactMessage) {
  const BadPlan& k = GetParam();
  const std::string file = kPlans + k.file;
  const CommandResult r = run_hetsim({"simulate", "--model", k.model, "--cluster", "dgx-a100",
                                      "--nodes", std::to_string(k.nodes), "--plan", file});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "hetsim: error: " + file + k.message + "\n");
}

INSTANTIATE_TEST_SUITE_P(
    Plans, BadPlanFile,
    ::testing::Values(
        BadPlan{"DegreesThatDoNotMultiplyToTheDevices", "degrees_mismatch.yaml", "gpt3-1.3b", 1,
                ": tensor_parallel x pipeline_parallel x data_parallel = 4 x 4 x 1 = 16, but the "
                "plan has 8 GPUs (the whole cluster; set devices to use fewer)"},
        BadPlan{"BatchNotDivisible", "batch_not_divisible.yaml", "gpt3-1.3b", 1,
                ":2: global_batch_size: 8 is not divisible by micro_batch_size x data_parallel = "
                "3"},
        BadPlan{"TensorParallelWiderThanTheHeads", "tp_wider_than_heads.yaml", "gpt3-1.3b", 4,
                ": stage 0: tensor_parallel 32 does not divide the 16 attention heads (wider than "
                "the heads)"},
        BadPlan{"StageWithoutLayers", "stage_without_layers.yaml", "gpt3-1.3b", 1,
                ":5: replicas[0].stages[0].layers: a stage with no layers"},
        BadPlan{"UnknownRecomputePolicy", "bad_recompute.yaml", "gpt3-1.3b", 1,
                ":3: recompute: unknown value \"partial\" (expected one of none, selective, full, "
                "selective_op)"},
        BadPlan{"ShardedStateOnAsymmetricReplicas", "asymmetric_zero.yaml", "gpt3-1.3b", 1,
                ":3: zero_stage: 1 shards the training state among stages that match replica "
                "for replica; these replicas' stages differ (in number, layers or "
                "tensor-parallel degree), so use zero_stage 0"}),
    [](const ::testing::TestParamInfo<BadPlan>& i) { return std::string(i.param.rule); });

TEST(Simulate, UnknownModelIsBadInput) {
  const CommandResult r =
      run_hetsim({"simulate", "--model", "gpt5", "--plan", kPlans + "good.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("hetsim: error: gpt5: no such model file, nor a built-in model", 0), 0u)
      << r.output;
}

}  // namespace
}  // namespace hetsim::e2e

namespace hetsim::e2e {
namespace {

// experiments/geo-distributed: three regions joined over the WAN (sites and wan: in the cluster
// file). A pipeline with one stage per instance sends only activations between regions; six
// data-parallel replicas all-reduce 1.3B gradients over the same links every iteration. Both
// plans run the same kernels, so the difference is the WAN alone: the pipeline is the faster by
// far, and shortening the WAN's latency speeds it up (each micro-batch's transfers pay it).
TEST(Simulate, AcrossRegionsAPipelineBeatsDataParallelismOverTheWan) {
  const std::string ex = std::string(HETSIM_SOURCE_DIR) + "/experiments/geo-distributed/";
  auto run = [&](const std::string& plan, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"simulate",          "--model", "gpt3-1.3b", "--cluster",
                                     ex + "cluster.yaml", "--plan",  ex + plan,   "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult r = run_hetsim(args, Capture::stdout_only);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json pipe = run("pipeline.yaml");
  const nlohmann::json dp = run("data-parallel.yaml");
  EXPECT_EQ(pipe["framework"].get<std::string>().rfind("megatron-lm-2021", 0), 0u);
  const double t_pipe = pipe["iteration_time_s"], t_dp = dp["iteration_time_s"];
  EXPECT_LT(3 * t_pipe, t_dp) << t_pipe << " s against " << t_dp << " s";
  const nlohmann::json near =
      run("pipeline.yaml", {"--set", "wan[0].latency=1ms", "--set", "wan[1].latency=1ms", "--set",
                            "wan[2].latency=1ms"});
  EXPECT_LT(near["iteration_time_s"].get<double>(), t_pipe);
}

// SimAI's example MoE on 9,216 H100 (experiments/simai-moe/): hetsim's iteration within 3% of
// SimAI-Analytical's 7.546 s, the time split as the experiment explains it (more pipeline idle,
// less data-parallel exposed), and out of memory by the interleaved warm-up's activations, which
// full recompute drops.
TEST(Simulate, SimAIsExampleMoeComesNearSimAIAndIsOutOfMemoryAsMegatronWouldBe) {
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/simai-moe/";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "simulate", "--model", dir + "model.yaml", "--cluster",       "dgx-h100",
        "--nodes",  "1152",    "--plan",           dir + "plan.yaml", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult r = run_hetsim(args, Capture::stdout_only);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json j = run({});
  EXPECT_NEAR(j["iteration_time_s"].get<double>() / 7.546, 1.0, 0.03);
  EXPECT_GT(j["breakdown_s"]["bubble"].get<double>(), 0.346);
  EXPECT_LT(j["breakdown_s"]["data_parallel_exposed"].get<double>(), 1.107);
  EXPECT_EQ(j["oom"], true);
  EXPECT_EQ(run({"--plan-set", "recompute=full"})["oom"], false);
}

}  // namespace
}  // namespace hetsim::e2e
