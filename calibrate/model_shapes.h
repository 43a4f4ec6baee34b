// The exact kernel shapes the shipped models run, for the calibration plan: every GEMM (forward,
// data and weight gradients, logits) and attention call of a layer and of the head, per model,
// tensor-parallel degree and micro-batch size. `hetsim calibrate shapes` writes them as CSV
// (calibrate/model_shapes.csv ships); the CUDA backend reads that file with --shapes.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace hetsim::calibrate {

struct ModelShapes {
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> gemm;  // m, n, k, batch
  // batch, heads (per tensor-parallel rank), sequence, head size, causal
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>> attention;
  std::vector<std::string> skipped;  // "model tp=N: why" for combinations that cannot run
};

// Models by built-in name or file; a tensor-parallel degree that does not divide a model's heads
// (or KV heads, or FFN width) is skipped and said in `skipped`.
ModelShapes model_shapes(const std::vector<std::string>& models,
                         const std::vector<int64_t>& tensor_parallel,
                         const std::vector<int64_t>& micro_batches);

// The built-in transformer models (models/*.yaml without the convolutional networks), sorted.
std::vector<std::string> builtin_model_names();

// CSV: header "kind,m,n,k,batch,heads,seq,head_dim,causal", then one line per shape (gemm rows
// fill m, n, k, batch; attention rows batch, heads, seq, head_dim, causal), sorted.
std::string model_shapes_csv(const ModelShapes& shapes);
// The inverse: reads such a file (lines starting with '#' are comments). InputError naming the
// file, the line and the field for anything else.
ModelShapes read_model_shapes_csv(const std::string& path);

}  // namespace hetsim::calibrate
