// Replays a TrainingJob on the engine: every stage copy's program on its compute stream, tensor-
// and data-parallel collectives and pipeline transfers as flows on the cluster's links.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/network/flow_network.h"
#include "sim/workload/job/training_job.h"

namespace hetsim::workload {

enum class WaitReason {
  none,
  tensor_parallel,
  pipeline,
  data_parallel,
  expert_parallel,
  context_parallel
};

// Observers attach tracing and statistics; the replay never tests for them.
class ReplayObserver {
 public:
  virtual ~ReplayObserver() = default;
  // A compute segment ran on a copy's compute stream.
  virtual void on_compute(const TrainingJob&, uint32_t /*copy*/, const Task&, Time /*start*/,
                          Time /*end*/) {}
  // A collective ran on a copy's stream ("tp", "ep" or "dp"); `name` from the program.
  virtual void on_collective(const TrainingJob&, uint32_t /*copy*/, const char* /*stream*/,
                             const std::string& /*name*/, const Task&, Time /*start*/,
                             Time /*end*/) {}
  // A pipeline transfer from one copy to another.
  virtual void on_transfer(const TrainingJob&, uint32_t /*from*/, uint32_t /*to*/, const Task&,
                           Time /*start*/, Time /*end*/) {}
};

// Where one stage copy's time went in the iteration (ReplayResult::copies).
struct CopyTimes {
  Time compute;
  Time tp_wait, pp_wait, dp_wait;
  Time ep_wait;  // in a MoE layer's all-to-alls (waiting for the expert-parallel group, and the
                 // transfer itself)
  Time cp_wait;  // in ring attention's gradient exchange (its key/value exchange overlaps the
                 // attention kernel; what it leaves exposed is in tp_wait)
  Time finish;
};

struct ReplayResult {
  Time iteration;
  std::vector<CopyTimes> copies;  // per copy, as TrainingJob::copies
  uint64_t events = 0;
  uint64_t flows = 0;
  // Identical data-parallel replicas replayed as one (see ReplayOptions::exact): how many
  // replicas the replayed one stood for, 1 when every replica was replayed.
  uint32_t folded_replicas = 1;
};

// Where a replay has got to, for a progress display.
struct ReplayStatus {
  Time now;  // simulated time
  uint64_t events = 0;
  uint64_t tasks_done = 0, tasks_total = 0;  // program tasks over all copies
};

struct ReplayOptions {
  // Every collective and transfer takes no time: isolates compute and pipeline bubbles (the
  // "what if the network were free" bound, and the bubble oracles' setting).
  bool free_communication = false;
  // Replay every data-parallel replica on its own. Without it, when every replica runs the same
  // program (same stages, layers, GPU types and micro-batches), one replica stands for all: its
  // kernels run once, and each of its tensor-parallel collectives and pipeline transfers is one
  // flow that crosses the links of every replica's copy (a link two copies share counts twice),
  // so all replicas move in lockstep at the pace of the slowest copy. Data-parallel collectives
  // still span every replica's devices. Identical to the full replay when the replicas'
  // traffic is symmetric; where routing makes it asymmetric (hashed spine paths), no faster than
  // it (tests/unit/fold_test.cpp bounds the difference). Exact also gives every rank pair of
  // an all-to-all its own flow, where the default moves each class of alike pairs as one
  // (network::Expansion): equal on symmetric fabrics, and where traffic is uneven either may be
  // the faster (tests/unit/moe_test.cpp: within 1%).
  bool exact = false;
  // Called every `progress_every` events (and so cheap to poll the wall clock in); it only
  // reads, so the replay's results do not depend on it.
  std::function<void(const ReplayStatus&)> progress;
  uint64_t progress_every = 4096;
};

ReplayResult replay(const TrainingJob& job, ReplayObserver* observer = nullptr,
                    ReplayOptions options = {});

}  // namespace hetsim::workload
