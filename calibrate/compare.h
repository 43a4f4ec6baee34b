// Measured collectives against hetsim's network model: each table of a calibration database
// (op, ranks, nodes) replayed as that collective alone on a cluster, as `hetsim collective` would
// simulate it, size by size (`hetsim calibrate compare`).
#pragma once

#include <string>
#include <vector>

#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "sim/platform/cluster.h"

namespace hetsim::calibrate {

// One row per (op, ranks, nodes) table. Nodes 1: the first `ranks` GPUs of node 0; more: the
// first ranks/nodes GPUs of each of the first `nodes` nodes. A table the cluster cannot host
// comes back with no points and `skipped` saying why.
struct CollectiveComparison {
  CheckRow row;
  std::string skipped;
};
std::vector<CollectiveComparison> compare_collectives(const Database& db,
                                                      const platform::Cluster& cluster);

}  // namespace hetsim::calibrate
