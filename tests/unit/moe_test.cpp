// Mixture of experts: published parameter counts, FLOPs against Megatron-LM's counter, the
// all-to-all bytes and grouped-GEMM shapes by hand, FLOP conservation over an expert-parallel
// replay, the folded replay against the full one, routing imbalance and capacity, memory by
// expert-parallel degree, and the plans hetsim refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/core/error.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/";

// GPT-style, 4 layers of 8 experts (top 2), hidden 1024.
ModelConfig small_moe(int experts = 8, int top = 2, const std::string& extra = "") {
  return load_model_yaml_text(
      "name: small-moe\nfamily: gpt\nlayers: 4\nhidden: 1024\nheads: 16\nvocab: 50304\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: true\nexperts: " +
          std::to_string(experts) + "\nexperts_per_token: " + std::to_string(top) + "\n" + extra,
      "small-moe.yaml");
}

using test::plan_error;

TEST(Moe, ModelsHaveTheirPublishedParameterCounts) {
  // Mixtral 8x7B: 46,702,792,704 parameters in the released checkpoint, from YAML and from its
  // config.json alike.
  const ModelConfig mixtral = load_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.params(), 46702792704);
  EXPECT_EQ(load_model(kData + "hf/mixtral-8x7b.json").params(), 46702792704);
  // Active per token (Mixtral paper: 12.9B): the model less the 6 experts a token skips.
  const double skipped = 32.0 * 6 * mixtral.mlp_params(mixtral.expert_ffn_hidden);
  EXPECT_NEAR((mixtral.params() - skipped) / 12.9e9, 1.0, 0.01);
  // DeepSeekMoE 16B (16.4B) with its dense first layer and shared experts, from both sources.
  const ModelConfig ds = load_model("deepseek-moe-16b");
  EXPECT_NEAR(ds.params() / 16.4e9, 1.0, 0.01) << ds.params();
  EXPECT_EQ(load_model(kData + "hf/deepseek-moe-16b.json").params(), ds.params());
  EXPECT_FALSE(ds.is_moe(0));
  EXPECT_TRUE(ds.is_moe(1));
  // DeepSpeed-MoE's 1.3B+MoE-128: experts in every other layer, 52B.
  const ModelConfig ds13 = load_model("gpt3-1.3b-moe128");
  EXPECT_NEAR(ds13.params() / 52e9, 1.0, 0.02) << ds13.params();
  EXPECT_TRUE(ds13.is_moe(0));
  EXPECT_FALSE(ds13.is_moe(1));
  EXPECT_EQ(ds13.moe_layers_in(0, 24), 12);
  EXPECT_EQ(ds13.moe_layers_in(3, 4), 2);  // layers 4 and 6
  // Hugging Face's and Megatron-LM's rule: layer l routes where l >= dense_layers and l is a
  // multiple of moe_every (first_k_dense_replace 1, moe_layer_freq 2: layers 2, 4, ...).
  const ModelConfig odd = small_moe(8, 2, "dense_layers: 1\nmoe_every: 2\n");
  EXPECT_FALSE(odd.is_moe(0));
  EXPECT_FALSE(odd.is_moe(1));
  EXPECT_TRUE(odd.is_moe(2));
  EXPECT_FALSE(odd.is_moe(3));
  EXPECT_EQ(odd.first_moe_layer(), 2);
  EXPECT_EQ(odd.moe_layers_in(0, 4), 1);
  EXPECT_EQ(odd.params(), small_moe(8, 2, "dense_layers: 2\nmoe_every: 2\n").params());
}

TEST(Moe, LatentAttentionModelsHaveTheirPublishedSizesFromYamlAndConfigJson) {
  // DeepSeek-V3: 671B without its multi-token prediction module, 37B active per token;
  // DeepSeek-V2-Lite: 15.7B, 2.4B active. config.json gives the YAML's model exactly.
  const ModelConfig v3 = load_model("deepseek-v3");
  EXPECT_TRUE(v3.mla());
  EXPECT_NEAR(v3.params() / 671e9, 1.0, 0.002) << v3.params();
  EXPECT_EQ(load_model(kData + "hf/deepseek-v3.json").params(), v3.params());
  const double v3_skipped = 58.0 * (256 - 8) * v3.mlp_params(v3.expert_ffn_hidden);
  EXPECT_NEAR((v3.params() - v3_skipped) / 37e9, 1.0, 0.02);
  const ModelConfig lite = load_model("deepseek-v2-lite");
  EXPECT_NEAR(lite.params() / 15.7e9, 1.0, 0.005) << lite.params();
  EXPECT_EQ(load_model(kData + "hf/deepseek-v2-lite.json").params(), lite.params());
  EXPECT_EQ(load_model(kData + "hf/deepseek-v2-lite.json").q_lora_rank, 0);
  // Its attention by hand: q 2048 x 16 x 192, kv_down 2048 x (512 + 64), its norm 512,
  // kv_up 512 x 16 x (128 + 128), proj 16 x 128 x 2048.
  EXPECT_EQ(lite.attention_params(),
            2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048);
}

TEST(Moe, LatentAttentionKernelsByHand) {
  // DeepSeek-V3's attention block on one rank and split over 8: the down-projections run in
  // full on every rank, the up-projections and the output projection split by heads; attention
  // costs Q K^T over 192 and P V over 128 (4 b s^2 heads x 160 forward, causal and fused: half).
  const ModelConfig m = load_model("deepseek-v3");
  LayerShape one;
  one.micro_batch = 1;
  one.sequence = 4096;
  const double T = 4096, h = 7168, H = 128;
  auto flops = [](const std::vector<Step>& steps, OpKind kind) {
    double f = 0;
    for (const Step& s : steps)
      if (s.comm == CommKind::none && s.op.kind == kind) f += s.op.flops;
    return f;
  };
  const std::vector<Step> fwd = layer_forward(m, one);
  const double attention_gemms =
      2 * T * (h * 1536 + 1536 * H * 192 + h * 576 + 512 * H * 256 + H * 128 * h);
  const double ffn = 2 * T * 3 * h * 18432;  // layer 0 is dense
  EXPECT_NEAR(flops(fwd, OpKind::gemm) / (attention_gemms + ffn), 1.0, 1e-12);
  EXPECT_NEAR(flops(fwd, OpKind::attention_forward) / (0.5 * 4 * T * T * H * 160), 1.0, 1e-12);
  LayerShape eight = one;
  eight.tensor_parallel = 8;
  eight.sequence_parallel = true;
  const double down = 2 * T * (h * 1536 + h * 576);
  EXPECT_NEAR(
      flops(layer_forward(m, eight), OpKind::gemm) / ((attention_gemms - down + ffn) / 8 + down),
      1.0, 1e-12);
  // The sequence-parallel boundary collectives are the hidden state's, as for any layer.
  int gathers = 0;
  for (const Step& s : layer_forward(m, eight))
    if (s.comm == CommKind::allgather) {
      EXPECT_DOUBLE_EQ(s.comm_bytes, 2 * T * h);
      ++gathers;
    }
  EXPECT_EQ(gathers, 2);
}

TEST(Moe, ModelFlopsMatchMegatronCounter) {
  // 12 B s l h^2 [(1 + G/H + s/h) q/h + (ffn/h) k g + V/(2 l h)] (formulas.md), g = 3/2 for
  // SwiGLU: the router is not counted, as in Megatron-LM.
  const ModelConfig m = load_model("mixtral-8x7b");
  const double B = 256, s = 4096, l = m.layers, h = m.hidden, V = m.vocab;
  const double gh = static_cast<double>(m.kv_heads) / m.heads, q = m.q_width();
  const double f = m.expert_ffn_hidden, k = m.experts_per_token;
  const double expected =
      12 * B * s * l * h * h * ((1 + gh + s / h) * q / h + f / h * k * 1.5 + V / (2 * l * h));
  EXPECT_NEAR(model_flops_per_iteration(m, 256, 4096) / expected, 1.0, 1e-12);
}

TEST(Moe, AllToAllBytesAndGroupedGemmsByHand) {
  // TP 2 with sequence parallelism, EP 4, micro-batch 2 x 1024 tokens, top 2 of 8 experts: each
  // rank dispatches its 1024 of the 2048 tokens twice, 2 bytes x 1024 wide: 4 MiB to all-to-all;
  // the all-gather over the tensor-parallel pair makes each expert rank's 2 x 2048 rows
  // (8 MiB), split over its 2 local experts: 2048 rows each.
  const ModelConfig m = small_moe();
  LayerShape s;
  s.micro_batch = 2;
  s.sequence = 1024;
  s.tensor_parallel = 2;
  s.sequence_parallel = true;
  s.moe_layer = true;
  s.expert_parallel = 4;
  int alltoalls = 0, gathers = 0;
  for (const auto& steps : {layer_forward(m, s), layer_backward(m, s)}) {
    for (const Step& st : steps) {
      if (st.expert) {
        ++alltoalls;
        EXPECT_EQ(st.comm, CommKind::alltoall);
        EXPECT_EQ(st.comm_bytes, 2.0 * 1024 * 2 * 1024) << st.op.name;
      }
      if (st.comm == CommKind::allgather && st.comm_bytes > 2.0 * 2048 * 1024) {
        ++gathers;
        EXPECT_EQ(st.comm_bytes, 2.0 * 2048 * 2 * 1024);
      }
      if (st.op.name == "experts.fc1") {
        EXPECT_EQ(st.op.batch, 2);
        EXPECT_EQ(st.op.m, 2048);
        EXPECT_EQ(st.op.n, 4096 / 2);
        EXPECT_EQ(st.op.k, 1024);
        EXPECT_EQ(st.op.flops, 2.0 * 2 * 2048 * 2048 * 1024);
        EXPECT_EQ(st.op.model_flops, st.op.flops);
      }
    }
  }
  EXPECT_EQ(alltoalls, 4);  // dispatch and combine, forward and backward
  EXPECT_EQ(gathers, 2);    // the expert ranks' gather forward, and backward
  // Expert parallelism 1 dispatches within the rank: no all-to-all.
  s.expert_parallel = 1;
  for (const Step& st : layer_forward(m, s)) EXPECT_FALSE(st.expert) << st.op.name;
}

struct Replayed {
  Plan plan;
  TrainingJob job;
  ReplayResult result;
};

Replayed run(const ModelConfig& m, const platform::Cluster& c, const std::string& text,
             ReplayOptions o = {}) {
  static const DatasheetCostModel cost;
  Replayed r{load_plan_text(text, "p.yaml", m, c), {}, {}};
  r.job = build_training_job(m, r.plan, c, cost);
  r.result = replay(r.job, nullptr, o);
  return r;
}

// TP 2, PP 2, DP 4 on 16 H100, ZeRO-1, expert parallel `ep`, and more keys.
std::string plan_text(int ep, const std::string& extra = "", int zero = 1) {
  return "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\nexpert_parallel: " +
         std::to_string(ep) +
         "\nsequence_parallel: true\nmicro_batch_size: 1\nglobal_batch_size: 16\n"
         "sequence_length: 1024\nzero_stage: " +
         std::to_string(zero) + "\n" + extra;
}
const std::string kEp4 = plan_text(4);

TEST(Moe, ExpertParallelReplayCountsEveryExpertFlopOnce) {
  // Over all devices, the replayed model FLOPs are the model's, whatever the expert split.
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  for (const std::string ep : {"1", "2", "4"}) {
    const Replayed r = run(m, c,
                           "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\n"
                           "expert_parallel: " +
                               ep +
                               "\nsequence_parallel: true\nmicro_batch_size: 1\n"
                               "global_batch_size: 16\nsequence_length: 1024\n");
    double model = 0;
    for (const StageCopy& g : r.job.copies) model += g.model_flops * g.devices.size();
    EXPECT_NEAR(model / model_flops_per_iteration(m, 16, 1024), 1.0, 1e-12) << "EP " << ep;
  }
}

TEST(Moe, AllToAllsAreExposedAcrossNodesAndFreeWithoutCommunication) {
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  const Replayed ep4 = run(m, c, kEp4);
  const Replayed ep1 = run(m, c, plan_text(1));
  for (const CopyTimes& t : ep1.result.copies) EXPECT_EQ(t.ep_wait, Time());
  for (const CopyTimes& t : ep4.result.copies) EXPECT_GT(t.ep_wait, Time());
  ReplayOptions free;
  free.free_communication = true;
  for (const CopyTimes& t : run(m, c, kEp4, free).result.copies) EXPECT_EQ(t.ep_wait, Time());
  // Replayed twice: the same to the picosecond.
  EXPECT_EQ(run(m, c, kEp4).result.iteration, ep4.result.iteration);
}

TEST(Moe, FoldedReplicasReplayAsTheFullReplay) {
  // EP 4 of 8 replicas (two expert-parallel groups), TP 1 and 2: replica 0 standing for all
  // gives the full replay's iteration (rail-optimised fabric: symmetric traffic).
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  for (const char* tp : {"1", "2"}) {
    const std::string text =
        std::string("tensor_parallel: ") + tp +
        "\npipeline_parallel: 2\ndata_parallel: " + (std::string(tp) == "1" ? "8" : "4") +
        "\nexpert_parallel: 4\nsequence_parallel: true\n"
        "micro_batch_size: 1\nglobal_batch_size: 32\n"
        "sequence_length: 1024\nzero_stage: 1\n";
    ReplayOptions exact;
    exact.exact = true;
    const Replayed folded = run(m, c, text);
    const Replayed full = run(m, c, text, exact);
    EXPECT_GT(folded.result.folded_replicas, 1u);
    EXPECT_EQ(full.result.folded_replicas, 1u);
    EXPECT_NEAR(folded.result.iteration.seconds() / full.result.iteration.seconds(), 1.0, 1e-9)
        << "TP " << tp;
  }
}

// An all-to-all is replayed as one flow per class of alike rank pairs (network::Expansion);
// --exact gives every pair its own flow. On DGX H100 nodes the two agree to the picosecond; on
// a mixed cluster, where the pipeline's transfers and the gradients' rings share the NICs with
// the all-to-alls unevenly, within 1% (measured: iteration +0.23%, all-to-all waits -2.4%; a
// class moves at the pace of its most loaded link, where single pairs would finish early and
// leave their bandwidth to others).
TEST(Moe, AllToAllsAsClassesOfPairsGiveThePairByPairReplaysIteration) {
  const ModelConfig m = small_moe();
  ReplayOptions exact;
  exact.exact = true;
  const std::string text =
      "pipeline_parallel: 2\ndata_parallel: 16\nexpert_parallel: 8\nmicro_batch_size: 2\n"
      "global_batch_size: 128\nsequence_length: 1024\n";
  {
    const platform::Cluster c = test::cluster("dgx-h100", 4);
    const Replayed classes = run(m, c, text), pairs = run(m, c, text, exact);
    EXPECT_EQ(classes.result.iteration, pairs.result.iteration);
    for (size_t g = 0; g < pairs.result.copies.size(); ++g)
      EXPECT_EQ(classes.result.copies[g].ep_wait, pairs.result.copies[g].ep_wait) << g;
    EXPECT_LT(classes.result.events * 10, pairs.result.events);
  }
  {
    const platform::Cluster c(
        config::load_cluster("mixed-a100-v100", {}));  // 2 DGX A100, 4 x 4 V100
    const Replayed classes = run(m, c, text), pairs = run(m, c, text, exact);
    ASSERT_EQ(pairs.result.folded_replicas, 1u);
    EXPECT_NEAR(classes.result.iteration.seconds() / pairs.result.iteration.seconds(), 1.0, 1e-2);
    Time ep_classes, ep_pairs;
    for (size_t g = 0; g < pairs.result.copies.size(); ++g) {
      ep_classes += classes.result.copies[g].ep_wait;
      ep_pairs += pairs.result.copies[g].ep_wait;
    }
    EXPECT_GT(ep_pairs, Time());
    EXPECT_NEAR(ep_classes.seconds() / ep_pairs.seconds(), 1.0, 0.05)
        << ep_classes.seconds() << " s against " << ep_pairs.seconds() << " s; iteration "
        << classes.result.iteration.seconds() << " s against " << pairs.result.iteration.seconds();
  }
}

// Expert tensor parallelism 1 (Megatron-LM's --expert-tensor-parallel-size 1): each expert whole
// on one rank, the expert-parallel group every rank of expert_parallel / t replicas.
TEST(Moe, ExpertTensorParallelOneKeepsExpertsWholeAndGroupsEveryRank) {
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  const std::string base =
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\nexpert_parallel: 4\n"
      "sequence_parallel: true\nmicro_batch_size: 1\nglobal_batch_size: 16\n"
      "sequence_length: 1024\nzero_stage: 1\n";
  // The stage's degree is the default: the same replay to the picosecond.
  const Replayed split = run(m, c, base), same = run(m, c, base + "expert_tensor_parallel: 2\n");
  EXPECT_EQ(split.result.iteration, same.result.iteration);
  const Replayed whole = run(m, c, base + "expert_tensor_parallel: 1\n");
  ASSERT_TRUE(whole.plan.experts_whole());
  EXPECT_EQ(whole.plan.expert_group_replicas(), 2);
  EXPECT_EQ(split.plan.expert_group_replicas(), 4);
  // EP 4 ranks either way: 8 experts, 2 a rank. Split, the group is rank j of 4 replicas and
  // each rank holds half of 2 experts; whole, 2 replicas' 4 ranks and 2 whole experts each.
  for (size_t g = 0; g < split.job.copies.size(); ++g) {
    EXPECT_DOUBLE_EQ(whole.job.copies[g].expert_params, 2 * split.job.copies[g].expert_params);
  }
  // Every expert FLOP counted once over all devices.
  double model = 0;
  for (const StageCopy& g : whole.job.copies) model += g.model_flops * g.devices.size();
  EXPECT_NEAR(model / model_flops_per_iteration(m, 16, 1024), 1.0, 1e-12);
  // No gather over the tensor-parallel ranks around the expert GEMMs, and each expert GEMM as
  // wide as the expert (its rows: the rank's own tokens, half the replica's).
  auto count = [](const Replayed& r, CommKind kind) {
    size_t n = 0;
    for (const CommTemplate& ct : r.job.copies[0].comms) n += !ct.expert && ct.kind == kind;
    return n;
  };
  EXPECT_LT(count(whole, CommKind::allgather), count(split, CommKind::allgather));
  // Folded and full replay agree (two groups of two replicas, rail-optimised fabric).
  ReplayOptions exact;
  exact.exact = true;
  const Replayed full = run(m, c, base + "expert_tensor_parallel: 1\n", exact);
  EXPECT_GT(whole.result.folded_replicas, 1u);
  EXPECT_EQ(whole.result.iteration, full.result.iteration);
  // Bad input names the field.
  EXPECT_EQ(plan_error(base + "expert_tensor_parallel: 3\n", m, c),
            "p.yaml:10: expert_tensor_parallel: expected 1 (each expert whole on one rank) or the "
            "tensor_parallel degree 2 (the experts split as the dense layers), got 3");
  EXPECT_EQ(plan_error("tensor_parallel: 4\ndata_parallel: 4\nexpert_parallel: 2\n"
                       "sequence_parallel: true\nglobal_batch_size: 16\nsequence_length: 1024\n"
                       "expert_tensor_parallel: 1\n",
                       m, c),
            "p.yaml:3: expert_parallel: 2 is not a multiple of tensor_parallel 4: with "
            "expert_tensor_parallel 1 the expert-parallel group is every rank of expert_parallel "
            "/ tensor_parallel replicas");
}

TEST(Moe, RoutingImbalanceAndCapacity) {
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  auto loads = [&](const std::string& extra) {
    return expert_loads(m, load_plan_text(kEp4 + extra, "p.yaml", m, c));
  };
  for (double x : loads("")) EXPECT_EQ(x, 1.0);
  // Capacity below an even share drops tokens even when routing is even.
  for (double x : loads("capacity_factor: 0.5\n")) EXPECT_DOUBLE_EQ(x, 0.5);
  const std::vector<double> skew = loads("routing: {zipf: 1.2, seed: 7}\n");
  EXPECT_EQ(skew, loads("routing: {zipf: 1.2, seed: 7}\n"));
  EXPECT_NE(skew, loads("routing: {zipf: 1.2, seed: 8}\n"));
  for (double x : skew) {
    EXPECT_GT(x, 1.0);
    EXPECT_LE(x, 4.0);
  }
  // Capacity 1.25 caps every expert at 1.25 / 8 of the tokens: a rank of 2 at 2.5 / 8 of them.
  for (double x : loads("routing: {zipf: 1.2, seed: 7}\ncapacity_factor: 1.25\n"))
    EXPECT_LE(x, 1.25 + 1e-12);
  // A token visits k distinct experts, so no expert takes more than 1/k of the routed copies:
  // with one expert per rank (EP 8, top 2), no rank more than 8 / 2 = 4 times an even share.
  const platform::Cluster c8 = test::cluster("dgx-h100", 1);
  const std::string ep8 =
      "expert_parallel: 8\ndata_parallel: 8\nglobal_batch_size: 8\nrouting: {zipf: 4}\n";
  for (double x : expert_loads(m, load_plan_text(ep8, "p.yaml", m, c8))) {
    EXPECT_GT(x, 3.0);
    EXPECT_LE(x, 4.0 + 1e-12);
  }
  // One rank holds every expert: whatever the routing, it takes all the tokens.
  for (double x :
       expert_loads(m, load_plan_text(plan_text(1, "routing: {zipf: 2}\n"), "p.yaml", m, c)))
    EXPECT_DOUBLE_EQ(x, 1.0);
  // The most loaded rank sets the pace: skewed is slower than even; capacity drops the tokens
  // past it, and recovers part.
  const Time even = run(m, c, kEp4).result.iteration;
  const Time skewed = run(m, c, kEp4 + "routing: {zipf: 1.2, seed: 7}\n").result.iteration;
  const Time capped =
      run(m, c, kEp4 + "routing: {zipf: 1.2, seed: 7}\ncapacity_factor: 1.25\n").result.iteration;
  EXPECT_GT(skewed, even);
  EXPECT_LT(capped, skewed);
}

TEST(Moe, ExpertStateSplitsOverTheExpertParallelGroup) {
  const ModelConfig m = small_moe();
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  const Replayed ep1 = run(m, c, plan_text(1));
  const Replayed ep4 = run(m, c, kEp4);
  const std::vector<DeviceMemory> m1 = memory_per_copy(ep1.job);
  const std::vector<DeviceMemory> m4 = memory_per_copy(ep4.job);
  // Each layer's 8 experts of 2 x 1024 x 4096 weights (+ biases), over TP 2 and EP 4.
  const double experts = 2.0 * 8 * m.mlp_params(4096) / 2;  // stage of 2 layers, per TP rank
  for (size_t g = 0; g < ep4.job.copies.size(); ++g) {
    EXPECT_DOUBLE_EQ(ep1.job.copies[g].expert_params, experts);
    EXPECT_DOUBLE_EQ(ep4.job.copies[g].expert_params, experts / 4);
    EXPECT_DOUBLE_EQ(ep1.job.copies[g].params - ep4.job.copies[g].params, experts * 3 / 4);
    // bf16 weights; ZeRO-1 shards the optimizer: the rest over 4 replicas, the experts over the
    // 4 / 4 = 1 replica that holds them.
    EXPECT_DOUBLE_EQ(m4[g].weights, 2 * ep4.job.copies[g].params);
    const double rest = ep4.job.copies[g].params - experts / 4;
    EXPECT_NEAR(m4[g].optimizer, 12 * rest / 4 + 12 * experts / 4, 1e-6 * m4[g].optimizer);
    EXPECT_LT(m4[g].peak, m1[g].peak);
  }
}

TEST(Moe, ImpossiblePlansAreRefused) {
  const platform::Cluster c = test::cluster("dgx-h100", 2);
  const ModelConfig six = small_moe(6, 2);
  EXPECT_EQ(plan_error(kEp4, six, c),
            "p.yaml:4: expert_parallel: 4 does not divide the 6 experts of small-moe (each rank "
            "of the expert-parallel group holds experts / expert_parallel of each MoE layer)");
  const ModelConfig m = small_moe();
  EXPECT_EQ(plan_error("tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\n"
                       "expert_parallel: 8\nsequence_parallel: true\nglobal_batch_size: 16\n",
                       m, c),
            "p.yaml:4: expert_parallel: 8 does not divide the 4 data-parallel replicas (the "
            "expert-parallel groups are consecutive replicas, as in Megatron-LM)");
  EXPECT_EQ(
      plan_error("tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\n"
                 "expert_parallel: 4\nglobal_batch_size: 16\n",
                 m, c),
      "p.yaml:1: sequence_parallel: small-moe is a mixture of experts, and its layers' tokens "
      "are dispatched from sequence-parallel shards: with tensor_parallel 2 it needs "
      "sequence_parallel: true (Megatron-LM requires it)");
  EXPECT_EQ(plan_error(kEp4 + "capacity_factor: 0\n", m, c),
            "p.yaml:10: capacity_factor: expected a number above 0 and at most the expert count "
            "(8), got 0 (leave it out for dropless routing)");
  EXPECT_EQ(plan_error(kEp4 + "routing: {zipf: 1, sed: 3}\n", m, c),
            "p.yaml:10: routing.sed: unknown key (did you mean \"seed\"?)");
  EXPECT_EQ(plan_error(kEp4 + "routing: skewed\n", m, c),
            "p.yaml:10: routing: expected uniform or a map {zipf: EXPONENT, seed: N}");
  EXPECT_EQ(plan_error(plan_text(4, "", 3), m, c).substr(0, 60),
            "p.yaml:4: expert_parallel: zero_stage 3 with expert parallel");
  EXPECT_EQ(plan_error("expert_parallel: 2\ndata_parallel: 16\nglobal_batch_size: 16\n",
                       test::small_gpt(), c),
            "p.yaml:1: expert_parallel: small has no experts (a dense model; expert parallelism "
            "and routing apply to a mixture of experts)");
  // Several expert-parallel groups: every replica splits the layers alike.
  EXPECT_EQ(plan_error("micro_batch_size: 1\nexpert_parallel: 2\nreplicas:\n"
                       "  - {micro_batches: 2, stages: [{layers: 2, devices: [0]}, "
                       "{layers: 2, devices: [1]}]}\n"
                       "  - {micro_batches: 2, stages: [{layers: 2, devices: [2]}, "
                       "{layers: 2, devices: [3]}]}\n"
                       "  - {micro_batches: 2, stages: [{layers: 4, devices: [4]}]}\n"
                       "  - {micro_batches: 2, stages: [{layers: 4, devices: [5]}]}\n",
                       m, c),
            "p.yaml:2: expert_parallel: replicas 0 and 2 differ in their stages or micro-batches; "
            "with 2 expert-parallel groups, each layer's experts are reduced among replicas of "
            "different groups, and each all-to-all pairs the replicas of one group: every replica "
            "needs the same stages (layers, tensor-parallel degree) and micro-batches");
  EXPECT_EQ(plan_error("tensor_parallel: 2\ndata_parallel: 8\nsequence_parallel: true\n"
                       "global_batch_size: 8\n",
                       small_moe(8, 2, "expert_ffn_hidden: 1001\n"), c),
            "p.yaml: stage 0: tensor_parallel 2 does not divide expert_ffn_hidden (1001): each "
            "expert's FFN splits over the tensor-parallel ranks");
  // Models: a MoE key without experts, and more experts per token than experts.
  auto model_error = [](const std::string& extra) {
    try {
      load_model_yaml_text(
          "name: x\nfamily: gpt\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nsequence: 64\n"
          "activation: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\n"
          "causal: true\nbias: true\n" +
              extra,
          "x.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(model_error("experts_per_token: 2\n"),
            "x.yaml:14: experts_per_token: applies to a mixture of experts; give experts (the "
            "routed experts per layer) too");
  EXPECT_EQ(model_error("experts: 4\nexperts_per_token: 2\ndense_layers: 1\nmoe_every: 2\n"),
            "x.yaml: moe_every: with dense_layers 1 and moe_every 2, none of the 2 layers is a "
            "MoE layer");
  EXPECT_EQ(model_error("experts: 4\nexperts_per_token: 5\n"),
            "x.yaml:15: experts_per_token: expected an integer from 1 to 4, got \"5\"");
}

}  // namespace
}  // namespace hetsim::workload
