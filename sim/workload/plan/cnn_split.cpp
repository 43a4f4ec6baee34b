// The Gholami et al. per-layer choice; see cnn_split.h.
#include "sim/workload/plan/cnn_split.h"

#include <cmath>

#include "sim/network/collective.h"
#include "sim/workload/model/cnn.h"

namespace hetsim::workload {

namespace {

double log_steps(int p) { return p > 1 ? std::ceil(std::log2(static_cast<double>(p))) : 0.0; }

double allgather(const AlphaBeta& ab, int p, double bytes) {
  if (p <= 1) return 0;
  return ab.alpha * log_steps(p) + ab.beta * (p - 1.0) / p * bytes;
}

double allreduce(const AlphaBeta& ab, int p, double bytes) {
  if (p <= 1) return 0;
  return 2 * ab.alpha * log_steps(p) + 2 * ab.beta * (p - 1.0) / p * bytes;
}

}  // namespace

AlphaBeta fit_alpha_beta(const platform::Cluster& c, const std::vector<platform::GpuId>& ranks) {
  const int p = static_cast<int>(ranks.size());
  if (p <= 1) return {};
  auto seconds = [&](double bytes) {
    network::CollectiveRequest r;
    r.op = network::Op::allreduce;
    r.bytes = bytes;
    r.ranks = ranks;
    r.host_launch = false;
    return network::estimate_seconds(c, network::plan_collective(c, r));
  };
  const double n1 = 4096, n2 = 256.0 * (1 << 20);
  const double t1 = seconds(n1), t2 = seconds(n2);
  const double f = 2.0 * (p - 1) / p;
  AlphaBeta ab;
  ab.beta = std::max(0.0, (t2 - t1) / (f * (n2 - n1)));
  ab.alpha = std::max(0.0, (t1 - ab.beta * f * n1) / (2 * log_steps(p)));
  return ab;
}

double layer_comm_seconds(const CnnLayer& l, bool whole_input, bool input_gradient,
                          LayerSplit split, int rows, int columns, int64_t batch, double e,
                          double g, const AlphaBeta& row, const AlphaBeta& column,
                          const AlphaBeta& grid) {
  const double b = static_cast<double>(batch);
  const double weights = static_cast<double>(l.params());
  switch (split) {
    case LayerSplit::batch:
      return allreduce(column, columns, g * weights);
    case LayerSplit::model:
      return allgather(row, rows, e * b * static_cast<double>(l.out_elems())) +
             (input_gradient ? allreduce(row, rows, e * b * static_cast<double>(l.in_elems()))
                             : 0.0) +
             allreduce(column, columns, g * weights / rows);
    case LayerSplit::domain: {
      if (rows <= 1) return allreduce(grid, columns, g * weights);
      // Each side's halo from its neighbour, alpha + beta x size (a side of no columns costs
      // nothing): the input's columns forward (none from a whole input: each rank reads its
      // own), the output gradient's backward (where the input's gradient is computed).
      auto sides = [&](const Halo& h, double column_bytes) {
        double t = 0;
        for (const int64_t c : {h.left, h.right})
          if (c > 0) t += row.alpha + row.beta * column_bytes * static_cast<double>(c);
        return t;
      };
      double t = 0;
      if (!whole_input) t += sides(halo_forward(l), e * b * static_cast<double>(l.in_c * l.in_h));
      if (input_gradient)
        t += sides(halo_backward(l), e * b * static_cast<double>(l.out_c * l.out_h));
      return t + allreduce(grid, rows * columns, g * weights);
    }
  }
  return 0;
}

std::vector<LayerSplit> gholami_splits(const ModelConfig& model, int rows, int columns,
                                       int64_t batch, double e, double g, const AlphaBeta& row,
                                       const AlphaBeta& column, const AlphaBeta& grid) {
  const std::vector<bool> dx = cnn_input_gradients(model);
  std::vector<LayerSplit> out;
  for (size_t i = 0; i < model.cnn.size(); ++i) {
    const CnnLayer& l = model.cnn[i];
    if (rows <= 1) {
      out.push_back(LayerSplit::batch);
      continue;
    }
    if (l.kind == CnnKind::pool) {
      out.push_back(LayerSplit::batch);  // a pool follows its input's layout
      continue;
    }
    // The images are whole on every rank; any other input the policy takes as split (a copy
    // gathered for another consumer is the replay's to find), so that whatever it chooses fits
    // cnn_programs' rule, one stricter or the same.
    const bool images = cnn_source(model, static_cast<int>(i)) == CnnLayer::kImages;
    const bool domain_fits = domain_split_misfit(l, rows, !images, dx[i]).empty();
    const bool model_fits = model_split_misfit(l, rows).empty();
    auto cost = [&](LayerSplit s) {
      return layer_comm_seconds(l, images, dx[i], s, rows, columns, batch, e, g, row, column, grid);
    };
    // Where neither fits, model: cnn_programs then says why neither does.
    const bool domain =
        domain_fits && (!model_fits || cost(LayerSplit::domain) < cost(LayerSplit::model));
    out.push_back(domain ? LayerSplit::domain : LayerSplit::model);
  }
  return out;
}

}  // namespace hetsim::workload
