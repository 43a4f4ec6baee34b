// `hetsim export` end to end: the Korthikanti plan's JSON, --out, a heterogeneous plan refused
// with each reason (exit 2) and exported with --force (exit 0, the reasons on standard error),
// DeepSpeed's batch arithmetic through the command, and an unknown framework.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kSource = HETSIM_SOURCE_DIR;

std::vector<std::string> korthikanti(const std::string& framework) {
  return {"export",      "--model",  "korthikanti-175b",
          "--cluster",   "dgx-a100", "--nodes",
          "8",           "--plan",   kSource + "/experiments/korthikanti/175b-selective.yaml",
          "--framework", framework};
}

std::vector<std::string> hetero(const std::string& framework) {
  return {"export",
          "--model",
          "llama2-13b",
          "--cluster",
          "mixed-h100-a100",
          "--plan",
          kSource + "/tests/data/plans/export_hetero.yaml",
          "--framework",
          framework};
}

nlohmann::json parse(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in:\n" << text;
}

TEST(ExportCommand, KorthikantiMegatronJsonHasEveryKeyAndNothingUnsupported) {
  std::vector<std::string> args = korthikanti("megatron");
  args.push_back("--json");
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << command_line(args) << "\n" << r.output;
  const nlohmann::json j = parse(r.output);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  for (const char* key : {"framework", "command", "config", "env", "hosts", "unsupported"}) {
    EXPECT_TRUE(j.contains(key)) << "no key " << key << " in " << j.dump();
  }
  EXPECT_EQ(j["framework"], "megatron");
  EXPECT_TRUE(j["unsupported"].empty());
  const std::vector<std::string> command = j["command"].get<std::vector<std::string>>();
  ASSERT_GE(command.size(), 6u);
  EXPECT_EQ(command[0], "torchrun");
  EXPECT_EQ(command[5], "pretrain_gpt.py");
}

TEST(ExportCommand, TextPutsOneFlagALineAndOutWritesTheSameBytes) {
  const CommandResult r = run_hetsim(korthikanti("megatron"), Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_contains(r.output,
                  "torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py \\\n"
                  "    --tensor-model-parallel-size 8 \\\n"
                  "    --pipeline-model-parallel-size 8 \\\n"
                  "    --num-layers-per-virtual-pipeline-stage 4 \\\n");
  const std::string out = ::testing::TempDir() + "hetsim_export_out.txt";
  std::vector<std::string> args = korthikanti("megatron");
  args.insert(args.end(), {"--out", out});
  const CommandResult w = run_hetsim(args);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  EXPECT_EQ(w.output, "");
  std::ifstream in(out, std::ios::binary);
  std::stringstream written;
  written << in.rdbuf();
  EXPECT_EQ(written.str(), r.output);
}

TEST(ExportCommand, HeterogeneousPlanIsRefusedWithEachReasonAndExitCode2) {
  const CommandResult r = run_hetsim(hetero("megatron"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_contains(r.output, "hetsim: error: " + kSource +
                                "/tests/data/plans/export_hetero.yaml: megatron cannot express "
                                "this plan:\n");
  for (const char* line :
       {"\n  stage 2 has tensor parallel 2 where stage 0 has 4: Megatron-LM needs one "
        "tensor-parallel degree\n",
        "\n  stage 3 has tensor parallel 2 where stage 0 has 4: Megatron-LM needs one "
        "tensor-parallel degree\n",
        "\n  replica 1 runs 12 micro-batches where replica 0 runs 20: Megatron-LM gives every "
        "data-parallel replica the same share of the batch\n",
        "\n  the plan splits the layers 14/12/8/6 over 4 pipeline stages: Megatron-LM splits "
        "them evenly, with only the first and last stage different (exported as 14/10/10/6)\n",
        "\n--force exports the closest uniform plan: tensor parallel 4, pipeline parallel 4, "
        "data parallel 2 (32 GPUs), 16 micro-batches of 1 per replica (global batch 32)\n"}) {
    expect_contains(r.output, line);
  }
  EXPECT_EQ(r.output.find("torchrun"), std::string::npos) << "printed a command:\n" << r.output;
}

TEST(ExportCommand, AStagedPlanSaysWhereItsStagesDiffer) {
  const CommandResult r =
      run_hetsim({"export", "--model", "gpt3-1.3b", "--cluster", "mixed-a100-v100", "--plan",
                  kSource + "/tests/data/plans/staged.yaml", "--framework", "deepspeed"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_contains(r.output,
                  "\n  stage 1 holds 3 data-parallel groups of other tensor-parallel degrees or "
                  "batch shares where stage 0 holds 4 of tensor parallel 2: DeepSpeed runs one "
                  "data-parallel degree, tensor-parallel degree and batch share throughout (the "
                  "activations are not re-sharded between stages)\n");
  EXPECT_EQ(r.output.find("stage 0's"), std::string::npos) << r.output;
}

TEST(ExportCommand, ForceExportsTheClosestUniformPlanWithWarningsOnStderr) {
  for (const char* fw : {"megatron", "deepspeed", "torchrun"}) {
    std::vector<std::string> args = hetero(fw);
    args.insert(args.end(), {"--force", "--json"});
    const CommandResult out = run_hetsim(args, Capture::stdout_only);
    ASSERT_EQ(out.exit_code, 0) << command_line(args) << "\n" << out.output;
    const nlohmann::json j = parse(out.output);
    ASSERT_FALSE(j.is_discarded()) << "stdout is not JSON alone:\n" << out.output;
    EXPECT_GE(j["unsupported"].size(), 4u) << j.dump(2);
    EXPECT_TRUE(j.contains("approximation"));
    const CommandResult both = run_hetsim(args);
    expect_contains(both.output,
                    "hetsim: warning: replica 1 runs 12 micro-batches where replica 0 "
                    "runs 20");
    expect_contains(both.output, "hetsim: warning: exported the closest uniform plan: ");
  }
}

TEST(ExportCommand, DeepSpeedTrainBatchIsMicroTimesAccumulationTimesDataParallel) {
  std::vector<std::string> args = korthikanti("deepspeed");
  args.push_back("--json");
  const CommandResult r = run_hetsim(args, Capture::stdout_only);
  // Korthikanti's plan interleaves, which DeepSpeed cannot: refused without --force.
  EXPECT_EQ(r.exit_code, 2) << r.output;
  args.push_back("--force");
  const CommandResult f = run_hetsim(args, Capture::stdout_only);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const nlohmann::json j = parse(f.output);
  ASSERT_FALSE(j.is_discarded()) << f.output;
  const nlohmann::json& c = j["config"];
  // 64 GPUs, tensor 8 x pipeline 8: data parallel 1.
  EXPECT_EQ(c["train_batch_size"].get<int>(), 64);
  EXPECT_EQ(c["train_micro_batch_size_per_gpu"].get<int>() *
                c["gradient_accumulation_steps"].get<int>() * 1,
            64);
  EXPECT_EQ(j["config_file"], "ds_config.json");
}

TEST(ExportCommand, UnknownFrameworkListsTheValidNames) {
  const CommandResult r = run_hetsim(korthikanti("colossalai"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "hetsim: error: --framework: unknown framework \"colossalai\" (expected one of "
            "megatron, deepspeed, torchrun)\n");
}

TEST(ExportCommand, HelpListsTheOptionsAndFrameworks) {
  const CommandResult r = run_hetsim({"export", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part :
       {"--model", "--cluster", "--nodes", "--set", "--plan", "--plan-set", "--framework", "--out",
        "--json", "--force", "megatron", "deepspeed", "torchrun"}) {
    expect_contains(r.output, part);
  }
}

}  // namespace
}  // namespace hetsim::e2e
