// NCCL's protocol and latency constants, as its tuning model states them (NCCL 2.30.7,
// src/graph/tuning.cc; summarised in shared/reference/hardware.md §3 [nccl-tune]).
#pragma once

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

// Host-side cost of launching one collective and returning, as nccl-tests' wall-clock timing
// sees it. Fitted: the small-size end of the vTrain A100 nccl-tests all-reduce data
// (shared/reference/ground_truth/vtrain): 1 MiB on 2 GPUs takes 44 us, of which ring Simple
// base + steps + transfer explain about 20 us.
Time launch_overhead();

}  // namespace hetsim::network
