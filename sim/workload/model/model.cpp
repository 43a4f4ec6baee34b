// Model loading from YAML and Hugging Face configs; parameter counts. See model.h.
#include "sim/workload/model/model.h"

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
#include "sim/workload/model/cnn.h"

namespace hetsim::workload {

int64_t ModelConfig::mlp_params(int64_t ffn) const {
  const int64_t h = hidden;
  return activation == Activation::swiglu ? 3 * h * ffn + (mlp_bias ? 2 * ffn + h : 0)
                                          : 2 * h * ffn + (mlp_bias ? ffn + h : 0);
}

int ModelConfig::windowed_layers() const {
  if (window_kind == WindowKind::none) return 0;
  return global_every == 0 ? layers : layers - layers / global_every;
}

double ModelConfig::attention_span(int64_t sequence) const {
  const double s = static_cast<double>(sequence), w = attention_window;
  if (window_kind == WindowKind::none || !(w < s) || layers == 0) return 1;
  // Keys a query sees, summed over the queries, against the causal mask's s^2 / 2: a sliding
  // window of w keys sums to s w - w^2 / 2; chunks of w tokens to s w / 2 (a whole number of
  // chunks; a last, shorter chunk rounds up to one).
  const double local =
      window_kind == WindowKind::sliding ? (s * w - w * w / 2) / (s * s / 2) : w / s;
  const double n = windowed_layers();
  return (n * local + (layers - n)) / layers;
}

int64_t ModelConfig::layer_norm_params() const {
  const int64_t one = norm == Norm::layernorm ? 2 * int64_t{hidden} : int64_t{hidden};
  const int count = parallel_attention                          ? parallel_norms
                    : norm_placement == NormPlacement::sandwich ? 4
                                                                : 2;
  return count * one;
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
  const int64_t qk = qk_norm == QkNorm::head         ? 2 * int64_t{head_dim}
                     : qk_norm == QkNorm::projection ? q_width() + kv_width()
                                                     : 0;
  return h * q_width() + 2 * h * kv_width() + q_width() * h + qk +
         (bias       ? q_width() + 2 * kv_width() + h
          : qkv_bias ? q_width() + 2 * kv_width()
                     : 0);
}

int64_t ModelConfig::layer_params() const {
  return attention_params() + mlp_params(ffn_hidden) + layer_norm_params();
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
  // MoE layers below `end`: every moe_every-th from first_moe_layer() on.
  const int from = first_moe_layer();
  auto below = [&](int end) { return end <= from ? 0 : (end - from + moe_every - 1) / moe_every; };
  return below(first + n) - below(first);
}

int ModelConfig::first_moe_layer() const {
  if (!moe()) return layers;
  const int l = dense_layers + ((moe_phase - dense_layers) % moe_every + moe_every) % moe_every;
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
  if (head == Head::classification) {
    // The pooler (hidden x hidden and its bias) and the classifier (hidden x classes and bias).
    const int64_t h = hidden;
    return final_norm + h * h + h + h * classes + classes;
  }
  return final_norm + (tied_embeddings ? 0 : static_cast<int64_t>(vocab) * hidden) +
         (head_bias ? vocab : 0);
}

int64_t ModelConfig::params() const {
  return embedding_params() + layers_params(0, layers) + output_params();
}

void validate_model(const ModelConfig& m, const std::string& file) {
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
  if (m.parallel_attention && m.norm_placement != NormPlacement::pre) {
    throw bad("parallel_attention",
              "a parallel layer's attention and MLP read one normed input: expected "
              "norm_placement pre");
  }
  if (m.parallel_attention && (m.mla() || m.moe())) {
    throw bad("parallel_attention",
              "not with multi-head latent attention (kv_lora_rank) nor experts: expected false");
  }
  if (m.global_every == 1) {
    throw bad("global_every",
              "1 makes every layer global: leave out attention_window, or give 0 (every layer "
              "local) or at least 2");
  }
  if (m.window_kind != WindowKind::none && !m.causal) {
    throw bad("attention_window", "local attention applies to a causal model");
  }
  if (m.family != "gpt" && m.family != "llama" && m.family != "bert" && m.family != "gptneox") {
    throw bad("family",
              "unknown value \"" + m.family + "\" (expected gpt, llama, bert, gptneox or cnn)");
  }
}

namespace {

// The output head: a language model's (the default) or a classifier's, with what applies to it.
void read_head(const std::string& file, const YAML::Node& root, ModelConfig& m) {
  using namespace config;
  m.head = static_cast<Head>(get_choice(file, root, "", "head", model_key_choices("head"), "lm"));
  if (m.head == Head::classification) {
    m.classes = static_cast<int>(get_int(file, root, "", "classes", 2, limits::kVocab, 2));
    if (m.tied_embeddings) {
      throw InputError(where(file, root["tied_embeddings"]) +
                       ": tied_embeddings: a classification head has no output projection to "
                       "share the word embedding with: expected false");
    }
    if (root["head_bias"] && config::get_bool(file, root, "", "head_bias", false)) {
      throw InputError(where(file, root["head_bias"]) +
                       ": head_bias: the bias of a language-model head's output projection; a "
                       "classification head has its own biases: leave it out");
    }
  } else if (root["classes"]) {
    throw InputError(where(file, root["classes"]) +
                     ": classes: applies to a classification head; give head: classification");
  }
}

// A mixture of experts: the routed experts and how the layers hold them; their keys are refused
// without `experts`.
void read_experts(const std::string& file, const YAML::Node& root, ModelConfig& m) {
  using namespace config;
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
    m.moe_phase = static_cast<int>(get_int(file, root, "", "moe_phase", 0, m.moe_every - 1, 0));
  } else {
    for (const char* k : {"experts_per_token", "expert_ffn_hidden", "shared_experts",
                          "dense_layers", "moe_every", "moe_phase"}) {
      if (root[k]) {
        throw InputError(where(file, root[k]) + ": " + k +
                         ": applies to a mixture of experts; give experts (the routed experts "
                         "per layer) too");
      }
    }
  }
}

// Multi-head latent attention (DeepSeek): the latent ranks and head widths; refused without
// `kv_lora_rank`.
void read_latent_attention(const std::string& file, const YAML::Node& root, ModelConfig& m) {
  using namespace config;
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
}

}  // namespace

ModelConfig load_model_yaml_text(const std::string& text, const std::string& file) {
  using namespace config;
  const YAML::Node root = load_yaml(text, file);
  if (root.IsMap() && root["family"] && root["family"].IsScalar() &&
      root["family"].as<std::string>() == "cnn") {
    return load_cnn_yaml(root, file);
  }
  const std::string transformer = "gpt";  // any of the transformer families: one form
  check_keys(file, root, "", key_names(model_keys(), "", "family", &transformer));
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
  m.activation = static_cast<Activation>(
      get_choice(file, root, "", "activation", model_key_choices("activation")));
  m.norm = static_cast<Norm>(get_choice(file, root, "", "norm", model_key_choices("norm")));
  m.position =
      static_cast<Position>(get_choice(file, root, "", "position", model_key_choices("position")));
  auto flag = [&](const char* key) {
    const YAML::Node n = require(file, root, "", key);
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      throw InputError(where(file, n) + ": " + key + ": expected true or false");
    }
  };
  m.tied_embeddings = flag("tied_embeddings");
  read_head(file, root, m);
  m.causal = flag("causal");
  m.bias = flag("bias");
  m.qkv_bias = config::get_bool(file, root, "", "qkv_bias", false);
  m.mlp_bias = config::get_bool(file, root, "", "mlp_bias", m.bias);
  m.head_bias = config::get_bool(file, root, "", "head_bias", false);
  m.norm_placement = static_cast<NormPlacement>(
      get_choice(file, root, "", "norm_placement", model_key_choices("norm_placement"), "pre"));
  m.parallel_attention = config::get_bool(file, root, "", "parallel_attention", false);
  m.parallel_norms = static_cast<int>(get_int(file, root, "", "parallel_norms", 1, 2, 1));
  m.qk_norm = static_cast<QkNorm>(
      get_choice(file, root, "", "qk_norm", model_key_choices("qk_norm"), "none"));
  m.window_kind = static_cast<WindowKind>(
      get_choice(file, root, "", "window_kind", model_key_choices("window_kind"),
                 root["attention_window"] ? "sliding" : "none"));
  if (m.window_kind != WindowKind::none) {
    m.attention_window =
        static_cast<int>(get_int(file, root, "", "attention_window", 1, limits::kSequence));
    m.global_every = static_cast<int>(get_int(file, root, "", "global_every", 0, m.layers, 0));
  }
  m.dropout = get_number(file, root, "", "dropout",
                         m.family == "llama" || m.family == "gptneox" ? 0.0 : 0.1);
  if (!(m.dropout >= 0 && m.dropout < 1)) {
    throw InputError(where(file, root["dropout"]) +
                     ": dropout: expected a probability in [0, 1), got " +
                     root["dropout"].as<std::string>());
  }
  read_experts(file, root, m);
  read_latent_attention(file, root, m);
  validate_model(m, file);
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
