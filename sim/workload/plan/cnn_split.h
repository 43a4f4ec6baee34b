// Gholami, Azad, Jin, Keutzer and Buluc, "Integrated Model, Batch and Domain Parallelism in
// Training Neural Networks" (SPAA'18, arXiv 1712.04432): a P_r x P_c process grid, the batch
// split over the P_c columns, each layer split over the P_r rows by model (a fully connected
// layer's rows, a convolution's filters) or by domain (the image's columns, with a halo
// exchange). The paper chooses per layer with an alpha-beta model of the communication; so does
// this policy, with alpha and beta fitted to hetsim's own collectives on the plan's ranks.
//
// Where hetsim differs from the paper: the choice is per layer on the layer's own traffic (the
// paper's formulas), while the replay also prices the layout changes between layers that the
// choice implies (an all-to-all from channels to columns), and the batch norm statistics a
// spatial split must all-reduce; the paper's networks (AlexNet) have neither. Each side of a
// halo is its own width (pad on the left, kernel - stride - pad on the right; the paper's
// floor(k / 2) on both), and a layer reading the images, which every rank holds whole, sends no
// forward halo.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/platform/cluster.h"
#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"

namespace hetsim::workload {

// t(n) = alpha x steps + beta x n: the paper's model of one collective over p ranks, with
// steps = ceil(log2 p) (all-gather) or 2 ceil(log2 p) (all-reduce).
struct AlphaBeta {
  double alpha = 0;  // seconds per step
  double beta = 0;   // seconds per byte
};
// Fitted to hetsim's estimate of an all-reduce over `ranks` at 4 KiB and 256 MiB.
AlphaBeta fit_alpha_beta(const platform::Cluster& c, const std::vector<platform::GpuId>& ranks);

// The paper's per-layer communication time (seconds) of layer l under `split`, for `batch`
// images per column on a rows x columns grid, e bytes per activation and g per gradient:
// model: all-gather of the output (over the rows), all-reduce of the input gradient (where
// `input_gradient`: not for a layer reading the images), all-reduce of its rows' gradients over
// the columns; domain: the halo exchange, each side alpha + beta x its size (Halo),
// forward unless the input is whole on every rank (`whole_input`: the images) and backward
// where `input_gradient`, and the whole gradient all-reduced over the grid; batch (rows 1): the
// gradient all-reduced over the columns.
double layer_comm_seconds(const CnnLayer& l, bool whole_input, bool input_gradient,
                          LayerSplit split, int rows, int columns, int64_t batch, double e,
                          double g, const AlphaBeta& row, const AlphaBeta& column,
                          const AlphaBeta& grid);

// Per layer, the split of least layer_comm_seconds among those that fit it
// (domain_split_misfit and model_split_misfit, cnn_programs' own rules): model for
// fully connected layers, whose images have no columns to split.
std::vector<LayerSplit> gholami_splits(const ModelConfig& model, int rows, int columns,
                                       int64_t batch, double e, double g, const AlphaBeta& row,
                                       const AlphaBeta& column, const AlphaBeta& grid);

}  // namespace hetsim::workload
