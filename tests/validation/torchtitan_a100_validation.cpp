// Validation against torchtitan's published FSDP2 throughput on 64 A100 80GB
// (tests/data/ground_truth/torchtitan_a100/): Llama 3 8B and 70B, Llama 2 13B and 70B, bf16,
// eager PyTorch, every parameter sharded over the 64 GPUs. Each row with no, full or selective
// layer checkpointing (every second layer: `recompute: full` with `recompute_layers` half the
// layers) is replayed as `framework: pytorch-fsdp` on 8 DGX A100 nodes (the cluster is not
// stated; hetsim exposes 0-2% of these iterations to communication on it) with the datasheet
// model; prints predicted against published tokens/s/GPU. torchtitan's op-level selective
// checkpointing (3 rows) is not a hetsim plan.
//
// 2026-12-04: with each Llama layer's RMSNorm, rotary embeddings, key/value repeat and SwiGLU
// counted as one fused kernel each (as Megatron-LM runs them), hetsim was 6-14% too fast on all
// five replayed rows (Llama 2 13B without recomputation +14.1%, with every second layer
// recomputed +11.2%, Llama 3 8B so +10.5%, the two 70B rows with full recomputation +6.4% and
// +6.2%): 9.7% mean. Counted as the eager ops the reference code runs (sim/workload/ops.cpp:
// RMSNorm as PyTorch's composite, 36 and 84 bytes an element forward and backward against the
// fused kernel's 4 and 6): from +0.8% to +4.8%, 2.0% mean.
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
#include "sim/workload/cost_model.h"
#include "sim/workload/memory.h"
#include "sim/workload/model.h"
#include "sim/workload/plan.h"
#include "sim/workload/replay.h"
#include "sim/workload/training_job.h"

namespace {

namespace fs = std::filesystem;
using namespace hetsim;

constexpr double kMeanCeilingPct = 4.0;  // measured 2.0%
constexpr double kRowCeilingPct = 8.0;   // measured 4.8% at most

struct Row {
  std::string label, model, checkpointing;
  int gpus = 0, local_batch = 0, sequence = 0;
  double measured = 0, mfu = 0;  // tokens / s / GPU, torchtitan's MFU (%)
};

std::vector<Row> read_rows(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read");
  std::vector<Row> rows;
  bool header = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      header = true;
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (f.size() != 8) throw std::runtime_error(file.string() + ": expected 8 fields: " + line);
    Row r;
    r.label = f[0], r.model = f[1], r.gpus = std::stoi(f[2]), r.local_batch = std::stoi(f[3]);
    r.sequence = std::stoi(f[4]), r.checkpointing = f[5], r.measured = std::stod(f[6]);
    r.mfu = std::stod(f[7]);
    rows.push_back(r);
  }
  return rows;
}

TEST(TrainingValidation, TorchtitanFsdp2A100) {
  const std::vector<Row> rows = read_rows(fs::path(HETSIM_SOURCE_DIR) /
                                          "tests/data/ground_truth/torchtitan_a100/fsdp2_a100.csv");
  ASSERT_EQ(rows.size(), 8u);
  const workload::DatasheetCostModel cost;
  std::printf("\n=== torchtitan FSDP2 on 64 A100 80GB, bf16, eager PyTorch ===\n");
  std::printf("%-22s %-15s %10s %10s %8s %8s  %s\n", "row", "checkpointing", "measured", "hetsim",
              "err%", "peak", "time split (hetsim)");
  double sum = 0;
  int replayed = 0;
  for (const Row& r : rows) {
    if (r.checkpointing == "selective_op") {
      std::printf("%-22s %-15s %10.0f %10s  (torchtitan's %s checkpointing: not a hetsim plan)\n",
                  r.label.c_str(), r.checkpointing.c_str(), r.measured, "-",
                  r.checkpointing.c_str());
      continue;
    }
    config::ClusterOptions o;
    o.nodes = r.gpus / 8;
    const platform::Cluster cluster(config::load_cluster("dgx-a100", o));
    const workload::ModelConfig model = workload::load_model(r.model);
    std::ostringstream p;
    p << "data_parallel: " << r.gpus << "\nmicro_batch_size: " << r.local_batch
      << "\nglobal_batch_size: " << r.gpus * r.local_batch << "\nsequence_length: " << r.sequence
      << "\nprecision: bf16\nzero_stage: 3\nmain_grads: fp32\nframework: pytorch-fsdp\n"
      << "recompute: " << (r.checkpointing == "none" ? "none" : "full") << "\n";
    // torchtitan's selective layer checkpointing (ac_freq 2): every second block checkpointed,
    // half the layers, as many as recompute_layers recomputes.
    if (r.checkpointing == "selective_layer") p << "recompute_layers: " << model.layers / 2 << "\n";
    const workload::Plan plan =
        workload::load_plan_text(p.str(), r.label + ".yaml", model, cluster);
    const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
    const std::vector<workload::DeviceMemory> memory = workload::memory_per_group(job);
    const workload::ReplayResult result = workload::replay(job);
    const report::TrainingReport rep = report::make_training_report(job, result, memory);
    const double tps =
        double(r.gpus) * r.local_batch * r.sequence / result.iteration.seconds() / r.gpus;
    const double err = (tps - r.measured) / r.measured * 100;
    double peak = 0;
    for (const workload::DeviceMemory& m : memory) {
      EXPECT_FALSE(m.oom()) << r.label << ": fits, as torchtitan ran it";
      peak = std::max(peak, m.peak / 1073741824.0);
    }
    std::printf("%-22s %-15s %10.0f %10.0f %+7.1f%% %5.1f GiB  compute %.2f s, exposed %.3f s\n",
                r.label.c_str(), r.checkpointing.c_str(), r.measured, tps, err, peak, rep.compute_s,
                rep.dp_exposed_s);
    EXPECT_LT(std::abs(err), kRowCeilingPct) << r.label;
    sum += std::abs(err);
    ++replayed;
  }
  ASSERT_EQ(replayed, 5);
  std::printf("mean |error| over %d replayed rows: %.1f%%\n", replayed, sum / replayed);
  EXPECT_LT(sum / replayed, kMeanCeilingPct);
}

}  // namespace
