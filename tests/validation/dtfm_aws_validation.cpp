// Validation against DT-FM's measured Megatron-LM runs of GPT-3 XL on AWS V100 instances
// (tests/data/ground_truth/dtfm_gpt3_xl/, Yuan et al., NeurIPS'22): a set from clusters unlike
// the DGX ones the other sets come from, and on which no constant of hetsim was fitted. Four
// tables, each replayed on hetsim's built-in AWS instances:
//   - one p3.16xlarge (8 V100 16GB, NVLink hybrid cube mesh), global batch 64;
//   - six p3.16xlarge over their 25 Gb/s ENA (NCCL's socket transport), global batch 252;
//   - 48 p3.2xlarge (one V100 each, "up to 10 Gb/s") with tensor parallelism across instances;
//   - the same under `tc netem` delay and rate limits on every instance.
// Every Megatron row the authors ran is replayed: tensor, pipeline and data degrees, micro-batch,
// fp32 or fp16, full or no recomputation, SGD, Megatron-LM of 2022 (`framework:
// megatron-lm-2021`, gradients reduced after the backward pass). Prints predicted against
// measured per row and, per table, the median and mean absolute error, Spearman's rank
// correlation and the worst row; out-of-memory rows are listed with hetsim's verdict.
//
// Setting rows aside (written before hetsim's errors on them were looked at, issue 36): the rows
// the authors themselves marked "??" (re-run twice, times far from their neighbours). The
// figures are printed with them and without them; the bounds hold on the rows without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
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
#include "tests/validation/rank_correlation.h"
#include "tests/validation/validation_env.h"

namespace {

namespace fs = std::filesystem;
using namespace hetsim;

struct Row {
  std::string table, network, flag, precision, recompute, status;
  int global_batch = 0, micro_batch = 0, pp = 1, tp = 1, dp = 1, gpus = 0;
  double measured_s = 0, predicted_s = 0, peak_gib = 0;
  bool oom = false;  // hetsim's verdict
  bool ok() const { return status == "ok"; }
  bool set_aside() const { return flag.find("??") != std::string::npos; }
  std::string label() const {
    char b[128];
    std::snprintf(b, sizeof b, "tp%d pp%d dp%d mb%d %s %s", tp, pp, dp, micro_batch,
                  precision.c_str(), recompute.c_str());
    return b;
  }
};

std::vector<Row> read_megatron_rows(const fs::path& file) {
  std::vector<Row> rows;
  for (const std::vector<std::string>& f : validation::read_csv_rows(file, 21, false)) {
    if (f[1].rfind("Megatron-LM", 0) != 0) continue;
    Row r;
    r.table = f[0];
    r.gpus = std::stoi(f[4]);
    r.network = f[5];
    r.global_batch = std::stoi(f[11]);
    r.micro_batch = std::stoi(f[12]);
    r.pp = std::stoi(f[13]);
    r.tp = std::stoi(f[14]);
    r.dp = std::stoi(f[15]);
    r.precision = f[17];
    r.recompute = f[18];
    r.status = f[20];
    if (r.ok()) r.measured_s = std::stod(f[19]);
    r.flag = f.size() > 21 ? f[21] : "";
    rows.push_back(r);
  }
  return rows;
}

// GPT-3 XL's shape as the authors' fork ran it (README of the data): 24 layers, hidden 2048, 16
// heads, sequence 2048, BERT's cased WordPiece vocabulary (28,996), learned positions. The fork's
// script (dist_megatron_train_qqp.py) builds Megatron-LM's Classification model for QQP: a
// bidirectional encoder (padding mask, not causal) whose last stage ends in a pooler and a
// two-class classifier, not in logits over the vocabulary; no output layer shares the word
// embedding, so no embedding gradients cross the pipeline.
workload::ModelConfig dtfm_model() {
  return workload::load_model_yaml_text(
      "name: gpt3-xl-dtfm\nfamily: bert\nlayers: 24\nhidden: 2048\nheads: 16\nffn_hidden: 8192\n"
      "vocab: 28996\nsequence: 2048\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: false\nhead: classification\nclasses: 2\ncausal: false\nbias: true\n",
      "gpt3-xl-dtfm.yaml");
}

// The framework: megatron-lm-2021 (the fork's era), or the file HETSIM_FRAMEWORK_MEGATRON_LM_2021
// names (tests/validation/validation_env.h).
std::string dtfm_framework() { return validation::framework("megatron-lm-2021"); }

// The plan as the fork's launch scripts ran it (DS3Lab/Decentralized_FM_alpha, scripts/*megatron*:
// `--DDP-impl local --no-bias-dropout-fusion`, `--optimizer sgd`, `--fp16` where the row says
// so, `--checkpoint-activations` where it says full): the bias, the dropout and the residual add
// after each attention and MLP block as separate kernels (bias_dropout_fusion: false).
std::string dtfm_plan(const Row& r) {
  std::ostringstream y;
  y << "tensor_parallel: " << r.tp << "\npipeline_parallel: " << r.pp << "\ndata_parallel: " << r.dp
    << "\nmicro_batch_size: " << r.micro_batch << "\nglobal_batch_size: " << r.global_batch
    << "\nsequence_length: 2048\nprecision: " << r.precision << "\nrecompute: " << r.recompute
    << "\nattention: standard\nsequence_parallel: false\nbias_dropout_fusion: false\n"
    << "optimizer: sgd\nmain_grads: same\n"
    << "framework: " << dtfm_framework() << "\n";
  return y.str();
}

// The cluster each table ran on, as a user would describe it with hetsim's AWS instances.
std::string cluster_for(const Row& r) {
  if (r.table.find("(1 node)") != std::string::npos) return "aws-p3.16xlarge";
  if (r.table.find("(6 nodes)") != std::string::npos) return "aws-p3.16xlarge";
  return "aws-p3.2xlarge";
}

config::ClusterOptions options_for(const Row& r) {
  config::ClusterOptions o;
  if (r.table.find("(1 node)") != std::string::npos) o.nodes = 1;
  if (r.table.find("(6 nodes)") != std::string::npos) o.nodes = 6;
  if (r.table.find("48 x p3.2xlarge") != std::string::npos) {
    o.nodes = 48;
    // "tc delay 10 ms, 1 Gbps": netem's delay and rate on every instance's egress.
    double delay_ms = 0, gbps = 0;
    if (std::sscanf(r.network.c_str(), "tc delay %lf ms, %lf Gbps", &delay_ms, &gbps) == 2) {
      char b[96];
      std::snprintf(b, sizeof b, "shaping={delay: %gms, rate: %gGbps}", delay_ms, gbps);
      o.sets.push_back(b);
    }
  }
  return o;
}

std::string table_key(const Row& r) {
  if (r.table.find("(1 node)") != std::string::npos) return "1 x p3.16xlarge";
  if (r.table.find("(6 nodes)") != std::string::npos) return "6 x p3.16xlarge, 25 Gb/s";
  if (r.network.rfind("tc", 0) == 0) return "48 x p3.2xlarge under tc";
  return "48 x p3.2xlarge";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Stats {
  int n = 0;
  double median_pct = NAN, mean_pct = NAN, spearman = NAN, worst_pct = 0;
  std::string worst;
};

Stats stats(const std::vector<const Row*>& rows) {
  Stats s;
  std::vector<double> err, pred, meas;
  for (const Row* r : rows) {
    const double e = std::abs(r->predicted_s - r->measured_s) / r->measured_s * 100;
    err.push_back(e);
    pred.push_back(r->predicted_s);
    meas.push_back(r->measured_s);
    if (e > s.worst_pct) s.worst_pct = e, s.worst = r->label();
  }
  s.n = static_cast<int>(rows.size());
  if (rows.empty()) return s;
  s.median_pct = median(err);
  double sum = 0;
  for (double e : err) sum += e;
  s.mean_pct = sum / static_cast<double>(err.size());
  if (rows.size() > 2) s.spearman = validation::spearman(pred, meas);
  return s;
}

// Issue 36 asks for a median absolute error of 10% or better in each table, on the rows not set
// aside. Reached on 2026-12-05 (nothing fitted on this set; the AWS instances, NCCL's socket
// transport and tc's shaping as topologies/aws-*.yaml and link_classes.yaml describe them, SGD):
// one p3.16xlarge 22.8%, six 33.2%, 48 p3.2xlarge 9.6%, the same under tc 14.1% (the issue's
// figures before: 23%, 19%, 41%, 54%, on a user's own cluster file with the built-in `ethernet`
// class and no way to state tc's delay). The ceilings hold those figures so that fidelity work
// can only move them down; the target is printed beside them. Then, with Megatron-LM 2021-22's
// pipeline transfers as its code runs them (frameworks/megatron-lm-2021.yaml: blocking, and
// gathered over the tensor-parallel ranks on arrival): 22.6%, 31.6%, 9.0%, 13.0%.
// 2026-12-06: the model as the fork built it (Megatron-LM's Classification: a pooler and two
// classes where the figures above had logits over the vocabulary) and GEMMs on the V100's CUDA
// cores with their own reduction-length term (DatasheetCostModel::simt_k_half): 24.5%, 34.7%,
// 10.7%, 13.6%. Per precision, the fp32 rows of one p3.16xlarge went from a median of 15.5%
// (mean +16.9%: too slow) to 3.9% (+1.6%); the fp16 rows, whose tensor-parallel all-reduces on the
// instance's NVLink take longer than hetsim's model of them (docs/validation.md), from 23.6%
// (-31.6%) to 27.2% (-37.1%): the vocabulary's logits had been hiding part of that gap. The
// ceilings moved with them, and the fp32 rows' median is held below.
// 2026-12-06, the plan as the fork's scripts ran it (bias_dropout_fusion: false, dtfm_plan):
// 19.8%, 29.8%, 10.3%, 13.6%; more than the unfused kernels' bytes (about 0.2 ms a layer per
// micro-batch) because each is a kernel for the host to issue, and the tensor-parallel rows'
// layers are host-bound (tp8 mb1 fp16 full: 6.47 s to 7.70 s, measured 11.26 s).
// 2026-12-06 (later), Megatron-LM's softmax where its fused kernel does not run (megatron-lm-2021's
// masked_softmax: fp32 rows, and fp16 rows whose micro-batch x local heads is no multiple of 4,
// tp8 at micro-batches 1 and 3): 19.8%, 27.9%, 10.3%, 13.6%; tp8 mb1 fp16 full 7.70 s to 9.01 s.
constexpr double kTargetMedianPct = 10.0;
// The median absolute error of one p3.16xlarge's fp32 rows (held: 3.9% on 2026-12-06; 5.0% on
// 2026-12-06 later, when the fp32 rows' softmax became PyTorch's three kernels, as Megatron-LM runs
// it for fp32 scores: they were too slow before it, and what makes them so is elsewhere).
constexpr double kOneNodeFp32CeilingPct = 5.5;
// What hetsim's fastest plan costs against the measured fastest, in measured time (ceilings).
// 2026-12-05: one node +43.9% (hetsim picks tp2 pp4 mb2, measured 4.46 s against pp8 mb1's
// 3.10 s: the per-call tensor-parallel cost it misses, docs/validation.md); six nodes +7.1%.
// 2026-12-06: one node +0.0% (the pick is the measured fastest).
constexpr double kPickLoss1Node = 0.01, kPickLoss6Nodes = 0.08;
const std::map<std::string, double> kMedianCeilingPct = {{"1 x p3.16xlarge", 21.0},
                                                         {"6 x p3.16xlarge, 25 Gb/s", 29.0},
                                                         {"48 x p3.2xlarge", 11.0},
                                                         {"48 x p3.2xlarge under tc", 15.0}};

TEST(TrainingValidation, DtfmGpt3XlOnAws) {
  const fs::path file = fs::path(HETSIM_SOURCE_DIR) /
                        "tests/data/ground_truth/dtfm_gpt3_xl/gpt3_xl_v100_measured.csv";
  std::vector<Row> rows = read_megatron_rows(file);
  ASSERT_EQ(rows.size(), 90u);
  const workload::ModelConfig model = dtfm_model();
  const workload::DatasheetCostModel cost = validation::datasheet_cost();
  std::map<std::string, platform::Cluster> clusters;
  for (Row& r : rows) {
    const config::ClusterOptions o = options_for(r);
    std::string key = cluster_for(r) + "/" + std::to_string(*o.nodes);
    for (const std::string& s : o.sets) key += "/" + s;
    auto it = clusters.find(key);
    if (it == clusters.end())
      it = clusters.emplace(key, platform::Cluster(config::load_cluster(cluster_for(r), o))).first;
    const platform::Cluster& cluster = it->second;
    ASSERT_EQ(static_cast<int>(cluster.gpu_count()), r.gpus) << r.label();
    const workload::Plan plan = workload::load_plan_text(dtfm_plan(r), r.label(), model, cluster);
    const workload::TrainingJob job = workload::build_training_job(model, plan, cluster, cost);
    const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(job);
    const report::TrainingReport rep =
        report::make_training_report(job, workload::replay(job), memory);
    r.predicted_s = rep.iteration_time_s;
    r.oom = rep.oom;
    for (const workload::DeviceMemory& m : memory)
      r.peak_gib = std::max(r.peak_gib, m.peak / 1073741824.0);
  }

  std::printf(
      "\n=== DT-FM: Megatron-LM GPT-3 XL on AWS V100 (held out: nothing fitted on it) ===\n");
  std::printf("%-26s %-40s %9s %9s %8s %9s\n", "table", "row", "measured", "hetsim", "err%",
              "peak GiB");
  std::map<std::string, std::vector<const Row*>> all, kept;
  int oom_rows = 0, oom_agree = 0;
  for (const Row& r : rows) {
    const std::string t = table_key(r);
    if (!r.ok()) {
      ++oom_rows;
      oom_agree += r.oom ? 1 : 0;
      std::printf("%-26s %-40s %9s %9.2f %8s %7.1f%s\n", t.c_str(), r.label().c_str(),
                  r.status.c_str(), r.predicted_s, "", r.peak_gib, r.oom ? " OOM" : " fits");
      continue;
    }
    all[t].push_back(&r);
    if (!r.set_aside()) kept[t].push_back(&r);
    std::printf("%-26s %-40s %9.2f %9.2f %+7.1f%% %7.1f%s%s\n", t.c_str(), r.label().c_str(),
                r.measured_s, r.predicted_s, (r.predicted_s - r.measured_s) / r.measured_s * 100,
                r.peak_gib, r.oom ? " OOM" : "", r.set_aside() ? "  (set aside: ?\?)" : "");
  }
  std::printf("\n%-26s %5s %9s %9s %9s %10s   worst row\n", "table", "rows", "median%", "mean%",
              "Spearman", "worst%");
  for (const auto& [t, v] : all) {
    for (int pass = 0; pass < 2; ++pass) {
      const Stats s = stats(pass == 0 ? v : kept[t]);
      std::printf("%-26s %5d %8.1f%% %8.1f%% %9.3f %9.1f%%   %s%s\n", t.c_str(), s.n, s.median_pct,
                  s.mean_pct, s.spearman, s.worst_pct, s.worst.c_str(),
                  pass == 0 ? "  (all rows)" : "  (?\? rows set aside)");
    }
  }
  // Per precision (the rows not set aside): the fp32 rows run on the V100's CUDA cores, the fp16
  // rows on its tensor cores with fp16 all-reduces.
  std::map<std::string, Stats> by_precision;
  for (const auto& [t, v] : kept) {
    for (const char* precision : {"fp32", "fp16"}) {
      std::vector<const Row*> sub;
      for (const Row* r : v) {
        if (r->precision == precision) sub.push_back(r);
      }
      if (sub.empty()) continue;
      const Stats s = stats(sub);
      by_precision[t + " " + precision] = s;
      std::printf("%-26s %s: %d rows, median %.1f%%, mean %.1f%%\n", t.c_str(), precision, s.n,
                  s.median_pct, s.mean_pct);
    }
  }
  std::printf("out-of-memory rows: hetsim says OOM on %d of %d\n", oom_agree, oom_rows);
  // The question a user asks of a table: which plan is fastest. Where the measured fastest row
  // stands in hetsim's order (1: hetsim ranks it first too).
  std::map<std::string, int> best_rank;
  std::map<std::string, double> pick_loss;  // measured time of hetsim's pick / the fastest - 1
  for (const auto& [t, v] : kept) {
    const Row* fastest = *std::min_element(v.begin(), v.end(), [](const Row* a, const Row* b) {
      return a->measured_s < b->measured_s;
    });
    const Row* pick = *std::min_element(v.begin(), v.end(), [](const Row* a, const Row* b) {
      return a->predicted_s < b->predicted_s;
    });
    int rank = 1;
    for (const Row* r : v) rank += r->predicted_s < fastest->predicted_s;
    best_rank[t] = rank;
    pick_loss[t] = pick->measured_s / fastest->measured_s - 1;
    std::printf(
        "%-26s measured fastest: %s (%.2f s), hetsim ranks it %d of %zu; hetsim's pick %s "
        "measured %.2f s (%+.1f%%)\n",
        t.c_str(), fastest->label().c_str(), fastest->measured_s, rank, v.size(),
        pick->label().c_str(), pick->measured_s, pick_loss[t] * 100);
  }

  // The measured fastest plan's place in hetsim's order and what hetsim's own pick costs in
  // measured time, 2026-12-05 (held so they can only improve): one p3.16xlarge 5th of 35, six
  // 3rd of 30 (the 48-instance tables hold one plan each).
  // 2026-12-06, with the fork's classification model: one p3.16xlarge 1st of 35 (hetsim's pick is
  // the measured fastest), six 3rd of 30.
  EXPECT_LE(best_rank["1 x p3.16xlarge"], 1);
  EXPECT_LE(by_precision["1 x p3.16xlarge fp32"].median_pct, kOneNodeFp32CeilingPct);
  EXPECT_LE(best_rank["6 x p3.16xlarge, 25 Gb/s"], 3);
  EXPECT_LE(pick_loss["1 x p3.16xlarge"], kPickLoss1Node);
  EXPECT_LE(pick_loss["6 x p3.16xlarge, 25 Gb/s"], kPickLoss6Nodes);
  ASSERT_EQ(kept.size(), kMedianCeilingPct.size());
  for (const auto& [t, v] : kept) {
    const Stats s = stats(v);
    std::printf("%-26s median %.1f%%: %s the issue's %.0f%%\n", t.c_str(), s.median_pct,
                s.median_pct <= kTargetMedianPct ? "within" : "outside", kTargetMedianPct);
    EXPECT_LE(s.median_pct, kMedianCeilingPct.at(t)) << t;
  }
}

}  // namespace
