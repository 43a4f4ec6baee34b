// Re-planning around slow devices, after Malleus (Li et al., "Malleus: Straggler-Resilient Hybrid
// Parallel Training of Large-scale Models via Malleable Data and Model Parallelization", 2024)
// and FALCON (Wu et al., "FALCON: Pinpointing and Mitigating Stragglers for Large-Scale
// Hybrid-Parallel Training", 2024): once the stragglers are known, move work off them instead of
// letting the slowest device pace every step.
//
// What hetsim's version decides: the data-parallel batch shares. A replica's pipeline runs at the
// pace of its slowest device (its tensor-parallel ranks run in lockstep, and 1F1B is paced by its
// slowest stage), so replica r's speed is 1 / max over its devices of their slowdown; its share
// of the micro-batches becomes proportional to that speed (whole micro-batches, at least one each,
// the total kept). Where it differs from the papers: Malleus also re-partitions layers across
// stages and re-forms the groups (moving a straggler's load inside its pipeline, or dropping it);
// those need plans whose replicas differ in stage layout, which hetsim's plans cannot express yet.
// Under ZeRO-2 and -3 nothing moves: their per-micro-batch collectives need every replica to run
// as many micro-batches (uneven micro-batch sizes would do it; plans cannot say that yet).
#pragma once

#include <vector>

#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

// Rebalances `plan`'s replicas' micro-batch counts for GPUs that compute `compute_factor[g]`
// times slower (empty: none). Returns whether any share changed (never under ZeRO-2 or -3).
bool rebalance_batch(workload::Plan& plan, const std::vector<double>& compute_factor);

// Elastic restart after a node is lost (workload::LostNode, `replace: shrink`), as torchrun's
// elastic agent and Megatron-LM's in-process restart do it: the data-parallel replicas that held
// a GPU of the node are dropped, whole expert- and context-parallel groups at a time (their
// collectives need every member), and the survivors share the micro-batches so that the global
// batch is kept: whole micro-batches, as even as they divide; under ZeRO-2 and -3 (micro-batch
// by micro-batch accumulation) and with expert or context parallelism, whose per-micro-batch
// collectives need equal counts, and under the interleaved schedule, which runs whole groups of
// micro-batches, each survivor runs the rounded-up share (to a whole group, interleaved) and the
// global batch grows to that. A sharded state share (Cephalo) is renormalised over the survivors.
// Megatron-LM itself would refuse a global batch the survivors do not divide evenly; hetsim
// keeps it with uneven shares, as its heterogeneous plans do.
struct Shrunk {
  size_t replicas_before = 0, replicas_after = 0;
  int64_t global_batch_before = 0, global_batch_after = 0;
};
// Whether some replica of `plan` holds a GPU of `node`.
bool holds_node(const workload::Plan& plan, const platform::Cluster& cluster, uint32_t node);
// Throws InputError when no replica would be left (every one holds a GPU of the node).
Shrunk drop_node(workload::Plan& plan, const platform::Cluster& cluster, uint32_t node);

}  // namespace hetsim::policy
