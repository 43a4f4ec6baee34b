// Cephalo's plan shapes: layered gradient accumulation (every micro-batch through a layer before
// the next, so a sharded layer is gathered and reduced once per iteration) and state shares
// decoupled from batch shares.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"
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

size_t dp_count(const TrainingJob& job, uint32_t g) { return job.copies[g].dp.size(); }

TEST(Layered, GathersAndReducesEachLayerOncePerIteration) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan per_mb = load_plan_text(fsdp(4, 4, "zero_stage: 3\n"), "a.yaml", m, c);
  const Plan layered =
      load_plan_text(fsdp(4, 4, "zero_stage: 3\ngradient_accumulation: layered\n"), "b.yaml", m, c);
  EXPECT_TRUE(layered.layered);
  // ZeRO-3: a gather per layer forward and backward, a reduce-scatter per layer backward, and
  // for what lies outside the layers (the embedding; the final norm, the head) a gather each
  // forward and a reduce-scatter each at the end of the backward pass.
  EXPECT_EQ(dp_count(build_training_job(m, per_mb, c, cost), 0), (3u * 8 + 4) * 4);
  EXPECT_EQ(dp_count(build_training_job(m, layered, c, cost), 0), 3u * 8 + 4);
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
  const auto one = memory_per_copy(build_training_job(
      m, load_plan_text(fsdp(1, 1, "zero_stage: 3\n"), "c.yaml", m, c), c, cost));
  const auto four = memory_per_copy(build_training_job(m, layered, c, cost));
  EXPECT_DOUBLE_EQ(four[0].activations, 4 * one[0].activations);
}

// Records copy 0's data-parallel collectives and its layers' compute.
struct Zero3Trace : ReplayObserver {
  struct Span {
    Time start = Time::max(), end = Time();
  };
  std::vector<std::pair<Time, Time>> gathers;        // zero3.params, in the order they ran
  Time collectives = Time();                         // every data-parallel collective's time
  std::map<std::pair<int, uint32_t>, Span> forward;  // (layer, micro-batch) -> its compute
  void on_compute(const TrainingJob&, uint32_t copy, const Task& t, Time start, Time end) override {
    if (copy != 0 || t.pass != Pass::forward || t.layer < 0) return;
    Span& s = forward[{t.layer, t.micro_batch}];
    s.start = std::min(s.start, start);
    s.end = std::max(s.end, end);
  }
  void on_collective(const TrainingJob&, uint32_t copy, const char* stream, const std::string& name,
                     const Task&, Time start, Time end) override {
    if (copy != 0 || std::string(stream) != "dp") return;
    collectives += end - start;
    if (name == "zero3.params") gathers.emplace_back(start, end);
  }
};

TEST(Zero3, GathersEachLayerOneAheadAndMovesEveryParameter) {
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(fsdp(2, 2, "zero_stage: 3\n"), "z.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  // Every parameter gathered in each forward pass, the layers' again in each backward pass, and
  // every gradient reduce-scattered once per micro-batch: bytes per rank, summed by kind.
  double gathered = 0, scattered = 0;
  for (const DpCollective& d : job.copies[0].dp)
    (d.kind == CommKind::allgather ? gathered : scattered) += d.bytes;
  const double e = element_bytes(p.precision), grad = p.fp32_main_grads ? 4 : e;
  const double all = static_cast<double>(m.params()), layers = m.layers_params(0, m.layers);
  EXPECT_NEAR(gathered, 2 * e * (all + layers), 1e-9 * gathered);
  EXPECT_NEAR(scattered, 2 * grad * all, 1e-9 * scattered);

  // Each layer's gather after the first ran while the layer before it computed, and was done
  // before its own layer began (a forward pass's gathers are the first 8 of each 16).
  Zero3Trace trace;
  const ReplayResult r = replay(job, &trace);
  ASSERT_EQ(trace.gathers.size(), 2u * 2 * 8);
  for (uint32_t mb = 0; mb < 2; ++mb) {
    for (int l = 1; l < 8; ++l) {
      const auto& [start, end] = trace.gathers[mb * 16 + static_cast<size_t>(l)];
      const Zero3Trace::Span before = trace.forward[std::make_pair(l - 1, mb)];
      const Zero3Trace::Span own = trace.forward[std::make_pair(l, mb)];
      EXPECT_LT(start, before.end) << "layer " << l << ", micro-batch " << mb;
      EXPECT_LE(end, own.start) << "layer " << l << ", micro-batch " << mb;
    }
  }
  // So the replica waits for a small part of its collectives: the first of each pass and the
  // last reduce-scatter (over NVLink, a layer's gather takes far less than its compute).
  EXPECT_GT(trace.collectives, Time());
  EXPECT_LT(r.copies[0].dp_wait.seconds(), 0.3 * trace.collectives.seconds());
}

TEST(Zero3, Fsdp2CopiesEachGatheredLayerOutOnTheComputeStream) {
  // PyTorch FSDP2 (Framework::gather_copy_out): after each gather of a layer's weights, a kernel
  // on the compute stream reads and writes them (split_with_sizes_copy) before the layer runs;
  // FSDP1's flat parameters need none. Two replicas, two micro-batches each, 8 layers: a copy
  // per layer per pass per micro-batch, 2 x 8 x 2 in a replica's program.
  const auto c = cluster("dgx-a100");
  const ModelConfig m = small_gpt();
  const DatasheetCostModel cost;
  const Plan v1 = load_plan_text(fsdp(2, 2, "framework: pytorch-fsdp\n"), "z.yaml", m, c);
  const Plan v2 = load_plan_text(fsdp(2, 2, "framework: pytorch-fsdp2\n"), "z.yaml", m, c);
  const TrainingJob j1 = build_training_job(m, v1, c, cost);
  const TrainingJob j2 = build_training_job(m, v2, c, cost);
  auto copies = [](const TrainingJob& job, double& bytes) {
    int n = 0;
    const StageCopy& g = job.copies[0];
    for (const Task& t : g.program) {
      if (t.kind != TaskKind::compute) continue;
      for (const auto& [op, d] : g.segments[t.index].ops) {
        if (g.ops[op].name == "zero3.copy_out") ++n, bytes += g.ops[op].bytes;
      }
    }
    return n;
  };
  double b1 = 0, b2 = 0;
  EXPECT_EQ(copies(j1, b1), 0);
  EXPECT_EQ(copies(j2, b2), 2 * 8 * 2);
  // Each reads and writes one layer's weights at 2 bytes (bf16).
  EXPECT_DOUBLE_EQ(b2, 2 * 8 * 2 * (2 * 2.0 * m.layer_params()));
  // It costs time on the compute stream: the iteration is longer by about the copies' time.
  const ReplayResult r1 = replay(j1), r2 = replay(j2);
  EXPECT_GT(r2.iteration, r1.iteration);
  EXPECT_GT(r2.copies[0].compute, r1.copies[0].compute);
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
  EXPECT_EQ(r.iteration, r.copies[0].finish);
  EXPECT_GT(r.copies[1].dp_wait, r.copies[0].dp_wait);
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
  const auto mem = memory_per_copy(build_training_job(m, p, c, cost));
  const Plan even = load_plan_text(fsdp(4, 4, "zero_stage: 3\n"), "e.yaml", m, c);
  const auto half = memory_per_copy(build_training_job(m, even, c, cost));
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
