// Cephalo's plan shapes: layered gradient accumulation (every micro-batch through a layer before
// the next, so a sharded layer is gathered and reduced once per iteration) and state shares
// decoupled from batch shares.
#include <gtest/gtest.h>

#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/workload/memory.h"
#include "sim/workload/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

using test::cluster;
using test::small_gpt;

// Two single-GPU replicas (FSDP over GPUs 0 and 1) with their own micro-batches.
std::string fsdp(int m0, int m1, const std::string& extra, const std::string& share0 = "",
                 const std::string& share1 = "") {
  auto share = [](const std::string& s) { return s.empty() ? "" : ", state_share: " + s; };
  return "micro_batch_size: 1\nsequence_length: 1024\n" + extra +
         "replicas:\n"
         "  - {micro_batches: " +
         std::to_string(m0) + share(share0) +
         ", stages: [{layers: 8, devices: [0]}]}\n"
         "  - {micro_batches: " +
         std::to_string(m1) + share(share1) + ", stages: [{layers: 8, devices: [1]}]}\n";
}

size_t dp_count(const TrainingJob& job, uint32_t g) { return job.groups[g].dp.size(); }

TEST(Layered, GathersAndReducesEachLayerOncePerIteration) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan per_mb = load_plan_text(fsdp(4, 4, "zero_stage: 3\n"), "a.yaml", m, c);
  const Plan layered =
      load_plan_text(fsdp(4, 4, "zero_stage: 3\ngradient_accumulation: layered\n"), "b.yaml", m, c);
  EXPECT_TRUE(layered.layered);
  // ZeRO-3: a gather per layer forward and backward, a reduce-scatter per layer backward.
  EXPECT_EQ(dp_count(build_training_job(m, per_mb, c, cost), 0), 3u * 8 * 4);
  EXPECT_EQ(dp_count(build_training_job(m, layered, c, cost), 0), 3u * 8);
  // The same kernels in another order: without communication, the same time to the bit.
  ReplayOptions free;
  free.free_communication = true;
  EXPECT_EQ(replay(build_training_job(m, per_mb, c, cost), nullptr, free).iteration,
            replay(build_training_job(m, layered, c, cost), nullptr, free).iteration);
  // With communication, a quarter of the collectives is faster.
  const ReplayResult a = replay(build_training_job(m, per_mb, c, cost));
  const ReplayResult b = replay(build_training_job(m, layered, c, cost));
  EXPECT_LT(b.iteration, a.iteration);
  // Every micro-batch's activations are live at once: four times one micro-batch's.
  const auto one = memory_per_group(build_training_job(
      m, load_plan_text(fsdp(1, 1, "zero_stage: 3\n"), "c.yaml", m, c), c, cost));
  const auto four = memory_per_group(build_training_job(m, layered, c, cost));
  EXPECT_DOUBLE_EQ(four[0].activations, 4 * one[0].activations);
}

TEST(Layered, LetsReplicasRunUnevenMicroBatchesUnderZero3) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  EXPECT_THROW(load_plan_text(fsdp(6, 2, "zero_stage: 3\n"), "a.yaml", m, c), InputError);
  const Plan p =
      load_plan_text(fsdp(6, 2, "zero_stage: 3\ngradient_accumulation: layered\n"), "b.yaml", m, c);
  const DatasheetCostModel cost;
  const TrainingJob job = build_training_job(m, p, c, cost);
  const ReplayResult r = replay(job);
  // The replica with three times the micro-batches finishes last; both wait at every gather.
  EXPECT_EQ(r.iteration, r.groups[0].finish);
  EXPECT_GT(r.groups[1].dp_wait, r.groups[0].dp_wait);
  // The estimate: a compute bound, and close to the replay.
  policy::Estimator est(m, c, cost);
  const policy::Estimate e = est.estimate(p);
  EXPECT_LE(e.compute_s, r.iteration.seconds());
  EXPECT_NEAR(e.iteration_s, r.iteration.seconds(), 0.15 * r.iteration.seconds());
}

TEST(Layered, RefusesPipelines) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  try {
    load_plan_text(
        "pipeline_parallel: 2\ndata_parallel: 4\nglobal_batch_size: 8\n"
        "gradient_accumulation: layered\n",
        "p.yaml", m, c);
    FAIL() << "layered pipeline accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:4: gradient_accumulation: layered"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("replica 0 has 2 stages"), std::string::npos) << e.what();
  }
}

TEST(StateShare, ShardsTheStateAsGivenAndIsChecked) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(fsdp(4, 4, "zero_stage: 3\n", "0.75", "0.25"), "s.yaml", m, c);
  const auto mem = memory_per_group(build_training_job(m, p, c, cost));
  const Plan even = load_plan_text(fsdp(4, 4, "zero_stage: 3\n"), "e.yaml", m, c);
  const auto half = memory_per_group(build_training_job(m, even, c, cost));
  // Weights, gradients and optimizer state: 3/4 and 1/4 of the whole, where even gives 1/2.
  EXPECT_DOUBLE_EQ(mem[0].weights, 1.5 * half[0].weights);
  EXPECT_DOUBLE_EQ(mem[1].weights, 0.5 * half[1].weights);
  EXPECT_DOUBLE_EQ(mem[0].optimizer, 3 * mem[1].optimizer);
  EXPECT_DOUBLE_EQ(mem[0].gradients, 3 * mem[1].gradients);
  EXPECT_DOUBLE_EQ(mem[0].activations, half[0].activations);
  auto message = [&](const std::string& y) {
    try {
      load_plan_text(y, "x.yaml", m, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(fsdp(4, 4, "zero_stage: 3\n", "0.75", "0.5")).find("adding up to 1.25"),
            std::string::npos);
  EXPECT_NE(message(fsdp(4, 4, "zero_stage: 3\n", "0.75")).find("given for 1 of 2"),
            std::string::npos);
  EXPECT_NE(message(fsdp(4, 4, "", "0.75", "0.25")).find("use zero_stage 1 to 3"),
            std::string::npos);
  EXPECT_NE(message(fsdp(4, 4, "zero_stage: 3\n", "1.5", "0.25")).find("expected a fraction"),
            std::string::npos);
}

}  // namespace
}  // namespace hetsim::workload
