// Model loading from YAML and Hugging Face configs; parameter counts. See model.h.
#include "sim/workload/model.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "sim/config/embedded_data.h"
#include "sim/config/limits.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/workload/cnn.h"

namespace hetsim::workload {

int64_t ModelConfig::mlp_params(int64_t ffn) const {
  const int64_t h = hidden;
  return activation == Activation::swiglu ? 3 * h * ffn + (bias ? 2 * ffn + h : 0)
                                          : 2 * h * ffn + (bias ? ffn + h : 0);
}

int64_t ModelConfig::attention_params() const {
  const int64_t h = hidden;
  if (mla()) {
    const int64_t heads64 = heads;
    const int64_t q =
        q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank + int64_t{q_lora_rank} * heads64 * head_dim
                        : h * heads64 * head_dim;
    const int64_t kv = h * (kv_lora_rank + rope_head_dim) + kv_lora_rank +
                       int64_t{kv_lora_rank} * heads64 * (head_dim - rope_head_dim + v_head_dim);
    return q + kv + heads64 * v_head_dim * h;
  }
  return h * q_width() + 2 * h * kv_width() + q_width() * h +
         (bias       ? q_width() + 2 * kv_width() + h
          : qkv_bias ? q_width() + 2 * kv_width()
                     : 0);
}

int64_t ModelConfig::layer_params() const {
  const int64_t h = hidden;
  const int64_t norms = 2 * (norm == Norm::layernorm ? 2 * h : h);
  return attention_params() + mlp_params(ffn_hidden) + norms;
}

int64_t ModelConfig::layer_params(int layer) const {
  if (convolutional()) return cnn[static_cast<size_t>(layer)].params();
  if (!is_moe(layer)) return layer_params();
  const int64_t router = static_cast<int64_t>(hidden) * experts;
  return layer_params() - mlp_params(ffn_hidden) + router +
         shared_experts * mlp_params(expert_ffn_hidden) + expert_layer_params(layer);
}

int64_t ModelConfig::expert_layer_params(int layer) const {
  return is_moe(layer) ? experts * mlp_params(expert_ffn_hidden) : 0;
}

int ModelConfig::moe_layers_in(int first, int n) const {
  if (!moe() || n <= 0) return 0;
  // MoE layers below `end`: the multiples of moe_every from first_moe_layer() on.
  const int from = first_moe_layer();
  auto below = [&](int end) { return end <= from ? 0 : (end - from + moe_every - 1) / moe_every; };
  return below(first + n) - below(first);
}

int ModelConfig::first_moe_layer() const {
  if (!moe()) return layers;
  const int l = (dense_layers + moe_every - 1) / moe_every * moe_every;
  return std::min(l, layers);
}

int64_t ModelConfig::layers_params(int first, int n) const {
  if (convolutional()) {
    int64_t s = 0;
    for (int l = first; l < first + n; ++l) s += layer_params(l);
    return s;
  }
  const int sparse = moe_layers_in(first, n);
  return static_cast<int64_t>(n - sparse) * layer_params() +
         (sparse > 0 ? static_cast<int64_t>(sparse) * layer_params(first_moe_layer()) : 0);
}

int64_t ModelConfig::layers_expert_params(int first, int n) const {
  const int sparse = moe_layers_in(first, n);
  return sparse > 0 ? static_cast<int64_t>(sparse) * expert_layer_params(first_moe_layer()) : 0;
}

int64_t ModelConfig::embedding_params() const {
  if (convolutional()) return 0;
  return static_cast<int64_t>(vocab) * hidden +
         (position == Position::learned ? static_cast<int64_t>(sequence) * hidden : 0);
}

int64_t ModelConfig::output_params() const {
  if (convolutional()) return 0;
  const int64_t final_norm = norm == Norm::layernorm ? 2 * int64_t{hidden} : int64_t{hidden};
  return final_norm + (tied_embeddings ? 0 : static_cast<int64_t>(vocab) * hidden);
}

int64_t ModelConfig::params() const {
  return embedding_params() + layers_params(0, layers) + output_params();
}

namespace {

void validate(const ModelConfig& m, const std::string& file) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return InputError(file + ": " + field + ": " + why);
  };
  if (m.heads % m.kv_heads != 0) {
    throw bad("kv_heads", "expected a divisor of heads (" + std::to_string(m.heads) + "), got " +
                              std::to_string(m.kv_heads));
  }
  if (m.mla()) {
    if (m.rope_head_dim >= m.head_dim) {
      throw bad("qk_rope_head_dim", "expected less than head_dim (" + std::to_string(m.head_dim) +
                                        ", the rotary and non-rotary parts together), got " +
                                        std::to_string(m.rope_head_dim));
    }
    if (m.kv_heads != m.heads) {
      throw bad("kv_heads",
                "multi-head latent attention up-projects keys and values for every "
                "head: expected kv_heads = heads (" +
                    std::to_string(m.heads) + ")");
    }
  }
  if (m.moe() && m.first_moe_layer() >= m.layers) {
    throw bad("moe_every", "with dense_layers " + std::to_string(m.dense_layers) +
                               " and moe_every " + std::to_string(m.moe_every) + ", none of the " +
                               std::to_string(m.layers) + " layers is a MoE layer");
  }
  if (m.family != "gpt" && m.family != "llama" && m.family != "bert" && m.family != "gptneox") {
    throw bad("family",
              "unknown value \"" + m.family + "\" (expected gpt, llama, bert, gptneox or cnn)");
  }
}

}  // namespace

ModelConfig load_model_yaml_text(const std::string& text, const std::string& file) {
  using namespace config;
  const YAML::Node root = load_yaml(text, file);
  if (root.IsMap() && root["family"] && root["family"].IsScalar() &&
      root["family"].as<std::string>() == "cnn") {
    return load_cnn_yaml(root, file);
  }
  check_keys(file, root, "",
             {"name",
              "family",
              "layers",
              "hidden",
              "heads",
              "kv_heads",
              "head_dim",
              "ffn_hidden",
              "vocab",
              "sequence",
              "activation",
              "norm",
              "position",
              "tied_embeddings",
              "causal",
              "bias",
              "qkv_bias",
              "dropout",
              "experts",
              "experts_per_token",
              "expert_ffn_hidden",
              "shared_experts",
              "dense_layers",
              "moe_every",
              "q_lora_rank",
              "kv_lora_rank",
              "qk_rope_head_dim",
              "v_head_dim"});
  ModelConfig m;
  m.source = file;
  m.name = get_string(file, root, "", "name");
  m.family = get_string(file, root, "", "family");
  m.layers = static_cast<int>(get_int(file, root, "", "layers", 1, limits::kLayers));
  m.hidden = static_cast<int>(get_int(file, root, "", "hidden", 1, limits::kHidden));
  m.heads = static_cast<int>(get_int(file, root, "", "heads", 1, limits::kHeads));
  m.kv_heads = static_cast<int>(get_int(file, root, "", "kv_heads", 1, m.heads, m.heads));
  if (m.hidden % m.heads != 0 && !root["head_dim"]) {
    throw InputError(where(file, root["heads"]) + ": heads: hidden (" + std::to_string(m.hidden) +
                     ") is not a multiple of heads; give head_dim");
  }
  m.head_dim =
      static_cast<int>(get_int(file, root, "", "head_dim", 1, limits::kHidden, m.hidden / m.heads));
  m.ffn_hidden =
      static_cast<int>(get_int(file, root, "", "ffn_hidden", 1, limits::kFfn, 4L * m.hidden));
  m.vocab = static_cast<int>(get_int(file, root, "", "vocab", 1, limits::kVocab));
  m.sequence = static_cast<int>(get_int(file, root, "", "sequence", 1, limits::kSequence));
  m.activation =
      static_cast<Activation>(get_choice(file, root, "", "activation", {"gelu", "swiglu"}));
  m.norm = static_cast<Norm>(get_choice(file, root, "", "norm", {"layernorm", "rmsnorm"}));
  m.position = static_cast<Position>(get_choice(file, root, "", "position", {"learned", "rotary"}));
  auto flag = [&](const char* key) {
    const YAML::Node n = require(file, root, "", key);
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      throw InputError(where(file, n) + ": " + key + ": expected true or false");
    }
  };
  m.tied_embeddings = flag("tied_embeddings");
  m.causal = flag("causal");
  m.bias = flag("bias");
  m.qkv_bias = config::get_bool(file, root, "", "qkv_bias", false);
  m.dropout = get_number(file, root, "", "dropout",
                         m.family == "llama" || m.family == "gptneox" ? 0.0 : 0.1);
  if (!(m.dropout >= 0 && m.dropout < 1)) {
    throw InputError(where(file, root["dropout"]) +
                     ": dropout: expected a probability in [0, 1), got " +
                     root["dropout"].as<std::string>());
  }
  m.experts = static_cast<int>(get_int(file, root, "", "experts", 0, limits::kExperts, 0));
  if (m.experts > 0) {
    m.experts_per_token =
        static_cast<int>(get_int(file, root, "", "experts_per_token", 1, m.experts));
    m.expert_ffn_hidden = static_cast<int>(
        get_int(file, root, "", "expert_ffn_hidden", 1, limits::kFfn, m.ffn_hidden));
    m.shared_experts =
        static_cast<int>(get_int(file, root, "", "shared_experts", 0, limits::kExperts, 0));
    m.dense_layers = static_cast<int>(get_int(file, root, "", "dense_layers", 0, m.layers - 1, 0));
    m.moe_every = static_cast<int>(get_int(file, root, "", "moe_every", 1, m.layers, 1));
  } else {
    for (const char* k : {"experts_per_token", "expert_ffn_hidden", "shared_experts",
                          "dense_layers", "moe_every"}) {
      if (root[k]) {
        throw InputError(where(file, root[k]) + ": " + k +
                         ": applies to a mixture of experts; give experts (the routed experts "
                         "per layer) too");
      }
    }
  }
  m.kv_lora_rank = static_cast<int>(get_int(file, root, "", "kv_lora_rank", 0, limits::kHidden, 0));
  if (m.mla()) {
    m.q_lora_rank = static_cast<int>(get_int(file, root, "", "q_lora_rank", 0, limits::kHidden, 0));
    m.rope_head_dim =
        static_cast<int>(get_int(file, root, "", "qk_rope_head_dim", 1, limits::kHidden));
    m.v_head_dim = static_cast<int>(
        get_int(file, root, "", "v_head_dim", 1, limits::kHidden, m.head_dim - m.rope_head_dim));
  } else {
    for (const char* k : {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
      if (root[k]) {
        throw InputError(where(file, root[k]) + ": " + k +
                         ": applies to multi-head latent attention; give kv_lora_rank (the "
                         "keys' and values' latent width) too");
      }
    }
  }
  validate(m, file);
  return m;
}

// The readings Qwen2, Qwen2-MoE, Gemma and Phi-3 configs add to the Llama structure, with the
// loader's field readers (get, get_or, get_bool: load_model_hf_text).
template <class Get, class GetOr, class GetBool>
void read_hf_qwen_gemma_phi(const nlohmann::json& j, const std::string& file,
                            const std::string& arch, ModelConfig& m, Get get, GetOr get_or,
                            GetBool get_bool) {
  // Qwen2 (Qwen2, Qwen2.5, Qwen1.5-MoE): biases on the query, key and value projections only.
  const bool qwen2 = arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM";
  if (qwen2) m.qkv_bias = true;
  // Phi-3 and Phi-4: the query, key and value projections fused into one matmul and the gate and
  // up projections into another, the same weights and FLOPs as Llama's separate ones.
  // Gemma: GeGLU (GELU on the gate of the same gated MLP as SwiGLU: the same matmuls and one
  // elementwise activation and product, so it costs as SwiGLU), embeddings scaled by sqrt(h).
  // A sliding window (Qwen2's use_sliding_window, Mistral's sliding_window) shorter than the
  // model's sequence is attention hetsim does not have: refused, naming the field.
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
      get_bool("use_sliding_window", !qwen2)) {
    const int64_t w = j["sliding_window"].get<int64_t>();
    if (w < m.sequence) {
      throw InputError(file + ": sliding_window: " + std::to_string(w) +
                       " is shorter than max_position_embeddings (" + std::to_string(m.sequence) +
                       "): hetsim's attention is full causal attention, not a sliding window");
    }
  }
  if (arch == "Qwen2MoeForCausalLM") {
    // Every decoder_sparse_step-th layer routes each token to num_experts_per_tok of
    // num_experts experts of moe_intermediate_size, beside one shared expert of
    // shared_expert_intermediate_size (hetsim counts it as that many moe-sized experts, so it
    // must divide). mlp_only_layers lists dense layers: only a leading run is expressible.
    m.experts = get({"num_experts"}, config::limits::kExperts);
    m.experts_per_token = get({"num_experts_per_tok"}, m.experts);
    m.expert_ffn_hidden = get({"moe_intermediate_size"}, config::limits::kFfn);
    m.moe_every = get_or("decoder_sparse_step", 1, m.layers, 1);
    const int shared = get_or("shared_expert_intermediate_size", 0, config::limits::kFfn, 0);
    if (shared % m.expert_ffn_hidden != 0) {
      throw InputError(file + ": shared_expert_intermediate_size: " + std::to_string(shared) +
                       " is not a multiple of moe_intermediate_size (" +
                       std::to_string(m.expert_ffn_hidden) +
                       "): hetsim counts the shared expert as moe-sized experts");
    }
    m.shared_experts = shared / m.expert_ffn_hidden;
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array()) {
      const nlohmann::json& dense = j["mlp_only_layers"];
      for (size_t i = 0; i < dense.size(); ++i) {
        if (!dense[i].is_number_integer() || dense[i].get<int64_t>() != static_cast<int64_t>(i)) {
          throw InputError(file + ": mlp_only_layers: " + dense.dump() +
                           ": hetsim places dense layers first only (expected [0, 1, ..., k-1])");
        }
      }
      m.dense_layers = static_cast<int>(dense.size());
    }
  }
}

ModelConfig load_model_hf_text(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(file + ": expected a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    if (!j["architectures"][0].is_string()) {
      throw InputError(file + ": architectures[0]: expected a string, got " +
                       std::string(j["architectures"][0].type_name()));
    }
    arch = j["architectures"][0].get<std::string>();
  }
  // An integer field in [min, max]; a present field of another type, or out of range, is an
  // error that names it (a value nlohmann reads as unsigned is compared before narrowing).
  auto integer = [&](const char* k, long min, long max) -> std::optional<int> {
    if (!j.contains(k) || j[k].is_null()) return std::nullopt;
    const nlohmann::json& v = j[k];
    const std::string expected =
        "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    if (!v.is_number_integer()) {
      throw InputError(file + ": " + k + ": expected " + expected + ", got " +
                       std::string(v.type_name()) + " " + v.dump());
    }
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                                                 : v.get<int64_t>() <= max;
    if (!in_range || v.get<int64_t>() < min) {
      throw InputError(file + ": " + k + ": expected " + expected + ", got " + v.dump());
    }
    return static_cast<int>(v.get<int64_t>());
  };
  auto get = [&](const std::vector<const char*>& keys, long max) -> int {
    for (const char* k : keys) {
      if (const std::optional<int> v = integer(k, 1, max)) return *v;
    }
    std::string names;
    for (const char* k : keys) names += (names.empty() ? "" : " or ") + std::string(k);
    throw InputError(file + ": " + names + ": missing required field (an integer) for " + arch);
  };
  auto get_or = [&](const char* k, long min, long max, int def) {
    return integer(k, min, max).value_or(def);
  };
  auto get_bool = [&](const char* k, bool def) {
    return j.contains(k) && j[k].is_boolean() ? j[k].get<bool>() : def;
  };
  // Each architecture: its config keys and the structure its code implies.
  struct Arch {
    std::vector<std::string> names;
    const char* family;
    const char *layers, *hidden, *heads, *ffn, *vocab;  // ffn nullptr: GPT-2's n_inner or 4 h
    std::vector<const char*> sequence;
    Activation activation;
    Norm norm;
    Position position;
    bool tied, causal, bias;
  };
  static const std::vector<Arch> archs = {
      {{"GPT2LMHeadModel", "GPT2Model"},
       "gpt",
       "n_layer",
       "n_embd",
       "n_head",
       nullptr,
       "vocab_size",
       {"n_positions", "n_ctx"},
       Activation::gelu,
       Norm::layernorm,
       Position::learned,
       true,
       true,
       true},
      {{"LlamaForCausalLM", "LlamaModel", "MistralForCausalLM", "MixtralForCausalLM",
        "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM", "GemmaForCausalLM", "Phi3ForCausalLM"},
       "llama",
       "num_hidden_layers",
       "hidden_size",
       "num_attention_heads",
       "intermediate_size",
       "vocab_size",
       {"max_position_embeddings"},
       Activation::swiglu,
       Norm::rmsnorm,
       Position::rotary,
       false,
       true,
       false},
      {{"GPTNeoXForCausalLM", "GPTNeoXModel"},
       "gptneox",
       "num_hidden_layers",
       "hidden_size",
       "num_attention_heads",
       "intermediate_size",
       "vocab_size",
       {"max_position_embeddings"},
       Activation::gelu,
       Norm::layernorm,
       Position::rotary,
       false,
       true,
       true},
      {{"BertModel", "BertForPreTraining", "BertForMaskedLM"},
       "bert",
       "num_hidden_layers",
       "hidden_size",
       "num_attention_heads",
       "intermediate_size",
       "vocab_size",
       {"max_position_embeddings"},
       Activation::gelu,
       Norm::layernorm,
       Position::learned,
       true,
       false,
       true},
  };
  const Arch* a = nullptr;
  for (const Arch& x : archs) {
    if (std::find(x.names.begin(), x.names.end(), arch) != x.names.end()) a = &x;
  }
  if (!a) {
    throw InputError(file + ": architectures: unsupported architecture \"" + arch +
                     "\" (expected GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, "
                     "MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, "
                     "GemmaForCausalLM, Phi3ForCausalLM, DeepseekForCausalLM, "
                     "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GPTNeoXForCausalLM or "
                     "BertModel)");
  }
  ModelConfig m;
  m.source = file;
  if (j.contains("_name_or_path") && j["_name_or_path"].is_string()) {
    m.name = j["_name_or_path"].get<std::string>();
  }
  if (m.name.empty()) {
    const std::filesystem::path p(file);
    m.name =
        p.filename() == "config.json" ? p.parent_path().filename().string() : p.stem().string();
  }
  m.family = a->family;
  namespace limits = config::limits;
  m.layers = get({a->layers}, limits::kLayers);
  m.hidden = get({a->hidden}, limits::kHidden);
  m.heads = get({a->heads}, limits::kHeads);
  m.kv_heads = get_or("num_key_value_heads", 0, m.heads, m.heads);
  m.ffn_hidden =
      a->ffn ? get({a->ffn}, limits::kFfn) : get_or("n_inner", 1, limits::kFfn, 4 * m.hidden);
  m.vocab = get({a->vocab}, limits::kVocab);
  m.sequence = get(a->sequence, limits::kSequence);
  m.activation = a->activation;
  m.norm = a->norm;
  m.position = a->position;
  // Gemma ties its embeddings (its config says so only since transformers 4.38).
  m.tied_embeddings = m.family == "bert"           ? true
                      : arch == "GemmaForCausalLM" ? get_bool("tie_word_embeddings", true)
                                                   : get_bool("tie_word_embeddings", a->tied);
  m.causal = a->causal;
  m.bias = m.family == "llama" ? get_bool("attention_bias", false) : a->bias;
  // Dropout as each architecture's config names it (GPT-2 resid_pdrop, BERT hidden_dropout_prob,
  // Llama's and GPT-NeoX's attention_dropout and hidden_dropout, 0 unless set).
  auto probability = [&](std::initializer_list<const char*> keys, double def) {
    for (const char* k : keys) {
      if (!j.contains(k)) continue;
      if (!j[k].is_number() || !(j[k].get<double>() >= 0 && j[k].get<double>() < 1))
        throw InputError(file + ": " + k + ": expected a probability in [0, 1), got " +
                         j[k].dump());
      return j[k].get<double>();
    }
    return def;
  };
  m.dropout = m.family == "gpt"    ? probability({"resid_pdrop", "attn_pdrop"}, 0.1)
              : m.family == "bert" ? probability({"hidden_dropout_prob"}, 0.1)
                                   : std::max(probability({"hidden_dropout"}, 0.0),
                                              probability({"attention_dropout"}, 0.0));
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.hidden % m.heads != 0 && !j.contains("head_dim")) {
    throw InputError(file + ": " + a->heads + ": " + a->hidden + " (" + std::to_string(m.hidden) +
                     ") is not a multiple of " + a->heads + " (" + std::to_string(m.heads) +
                     "); give head_dim");
  }
  m.head_dim = get_or("head_dim", 1, limits::kHidden, m.hidden / m.heads);
  read_hf_qwen_gemma_phi(j, file, arch, m, get, get_or, get_bool);
  if (arch == "MixtralForCausalLM") {
    // Every layer's FFN is num_local_experts experts of intermediate_size, top-k routed.
    m.experts = get({"num_local_experts"}, limits::kExperts);
    m.experts_per_token = get({"num_experts_per_tok"}, m.experts);
    m.expert_ffn_hidden = m.ffn_hidden;
  }
  const bool deepseek = arch == "DeepseekForCausalLM" || arch == "DeepseekV2ForCausalLM" ||
                        arch == "DeepseekV3ForCausalLM";
  if (arch != "DeepseekForCausalLM" && deepseek) {
    // Multi-head latent attention: queries and keys of qk_nope_head_dim + qk_rope_head_dim,
    // values of v_head_dim, from latents of q_lora_rank (null: none) and kv_lora_rank. V3's
    // multi-token prediction module (num_nextn_predict_layers) is not modelled.
    m.kv_lora_rank = get({"kv_lora_rank"}, limits::kHidden);
    m.q_lora_rank = get_or("q_lora_rank", 0, limits::kHidden, 0);
    m.rope_head_dim = get({"qk_rope_head_dim"}, limits::kHidden);
    m.head_dim = get({"qk_nope_head_dim"}, limits::kHidden) + m.rope_head_dim;
    m.v_head_dim = get({"v_head_dim"}, limits::kHidden);
  }
  if (deepseek && integer("n_routed_experts", 0, limits::kExperts)) {
    // DeepSeekMoE: first_k_dense_replace dense layers of intermediate_size, then every
    // moe_layer_freq-th layer routes each token to num_experts_per_tok of n_routed_experts
    // experts of moe_intermediate_size, beside n_shared_experts of that size.
    m.experts = get({"n_routed_experts"}, limits::kExperts);
    m.experts_per_token = get({"num_experts_per_tok"}, m.experts);
    m.expert_ffn_hidden = get({"moe_intermediate_size"}, limits::kFfn);
    m.shared_experts = get_or("n_shared_experts", 0, limits::kExperts, 0);
    m.dense_layers = get_or("first_k_dense_replace", 0, m.layers - 1, 0);
    m.moe_every = get_or("moe_layer_freq", 1, m.layers, 1);
  }
  validate(m, file);
  return m;
}

ModelConfig load_model(const std::string& path_or_name) {
  auto parse = [](const std::string& text, const std::string& file) {
    const bool json = file.size() >= 5 && file.substr(file.size() - 5) == ".json";
    return json ? load_model_hf_text(text, file) : load_model_yaml_text(text, file);
  };
  if (std::filesystem::is_regular_file(path_or_name)) {
    return parse(config::read_text_file(path_or_name), path_or_name);
  }
  // A Hugging Face model folder (as downloaded) holds its config.json.
  if (std::filesystem::is_directory(path_or_name)) {
    const std::string config = (std::filesystem::path(path_or_name) / "config.json").string();
    if (!std::filesystem::is_regular_file(config)) {
      throw InputError(path_or_name +
                       ": is a directory without a config.json; expected a model YAML file, a "
                       "Hugging Face config.json or a folder holding one");
    }
    return parse(config::read_text_file(config), config);
  }
  std::vector<std::string> names;
  for (const config::EmbeddedFile& f : config::embedded_files()) {
    const std::filesystem::path p(f.path);
    if (p.parent_path() != "models" || p.extension() != ".yaml") continue;
    names.push_back(p.stem().string());
    if (path_or_name == f.path || path_or_name == p.stem().string()) return parse(f.text, f.path);
  }
  throw InputError(path_or_name + ": no such model file, nor a built-in model (built-in: " +
                   config::join_names(names) + ")" + config::did_you_mean(path_or_name, names));
}

}  // namespace hetsim::workload
