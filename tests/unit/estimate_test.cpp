// The planner's analytic estimate against the replay: over every plan the policies propose on
// homogeneous, mixed, PCIe and Ethernet clusters (a few hundred), a mean error under 10% and a
// rank correlation of at least 0.95, as the planner issue asks; and exact closed forms on cases
// small enough to work by hand.
#include "sim/policy/estimate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "sim/policy/planner.h"
#include "sim/workload/replay.h"
#include "sim/workload/training_job.h"
#include "tests/validation/rank_correlation.h"

namespace hetsim::policy {
namespace {

platform::Cluster cluster(const std::string& name, int nodes) {
  config::ClusterOptions o;
  if (nodes > 0) o.nodes = nodes;
  return platform::Cluster(config::load_cluster(name, o));
}

workload::ModelConfig gpt(int layers, int hidden = 1024, int heads = 16) {
  return workload::load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: " + std::to_string(hidden) + "\nheads: " + std::to_string(heads) +
          "\nvocab: 50304\nsequence: 1024\nactivation: gelu\nnorm: layernorm\n"
          "position: learned\ntied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

struct Pair {
  std::string label;
  double estimate = 0, replay = 0;
};

// Every proposal of every policy that fits, estimated and replayed.
std::vector<Pair> pairs(const workload::ModelConfig& m, const platform::Cluster& c, int64_t batch,
                        const std::string& framework = "") {
  const workload::DatasheetCostModel cost;
  Request r;
  r.model = &m;
  r.cluster = &c;
  r.global_batch = batch;
  r.sequence = m.sequence;
  r.framework = framework;
  SearchOptions all;
  all.prune = false;
  const Search s = search(r, policies(), cost, all);
  std::vector<Pair> out;
  for (const Candidate& k : s.ranked) {
    out.push_back({k.proposal.policy + " " + k.proposal.label, k.estimate_s, k.iteration_s});
  }
  return out;
}

double replay_s(const workload::ModelConfig& m, const platform::Cluster& c,
                const workload::Plan& p) {
  const workload::DatasheetCostModel cost;
  return workload::replay(workload::build_training_job(m, p, c, cost)).iteration.seconds();
}

TEST(Estimate, OnOneGpuIsTheReplayExactly) {
  // One GPU: micro-batches back to back, then the optimizer; nothing overlaps, nothing waits.
  const workload::ModelConfig m = gpt(4);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  Estimator est(m, c, cost);
  for (const char* extra : {"recompute: none\n", "recompute: full\n", "recompute: selective\n"}) {
    const workload::Plan p = workload::load_plan_text(
        std::string("tensor_parallel: 1\npipeline_parallel: 1\ndata_parallel: 1\n"
                    "devices: [0]\nmicro_batch_size: 2\nglobal_batch_size: 8\n"
                    "sequence_length: 1024\n") +
            extra,
        "p.yaml", m, c);
    const Estimate e = est.estimate(p);
    EXPECT_NEAR(e.iteration_s, replay_s(m, c, p), 1e-9) << extra;
    EXPECT_EQ(e.dp_exposed_s, 0.0);
    EXPECT_LE(e.compute_s, e.iteration_s);
  }
}

TEST(Estimate, APipelinesBubbleIsTheClosedForm) {
  // Four stages of two layers on one NVSwitch node, 1F1B: (m - 1) x the slowest stage's f + b,
  // plus every stage's f + b once, plus the fill's transfers; the replay agrees within 1%.
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  Estimator est(m, c, cost);
  std::vector<double> at;
  for (int mb : {4, 8, 16}) {
    const workload::Plan p = workload::load_plan_text(
        "tensor_parallel: 1\npipeline_parallel: 4\ndata_parallel: 1\ndevices: [0, 1, 2, 3]\n"
        "micro_batch_size: 1\nglobal_batch_size: " +
            std::to_string(mb) + "\nsequence_length: 1024\n",
        "p.yaml", m, c);
    const Estimate e = est.estimate(p);
    const double r = replay_s(m, c, p);
    EXPECT_NEAR(e.iteration_s / r, 1.0, 0.01) << mb << " micro-batches";
    at.push_back(e.pipeline_s);
  }
  // The bubble is fixed: each further micro-batch adds the slowest stage's f + b (the last, with
  // the logits), so 8 more add twice what 4 more did.
  EXPECT_NEAR(at[2] - at[1], 2 * (at[1] - at[0]), 1e-12);
}

TEST(Estimate, FollowsTheReplayOverHundredsOfPlansWithin10PercentAndRanksThem) {
  std::vector<Pair> all;
  auto add = [&](const char* name, std::vector<Pair> p) {
    double err = 0;
    std::vector<double> e, rp;
    for (const Pair& x : p) {
      err += std::abs(x.estimate - x.replay) / x.replay;
      e.push_back(x.estimate);
      rp.push_back(x.replay);
    }
    std::printf("%-28s %4zu plans  mean error %5.2f%%  Spearman %.3f\n", name, p.size(),
                100 * err / static_cast<double>(p.size()), validation::spearman(e, rp));
    for (const Pair& x : p) {
      if (std::getenv("HETSIM_ESTIMATE_DETAIL"))
        std::printf("  %+7.1f%%  %9.4f %9.4f  %s\n", 100 * (x.estimate / x.replay - 1), x.estimate,
                    x.replay, x.label.c_str());
    }
    all.insert(all.end(), p.begin(), p.end());
  };
  const workload::ModelConfig small = gpt(8);
  add("dgx-a100 x1, 8 layers", pairs(small, cluster("dgx-a100", 1), 32));
  add("dgx-a100 x2", pairs(small, cluster("dgx-a100", 2), 32));
  add("mixed-h100-a100", pairs(small, cluster("mixed-h100-a100", 0), 128));
  add("pcie-v100 x2", pairs(small, cluster("pcie-v100", 2), 32));
  add("g4dn T4 Ethernet, deepspeed",
      pairs(small, cluster("aws-g4dn-12xlarge", 0), 32, "deepspeed"));
  double err = 0;
  std::vector<double> e, rp;
  for (const Pair& x : all) {
    err += std::abs(x.estimate - x.replay) / x.replay;
    e.push_back(x.estimate);
    rp.push_back(x.replay);
  }
  err /= static_cast<double>(all.size());
  const double rho = validation::spearman(e, rp);
  std::printf("all %zu plans: mean error %.2f%%, Spearman %.3f\n", all.size(), 100 * err, rho);
  EXPECT_GE(all.size(), 200u);
  EXPECT_LT(err, 0.10);
  EXPECT_GE(rho, 0.95);
}

}  // namespace
}  // namespace hetsim::policy
