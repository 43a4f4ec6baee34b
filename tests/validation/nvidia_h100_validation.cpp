// Validation against NVIDIA's published pre-training throughput on DGX H100 (FP8, Megatron-Core
// with Transformer Engine, 8 to 1024 GPUs): tests/data/ground_truth/nvidia_h100/ (sources and the
// settings each row implies in its README). Each row is replayed as NVIDIA ran it (the printed
// degrees; sequence parallelism and tensor-parallel communication overlap where TP > 1, the
// distributed optimizer, no recomputation) with the datasheet cost model, and its tokens per
// second per GPU compared. Prints every row with the time split; asserts the mean absolute error
// and each row's against ceilings set a little above what hetsim reaches (below), so that a
// change that moves them shows.
#include <gtest/gtest.h>

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

// 2026-12-04: 5.8% mean over the 10 rows with tp_comm_overlap (9.4% without it), every row
// within 23%: the FSDP row -22.6% (its parameter gathers and gradient reduce-scatters, once per
// micro-batch, exposed for 2.2 s), the others from -5.7% to +8.2%. Before Transformer Engine's
// fp8 cast kernels were counted: 8.6% (8.4% without the overlap), the others up to +13%.
// 2026-12-04 (later), with ZeRO-3's gathers prefetched a layer ahead and the embedding's and
// head's own gathers and reduce-scatters counted: 4.3% mean (7.9% without the overlap), the
// FSDP row -7.9%, every row within 8.2%; with sequence parallelism's backward re-gather of each
// column-parallel input: 4.5% (8.5% without the overlap), every row within 7.9%.
constexpr double kMeanCeilingPct = 5.0;
constexpr double kRowCeilingPct = 10.0;

struct Row {
  std::string label, source, model;
  int gpus = 0, global_batch = 0, micro_batch = 0, sequence = 0, tp = 1, pp = 1, cp = 1, vp = 1;
  int zero = 1;
  double measured = 0;  // tokens / s / GPU
};

std::vector<Row> read_rows(const fs::path& file) {
  std::vector<Row> rows;
  for (const std::vector<std::string>& f : validation::read_csv_rows(file, 13)) {
    Row r;
    r.label = f[0], r.source = f[1], r.model = f[2];
    r.gpus = std::stoi(f[3]), r.global_batch = std::stoi(f[4]), r.micro_batch = std::stoi(f[5]);
    r.sequence = std::stoi(f[6]), r.tp = std::stoi(f[7]), r.pp = std::stoi(f[8]);
    r.cp = std::stoi(f[9]), r.vp = std::stoi(f[10]), r.zero = std::stoi(f[11]);
    r.measured = std::stod(f[12]);
    rows.push_back(r);
  }
  return rows;
}

std::string plan_text(const Row& r, bool overlap) {
  std::ostringstream p;
  p << "tensor_parallel: " << r.tp << "\npipeline_parallel: " << r.pp
    << "\ndata_parallel: " << r.gpus / (r.tp * r.pp * r.cp)
    << "\nmicro_batch_size: " << r.micro_batch << "\nglobal_batch_size: " << r.global_batch
    << "\nsequence_length: " << r.sequence << "\nzero_stage: " << r.zero
    << "\nprecision: fp8\nrecompute: none\n";
  if (r.cp > 1) p << "context_parallel: " << r.cp << "\n";
  if (r.vp > 1) p << "schedule: interleaved\ninterleave: " << r.vp << "\n";
  if (r.tp > 1) p << "sequence_parallel: true\n" << (overlap ? "tp_comm_overlap: true\n" : "");
  return p.str();
}

TEST(TrainingValidation, NvidiaDgxH100Fp8Pretraining) {
  const std::vector<Row> rows = read_rows(fs::path(HETSIM_SOURCE_DIR) /
                                          "tests/data/ground_truth/nvidia_h100/pretraining.csv");
  ASSERT_EQ(rows.size(), 10u);
  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  double sum[2] = {0, 0};
  std::printf("\n=== NVIDIA DGX H100, FP8 (NeMo 24.09, Megatron-Bridge 25.11) ===\n");
  std::printf("%-20s %5s %10s %10s %8s %10s %8s  %s\n", "row", "gpus", "measured", "hetsim", "err%",
              "no ovl", "err%", "time split (hetsim, with overlap)");
  for (const Row& r : rows) {
    config::ClusterOptions o;
    o.nodes = r.gpus / 8;
    const platform::Cluster cluster(config::load_cluster("dgx-h100", o));
    const workload::ModelConfig model = workload::load_model(r.model);
    double tps[2] = {0, 0};
    std::string split;
    for (int overlap = 1; overlap >= 0; --overlap) {
      const workload::Plan plan =
          workload::load_plan_text(plan_text(r, overlap == 1), r.label + ".yaml", model, cluster);
      const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
      const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(job);
      const workload::ReplayResult result = workload::replay(job);
      const report::TrainingReport rep = report::make_training_report(job, result, memory);
      tps[overlap] = double(r.global_batch) * r.sequence / result.iteration.seconds() / r.gpus;
      if (overlap == 1) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "compute %.2f s, exposed tensor %.2f s, data %.2f s, bubble %.2f s",
                      rep.compute_s, rep.tp_exposed_s, rep.dp_exposed_s, rep.bubble_s);
        split = buf;
        for (const workload::DeviceMemory& m : memory)
          EXPECT_FALSE(m.oom()) << r.label << ": fits, as NVIDIA ran it";
      }
    }
    const double e1 = (tps[1] - r.measured) / r.measured * 100;
    const double e0 = (tps[0] - r.measured) / r.measured * 100;
    sum[1] += std::abs(e1), sum[0] += std::abs(e0);
    std::printf("%-20s %5d %10.0f %10.0f %+7.1f%% %10.0f %+7.1f%%  %s\n", r.label.c_str(), r.gpus,
                r.measured, tps[1], e1, tps[0], e0, split.c_str());
    EXPECT_LT(std::abs(e1), kRowCeilingPct) << r.label;
  }
  const double n = static_cast<double>(rows.size());
  std::printf("mean |error| over %zu rows: %.1f%% with tp_comm_overlap, %.1f%% without\n",
              rows.size(), sum[1] / n, sum[0] / n);
  EXPECT_LT(sum[1] / n, kMeanCeilingPct);
}

}  // namespace
