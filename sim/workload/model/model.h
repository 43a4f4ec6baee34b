// A transformer model as plain data: read from models/*.yaml or a Hugging Face config.json,
// validated, with its parameter count derived from the fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/config/key_table.h"

namespace hetsim::workload {

enum class Activation { gelu, swiglu };
enum class Norm { layernorm, rmsnorm };
enum class Position { learned, rotary };
// Where a layer's norms sit: before each block (pre: GPT-2, Llama), after each block's output
// before its residual add (post: OLMo 2), or both (sandwich: Gemma 2 and 3, four a layer).
enum class NormPlacement { pre, post, sandwich };
// Norms over the queries and keys after their projections (Qwen3, Gemma 3, OLMo 2, Llama 4):
// none; per head over head_dim with one weight vector each for queries and keys (head); over
// the whole projection, weights as wide (projection: OLMo 2); without weights (unweighted:
// Llama 4's L2 norm).
enum class QkNorm { none, head, projection, unweighted };
// Local attention in some layers: none; a sliding window of the `attention_window` keys before
// each query (Mistral, Gemma 2 and 3, StarCoder2, Phi-3); or chunks of `attention_window`
// tokens that attend only within themselves (Llama 4's chunked attention).
enum class WindowKind { none, sliding, chunked };
// What the last layer feeds: a language-model head (the final norm, logits over the vocabulary
// and their cross-entropy), or a sequence classifier (Megatron-LM's Classification model, BERT's
// for GLUE: the final norm, a pooler (a dense layer and tanh) on the first token, and a dense
// layer to `classes` logits).
enum class Head { lm, classification };

// One layer of a convolutional network (family cnn): a convolution, a pooling or a fully
// connected layer, with the batch norm, ReLU and dropout that follow it, on one image of
// in_c x in_h x in_w (a fully connected layer's input flattened: in_c x in_h x in_w features).
enum class CnnKind : uint8_t { conv, pool, fc };
// How a layer is split over the P_r ranks of a process grid's column (sim/workload/model/cnn.h).
// batch: not at all (P_r = 1, pure batch parallelism); model: a fully connected layer's output
// rows, or a convolution's filters; domain: a convolution's or a pooling layer's activations, by
// image columns.
enum class LayerSplit : uint8_t { batch, model, domain };
enum class PoolKind : uint8_t { max, avg };
struct CnnLayer {
  std::string name;  // "conv1", "layer2.0.conv2", "fc6"
  CnnKind kind = CnnKind::conv;
  int64_t in_c = 0, in_h = 0, in_w = 0;
  int64_t out_c = 0, out_h = 0, out_w = 0;
  int kernel = 1, stride = 1, pad = 0;  // conv and pool (square)
  PoolKind pool = PoolKind::max;
  bool bias = false, batchnorm = false, relu = false;
  double dropout = 0;
  // Residual networks: the layer whose output this one reads, for a block's first and shortcut
  // convolutions (kPrevious: the one before it, the images for the first layer; kImages: the
  // network's input; else that layer's index), and the source of the identity this layer's
  // output adds before its ReLU (kNoResidual: none; kImages; else that layer's index).
  static constexpr int kPrevious = -1, kImages = -2, kNoResidual = -3;
  int input_from = kPrevious;
  int residual_from = kNoResidual;
  int64_t weights() const;  // filters or matrix, without the bias
  int64_t params() const;   // with bias and batch-norm scale and shift
  double macs() const;      // per image (conv, fc)
  int64_t in_elems() const { return in_c * in_h * in_w; }
  int64_t out_elems() const { return out_c * out_h * out_w; }
};

struct ModelConfig {
  std::string name;
  std::string family;  // gpt | llama | bert | gptneox | cnn
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
  Head head = Head::lm;
  int classes = 0;  // a classification head's
  bool causal = true;
  bool bias = true;
  // Biases on the query, key and value projections only (Qwen2's; `qkv_bias`), where `bias` is
  // false: counted in the parameters; their adds ride in the projections' epilogue.
  bool qkv_bias = false;
  // Biases on the MLP's linear layers (GPT-J's where its attention has none; Llama's
  // `mlp_bias`): `bias` unless said; and on the output projection (GPT-J's lm_head).
  bool mlp_bias = true;
  bool head_bias = false;
  NormPlacement norm_placement = NormPlacement::pre;
  // Attention and the MLP both read the layer's input (Falcon, GPT-J: y = x + attn(ln(x)) +
  // mlp(ln(x))), through one shared norm or, `parallel_norms` 2, one each (Falcon-40B's new
  // decoder architecture); with tensor parallelism their partial outputs are summed and reduced
  // once (Megatron-LM's parallel-attention layer, GPT-NeoX's).
  bool parallel_attention = false;
  int parallel_norms = 1;
  QkNorm qk_norm = QkNorm::none;
  // Local attention (window_kind not none): every layer, or where global_every > 0 all but every
  // global_every-th one (layer l global where (l + 1) % global_every == 0: Gemma 2's alternation
  // is 2, Gemma 3's 5 local to 1 global is 6, Llama 4's 3 chunked to 1 global is 4).
  WindowKind window_kind = WindowKind::none;
  int attention_window = 0;
  int global_every = 0;
  bool windowed(int layer) const {
    return window_kind != WindowKind::none &&
           (global_every == 0 || (layer + 1) % global_every != 0);
  }
  int windowed_layers() const;
  // The share of a fused causal kernel's score blocks that the model's attention computes at
  // `sequence` tokens, the mean over the layers (1 without local attention, or where the
  // window covers the sequence): the kernels skip the blocks outside a window or a chunk.
  double attention_span(int64_t sequence) const;
  // Norm weight vectors of one layer (a layernorm's bias with them), q/k norms aside.
  int64_t layer_norm_params() const;
  // Dropout probability on the attention probabilities and on each branch before its residual
  // add (one value for both): 0.1 for GPT and BERT as trained, 0 for Llama, GPT-NeoX and their
  // kin. At 0 no mask is kept and eager frameworks run no dropout kernel (PyTorch returns the
  // input as it is).
  double dropout = 0.1;
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
  // Of the layers past dense_layers, those whose index is moe_phase modulo moe_every hold the
  // experts (Llama 4 Maverick's interleave_moe_layer_step 2 puts them in the odd layers: 1).
  int moe_phase = 0;
  // Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: standard attention): keys and
  // values come from a kv_lora_rank-wide latent (a down-projection from the hidden state, normed,
  // then up-projected per head to the keys' non-rotary part and the values), queries from a
  // q_lora_rank-wide latent the same way (0: projected directly), and a rope_head_dim-wide
  // rotary key shared by the heads. head_dim is the query/key head size (non-rotary + rotary
  // parts), v_head_dim the value head size; kv_heads equals heads.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int rope_head_dim = 0;
  int v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }
  // The head size attention's FLOPs and bytes follow: the mean of the query/key and the value
  // head sizes (Q K^T runs over head_dim, P V over v_head_dim), head_dim without MLA.
  int64_t attention_head_dim() const { return mla() ? (head_dim + v_head_dim) / 2 : head_dim; }
  // The attention block's parameters (projections, their biases, MLA's latent norms).
  int64_t attention_params() const;

  // A convolutional network (family cnn): its layers in execution order (layers = cnn.size()),
  // on images of input_c x input_h x input_w; the transformer fields above are unused.
  std::vector<CnnLayer> cnn;
  int64_t input_c = 0, input_h = 0, input_w = 0;
  bool convolutional() const { return !cnn.empty(); }
  // Multiply-accumulates of one image's forward pass.
  double cnn_macs() const;

  bool moe() const { return experts > 0; }
  bool is_moe(int layer) const {
    return experts > 0 && layer >= dense_layers && layer % moe_every == moe_phase;
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
  int64_t output_params() const;     // final norm (+ untied output projection, or the classifier)
  // The tensor-parallel ranks the head's parameters are split over: a language-model head's
  // vocabulary is (the final norm counted with it), a classifier is whole on every rank.
  int output_ranks(int tensor_parallel) const { return head == Head::lm ? tensor_parallel : 1; }
  // The fp32 logits of one micro-batch and their gradient on one rank, in bytes: the local
  // vocabulary's for every token, or the classes' for every sequence.
  double logits_bytes(int64_t micro_batch, int64_t sequence, int tensor_parallel) const {
    return head == Head::lm
               ? 2.0 * 4 * static_cast<double>(micro_batch) * sequence * vocab / tensor_parallel
               : 2.0 * 4 * static_cast<double>(micro_batch) * classes;
  }
  // What the stage holding the head keeps outside the layers in a pipeline of `stages`: the
  // final norm and output projection, and with tied embeddings across stages its own copy of
  // the word embedding.
  double head_params(int stages) const {
    return static_cast<double>(output_params()) +
           (tied_embeddings && stages > 1 ? static_cast<double>(vocab) * hidden : 0.0);
  }
  int64_t params() const;
};

// The keys of a model file, declared once (config/key_table.h; model_keys.cpp): the loaders
// check a file's keys and read its choices from this table; `hetsim reference model-keys` and
// `model-schema` write docs/reference/model-keys.md and docs/schemas/model.schema.json from it.
const std::vector<config::Key>& model_keys();
std::vector<std::string> model_key_choices(std::string_view key);
std::string model_keys_markdown();
nlohmann::ordered_json model_json_schema();

// Reads a model from a YAML file, a Hugging Face config.json, or a built-in name such as
// "gpt3-175b". Throws InputError naming the file, the field and what was expected.
ModelConfig load_model(const std::string& path_or_name);
ModelConfig load_model_yaml_text(const std::string& text, const std::string& file);
ModelConfig load_model_hf_text(const std::string& text, const std::string& file);  // hf_config.cpp
// Throws InputError naming the file and the field where the fields contradict each other.
void validate_model(const ModelConfig& m, const std::string& file);

}  // namespace hetsim::workload
