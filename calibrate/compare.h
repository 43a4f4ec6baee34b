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

// Another database's measurements against a reference database's model (`hetsim calibrate
// diff`): each point of `other` predicted by `reference` (its own measurement where it has that
// key, interpolated or datasheet-scaled where it does not), one row per table of `other`
// ("gemm/bf16", "memory/layernorm", "collective/allreduce ranks=8 nodes=1"). `gpu` is the
// reference's GPU profile. Tables the reference cannot predict come back without points.
std::vector<CheckRow> compare_databases(const Database& reference, const Database& other,
                                        const config::GpuProfile& gpu);

}  // namespace hetsim::calibrate
