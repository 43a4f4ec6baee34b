// Validation against torchtitan's published FSDP2 throughput on 64 A100 80GB
// (tests/data/ground_truth/torchtitan_a100/): Llama 3 8B and 70B, Llama 2 13B and 70B, bf16,
// eager PyTorch, every parameter sharded over the 64 GPUs, with no, full, every second layer's
// (`recompute: full`, `recompute_layers` half the layers) or torchtitan's op-level
// (`recompute: selective_op`) recomputation. Each row is replayed as `framework: pytorch-fsdp2`
// with the datasheet model on 8 DGX A100 nodes and on 8 AWS p4de nodes (the cluster is not
// stated; the two differ in the network only, 1.6 Tb/s and 400 Gb/s a node); prints predicted
// against published tokens/s/GPU.
//
// 2026-12-04: with each Llama layer's RMSNorm, rotary embeddings, key/value repeat and SwiGLU
// counted as one fused kernel each (as Megatron-LM runs them), hetsim was 6-14% too fast on the
// five rows it could then express (Llama 2 13B without recomputation +14.1%, with every second
// layer recomputed +11.2%, Llama 3 8B so +10.5%, the two 70B rows with full recomputation +6.4%
// and +6.2%): 9.7% mean. Counted as the eager ops the reference code runs
// (sim/workload/model/ops.cpp: RMSNorm as PyTorch's composite, 36 and 84 bytes an element forward
// and backward against the fused kernel's 4 and 6), with the op-level policy's rows added: the
// seven rows bound by compute from +0.8% to +4.8%, 2.2% mean; Llama 2 70B at one sequence a GPU
// +15.4% on the DGX network and -16.1% on the p4de one, its gathers as long as its compute. Under
// pytorch-fsdp2, each gathered layer copied out of the all-gather's buffer (FSDP2's per-parameter
// sharding, 4 bytes a parameter a gather, on the compute stream): the seven from -0.4% to
// +3.2%, 1.2% mean (2.2% on the p4de network); the 70B row +12.2% and -16.1%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/cluster_config.h"
#include "sim/platform/cluster.h"
#include "sim/report/training_report.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/replay.h"
#include "tests/validation/csv_table.h"
#include "tests/validation/validation_env.h"

namespace {

namespace fs = std::filesystem;
using namespace hetsim;

constexpr double kMeanCeilingPct = 3.0;  // measured 1.2%
constexpr double kRowCeilingPct = 6.0;   // measured 3.2% at most

struct Row {
  std::string label, model, checkpointing;
  int gpus = 0, local_batch = 0, sequence = 0;
  double measured = 0, mfu = 0;  // tokens / s / GPU, torchtitan's MFU (%)
};

std::vector<Row> read_rows(const fs::path& file) {
  std::vector<Row> rows;
  for (const std::vector<std::string>& f : validation::read_csv_rows(file, 8)) {
    Row r;
    r.label = f[0], r.model = f[1], r.gpus = std::stoi(f[2]), r.local_batch = std::stoi(f[3]);
    r.sequence = std::stoi(f[4]), r.checkpointing = f[5], r.measured = std::stod(f[6]);
    r.mfu = std::stod(f[7]);
    rows.push_back(r);
  }
  return rows;
}

// One row's replay on a cluster: tokens / s / GPU, peak memory (GiB), compute and exposed time.
struct Replayed {
  double tps = 0, peak_gib = 0, compute_s = 0, exposed_s = 0;
  bool oom = false;
};

Replayed replay_row(const Row& r, const platform::Cluster& cluster) {
  const workload::ModelConfig model = workload::load_model(r.model);
  std::ostringstream p;
  p << "data_parallel: " << r.gpus << "\nmicro_batch_size: " << r.local_batch
    << "\nglobal_batch_size: " << r.gpus * r.local_batch << "\nsequence_length: " << r.sequence
    << "\nprecision: bf16\nzero_stage: 3\nmain_grads: fp32\nframework: "
    << validation::framework("pytorch-fsdp2") << "\n"
    << "recompute: "
    << (r.checkpointing == "none"           ? "none"
        : r.checkpointing == "selective_op" ? "selective_op"
                                            : "full")
    << "\n";
  // torchtitan's selective layer checkpointing (ac_freq 2): every second block checkpointed,
  // half the layers, as many as recompute_layers recomputes.
  if (r.checkpointing == "selective_layer") p << "recompute_layers: " << model.layers / 2 << "\n";
  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  const workload::Plan plan = workload::load_plan_text(p.str(), r.label + ".yaml", model, cluster);
  const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
  const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(job);
  const workload::ReplayResult result = workload::replay(job);
  const report::TrainingReport rep = report::make_training_report(job, result, memory);
  Replayed out;
  out.tps = double(r.gpus) * r.local_batch * r.sequence / result.iteration.seconds() / r.gpus;
  for (const workload::DeviceMemory& m : memory) {
    out.oom = out.oom || m.oom();
    out.peak_gib = std::max(out.peak_gib, m.peak / 1073741824.0);
  }
  out.compute_s = rep.compute_s;
  out.exposed_s = rep.dp_exposed_s;
  return out;
}

TEST(TrainingValidation, TorchtitanFsdp2A100) {
  const std::vector<Row> rows = read_rows(fs::path(HETSIM_SOURCE_DIR) /
                                          "tests/data/ground_truth/torchtitan_a100/fsdp2_a100.csv");
  ASSERT_EQ(rows.size(), 8u);
  std::printf("\n=== torchtitan FSDP2 on 64 A100 80GB, bf16, eager PyTorch ===\n");
  std::printf("%-22s %-15s %9s %9s %8s %9s %8s %9s  %s\n", "row", "checkpointing", "measured",
              "1.6 Tb/s", "err%", "400 Gb/s", "err%", "peak", "time split (1.6 Tb/s)");
  double sum = 0, sum_p4de = 0;
  int compute_bound = 0;
  // Every row runs on 64 GPUs: 8 nodes of either cluster, loaded once.
  config::ClusterOptions o;
  o.nodes = 8;
  const platform::Cluster dgx_a100(config::load_cluster("dgx-a100", o));
  const platform::Cluster p4de_nodes(config::load_cluster("aws-p4de-24xlarge", o));
  for (const Row& r : rows) {
    ASSERT_EQ(r.gpus, 64) << r.label;
    const Replayed dgx = replay_row(r, dgx_a100);
    const Replayed p4de = replay_row(r, p4de_nodes);
    const double err = (dgx.tps - r.measured) / r.measured * 100;
    const double err_p4de = (p4de.tps - r.measured) / r.measured * 100;
    EXPECT_FALSE(dgx.oom) << r.label << ": fits, as torchtitan ran it";
    std::printf(
        "%-22s %-15s %9.0f %9.0f %+7.1f%% %9.0f %+7.1f%% %5.1f GiB  compute %.2f s, "
        "exposed %.3f s\n",
        r.label.c_str(), r.checkpointing.c_str(), r.measured, dgx.tps, err, p4de.tps, err_p4de,
        dgx.peak_gib, dgx.compute_s, dgx.exposed_s);
    // The cluster is not stated. A row whose prediction moves by under 10% between a DGX A100's
    // network (8 x 200 Gb/s a node) and an AWS p4de's (4 x 100 Gb/s) is bound by its compute,
    // and checks the compute model; the others must lie between the two.
    if (std::abs(dgx.tps - p4de.tps) < 0.10 * dgx.tps) {
      EXPECT_LT(std::abs(err), kRowCeilingPct) << r.label;
      sum += std::abs(err);
      sum_p4de += std::abs(err_p4de);
      ++compute_bound;
    } else {
      EXPECT_LE(p4de.tps, r.measured) << r.label << ": within the two networks' predictions";
      EXPECT_GE(dgx.tps, r.measured) << r.label << ": within the two networks' predictions";
    }
  }
  EXPECT_EQ(compute_bound, 7);
  std::printf(
      "mean |error| over the %d compute-bound rows: %.1f%% at 1.6 Tb/s a node, %.1f%% at "
      "400 Gb/s\n",
      compute_bound, sum / compute_bound, sum_p4de / compute_bound);
  EXPECT_LT(sum / compute_bound, kMeanCeilingPct);
}

}  // namespace
