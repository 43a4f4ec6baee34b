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
  // Mixture of experts (0 experts: a dense model). A MoE layer replaces the dense FFN by
  // `experts` routed experts of `expert_ffn_hidden` each, of which every token visits
  // `experts_per_token` (top-k, chosen by a linear router over `experts` logits), beside
  // `shared_experts` that every token visits (DeepSeek). The first `dense_layers` layers keep the
  // dense FFN of `ffn_hidden` (DeepSeek's first_k_dense_replace), and of the others, layer l is a
  // MoE layer where l is a multiple of `moe_every` (Hugging Face's DeepSeek rule and Megatron-LM's
  // moe_layer_freq: 2 puts experts in every other layer, from layer 0), the others dense.
  int experts = 0;
  int experts_per_token = 0;
  int expert_ffn_hidden = 0;
  int shared_experts = 0;
  int dense_layers = 0;
  int moe_every = 1;

  bool moe() const { return experts > 0; }
  bool is_moe(int layer) const {
    return experts > 0 && layer >= dense_layers && layer % moe_every == 0;
  }
  // Width of the query projection and of each of the key and value projections.
  int64_t q_width() const { return static_cast<int64_t>(heads) * head_dim; }
  int64_t kv_width() const { return static_cast<int64_t>(kv_heads) * head_dim; }
  // Parameters of one dense transformer layer, of the embeddings, and of the whole model.
  int64_t layer_params() const;
  // Parameters of layer l: dense, or attention, router, shared and routed experts.
  int64_t layer_params(int layer) const;
  // Of those, the routed experts' (0 for a dense layer): what expert parallelism splits.
  int64_t expert_layer_params(int layer) const;
  // The sum of layer_params(l) and of expert_layer_params(l) over layers [first, first + n).
  int64_t layers_params(int first, int n) const;
  int64_t layers_expert_params(int first, int n) const;
  // How many of layers [first, first + n) are MoE layers.
  int moe_layers_in(int first, int n) const;
  // The first MoE layer (layers when there is none).
  int first_moe_layer() const;
  // One FFN of width `ffn` (gelu: two matrices; swiglu: three), with its biases.
  int64_t mlp_params(int64_t ffn) const;
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
