// A transformer model as plain data: read from models/*.yaml or a Hugging Face config.json,
// validated, with its parameter count derived from the fields.
#pragma once

#include <cstdint>
#include <string>

namespace hetsim::workload {

enum class Activation { gelu, swiglu };
enum class Norm { layernorm, rmsnorm };
enum class Position { learned, rotary };

struct ModelConfig {
  std::string name;
  std::string family;  // gpt | llama | bert | gptneox
  std::string source;  // file it came from
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int ffn_hidden = 0;
  int vocab = 0;
  int sequence = 0;
  Activation activation = Activation::gelu;
  Norm norm = Norm::layernorm;
  Position position = Position::learned;
  bool tied_embeddings = true;
  bool causal = true;
  bool bias = true;

  // Width of the query projection and of each of the key and value projections.
  int64_t q_width() const { return static_cast<int64_t>(heads) * head_dim; }
  int64_t kv_width() const { return static_cast<int64_t>(kv_heads) * head_dim; }
  // Parameters of one transformer layer, of the embeddings, and of the whole model.
  int64_t layer_params() const;
  int64_t embedding_params() const;  // token (+ learned positions)
  int64_t output_params() const;     // final norm (+ untied output projection)
  int64_t params() const;
};

// Reads a model from a YAML file, a Hugging Face config.json, or a built-in name such as
// "gpt3-175b". Throws InputError naming the file, the field and what was expected.
ModelConfig load_model(const std::string& path_or_name);
ModelConfig load_model_yaml_text(const std::string& text, const std::string& file);
ModelConfig load_model_hf_text(const std::string& text, const std::string& file);

}  // namespace hetsim::workload
