// NCCL's protocol and latency constants, as its tuning model states them (NCCL 2.30.7,
// src/graph/tuning.cc; summarised in shared/reference/hardware.md §3 [nccl-tune]).
#pragma once

#include <cstddef>
#include <string>

#include "sim/config/cluster_config.h"
#include "sim/core/time.h"

namespace hetsim::network {

enum class Algorithm { ring, tree, hierarchical, direct };
enum class Protocol { ll, ll128, simple };

std::string to_string(Algorithm a);
std::string to_string(Protocol p);

// Share of the link bandwidth that carries payload: LL moves 4 B of data per 8 B store, LL128
// 120 B per 128 B line, Simple all of it [n281][nccl-tune]. The model sends payload / factor bytes.
double payload_fraction(Protocol p);

// Per-step hardware latency by algorithm, protocol and the kind of path the step crosses.
Time step_latency(Algorithm a, Protocol p, config::LinkKind kind);

// Base latency of one collective by algorithm and protocol.
Time base_latency(Algorithm a, Protocol p);

// Trees across nodes, as NCCL's tuning model has them [nccl-tune]: a tree all-reduce's bus
// bandwidth is the ring's channel bandwidth x 0.92, and its algorithm bandwidth half of that,
// where a ring's is nRanks / (2 (nRanks - 1)) of it; so a tree moves at most
// 0.92 (n - 1) / n of what a ring over the same ranks moves (both take the intra-node channel
// bandwidth on 2 nodes and the inter-node one beyond). hetsim's trees are flows over their edges,
// which on 2 to 4 nodes (heap-shaped trees with few interior nodes) would reach more than the
// nodes' NICs carry (240 GB/s bus bandwidth on DGX A100, where 192 is measured [n1576]).
double tree_to_ring_bandwidth(size_t ranks);

// NCCL's measured correction of its tree model at medium sizes [nccl-tune]
// (treeCorrectionFactor: "trees are not perfectly sticking to the model for medium sizes"), by
// protocol and the power of two of bytes / 64, 64 B to 256 MB; 1 above. Applied across nodes,
// where hetsim has no measured tree of its own (one node's trees are fitted on nccl-tests data).
double tree_size_factor(Protocol p, double bytes);

// Host-side cost of launching one collective and returning, as nccl-tests' wall-clock timing
// sees it. Fitted: the small-size end of the vTrain A100 nccl-tests all-reduce data
// (shared/reference/ground_truth/vtrain): 1 MiB on 2 GPUs takes 44 us, of which ring Simple
// base + steps + transfer explain about 20 us.
Time launch_overhead();

}  // namespace hetsim::network
