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

#include "sim/workload/plan.h"

namespace hetsim::policy {

// Rebalances `plan`'s replicas' micro-batch counts for GPUs that compute `compute_factor[g]`
// times slower (empty: none). Returns whether any share changed (never under ZeRO-2 or -3).
bool rebalance_batch(workload::Plan& plan, const std::vector<double>& compute_factor);

}  // namespace hetsim::policy
