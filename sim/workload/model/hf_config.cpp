// A Hugging Face config.json as a ModelConfig: the fields read by their names, whichever family
// spells them; the architecture's name consulted only where its code differs. See model.h.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "sim/config/limits.h"
#include "sim/core/error.h"
#include "sim/workload/model/model.h"

namespace hetsim::workload {

namespace {

namespace limits = config::limits;

// A config's fields, with errors that name the file and the field.
struct Fields {
  const nlohmann::json& j;
  const std::string& file;
  const std::string& arch;

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  InputError error(const std::string& field, const std::string& what) const {
    return InputError(file + ": " + field + ": " + what);
  }
  // An integer in [min, max]; a present field of another type, or out of range, is an error
  // that names it (a value nlohmann reads as unsigned is compared before narrowing).
  std::optional<int> integer(const char* k, long min, long max) const {
    if (!has(k)) return std::nullopt;
    const nlohmann::json& v = j[k];
    const std::string expected =
        "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    if (!v.is_number_integer()) {
      throw error(k,
                  "expected " + expected + ", got " + std::string(v.type_name()) + " " + v.dump());
    }
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                                                 : v.get<int64_t>() <= max;
    if (!in_range || v.get<int64_t>() < min)
      throw error(k, "expected " + expected + ", got " + v.dump());
    return static_cast<int>(v.get<int64_t>());
  }
  // The first of `keys` present (a family's name for the field, then the others'), required.
  int get(std::initializer_list<const char*> keys, long max) const {
    for (const char* k : keys) {
      if (const std::optional<int> v = integer(k, 1, max)) return *v;
    }
    std::string names;
    for (const char* k : keys) names += (names.empty() ? "" : " or ") + std::string(k);
    throw error(names, "missing required field (an integer) for " + arch);
  }
  int get_or(std::initializer_list<const char*> keys, long min, long max, int def) const {
    for (const char* k : keys) {
      if (const std::optional<int> v = integer(k, min, max)) return *v;
    }
    return def;
  }
  bool flag(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j[k].is_boolean()) throw error(k, "expected true or false, got " + j[k].dump());
    return j[k].get<bool>();
  }
  double probability(std::initializer_list<const char*> keys, double def) const {
    for (const char* k : keys) {
      if (!j.contains(k)) continue;
      if (!j[k].is_number() || !(j[k].get<double>() >= 0 && j[k].get<double>() < 1))
        throw error(k, "expected a probability in [0, 1), got " + j[k].dump());
      return j[k].get<double>();
    }
    return def;
  }
  std::string string(const char* k) const {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  }
};

// What an architecture's code implies beyond its config's fields.
struct Traits {
  std::vector<std::string> names;
  const char* family;
  Activation activation;
  Norm norm;
  Position position;
  bool tied, causal, bias;
};

const std::vector<Traits>& architectures() {
  static const std::vector<Traits> all = {
      {{"GPT2LMHeadModel", "GPT2Model"},
       "gpt",
       Activation::gelu,
       Norm::layernorm,
       Position::learned,
       true,
       true,
       true},
      // OPT: ReLU in a two-matrix MLP (costed as GPT's GELU: one elementwise kernel).
      {{"OPTForCausalLM"},
       "gpt",
       Activation::gelu,
       Norm::layernorm,
       Position::learned,
       true,
       true,
       true},
      // Gemma's GeGLU (GELU on the gate of the same gated MLP) costs as SwiGLU: the same matmuls
      // and one elementwise activation and product. Phi-3's fused qkv and gate-up projections
      // hold the same weights and FLOPs as Llama's separate ones.
      {{"LlamaForCausalLM", "LlamaModel", "MistralForCausalLM", "MixtralForCausalLM",
        "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "GemmaForCausalLM",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "Olmo2ForCausalLM",
        "Llama4ForCausalLM"},
       "llama",
       Activation::swiglu,
       Norm::rmsnorm,
       Position::rotary,
       false,
       true,
       false},
      {{"GPTNeoXForCausalLM", "GPTNeoXModel"},
       "gptneox",
       Activation::gelu,
       Norm::layernorm,
       Position::rotary,
       false,
       true,
       true},
      // Falcon, GPT-J and StarCoder2: GPT-NeoX's structure (LayerNorm, a GELU MLP of two
      // matrices, rotary positions) with their own biases and layer layouts (read below).
      {{"FalconForCausalLM"},
       "gptneox",
       Activation::gelu,
       Norm::layernorm,
       Position::rotary,
       true,
       true,
       false},
      {{"GPTJForCausalLM"},
       "gptneox",
       Activation::gelu,
       Norm::layernorm,
       Position::rotary,
       false,
       true,
       false},
      {{"Starcoder2ForCausalLM"},
       "gptneox",
       Activation::gelu,
       Norm::layernorm,
       Position::rotary,
       true,
       true,
       true},
      {{"BertModel", "BertForPreTraining", "BertForMaskedLM"},
       "bert",
       Activation::gelu,
       Norm::layernorm,
       Position::learned,
       true,
       false,
       true},
  };
  return all;
}

// Vision-language wrappers whose language model hetsim reads from `text_config` (the vision
// tower is not modelled: its parameters are not counted, nor its work).
const std::vector<std::pair<std::string, std::string>> kWrappers = {
    {"Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"},
    {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}};

// The fields a configuration class defaults (transformers' configuration_*.py) that hetsim
// reads, by model_type: a config.json lists only what differs from its class's defaults, and a
// wrapper's text_config often leaves out the vocabulary and context. The config's own win.
nlohmann::json class_defaults(const std::string& model_type) {
  if (model_type == "gemma3_text") {
    // Gemma3TextConfig.
    return {{"vocab_size", 262208},   {"max_position_embeddings", 131072},
            {"sliding_window", 4096}, {"sliding_window_pattern", 6},
            {"head_dim", 256},        {"tie_word_embeddings", true},
            {"attention_bias", false}};
  }
  if (model_type == "llama4_text") {
    // Llama4TextConfig.
    return {{"attention_chunk_size", 8192},
            {"interleave_moe_layer_step", 1},
            {"num_experts_per_tok", 1},
            {"use_qk_norm", true},
            {"tie_word_embeddings", false}};
  }
  if (model_type == "falcon") return {{"max_position_embeddings", 2048}};  // FalconConfig
  return nlohmann::json::object();
}

bool one_of(const std::string& arch, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return arch == n; });
}

// Which layers attend globally, where the config lists them: `layer_types` (newer configs:
// "full_attention" against "sliding_attention" or "chunked_attention"), or Llama 4's
// `no_rope_layers` (0: a global layer without rotary positions; 1: a chunked one).
std::optional<std::vector<bool>> listed_global_layers(const Fields& f, int layers) {
  const char* key = f.has("layer_types")                                       ? "layer_types"
                    : f.arch == "Llama4ForCausalLM" && f.has("no_rope_layers") ? "no_rope_layers"
                                                                               : nullptr;
  if (!key) return std::nullopt;
  const nlohmann::json& list = f.j[key];
  if (list.is_array() && list.empty()) return std::nullopt;  // the class's default pattern
  if (!list.is_array() || static_cast<int>(list.size()) != layers)
    throw f.error(key, "expected a list of " + std::to_string(layers) + " entries, one a layer");
  std::vector<bool> global;
  for (const nlohmann::json& x : list) {
    if (key == std::string("layer_types") && !x.is_string())
      throw f.error(key, "expected layer type names, got " + x.dump());
    if (key != std::string("layer_types") && !x.is_number_integer())
      throw f.error(key, "expected 0 or 1 a layer, got " + x.dump());
    global.push_back(x.is_string() ? x == "full_attention" : x == 0);
  }
  return global;
}

// Local attention: Mistral's, Phi-3's and StarCoder2's sliding window in every layer, Gemma 2's
// in every other (global_every 2), Gemma 3's in five of six (sliding_window_pattern), Llama 4's
// chunks (attention_chunk_size) in three of four; a list of the layers' kinds must place the
// global ones every G-th (l + 1 a multiple of G). Qwen's configs keep a sliding_window used only
// under use_sliding_window, whose layer rule (max_window_layers) hetsim does not place: refused.
void read_windows(const Fields& f, ModelConfig& m) {
  const std::string& arch = f.arch;
  const bool qwen = one_of(
      arch, {"Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"});
  int window = 0;
  WindowKind kind = WindowKind::sliding;
  int every = 0;
  if (arch == "Llama4ForCausalLM") {
    window = f.get_or({"attention_chunk_size"}, 1, limits::kSequence, 0);
    kind = WindowKind::chunked;
    every = 4;
  } else if (f.has("sliding_window") && f.flag("use_sliding_window", !qwen)) {
    if (qwen) {
      throw f.error("use_sliding_window",
                    "Qwen's sliding window in the layers from max_window_layers on is not "
                    "modelled; expected false");
    }
    window = *f.integer("sliding_window", 1, limits::kSequence);
    every = arch == "Gemma2ForCausalLM" ? 2
            : arch == "Gemma3ForCausalLM"
                ? f.get_or({"sliding_window_pattern"}, 1, limits::kLayers, 6)
                : 0;
  }
  if (window == 0) return;
  if (const auto global = listed_global_layers(f, m.layers)) {
    const auto first = std::find(global->begin(), global->end(), true);
    every = first == global->end() ? 0 : static_cast<int>(first - global->begin()) + 1;
    for (int l = 0; l < m.layers; ++l) {
      if ((*global)[static_cast<size_t>(l)] != (every > 0 && (l + 1) % every == 0)) {
        throw f.error(f.has("layer_types") ? "layer_types" : "no_rope_layers",
                      "the global layers must fall every G-th layer (l + 1 a multiple of G); "
                      "layer " +
                          std::to_string(l) + " breaks the period " + std::to_string(every));
      }
    }
  }
  if (every == 1) return;  // every layer global
  m.window_kind = kind;
  m.attention_window = window;
  m.global_every = every;
}

// Mixture-of-experts fields under their families' names: the routed experts (num_experts,
// num_local_experts, n_routed_experts), the experts a token visits, their width
// (moe_intermediate_size, else intermediate_size as Mixtral's and Llama 4's), the shared experts
// (DeepSeek's count, Qwen's width, Llama 4's one), the dense layers first (first_k_dense_replace,
// a leading run of mlp_only_layers) and the period of the rest (moe_layer_freq: layer l % freq
// == 0; decoder_sparse_step and interleave_moe_layer_step: (l + 1) % step == 0).
void read_moe(const Fields& f, ModelConfig& m) {
  const int experts =
      f.get_or({"num_experts", "num_local_experts", "n_routed_experts"}, 0, limits::kExperts, 0);
  if (experts == 0) return;
  m.experts = experts;
  m.experts_per_token = f.get({"num_experts_per_tok"}, m.experts);
  m.expert_ffn_hidden = f.get({"moe_intermediate_size", "intermediate_size"}, limits::kFfn);
  if (f.has("intermediate_size_mlp")) m.ffn_hidden = f.get({"intermediate_size_mlp"}, limits::kFfn);
  m.shared_experts = f.get_or({"n_shared_experts"}, 0, limits::kExperts, 0);
  if (f.arch == "Llama4ForCausalLM") m.shared_experts = 1;
  if (const int shared = f.get_or({"shared_expert_intermediate_size"}, 0, limits::kFfn, 0)) {
    if (shared % m.expert_ffn_hidden != 0) {
      throw f.error("shared_expert_intermediate_size",
                    std::to_string(shared) + " is not a multiple of moe_intermediate_size (" +
                        std::to_string(m.expert_ffn_hidden) +
                        "): hetsim counts the shared expert as moe-sized experts");
    }
    m.shared_experts = shared / m.expert_ffn_hidden;
  }
  m.dense_layers = f.get_or({"first_k_dense_replace"}, 0, m.layers - 1, 0);
  if (f.has("mlp_only_layers")) {
    const nlohmann::json& dense = f.j["mlp_only_layers"];
    for (size_t i = 0; i < (dense.is_array() ? dense.size() : 1); ++i) {
      if (!dense.is_array() || !dense[i].is_number_integer() ||
          dense[i].get<int64_t>() != static_cast<int64_t>(i)) {
        throw f.error(
            "mlp_only_layers",
            dense.dump() + ": hetsim places dense layers first only (expected [0, 1, ..., k-1])");
      }
    }
    m.dense_layers = static_cast<int>(dense.size());
  }
  m.moe_every = f.get_or({"moe_layer_freq"}, 1, m.layers, 1);
  if (const int step =
          f.get_or({"decoder_sparse_step", "interleave_moe_layer_step"}, 1, m.layers, 0)) {
    m.moe_every = step;
    m.moe_phase = step - 1;
  }
}

// Multi-head latent attention (DeepSeek-V2, V3): queries and keys of qk_nope_head_dim +
// qk_rope_head_dim, values of v_head_dim, from latents of q_lora_rank (null: none) and
// kv_lora_rank. V3's multi-token prediction module (num_nextn_predict_layers) is not modelled.
void read_mla(const Fields& f, ModelConfig& m) {
  m.kv_lora_rank = f.get({"kv_lora_rank"}, limits::kHidden);
  m.q_lora_rank = f.get_or({"q_lora_rank"}, 0, limits::kHidden, 0);
  m.rope_head_dim = f.get({"qk_rope_head_dim"}, limits::kHidden);
  m.head_dim = f.get({"qk_nope_head_dim"}, limits::kHidden) + m.rope_head_dim;
  m.v_head_dim = f.get({"v_head_dim"}, limits::kHidden);
}

// Where a family's layer differs from its traits: norms, biases, parallel layers, q/k norms.
void read_layout(const Fields& f, ModelConfig& m) {
  const std::string& arch = f.arch;
  if (m.family == "llama") m.bias = f.flag("attention_bias", false);
  m.mlp_bias = f.flag("mlp_bias", m.bias);
  // Qwen2 (Qwen2, Qwen2.5, Qwen1.5-MoE): biases on the query, key and value projections only.
  if (one_of(arch, {"Qwen2ForCausalLM", "Qwen2MoeForCausalLM"})) m.qkv_bias = true;
  // Gemma 2 and 3: a norm before and after each block; OLMo 2: after only.
  if (one_of(arch, {"Gemma2ForCausalLM", "Gemma3ForCausalLM"}))
    m.norm_placement = NormPlacement::sandwich;
  if (arch == "Olmo2ForCausalLM") m.norm_placement = NormPlacement::post;
  // Query and key norms: per head (Qwen3, Gemma 3), over the projections (OLMo 2), Llama 4's
  // weightless L2 norm (use_qk_norm).
  if (one_of(arch, {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM"}))
    m.qk_norm = QkNorm::head;
  if (arch == "Olmo2ForCausalLM") m.qk_norm = QkNorm::projection;
  if (arch == "Llama4ForCausalLM" && f.flag("use_qk_norm", false)) m.qk_norm = QkNorm::unweighted;
  // GPT-NeoX's parallel residual (two norms); GPT-J's parallel layer (one norm, biases on the
  // MLP and the output head only).
  if (m.family == "gptneox" && arch.rfind("GPTNeoX", 0) == 0 &&
      f.flag("use_parallel_residual", true)) {
    m.parallel_attention = true;
    m.parallel_norms = 2;
  }
  if (arch == "GPTJForCausalLM") {
    m.parallel_attention = true;
    m.mlp_bias = true;
    m.head_bias = true;
  }
  if (arch == "FalconForCausalLM") {
    // Falcon: `bias` on every linear layer or none; the new decoder architecture (40B, 180B)
    // has two norms in its parallel layer and num_kv_heads key/value heads; the older one
    // (7B) one norm, and one key/value head under multi_query.
    m.bias = m.mlp_bias = f.flag("bias", false);
    if (f.flag("alibi", false))
      throw f.error("alibi", "ALiBi position biases are not modelled; expected false");
    const bool new_arch = f.flag("new_decoder_architecture", false);
    m.parallel_attention = new_arch || f.flag("parallel_attn", true);
    m.parallel_norms = new_arch ? 2 : 1;
    m.kv_heads = new_arch                      ? f.get_or({"num_kv_heads"}, 1, m.heads, m.heads)
                 : f.flag("multi_query", true) ? 1
                                               : m.heads;
  }
  if (arch == "Starcoder2ForCausalLM") m.bias = m.mlp_bias = f.flag("use_bias", true);
  if (arch == "OPTForCausalLM") {
    m.bias = m.mlp_bias = f.flag("enable_bias", true);
    if (!f.flag("do_layer_norm_before", true)) m.norm_placement = NormPlacement::post;
    if (f.get_or({"word_embed_proj_dim"}, 1, limits::kHidden, m.hidden) != m.hidden) {
      throw f.error("word_embed_proj_dim",
                    "embeddings narrower than hidden_size (projected in and out) are not "
                    "modelled; expected hidden_size (" +
                        std::to_string(m.hidden) + ")");
    }
  }
}

}  // namespace

ModelConfig load_model_hf_text(const std::string& text, const std::string& file) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) throw InputError(file + ": expected a JSON object");
  std::string arch;
  if (root.contains("architectures") && root["architectures"].is_array() &&
      !root["architectures"].empty()) {
    if (!root["architectures"][0].is_string()) {
      throw InputError(file + ": architectures[0]: expected a string, got " +
                       std::string(root["architectures"][0].type_name()));
    }
    arch = root["architectures"][0].get<std::string>();
  }
  const nlohmann::json* config = &root;
  for (const auto& [wrapper, language] : kWrappers) {
    if (arch != wrapper) continue;
    if (!root.contains("text_config") || !root["text_config"].is_object())
      throw InputError(file + ": text_config: missing (the language model's fields) for " + arch);
    config = &root["text_config"];
    arch = language;
  }
  nlohmann::json merged;
  if (config->contains("model_type") && (*config)["model_type"].is_string()) {
    merged = class_defaults((*config)["model_type"].get<std::string>());
    if (!merged.empty()) {
      merged.update(*config);
      config = &merged;
    }
  }
  const Traits* a = nullptr;
  std::string names;
  for (const Traits& x : architectures()) {
    if (std::find(x.names.begin(), x.names.end(), arch) != x.names.end()) a = &x;
    for (const std::string& n : x.names) names += n + ", ";
  }
  for (const auto& w : kWrappers) names += w.first + ", ";
  if (!a) {
    throw InputError(file + ": architectures: unsupported architecture \"" + arch +
                     "\" (expected one of " + names.substr(0, names.size() - 2) +
                     "; or describe the model in YAML: models/README.md)");
  }
  const Fields f{*config, file, arch};
  ModelConfig m;
  m.source = file;
  m.name = Fields{root, file, arch}.string("_name_or_path");
  if (m.name.empty()) {
    const std::filesystem::path p(file);
    m.name =
        p.filename() == "config.json" ? p.parent_path().filename().string() : p.stem().string();
  }
  m.family = a->family;
  m.layers = f.get({"num_hidden_layers", "n_layer", "num_layers"}, limits::kLayers);
  m.hidden = f.get({"hidden_size", "n_embd", "d_model"}, limits::kHidden);
  m.heads = f.get({"num_attention_heads", "n_head", "num_heads"}, limits::kHeads);
  m.kv_heads = f.get_or({"num_key_value_heads", "num_kv_heads", "n_head_kv"}, 0, m.heads, m.heads);
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  // The FFN's width: the config's, or four times hidden where the family's code defaults to it
  // (GPT-2's and GPT-J's n_inner null, Falcon's ffn_hidden_size absent).
  const bool default_ffn = m.family == "gpt" && arch != "OPTForCausalLM";
  m.ffn_hidden = default_ffn || one_of(arch, {"GPTJForCausalLM", "FalconForCausalLM"})
                     ? f.get_or({"n_inner", "ffn_hidden_size"}, 1, limits::kFfn, 4 * m.hidden)
                     : f.get({"intermediate_size", "ffn_dim"}, limits::kFfn);
  m.vocab = f.get({"vocab_size"}, limits::kVocab);
  m.sequence = f.get({"max_position_embeddings", "n_positions", "n_ctx"}, limits::kSequence);
  m.activation = a->activation;
  m.norm = a->norm;
  m.position = a->position;
  // Gemma ties its embeddings (its configs say so only since transformers 4.38); BERT always.
  const bool gemma = arch.rfind("Gemma", 0) == 0;
  m.tied_embeddings = m.family == "bert" || f.flag("tie_word_embeddings", a->tied || gemma);
  m.causal = a->causal;
  m.bias = a->bias;
  // Dropout as each architecture's config names it (GPT-2 resid_pdrop, BERT hidden_dropout_prob,
  // Llama's and GPT-NeoX's attention_dropout and hidden_dropout, 0 unless set).
  m.dropout = m.family == "gpt" && arch != "OPTForCausalLM"
                  ? f.probability({"resid_pdrop", "attn_pdrop"}, 0.1)
              : m.family == "bert" ? f.probability({"hidden_dropout_prob"}, 0.1)
                                   : std::max({f.probability({"hidden_dropout", "dropout"}, 0.0),
                                               f.probability({"attention_dropout"}, 0.0),
                                               f.probability({"resid_pdrop"}, 0.0)});
  if (m.hidden % m.heads != 0 && !f.has("head_dim")) {
    throw f.error("num_attention_heads", "hidden_size (" + std::to_string(m.hidden) +
                                             ") is not a multiple of num_attention_heads (" +
                                             std::to_string(m.heads) + "); give head_dim");
  }
  m.head_dim = f.get_or({"head_dim"}, 1, limits::kHidden, m.hidden / m.heads);
  read_layout(f, m);
  read_windows(f, m);
  if (one_of(arch, {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"})) read_mla(f, m);
  read_moe(f, m);
  validate_model(m, file);
  return m;
}

}  // namespace hetsim::workload
