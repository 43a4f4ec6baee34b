// Folded replay (identical data-parallel replicas replayed as one, in lockstep) against the full
// replay (`exact`): the same answer to the bit where the replicas' traffic is symmetric, every
// schedule and framework; never faster, and within a stated bound, where hashed spine routes make
// it asymmetric; heterogeneous replicas replayed each on their own; observers see every replica.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "sim/workload/replay/perturbation.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

using test::cluster;
using test::small_gpt;

// Counts and times what an observer sees, per group.
class Recorder : public ReplayObserver {
 public:
  using Key =
      std::tuple<char, uint32_t, uint32_t, int64_t, int64_t>;  // kind, group, to, start, end
  void on_compute(const TrainingJob&, uint32_t g, const Task&, Time s, Time e) override {
    ++seen[{'c', g, 0, s.ps(), e.ps()}];
  }
  void on_collective(const TrainingJob&, uint32_t g, const char* stream, const std::string&,
                     const Task&, Time s, Time e) override {
    ++seen[{stream[0], g, 0, s.ps(), e.ps()}];
  }
  void on_transfer(const TrainingJob&, uint32_t from, uint32_t to, const Task&, Time s,
                   Time e) override {
    ++seen[{'p', from, to, s.ps(), e.ps()}];
  }
  std::map<Key, int> seen;
};

// A uniform plan as a user writes it.
Plan plan(const ModelConfig& m, const platform::Cluster& c, int tp, int pp, int dp, int batch,
          Schedule s = Schedule::one_f_one_b, int interleave = 1, int zero = 0) {
  return load_plan_text(
      "tensor_parallel: " + std::to_string(tp) + "\npipeline_parallel: " + std::to_string(pp) +
          "\ndata_parallel: " + std::to_string(dp) + "\nglobal_batch_size: " +
          std::to_string(batch) + "\nsequence_length: 1024\nschedule: " + to_string(s) +
          "\ninterleave: " + std::to_string(interleave) + "\nzero_stage: " + std::to_string(zero) +
          "\nsequence_parallel: " + (tp > 1 ? "true" : "false") + "\n",
      "p.yaml", m, c);
}

struct Both {
  ReplayResult folded, exact;
};

Both replay_both(const TrainingJob& job, Recorder* a = nullptr, Recorder* b = nullptr) {
  ReplayOptions exact;
  exact.exact = true;
  return {replay(job, a), replay(job, b, exact)};
}

void expect_same(const ReplayResult& f, const ReplayResult& e, const std::string& what) {
  EXPECT_EQ(f.iteration, e.iteration) << what;
  ASSERT_EQ(f.copies.size(), e.copies.size()) << what;
  for (size_t g = 0; g < f.copies.size(); ++g) {
    EXPECT_EQ(f.copies[g].finish, e.copies[g].finish) << what << " copy " << g;
    EXPECT_EQ(f.copies[g].compute, e.copies[g].compute) << what << " copy " << g;
    EXPECT_EQ(f.copies[g].tp_wait, e.copies[g].tp_wait) << what << " copy " << g;
    EXPECT_EQ(f.copies[g].pp_wait, e.copies[g].pp_wait) << what << " copy " << g;
    EXPECT_EQ(f.copies[g].dp_wait, e.copies[g].dp_wait) << what << " copy " << g;
  }
}

TEST(FoldedReplay, SymmetricReplicasGiveTheFullReplaysAnswerToTheBitUnderEverySchedule) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster("dgx-a100", 4);  // 32 GPUs, 2 leaves of a fat tree
  const DatasheetCostModel cost;
  struct Case {
    int tp, pp, dp;
    Schedule schedule;
    int interleave;
    int zero;
  };
  for (const Case& k :
       {Case{2, 2, 8, Schedule::gpipe, 1, 0}, Case{2, 2, 8, Schedule::one_f_one_b, 1, 1},
        Case{2, 2, 8, Schedule::interleaved, 2, 1}, Case{8, 2, 2, Schedule::one_f_one_b, 1, 0},
        Case{1, 4, 8, Schedule::interleaved, 2, 2}, Case{4, 1, 8, Schedule::one_f_one_b, 1, 3}}) {
    const Plan p = plan(m, c, k.tp, k.pp, k.dp, 8 * k.dp, k.schedule, k.interleave, k.zero);
    const TrainingJob job = build_training_job(m, p, c, cost);
    Recorder rf, re;
    const Both b = replay_both(job, &rf, &re);
    const std::string what = "tp" + std::to_string(k.tp) + " pp" + std::to_string(k.pp) + " dp" +
                             std::to_string(k.dp) + " " + to_string(k.schedule);
    EXPECT_EQ(b.folded.folded_replicas, static_cast<uint32_t>(k.dp)) << what;
    EXPECT_EQ(b.exact.folded_replicas, 1u) << what;
    expect_same(b.folded, b.exact, what);
    // The observer sees every replica's kernels, collectives and transfers, at the same times.
    EXPECT_EQ(rf.seen, re.seen) << what;
    // Fewer events and flows: that is the point.
    EXPECT_LT(b.folded.events, b.exact.events) << what;
  }
}

TEST(FoldedReplay, DeepSpeedsBlockingSendsAndTiedEmbeddingFoldToo) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 4\ndata_parallel: 2\nglobal_batch_size: 16\n"
      "sequence_length: 1024\nframework: deepspeed\n",
      "ds.yaml", m, c);
  ASSERT_TRUE(p.framework.blocking_p2p);
  const TrainingJob job = build_training_job(m, p, c, cost);
  const Both b = replay_both(job);
  EXPECT_EQ(b.folded.folded_replicas, 2u);
  expect_same(b.folded, b.exact, "deepspeed");
}

TEST(FoldedReplay, ReplicasThatDifferAreEachReplayedOnTheirOwn) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  // Same devices per stage, different batch shares: not one program.
  const Plan p = load_plan_text(
      "global_batch_size: 12\nsequence_length: 1024\nreplicas:\n"
      "  - micro_batches: 8\n    stages:\n      - {layers: 4, devices: \"0-1\"}\n"
      "      - {layers: 4, devices: \"2-3\"}\n"
      "  - micro_batches: 4\n    stages:\n      - {layers: 4, devices: \"4-5\"}\n"
      "      - {layers: 4, devices: \"6-7\"}\n",
      "het.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  const Both b = replay_both(job);
  EXPECT_EQ(b.folded.folded_replicas, 1u);
  expect_same(b.folded, b.exact, "heterogeneous");
  EXPECT_EQ(b.folded.events, b.exact.events);
  // Their programs are their own.
  EXPECT_FALSE(job.copy(1, 0).program.shares_with(job.copy(0, 0).program));
}

// A stage of identical replicas is one program in memory (issue 38): built once, shared by every
// replica's copy, which differs only in its devices; a change to one copy (a slowed GPU's
// segments) is that copy's alone.
TEST(FoldedReplay, IdenticalReplicasShareOneProgramPerStage) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  TrainingJob job = build_training_job(m, plan(m, c, 2, 2, 4, 32), c, cost);
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t r = 1; r < 4; ++r) {
      const StageCopy& g = job.copy(r, s);
      EXPECT_TRUE(g.program.shares_with(job.copy(0, s).program)) << r << "," << s;
      EXPECT_TRUE(g.segments.shares_with(job.copy(0, s).segments)) << r << "," << s;
      EXPECT_EQ(g.replica, r);
      EXPECT_EQ(g.devices, (std::vector<platform::GpuId>{2 * r + 8 * s, 2 * r + 8 * s + 1}));
    }
  }
  EXPECT_FALSE(job.copy(0, 1).program.shares_with(job.copy(0, 0).program));
  size_t k = 0;  // a segment of kernels (not the framework's host time)
  while (job.copy(0, 0).segments[k].ops.empty()) ++k;
  const Time before = job.copy(0, 0).segments[k].ops[0].second;
  std::vector<double> slow(16, 1.0);
  slow[3] = 2;  // replica 1, stage 0 (Megatron's order: tensor, data, then pipeline rank)
  slow_down(job, slow);
  EXPECT_FALSE(job.copy(1, 0).segments.shares_with(job.copy(0, 0).segments));
  EXPECT_TRUE(job.copy(2, 0).segments.shares_with(job.copy(0, 0).segments));
  EXPECT_EQ(job.copy(0, 0).segments[k].ops[0].second, before);
  EXPECT_GT(job.copy(1, 0).segments[k].ops[0].second, before);
}

TEST(SharedVector, CopiesShareUntilOneIsWritten) {
  SharedVector<int> a{1, 2, 3};
  SharedVector<int> b = a;
  EXPECT_TRUE(b.shares_with(a));
  b.push_back(4);
  EXPECT_FALSE(b.shares_with(a));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 4u);
  SharedVector<int> c = a;
  c.write()[0] = 7;
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(c[0], 7);
  a.write()[1] = 9;  // a's own now: written in place
  EXPECT_EQ(a[1], 9);
  EXPECT_TRUE(SharedVector<int>().empty());
}

// 8 nodes of 2 GPUs, one NIC each, on a 2:1 oversubscribed fat tree of 2 spines: pipeline
// transfers between leaves take hashed spine paths, some colliding, so replicas differ.
constexpr const char* kHashedFabric = R"(name: hashed
node_types:
  - name: two
    gpu: a100-sxm4-80gb
    gpus: 2
    intra: {kind: nvswitch, link_class: nvlink3, bandwidth: 300GB/s}
    nics: {count: 2, link_class: ib_hdr, bandwidth: 200Gbps}
groups:
  - {node_type: two, count: 8}
fabric:
  kind: fat_tree
  nics_per_leaf: 4
  spines: 2
  oversubscription: 2
  latency: 100ns
)";

TEST(FoldedReplay, AsymmetricRoutesMakeItNoFasterAndAtMostAFewPercentSlower) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c(config::load_cluster_text(kHashedFabric, "hashed.yaml"));
  const DatasheetCostModel cost;
  for (Schedule s : {Schedule::one_f_one_b, Schedule::interleaved}) {
    // Each stage on its own leaf.
    const Plan p = plan(m, c, 1, 4, 4, 32, s, s == Schedule::interleaved ? 2 : 1);
    const TrainingJob job = build_training_job(m, p, c, cost);
    const Both b = replay_both(job);
    ASSERT_EQ(b.folded.folded_replicas, 4u);
    // Every replica at the pace of the slowest copy of each transfer: never faster than the
    // full replay, where only the replicas whose routes collide are slowed.
    EXPECT_GE(b.folded.iteration, b.exact.iteration) << to_string(s);
    EXPECT_LT(b.folded.iteration.seconds(), 1.05 * b.exact.iteration.seconds()) << to_string(s);
    // The case is asymmetric indeed: the full replay's replicas finish at different times.
    Time lo = Time::max(), hi;
    for (const CopyTimes& g : b.exact.copies) {
      lo = std::min(lo, g.finish);
      hi = std::max(hi, g.finish);
    }
    EXPECT_LT(lo, hi) << to_string(s);
  }
}

TEST(FoldedReplay, IsDeterministic) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c(config::load_cluster_text(kHashedFabric, "hashed.yaml"));
  const DatasheetCostModel cost;
  const Plan p = plan(m, c, 2, 2, 4, 32);
  const TrainingJob job = build_training_job(m, p, c, cost);
  Recorder a, b;
  const ReplayResult ra = replay(job, &a), rb = replay(job, &b);
  expect_same(ra, rb, "twice");
  EXPECT_EQ(a.seen, b.seen);
}

}  // namespace
}  // namespace hetsim::workload
