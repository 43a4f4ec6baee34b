// Asymmetric replicas (HetPipe's virtual workers, FlashFlex's pipelines): replicas with their own
// number of stages, layer split and micro-batch count, whose gradients are all-reduced layer
// segment by layer segment among the stages that hold each segment.
#include <gtest/gtest.h>

#include <map>

#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

using test::cluster;
using test::small_gpt;

// Replica 0: the whole model on GPU 0; replica 1: a two-stage pipeline on GPUs 1 and 2
// (`split` layers, then the rest); replica 2 (with `third`): stages of 3, 3 and 2 layers.
std::string two_shapes(int split = 4, int m0 = 4, int m1 = 4, const std::string& extra = "",
                       bool third = false) {
  std::string y = "micro_batch_size: 1\nsequence_length: 1024\n" + extra +
                  "replicas:\n"
                  "  - micro_batches: " +
                  std::to_string(m0) +
                  "\n    stages:\n      - {layers: 8, devices: [0]}\n"
                  "  - micro_batches: " +
                  std::to_string(m1) + "\n    stages:\n      - {layers: " + std::to_string(split) +
                  ", devices: [1]}\n      - {layers: " + std::to_string(8 - split) +
                  ", devices: [2]}\n";
  if (third) {
    y += "  - micro_batches: 4\n    stages:\n      - {layers: 3, devices: [3]}\n"
         "      - {layers: 3, devices: [4]}\n      - {layers: 2, devices: [5]}\n";
  }
  return y;
}

// Gradient bytes each replica reduces: every parameter it trains once, the tied output copy
// aside (the end stages reduce it between themselves).
double replica_grad_bytes(const TrainingJob& job, uint32_t r) {
  double sum = 0;
  for (uint32_t s = 0; s < job.stages_of(r); ++s) {
    const StageCopy& g = job.copy(r, s);
    for (const DpCollective& dc : g.dp) sum += dc.bytes * static_cast<double>(g.devices.size());
  }
  return sum;
}

TEST(AsymmetricPlan, LoadsWithItsSegments) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const Plan p = load_plan_text(two_shapes(4, 4, 4, "", true), "a.yaml", m, c);
  EXPECT_TRUE(p.asymmetric());
  EXPECT_EQ(p.stages(0), 1);
  EXPECT_EQ(p.stages(1), 2);
  EXPECT_EQ(p.stages(2), 3);
  EXPECT_EQ(p.global_batch_size, 12);
  EXPECT_EQ(layer_segments(p, m.layers), (std::vector<int>{0, 3, 4, 6, 8}));
  // Replicas that share their stages are not asymmetric, whatever their batch shares.
  const Plan q = load_plan_text(
      "micro_batch_size: 1\nsequence_length: 1024\nreplicas:\n"
      "  - {micro_batches: 3, stages: [{layers: 4, devices: [0]}, {layers: 4, devices: [1]}]}\n"
      "  - {micro_batches: 1, stages: [{layers: 4, devices: [2]}, {layers: 4, devices: [3]}]}\n",
      "q.yaml", m, c);
  EXPECT_FALSE(q.asymmetric());
}

TEST(AsymmetricPlan, RefusesShardedStateAndTooManyShards) {
  const auto c = cluster("dgx-a100", 2);
  const ModelConfig m = small_gpt();
  try {
    load_plan_text(two_shapes(4, 4, 4, "zero_stage: 1\n"), "z.yaml", m, c);
    FAIL() << "zero_stage 1 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("z.yaml:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use zero_stage 0"), std::string::npos) << e.what();
  }
  // Tensor-parallel degrees 3, 5 and 7 for the same layers: 105 shards.
  const ModelConfig wide = load_model_yaml_text(
      "name: wide\nfamily: gpt\nlayers: 2\nhidden: 6720\nheads: 105\nvocab: 50400\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: true\n",
      "wide.yaml");
  const std::string y =
      "micro_batch_size: 1\nsequence_length: 1024\nreplicas:\n"
      "  - {micro_batches: 1, stages: [{layers: 2, tensor_parallel: 3, devices: \"0-2\"}]}\n"
      "  - {micro_batches: 1, stages: [{layers: 2, tensor_parallel: 5, devices: \"3-7\"}]}\n"
      "  - {micro_batches: 1, stages: [{layers: 2, tensor_parallel: 7, devices: \"8-14\"}]}\n";
  try {
    load_plan_text(y, "w.yaml", wide, c);
    FAIL() << "105 shards accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("least common multiple is 105"), std::string::npos)
        << e.what();
  }
}

// Layers 4-7 on one GPU in replica 0, over two (tensor parallel) in replica 1: the segment's
// gradients are reduced in two shards, each between replica 0's GPU and the replica 1 rank that
// holds that half.
TEST(AsymmetricJob, MixedTensorParallelDegreesReduceInShards) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const std::string y =
      "micro_batch_size: 1\nsequence_length: 1024\nreplicas:\n"
      "  - {micro_batches: 2, stages: [{layers: 8, devices: [0]}]}\n"
      "  - micro_batches: 2\n    stages:\n      - {layers: 4, devices: [1]}\n"
      "      - {layers: 4, tensor_parallel: 2, devices: [2, 3]}\n";
  const Plan p = load_plan_text(y, "t.yaml", m, c);
  ASSERT_TRUE(p.asymmetric());
  const DatasheetCostModel cost;
  const TrainingJob job = build_training_job(m, p, c, cost);
  const double want = 4.0 * static_cast<double>(m.layers * m.layer_params() + m.embedding_params() +
                                                m.output_params());
  for (uint32_t r = 0; r < 2; ++r) EXPECT_NEAR(replica_grad_bytes(job, r), want, 1e-9 * want);
  size_t sharded = 0;
  for (const DpSync& s : job.dp_syncs) {
    const auto [g0, i0] = s.members.front();
    const double whole = job.copies[g0].dp[i0].bytes;  // replica 0: one GPU holds it all
    const bool upper = s.members[1].first == job.first_copy[1] + 1;
    EXPECT_EQ(s.pieces, upper ? 2u : 1u);
    EXPECT_DOUBLE_EQ(s.piece_bytes * s.pieces, whole);
    if (upper) {
      ++sharded;
      EXPECT_EQ(s.holder(0, 2), 0u);
      EXPECT_EQ(s.holder(1, 2), 1u);
      EXPECT_EQ(s.holder(1, 1), 0u);
    }
  }
  EXPECT_GT(sharded, 0u);
  // Replayed: deterministic, and no faster than without communication.
  const ReplayResult r = replay(job);
  EXPECT_EQ(replay(job).iteration, r.iteration);
  ReplayOptions free;
  free.free_communication = true;
  EXPECT_GT(r.iteration, replay(job, nullptr, free).iteration);
  // The planner's estimate reduces the same shards.
  policy::Estimator est(m, c, cost);
  const policy::Estimate e = est.estimate(p);
  EXPECT_LE(e.compute_s, r.iteration.seconds());
  EXPECT_NEAR(e.iteration_s, r.iteration.seconds(), 0.15 * r.iteration.seconds());
}

TEST(AsymmetricJob, EverySegmentReducedOnceByEveryReplica) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  for (const char* reduction : {"overlapped", "after_backward"}) {
    SCOPED_TRACE(reduction);
    // Buckets of about one layer's gradients, so that segments hold several.
    const Plan p = load_plan_text(
        two_shapes(3, 4, 4,
                   std::string("gradient_reduction: ") + reduction + "\nbucket_size: 12MB\n", true),
        "a.yaml", m, c);
    const DatasheetCostModel cost;
    const TrainingJob job = build_training_job(m, p, c, cost);
    const double want = 4.0 * static_cast<double>(m.layers * m.layer_params() +
                                                  m.embedding_params() + m.output_params());
    for (uint32_t r = 0; r < 3; ++r) EXPECT_DOUBLE_EQ(replica_grad_bytes(job, r), want) << r;
    // Every sync: one member per replica, of one size; replica 0's single stage is in all.
    ASSERT_FALSE(job.dp_syncs.empty());
    for (const DpSync& s : job.dp_syncs) {
      ASSERT_EQ(s.members.size(), 3u);
      EXPECT_EQ(s.members[0].first, 0u);
      const double bytes = job.copies[s.members[0].first].dp[s.members[0].second].bytes;
      for (const auto& [g, i] : s.members) EXPECT_EQ(job.copies[g].dp[i].bytes, bytes);
    }
    EXPECT_EQ(job.copy(0, 0).dp.size(), job.dp_syncs.size());
  }
}

// Without communication each replica runs as it would alone: the iteration is the slowest
// replica's, to the bit.
TEST(AsymmetricReplay, FreeCommunicationIsTheSlowestReplicaAlone) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  ReplayOptions free;
  free.free_communication = true;
  const Plan p = load_plan_text(two_shapes(5, 3, 6), "a.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  const ReplayResult both = replay(job, nullptr, free);
  Time slowest;
  for (size_t r = 0; r < 2; ++r) {
    Plan alone = p;
    alone.replicas = {p.replicas[r]};
    const TrainingJob j = build_training_job(m, alone, c, cost);
    const ReplayResult one = replay(j, nullptr, free);
    slowest = std::max(slowest, one.iteration);
    for (uint32_t s = 0; s < j.copies.size(); ++s)
      EXPECT_EQ(both.copies[job.first_copy[r] + s].compute, one.copies[s].compute);
  }
  EXPECT_EQ(both.iteration, slowest);
  // Replica 1's pipeline runs twice the micro-batches of replica 0 on half the layers each.
  EXPECT_GT(both.iteration, Time());
}

// Each segment's all-reduce runs once, among its holders: replica 0's single stage takes part in
// every one, replica 1's stages each in their own segments'.
class DpCounter : public ReplayObserver {
 public:
  void on_compute(const TrainingJob&, uint32_t, const Task&, Time, Time) override {}
  void on_collective(const TrainingJob&, uint32_t g, const char* stream, const std::string&,
                     const Task&, Time s, Time e) override {
    if (std::string(stream) == "dp") {
      ++count[g];
      spans[g].emplace_back(s, e);
    }
  }
  void on_transfer(const TrainingJob&, uint32_t, uint32_t, const Task&, Time, Time) override {}
  std::map<uint32_t, int> count;
  std::map<uint32_t, std::vector<std::pair<Time, Time>>> spans;
};

TEST(AsymmetricReplay, SegmentsReducedAmongTheirHoldersDeterministically) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(two_shapes(4, 4, 4, "bucket_size: 12MB\n"), "a.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  DpCounter seen;
  const ReplayResult r = replay(job, &seen);
  const uint32_t a = job.first_copy[0], b0 = job.first_copy[1], b1 = b0 + 1;
  EXPECT_EQ(seen.count[a], static_cast<int>(job.dp_syncs.size()));
  EXPECT_EQ(seen.count[b0] + seen.count[b1], seen.count[a]);
  EXPECT_GT(seen.count[b0], 0);
  EXPECT_GT(seen.count[b1], 0);
  // Segment 1 (layers 4-7) is reduced before segment 0: the backward pass reaches it first.
  EXPECT_LE(seen.spans[b1].back().second, seen.spans[b0].back().second);
  // Communication only adds time, and the same inputs give the same answer.
  ReplayOptions free;
  free.free_communication = true;
  EXPECT_GE(r.iteration, replay(job, nullptr, free).iteration);
  EXPECT_EQ(replay(job).iteration, r.iteration);
}

// The planner's estimate of an asymmetric plan: a compute bound no replay beats, and close to
// the replay.
TEST(AsymmetricEstimate, BoundsAndFollowsTheReplay) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  policy::Estimator est(m, c, cost);
  for (int split : {2, 4, 6}) {
    const Plan p = load_plan_text(two_shapes(split, 4, 8, "", true), "a.yaml", m, c);
    const TrainingJob job = build_training_job(m, p, c, cost);
    const double replayed = replay(job).iteration.seconds();
    const policy::Estimate e = est.estimate(p);
    EXPECT_LE(e.compute_s, replayed) << split;
    EXPECT_NEAR(e.iteration_s, replayed, 0.15 * replayed) << split;
  }
}

}  // namespace
}  // namespace hetsim::workload
