// Staged plans (Metis): a pipeline whose stages each hold their own data-parallel groups, of
// their own tensor-parallel degree and batch share, with every micro-batch's activations
// re-sharded between the stages by the samples the groups share.
#include <gtest/gtest.h>

#include <iostream>
#include <numeric>
#include <tuple>

#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/policy/policy.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

using test::cluster;
using test::plan_error;
using test::small_gpt;

// small_gpt without tied embeddings (the tied reduction is one collective in a staged plan and
// a first-last exchange in a replicas plan, so only untied models replay alike to the bit).
ModelConfig untied_gpt(int layers = 8) {
  return load_model_yaml_text(
      "name: untied\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: 16\nvocab: 50304\nsequence: 1024\nactivation: gelu\n"
          "norm: layernorm\nposition: learned\ntied_embeddings: false\ncausal: true\nbias: true\n",
      "untied.yaml");
}

// Stage 0: four groups of one GPU (even shares of a micro-batch of 4); stage 1: a group of two
// GPUs taking 3 samples beside one GPU taking 1.
const char* kStaged =
    "micro_batch_size: 4\nglobal_batch_size: 16\nsequence_length: 1024\n"
    "stages:\n"
    "  - {layers: 3, devices: \"0-3\"}\n"
    "  - layers: 5\n"
    "    groups:\n"
    "      - {devices: [4, 5], batch: 3}\n"
    "      - {devices: [6], batch: 1}\n";

TEST(StagedPlan, LoadsItsStagesGroupsAndShares) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const Plan p = load_plan_text(kStaged, "s.yaml", m, c);
  ASSERT_TRUE(p.staged());
  EXPECT_EQ(p.stages(), 2);
  EXPECT_EQ(p.micro_batches_of(0), 4);
  EXPECT_EQ(p.data_parallel_of(0), 4u);
  EXPECT_EQ(p.data_parallel_of(1), 2u);
  EXPECT_EQ(p.dp_stages[0].batch, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(p.dp_stages[1].batch, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(p.stage_plan(0, 1).tensor_parallel(), 2);
  EXPECT_EQ(p.stage_plan(1, 1).devices, (std::vector<platform::GpuId>{6}));
  EXPECT_EQ(p.stage_plan(3, 0).first_layer, 0);
  EXPECT_EQ(p.stage_plan(1, 1).first_layer, 3);
  EXPECT_EQ(p.batch_of(0, 1), 3);
  EXPECT_FALSE(p.asymmetric());
  // `devices` cut by `tensor_parallel`, with uneven shares.
  const Plan q = load_plan_text(
      "micro_batch_size: 6\nsequence_length: 1024\nstages:\n"
      "  - {layers: 4, devices: \"0-5\", tensor_parallel: 2, batch: [1, 2, 3]}\n"
      "  - {layers: 4, devices: [6]}\n",
      "q.yaml", m, c);
  EXPECT_EQ(q.data_parallel_of(0), 3u);
  EXPECT_EQ(q.stage_plan(2, 0).devices, (std::vector<platform::GpuId>{4, 5}));
  EXPECT_EQ(q.dp_stages[0].batch, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(q.global_batch_size, 6);
}

TEST(StagedPlan, BadInputNamesTheFieldAndWhy) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const std::string head = "micro_batch_size: 4\nsequence_length: 1024\n";
  auto err = [&](const std::string& body) { return plan_error(head + body, m, c); };
  EXPECT_NE(err("stages:\n  - {layers: 4, devices: \"0-2\"}\n  - {layers: 4, devices: [3]}\n")
                .find("micro_batch_size 4 does not split evenly over the stage's 3 groups"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - {layers: 4, devices: \"0-1\", batch: [1, 2]}\n"
                "  - {layers: 4, devices: [3]}\n")
                .find("add up to micro_batch_size 4 (given for 2 of 2, adding up to 3)"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - {layers: 4, devices: \"0-1\"}\n  - {layers: 4, devices: [1]}\n")
                .find("stages[1]: GPU 1 is already used by another group"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - {layers: 4, devices: \"0-1\"}\n  - {layers: 3, devices: [2]}\n")
                .find("the layers add up to 7, but small has 8"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - {layers: 4, devices: \"0-2\", tensor_parallel: 2}\n"
                "  - {layers: 4, devices: [3]}\n")
                .find("tensor_parallel 2 does not divide the stage's 3 devices"),
            std::string::npos);
  EXPECT_NE(err("zero_stage: 1\nstages:\n  - {layers: 8, devices: \"0-1\"}\n")
                .find("zero_stage: 1: a staged plan keeps each stage's training state whole"),
            std::string::npos);
  EXPECT_NE(err("schedule: interleaved\ninterleave: 2\nstages:\n  - {layers: 8, devices: [0]}\n")
                .find("interleaved applies to uniform plans only"),
            std::string::npos);
  EXPECT_NE(err("data_parallel: 2\nstages:\n  - {layers: 8, devices: [0]}\n")
                .find("data_parallel: a staged plan gives each stage its own groups"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - layers: 8\n    devices: [0]\n    groups: [{devices: [1]}]\n")
                .find("give either groups or devices, not both"),
            std::string::npos);
  EXPECT_NE(err("stages:\n  - {layers: 8, groups: [{devices: [0], batch: 4, tp: 2}]}\n").find("tp"),
            std::string::npos);
  EXPECT_NE(err("global_batch_size: 6\nstages:\n  - {layers: 8, devices: [0]}\n")
                .find("global_batch_size: 6 is not a multiple of micro_batch_size 4"),
            std::string::npos);
}

// Every group sends its activation to the next stage's groups that hold its samples, each the
// share of the micro-batch they have in common: a sender's shares add up to its batch, and so do
// a receiver's.
TEST(StagedJob, ReshardsEachMicroBatchBySharedSamples) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const Plan p = load_plan_text(
      "micro_batch_size: 4\nsequence_length: 1024\nframework: megatron-lm-2021\nstages:\n"
      "  - {layers: 4, devices: \"0-2\", batch: [1, 1, 2]}\n"
      "  - {layers: 4, devices: \"3-4\", batch: [3, 1]}\n",
      "r.yaml", m, c);
  const DatasheetCostModel cost;
  const TrainingJob job = build_training_job(m, p, c, cost);
  ASSERT_TRUE(job.staged());
  ASSERT_EQ(job.copies.size(), 5u);
  // Samples 0, 1 and 2 go to group 3 (stage 1's first); sample 3 to group 4.
  auto peers = [](const std::vector<TrainingJob::Peer>& v) {
    std::vector<std::pair<uint32_t, double>> out;
    for (const TrainingJob::Peer& q : v) out.emplace_back(q.copy, q.share);
    return out;
  };
  using P = std::vector<std::pair<uint32_t, double>>;
  EXPECT_EQ(peers(job.next_peers[0]), (P{{3, 0.25}}));
  EXPECT_EQ(peers(job.next_peers[1]), (P{{3, 0.25}}));
  EXPECT_EQ(peers(job.next_peers[2]), (P{{3, 0.25}, {4, 0.25}}));
  EXPECT_EQ(peers(job.prev_peers[3]), (P{{0, 0.25}, {1, 0.25}, {2, 0.25}}));
  EXPECT_EQ(peers(job.prev_peers[4]), (P{{2, 0.25}}));
  for (uint32_t g = 0; g < job.copies.size(); ++g) {
    const auto& out = job.copies[g].stage == 0 ? job.next_peers[g] : job.prev_peers[g];
    const double sum =
        std::accumulate(out.begin(), out.end(), 0.0,
                        [](double a, const TrainingJob::Peer& q) { return a + q.share; });
    EXPECT_DOUBLE_EQ(sum * 4, static_cast<double>(job.copies[g].batch)) << "group " << g;
  }
  EXPECT_TRUE(job.next_peers[3].empty());
  EXPECT_TRUE(job.prev_peers[0].empty());
  // Each stage's gradients are reduced among its own groups; the tied embedding (reduced by the
  // 2021 Megatron-LM) among both ends' groups at once.
  size_t stage0 = 0, stage1 = 0, tied = 0;
  for (const DpSync& s : job.dp_syncs) {
    const auto [g0, i0] = s.members.front();
    if (job.copies[g0].dp[i0].name == "tied.embedding.grads") {
      ++tied;
      EXPECT_EQ(s.members.size(), 5u);
    } else if (job.copies[g0].stage == 0) {
      ++stage0;
      EXPECT_EQ(s.members.size(), 3u);
    } else {
      ++stage1;
      EXPECT_EQ(s.members.size(), 2u);
    }
  }
  EXPECT_GT(stage0, 0u);
  EXPECT_GT(stage1, 0u);
  EXPECT_EQ(tied, 1u);
  // Replayed: deterministic, and slower with communication than without.
  const ReplayResult r = replay(job);
  EXPECT_EQ(replay(job).iteration, r.iteration);
  ReplayOptions free;
  free.free_communication = true;
  EXPECT_GT(r.iteration, replay(job, nullptr, free).iteration);
}

// A group's kernels run at its own share of the micro-batch: the group of 2 samples computes
// twice what each group of 1 does, and its activations take twice the memory.
TEST(StagedJob, AGroupComputesAndStoresItsOwnShare) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const Plan p = load_plan_text(
      "micro_batch_size: 4\nglobal_batch_size: 8\nsequence_length: 1024\nstages:\n"
      "  - {layers: 4, devices: \"0-2\", batch: [1, 1, 2]}\n"
      "  - {layers: 4, devices: [3]}\n",
      "a.yaml", m, c);
  const DatasheetCostModel cost;
  const TrainingJob job = build_training_job(m, p, c, cost);
  EXPECT_NEAR(job.copies[2].model_flops, 2 * job.copies[0].model_flops,
              1e-12 * job.copies[2].model_flops);
  EXPECT_DOUBLE_EQ(job.copies[0].model_flops, job.copies[1].model_flops);
  const std::vector<DeviceMemory> mem = memory_per_copy(job);
  EXPECT_NEAR(mem[2].activations, 2 * mem[0].activations, 1e-12 * mem[2].activations);
  // The skeleton the planner reads holds every group, with the same memory.
  const std::vector<DeviceMemory> sk = memory_per_copy(skeleton_job(m, p, c));
  ASSERT_EQ(sk.size(), mem.size());
  for (size_t g = 0; g < mem.size(); ++g) EXPECT_EQ(sk[g].peak, mem[g].peak) << g;
  // The model's FLOPs are conserved: the stage-0 groups together do what one group of all four
  // samples does.
  const Plan whole = load_plan_text(
      "micro_batch_size: 4\nglobal_batch_size: 8\nsequence_length: 1024\nstages:\n"
      "  - {layers: 4, devices: [0]}\n  - {layers: 4, devices: [3]}\n",
      "w.yaml", m, c);
  const TrainingJob one = build_training_job(m, whole, c, cost);
  EXPECT_NEAR(job.copies[0].model_flops + job.copies[1].model_flops + job.copies[2].model_flops,
              one.copies[0].model_flops, 1e-9 * one.copies[0].model_flops);
  EXPECT_EQ(job.copies[3].model_flops, one.copies[1].model_flops);
}

// A stage of one group is a pipeline stage: a staged plan with one group a stage replays as the
// same pipeline written as one replica, to the bit.
TEST(StagedJob, OneGroupAStageIsTheSamePipelineAsOneReplica) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = untied_gpt();
  const DatasheetCostModel cost;
  const Plan staged = load_plan_text(
      "micro_batch_size: 2\nglobal_batch_size: 8\nsequence_length: 1024\nstages:\n"
      "  - {layers: 3, devices: \"0-1\", tensor_parallel: 2}\n"
      "  - {layers: 5, devices: [2]}\n",
      "s.yaml", m, c);
  const Plan replica = load_plan_text(
      "micro_batch_size: 2\nsequence_length: 1024\nreplicas:\n"
      "  - micro_batches: 4\n    stages:\n"
      "      - {layers: 3, devices: [0, 1]}\n      - {layers: 5, devices: [2]}\n",
      "r.yaml", m, c);
  const ReplayResult a = replay(build_training_job(m, staged, c, cost));
  const ReplayResult b = replay(build_training_job(m, replica, c, cost));
  EXPECT_EQ(a.iteration, b.iteration);
  EXPECT_EQ(a.flows, b.flows);
}

// Stages of equal groups are a uniform plan: two groups of one GPU on each of two stages, each
// taking half of a micro-batch of 2, are the uniform TP 1 x PP 2 x DP 2 plan with micro-batches
// of 1 (each group's samples go to the next stage's group that holds them, one to one).
TEST(StagedJob, EqualGroupsReplayAsTheUniformPlan) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = untied_gpt();
  const DatasheetCostModel cost;
  const Plan staged = load_plan_text(
      "micro_batch_size: 2\nglobal_batch_size: 8\nsequence_length: 1024\nstages:\n"
      "  - {layers: 4, devices: \"0-1\"}\n  - {layers: 4, devices: \"2-3\"}\n",
      "s.yaml", m, c);
  const Plan uniform = load_plan_text(
      "micro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\n"
      "pipeline_parallel: 2\ndata_parallel: 2\ndevices: \"0-3\"\n",
      "u.yaml", m, c);
  const ReplayResult a = replay(build_training_job(m, staged, c, cost));
  ReplayOptions exact;
  exact.exact = true;
  const ReplayResult b = replay(build_training_job(m, uniform, c, cost), nullptr, exact);
  EXPECT_NEAR(a.iteration.seconds(), b.iteration.seconds(), 1e-9 * b.iteration.seconds());
  EXPECT_EQ(a.flows, b.flows);
}

// A receiving group waits for every peer: slowing one stage-0 group that feeds the last stage
// slows the iteration, and slowing the group beside it by as much costs the same.
TEST(StagedJob, AReceiveWaitsForEveryPeer) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const Plan p = load_plan_text(
      "micro_batch_size: 2\nglobal_batch_size: 8\nsequence_length: 1024\nstages:\n"
      "  - {layers: 4, devices: \"0-1\"}\n  - {layers: 4, devices: [2]}\n",
      "w.yaml", m, c);
  const DatasheetCostModel cost;
  TrainingJob job = build_training_job(m, p, c, cost);
  const Time base = replay(job).iteration;
  job.copies[1].slow_from = {{Time(), 3.0}};
  const Time slow1 = replay(job).iteration;
  job.copies[1].slow_from.clear();
  job.copies[0].slow_from = {{Time(), 3.0}};
  const Time slow0 = replay(job).iteration;
  EXPECT_GT(slow1, base);
  EXPECT_EQ(slow0, slow1);
}

// The planner's closed-form estimate of staged plans follows their replay: Metis's staged
// proposals on two mixed clusters.
TEST(StagedJob, TheEstimateFollowsTheReplay) {
  const DatasheetCostModel cost;
  double sum = 0;
  size_t count = 0;
  for (const auto& [model, cluster, batch] :
       std::vector<std::tuple<std::string, std::string, int64_t>>{
           {"gpt3-1.3b", "mixed-a100-v100", 64}, {"gpt3-2.7b", "mixed-h100-a100", 128}}) {
    const ModelConfig m = load_model(model);
    const platform::Cluster c(config::load_cluster(cluster, {}));
    policy::Request r;
    r.model = &m;
    r.cluster = &c;
    r.global_batch = batch;
    r.sequence = m.sequence;
    r.cost = &cost;
    policy::Estimator est(m, c, cost);
    for (const policy::Proposal& x : policy::metis_policy().propose(r)) {
      const Plan p = load_plan_text(x.plan, "metis", m, c);
      if (!p.staged()) continue;
      const double replayed = replay(build_training_job(m, p, c, cost)).iteration.seconds();
      const policy::Estimate e = est.estimate(p);
      EXPECT_EQ(est.estimate(p).iteration_s, e.iteration_s);  // deterministic, cached or not
      EXPECT_LE(e.compute_s, replayed * (1 + 1e-9)) << x.label;
      const double err = std::abs(e.iteration_s - replayed) / replayed;
      EXPECT_LT(err, 0.6) << x.label << ": estimate " << e.iteration_s << " s, replay " << replayed
                          << " s";
      sum += err;
      ++count;
    }
  }
  ASSERT_GT(count, 10u);
  const double mean = sum / static_cast<double>(count);
  std::cout << "staged plans: " << count << ", mean estimate error " << 100 * mean << "%\n";
  EXPECT_LT(mean, 0.10);
}

}  // namespace
}  // namespace hetsim::workload
