// Layer layouts beyond Llama's: local attention (sliding windows, chunks), norms after the
// blocks, query/key norms, parallel attention and MLP, experts in every other layer; as the
// Hugging Face configs of the families that have them read, and as the layer programs run them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sim/core/error.h"
#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"

namespace hetsim::workload {
namespace {

const std::string kHf = std::string(HETSIM_SOURCE_DIR) + "/tests/data/hf/";

int count(const std::vector<Step>& steps, const std::string& prefix) {
  return static_cast<int>(std::count_if(steps.begin(), steps.end(), [&](const Step& s) {
    return s.op.name.rfind(prefix, 0) == 0 && s.comm == CommKind::none;
  }));
}
int collectives(const std::vector<Step>& steps) {
  return static_cast<int>(std::count_if(steps.begin(), steps.end(),
                                        [](const Step& s) { return s.comm != CommKind::none; }));
}
Op find(const std::vector<Step>& steps, const std::string& name) {
  for (const Step& s : steps)
    if (s.op.name == name) return s.op;
  throw std::runtime_error("no op " + name);
}

TEST(LayerLayouts, HuggingFaceConfigsSayWhereTheirLayersDiffer) {
  const ModelConfig g2 = load_model(kHf + "gemma-2-9b.json");
  EXPECT_EQ(g2.norm_placement, NormPlacement::sandwich);
  EXPECT_EQ(g2.window_kind, WindowKind::sliding);
  EXPECT_EQ(g2.attention_window, 4096);
  EXPECT_EQ(g2.global_every, 2);  // layer 0 local, 1 global, ...
  EXPECT_TRUE(g2.windowed(0));
  EXPECT_FALSE(g2.windowed(1));
  EXPECT_EQ(g2.windowed_layers(), 21);
  const ModelConfig g3 = load_model(kHf + "gemma-3-1b-pt.json");
  EXPECT_EQ(g3.qk_norm, QkNorm::head);
  EXPECT_EQ(g3.attention_window, 512);
  EXPECT_EQ(g3.global_every, 6);  // layers 5, 11, 17, 23 global
  EXPECT_EQ(g3.windowed_layers(), 22);
  const ModelConfig olmo = load_model(kHf + "olmo-2-1124-7b.json");
  EXPECT_EQ(olmo.norm_placement, NormPlacement::post);
  EXPECT_EQ(olmo.qk_norm, QkNorm::projection);
  const ModelConfig falcon = load_model(kHf + "falcon-7b.json");
  EXPECT_TRUE(falcon.parallel_attention);
  EXPECT_EQ(falcon.parallel_norms, 1);
  EXPECT_EQ(falcon.kv_heads, 1);  // multi_query, whatever num_kv_heads says
  EXPECT_FALSE(falcon.bias);
  EXPECT_EQ(falcon.sequence, 2048);  // FalconConfig's default
  const ModelConfig falcon40 = load_model(kHf + "falcon-40b.json");
  EXPECT_EQ(falcon40.parallel_norms, 2);
  EXPECT_EQ(falcon40.kv_heads, 8);
  const ModelConfig gptj = load_model(kHf + "gpt-j-6b.json");
  EXPECT_TRUE(gptj.parallel_attention);
  EXPECT_FALSE(gptj.bias);
  EXPECT_TRUE(gptj.mlp_bias);
  EXPECT_TRUE(gptj.head_bias);
  const ModelConfig mistral = load_model(kHf + "mistral-7b-v0.1.json");
  EXPECT_EQ(mistral.attention_window, 4096);
  EXPECT_EQ(mistral.global_every, 0);  // every layer
  const ModelConfig neox = load_model(kHf + "pythia-1.4b.json");
  EXPECT_TRUE(neox.parallel_attention);  // use_parallel_residual
  EXPECT_EQ(neox.parallel_norms, 2);
  // Llama 4 Maverick: experts in the odd layers (interleave_moe_layer_step 2), dense layers of
  // intermediate_size_mlp, one shared expert, chunks of 8192 in three layers of four.
  const ModelConfig mav = load_model(kHf + "llama-4-maverick-17b-128e.json");
  EXPECT_FALSE(mav.is_moe(0));
  EXPECT_TRUE(mav.is_moe(1));
  EXPECT_EQ(mav.first_moe_layer(), 1);
  EXPECT_EQ(mav.moe_layers_in(0, 48), 24);
  EXPECT_EQ(mav.moe_layers_in(1, 4), 2);
  EXPECT_EQ(mav.moe_layers_in(2, 1), 0);
  EXPECT_EQ(mav.ffn_hidden, 16384);
  EXPECT_EQ(mav.expert_ffn_hidden, 8192);
  EXPECT_EQ(mav.shared_experts, 1);
  EXPECT_EQ(mav.window_kind, WindowKind::chunked);
  EXPECT_EQ(mav.global_every, 4);
  EXPECT_EQ(mav.qk_norm, QkNorm::none);
  const ModelConfig scout = load_model(kHf + "llama-4-scout-17b-16e.json");
  EXPECT_EQ(scout.moe_layers_in(0, 48), 48);
  EXPECT_EQ(scout.qk_norm, QkNorm::unweighted);
  EXPECT_EQ(scout.layer_params(0), scout.layer_params(1));
}

TEST(LayerLayouts, AttentionSpanIsTheKeysTheQueriesSeeOverTheCausalMasks) {
  ModelConfig m = load_model(kHf + "mistral-7b-v0.1.json");
  // Every layer slides 4096 keys over 32768 tokens: (s w - w^2 / 2) / (s^2 / 2) = 1/4 - 1/64.
  EXPECT_DOUBLE_EQ(m.attention_span(32768), 0.25 - 1.0 / 64);
  EXPECT_DOUBLE_EQ(m.attention_span(8192), 0.75);
  EXPECT_EQ(m.attention_span(4096), 1.0);  // the window covers the sequence
  EXPECT_EQ(m.attention_span(1024), 1.0);
  // Gemma 2: half the layers local at 8192 tokens and a window of 4096.
  const ModelConfig g2 = load_model(kHf + "gemma-2-9b.json");
  EXPECT_DOUBLE_EQ(g2.attention_span(8192), (21 * 0.75 + 21) / 42);
  // Llama 4: chunks of 8192 at 32768 tokens (each query sees its chunk: w / s of the causal
  // mask's keys) in 36 of 48 layers.
  const ModelConfig mav = load_model(kHf + "llama-4-maverick-17b-128e.json");
  EXPECT_DOUBLE_EQ(mav.attention_span(32768), (36 * 0.25 + 12) / 48);
}

TEST(LayerLayouts, FusedAttentionSkipsTheBlocksOutsideTheWindowAndUnfusedComputesThemAll) {
  const ModelConfig m = load_model(kHf + "mistral-7b-v0.1.json");
  ModelConfig full = m;
  full.window_kind = WindowKind::none;
  LayerShape s;
  s.sequence = 32768;
  const double span = m.attention_span(32768);
  const Op a = find(layer_forward(m, s), "attention");
  const Op b = find(layer_forward(full, s), "attention");
  EXPECT_DOUBLE_EQ(a.flops, b.flops * span);
  EXPECT_DOUBLE_EQ(a.model_flops, b.model_flops * span);
  EXPECT_EQ(a.span, span);
  EXPECT_DOUBLE_EQ(find(layer_backward(m, s), "attention.bwd").flops,
                   find(layer_backward(full, s), "attention.bwd").flops * span);
  s.flash_attention = false;
  EXPECT_EQ(find(layer_forward(m, s), "attention").flops,
            find(layer_forward(full, s), "attention").flops);
  EXPECT_EQ(find(layer_forward(m, s), "attention").span, 1.0);
}

TEST(LayerLayouts, NormsRunWhereTheLayoutPutsThem) {
  ModelConfig m = load_model("llama2-7b");
  LayerShape s;
  s.sequence = 1024;
  EXPECT_EQ(count(layer_forward(m, s), "norm"), 2);
  EXPECT_EQ(count(layer_forward(m, s), "post_norm"), 0);
  m.norm_placement = NormPlacement::sandwich;
  EXPECT_EQ(count(layer_forward(m, s), "norm"), 2);
  EXPECT_EQ(count(layer_forward(m, s), "post_norm"), 2);
  EXPECT_EQ(count(layer_backward(m, s), "post_norm"), 2);
  // Post: each block's output normed before its residual add, nothing before the blocks.
  m.norm_placement = NormPlacement::post;
  const std::vector<Step> f = layer_forward(m, s);
  EXPECT_EQ(count(f, "norm"), 0);
  EXPECT_EQ(f.front().op.name, "qkv");
  auto at = [&](const std::string& name) {
    return std::find_if(f.begin(), f.end(), [&](const Step& x) { return x.op.name == name; }) -
           f.begin();
  };
  EXPECT_LT(at("proj"), at("post_norm1"));
  EXPECT_LT(at("post_norm1"), at("dropout_residual1"));
  // Query/key norms: one kernel over the queries and keys after the projection, each way.
  m.qk_norm = QkNorm::head;
  EXPECT_DOUBLE_EQ(find(layer_forward(m, s), "qk_norm").bytes,
                   2.0 * 2 * 1024 * (m.q_width() + m.kv_width()));
  EXPECT_EQ(count(layer_backward(m, s), "qk_norm.bwd"), 1);
}

TEST(LayerLayouts, AParallelLayerReducesItsTwoBranchesOnce) {
  ModelConfig m = load_model("llama2-7b");
  LayerShape s;
  s.sequence = 1024;
  s.tensor_parallel = 2;
  // Sequential: an all-reduce after attention and after the MLP, and after each block's input
  // gradient backward.
  EXPECT_EQ(collectives(layer_forward(m, s)), 2);
  EXPECT_EQ(collectives(layer_backward(m, s)), 2);
  m.parallel_attention = true;
  const std::vector<Step> f = layer_forward(m, s);
  EXPECT_EQ(collectives(f), 1);
  EXPECT_EQ(collectives(layer_backward(m, s)), 1);
  EXPECT_EQ(count(f, "norm"), 1);
  EXPECT_EQ(count(f, "branch_add"), 1);
  EXPECT_EQ(count(f, "dropout_residual"), 1);
  // The same GEMMs, so the same FLOPs.
  ModelConfig seq = m;
  seq.parallel_attention = false;
  auto gemm_flops = [](const std::vector<Step>& steps) {
    double x = 0;
    for (const Step& st : steps)
      if (st.op.kind == OpKind::gemm) x += st.op.flops;
    return x;
  };
  EXPECT_EQ(gemm_flops(f), gemm_flops(layer_forward(seq, s)));
  EXPECT_EQ(gemm_flops(layer_backward(m, s)), gemm_flops(layer_backward(seq, s)));
  // Sequence parallel: the shared input gathered once each way, the sum reduce-scattered once.
  s.sequence_parallel = true;
  EXPECT_EQ(collectives(layer_forward(m, s)), 2);
  EXPECT_EQ(collectives(layer_backward(m, s)), 3);  // grad gather, input regather, reduce
}

TEST(LayerLayouts, YamlModelsSayTheSameAndContradictionsAreRefused) {
  const std::string base =
      "name: x\nfamily: llama\nlayers: 4\nhidden: 64\nheads: 4\nvocab: 100\nsequence: 64\n"
      "activation: swiglu\nnorm: rmsnorm\nposition: rotary\ntied_embeddings: false\n"
      "causal: true\nbias: false\n";
  const ModelConfig m = load_model_yaml_text(
      base + "norm_placement: sandwich\nqk_norm: head\nattention_window: 16\nglobal_every: 2\n",
      "x.yaml");
  EXPECT_EQ(m.norm_placement, NormPlacement::sandwich);
  EXPECT_EQ(m.qk_norm, QkNorm::head);
  EXPECT_EQ(m.window_kind, WindowKind::sliding);
  EXPECT_EQ(m.windowed_layers(), 2);
  // 4 norms of 64 and q/k norms of 16 each: 160 more than the pre-norm layer.
  const ModelConfig plain = load_model_yaml_text(base, "x.yaml");
  EXPECT_EQ(m.layer_params() - plain.layer_params(), 2 * 64 + 2 * 16);
  auto err = [&](const std::string& extra) {
    try {
      load_model_yaml_text(base + extra, "x.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("parallel_attention: true\nnorm_placement: post\n"),
            "x.yaml: parallel_attention: a parallel layer's attention and MLP read one normed "
            "input: expected norm_placement pre");
  EXPECT_EQ(err("attention_window: 16\nglobal_every: 1\n"),
            "x.yaml: global_every: 1 makes every layer global: leave out attention_window, or "
            "give 0 (every layer local) or at least 2");
  EXPECT_NE(err("qk_norm: rms\n").find("qk_norm: unknown value \"rms\""), std::string::npos);
}

TEST(LayerLayouts, ConfigFieldsHetsimCannotPlaceAreRefusedByName) {
  auto err = [](const std::string& json) {
    try {
      load_model_hf_text(json, "config.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string qwen3 =
      R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 64, "sliding_window": 16)";
  EXPECT_EQ(err(qwen3 + "}"), "no error");
  EXPECT_EQ(err(qwen3 + R"(, "use_sliding_window": true})"),
            "config.json: use_sliding_window: Qwen's sliding window in the layers from "
            "max_window_layers on is not modelled; expected false");
  const std::string gemma3 =
      R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
          "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 128, "head_dim": 16, "sliding_window": 16, "layer_types": )";
  EXPECT_EQ(load_model_hf_text(gemma3 + R"(["sliding_attention", "full_attention",
              "sliding_attention", "full_attention"]})",
                               "config.json")
                .global_every,
            2);
  EXPECT_EQ(err(gemma3 + R"(["full_attention", "sliding_attention", "sliding_attention",
              "full_attention"]})"),
            "config.json: layer_types: the global layers must fall every G-th layer (l + 1 a "
            "multiple of G); layer 1 breaks the period 1");
  EXPECT_EQ(
      err(R"({"architectures": ["FalconForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64,
              "alibi": true})"),
      "config.json: alibi: ALiBi position biases are not modelled; expected false");
  EXPECT_EQ(err(R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "ffn_dim": 128, "vocab_size": 100,
              "max_position_embeddings": 64, "word_embed_proj_dim": 32})"),
            "config.json: word_embed_proj_dim: embeddings narrower than hidden_size (projected in "
            "and out) are not modelled; expected hidden_size (64)");
  EXPECT_EQ(err(R"({"architectures": ["Gemma3ForConditionalGeneration"]})"),
            "config.json: text_config: missing (the language model's fields) for "
            "Gemma3ForConditionalGeneration");
}

}  // namespace
}  // namespace hetsim::workload
