// Validation of whole training iterations against measured data.
//
// (a) Korthikanti et al. (MLSys'23): the 8 published iteration times (22B / 175B / 530B / 1T,
//     full recompute and sequence parallel + selective recompute) on Selene (DGX A100 80GB),
//     plans in experiments/korthikanti/. Prints predicted vs measured time and the signed error,
//     asserts the mean absolute percentage error (MAPE) < 10%; prints the memory per GPU against
//     the paper's Fig. 1 (params + optimizer asserted within 25%, activations only printed).
// (a') Megatron-LM v1.0 on one DGX-2H (V100, NVSwitch): ADLR's two published iteration times
//     whose models the Megatron-LM paper states; asserts each within 10%.
// (b) vTrain (tests/data/ground_truth/vtrain/a100_single_node_iterations.csv): 1,440
//     measured Megatron-DeepSpeed iterations on one DGX A100 node (GPT, fp16, full recompute,
//     1F1B, no gradient bucketing). Prints the MAPE overall and per (tp, dp, pp) and the Spearman
//     rank correlation within each model configuration (hidden, layers, heads, sequence) across
//     its plans; asserts the overall MAPE < 10%. The data ships with the repository: a missing
//     file fails the test.
#include <gtest/gtest.h>

#include "tests/validation/rank_correlation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
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
#include "tests/validation/validation_env.h"

namespace {

namespace fs = std::filesystem;
using namespace hetsim;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kKorthikantiLimitPct = 10.0;
constexpr double kParamsOptimizerLimitPct = 25.0;
constexpr double kVtrainLimitPct = 10.0;
// Every kVtrainStride-th row of the vTrain CSV is simulated (1 = all 1,440 rows).
constexpr int kVtrainStride = 1;

double pct_error(double predicted, double measured) {
  return (predicted - measured) / measured * 100.0;
}

using validation::spearman;

struct Simulated {
  report::TrainingReport report;
  std::vector<workload::DeviceMemory> memory;
};

Simulated simulate(const workload::ModelConfig& model, const platform::Cluster& cluster,
                   const workload::Plan& plan, const workload::CostModel& cost) {
  const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
  Simulated s;
  s.memory = workload::memory_per_copy(job);
  const workload::ReplayResult result = workload::replay(job);
  s.report = report::make_training_report(job, result, s.memory);
  return s;
}

// --- (a) Korthikanti et al. ------------------------------------------------------------------

struct KorthikantiCase {
  const char* model;  // korthikanti-<model>
  int nodes;
  double full_s, selective_s;        // measured iteration times
  double params_optimizer_gib;       // Fig. 1: params + optimizer per GPU
  double activations_selective_gib;  // Fig. 1: activations, sequence parallel + selective
};

constexpr KorthikantiCase kKorthikanti[] = {
    {"22b", 1, 1.42, 1.10, 45.56, 9.56},
    {"175b", 8, 18.13, 13.75, 45.56, 12.35},
    {"530b", 35, 49.05, 37.83, 31.64, 23.08},
    {"1t", 64, 94.42, 71.49, 32.96, 26.56},
};

TEST(TrainingValidation, Korthikanti) {
  const auto t0 = std::chrono::steady_clock::now();
  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  std::ostringstream os;
  char buf[256];
  os << "\n=== Korthikanti et al. (MLSys'23), Selene DGX A100: iteration time ===\n";
  std::snprintf(buf, sizeof buf, "%-6s %-10s %5s %12s %12s %9s\n", "model", "recompute", "gpus",
                "measured_s", "predicted_s", "error%");
  os << buf;
  double abs_sum = 0;
  int n = 0;
  struct MemRow {
    std::string model;
    double params_optimizer = 0, activations = 0;
  };
  std::vector<MemRow> mem;
  for (const KorthikantiCase& c : kKorthikanti) {
    const workload::ModelConfig model = workload::load_model(std::string("korthikanti-") + c.model);
    config::ClusterOptions copt;
    copt.nodes = c.nodes;
    const platform::Cluster cluster(config::load_cluster("dgx-a100", copt));
    for (const bool selective : {false, true}) {
      const std::string file = std::string(HETSIM_SOURCE_DIR "/experiments/korthikanti/") +
                               c.model + (selective ? "-selective.yaml" : "-full.yaml");
      const workload::Plan plan = workload::load_plan(file, model, cluster);
      const Simulated s = simulate(model, cluster, plan, cost);
      const double measured = selective ? c.selective_s : c.full_s;
      const double err = pct_error(s.report.iteration_time_s, measured);
      abs_sum += std::abs(err);
      ++n;
      std::snprintf(buf, sizeof buf, "%-6s %-10s %5zu %12.2f %12.2f %+9.1f\n", c.model,
                    selective ? "selective" : "full", s.report.gpus, measured,
                    s.report.iteration_time_s, err);
      os << buf;
      if (selective) {
        // The first stage's first device: it holds the embeddings and the most activations.
        const workload::DeviceMemory& m = s.memory.front();
        mem.push_back(
            {c.model, (m.weights + m.gradients + m.optimizer) / kGiB, m.activations / kGiB});
      }
    }
  }
  const double mape = abs_sum / n;
  std::snprintf(buf, sizeof buf, "Korthikanti: MAPE over %d cases = %.2f%%\n", n, mape);
  os << buf;

  os << "\n=== Korthikanti Fig. 1: memory per GPU (GiB), first stage's first device ===\n";
  std::snprintf(buf, sizeof buf, "%-6s %14s %14s %8s %14s %14s %8s\n", "model", "params+opt",
                "predicted", "error%", "act(sel+SP)", "predicted", "error%");
  os << buf;
  for (size_t i = 0; i < mem.size(); ++i) {
    const KorthikantiCase& c = kKorthikanti[i];
    std::snprintf(buf, sizeof buf, "%-6s %14.2f %14.2f %+8.1f %14.2f %14.2f %+8.1f\n", c.model,
                  c.params_optimizer_gib, mem[i].params_optimizer,
                  pct_error(mem[i].params_optimizer, c.params_optimizer_gib),
                  c.activations_selective_gib, mem[i].activations,
                  pct_error(mem[i].activations, c.activations_selective_gib));
    os << buf;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::snprintf(buf, sizeof buf, "(simulated in %.2f s)\n", wall);
  os << buf;
  std::cout << os.str() << std::flush;

  EXPECT_LT(mape, kKorthikantiLimitPct);
  for (size_t i = 0; i < mem.size(); ++i) {
    EXPECT_LT(std::abs(pct_error(mem[i].params_optimizer, kKorthikanti[i].params_optimizer_gib)),
              kParamsOptimizerLimitPct)
        << kKorthikanti[i].model << ": params + optimizer";
  }
}

// --- (a') Megatron-LM v1.0 on a DGX-2H V100 ------------------------------------------------
// NVIDIA ADLR's weak-scaling table ("MegatronLM's Supercharged V1.0", nv-adlr.github.io/
// MegatronLMV1, Table 1): batch 8 of 1024 tokens, fp16, activation checkpointing, on one
// DGX-2H. The models are the paper's (Shoeybi et al. 2019, Table 1); of the table's four rows
// only these two give a model whose shape the paper states. A set from another GPU generation
// and another year, held out: nothing was fitted on it. It judges hetsim's V100 tensor-core
// kernels and its tensor-parallel all-reduces over NVSwitch.
struct MegatronV1Case {
  const char* model;  // experiments/megatron-v1/<model>.yaml
  const char* plan;   // experiments/megatron-v1/<plan>.yaml
  double measured_s;  // the table's iteration time
};
constexpr MegatronV1Case kMegatronV1[] = {
    {"gpt2-1.2b", "tp1", 1.288},
    {"gpt2-4.2b", "tp4", 1.357},
};
constexpr double kMegatronV1LimitPct = 10.0;

TEST(TrainingValidation, MegatronV1DgxV100) {
  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  const std::string dir = HETSIM_SOURCE_DIR "/experiments/megatron-v1/";
  const platform::Cluster cluster(config::load_cluster(dir + "dgx2h.yaml", {}));
  std::printf("\n=== Megatron-LM v1.0, one DGX-2H (V100): iteration time ===\n");
  std::printf("%-10s %5s %12s %12s %9s\n", "model", "gpus", "measured_s", "predicted_s", "error%");
  double abs_sum = 0;
  for (const MegatronV1Case& c : kMegatronV1) {
    const workload::ModelConfig model = workload::load_model(dir + c.model + ".yaml");
    const workload::Plan plan = workload::load_plan(dir + c.plan + ".yaml", model, cluster);
    const Simulated s = simulate(model, cluster, plan, cost);
    const double err = pct_error(s.report.iteration_time_s, c.measured_s);
    abs_sum += std::abs(err);
    std::printf("%-10s %5zu %12.3f %12.3f %+9.1f\n", c.model, s.report.gpus, c.measured_s,
                s.report.iteration_time_s, err);
    EXPECT_LT(std::abs(err), kMegatronV1LimitPct) << c.model;
  }
  const double mean = abs_sum / std::size(kMegatronV1);
  std::printf("Megatron-LM v1.0 (DGX-2H V100): mean |error| over %zu cases = %.2f%%\n",
              std::size(kMegatronV1), mean);
}

// --- (b) vTrain single-node iterations --------------------------------------------------------

struct VtrainRow {
  int gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, sequence = 0,
      tp = 0, dp = 0, pp = 0;
  double measured_s = 0;
  double predicted_s = 0;
  double error_pct() const { return pct_error(predicted_s, measured_s); }
};

fs::path vtrain_csv() {
  return fs::path(HETSIM_SOURCE_DIR) /
         "tests/data/ground_truth/vtrain/a100_single_node_iterations.csv";
}

std::vector<VtrainRow> read_vtrain(const fs::path& file) {
  std::vector<VtrainRow> rows;
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) v.push_back(std::stod(cell));
    if (v.size() < 11) continue;
    VtrainRow r;
    r.gpus = static_cast<int>(v[0]);
    r.global_batch = static_cast<int>(v[1]);
    r.micro_batch = static_cast<int>(v[2]);
    r.hidden = static_cast<int>(v[3]);
    r.heads = static_cast<int>(v[4]);
    r.layers = static_cast<int>(v[5]);
    r.sequence = static_cast<int>(v[6]);
    r.tp = static_cast<int>(v[7]);
    r.dp = static_cast<int>(v[8]);
    r.pp = static_cast<int>(v[9]);
    r.measured_s = v[10] * 1e-3;
    rows.push_back(r);
  }
  return rows;
}

// A GPT decoder as vTrain ran it (Megatron-DeepSpeed, GPT-2 tokenizer).
workload::ModelConfig vtrain_model(const VtrainRow& r) {
  std::ostringstream y;
  y << "name: vtrain-h" << r.hidden << "-l" << r.layers << "\n"
    << "family: gpt\n"
    << "layers: " << r.layers << "\n"
    << "hidden: " << r.hidden << "\n"
    << "heads: " << r.heads << "\n"
    << "kv_heads: " << r.heads << "\n"
    << "head_dim: " << r.hidden / r.heads << "\n"
    << "ffn_hidden: " << 4 * r.hidden << "\n"
    << "vocab: 50257\n"
    << "sequence: " << r.sequence << "\n"
    << "activation: gelu\nnorm: layernorm\nposition: learned\n"
    << "tied_embeddings: true\ncausal: true\nbias: true\n";
  return workload::load_model_yaml_text(y.str(), "vtrain-model.yaml");
}

std::string vtrain_plan(const VtrainRow& r) {
  std::ostringstream y;
  y << "tensor_parallel: " << r.tp << "\n"
    << "pipeline_parallel: " << r.pp << "\n"
    << "data_parallel: " << r.dp << "\n"
    << "micro_batch_size: " << r.micro_batch << "\n"
    << "global_batch_size: " << r.global_batch << "\n"
    << "sequence_length: " << r.sequence << "\n"
    << "devices: \"0-" << r.gpus - 1 << "\"\n"
    << "recompute: full\nprecision: fp16\nschedule: 1f1b\nattention: standard\n"
    << "bucket_size: 100GB\n";  // vTrain: no gradient bucketing
  return y.str();
}

double mape(const std::vector<const VtrainRow*>& rows) {
  double s = 0;
  for (const VtrainRow* r : rows) s += std::abs(r->error_pct());
  return rows.empty() ? NAN : s / static_cast<double>(rows.size());
}

TEST(TrainingValidation, VtrainSingleNode) {
  const fs::path file = vtrain_csv();
  ASSERT_TRUE(fs::exists(file)) << "vTrain data not found at " << file;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<VtrainRow> all = read_vtrain(file);
  ASSERT_FALSE(all.empty()) << file;
  std::vector<VtrainRow> rows;
  for (size_t i = 0; i < all.size(); i += kVtrainStride) rows.push_back(all[i]);

  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  config::ClusterOptions copt;
  copt.nodes = 1;
  const platform::Cluster cluster(config::load_cluster("dgx-a100", copt));
  for (VtrainRow& r : rows) {
    const workload::ModelConfig model = vtrain_model(r);
    const workload::Plan plan =
        workload::load_plan_text(vtrain_plan(r), "vtrain-plan.yaml", model, cluster);
    r.predicted_s = simulate(model, cluster, plan, cost).report.iteration_time_s;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::ostringstream os;
  char buf[256];
  std::vector<const VtrainRow*> every;
  for (const VtrainRow& r : rows) every.push_back(&r);
  const double overall = mape(every);

  os << "\n=== vTrain A100 single-node iterations: MAPE by (tp, dp, pp) ===\n";
  std::map<std::tuple<int, int, int>, std::vector<const VtrainRow*>> by_plan;
  for (const VtrainRow& r : rows) by_plan[{r.tp, r.dp, r.pp}].push_back(&r);
  std::snprintf(buf, sizeof buf, "%4s %4s %4s %6s %8s %10s\n", "tp", "dp", "pp", "rows", "MAPE%",
                "mean err%");
  os << buf;
  for (const auto& [key, v] : by_plan) {
    double signed_sum = 0;
    for (const VtrainRow* r : v) signed_sum += r->error_pct();
    std::snprintf(buf, sizeof buf, "%4d %4d %4d %6zu %8.2f %+10.2f\n", std::get<0>(key),
                  std::get<1>(key), std::get<2>(key), v.size(), mape(v),
                  signed_sum / static_cast<double>(v.size()));
    os << buf;
  }

  os << "\n=== vTrain: Spearman rank correlation within each model config across its plans ===\n";
  std::map<std::tuple<int, int, int, int>, std::vector<const VtrainRow*>> by_model;
  for (const VtrainRow& r : rows) by_model[{r.hidden, r.layers, r.heads, r.sequence}].push_back(&r);
  std::snprintf(buf, sizeof buf, "%7s %7s %6s %6s %6s %8s %9s\n", "hidden", "layers", "heads",
                "seq", "rows", "MAPE%", "spearman");
  os << buf;
  double rho_sum = 0;
  int rho_n = 0;
  for (const auto& [key, v] : by_model) {
    std::vector<double> p, m;
    for (const VtrainRow* r : v) {
      p.push_back(r->predicted_s);
      m.push_back(r->measured_s);
    }
    const double rho = spearman(p, m);
    if (!std::isnan(rho)) {
      rho_sum += rho;
      ++rho_n;
    }
    std::snprintf(buf, sizeof buf, "%7d %7d %6d %6d %6zu %8.2f %9.4f\n", std::get<0>(key),
                  std::get<1>(key), std::get<2>(key), std::get<3>(key), v.size(), mape(v), rho);
    os << buf;
  }
  std::vector<double> p, m;
  for (const VtrainRow& r : rows) {
    p.push_back(r.predicted_s);
    m.push_back(r.measured_s);
  }
  std::snprintf(buf, sizeof buf,
                "vTrain: MAPE over %zu of %zu rows (stride %d) = %.2f%%; mean Spearman rho "
                "within a model config = %.4f (%d configs); over all rows = %.4f; simulated in "
                "%.2f s\n",
                rows.size(), all.size(), kVtrainStride, overall, rho_n == 0 ? NAN : rho_sum / rho_n,
                rho_n, spearman(p, m), wall);
  os << buf;
  // The halves calibrate/datasheet_efficiency.yaml was fitted on (even-indexed rows) and held
  // out from (odd), at stride 1.
  std::vector<const VtrainRow*> even, odd;
  for (size_t i = 0; i < rows.size(); ++i) (i % 2 == 0 ? even : odd).push_back(&rows[i]);
  std::snprintf(buf, sizeof buf,
                "  fitted half (even rows, %zu): %.2f%%; held-out half (odd rows, %zu): %.2f%%\n",
                even.size(), mape(even), odd.size(), mape(odd));
  os << buf;
  std::cout << os.str() << std::flush;

  EXPECT_LT(overall, kVtrainLimitPct);
}

}  // namespace
