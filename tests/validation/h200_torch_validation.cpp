// Validation against 24 real single-GPU training iterations in eager PyTorch on one H200
// (tests/data/ground_truth/h200_torch/): GPT-3 350M, 1.3B and 2.7B shapes, sequence 1024 and
// 2048, micro-batch 1 to 8, 4 micro-batches per iteration, bf16 autocast, fused AdamW. Each row
// is replayed on one H200 with the shipped calibration database (calibrate/data/) and with the
// datasheet model, under `framework: pytorch-ddp`; prints predicted against measured.
//
// On 2026-11-30, with Megatron-LM's fused kernel list and the datasheet model's host time per
// kernel (100 us, fitted on vTrain's 2021 host), hetsim was 23.7% off with the H200 database and
// 25.1% with the datasheet model, in two regimes: 10-15% too fast where the GPU is busy (eager
// PyTorch's kernels that a fused list leaves out) and up to 76% too slow where the host is.
// pytorch-ddp now runs eager PyTorch's kernels under autocast (frameworks/pytorch-ddp.yaml,
// `kernels: eager_autocast`: unfused dropout and residual adds, fp32 residual stream and norms,
// each weight cast every forward and its gradient cast back and accumulated every backward),
// and its host time per kernel (31 us) is fitted on the even rows (scripts/fit_h200_torch.py):
// datasheet model 7.3% on the fitted half, 5.2% held out, 6.3% on all; with the H200 database
// 18.3%. The database's elementwise kernels are scalar bf16 loops (1.8-2.5 TB/s, where a copy
// and PyTorch's vectorised kernels reach about 3.9), and its attention is cuDNN's at head sizes
// where PyTorch's SDPA runs flash attention, so with it the busy rows come out 4-36% too slow.
// On 2026-12-03 the loss's kernels were counted as they run (F.cross_entropy over the fp32
// logits: log_softmax forward; nll_loss's gradient written over the logits and log_softmax's
// backward; the casts), which they had been at 8 bytes a logit each way: datasheet model 5.8%,
// H200 database 22.0% (its `softmax` kernel, which stands for the loss, is one of those
// scalar loops). Then the H200's power cap (its `sustained:` 659 TFLOP/s, our own measurement,
// under the power model workload::power_clock: the busy rows' large matmuls at the capped clock,
// the small ones near the cool one): datasheet model 5.4% (7.3% / 3.5% by half; per_kernel
// refitted, unchanged at 31 us), the busiest rows from -6% to -2%. On 2026-12-04 the H200
// database was measured again with the elementwise kernels moving 16-byte vectors as PyTorch's
// do (experiments/h200-calibration/README.md), and the measured cost model stopped adding the
// datasheet model's 10 us launch gap to kernels whose event-timed median already is their time
// in a stream (experiments/h200-execute: hetsim's own runner): with the H200 database 22.0% ->
// 5.1%, every row of 2.7B within 6%. The ceilings hold those lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "sim/config/cluster_config.h"
#include "sim/platform/cluster.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/replay.h"
#include "tests/validation/csv_table.h"

namespace {

namespace fs = std::filesystem;
using namespace hetsim;

constexpr double kCeilingPct = 6.5;           // measured 5.1% with the H200 database
constexpr double kDatasheetCeilingPct = 6.5;  // measured 5.4% with the datasheet model

struct Row {
  std::string model;
  int hidden = 0, layers = 0, heads = 0, ffn = 0, vocab = 0, sequence = 0, micro_batch = 0;
  int accum = 0;
  double measured_s = 0, calibrated_s = 0, datasheet_s = 0;
};

std::vector<Row> read_rows(const fs::path& file) {
  std::vector<Row> rows;
  for (const std::vector<std::string>& f : validation::read_csv_rows(file, 10, false)) {
    Row r;
    r.model = f[0];
    r.hidden = std::stoi(f[1]);
    r.layers = std::stoi(f[2]);
    r.heads = std::stoi(f[3]);
    r.ffn = std::stoi(f[4]);
    r.vocab = std::stoi(f[5]);
    r.sequence = std::stoi(f[6]);
    r.micro_batch = std::stoi(f[7]);
    r.accum = std::stoi(f[8]);
    r.measured_s = std::stod(f[9]);
    rows.push_back(r);
  }
  return rows;
}

double replay_s(const Row& r, const platform::Cluster& cluster, const workload::CostModel& cost,
                const std::string& framework) {
  std::ostringstream m;
  m << "name: " << r.model << "\nfamily: gpt\nlayers: " << r.layers << "\nhidden: " << r.hidden
    << "\nheads: " << r.heads << "\nffn_hidden: " << r.ffn << "\nvocab: " << r.vocab
    << "\nsequence: " << r.sequence
    << "\nactivation: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\n"
       "causal: true\nbias: true\n";
  const workload::ModelConfig model = workload::load_model_yaml_text(m.str(), r.model + ".yaml");
  std::ostringstream p;
  p << "devices: \"0\"\nmicro_batch_size: " << r.micro_batch
    << "\nglobal_batch_size: " << r.micro_batch * r.accum << "\nsequence_length: " << r.sequence
    << "\nprecision: bf16\nattention: flash\nframework: " << framework << "\n";
  const workload::Plan plan = workload::load_plan_text(p.str(), "plan.yaml", model, cluster);
  const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
  return workload::replay(job).iteration.seconds();
}

TEST(TrainingValidation, H200SingleGpuPyTorchIterations) {
  const fs::path data =
      fs::path(HETSIM_SOURCE_DIR) / "tests/data/ground_truth/h200_torch/h200_torch_iterations.csv";
  std::vector<Row> rows = read_rows(data);
  ASSERT_EQ(rows.size(), 24u);
  // For scripts/fit_h200_torch.py: the framework (a built-in name or a file) from the
  // environment; without it, the built-in pytorch-ddp.
  const char* env = std::getenv("HETSIM_H200_FRAMEWORK");
  const std::string framework = env && *env ? env : "pytorch-ddp";
  config::ClusterOptions o;
  o.nodes = 1;
  o.sets = {"node_types[0].gpu=h200-sxm-141gb"};
  const platform::Cluster cluster(config::load_cluster("dgx-h100", o));
  const workload::DatasheetCostModel datasheet;
  const calibrate::MeasuredCostModel measured(
      calibrate::read_database(std::string(HETSIM_SOURCE_DIR) +
                               "/calibrate/data/h200-sxm-141gb.h5"),
      datasheet);
  double cal = 0, ds = 0;
  std::ostringstream os;
  char buf[200];
  os << "\n=== One H200, eager PyTorch (bf16 autocast, fused AdamW), 4 micro-batches ===\n";
  std::snprintf(buf, sizeof buf, "%-9s %5s %3s %10s %12s %7s %12s %7s\n", "model", "seq", "mb",
                "measured", "calibrated", "err%", "datasheet", "err%");
  os << buf;
  for (Row& r : rows) {
    r.calibrated_s = replay_s(r, cluster, measured, framework);
    r.datasheet_s = replay_s(r, cluster, datasheet, framework);
    const double ec = (r.calibrated_s - r.measured_s) / r.measured_s * 100;
    const double ed = (r.datasheet_s - r.measured_s) / r.measured_s * 100;
    cal += std::abs(ec);
    ds += std::abs(ed);
    std::snprintf(buf, sizeof buf, "%-9s %5d %3d %9.3fs %11.3fs %+7.1f %11.3fs %+7.1f\n",
                  r.model.c_str(), r.sequence, r.micro_batch, r.measured_s, r.calibrated_s, ec,
                  r.datasheet_s, ed);
    os << buf;
  }
  if (std::getenv("HETSIM_H200_FIT")) {
    // One line per row (CSV order) for scripts/fit_h200_torch.py.
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("fit_row %zu %.6f %.6f %.6f\n", i, rows[i].measured_s, rows[i].calibrated_s,
                  rows[i].datasheet_s);
  }
  cal /= static_cast<double>(rows.size());
  ds /= static_cast<double>(rows.size());
  std::snprintf(buf, sizeof buf,
                "MAPE over %zu rows: with the H200 calibration %.1f%%, datasheet model %.1f%%\n",
                rows.size(), cal, ds);
  os << buf;
  std::cout << os.str();
  EXPECT_LT(cal, kCeilingPct);
  EXPECT_LT(ds, kDatasheetCeilingPct);
}

}  // namespace
