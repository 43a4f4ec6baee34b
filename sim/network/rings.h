// Topology-aware orderings of a communicator's ranks, as NCCL's graph search builds them:
// rings (one per channel), chains inside a node, and double binary trees across nodes.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "sim/platform/cluster.h"

namespace hetsim::network {

using platform::GpuId;

// Ranks grouped by node, nodes in ascending order, each node's ranks in a ring order that uses
// direct NVLinks where the node has a mesh.
struct NodeOrders {
  std::vector<uint32_t> nodes;
  std::vector<std::vector<GpuId>> order;  // per node: a cycle order of its ranks
  std::vector<std::vector<GpuId>> chain;  // per node: a path order (for chains and trees)
  // Single node: extra edge-disjoint NVLink cycles beyond the first (mesh nodes only).
  std::vector<std::vector<GpuId>> extra_cycles;
  bool equal_sizes = true;  // every node holds the same number of ranks
};

NodeOrders order_by_node(const platform::Cluster& c, std::span<const GpuId> ranks);

// Directed rings, one per channel; every ring visits every rank once.
// One node: NVSwitch and PCIe nodes get one ring; NVLink meshes get both directions of as many
// edge-disjoint NVLink Hamiltonian cycles as fit in the link counts (DGX-1: 3 cycles, 6 rings).
// Several nodes: one ring per NIC the ranks of a node use, each entering every node on its own
// NIC, nodes in ascending order.
std::vector<std::vector<GpuId>> build_rings(const platform::Cluster& c, const NodeOrders& nodes);

// Per channel (one per NIC the ranks of every node use), per node: the node's ranks in ring
// order, starting at a GPU of that channel's NIC.
std::vector<std::vector<std::vector<GpuId>>> channel_orders(const platform::Cluster& c,
                                                            const NodeOrders& nodes);

// Trees for the tree all-reduce, as (child, parent) edges. One node: a chain along the node
// order. Several nodes: per channel, two complementary binary trees over the nodes (NCCL's
// double binary tree), each node's ranks chained below the GPU of the channel's NIC.
struct TreeEdges {
  std::vector<std::pair<GpuId, GpuId>> edges;
  GpuId root = 0;
};
std::vector<TreeEdges> build_trees(const platform::Cluster& c, const NodeOrders& nodes);

}  // namespace hetsim::network
