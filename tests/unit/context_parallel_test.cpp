// Context parallelism (ring attention): each rank's share of the attention FLOPs, the key/value
// exchange's bytes by hand, FLOP conservation over a replay, the folded replay against the full
// one, the exchange hidden under the attention kernel when the chunk is long and exposed when it
// is short, memory, and the degrees hetsim refuses.
#include <gtest/gtest.h>

#include "sim/core/error.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

std::string plan_text(int tp, int dp, int cp, int64_t sequence, const std::string& extra = "") {
  return "tensor_parallel: " + std::to_string(tp) + "\ndata_parallel: " + std::to_string(dp) +
         "\ncontext_parallel: " + std::to_string(cp) + "\nsequence_parallel: true\n" +
         "micro_batch_size: 1\nglobal_batch_size: " + std::to_string(2 * dp) +
         "\nsequence_length: " + std::to_string(sequence) + "\n" + extra;
}

struct Replayed {
  Plan plan;
  TrainingJob job;
  ReplayResult result;
};

// Sums the context-parallel collectives' time on replica 0's first copy.
struct CpTime : ReplayObserver {
  Time kv;
  void on_collective(const TrainingJob& job, uint32_t copy, const char* stream,
                     const std::string& name, const Task&, Time start, Time end) override {
    if (copy == 0 && std::string(stream) == "cp" && name == "cp.kv") kv += end - start;
    (void)job;
  }
};

Replayed run(const ModelConfig& m, const platform::Cluster& c, const std::string& text,
             ReplayObserver* obs = nullptr, ReplayOptions o = {}) {
  static const DatasheetCostModel cost;
  Replayed r{load_plan_text(text, "p.yaml", m, c), {}, {}};
  r.job = build_training_job(m, r.plan, c, cost);
  r.result = replay(r.job, obs, o);
  return r;
}

TEST(ContextParallel, EachRankRunsItsShareOfTheAttentionAndExchangesKeysAndValues) {
  // Llama 3 8B (8 KV heads of 128), TP 8, CP 4, 32768 tokens: each rank holds 8192 tokens and
  // one KV head; the key/value all-gather's result is all 32768 tokens' K and V of that head in
  // bf16: 2 x 32768 x 128 x 2 bytes = 16 MiB.
  const ModelConfig m = load_model("llama3-8b");
  LayerShape s;
  s.sequence = 8192;
  s.context_parallel = 4;
  s.tensor_parallel = 8;
  s.sequence_parallel = true;
  int exchanges = 0;
  for (const auto& steps : {layer_forward(m, s), layer_backward(m, s)}) {
    for (const Step& st : steps) {
      if (st.context) {
        ++exchanges;
        EXPECT_EQ(st.comm_bytes, 2.0 * 32768 * 128 * 2) << st.op.name;
      }
      if (st.op.kind == OpKind::attention_forward) {
        // A quarter of the whole sequence's causal attention (4 b s^2 d per head, halved).
        EXPECT_DOUBLE_EQ(st.op.flops, 0.5 * 4.0 * 32768.0 * 32768 * 128 * 4 / 4);
        EXPECT_DOUBLE_EQ(st.op.model_flops, 4.0 * 32768.0 * 32768 * 128 * 4 / 4);
      }
    }
  }
  EXPECT_EQ(exchanges, 3);  // K and V forward, again backward, and their gradients back
}

TEST(ContextParallel, ReplayCountsTheModelFlopsOnceAndFoldsExactly) {
  const ModelConfig m = load_model("llama3-8b");
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  for (int cp : {1, 2, 4}) {
    const std::string text = plan_text(4, 4 / cp, cp, 16384);
    const Replayed r = run(m, c, text);
    double model = 0;
    for (const StageCopy& g : r.job.copies) model += g.model_flops * g.devices.size();
    EXPECT_NEAR(model / model_flops_per_iteration(m, 2 * (4 / cp), 16384), 1.0, 1e-12)
        << "CP " << cp;
    ReplayOptions exact;
    exact.exact = true;
    EXPECT_NEAR(
        run(m, c, text, nullptr, exact).result.iteration.seconds() / r.result.iteration.seconds(),
        1.0, 1e-9)
        << "CP " << cp;
  }
}

TEST(ContextParallel, TheKeyValueExchangeHidesUnderLongChunksOnly) {
  // TP 1, CP 8 within a node: at 128K tokens (16K per rank) the attention kernel outlasts the
  // exchange, which is hidden; at 8K tokens (1K per rank) a sixth of it is exposed.
  const ModelConfig m = load_model("llama3-8b");
  const platform::Cluster c = test::cluster("dgx-h100", 1);
  auto exposed_share = [&](int64_t sequence) {
    CpTime kv;
    const Replayed r =
        run(m, c, plan_text(1, 1, 8, sequence, "recompute: full\nzero_stage: 1\n"), &kv);
    EXPECT_GT(kv.kv, Time()) << sequence;
    return r.result.copies.front().tp_wait.seconds() / kv.kv.seconds();
  };
  EXPECT_LT(exposed_share(131072), 0.01);
  EXPECT_GT(exposed_share(8192), 0.1);
}

TEST(ContextParallel, ActivationsSplitOverTheRanks) {
  const ModelConfig m = load_model("llama3-8b");
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  const Replayed one = run(m, c, plan_text(8, 2, 1, 16384));
  const Replayed two = run(m, c, plan_text(8, 1, 2, 16384));
  const DeviceMemory a = memory_per_copy(one.job).front();
  const DeviceMemory b = memory_per_copy(two.job).front();
  EXPECT_NEAR(b.activations / a.activations, 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(b.weights, a.weights);
}

TEST(ContextParallel, DegreesThatDoNotFitAreRefused) {
  const ModelConfig m = load_model("llama3-8b");
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  auto err = [&](const std::string& text) {
    try {
      load_plan_text(text, "p.yaml", m, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err(plan_text(8, 1, 2, 16385)),
            "p.yaml:3: context_parallel: 2 does not split sequence_length 16385 into 4 equal "
            "chunks (2 per rank, for the causal mask's balance); use a degree whose double "
            "divides the sequence");
  EXPECT_EQ(err(plan_text(8, 4, 2, 16384)),
            "p.yaml: tensor_parallel x pipeline_parallel x data_parallel x context_parallel = 8 x "
            "1 x 4 x 2 = 64, but the plan has 16 GPUs (the whole cluster; set devices to use "
            "fewer)");
}

}  // namespace
}  // namespace hetsim::workload
