// The planner and its first policies: every proposal is a valid plan file, the search never
// returns a plan the memory model rejects, it is at least as fast as hand-written Megatron plans,
// the written plan replays to the predicted time, and impossible requests say why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/policy/neighbours.h"
#include "sim/policy/planner.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::policy {
namespace {

platform::Cluster cluster(const std::string& name, int nodes) {
  config::ClusterOptions o;
  o.nodes = nodes;
  return platform::Cluster(config::load_cluster(name, o));
}

workload::ModelConfig gpt(int layers, int heads = 16) {
  return workload::load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: " + std::to_string(heads) +
          "\nvocab: 50304\nsequence: 1024\nactivation: gelu\nnorm: layernorm\n"
          "position: learned\ntied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

Request request(const workload::ModelConfig& m, const platform::Cluster& c, int64_t batch) {
  Request r;
  r.model = &m;
  r.cluster = &c;
  r.global_batch = batch;
  r.sequence = m.sequence;
  return r;
}

double replay_seconds(const workload::ModelConfig& m, const platform::Cluster& c,
                      const std::string& plan_text, const workload::CostModel& cost) {
  const workload::Plan p = workload::load_plan_text(plan_text, "p.yaml", m, c);
  return workload::replay(workload::build_training_job(m, p, c, cost)).iteration.seconds();
}

TEST(Policies, EveryProposalIsAValidPlanOnAHomogeneousNode) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const Request r = request(m, c, 32);
  const std::vector<Proposal> meg = megatron_policy().propose(r);
  // tp 1,2,4,8 x pp 1,2,4,8 (dividing 8 GPUs) x micro-batches x schedules x recompute.
  EXPECT_GT(meg.size(), 40u);
  for (const Proposal& p : meg) {
    EXPECT_NO_THROW(workload::load_plan_text(p.plan, "megatron", m, c)) << p.plan;
  }
  const std::vector<Proposal> zero = zero_policy().propose(r);
  EXPECT_EQ(zero.size(), 3u * 3u * 2u);  // stages 1-3 x micro-batch 1, 2, 4 x recompute
  for (const Proposal& p : zero) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "zero", m, c);
    EXPECT_EQ(plan.data_parallel, 8);
    EXPECT_GE(plan.zero_stage, 1);
  }
}

// On DeepSpeed (its pipeline engine has one chunk per stage, and its sends wait for their
// receivers in that order) the megatron policy proposes no interleaved schedule, and every
// proposal is a plan DeepSpeed runs; on Megatron-LM the same request has interleaved ones.
TEST(Policies, NoInterleavedScheduleOnAFrameworkWithoutIt) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  Request r = request(m, c, 32);
  auto interleaved = [](const std::vector<Proposal>& props) {
    return std::count_if(props.begin(), props.end(), [](const Proposal& p) {
      return p.plan.find("schedule: interleaved") != std::string::npos;
    });
  };
  EXPECT_GT(interleaved(megatron_policy().propose(r)), 0);
  r.framework = "deepspeed";
  const std::vector<Proposal> ds = megatron_policy().propose(r);
  EXPECT_EQ(interleaved(ds), 0);
  for (const Proposal& p : ds) {
    EXPECT_NO_THROW(workload::load_plan_text(p.plan, "megatron", m, c)) << p.plan;
  }
}

TEST(Policies, WhaleSharesTheBatchInProportionToFlops) {
  // Two DGX H100 and two DGX A100 nodes: bf16 989 against 312 TFLOP/s per GPU (datasheets).
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c(config::load_cluster("mixed-h100-a100", {}));
  const std::vector<Proposal> props = whale_policy().propose(request(m, c, 128));
  ASSERT_FALSE(props.empty());
  size_t checked = 0;
  for (const Proposal& p : props) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "whale", m, c);
    if (plan.stages() > 1) continue;  // pipelines: WhaleSplitsPipelineLayersByFlops...
    double capacity = 0;
    int64_t total = 0;
    std::vector<double> cap;
    for (const workload::ReplicaPlan& rep : plan.replicas) {
      double sum = 0;
      for (platform::GpuId d : rep.stages.front().devices) {
        sum += workload::peak_flops(*c.gpu(d).profile, workload::Precision::bf16);
      }
      cap.push_back(sum);
      capacity += sum;
      total += rep.micro_batches;
    }
    EXPECT_EQ(total * plan.micro_batch_size, 128) << p.label;
    for (size_t i = 0; i < cap.size(); ++i) {
      const double exact = static_cast<double>(total) * cap[i] / capacity;
      EXPECT_LT(std::abs(plan.replicas[i].micro_batches - exact), 1.0) << p.label << " " << i;
    }
    if (plan.replicas.size() == 4 && plan.micro_batch_size == 1) {  // 48.6 : 15.4 -> 49 : 15
      EXPECT_EQ(plan.replicas[0].micro_batches * plan.micro_batch_size, 49) << p.label;
      EXPECT_EQ(plan.replicas[3].micro_batches * plan.micro_batch_size, 15) << p.label;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

// The replicas' compute time under a plan: spread between the busiest and the idlest.
double compute_spread_s(const workload::ModelConfig& m, const platform::Cluster& c,
                        const std::string& plan_text, const workload::CostModel& cost) {
  const workload::Plan p = workload::load_plan_text(plan_text, "p.yaml", m, c);
  const workload::ReplayResult r = workload::replay(workload::build_training_job(m, p, c, cost));
  Time lo = Time::max(), hi;
  for (const workload::CopyTimes& g : r.copies) {
    lo = std::min(lo, g.compute);
    hi = std::max(hi, g.compute);
  }
  return (hi - lo).seconds();
}

TEST(Policies, CannikinEqualisesTheReplicasFinishWithinOneMicroBatch) {
  // One replica per node (TP 8), one sequence per micro-batch: Cannikin's closed form from its
  // profiled lines T_i(b) = k_i + a_i b leaves the replicas' compute within one micro-batch of
  // each other; Whale's FLOP ratio (3.17) is further off, since a micro-batch on an H100 takes
  // more than 1/3.17 of one on an A100 (memory-bound kernels, fixed costs).
  const workload::ModelConfig m = workload::load_model("gpt3-1.3b");
  const platform::Cluster c(config::load_cluster("mixed-h100-a100", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  auto find = [&](const Policy& p) {
    for (const Proposal& x : p.propose(r)) {
      if (x.label.rfind("dp 4 x tp 8, micro-batch 1,", 0) == 0 &&
          x.label.find("recompute none") != std::string::npos)
        return x.plan;
    }
    ADD_FAILURE() << p.name() << ": no dp 4 x tp 8 proposal";
    return std::string();
  };
  const std::string cannikin = find(cannikin_policy()), whale = find(whale_policy());
  // One micro-batch on the slower replica: its two-micro-batch replay minus its one-micro-batch
  // one.
  const std::string one =
      "micro_batch_size: 1\nsequence_length: 2048\nreplicas:\n"
      "  - micro_batches: 1\n    stages:\n"
      "      - {layers: 24, tensor_parallel: 8, devices: \"24-31\"}\n";
  std::string two = one;
  two.replace(two.find("micro_batches: 1"), 16, "micro_batches: 2");
  const double a_slow = replay_seconds(m, c, two, cost) - replay_seconds(m, c, one, cost);
  ASSERT_GT(a_slow, 0);
  const double spread = compute_spread_s(m, c, cannikin, cost);
  EXPECT_LE(spread, a_slow) << cannikin;
  EXPECT_LT(spread, compute_spread_s(m, c, whale, cost)) << cannikin << whale;
}

TEST(Policies, AmpsProgrammeSplitsAFourLayerToyAsWorkedByHand) {
  // Two stages of two GPUs alike, the head costing two layers on the last stage, 4 micro-batches:
  // 1|3 costs 3 x 5 + 6 = 21, 2|2 3 x 4 + 6 = 18, 3|1 3 x 3 + 6 = 15: three layers, then one.
  EXPECT_EQ(amp_partition({{1, 1, 1, 1}, {1, 1, 1, 1}}, {0, 2}, 4), (std::vector<int>{3, 1}));
  // A first stage twice as slow, 8 micro-batches: 1|3 costs 7 x 3 + 5 = 26, 2|2 7 x 4 + 6 = 34,
  // 3|1 7 x 6 + 7 = 49.
  EXPECT_EQ(amp_partition({{2, 2, 2, 2}, {1, 1, 1, 1}}, {0, 0}, 8), (std::vector<int>{1, 3}));
  // One micro-batch: only the sum counts, and the fast stage takes all it can.
  EXPECT_EQ(amp_partition({{2, 2, 2, 2}, {1, 1, 1, 1}}, {0, 0}, 1), (std::vector<int>{1, 3}));
  // Fewer layers than stages: no split.
  EXPECT_TRUE(amp_partition({{1}, {1}}, {0, 0}, 4).empty());
}

TEST(Policies, AmpsProgrammeIsTheBestSplitByExhaustiveSearch) {
  // Random per-stage layer costs: the programme's split costs exactly the least of every split.
  uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<double>(x % 1000) / 100 + 0.01;
  };
  for (int trial = 0; trial < 40; ++trial) {
    const int S = 2 + trial % 3, L = S + 1 + trial % 6;
    const int64_t B = 1 + trial % 9;
    std::vector<std::vector<double>> cost(S, std::vector<double>(L));
    std::vector<double> fixed(S);
    for (auto& row : cost)
      for (double& v : row) v = next();
    for (double& f : fixed) f = next() / 2;
    auto objective = [&](const std::vector<int>& split) {
      double mx = 0, sum = 0;
      for (int s = 0, first = 0; s < S; first += split[s], ++s) {
        double t = fixed[s];
        for (int l = first; l < first + split[s]; ++l) t += cost[s][l];
        mx = std::max(mx, t);
        sum += t;
      }
      return static_cast<double>(B - 1) * mx + sum;
    };
    // Every composition of L into S positive parts.
    double best = 1e300;
    std::vector<int> split(S, 1);
    std::function<void(int, int)> walk = [&](int s, int left) {
      if (s == S - 1) {
        split[s] = left;
        best = std::min(best, objective(split));
        return;
      }
      for (int k = 1; k <= left - (S - 1 - s); ++k) {
        split[s] = k;
        walk(s + 1, left - k);
      }
    };
    walk(0, L);
    const std::vector<int> got = amp_partition(cost, fixed, B);
    ASSERT_EQ(got.size(), static_cast<size_t>(S));
    EXPECT_NEAR(objective(got), best, 1e-9 * best) << "trial " << trial;
  }
}

TEST(Policies, AmpGivesTheSlowerGpusFewerLayers) {
  // Two DGX A100 nodes and two DGX-1 V100 nodes (mixed-a100-v100), rank order: with two stages
  // of 16 GPUs, the first stage is all A100 and the second all V100, so the programme gives the
  // first stage more layers.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("mixed-a100-v100", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  const std::vector<Proposal> props = amp_policy().propose(r);
  ASSERT_FALSE(props.empty());
  size_t checked = 0;
  for (const Proposal& p : props) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "amp", m, c);
    if (plan.stages() != 2 || plan.tensor_parallel != 1) continue;
    const auto& st = plan.replicas.front().stages;
    ASSERT_EQ(c.gpu(st[0].devices.front()).profile->name.substr(0, 4), "a100") << p.plan;
    EXPECT_GT(st[0].layers, st[1].layers) << p.label;
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

TEST(Policies, WhaleSplitsPipelineLayersByFlopsThenMovesThemOffFullStages) {
  // Two DGX A100 (312 TFLOP/s fp16) and four 4-GPU V100 PCIe nodes (112): with two stages, the
  // A100s take stage 0 and 16 layers split 312 : 112, 11.77 : 4.23 -> 12 : 4.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("mixed-a100-v100", {}));
  size_t two = 0;
  for (const Proposal& p : whale_policy().propose(request(m, c, 64))) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "whale", m, c);
    if (plan.stages() != 2) continue;
    SCOPED_TRACE(p.label);
    ++two;
    const auto& st = plan.replicas.front().stages;
    EXPECT_EQ(c.gpu(st[0].devices.front()).profile->name, "a100-sxm4-80gb");
    EXPECT_EQ(c.gpu(st[1].devices.front()).profile->name, "v100-pcie-32gb");
    EXPECT_EQ(st[0].layers, 12);
    EXPECT_EQ(st[1].layers, 4);
  }
  EXPECT_GT(two, 0u);
  // Llama 2 70B on 16 RTX 4090 (24 GB) and 16 A100 80GB: by FLOP/s the 4090 stages would hold
  // more layers than fit, so layers move to the A100 stages until every stage fits.
  const workload::ModelConfig big = workload::load_model("llama2-70b");
  const platform::Cluster mixed(config::load_cluster("mixed-4090-a100", {}));
  size_t moved = 0;
  for (const Proposal& p : whale_policy().propose(request(big, mixed, 64))) {
    if (p.label.find("moved for memory") == std::string::npos) continue;
    SCOPED_TRACE(p.label);
    const workload::Plan plan = workload::load_plan_text(p.plan, "whale", big, mixed);
    const std::vector<workload::DeviceMemory> memory =
        workload::memory_per_copy(workload::skeleton_job(big, plan, mixed));
    if (std::any_of(memory.begin(), memory.end(),
                    [](const workload::DeviceMemory& d) { return d.oom(); }))
      continue;  // nothing more could move: the planner drops it
    ++moved;
    // The A100 stages (the later ones) hold more layers than the 4090 stages.
    const auto& st = plan.replicas.front().stages;
    EXPECT_GT(st.back().layers, st.front().layers);
  }
  EXPECT_GT(moved, 0u);
}

TEST(Neighbours, EachChangesOneThingAndLoads) {
  // A uniform four-stage pipeline: the micro-batch doubled and halved, two other recomputes,
  // ZeRO 1, interleaved by 2, and a layer across each of the three boundaries both ways.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const std::string text =
      "micro_batch_size: 2\nglobal_batch_size: 32\npipeline_parallel: 4\ndata_parallel: 2\n";
  const workload::Plan p = workload::load_plan_text(text, "p.yaml", m, c);
  std::set<std::string> changes;
  for (const Neighbour& n : neighbours(text, p, c)) {
    SCOPED_TRACE(n.change);
    changes.insert(n.change);
    const workload::Plan q = workload::load_plan_text(n.plan, "n.yaml", m, c);
    EXPECT_EQ(q.global_batch_size, 32);
    if (n.change.rfind("a layer from stage 1 to 2", 0) == 0) {
      EXPECT_EQ(q.replicas[0].stages[1].layers, 3);
      EXPECT_EQ(q.replicas[0].stages[2].layers, 5);
      EXPECT_EQ(q.replicas[1].stages[2].layers, 5);
    }
    if (n.change == "micro-batch 4") {
      EXPECT_EQ(q.replicas[0].micro_batches, 4);
    }
  }
  EXPECT_EQ(changes,
            (std::set<std::string>{"micro-batch 4", "micro-batch 1", "recompute selective",
                                   "recompute full", "ZeRO 1", "interleaved by 2",
                                   "a layer from stage 0 to 1", "a layer from stage 1 to 0",
                                   "a layer from stage 1 to 2", "a layer from stage 2 to 1",
                                   "a layer from stage 2 to 3", "a layer from stage 3 to 2"}));
}

TEST(Neighbours, FullRecomputeStepsToPartialAndBack) {
  // Four stages of 4 layers under full recompute: half the chunk's layers (2) recomputed; from 2,
  // down to 1 or up to 3; from 3, up to every layer (the key dropped) or down to 1.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const std::string base =
      "micro_batch_size: 2\nglobal_batch_size: 32\npipeline_parallel: 4\ndata_parallel: 2\n"
      "recompute: full\n";
  auto partial = [&](const std::string& extra) {
    const std::string text = base + extra;
    const workload::Plan p = workload::load_plan_text(text, "p.yaml", m, c);
    std::map<std::string, int> out;  // change -> recompute_layers of the plan it gives
    for (const Neighbour& n : neighbours(text, p, c)) {
      if (n.change.rfind("recompute_layers ", 0) != 0 && n.change != "recompute every layer")
        continue;
      const workload::Plan q = workload::load_plan_text(n.plan, "n.yaml", m, c);
      EXPECT_EQ(q.recompute, workload::Recompute::full) << n.change;
      out[n.change] = q.recompute_layers;
    }
    return out;
  };
  EXPECT_EQ(partial(""), (std::map<std::string, int>{{"recompute_layers 2", 2}}));
  EXPECT_EQ(partial("recompute_layers: 2\n"),
            (std::map<std::string, int>{{"recompute_layers 1", 1}, {"recompute_layers 3", 3}}));
  EXPECT_EQ(partial("recompute_layers: 3\n"),
            (std::map<std::string, int>{{"recompute_layers 1", 1}, {"recompute every layer", 0}}));
}

TEST(Planner, TheSearchAroundTheProposalsImprovesWhalesSplit) {
  // Whale splits the layers by FLOP/s; on A100 + V100 behind 25 GbE the V100 stages should hold
  // fewer, and the search moves layers onto the A100 stages. Never worse than the proposals alone,
  // and every plan it keeps fits and replays to its reported time.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("mixed-a100-v100", {}));
  const workload::DatasheetCostModel cost;
  const Request r = request(m, c, 64);
  SearchOptions off;
  off.explore = false;
  const Search without = search(r, {&whale_policy()}, cost, off);
  const Search with = search(r, {&whale_policy()}, cost);
  EXPECT_EQ(without.explored, 0u);
  EXPECT_GT(with.explored, 0u);
  EXPECT_GT(with.reached, 0u);
  EXPECT_LT(with.ranked.front().iteration_s, without.ranked.front().iteration_s);
  EXPECT_EQ(with.ranked.front().proposal.policy, "search");
  EXPECT_NE(with.ranked.front().proposal.label.find("a layer from stage"), std::string::npos);
  for (const Candidate& x : with.ranked) {
    if (x.proposal.policy != "search" || !x.report) continue;
    SCOPED_TRACE(x.proposal.label);
    EXPECT_NEAR(replay_seconds(m, c, x.proposal.plan, cost), x.iteration_s, 1e-12);
    EXPECT_FALSE(x.report->oom);
  }
}

TEST(Policies, MetisOrdersTheGpuTypesAndGivesTheFasterStageMoreLayers) {
  // Mixed A100 / V100: both type orders are proposed, and in each two-stage plan the A100 stage
  // holds more layers than the V100 stage, whichever comes first.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("mixed-a100-v100", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  const std::vector<Proposal> props = metis_policy().propose(r);
  ASSERT_FALSE(props.empty());
  size_t a100_first = 0, v100_first = 0;
  for (const Proposal& p : props) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "metis", m, c);
    if (plan.stages() != 2) continue;
    const auto& st = plan.replicas.front().stages;
    const bool a_first = c.gpu(st[0].devices.front()).profile->name.rfind("a100", 0) == 0;
    (a_first ? a100_first : v100_first)++;
    const int a100_layers = a_first ? st[0].layers : st[1].layers;
    const int v100_layers = a_first ? st[1].layers : st[0].layers;
    EXPECT_GT(a100_layers, v100_layers) << p.label;
  }
  EXPECT_GT(a100_first, 0u);
  EXPECT_GT(v100_first, 0u);
}

TEST(Policies, MetisStagedPlansGiveEachStageItsOwnDegreesAndSplitMixedStagesBySpeed) {
  // GPT-3 13B on 16 A100 80GB and 16 V100 32GB: Metis's staged proposals (each stage its own
  // groups) start every stage at pure data parallelism and double a stage's tensor degree while
  // its groups do not fit; a stage that mixes the types gives each A100 group at least the
  // samples of each V100 group of its degree.
  const workload::ModelConfig m = workload::load_model("gpt3-13b");
  const platform::Cluster c(config::load_cluster("mixed-a100-v100", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  size_t staged = 0, own_degrees = 0, mixed = 0;
  for (const Proposal& p : metis_policy().propose(r)) {
    const workload::Plan plan = workload::load_plan_text(p.plan, "metis", m, c);
    if (!plan.staged()) continue;
    SCOPED_TRACE(p.label);
    ++staged;
    // Every group fits: the intra-stage step stops there.
    for (const workload::DeviceMemory& d :
         workload::memory_per_copy(workload::skeleton_job(m, plan, c)))
      EXPECT_FALSE(d.oom());
    std::set<std::pair<size_t, int>> shapes;  // (groups, tensor degree) per stage
    for (const workload::DataParallelStage& ds : plan.dp_stages) {
      shapes.insert({ds.groups.size(), ds.groups.front().tensor_parallel()});
      int64_t a100 = 0, v100 = std::numeric_limits<int64_t>::max();
      for (size_t j = 0; j < ds.groups.size(); ++j) {
        const bool fast = c.gpu(ds.groups[j].devices.front()).profile->name.rfind("a100", 0) == 0;
        if (fast) {
          a100 = std::max(a100, ds.batch[j]);
        } else {
          v100 = std::min(v100, ds.batch[j]);
        }
      }
      if (a100 > 0 && v100 != std::numeric_limits<int64_t>::max()) {
        ++mixed;
        EXPECT_GE(a100, v100);
      }
    }
    if (shapes.size() > 1) ++own_degrees;
  }
  EXPECT_GT(staged, 0u);
  EXPECT_GT(own_degrees, 0u);
  EXPECT_GT(mixed, 0u);
}

TEST(Policies, HetPipeVirtualWorkersByNodeAndByEqualMix) {
  // AMP's cluster: three nodes of 4 V100 and one of 4 T4.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("aws-p3-g4dn", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  const std::vector<Proposal> props = hetpipe_policy().propose(r);
  ASSERT_FALSE(props.empty());
  const workload::Precision precision = cluster_precision(c);
  size_t np = 0, ed = 0;
  for (const Proposal& p : props) {
    SCOPED_TRACE(p.label);
    const workload::Plan plan = workload::load_plan_text(p.plan, "hetpipe", m, c);
    ASSERT_EQ(plan.replicas.size(), 4u);
    auto node_of = [&](const workload::StagePlan& st) { return c.gpu(st.devices[0]).node; };
    if (p.label.rfind("NP", 0) == 0) {
      ++np;
      // Each VW one node: one GPU per stage, four stages.
      for (const auto& rep : plan.replicas) {
        ASSERT_EQ(rep.stages.size(), 4u);
        for (const auto& st : rep.stages) EXPECT_EQ(node_of(st), node_of(rep.stages[0]));
      }
      // Micro-batches in proportion to the VW's speed: the T4 node's per micro-batch pace is its
      // busiest stage, ceil(16 / 4) layers at a T4's layer time, and likewise for a V100 node.
      const bool full = p.label.find("recompute full") != std::string::npos;
      LayerProfiler prof(r, precision, 1, plan.micro_batch_size, full);
      const double v100 = prof.of(*c.gpu(0).profile).layer;
      const double t4 = prof.of(*c.gpu(12).profile).layer;
      // The V100 VWs alike, within the one micro-batch largest remainder may add.
      const int64_t fast = plan.replicas[0].micro_batches, slow = plan.replicas[3].micro_batches;
      EXPECT_LE(std::abs(plan.replicas[1].micro_batches - fast), 1);
      EXPECT_LE(std::abs(plan.replicas[2].micro_batches - fast), 1);
      const double total = static_cast<double>(plan.global_batch_size / plan.micro_batch_size);
      const double want_slow = std::max(1.0, total * (1 / t4) / (3 / v100 + 1 / t4));
      EXPECT_NEAR(static_cast<double>(slow), want_slow, 0.1 * want_slow + 1.0);
      if (total >= 16) {
        EXPECT_LT(slow, fast);
      }
    } else {
      ++ed;
      // An equal mix: each VW one GPU of every node, the VWs alike.
      EXPECT_FALSE(plan.asymmetric());
      for (const auto& rep : plan.replicas) {
        std::set<uint32_t> nodes;
        for (const auto& st : rep.stages) nodes.insert(node_of(st));
        EXPECT_EQ(nodes.size(), 4u);
        EXPECT_EQ(rep.micro_batches, plan.replicas[0].micro_batches);
      }
    }
  }
  EXPECT_GT(np, 0u);
  EXPECT_GT(ed, 0u);
}

TEST(Policies, FlashFlexBalancesPipelinesAndGivesEachTypeItsDegree) {
  // AMP's cluster (three nodes of 4 V100, one of 4 T4): pipelines balanced by FLOP/s, within one
  // node's; one tensor-parallel degree per GPU type in each proposal; and, where a pipeline
  // holds the T4 node and another does not, layers held over different degrees, which replay.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("aws-p3-g4dn", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  r.cost = &cost;
  const std::vector<Proposal> props = flashflex_policy().propose(r);
  ASSERT_FALSE(props.empty());
  const workload::Precision precision = cluster_precision(c);
  const double node = 4 * workload::peak_flops(*c.gpu(0).profile, precision);
  size_t mixed = 0;
  for (const Proposal& p : props) {
    SCOPED_TRACE(p.label);
    const workload::Plan plan = workload::load_plan_text(p.plan, "flashflex", m, c);
    std::vector<double> flops;
    std::map<const config::GpuProfile*, int> degree;
    for (const auto& rep : plan.replicas) {
      double f = 0;
      for (const auto& st : rep.stages) {
        const config::GpuProfile* gpu = c.gpu(st.devices[0]).profile;
        f += workload::peak_flops(*gpu, precision) * static_cast<double>(st.devices.size());
        auto [it, fresh] = degree.try_emplace(gpu, st.tensor_parallel());
        EXPECT_EQ(it->second, st.tensor_parallel());
      }
      flops.push_back(f);
    }
    EXPECT_LE(*std::max_element(flops.begin(), flops.end()) -
                  *std::min_element(flops.begin(), flops.end()),
              node * (1 + 1e-12));
    const workload::TrainingJob job = workload::build_training_job(m, plan, c, cost);
    const bool sharded = std::any_of(job.dp_syncs.begin(), job.dp_syncs.end(), [&](const auto& s) {
      return std::any_of(s.members.begin(), s.members.end(), [&](const auto& g) {
        return job.copies[g.first].devices.size() != s.pieces;
      });
    });
    if (sharded && mixed++ < 3) {
      const double t = workload::replay(job).iteration.seconds();
      EXPECT_GT(t, 0.0);
      EXPECT_EQ(workload::replay(job).iteration.seconds(), t);
    }
  }
  EXPECT_GT(mixed, 0u);
}

TEST(Planner, CephalosStateSharesFitWhereEvenShardsCannot) {
  // Llama 2 70B on 16 RTX 4090 (24 GB) and 16 A100 (80 GB): FSDP's even shards need 43.5 GiB per
  // GPU; Cephalo's shares in proportion to free memory put most of the state on the A100s, and
  // its batch shares give them more micro-batches.
  const workload::ModelConfig m = workload::load_model("llama2-70b");
  const platform::Cluster c(config::load_cluster("mixed-4090-a100", {}));
  const workload::DatasheetCostModel cost;
  const Request r = request(m, c, 64);
  EXPECT_THROW(search(r, {&zero_policy()}, cost), InputError);
  const Search res = search(r, {&cephalo_policy()}, cost);
  ASSERT_FALSE(res.ranked.empty());
  const Candidate& best = res.ranked.front();
  const workload::Plan p = workload::load_plan_text(best.proposal.plan, "p.yaml", m, c);
  EXPECT_TRUE(p.layered);
  double a100_share = 0, rtx_share = 0;
  int a100_mbs = 0, rtx_mbs = 0;
  for (const auto& rep : p.replicas) {
    const bool a100 = c.gpu(rep.stages[0].devices[0]).profile->name.rfind("a100", 0) == 0;
    (a100 ? a100_share : rtx_share) += rep.state_share;
    (a100 ? a100_mbs : rtx_mbs) += rep.micro_batches;
  }
  EXPECT_NEAR(a100_share + rtx_share, 1.0, 1e-6);
  EXPECT_GT(a100_share, 2 * rtx_share) << best.proposal.label;
  EXPECT_GT(a100_mbs, rtx_mbs) << best.proposal.label;
  const workload::TrainingJob job = workload::skeleton_job(m, p, c);
  for (const auto& d : workload::memory_per_copy(job)) EXPECT_LE(d.peak, d.capacity);
}

TEST(Planner, HetPipesAsymmetricPlansReplayToThePrediction) {
  // VWs of different speeds give an asymmetric plan (its own split and share per VW); the
  // planner's pick is a plan simulate reads and replays to the time it reported.
  const workload::ModelConfig m = gpt(16);
  const platform::Cluster c(config::load_cluster("aws-p3-g4dn", {}));
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 64);
  SearchOptions all;
  all.prune = false;
  const Search res = search(r, {&hetpipe_policy()}, cost, all);
  ASSERT_FALSE(res.ranked.empty());
  bool asymmetric = false;
  for (const Candidate& cand : res.ranked) {
    const workload::Plan p = workload::load_plan_text(cand.proposal.plan, "p.yaml", m, c);
    asymmetric = asymmetric || p.asymmetric();
    EXPECT_EQ(cand.outcome, Candidate::Outcome::replayed) << cand.proposal.label;
    // The planner's estimate: the compute bound it prunes by is one, and the estimate is within
    // a factor of two (it leaves out the segments' reductions sharing a node's NIC: up to 45%
    // under on this cluster's 10 Gb/s Ethernet).
    const workload::Plan plan = workload::load_plan_text(cand.proposal.plan, "p.yaml", m, c);
    Estimator est(m, c, cost);
    EXPECT_LE(est.estimate(plan).compute_s, cand.iteration_s) << cand.proposal.label;
    EXPECT_GT(cand.estimate_s, 0.5 * cand.iteration_s) << cand.proposal.label;
    EXPECT_LT(cand.estimate_s, 1.5 * cand.iteration_s) << cand.proposal.label;
  }
  EXPECT_TRUE(asymmetric);
  const Candidate& best = res.ranked.front();
  EXPECT_DOUBLE_EQ(replay_seconds(m, c, best.proposal.plan, cost), best.iteration_s);
}

TEST(Planner, OnAMixedClusterWhalesSharesBeatUniformMegatron) {
  // GPT-3 1.3B, 128 sequences: enough work per GPU that the A100s' pace decides uniform plans.
  const workload::ModelConfig m = workload::load_model("gpt3-1.3b");
  const platform::Cluster c(config::load_cluster("mixed-h100-a100", {}));
  const workload::DatasheetCostModel cost;
  const double megatron =
      search(request(m, c, 128), {&megatron_policy()}, cost).ranked.front().iteration_s;
  const double whale =
      search(request(m, c, 128), {&whale_policy()}, cost).ranked.front().iteration_s;
  EXPECT_LT(whale, 0.8 * megatron);  // the H100 replicas no longer wait for the A100 ones
}

TEST(Planner, IsAtLeastAsFastAsHandWrittenMegatronPlansAndItsPlanReplaysToThePrediction) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  const Search s = search(request(m, c, 32), policies(), cost);
  ASSERT_FALSE(s.ranked.empty());
  const Candidate& best = s.ranked.front();
  for (const char* hand : {"tensor_parallel: 8\nglobal_batch_size: 32\n",
                           "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 2\n"
                           "global_batch_size: 32\n",
                           "data_parallel: 8\nmicro_batch_size: 4\nglobal_batch_size: 32\n"}) {
    EXPECT_LE(best.iteration_s, replay_seconds(m, c, hand, cost)) << hand;
  }
  // Best first, and what was written replays to what was predicted.
  for (size_t i = 1; i < s.ranked.size(); ++i) {
    EXPECT_LE(s.ranked[i - 1].iteration_s, s.ranked[i].iteration_s);
  }
  EXPECT_EQ(replay_seconds(m, c, best.proposal.plan, cost), best.iteration_s);
  // Every proposal, and every plan the search kept, comes back ranked or rejected.
  EXPECT_EQ(s.proposed + s.reached, s.ranked.size() + s.rejected.size());
}

TEST(Planner, SkippingPlansWhoseComputeAloneIsSlowerLeavesTheTopListExact) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  SearchOptions all;
  all.prune = false;
  const Search full = search(request(m, c, 32), policies(), cost, all);
  for (size_t keep : {1, 3, 5}) {
    SearchOptions o;
    o.keep = keep;
    const Search pruned = search(request(m, c, 32), policies(), cost, o);
    size_t skipped = 0;
    for (const Candidate& k : pruned.rejected) skipped += k.outcome == Candidate::Outcome::pruned;
    EXPECT_GT(skipped, 0u) << keep;
    EXPECT_EQ(pruned.ranked.size() + skipped, full.ranked.size()) << keep;
    ASSERT_GE(pruned.ranked.size(), keep);
    for (size_t i = 0; i < keep; ++i) {
      EXPECT_EQ(pruned.ranked[i].iteration_s, full.ranked[i].iteration_s) << keep << " " << i;
    }
  }
}

TEST(Planner, WithAReplayLimitOnlyTheBestEstimatesAreReplayedAndTheBestIsStillFound) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  const Search full = search(request(m, c, 32), policies(), cost);
  SearchOptions o;
  o.replay_limit = 3;
  const Search s = search(request(m, c, 32), policies(), cost, o);
  size_t replayed = 0, estimated = 0;
  for (const Candidate& k : s.ranked) {
    if (k.outcome == Candidate::Outcome::replayed) {
      ++replayed;
      EXPECT_TRUE(k.report.has_value());
      EXPECT_EQ(estimated, 0u) << "replayed plans come first";
    } else {
      ASSERT_EQ(k.outcome, Candidate::Outcome::estimated);
      EXPECT_FALSE(k.report.has_value());
      EXPECT_EQ(k.iteration_s, k.estimate_s);
      ++estimated;
    }
  }
  EXPECT_EQ(replayed, 3u);
  EXPECT_GT(estimated, 50u);
  // The estimate ranks this cluster's plans as the replay does: three replays find the best.
  EXPECT_EQ(s.ranked.front().iteration_s, full.ranked.front().iteration_s);
}

TEST(Planner, NeverReturnsAPlanThatDoesNotFitAndSaysWhyItDroppedOthers) {
  // 13B parameters on 8 GPUs: data parallelism with only the optimizer sharded holds 6 bytes per
  // parameter (78 GB) on every GPU before any activation, so those plans are dropped; plans that
  // shard more, or split the model, fit.
  const workload::ModelConfig m = workload::load_model("gpt3-13b");
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  const Search s = search(request(m, c, 8), policies(), cost);
  ASSERT_FALSE(s.ranked.empty());
  for (const Candidate& k : s.ranked) {
    EXPECT_FALSE(k.report->oom) << k.proposal.label;
    EXPECT_LE(k.peak_bytes, k.capacity_bytes) << k.proposal.label;
  }
  size_t oom = 0;
  for (const Candidate& k : s.rejected) {
    if (k.outcome != Candidate::Outcome::out_of_memory) continue;
    ++oom;
    EXPECT_NE(k.reason.find("per GPU where the GPU holds 80.0 GiB"), std::string::npos) << k.reason;
  }
  EXPECT_GT(oom, 0u);
}

TEST(Planner, PlanSetsReachEveryProposalAndKeysThePoliciesChooseAreRefused) {
  const workload::ModelConfig m = gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const workload::DatasheetCostModel cost;
  Request r = request(m, c, 32);
  const Search flash = search(r, {&megatron_policy()}, cost);
  r.plan_sets = {"attention=standard"};
  const Search standard = search(r, {&megatron_policy()}, cost);
  for (const Candidate& k : standard.ranked) {
    EXPECT_NE(k.proposal.plan.find("\nattention: standard\n"), std::string::npos);
    EXPECT_FALSE(workload::load_plan_text(k.proposal.plan, "p.yaml", m, c).flash_attention);
  }
  // Unfused attention stores and recomputes more: the best plan is slower.
  EXPECT_GT(standard.ranked.front().iteration_s, flash.ranked.front().iteration_s);
  r.plan_sets = {"recompute=full"};
  try {
    search(r, {&megatron_policy()}, cost);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--plan-set recompute=full: recompute is not a key the planner leaves to you (the "
              "policies choose degrees, batch, schedule, recompute and ZeRO; expected one of "
              "attention, precision, main_grads, bucket_size, gradient_reduction)");
  }
  r.plan_sets = {"attention"};
  EXPECT_THROW(search(r, {&megatron_policy()}, cost), InputError);
}

TEST(Planner, ImpossibleRequestsSayWhy) {
  const workload::DatasheetCostModel cost;
  auto message = [&](const workload::ModelConfig& m, const platform::Cluster& c, int64_t batch,
                     const std::string& policy = "all") {
    try {
      search(request(m, c, batch), select_policies(policy), cost);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // GPT-3 175B on one DGX A100 node: nothing fits, and the message says by how much.
  const workload::ModelConfig big = workload::load_model("gpt3-175b");
  const std::string oom = message(big, cluster("dgx-a100", 1), 8);
  EXPECT_EQ(oom.rfind("no plan fits in memory: the closest (", 0), 0u) << oom;
  EXPECT_NE(oom.find(" missing); use more or larger GPUs, or a smaller model"), std::string::npos)
      << oom;
  // One attention head and 2 layers on 16 GPUs: data parallelism of 8 or 16 cannot split 7.
  const std::string batch = message(gpt(2, 1), cluster("dgx-a100", 2), 7);
  EXPECT_EQ(
      batch,
      "no plan for a global batch of 7 on 16 GPUs: megatron, zero, whale, cannikin, amp, metis, "
      "hetpipe, flashflex, cephalo proposed none (the batch "
      "must divide into equal shares of whole micro-batches over the data-parallel "
      "replicas)");
  try {
    select_policies("whales");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--policy: unknown policy \"whales\" (expected all or one of megatron, zero, whale, "
              "cannikin, amp, metis, hetpipe, flashflex, cephalo)");
  }
}

}  // namespace
}  // namespace hetsim::policy
