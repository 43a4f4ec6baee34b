// Convolutional networks (AlexNet, VGG, ResNet) on a P_r x P_c process grid (Gholami, Azad, Jin,
// Keutzer and Buluc, "Integrated Model, Batch and Domain Parallelism in Training Neural
// Networks", SPAA'18): the images split over the P_c columns (batch parallel); along the P_r
// rows of each column, each layer either model parallel (a fully connected layer's rows, a
// convolution's filters) or domain parallel (the activations split along the image width, with
// a halo exchange between neighbours in the forward and the backward pass).
//
// The layer programs here are what each rank of a column runs: its kernels at their local
// shapes, and the communication over the column's P_r ranks that its split and its neighbours'
// splits imply. The weight gradients' reduction over the grid is the job's (training_job.cpp).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"

namespace hetsim::workload {

std::string to_string(LayerSplit s);

// A convolutional network from a model file whose family is cnn: `input: {channels, height,
// width}` and `network:`, a list of {conv: K, kernel, stride, pad, bias, batchnorm, relu},
// {pool: max|avg, kernel, stride, pad} or {pool: avg, global: true}, {fc: N, relu, dropout,
// bias}, and {bottleneck: W, blocks: N, stride: S} (ResNet v1.5 bottleneck blocks of width W,
// 4 W out, the stride on the 3x3). Shapes are propagated from the input; errors name the entry.
ModelConfig load_cnn_yaml(const YAML::Node& root, const std::string& file);

// The halo of a domain-split layer: the columns a rank needs from its left and from its right
// neighbour (each at least 0), its slab of output columns reading `stride` input columns each
// (the split aligned). Forward, input columns: pad on the left, kernel - stride - pad on the
// right. Backward, the output-gradient columns its input columns' gradient reads: the forward's
// sides mirrored, in output columns (ceil((kernel - stride - pad) / stride) on the left,
// ceil(pad / stride) on the right).
struct Halo {
  int64_t left = 0, right = 0;
  int64_t total() const { return left + right; }
};
Halo halo_forward(const CnnLayer& l);
Halo halo_backward(const CnnLayer& l);

// The layer whose output layer i reads (CnnLayer::kImages: the images).
int cnn_source(const ModelConfig& m, int i);
// Per layer, whether its backward computes its input's gradient: where a layer it reads from,
// directly or through others, has parameters to train. Never for the images: not for the first
// layer, nor for a pool that reads them and the layer after it.
std::vector<bool> cnn_input_gradients(const ModelConfig& m);

// The fit rules of the two splits over `rows` ranks, which cnn_programs applies and the gholami
// policy chooses within: why layer l cannot take the split (empty: it can). By model: fewer
// filters or outputs than ranks (a pool follows its input's channels). By domain: a fully
// connected layer; fewer output columns than ranks; a side of the halo wider than the
// neighbour's slab (a rank would need columns from beyond its neighbour), forward where the
// input is split over the ranks (`split_input`: from a whole input each rank reads its own halo)
// and backward where the layer computes its input's gradient. A global pool always fits.
std::string model_split_misfit(const CnnLayer& l, int rows);
std::string domain_split_misfit(const CnnLayer& l, int rows, bool split_input, bool input_gradient);

// One layer's programs on one rank of a column of `rows` ranks, for `batch` images.
struct CnnLayerProgram {
  std::vector<Step> forward, backward;
  LayerSplit split = LayerSplit::batch;
  double params = 0;  // the layer's parameters this rank holds (and updates)
  // Its weight gradients are reduced over every rank of the grid (domain: every row holds the
  // whole layer), not over the column's peers in the same row.
  bool grid_gradients = false;
  double activations = 0;  // bytes it keeps from its forward for its backward (one micro-batch)
};

// Every layer's programs, and the loss (softmax cross-entropy over the last layer's output)
// last. `splits` holds one entry per layer (pooling layers follow their input's layout, their
// entry is ignored). Throws InputError (naming the layer) for a split the layer cannot take (the
// misfits above), saying so where neither split fits.
std::vector<CnnLayerProgram> cnn_programs(const ModelConfig& model,
                                          const std::vector<LayerSplit>& splits, int rows,
                                          int64_t batch, Precision precision,
                                          const std::string& where);

// SGD with momentum over `params` local parameters (PyTorch's, the optimizer these networks
// train with): reads the gradient (`grad_bytes` each), reads and writes the fp32 weights and the
// momentum.
Op sgd_step(double params, double grad_bytes);

}  // namespace hetsim::workload
