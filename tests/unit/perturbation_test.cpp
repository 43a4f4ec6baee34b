// What-ifs (sim/workload/replay/perturbation.h): a slow GPU in a pure data-parallel plan checked by
// hand, the folded replay never folds replicas a perturbation made different, degraded links,
// seeded stragglers, bad input naming the field; and the cost figures and the Pareto front.
#include <gtest/gtest.h>

#include <functional>

#include "sim/core/error.h"
#include "sim/policy/replan.h"
#include "sim/report/training_report.h"
#include "sim/study/results.h"
#include "sim/study/run.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/perturbation.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::workload {
namespace {

platform::Cluster cluster(int nodes = 1) {
  config::ClusterOptions o;
  o.nodes = nodes;
  return platform::Cluster(config::load_cluster("dgx-a100", o));
}

ModelConfig small_gpt() {
  return load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: 8\nhidden: 1024\nheads: 16\nvocab: 50304\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

// Data parallelism 2 on GPUs 0 and 1, one micro-batch of 8 sequences each (kernels large enough
// that few segments are bound by host issue time), gradients reduced after the backward pass:
// each replica computes, then the all-reduce runs alone, then the optimizer.
Plan dp2(const ModelConfig& m, const platform::Cluster& c) {
  return load_plan_text(
      "data_parallel: 2\ndevices: \"0-1\"\nglobal_batch_size: 16\nmicro_batch_size: 8\n"
      "sequence_length: 1024\n"
      "gradient_reduction: after_backward\n",
      "dp2.yaml", m, c);
}

std::vector<double> factors(const platform::Cluster& c, std::initializer_list<double> first) {
  std::vector<double> f(c.gpu_count(), 1.0);
  std::copy(first.begin(), first.end(), f.begin());
  return f;
}

ReplayResult run(const TrainingJob& job, bool exact = false) {
  ReplayOptions o;
  o.exact = exact;
  return replay(job, nullptr, o);
}

void expect_same(const ReplayResult& a, const ReplayResult& b, const std::string& what) {
  EXPECT_EQ(a.iteration, b.iteration) << what;
  ASSERT_EQ(a.copies.size(), b.copies.size());
  for (size_t g = 0; g < a.copies.size(); ++g) {
    EXPECT_EQ(a.copies[g].compute, b.copies[g].compute) << what << " copy " << g;
    EXPECT_EQ(a.copies[g].dp_wait, b.copies[g].dp_wait) << what << " copy " << g;
    EXPECT_EQ(a.copies[g].finish, b.copies[g].finish) << what << " copy " << g;
  }
}

TEST(Perturbation, SlowGpuInPureDataParallelDoublesItsComputeAndTheIterationFollowsIt) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  const Plan p = dp2(m, c);
  const DatasheetCostModel cost;
  const TrainingJob base = build_training_job(m, p, c, cost);
  // GPU 1's replica by hand: each kernel 2x as long; a segment bound by host issue time (longer
  // than its kernels: the optimizer's many small kernels here) stays at least that long.
  Time slow_compute;
  size_t host_bound = 0;
  const StageCopy& g1 = base.copies[1];
  for (const Task& t : g1.program) {
    if (t.kind != TaskKind::compute) continue;
    const Segment& s = g1.segments[t.index];
    Time k;
    for (const auto& [op, d] : s.ops) k += d;
    if (s.ops.empty() || s.duration > k) ++host_bound;
    slow_compute += s.ops.empty() ? s.duration : std::max(k * 2, s.duration > k ? s.duration : k);
  }
  EXPECT_GT(host_bound, 0u) << "the rule is exercised";
  const ReplayResult r0 = run(base);
  const Time C = r0.copies[0].compute;  // each replica's kernels: forward, backward, optimizer
  ASSERT_EQ(r0.copies[1].compute, C);
  const Time AR = r0.iteration - C;  // the gradient all-reduce, fully exposed
  EXPECT_EQ(r0.copies[0].dp_wait, AR);
  EXPECT_GT(AR, Time());

  TrainingJob slow = build_training_job(m, p, c, cost);
  slow_down(slow, factors(c, {1, 2}));
  const ReplayResult r1 = run(slow);
  // The all-reduce starts when the slow replica is done and takes AR as before (same links, same
  // bytes); the fast replica waits for the slow one, then AR.
  EXPECT_EQ(r1.copies[1].compute, slow_compute);
  EXPECT_GT(slow_compute, Time::ps(C.ps() * 3 / 2)) << "most of it is kernels";
  EXPECT_EQ(r1.copies[0].compute, C);
  EXPECT_EQ(r1.iteration, slow_compute + AR) << "expected " << (slow_compute + AR).seconds()
                                             << " s, got " << r1.iteration.seconds() << " s";
  EXPECT_EQ(r1.copies[1].dp_wait, AR);
  EXPECT_GT(r1.copies[0].dp_wait, AR);
  EXPECT_LE(r1.copies[0].dp_wait, slow_compute - C + AR)
      << "the fast replica's optimizer runs after the wait, at its own pace";
  EXPECT_EQ(r1.folded_replicas, 1u);
}

TEST(Perturbation, ASlowdownFromMidIterationStretchesOnlyTheWorkAfterIt) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  const Plan p = dp2(m, c);
  const DatasheetCostModel cost;
  const TrainingJob base = build_training_job(m, p, c, cost);
  const ReplayResult r0 = run(base);
  const Time C = r0.copies[1].compute;
  const Time AR = r0.iteration - C;
  // GPU 1 at half speed from C/2 on: its compute runs without a wait from 0 to the end of the
  // backward pass, so the first C/2 is as before and the other C/2 (the optimizer's too, after
  // the all-reduce) takes twice as long: 1.5 C, then the same all-reduce.
  Perturbations q;
  q.slow.push_back(SlowDevice{"1", 2.0, C.seconds() / 2});
  const ResolvedPerturbations rp = resolve_perturbations(q, c);
  ASSERT_TRUE(rp.compute_factor.empty()) << "timed only";
  ASSERT_EQ(rp.timed.size(), 1u);
  EXPECT_EQ(rp.description.front().rfind("node0.gpu1 (GPU 1) computes 2x slower from ", 0), 0u)
      << rp.description.front();
  TrainingJob job = build_training_job(m, p, c, cost);
  slow_down_from(job, rp);
  const ReplayResult r1 = run(job);
  EXPECT_NEAR(r1.copies[1].compute.seconds(), 1.5 * C.seconds(), 1e-9);
  EXPECT_EQ(r1.copies[0].compute, C);
  // The optimizer is the slow replica's last step: the fast one waits for the all-reduce.
  EXPECT_NEAR(r1.iteration.seconds(), 1.5 * C.seconds() + AR.seconds(), 1e-9);
  EXPECT_EQ(r1.folded_replicas, 1u);
  expect_same(r1, run(job, /*exact=*/true), "a timed slowdown: not folded");
  // From after the iteration's end: nothing changes.
  Perturbations late;
  late.slow.push_back(SlowDevice{"1", 2.0, 10.0});
  TrainingJob unaffected = build_training_job(m, p, c, cost);
  slow_down_from(unaffected, resolve_perturbations(late, c));
  EXPECT_EQ(run(unaffected).iteration, r0.iteration);
  // Read from YAML, and its bad input.
  EXPECT_EQ(parse_perturbation("slow: {gpu: 1, factor: 2, after: 0.25}").canonical(),
            "slow 1 x2 after 0.25 s");
  try {
    parse_perturbation("slow: {gpu: 1, factor: 2, after: -1}");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("slow.after: expected the seconds into the iteration "
                                         "when it starts, 0 to 1e6, got -1"),
              std::string::npos)
        << e.what();
  }
}

TEST(Replan, BatchSharesMoveOffTheSlowReplicaAndWinBackMostOfTheLoss) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  // Data parallel 4, 16 micro-batches of 8 sequences each (kernels, not host issue, set the pace).
  const Plan healthy = load_plan_text(
      "data_parallel: 4\ndevices: \"0-3\"\nglobal_batch_size: 512\nmicro_batch_size: 8\n"
      "sequence_length: 1024\n",
      "dp4.yaml", m, c);
  const std::vector<double> slow = factors(c, {1, 1, 2, 1});  // GPU 2 at half speed
  // Speeds 1, 1, 1/2, 1 of 3.5: 64 micro-batches as 18.29, 18.29, 9.14, 18.29; whole, largest
  // remainder first (ties in order): 19, 18, 9, 18.
  Plan replanned = healthy;
  ASSERT_TRUE(policy::rebalance_batch(replanned, slow));
  std::vector<int> mbs;
  for (const ReplicaPlan& r : replanned.replicas) mbs.push_back(r.micro_batches);
  EXPECT_EQ(mbs, (std::vector<int>{19, 18, 9, 18}));
  EXPECT_FALSE(replanned.uniform);
  Plan again = healthy;
  EXPECT_FALSE(policy::rebalance_batch(again, {})) << "nothing slow, nothing moves";
  EXPECT_FALSE(policy::rebalance_batch(again, factors(c, {1.5, 1.5, 1.5, 1.5})))
      << "all alike: the shares stay";

  const DatasheetCostModel cost;
  auto iteration = [&](const Plan& p, const std::vector<double>& f) {
    TrainingJob job = build_training_job(m, p, c, cost);
    slow_down(job, f);
    return run(job).iteration.seconds();
  };
  const double base = iteration(healthy, {});
  const double stat = iteration(healthy, slow);
  const double moved = iteration(replanned, slow);
  // Static: the slow replica's 16 micro-batches at half speed pace every step (about 2x).
  EXPECT_GT(stat, 1.7 * base);
  // Re-planned: its 9 take about as long as 18 healthy ones; the busiest replica runs 19 of the
  // 16 it ran healthy (19/16 = 1.19); within 25% of healthy.
  EXPECT_LT(moved, 1.25 * base) << base << " " << stat << " " << moved;
  EXPECT_GT(moved, base);
}

TEST(Replan, UnderZeroTwoTheSharesStayEvenAndUnevenOnesAreRefused) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  Plan zero = load_plan_text(
      "data_parallel: 4\ndevices: \"0-3\"\nglobal_batch_size: 512\nmicro_batch_size: 8\n"
      "sequence_length: 1024\nzero_stage: 2\n",
      "zero2.yaml", m, c);
  EXPECT_FALSE(policy::rebalance_batch(zero, factors(c, {1, 1, 2, 1})));
  for (const ReplicaPlan& r : zero.replicas) EXPECT_EQ(r.micro_batches, 16);
  try {
    load_plan_text(
        "zero_stage: 2\nmicro_batch_size: 8\nsequence_length: 1024\nreplicas:\n"
        "  - micro_batches: 3\n    stages: [{layers: 8, devices: [0]}]\n"
        "  - micro_batches: 1\n    stages: [{layers: 8, devices: [1]}]\n",
        "uneven.yaml", m, c);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "uneven.yaml:1: zero_stage: 2 reduces gradients every micro-batch among the "
              "replicas, so each must run as many micro-batches (replica 0 runs 3, replica 1 "
              "runs 1); use zero_stage 0 or 1 for uneven batch shares");
  }
}

TEST(Perturbation, FoldedReplayFoldsOnlyReplicasThatStayIdentical) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  const Plan p = dp2(m, c);
  const DatasheetCostModel cost;
  {
    const TrainingJob job = build_training_job(m, p, c, cost);
    EXPECT_EQ(run(job).folded_replicas, 2u) << "unperturbed replicas fold";
  }
  {
    TrainingJob job = build_training_job(m, p, c, cost);
    slow_down(job, factors(c, {1, 2}));
    const ReplayResult folded = run(job), exact = run(job, true);
    EXPECT_EQ(folded.folded_replicas, 1u) << "one replica slowed: not identical";
    expect_same(folded, exact, "one slow GPU");
  }
  {
    TrainingJob job = build_training_job(m, p, c, cost);
    slow_down(job, factors(c, {1.5, 1.5}));
    const ReplayResult folded = run(job), exact = run(job, true);
    EXPECT_EQ(folded.folded_replicas, 2u) << "both slowed alike: still identical";
    expect_same(folded, exact, "both slow");
  }
  {
    // A degraded link in one replica's path: its copies are no longer symmetric.
    platform::Cluster d = cluster();
    Perturbations x;
    x.links.push_back({"node0.gpu1<->node0.nvswitch8", 0.5});
    const ResolvedPerturbations r = resolve_perturbations(x, d);
    ASSERT_EQ(r.links.size(), 2u);
    scale_links(r, d);
    const TrainingJob base = build_training_job(m, p, c, cost);
    const TrainingJob job = build_training_job(m, p, d, cost);
    const ReplayResult r0 = run(base), r1 = run(job), exact = run(job, true);
    EXPECT_EQ(r1.folded_replicas, 1u);
    expect_same(r1, exact, "degraded link");
    EXPECT_EQ(r1.copies[0].compute, r0.copies[0].compute);
    EXPECT_GT(r1.iteration, r0.iteration) << "the all-reduce crosses the half-rate link";
  }
}

TEST(Perturbation, StragglersAreSeededAndDrawnInTheirRange) {
  const platform::Cluster c = cluster(8);  // 64 GPUs
  Perturbations x;
  x.stragglers = Stragglers{7, 0.25, 1.5, 2.0};
  const ResolvedPerturbations a = resolve_perturbations(x, c);
  const ResolvedPerturbations b = resolve_perturbations(x, c);
  ASSERT_EQ(a.compute_factor.size(), 64u);
  EXPECT_EQ(a.compute_factor, b.compute_factor) << "same seed, same draws";
  size_t slowed = 0;
  for (double f : a.compute_factor) {
    if (f == 1) continue;
    ++slowed;
    EXPECT_GE(f, 1.5);
    EXPECT_LT(f, 2.0);
  }
  EXPECT_GT(slowed, 4u) << "about 16 of 64 expected";
  EXPECT_LT(slowed, 32u);
  x.stragglers->seed = 8;
  EXPECT_NE(resolve_perturbations(x, c).compute_factor, a.compute_factor);
  // A GPU's draw depends on the seed and its index only, not on the cluster's size.
  x.stragglers->seed = 7;
  const ResolvedPerturbations one_node = resolve_perturbations(x, cluster(1));
  for (size_t g = 0; g < 8; ++g) {
    EXPECT_EQ(one_node.compute_factor.empty() ? 1.0 : one_node.compute_factor[g],
              a.compute_factor[g]);
  }
  x.stragglers->probability = 0;
  EXPECT_TRUE(resolve_perturbations(x, c).compute_factor.empty());
  x.stragglers->probability = 1;
  for (double f : resolve_perturbations(x, c).compute_factor) EXPECT_GE(f, 1.5);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Perturbation, BadInputNamesTheOptionTheFieldAndWhatWasExpected) {
  EXPECT_EQ(error_of([] { parse_perturbation("slow: {gpu: 3, factr: 2}"); }),
            "--perturb:1: slow.factr: unknown key (did you mean \"factor\"?)");
  EXPECT_EQ(error_of([] { parse_perturbation("slow: {gpu: 3, factor: 0.5}"); }),
            "--perturb:1: slow.factor: expected a factor >= 1 (how many times longer its kernels "
            "take), got 0.5");
  EXPECT_EQ(error_of([] { parse_perturbation("link: {link: a->b, factor: -0.5}"); }),
            "--perturb:1: link.factor: expected a factor >= 0 (the share of its capacity the "
            "link keeps; 0: the link is down and routes go around it), got -0.5");
  EXPECT_EQ(error_of([] { parse_perturbation("stragglers: {seed: 1, min: 2, max: 1.5}"); }),
            "--perturb:1: stragglers.max: expected a factor >= min (2), got 1.5");
  EXPECT_EQ(error_of([] { parse_perturbation("slow"); }),
            "--perturb \"slow\": expected a map such as \"slow: {gpu: 3, factor: 2}\", \"link: "
            "{link: node0.nic8->leaf0, factor: 0.5}\" or \"stragglers: {seed: 1, max: 2}\"");
  const platform::Cluster c = cluster();
  Perturbations x;
  x.slow.push_back({"8", 2, std::nullopt});
  EXPECT_EQ(error_of([&] { resolve_perturbations(x, c); }),
            "perturbation slow.gpu: no GPU \"8\" in cluster dgx-a100 (8 GPUs: an index from 0 to "
            "7, or a name from node0.gpu0 to node0.gpu7)");
  x.slow = {{"node0.gpu7", 2, std::nullopt}};
  EXPECT_EQ(resolve_perturbations(x, c).compute_factor[7], 2);
  x.slow.clear();
  x.links.push_back({"node0.gpu1->node0.nvswitch99", 0.5});
  const std::string e = error_of([&] { resolve_perturbations(x, c); });
  EXPECT_EQ(e.rfind("perturbation link: no link \"node0.gpu1->node0.nvswitch99\" in cluster "
                    "dgx-a100 (expected FROM->TO or A<->B; links from node0.gpu1: node0.gpu1->",
                    0),
            0u)
      << e;
}

TEST(Perturbation, RepeatedOptionsCombineAndTheCanonicalFormNamesEveryField) {
  Perturbations p = parse_perturbation("slow: {gpu: 3, factor: 2}");
  p.merge(parse_perturbation("link: [{link: \"a<->b\", factor: 0.25}]"));
  p.merge(parse_perturbation("stragglers: {seed: 9, probability: 0.5, max: 1.25}"));
  EXPECT_EQ(p.canonical(),
            "slow 3 x2; link a<->b x0.25; stragglers seed=9 probability=0.5 factor=1..1.25");
}

// ---- a node lost mid-iteration ------------------------------------------------------------

std::vector<int> micro_batches(const Plan& p) {
  std::vector<int> out;
  for (const ReplicaPlan& r : p.replicas) out.push_back(r.micro_batches);
  return out;
}

TEST(LostNode, MegatronsRankOrderLosesEveryReplicaWithAStageOnTheNode) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster(4);
  // TP 2 fastest, then DP 8, then PP 2: stage 0 of every replica on nodes 0-1, stage 1 on 2-3.
  // Node 2 holds stage 1 of replicas 0 to 3: they go, and 4 to 7 run twice the micro-batches.
  Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 8\nglobal_batch_size: 128\n"
      "sequence_length: 1024\n",
      "p.yaml", m, c);
  const policy::Shrunk s = policy::drop_node(p, c, 2);
  EXPECT_EQ(s.replicas_before, 8u);
  EXPECT_EQ(s.replicas_after, 4u);
  EXPECT_EQ(s.global_batch_after, 128);
  EXPECT_EQ(micro_batches(p), (std::vector<int>{32, 32, 32, 32}));
  EXPECT_EQ(p.data_parallel, 4);
  EXPECT_TRUE(p.uniform);
  for (const ReplicaPlan& r : p.replicas) {
    for (const StagePlan& st : r.stages)
      for (platform::GpuId g : st.devices) EXPECT_NE(c.gpu(g).node, 2u) << g;
  }
  // A node no replica uses changes nothing.
  Plan q = load_plan_text(
      "data_parallel: 8\ndevices: \"0-7\"\nglobal_batch_size: 64\nsequence_length: 1024\n",
      "q.yaml", m, c);
  EXPECT_EQ(policy::drop_node(q, c, 3).replicas_after, 8u);
  EXPECT_EQ(micro_batches(q), (std::vector<int>(8, 8)));
  // Nothing left: refused, naming the way out.
  Plan one = load_plan_text(
      "tensor_parallel: 8\ndevices: \"0-7\"\nglobal_batch_size: 8\nsequence_length: 1024\n",
      "one.yaml", m, c);
  try {
    policy::drop_node(one, c, 0);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("every replica of the plan holds a GPU of node0"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("replace: spare"), std::string::npos) << e.what();
  }
}

TEST(LostNode, SurvivorsShareTheMicroBatchesEvenlyOrRoundUpWhereCountsMustBeEqual) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster(3);
  // 24 one-GPU replicas, 5 micro-batches each (120); node 0 lost: 16 share 120 as 7.5 each.
  const std::string text =
      "data_parallel: 24\nglobal_batch_size: 120\nsequence_length: 1024\nzero_stage: ";
  Plan p = load_plan_text(text + "1\n", "p.yaml", m, c);
  const policy::Shrunk s = policy::drop_node(p, c, 0);
  EXPECT_EQ(s.replicas_after, 16u);
  EXPECT_EQ(s.global_batch_after, 120);
  std::vector<int> expect(16, 7);
  for (int i = 0; i < 8; ++i) expect[i] = 8;  // ties by order: the first eight take the extra
  EXPECT_EQ(micro_batches(p), expect);
  EXPECT_FALSE(p.uniform);
  // ZeRO-2 pairs every micro-batch's reduce-scatter across replicas: 8 each, the batch grows.
  Plan z = load_plan_text(text + "2\n", "z.yaml", m, c);
  EXPECT_EQ(policy::drop_node(z, c, 0).global_batch_after, 128);
  EXPECT_EQ(micro_batches(z), (std::vector<int>(16, 8)));
  EXPECT_TRUE(z.uniform);
}

TEST(LostNode, ExpertParallelGroupsGoWhole) {
  const ModelConfig m = load_model_yaml_text(
      "name: moe\nfamily: gpt\nlayers: 4\nhidden: 1024\nheads: 16\nvocab: 50304\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: true\nexperts: 24\nexperts_per_token: 2\n",
      "moe.yaml");
  const platform::Cluster c = cluster(3);
  // EP 12 over 24 one-GPU replicas: group 0 is GPUs 0-11 (node 0 and half of node 1). Losing
  // node 0 drops all of group 0, GPUs 8-11 on node 1 with it.
  Plan p = load_plan_text(
      "data_parallel: 24\nexpert_parallel: 12\nglobal_batch_size: 48\nsequence_length: 1024\n",
      "ep.yaml", m, c);
  const policy::Shrunk s = policy::drop_node(p, c, 0);
  EXPECT_EQ(s.replicas_after, 12u);
  EXPECT_EQ(p.replicas.front().stages.front().devices.front(), 12u);
  EXPECT_EQ(micro_batches(p), (std::vector<int>(12, 4)));
  // The shrunk plan builds and replays.
  const DatasheetCostModel cost;
  EXPECT_GT(run(build_training_job(m, p, c, cost)).iteration, Time());
}

// The groups that go whole are the plan's: an expert-parallel group of EP / t replicas with
// experts whole; a context-parallel pair, whose replicas share their sequences (the global batch
// counts them once); the interleaved schedule's whole groups of micro-batches.
TEST(LostNode, GroupsGoWholeAndSchedulesKeepTheirRules) {
  const ModelConfig moe = load_model_yaml_text(
      "name: moe\nfamily: gpt\nlayers: 4\nhidden: 1024\nheads: 16\nvocab: 50304\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: true\nexperts: 24\nexperts_per_token: 2\n",
      "moe.yaml");
  // TP 2 x DP 16 on 4 nodes, EP 8 with experts whole: groups of 4 replicas (8 GPUs, one node).
  Plan etp = load_plan_text(
      "tensor_parallel: 2\ndata_parallel: 16\nexpert_parallel: 8\nexpert_tensor_parallel: 1\n"
      "sequence_parallel: true\nglobal_batch_size: 64\nsequence_length: 1024\n",
      "etp.yaml", moe, cluster(4));
  EXPECT_EQ(policy::drop_node(etp, cluster(4), 0).replicas_after, 12u);
  // 64 micro-batches over 12 replicas that must run as many: 6 each, 72 in all.
  EXPECT_EQ(micro_batches(etp), (std::vector<int>(12, 6)));
  EXPECT_EQ(etp.global_batch_size, 72);
  const ModelConfig m = small_gpt();
  // CP 2 x DP 12, one GPU each, on 3 nodes: node 0 holds 4 pairs; 8 pairs share 12 x 2
  // sequences, 3 each, and the global batch stays 24.
  Plan cp = load_plan_text(
      "context_parallel: 2\ndata_parallel: 12\nglobal_batch_size: 24\nsequence_length: 1024\n",
      "cp.yaml", m, cluster(3));
  const policy::Shrunk s = policy::drop_node(cp, cluster(3), 0);
  EXPECT_EQ(s.replicas_after, 16u);
  EXPECT_EQ(s.global_batch_after, 24);
  EXPECT_EQ(micro_batches(cp), (std::vector<int>(16, 3)));
  EXPECT_EQ(cp.data_parallel, 8);
  // Interleaved, PP 2: 10 replicas on GPUs 0-19 (stage 0 on GPUs 0-9, stage 1 on 10-19, in
  // Megatron's order); node 2 (GPUs 16-19) holds stage 1 of four of them. 4 micro-batches each
  // (40) shared by the survivors, rounded up to a multiple of the 2 stages.
  Plan il = load_plan_text(
      "pipeline_parallel: 2\ndata_parallel: 10\ndevices: \"0-19\"\nschedule: interleaved\n"
      "interleave: 2\nglobal_batch_size: 40\nsequence_length: 1024\n",
      "il.yaml", m, cluster(3));
  const policy::Shrunk si = policy::drop_node(il, cluster(3), 2);
  for (int mb : micro_batches(il)) EXPECT_EQ(mb % 2, 0) << mb;
  EXPECT_EQ(micro_batches(il), std::vector<int>(si.replicas_after, micro_batches(il).front()));
  EXPECT_GE(si.global_batch_after, 40);
  EXPECT_TRUE(il.uniform);
  EXPECT_GT(run(build_training_job(m, il, cluster(3), DatasheetCostModel())).iteration, Time());
}

// Pure data parallelism 16 over two nodes, one micro-batch of 4 each; node 1 lost 0.25 s in. The
// step it hit: 0.25 s of work lost, the 600 s timeout, a 90 s relaunch, then the step again on
// node 0's 8 replicas, 2 micro-batches each: exactly the plan written for those 8 GPUs.
TEST(LostNode, TheStepItHitsIsTheRunTheTimeoutTheRelaunchAndTheStepAgain) {
  const std::string plan16 =
      "data_parallel: 16\nglobal_batch_size: 64\nmicro_batch_size: 4\nsequence_length: 1024\n";
  auto spec = [](const std::string& text, const std::string& perturb) {
    study::RunSpec s;
    s.model = "gpt3-125m";
    s.cluster = "dgx-a100";
    s.cluster_options.nodes = 2;
    s.plan = "plan.yaml";
    s.plan_text = text;
    if (!perturb.empty()) s.perturbations = parse_perturbation(perturb);
    return s;
  };
  const DatasheetCostModel cost;
  auto report = [&](const std::string& text, const std::string& perturb) {
    const study::RunInputs in(spec(text, perturb));
    return study::run(in, cost).report;
  };
  const report::TrainingReport healthy = report(plan16, "");
  const report::TrainingReport hit = report(plan16, "lost: {node: 1, at: 0.25, restart: 90}");
  const report::TrainingReport eight = report(
      "data_parallel: 8\ndevices: \"0-7\"\nglobal_batch_size: 64\nmicro_batch_size: 4\n"
      "sequence_length: 1024\n",
      "");
  ASSERT_TRUE(hit.lost);
  const report::LostNodeReport& l = *hit.lost;
  EXPECT_EQ(l.node, 1u);
  EXPECT_EQ(l.before_s, healthy.iteration_time_s);
  EXPECT_EQ(l.after_s, eight.iteration_time_s);
  EXPECT_EQ(hit.iteration_time_s, eight.iteration_time_s);
  EXPECT_EQ(hit.gpus, 8u);
  EXPECT_EQ(l.gpus_before, 16u);
  EXPECT_EQ(l.replicas_after, 8u);
  EXPECT_EQ(l.global_batch_after, 64);
  EXPECT_LT(healthy.iteration_time_s, 0.25) << "the loss comes after the step's end: clamped";
  EXPECT_EQ(l.at_s, healthy.iteration_time_s);
  EXPECT_EQ(l.failed_step_s, l.at_s + 600 + 90 + l.after_s);
  // Twice the micro-batches per replica: the step takes about twice as long (the gradients'
  // all-reduce stays on NVLink, where it had crossed the nodes' NICs).
  EXPECT_GT(l.after_s, 1.6 * l.before_s);
  EXPECT_LT(l.after_s, 2.2 * l.before_s);
  // On a spare node the plan runs unchanged after the relaunch.
  const report::TrainingReport spare =
      report(plan16, "lost: {node: node1, at: 0.01, detect: 30, replace: spare}");
  ASSERT_TRUE(spare.lost);
  EXPECT_EQ(spare.iteration_time_s, healthy.iteration_time_s);
  EXPECT_EQ(spare.lost->failed_step_s, 0.01 + 30 + 0 + healthy.iteration_time_s);
  EXPECT_EQ(spare.gpus, 16u);
  // A node the plan does not use costs nothing.
  const report::TrainingReport unused = report(
      "data_parallel: 8\ndevices: \"0-7\"\nglobal_batch_size: 64\nmicro_batch_size: 4\n"
      "sequence_length: 1024\n",
      "lost: {node: 1, at: 0.01}");
  ASSERT_TRUE(unused.lost);
  EXPECT_FALSE(unused.lost->hit);
  EXPECT_EQ(unused.iteration_time_s, eight.iteration_time_s);
  EXPECT_EQ(unused.lost->failed_step_s, eight.iteration_time_s);
  EXPECT_NE(report::to_text(unused).find("node1 holds none of the plan's GPUs: nothing lost"),
            std::string::npos);
  // Bad input names the field.
  EXPECT_EQ(error_of([] { parse_perturbation("lost: {node: 1}"); }),
            "--perturb:1: lost.at: missing required field (a number)");
  Perturbations far;
  far.lost = LostNode{"node5", 1, 600, 0, false};
  EXPECT_EQ(error_of([&] { resolve_perturbations(far, cluster(2)); }),
            "perturbation lost.node: no node \"node5\" in cluster dgx-a100 (2 nodes: an index "
            "from 0 to 1, or a name from node0 to node1)");
}

// Cost, worked by hand: two A100-SXM4-80GB at $5.12/h each (AWS p4de.24xlarge / 8, the GPU
// profile's price) cost $10.24/h; an iteration of T seconds costs 10.24 T / 3600 dollars and moves
// 16 x 1024 = 16384 tokens, so a million tokens cost (10.24 T / 3600) x 1e6 / 16384; a run of 300e9
// tokens takes 300e9 / 16384 = 18310546.875 iterations.
TEST(Cost, PerIterationPerMillionTokensAndPerRunFromTheGpuPrices) {
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster();
  ASSERT_EQ(c.gpu(0).profile->name, "a100-sxm4-80gb");
  ASSERT_EQ(*c.gpu(0).profile->price_per_hour, 5.12);
  const Plan p = dp2(m, c);
  const TrainingJob job = build_training_job(m, p, c, DatasheetCostModel());
  const ReplayResult r = run(job);
  report::TrainingReport rep = report::make_training_report(job, r, memory_per_copy(job));
  report::add_run_cost(rep, 300e9);
  const double T = r.iteration.seconds();
  EXPECT_DOUBLE_EQ(rep.price_per_hour_usd, 10.24);
  EXPECT_DOUBLE_EQ(rep.cost_per_iteration_usd, 10.24 * T / 3600);
  EXPECT_DOUBLE_EQ(rep.cost_per_million_tokens_usd, 10.24 * T / 3600 * 1e6 / 16384);
  EXPECT_DOUBLE_EQ(rep.run_time_s, 18310546.875 * T);
  EXPECT_DOUBLE_EQ(rep.cost_per_run_usd, 18310546.875 * 10.24 * T / 3600);
  const nlohmann::ordered_json j = report::to_json(rep);
  EXPECT_DOUBLE_EQ(j["training_run"]["cost_usd"].get<double>(), rep.cost_per_run_usd);
  EXPECT_FALSE(j.contains("perturbations")) << "only when some were applied";
}

study::RunRecord record(const std::string& model, double tokens_per_s,
                        std::optional<double> usd_per_mtok, bool ok = true, bool oom = false) {
  study::RunRecord r;
  r.model = model;
  r.ok = ok;
  r.oom = oom;
  r.tokens_per_s = tokens_per_s;
  r.cost_per_million_tokens_usd = usd_per_mtok;
  return r;
}

TEST(Cost, ParetoFrontPerModelAmongRunsThatFitAndHaveAPrice) {
  const std::vector<study::RunRecord> rs = {
      record("a", 100, 1.0),              // cheapest
      record("a", 200, 2.0),              // fastest
      record("a", 150, 2.5),              // slower and dearer than the fastest: off
      record("b", 50, 9.0),               // alone in its model: on
      record("a", 300, 0.5, false),       // failed: never on, dominates nothing
      record("a", 300, 0.5, true, true),  // out of memory: the same
      record("a", 400, std::nullopt),     // no price: the same
      record("a", 100, 1.0),              // a tie with the cheapest: both on
      record("a", 150, 1.0),              // dominates the cheapest two? faster, as cheap: yes
  };
  const std::vector<bool> want = {false, true, false, true, false, false, false, false, true};
  EXPECT_EQ(study::pareto_front(rs), want);
}

}  // namespace
}  // namespace hetsim::workload
