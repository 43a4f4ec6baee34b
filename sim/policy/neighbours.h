// One-step changes to a plan, for the planner's search around the policies' proposals
// (planner.h): the micro-batch size doubled or halved, another recompute, ZeRO stage one up or
// down, 1F1B and the interleaved schedule, one layer moved across a stage boundary, a micro-batch
// (or a staged plan's sample) moved from the replicas (groups) of one GPU type to another's. Each
// change is an edit of the plan's YAML, so that the result is a plan file `simulate` reads, and is
// validated as one: a change the loader refuses is dropped.
#pragma once

#include <string>
#include <vector>

#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

struct Neighbour {
  std::string change;  // "micro-batch 2", "layer 12 to stage 1", ...
  std::string plan;    // the plan file's text
};

// The plan `text` (loaded as `plan`) changed one step each way it can be.
std::vector<Neighbour> neighbours(const std::string& text, const workload::Plan& plan,
                                  const platform::Cluster& cluster);

}  // namespace hetsim::policy
