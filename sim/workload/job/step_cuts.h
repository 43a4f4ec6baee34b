// How a run of steps (a layer's forward or backward pass, ops.h) executes on a device: the one
// rule that both evaluators of a training step take it by, the replay's tasks
// (build_training_job) and the estimator's closed forms (policy/estimate.cpp), so that the rule is
// written once.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/workload/model/ops.h"

namespace hetsim::workload {

// One piece of a run of steps, in order.
struct StepCut {
  enum class Kind : uint8_t {
    kernels,     // steps [first, first + count): consecutive kernels, run as one segment
    collective,  // step `first`: a collective (tensor-, context- or expert-parallel)
    wait,        // the device waits for the overlapping collective before it goes on
  };
  Kind kind = Kind::kernels;
  // A collective that runs beside the next segment (one kernel) and is waited for at its end.
  bool overlaps = false;
  uint32_t first = 0, count = 0;
};

// The rule:
// - consecutive kernels are one segment, which takes the longer of its kernels' GPU time and the
//   host's time to issue them (a host-bound run of small kernels);
// - a collective ends the segment before it, and the device waits for it where it is not
//   asynchronous;
// - an asynchronous collective (tensor- or context-parallel: an expert all-to-all always blocks)
//   runs beside the one kernel after it, which is a segment of its own, and is waited for at that
//   kernel's end; where no kernel comes before the next collective, the next one queues behind it
//   on the same stream, and at the end of the run the device waits for it.
std::vector<StepCut> cut_steps(const std::vector<Step>& steps);

}  // namespace hetsim::workload
