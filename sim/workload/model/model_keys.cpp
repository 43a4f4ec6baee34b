// The keys of a model file (models/*.yaml), declared once (config/key_table.h): model.cpp and
// cnn.cpp check a file's keys and read its choices from this table, and `hetsim reference
// model-keys | model-schema` writes docs/reference/model-keys.md and
// docs/schemas/model.schema.json from it. A transformer's keys and a convolutional network's
// (`family: cnn`) are the two forms of one file.
#include "sim/config/limits.h"
#include "sim/workload/model/model.h"

namespace hetsim::workload {

namespace {

using config::Key;
using T = config::KeyType;
namespace limits = config::limits;

constexpr std::string_view kTransformer = "family: gpt, llama, bert, gptneox";
constexpr std::string_view kCnn = "family: cnn";
constexpr double kLayers = static_cast<double>(limits::kLayers);
constexpr double kHidden = static_cast<double>(limits::kHidden);
constexpr double kHeads = static_cast<double>(limits::kHeads);
constexpr double kFfn = static_cast<double>(limits::kFfn);
constexpr double kExperts = static_cast<double>(limits::kExperts);

// A transformer's shape and layout.
void add_layer_keys(std::vector<Key>& keys) {
  const std::string_view tr = kTransformer;
  const std::vector<Key> rows = {
      {"name", T::text, {}, 0, 0, "", "The model's name", ""},
      {"family",
       T::choice,
       {"gpt", "llama", "bert", "gptneox", "cnn"},
       0,
       0,
       "",
       "Selects defaults (dropout) and the file's form: a transformer, or a convolutional network",
       ""},
      {"layers", T::integer, {}, 1, kLayers, "", "Transformer layers", "", tr},
      {"hidden", T::integer, {}, 1, kHidden, "", "Hidden width", "", tr},
      {"heads", T::integer, {}, 1, kHeads, "", "Attention heads", "", tr},
      {"kv_heads",
       T::integer,
       {},
       1,
       kHeads,
       "heads",
       "Key/value heads (grouped-query attention), at most heads",
       "",
       tr},
      {"head_dim", T::integer, {}, 1, kHidden, "hidden / heads", "Width of one head", "", tr},
      {"ffn_hidden", T::integer, {}, 1, kFfn, "4 x hidden", "The MLP's inner width", "", tr},
      {"vocab",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kVocab),
       "",
       "Vocabulary size",
       "",
       tr},
      {"sequence",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kSequence),
       "",
       "Sequence length of a plan that does not set one",
       "",
       tr},
      {"activation",
       T::choice,
       {"gelu", "swiglu"},
       0,
       0,
       "",
       "The MLP: GELU, or SwiGLU (gate and up projections of ffn_hidden each)",
       "",
       tr},
      {"norm", T::choice, {"layernorm", "rmsnorm"}, 0, 0, "", "The norms", "", tr},
      {"position",
       T::choice,
       {"learned", "rotary"},
       0,
       0,
       "",
       "Positions: a learned table of `sequence` rows, or rotary",
       "",
       tr},
      {"tied_embeddings",
       T::flag,
       {},
       0,
       0,
       "",
       "The logits GEMM reuses the input embedding",
       "",
       tr},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A transformer's head and biases.
void add_layer_option_keys(std::vector<Key>& keys) {
  const std::string_view tr = kTransformer;
  const std::vector<Key> rows = {
      {"head",
       T::choice,
       {"lm", "classification"},
       0,
       0,
       "lm",
       "The last layer's head: logits over the vocabulary and their loss, or a sequence "
       "classifier (a pooler on the first token and classes logits; Megatron-LM's "
       "Classification model)",
       "",
       tr},
      {"classes",
       T::integer,
       {},
       2,
       static_cast<double>(limits::kVocab),
       "2",
       "A classification head's classes (with head: classification)",
       "",
       tr},
      {"causal", T::flag, {}, 0, 0, "", "A decoder (true) or an encoder (false)", "", tr},
      {"bias", T::flag, {}, 0, 0, "", "The linear layers carry biases", "", tr},
      {"qkv_bias",
       T::flag,
       {},
       0,
       0,
       "false",
       "Biases on the query, key and value projections only (Qwen2)",
       "",
       tr},
      {"mlp_bias", T::flag, {}, 0, 0, "bias", "The MLP's biases", "", tr},
      {"head_bias", T::flag, {}, 0, 0, "false", "A bias on the output projection (GPT-J)", "", tr},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A transformer's norms' placement, its attention variants and dropout.
void add_attention_option_keys(std::vector<Key>& keys) {
  const std::string_view tr = kTransformer;
  const std::vector<Key> rows = {
      {"norm_placement",
       T::choice,
       {"pre", "post", "sandwich"},
       0,
       0,
       "pre",
       "Norms before each block, after it (OLMo 2), or both (Gemma 2 and 3)",
       "",
       tr},
      {"parallel_attention",
       T::flag,
       {},
       0,
       0,
       "false",
       "Attention and the MLP on the same input (Falcon, GPT-J, GPT-NeoX)",
       "",
       tr},
      {"parallel_norms",
       T::integer,
       {},
       1,
       2,
       "1",
       "A parallel layer's norms: 1 shared, or 2 (Falcon's new decoder, GPT-NeoX)",
       "",
       tr},
      {"qk_norm",
       T::choice,
       {"none", "head", "projection", "unweighted"},
       0,
       0,
       "none",
       "Query/key norms: per head (Qwen3, Gemma 3), over the projections (OLMo 2), or weightless "
       "(Llama 4)",
       "",
       tr},
      {"attention_window",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kSequence),
       "none",
       "Local attention over this many keys (sliding) or tokens (chunked)",
       "",
       tr},
      {"window_kind",
       T::choice,
       {"none", "sliding", "chunked"},
       0,
       0,
       "sliding with attention_window, else none",
       "Sliding windows (Mistral, Gemma) or chunks (Llama 4)",
       "",
       tr},
      {"global_every",
       T::integer,
       {},
       0,
       kLayers,
       "0",
       "Every n-th layer attends globally (0: none; Gemma 2: 2, Gemma 3: 6)",
       "",
       tr},
      {"dropout",
       T::fraction,
       {},
       0,
       0,
       "0.1 (llama, gptneox: 0)",
       "Dropout probability, below 1",
       "",
       tr},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A transformer's mixture of experts and latent attention.
void add_moe_keys(std::vector<Key>& keys) {
  const std::string_view tr = kTransformer;
  const std::vector<Key> rows = {
      {"experts", T::integer, {}, 0, kExperts, "0 (dense)", "Routed experts per MoE layer", "", tr},
      {"experts_per_token", T::integer, {}, 1, kExperts, "", "Top-k (needed with experts)", "", tr},
      {"expert_ffn_hidden",
       T::integer,
       {},
       1,
       kFfn,
       "ffn_hidden",
       "Each expert's FFN width",
       "",
       tr},
      {"shared_experts",
       T::integer,
       {},
       0,
       kExperts,
       "0",
       "Experts every token visits, beside the routed ones (DeepSeek)",
       "",
       tr},
      {"dense_layers",
       T::integer,
       {},
       0,
       kLayers,
       "0",
       "The first layers keep the dense FFN (DeepSeek's first_k_dense_replace)",
       "",
       tr},
      {"moe_every",
       T::integer,
       {},
       1,
       kLayers,
       "1",
       "After them every n-th layer is a MoE layer (DeepSpeed-MoE: 2)",
       "",
       tr},
      {"moe_phase",
       T::integer,
       {},
       0,
       kLayers,
       "0",
       "MoE layers are those with l % moe_every == moe_phase (Llama 4 Maverick: 1)",
       "",
       tr},
      {"kv_lora_rank",
       T::integer,
       {},
       0,
       kHidden,
       "0 (standard attention)",
       "Multi-head latent attention: the keys' and values' latent width (DeepSeek-V2/V3)",
       "",
       tr},
      {"q_lora_rank",
       T::integer,
       {},
       0,
       kHidden,
       "0",
       "The queries' latent width (0: projected directly)",
       "",
       tr},
      {"qk_rope_head_dim",
       T::integer,
       {},
       1,
       kHidden,
       "",
       "The rotary part of each query/key head (needed with kv_lora_rank)",
       "",
       tr},
      {"v_head_dim",
       T::integer,
       {},
       1,
       kHidden,
       "head_dim - qk_rope_head_dim",
       "Each value head",
       "",
       tr},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A convolutional network's input and its layers' kinds.
void add_cnn_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"input", T::map, {}, 0, 0, "", "One image", "", kCnn},
      {"input.channels", T::integer, {}, 1, kHidden, "", "Channels (3 for RGB)", ""},
      {"input.height", T::integer, {}, 1, 65536, "", "Pixels", ""},
      {"input.width", T::integer, {}, 1, 65536, "", "Pixels", ""},
      {"network",
       T::list,
       {},
       0,
       0,
       "",
       "The layers in order, the last a fully connected classifier",
       "",
       kCnn},
      {"network[]",
       T::map,
       {},
       0,
       0,
       "",
       "One layer: exactly one of conv, pool, fc, bottleneck",
       ""},
      {"network[].conv",
       T::integer,
       {},
       1,
       kHidden,
       "",
       "A convolution of this many filters",
       "",
       "conv"},
      {"network[].pool", T::choice, {"max", "avg"}, 0, 0, "", "A pooling layer", "", "pool"},
      {"network[].fc",
       T::integer,
       {},
       1,
       kFfn,
       "",
       "A fully connected layer of this many outputs",
       "",
       "fc"},
      {"network[].bottleneck",
       T::integer,
       {},
       1,
       kHidden,
       "",
       "ResNet v1.5 bottleneck blocks of this width (their output 4 x)",
       "",
       "bottleneck"},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// The options of a convolutional network's layers: kernel, stride, padding, bias, batch norm,
// ReLU, dropout, blocks and names.
void add_cnn_layer_option_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"network[].kernel", T::integer, {}, 1, 1024, "", "The window's edge", "", "conv | pool"},
      {"network[].stride",
       T::integer,
       {},
       1,
       1024,
       "1 (a pool's: its kernel)",
       "The window's step (a bottleneck's first block's)",
       "",
       "conv | pool | bottleneck"},
      {"network[].pad",
       T::integer,
       {},
       0,
       1024,
       "0",
       "Zero padding on each side",
       "",
       "conv | pool"},
      {"network[].global",
       T::flag,
       {},
       0,
       0,
       "false",
       "A pool over the whole (square) image, with no kernel, stride or pad",
       "",
       "pool"},
      {"network[].bias",
       T::flag,
       {},
       0,
       0,
       "true (a conv with batchnorm: false)",
       "A bias",
       "",
       "conv | fc"},
      {"network[].batchnorm",
       T::flag,
       {},
       0,
       0,
       "false",
       "Batch norm after the convolution",
       "",
       "conv"},
      {"network[].relu", T::flag, {}, 0, 0, "true", "A ReLU after it", "", "conv | fc"},
      {"network[].dropout", T::fraction, {}, 0, 0, "0", "Dropout before it, below 1", "", "fc"},
      {"network[].blocks", T::integer, {}, 1, 1024, "", "Bottleneck blocks", "", "bottleneck"},
      {"network[].name",
       T::text,
       {},
       0,
       0,
       "conv1, pool1, fc1, layer1, ...",
       "The layer's name (each its own; not loss)",
       ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

std::vector<Key> make_model_keys() {
  std::vector<Key> keys;
  add_layer_keys(keys);
  add_layer_option_keys(keys);
  add_attention_option_keys(keys);
  add_moe_keys(keys);
  add_cnn_keys(keys);
  add_cnn_layer_option_keys(keys);
  return keys;
}

}  // namespace

const std::vector<Key>& model_keys() {
  static const std::vector<Key> table = make_model_keys();
  return table;
}

std::vector<std::string> model_key_choices(std::string_view key) {
  return config::choices_of(config::find_key(model_keys(), key, "the model keys"));
}

std::string model_keys_markdown() {
  return "# Model keys\n\n"
         "<!-- Generated by `hetsim reference model-keys` from sim/workload/model/model_keys.cpp; "
         "do not edit. -->\n\n"
         "The keys of a model file (`models/*.yaml`; a Hugging Face `config.json` is read by its "
         "own names). A transformer's keys are \"only with `family: gpt, llama, bert, gptneox`\"; "
         "a convolutional network is `family: cnn` with `input` and `network`, each entry of "
         "`network` (`network[]`) one layer. What the layouts mean, and the Hugging Face "
         "mapping: [model descriptions](../../models/README.md). Editors check model files "
         "against [the JSON Schema](../schemas/model.schema.json).\n\n" +
         config::keys_markdown(model_keys(), false);
}

nlohmann::ordered_json model_json_schema() {
  return config::keys_json_schema(model_keys(), "hetsim model",
                                  "Generated by `hetsim reference model-schema` from "
                                  "sim/workload/model/model_keys.cpp; do not edit.",
                                  {"name", "family"});
}

}  // namespace hetsim::workload
