// Memory per device: weights, gradients and optimizer states by ZeRO stage and precision;
// activations by schedule (micro-batches in flight) and recompute policy; workspace and
// communication buffers. Korthikanti et al. (MLSys'23) Table 2 in the limit cases.
#pragma once

#include <vector>

#include "sim/workload/job/training_job.h"

namespace hetsim::workload {

struct DeviceMemory {
  double weights = 0, gradients = 0, optimizer = 0;
  double activations = 0;  // peak of the stored activations over the schedule
  double workspace = 0;    // transient: a recomputed layer, logits, communication buffers
  double peak = 0;
  double capacity = 0;
  bool oom() const { return peak > capacity; }
};

// Stored activation bytes of one transformer layer for one micro-batch on one rank.
double layer_activation_bytes(const ModelConfig& m, const LayerShape& s, Recompute r);

// One entry per stage copy, as TrainingJob::copies (every device of a copy holds the same).
std::vector<DeviceMemory> memory_per_copy(const TrainingJob& job);

}  // namespace hetsim::workload
