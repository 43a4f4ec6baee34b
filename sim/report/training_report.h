// What a user needs from one simulated iteration: time, throughput, MFU, where the time went,
// per-device busy time and memory (OOM named per device), as text or JSON (design.md's keys).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::report {

struct DeviceReport {
  std::string id;                // node3.gpu5
  uint32_t index = 0;            // global GPU id
  std::string gpu;               // profile name
  uint32_t node = 0, local = 0;  // node index, GPU index within the node
  uint32_t replica = 0, stage = 0;
  double busy_s = 0;
  workload::DeviceMemory memory;
};

// What a node lost mid-iteration cost (workload::LostNode): the step it hit ran until `at`,
// waited `detect` for the timeout, `restart` to relaunch, then ran again after the restart, as
// every step after it runs (after_s, this report's iteration).
struct LostNodeReport {
  uint32_t node = 0;
  bool hit = true;     // the node held some of the plan's GPUs (else nothing was lost)
  bool spare = false;  // on a spare node; else shrunk to the survivors
  double at_s = 0, detect_s = 0, restart_s = 0;
  double before_s = 0, after_s = 0;
  double failed_step_s = 0;  // at + detect + restart + after (hit; else the step as before)
  size_t gpus_before = 0, gpus_after = 0;
  size_t replicas_before = 0, replicas_after = 0;
  int64_t global_batch_before = 0, global_batch_after = 0;
};

struct TrainingReport {
  std::string model, cluster, plan;
  int64_t parameters = 0;  // the model's (ModelConfig::params)
  std::string precision;   // the plan's; "bf16 (default: ...)" when the plan gives none
  // The framework the plan runs on and its one-line description ("megatron-lm-2021: Megatron-LM
  // v2-v3 (2021-2022), ..."): the era a reproduction has to name.
  std::string framework;
  size_t gpus = 0;
  double iteration_time_s = 0;
  double tokens_per_s = 0, samples_per_s = 0;
  double mfu = 0;
  double model_flops = 0;  // per iteration
  double compute_s = 0, communication_exposed_s = 0, bubble_s = 0;
  double tp_exposed_s = 0, dp_exposed_s = 0;
  double ep_exposed_s = 0;  // MoE layers' all-to-alls (expert parallelism)
  // Ring attention's gradient exchange (context parallelism; its key/value exchange overlaps the
  // attention kernel, and what that leaves exposed is in tp_exposed_s)
  double cp_exposed_s = 0;
  // Bytes one device sends per iteration (the mean over devices), by what the collectives span:
  // its stage's or column's ranks (tensor parallel, a grid's rows: halos and activations; with
  // the expert- and context-parallel exchanges) and the replicas (data parallel: gradients and
  // sharded weights). Bandwidth-optimal collectives: an all-reduce of n bytes over p ranks sends
  // 2 n (p-1)/p, an all-gather or reduce-scatter of n in all n (p-1)/p, a halo exchange n to
  // each neighbour (Gholami et al.'s accounting, their beta terms): 2 n (p-1)/p, the first and
  // the last rank having one neighbour.
  double sent_group_bytes = 0, sent_replicas_bytes = 0;
  // A convolutional network's grid, rows x columns, and each layer's split (empty otherwise).
  int grid_rows = 0, grid_columns = 0;
  std::vector<std::pair<std::string, std::string>> layer_splits;
  int expert_parallel = 1, context_parallel = 1;
  double cost_per_iteration_usd = -1;      // when every GPU type has a price
  std::vector<std::string> unpriced_gpus;  // GPU types without price_per_hour, sorted
  double price_per_hour_usd = -1;          // every GPU's price_per_hour, summed
  double cost_per_million_tokens_usd = -1;
  // A training run of `run_tokens` tokens (simulate --tokens; 0: not given): its wall time at
  // this iteration's throughput and its cost.
  double run_tokens = 0, run_time_s = 0, cost_per_run_usd = -1;
  // The what-ifs applied (sim/workload/replay/perturbation.h), one line each; empty: none.
  std::vector<std::string> perturbations;
  std::optional<LostNodeReport> lost;
  bool oom = false;
  std::vector<DeviceReport> devices;
  std::vector<std::string> cost_sources;
  uint64_t events = 0;
  uint32_t folded_replicas = 1;  // identical replicas replayed as one (1: each replayed)
  // Doubts about the inputs (e.g. a calibration database too noisy to trust), one sentence each;
  // printed first in the text and listed in the JSON.
  std::vector<std::string> warnings;
};

TrainingReport make_training_report(const workload::TrainingJob& job,
                                    const workload::ReplayResult& result,
                                    const std::vector<workload::DeviceMemory>& memory);
// Fills the run_* fields for a training run of `tokens` tokens (> 0).
void add_run_cost(TrainingReport& r, double tokens);
nlohmann::ordered_json to_json(const TrainingReport& r);
std::string to_text(const TrainingReport& r);

}  // namespace hetsim::report
