// Measured collectives against the network model; see compare.h.
#include "calibrate/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/network/collective_runner.h"

namespace hetsim::calibrate {

std::vector<CollectiveComparison> compare_collectives(const Database& db,
                                                      const platform::Cluster& cluster) {
  std::vector<CollectiveComparison> out;
  for (const auto& [name, points] : db.collective) {
    const std::optional<network::Op> op = network::parse_op(name);
    std::map<std::pair<int64_t, int64_t>, std::vector<const SizePoint*>> tables;
    for (const SizePoint& p : points) tables[{p.ranks, p.nodes}].push_back(&p);
    for (const auto& [key, rows] : tables) {
      const auto [ranks, nodes] = key;
      CollectiveComparison c;
      c.row.table = fmt::format("collective/{} ranks={} nodes={}", name, ranks, nodes);
      network::CollectiveRequest req;
      if (!op) {
        c.skipped = "not a collective hetsim models";
      } else if (nodes > static_cast<int64_t>(cluster.node_count())) {
        c.skipped = fmt::format("the cluster has {} node(s)", cluster.node_count());
      } else if (ranks % nodes != 0) {
        c.skipped = fmt::format("{} ranks do not split evenly over {} nodes", ranks, nodes);
      } else {
        const int64_t per_node = ranks / nodes;
        for (int64_t n = 0; n < nodes && c.skipped.empty(); ++n) {
          const platform::Node& node = cluster.node(static_cast<uint32_t>(n));
          if (per_node > static_cast<int64_t>(node.gpu_count)) {
            c.skipped = fmt::format("node {} has {} GPUs, {} wanted", n, node.gpu_count, per_node);
          }
          for (int64_t i = 0; i < per_node; ++i)
            req.ranks.push_back(node.first_gpu + static_cast<platform::GpuId>(i));
        }
      }
      if (c.skipped.empty()) {
        req.op = *op;
        req.host_launch = true;  // nccl-tests' wall-clock view
        for (const SizePoint* p : rows) {
          req.bytes = p->bytes;
          const double simulated = network::simulate_collective(cluster, req).time.seconds();
          c.row.points.push_back(
              check_point(fmt::format("bytes={:.0f}", p->bytes), p->t, simulated));
        }
        summarise_row(c.row);
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<CheckRow> compare_databases(const Database& reference, const Database& other,
                                        const config::GpuProfile& gpu) {
  const MeasuredCostModel model(reference, workload::DatasheetCostModel());
  std::vector<CheckRow> rows;
  auto add = [&](CheckRow r) {
    summarise_row(r);
    rows.push_back(std::move(r));
  };
  // A table of points with labels, each predicted by `predict` (nullopt: left out).
  auto tables = [&](const auto& by_name, const char* kind, auto predict) {
    for (const auto& [name, points] : by_name) {
      CheckRow r;
      r.table = std::string(kind) + "/" + name;
      for (const auto& p : points)
        if (const std::optional<double> s = predict(name, p))
          r.points.push_back(check_point(point_label(p), p.t, *s));
      add(std::move(r));
    }
  };
  tables(other.gemm, "gemm",
         [&](const std::string& d, const GemmPoint& p) { return model.predict_gemm(d, p, gpu); });
  tables(other.attention, "attention", [&](const std::string& d, const AttentionPoint& p) {
    return model.predict_attention(d, p, gpu);
  });
  tables(other.conv, "conv", [&](const std::string& d, const ConvPoint& p) {
    return model.predict_conv(d, p.shape, gpu);
  });
  for (const char* kind : {"memory", "copy"}) {
    for (const auto& [kernel, points] : std::string(kind) == "memory" ? other.memory : other.copy) {
      CheckRow r;
      r.table = std::string(kind) + "/" + kernel;
      for (const SizePoint& p : points)
        if (const auto s = model.predict_size(kind, kernel, p))
          r.points.push_back(check_point(fmt::format("bytes={:.0f}", p.bytes), p.t, *s));
      add(std::move(r));
    }
  }
  for (const auto& [op, points] : other.collective) {
    std::map<std::pair<int64_t, int64_t>, CheckRow> tables;
    for (const SizePoint& p : points) {
      CheckRow& r = tables[{p.ranks, p.nodes}];
      r.table = fmt::format("collective/{} ranks={} nodes={}", op, p.ranks, p.nodes);
      if (const auto s = model.predict_size("collective", op, p))
        r.points.push_back(check_point(fmt::format("bytes={:.0f}", p.bytes), p.t, *s));
    }
    for (auto& [_, r] : tables) add(std::move(r));
  }
  return rows;
}

}  // namespace hetsim::calibrate
