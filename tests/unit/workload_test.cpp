// Training replay oracles: FLOPs against the closed forms, a single GPU equals the sum of its
// kernels, pipeline bubbles, the gradient all-reduce exposed when nothing overlaps it, memory by
// Korthikanti's Table 2, determinism, impossible plans.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/training_report.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/job/pass_rules.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

platform::Cluster cluster(const std::string& name, int nodes) {
  config::ClusterOptions o;
  if (nodes > 0) o.nodes = nodes;
  return platform::Cluster(config::load_cluster(name, o));
}

ModelConfig small_gpt(int layers = 8, int vocab = 50304) {
  return load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: 16\nvocab: " + std::to_string(vocab) +
          "\nsequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
          "tied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

// A Llama-style layer small enough to work by hand: hidden 256, 4 query heads and 2 key/value
// heads of 64, SwiGLU FFN 512, RMSNorm, rotary embeddings.
ModelConfig tiny_llama() {
  return load_model_yaml_text(
      "name: tiny-llama\nfamily: llama\nlayers: 2\nhidden: 256\nheads: 4\nkv_heads: 2\n"
      "ffn_hidden: 512\nvocab: 1000\nsequence: 1024\nactivation: swiglu\nnorm: rmsnorm\n"
      "position: rotary\ntied_embeddings: false\ncausal: true\nbias: false\n",
      "tiny-llama.yaml");
}

using test::plan_error;

struct Replayed {
  TrainingJob job;
  ReplayResult result;
};

Replayed run(const ModelConfig& m, const Plan& p, const platform::Cluster& c, const CostModel& cost,
             ReplayOptions o = {}) {
  Replayed r{build_training_job(m, p, c, cost), {}};
  r.result = replay(r.job, nullptr, o);
  return r;
}

TEST(TrainingFlops, ModelFlopsOfAnIterationMatchNarayananFormula) {
  for (const char* name : {"gpt3-1.3b", "gpt3-175b", "korthikanti-530b"}) {
    const ModelConfig m = load_model(name);
    const double B = 512, s = 2048, l = m.layers, h = m.hidden, V = m.vocab;
    const double expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    EXPECT_NEAR(model_flops_per_iteration(m, 512, 2048) / expected, 1.0, 1e-12) << name;
  }
}

TEST(TrainingFlops, ReplayCountsEveryKernelOnEveryDeviceOnce) {
  // Summed over devices, the replayed model FLOPs equal the closed form, whatever the split;
  // executed FLOPs with full recompute and standard attention equal 96 B s l h^2 (...).
  const ModelConfig m = small_gpt();
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 2\nmicro_batch_size: 2\n"
      "global_batch_size: 16\nsequence_length: 1024\nrecompute: full\nattention: standard\n",
      "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  double model = 0, executed = 0;
  for (const StageCopy& g : job.copies) {
    model += g.model_flops * g.devices.size();
    executed += g.compute_flops * g.devices.size();
  }
  const double B = 16, s = 1024, l = m.layers, h = m.hidden, V = m.vocab;
  EXPECT_NEAR(model / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1, 1e-12);
  // Executed adds the optimizer's and memory-bound kernels' arithmetic: GEMM and attention
  // FLOPs alone give 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
  double gemm = 0;
  for (const StageCopy& g : job.copies) {
    for (const Task& t : g.program) {
      if (t.kind != TaskKind::compute) continue;
      for (const auto& [op, d] : g.segments[t.index].ops) {
        if (g.ops[op].kind != OpKind::memory) gemm += g.ops[op].flops * g.devices.size();
      }
    }
  }
  EXPECT_NEAR(gemm / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1, 1e-12);
  EXPECT_GT(executed, gemm);
}

TEST(Workload, AClassificationHeadComputesAPoolerAndClassesNotTheVocabulary) {
  // Megatron-LM's Classification model (BERT's GLUE finetuning, DT-FM's QQP runs): the layers'
  // work as before, then per sequence a pooler (h x h) and a classifier (h x classes) on its first
  // token, computed whole on every tensor-parallel rank; no logits over the vocabulary, no word
  // embedding copy on the last stage, no embedding gradients between the first and last stage.
  const ModelConfig m = load_model_yaml_text(
      "name: cls\nfamily: bert\nlayers: 8\nhidden: 1024\nheads: 16\nvocab: 50304\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: false\nhead: classification\nclasses: 3\ncausal: false\nbias: true\n",
      "cls.yaml");
  const double h = m.hidden, c = 3;
  EXPECT_EQ(m.output_ranks(4), 1);  // whole on every tensor-parallel rank
  EXPECT_EQ(m.output_params(), static_cast<int64_t>(2 * h + h * h + h + h * c + c));
  const platform::Cluster cl = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 2\nmicro_batch_size: 2\n"
      "global_batch_size: 16\nsequence_length: 1024\nrecompute: full\nattention: standard\n",
      "p.yaml", m, cl);
  const TrainingJob job = build_training_job(m, p, cl, cost);
  double gemm = 0;
  for (const StageCopy& g : job.copies) {
    EXPECT_EQ(g.tied_bytes, 0) << "no tied embedding";
    for (const Task& t : g.program) {
      if (t.kind != TaskKind::compute) continue;
      for (const auto& [op, d] : g.segments[t.index].ops) {
        EXPECT_EQ(g.ops[op].name.rfind("logits", 0), std::string::npos) << g.ops[op].name;
        if (g.ops[op].kind != OpKind::memory) gemm += g.ops[op].flops * g.devices.size();
      }
    }
  }
  // 96 B s l h^2 (1 + s / (6h)) for the layers (full recompute, every score computed), and the
  // head's forward, input-gradient and weight-gradient GEMMs, 6 B h (h + classes), on each of the
  // 2 tensor-parallel ranks.
  const double B = 16, s = 1024, l = m.layers, t = 2;
  EXPECT_NEAR(gemm / (96 * B * s * l * h * h * (1 + s / (6 * h)) + t * 6 * B * h * (h + c)), 1,
              1e-12);
  for (const StageCopy& g : job.copies) {
    for (const Task& t : g.program) EXPECT_NE(t.kind, TaskKind::tied);
  }
}

TEST(Workload, AClassificationHeadIsDeclaredWhole) {
  const std::string base =
      "name: cls\nfamily: bert\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nsequence: 32\n"
      "activation: gelu\nnorm: layernorm\nposition: learned\ncausal: false\nbias: true\n";
  auto error = [&](const std::string& more) {
    try {
      load_model_yaml_text(base + more, "m.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("tied_embeddings: false\nhead: classification\n"), "no error");
  EXPECT_NE(error("tied_embeddings: true\nhead: classification\n")
                .find("m.yaml:13: tied_embeddings: a classification head has no output projection"),
            std::string::npos)
      << error("tied_embeddings: true\nhead: classification\n");
  EXPECT_NE(error("tied_embeddings: true\nclasses: 2\n")
                .find("classes: applies to a classification head"),
            std::string::npos);
  EXPECT_NE(error("tied_embeddings: false\nhead: regression\n").find("head"), std::string::npos);
  EXPECT_NE(error("tied_embeddings: false\nhead: classification\nhead_bias: true\n")
                .find("head_bias: the bias of a language-model head"),
            std::string::npos);
}

// `optimizer:` Adam keeps two fp32 moments beside the fp32 master weights (12 bytes a parameter
// in fp16), SGD with momentum one (8), plain SGD none (4); in fp32 the master copy is the weights
// themselves (8, 4, 0). The step's kernel moves 30, 22 and 14 bytes a parameter in fp16 (the
// gradient, the master weights and the state read and written, the fp16 weights written).
TEST(TrainingReplay, TheOptimizersStateAndStepFollowItsKind) {
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const std::string base =
      "micro_batch_size: 1\nglobal_batch_size: 2\nsequence_length: 1024\ndevices: \"0\"\n";
  std::map<std::string, double> state, fp32_state;
  for (const char* o : {"adam", "sgd_momentum", "sgd"}) {
    const Plan p = load_plan_text(base + "precision: fp16\noptimizer: " + o + "\n", "p.yaml", m, c);
    const TrainingJob job = build_training_job(m, p, c, cost);
    const DeviceMemory mem = memory_per_copy(job)[0];
    state[o] = mem.optimizer / job.copies[0].params;
    const Plan q = load_plan_text(base + "precision: fp32\noptimizer: " + o + "\n", "p.yaml", m, c);
    fp32_state[o] =
        memory_per_copy(build_training_job(m, q, c, cost))[0].optimizer / job.copies[0].params;
  }
  EXPECT_DOUBLE_EQ(state["adam"], 12);
  EXPECT_DOUBLE_EQ(state["sgd_momentum"], 8);
  EXPECT_DOUBLE_EQ(state["sgd"], 4);
  EXPECT_DOUBLE_EQ(fp32_state["adam"], 8);
  EXPECT_DOUBLE_EQ(fp32_state["sgd"], 0);
  EXPECT_DOUBLE_EQ(optimizer_step(1e6, Precision::fp16, Optimizer::adam).bytes, 30e6);
  EXPECT_DOUBLE_EQ(optimizer_step(1e6, Precision::fp16, Optimizer::sgd_momentum).bytes, 22e6);
  EXPECT_DOUBLE_EQ(optimizer_step(1e6, Precision::fp16, Optimizer::sgd).bytes, 14e6);
  // A cheaper step, a shorter iteration; an unknown optimizer is refused naming the field.
  const Plan adam = load_plan_text(base + "optimizer: adam\n", "p.yaml", m, c);
  const Plan sgd = load_plan_text(base + "optimizer: sgd\n", "p.yaml", m, c);
  EXPECT_LT(replay(build_training_job(m, sgd, c, cost)).iteration,
            replay(build_training_job(m, adam, c, cost)).iteration);
  try {
    load_plan_text(base + "optimizer: lamb\n", "p.yaml", m, c);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer: unknown value \"lamb\""), std::string::npos)
        << e.what();
  }
}

TEST(TrainingReplay, RecomputeLayersRecomputesTheFirstLayersOfEachChunk) {
  // recompute_layers: N with recompute: full: the first N layers of each stage's model chunk run
  // their forward pass again before their backward pass and keep only their input; the others
  // keep everything. Two stages of 4 layers, interleaved by 2 (chunks of 2 layers), 4
  // micro-batches, N = 1: one layer of each chunk recomputed, 2 x 4 recomputes per stage.
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const std::string base =
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 4\nsequence_length: 1024\n"
      "schedule: interleaved\ninterleave: 2\ndevices: \"0-1\"\n";
  auto recomputed = [](const TrainingJob& job) {
    int n = 0;
    for (const Task& t : job.copies[0].program)
      n += t.kind == TaskKind::compute && t.pass == Pass::recompute;
    return n;
  };
  const Plan some = load_plan_text(base + "recompute: full\nrecompute_layers: 1\n", "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, some, c, cost);
  EXPECT_EQ(recomputed(job), 2 * 4);
  const Plan all = load_plan_text(base + "recompute: full\n", "p.yaml", m, c);
  EXPECT_EQ(recomputed(build_training_job(m, all, c, cost)), 2 * 2 * 4);
  // N at least the chunk's layers is every layer, to the byte and the picosecond.
  const Plan every =
      load_plan_text(base + "recompute: full\nrecompute_layers: 2\n", "p.yaml", m, c);
  const TrainingJob every_job = build_training_job(m, every, c, cost);
  const TrainingJob all_job = build_training_job(m, all, c, cost);
  EXPECT_EQ(replay(every_job).iteration, replay(all_job).iteration);
  EXPECT_EQ(memory_per_copy(every_job)[0].activations, memory_per_copy(all_job)[0].activations);
  // Memory: each chunk in flight holds one layer's input and one layer's activations whole,
  // against two layers' inputs (all) or two layers whole (none).
  const Plan none = load_plan_text(base + "recompute: none\n", "p.yaml", m, c);
  const TrainingJob none_job = build_training_job(m, none, c, cost);
  const double a_some = memory_per_copy(job)[0].activations;
  const double a_all = memory_per_copy(all_job)[0].activations;
  const double a_none = memory_per_copy(none_job)[0].activations;
  EXPECT_NEAR(a_some, (a_all + a_none) / 2, 1e-6 * a_none);
  // Time: between none and all.
  const Time t_some = replay(job).iteration;
  EXPECT_LT(replay(none_job).iteration, t_some);
  EXPECT_LT(t_some, replay(all_job).iteration);
  // Without recompute: full it is refused.
  try {
    load_plan_text(base + "recompute: selective\nrecompute_layers: 1\n", "q.yaml", m, c);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "q.yaml:9: recompute_layers: needs recompute: full (it says how many layers of "
              "each stage recompute in full)");
  }
}

TEST(TrainingFlops, InterleavedChunksThatDoNotDivideTheLayersLeaveTheEndsShort) {
  // 30 layers on 4 stages x 8 chunks: the first chunk of the first stage holds only the
  // embedding, the last chunk of the last stage only the head (Llama 3 405B's layout); every
  // layer runs once per micro-batch, and the FLOPs are the closed form's.
  const ModelConfig m = small_gpt(30);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 4\nglobal_batch_size: 8\nsequence_length: 1024\n"
      "schedule: interleaved\ninterleave: 8\n",
      "p.yaml", m, c);
  const auto& st = p.replicas[0].stages;
  EXPECT_EQ(st[0].chunk_layers, (std::vector<int>{0, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(st[3].chunk_layers, (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(st[1].chunk_first, (std::vector<int>{0, 4, 8, 12, 16, 20, 24, 28}));
  EXPECT_EQ(st[0].layers + st[1].layers + st[2].layers + st[3].layers, 30);
  const TrainingJob job = build_training_job(m, p, c, cost);
  std::vector<int> runs(30, 0);
  double model = 0;
  for (const StageCopy& g : job.copies) {
    model += g.model_flops * g.devices.size();
    for (const Task& t : g.program) {
      if (t.kind == TaskKind::compute && t.pass == Pass::forward && t.layer >= 0) ++runs[t.layer];
    }
  }
  // A layer's forward may span several segments (tensor-parallel collectives between them).
  for (int l = 1; l < 30; ++l) EXPECT_EQ(runs[l], runs[0]) << "layer " << l;
  EXPECT_GT(runs[0], 0);
  const double B = 8, s = 1024, l = m.layers, h = m.hidden, V = m.vocab;
  EXPECT_NEAR(model / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1, 1e-12);
  const ReplayResult r = replay(job);
  EXPECT_GT(r.iteration, Time());
}

TEST(TrainingReplay, InterleavedMicroBatchGroupsTradeMemoryForNothingElseAtTheDefault) {
  // Megatron's microbatch_group_size_per_vp_stage: the pipeline size by default (bit-identical),
  // larger groups keep more forward chunks in flight (more activation memory), smaller ones stall
  // and are refused, and the micro-batches must fill whole groups.
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const std::string base =
      "tensor_parallel: 2\npipeline_parallel: 4\nglobal_batch_size: 24\nsequence_length: 1024\n"
      "schedule: interleaved\ninterleave: 2\n";
  auto peak_activations = [&](const TrainingJob& job) {
    double peak = 0;
    for (const DeviceMemory& d : memory_per_copy(job)) peak = std::max(peak, d.activations);
    return peak;
  };
  const Plan plain = load_plan_text(base, "p.yaml", m, c);
  const Plan four = load_plan_text(base + "microbatch_group: 4\n", "p.yaml", m, c);
  const Plan twelve = load_plan_text(base + "microbatch_group: 12\n", "p.yaml", m, c);
  const Replayed a = run(m, plain, c, cost), b = run(m, four, c, cost), d = run(m, twelve, c, cost);
  EXPECT_EQ(a.result.iteration, b.result.iteration);
  EXPECT_GT(peak_activations(d.job), peak_activations(a.job));
  EXPECT_GT(d.result.iteration, Time());
  auto err = [&](const std::string& extra) { return plan_error(base + extra, m, c); };
  EXPECT_EQ(err("microbatch_group: 2\n"),
            "p.yaml:7: microbatch_group: 2 is less than pipeline_parallel (4); the interleaved "
            "schedule would stall");
  EXPECT_EQ(err("microbatch_group: 5\n"),
            "p.yaml: schedule interleaved needs the micro-batches per replica (24) to be a "
            "multiple of microbatch_group (5)");
  try {
    load_plan_text("pipeline_parallel: 4\nglobal_batch_size: 8\nmicrobatch_group: 4\n", "q.yaml", m,
                   c);
    ADD_FAILURE() << "microbatch_group without the interleaved schedule was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "q.yaml:3: microbatch_group: needs schedule: interleaved");
  }
}

TEST(TrainingReplay, OneGpuIterationIsTheSumOfItsKernels) {
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const std::string plan_text =
      "micro_batch_size: 2\nglobal_batch_size: 8\nsequence_length: 1024\ndevices: \"0\"\n";
  // GPU-bound (no host issue time): the iteration is the sum of its kernels.
  DatasheetEfficiency e = load_datasheet_efficiency();
  e.host_per_kernel = Time();
  const DatasheetCostModel gpu_only(e);
  const Plan p = load_plan_text(plan_text, "p.yaml", m, c);
  const Replayed r = run(m, p, c, gpu_only);
  Time sum;
  const StageCopy& g = r.job.copies.at(0);
  for (const Task& t : g.program) {
    ASSERT_NE(t.kind, TaskKind::tp_comm);
    if (t.kind != TaskKind::compute) continue;
    for (const auto& [op, d] : g.segments[t.index].ops) {
      EXPECT_EQ(d, gpu_only.duration(g.ops[op], *g.gpu, p.precision));
      sum += d;
    }
  }
  EXPECT_EQ(r.result.iteration, sum);
  EXPECT_EQ(r.result.copies[0].compute, sum);
  // With host issue time, each run of kernels takes the longer of its GPU and host time.
  const DatasheetCostModel cost;
  const Replayed h = run(m, p, c, cost);
  Time segments;
  for (const Task& t : h.job.copies[0].program) {
    if (t.kind != TaskKind::compute) continue;
    const Segment& s = h.job.copies[0].segments[t.index];
    Time gpu, host;
    for (const auto& [op, d] : s.ops) {
      gpu += d;
      host += cost.host_time(h.job.copies[0].ops[op]);
    }
    EXPECT_EQ(s.duration, std::max(gpu, host));
    segments += s.duration;
  }
  EXPECT_EQ(h.result.iteration, segments);
}

// With communication free and equal stages, the bubble is (p - 1) / m of the ideal time for
// GPipe and 1F1B, and (p - 1) / (v m) interleaved.
struct BubbleCase {
  std::string schedule;
  int pp, m, v;
};
class PipelineBubble : public ::testing::TestWithParam<BubbleCase> {};

TEST_P(PipelineBubble, MatchesTheClosedForm) {
  const BubbleCase& k = GetParam();
  // A cost model in which the embedding and the head cost nothing makes the stages equal, as
  // the closed form assumes.
  struct LayersOnly : DatasheetCostModel {
    LayersOnly() : DatasheetCostModel(gpu_only()) {}
    static DatasheetEfficiency gpu_only() {
      DatasheetEfficiency e = load_datasheet_efficiency();
      e.host_per_kernel = Time();
      return e;
    }
    Time duration(const Op& op, const config::GpuProfile& gpu, Precision p) const override {
      for (const char* free : {"embedding", "position", "final_norm", "logits", "cross_entropy"}) {
        if (op.name.rfind(free, 0) == 0) return Time();
      }
      return DatasheetCostModel::duration(op, gpu, p);
    }
  };
  const ModelConfig m = small_gpt(16);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const LayersOnly cost;
  std::ostringstream y;
  y << "pipeline_parallel: " << k.pp << "\nmicro_batch_size: 1\nglobal_batch_size: " << k.m
    << "\nsequence_length: 1024\nschedule: " << k.schedule << "\ninterleave: " << k.v
    << "\ndevices: \"0-" << k.pp - 1 << "\"\n";
  const Plan p = load_plan_text(y.str(), "p.yaml", m, c);
  ReplayOptions o;
  o.free_communication = true;
  const Replayed r = run(m, p, c, cost, o);
  // Ideal: a stage's compute without the optimizer step.
  Time optimizer;
  const StageCopy& g0 = r.job.copies[0];
  for (const Task& t : g0.program) {
    if (t.kind == TaskKind::compute && t.pass == Pass::other)
      optimizer += g0.segments[t.index].duration;
  }
  const double ideal = (r.result.copies[0].compute - optimizer).seconds();
  const double bubble = (r.result.iteration - r.result.copies[0].compute).seconds();
  const double expected = (k.pp - 1.0) / (k.v * k.m);
  EXPECT_NEAR(bubble / ideal, expected, 1e-9)
      << k.schedule << " p=" << k.pp << " m=" << k.m << " v=" << k.v;
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineBubble,
    ::testing::Values(BubbleCase{"gpipe", 4, 8, 1}, BubbleCase{"1f1b", 4, 8, 1},
                      BubbleCase{"1f1b", 8, 16, 1}, BubbleCase{"1f1b", 2, 1, 1},
                      BubbleCase{"interleaved", 4, 8, 2}, BubbleCase{"interleaved", 2, 4, 4}));

TEST(TrainingReplay, GradientAllReduceIsExposedWhenNothingOverlapsIt) {
  // Two GPUs, data parallel, one bucket for all gradients: the all-reduce starts after the last
  // backward kernel and nothing runs beside it, so the exposed time is the collective's time.
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "data_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 4\nsequence_length: 1024\n"
      "devices: \"0-1\"\nbucket_size: 100GB\n",
      "p.yaml", m, c);
  const Replayed r = run(m, p, c, cost);
  const StageCopy& g = r.job.copies[0];
  ASSERT_EQ(g.dp.size(), 1u);
  network::CollectiveRequest req;
  req.op = network::Op::allreduce;
  req.bytes = g.dp[0].bytes;
  req.ranks = {0, 1};
  req.host_launch = false;
  const Time alone = network::simulate_collective(c, req).time;
  EXPECT_EQ(r.result.copies[0].dp_wait, alone);
  EXPECT_DOUBLE_EQ(g.dp[0].bytes, 4.0 * m.params());  // fp32 gradients of the whole model
}

TEST(TrainingReplay, TpCommOverlapRunsEachSequenceParallelCollectiveBesideItsGemm) {
  // tp_comm_overlap: a layer's all-gathers start right before the column-parallel GEMM that
  // reads them (qkv, fc1 forward; fc2 and proj dgrad backward), its forward reduce-scatters right
  // before the row-parallel GEMM that writes them (proj, fc2), each asynchronous: the replay runs
  // it beside that one kernel.
  const ModelConfig m = small_gpt(4);
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.tensor_parallel = 8;
  s.sequence_parallel = true;
  auto before = [](const std::vector<Step>& steps, const std::string& gemm) {
    for (size_t i = 1; i < steps.size(); ++i)
      if (steps[i].op.name == gemm) return steps[i - 1];
    ADD_FAILURE() << gemm;
    return Step{};
  };
  auto after = [](const std::vector<Step>& steps, const std::string& gemm) {
    for (size_t i = 0; i + 1 < steps.size(); ++i)
      if (steps[i].op.name == gemm) return steps[i + 1];
    ADD_FAILURE() << gemm;
    return Step{};
  };
  const std::vector<Step> plain = layer_forward(m, s);
  EXPECT_EQ(before(plain, "qkv").comm, CommKind::allgather);
  EXPECT_FALSE(before(plain, "qkv").async);
  EXPECT_EQ(after(plain, "proj").comm, CommKind::reducescatter);
  EXPECT_FALSE(after(plain, "proj").async);
  s.kernels.tp_comm_overlap = true;
  const std::vector<Step> fwd = layer_forward(m, s), bwd = layer_backward(m, s);
  for (const char* g : {"qkv", "fc1"}) {
    EXPECT_EQ(before(fwd, g).comm, CommKind::allgather) << g;
    EXPECT_TRUE(before(fwd, g).async) << g;
  }
  for (const char* g : {"proj", "fc2"}) {
    EXPECT_EQ(before(fwd, g).comm, CommKind::reducescatter) << g;
    EXPECT_TRUE(before(fwd, g).async) << g;
    EXPECT_EQ(after(fwd, g).comm, CommKind::none) << g << ": no second collective";
  }
  for (const char* g : {"fc2.dgrad", "proj.dgrad"}) {
    EXPECT_EQ(before(bwd, g).comm, CommKind::allgather) << g;
    EXPECT_TRUE(before(bwd, g).async) << g;
  }
  size_t collectives[2] = {0, 0};  // the same collectives, plain and overlapped
  for (const Step& st : plain) collectives[0] += st.comm != CommKind::none;
  for (const Step& st : fwd) collectives[1] += st.comm != CommKind::none;
  EXPECT_EQ(collectives[0], collectives[1]);
  // An eager framework's layers are not Transformer Engine's: nothing changes.
  s.eager = true;
  EXPECT_FALSE(before(layer_forward(m, s), "qkv").async);

  // Replayed on 8 H100 (TP 8): the overlap hides tensor-parallel time and never more than the
  // plain replay exposed; the kernels are the same.
  const platform::Cluster c = cluster("dgx-h100", 1);
  const DatasheetCostModel cost;
  const std::string base =
      "tensor_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 4\nsequence_length: 1024\n"
      "sequence_parallel: true\n";
  const Replayed a = run(m, load_plan_text(base, "p.yaml", m, c), c, cost);
  const Replayed b =
      run(m, load_plan_text(base + "tp_comm_overlap: true\n", "p.yaml", m, c), c, cost);
  EXPECT_EQ(a.job.copies[0].compute_flops, b.job.copies[0].compute_flops);
  EXPECT_GT(a.result.copies[0].tp_wait, Time());
  EXPECT_LT(b.result.copies[0].tp_wait, a.result.copies[0].tp_wait);
  EXPECT_LT(b.result.iteration, a.result.iteration);
  EXPECT_GE(b.result.iteration, a.result.iteration - a.result.copies[0].tp_wait);
  // Without sequence parallelism there is nothing to overlap: refused, as Megatron-LM does.
  EXPECT_EQ(plan_error("tensor_parallel: 8\nglobal_batch_size: 8\ntp_comm_overlap: true\n", m, c),
            "p.yaml:3: tp_comm_overlap: overlaps sequence parallelism's all-gathers and "
            "reduce-scatters with the GEMMs, so it needs sequence_parallel: true (Megatron-LM "
            "refuses --tp-comm-overlap without --sequence-parallel)");
}

TEST(StepCuts, KernelsBetweenCollectivesAreOneSegmentAndAnOverlapTakesTheOneKernelAfterIt) {
  // The rule both the job builder and the estimator cut a run of steps by (pass_rules.h).
  auto kernel = [](const char* name) {
    Step st;
    st.op.name = name;
    return st;
  };
  auto collective = [](bool async, bool expert = false) {
    Step st;
    st.comm = expert ? CommKind::alltoall : CommKind::allreduce;
    st.async = async;
    st.expert = expert;
    return st;
  };
  using K = StepCut::Kind;
  const std::vector<Step> steps = {kernel("a"),
                                   kernel("b"),
                                   collective(false),
                                   kernel("c"),
                                   collective(true),
                                   kernel("d"),
                                   kernel("e"),
                                   collective(true),
                                   collective(false),
                                   kernel("f"),
                                   collective(false, true),
                                   kernel("g"),
                                   collective(true)};
  const std::vector<StepCut> cuts = cut_steps(steps);
  const std::vector<std::tuple<K, uint32_t, uint32_t, bool>> want = {
      {K::kernels, 0, 2, false},     // a b
      {K::collective, 2, 1, false},  // waited for
      {K::kernels, 3, 1, false},     // c
      {K::collective, 4, 1, true},   // beside d
      {K::kernels, 5, 1, false},     // d alone
      {K::wait, 5, 0, false},        // at d's end
      {K::kernels, 6, 1, false},     // e
      {K::collective, 7, 1, true},   // no kernel before the next collective: no wait of its own
      {K::collective, 8, 1, false},  {K::kernels, 9, 1, false},  // f
      {K::collective, 10, 1, false},  // an expert all-to-all blocks (async is not read)
      {K::kernels, 11, 1, false},     // g
      {K::collective, 12, 1, true},  {K::wait, 13, 0, false},  // at the run's end
  };
  ASSERT_EQ(cuts.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [kind, first, count, overlaps] = want[i];
    EXPECT_EQ(cuts[i].kind, kind) << i;
    EXPECT_EQ(cuts[i].first, first) << i;
    EXPECT_EQ(cuts[i].count, count) << i;
    EXPECT_EQ(cuts[i].overlaps, overlaps) << i;
  }
  // Every kernel is in exactly one segment, in order.
  uint32_t next = 0;
  for (const StepCut& c : cuts) {
    if (c.kind == K::kernels) {
      while (steps[next].comm != CommKind::none) ++next;
      EXPECT_EQ(c.first, next);
      next += c.count;
    }
  }
  EXPECT_TRUE(cut_steps({}).empty());

  // The job builder's tasks are the cuts one for one: a layer with tp_comm_overlap's collectives.
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = cluster("dgx-h100", 1);
  const DatasheetCostModel cost;
  const Plan plan = load_plan_text(
      "tensor_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 1\nsequence_length: 1024\n"
      "sequence_parallel: true\ntp_comm_overlap: true\n",
      "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, plan, c, cost);
  const std::vector<StepCut> layer = cut_steps(layer_forward(m, stage_shape(plan, 8, 1)));
  std::vector<TaskKind> tasks;
  for (const Task& t : job.copies[0].program)
    if (t.layer == 1 && t.pass == Pass::forward) tasks.push_back(t.kind);
  ASSERT_EQ(tasks.size(), layer.size());
  for (size_t i = 0; i < layer.size(); ++i) {
    const TaskKind want_kind = layer[i].kind == K::kernels ? TaskKind::compute
                               : layer[i].kind == K::wait  ? TaskKind::tp_wait
                                                           : TaskKind::tp_comm;
    EXPECT_EQ(tasks[i], want_kind) << i;
  }
}

TEST(PassEnds, ReceivesGathersEmbeddingHeadAndSendsSitWhereThePipelinePutsThem) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-h100", 1);
  // Megatron-LM 2021-22 sends a tensor-parallel stage's transfers in slices and gathers them on
  // arrival, once forward and once backward (frameworks/megatron-lm-2021.yaml).
  const std::string base =
      "tensor_parallel: 2\npipeline_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
      "sequence_length: 1024\nframework: megatron-lm-2021\n";
  const Plan plan = load_plan_text(base, "p.yaml", m, c);
  const int V = 4;
  for (int vs = 0; vs < V; ++vs) {
    const PassEnds f = pass_ends(plan, 2, vs, V, true), b = pass_ends(plan, 2, vs, V, false);
    EXPECT_EQ(f.receive, vs > 0) << vs;
    EXPECT_EQ(f.gathers, vs > 0 ? 1 : 0) << vs;
    EXPECT_EQ(f.embedding, vs == 0) << vs;
    EXPECT_EQ(f.head, vs == V - 1) << vs;
    EXPECT_EQ(f.send, vs < V - 1) << vs;
    EXPECT_EQ(b.receive, vs < V - 1) << vs;
    EXPECT_EQ(b.gathers, vs < V - 1 ? 1 : 0) << vs;
    EXPECT_EQ(b.embedding, vs == 0) << vs;
    EXPECT_EQ(b.head, vs == V - 1) << vs;
    EXPECT_EQ(b.send, vs > 0) << vs;
  }
  // No gathers on one rank, nor under sequence parallelism (the input is split by sequence).
  EXPECT_EQ(pass_ends(plan, 1, 1, V, true).gathers, 0);
  const Plan sp = load_plan_text(base + "sequence_parallel: true\n", "p.yaml", m, c);
  EXPECT_EQ(pass_ends(sp, 2, 1, V, true).gathers, 0);
  // One stage: the embedding and the head, nothing received or sent.
  const PassEnds one = pass_ends(plan, 2, 0, 1, true);
  EXPECT_TRUE(one.embedding && one.head);
  EXPECT_FALSE(one.receive || one.send);
  // The job's first stage sends every forward pass and receives every backward pass, gathering it.
  const TrainingJob job = build_training_job(m, plan, c, DatasheetCostModel());
  int sends = 0, receives = 0;
  for (const Task& t : job.copies[0].program) {
    sends += t.kind == TaskKind::send && t.pass == Pass::forward;
    receives += t.kind == TaskKind::recv && t.pass == Pass::backward;
  }
  EXPECT_EQ(sends, 8);
  EXPECT_EQ(receives, 8);
}

TEST(OuterParams, TheEmbeddingSplitsOverTheRanksAndAClassifierIsWholeOnEach) {
  const ModelConfig lm = small_gpt(8);
  const double emb = static_cast<double>(lm.embedding_params());
  const OuterParams o = outer_params(lm, 2, 4);
  EXPECT_DOUBLE_EQ(o.weights_on(true, false), emb / 4);
  EXPECT_DOUBLE_EQ(o.grads_on(false, true), static_cast<double>(lm.output_params()) / 4);
  EXPECT_DOUBLE_EQ(o.weights_on(true, true), (emb + lm.head_params(2)) / 4);
  EXPECT_EQ(o.grads_on(false, false), 0);
  // A staged plan's tied word embedding is reduced apart: not among the embedding's gradients.
  EXPECT_DOUBLE_EQ(outer_params(lm, 2, 4, true).grads_on(true, false),
                   (emb - static_cast<double>(lm.vocab) * lm.hidden) / 4);
  // A classifier (Megatron-LM's Classification model) is whole on every tensor-parallel rank.
  auto classifier = [](int classes) {
    return load_model_yaml_text(
        "name: cls\nfamily: bert\nlayers: 4\nhidden: 1024\nheads: 16\nvocab: 50304\n"
        "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
        "tied_embeddings: false\nhead: classification\nclasses: " +
            std::to_string(classes) + "\ncausal: false\nbias: true\n",
        "cls.yaml");
  };
  const ModelConfig cls = classifier(3);
  const OuterParams c = outer_params(cls, 1, 4);
  EXPECT_DOUBLE_EQ(c.grads_on(false, true), static_cast<double>(cls.output_params()));
  EXPECT_DOUBLE_EQ(c.grads_on(true, true), static_cast<double>(cls.embedding_params()) / 4 +
                                               static_cast<double>(cls.output_params()));
  // The job builder reduces it so: 1000 more classes add 1000 x (hidden + 1) gradients to what
  // each tensor-parallel rank reduces among the replicas, not a quarter of that.
  const platform::Cluster cl = cluster("dgx-a100", 1);
  auto reduced = [&](const ModelConfig& m) {
    const Plan p = load_plan_text(
        "tensor_parallel: 4\ndata_parallel: 2\nglobal_batch_size: 4\nsequence_length: 1024\n",
        "p.yaml", m, cl);
    const TrainingJob job = build_training_job(m, p, cl, DatasheetCostModel());
    double bytes = 0;
    for (const DpCollective& d : job.copies[0].dp)
      if (d.kind != CommKind::allgather) bytes += d.bytes;
    return bytes / (p.fp32_main_grads ? 4 : element_bytes(p.precision));
  };
  EXPECT_DOUBLE_EQ(reduced(classifier(1003)) - reduced(cls), 1000.0 * (1024 + 1));
}

TEST(GradBuckets, ABucketGoesOutOnceItHoldsItsSizeAndTheRestGoesLast) {
  // 40 MB layers into 100 MB buckets: out after the third layer (120 MB) and the sixth; the
  // seventh's 40 MB and the embedding's 30 MB go out last. Bytes are conserved.
  GradBuckets fill;
  std::vector<double> out;
  for (int l = 0; l < 7; ++l) {
    const double full = fill.add(40e6, 100e6);
    if (full > 0) out.push_back(full);
  }
  EXPECT_EQ(out, (std::vector<double>{120e6, 120e6}));
  EXPECT_DOUBLE_EQ(fill.held(), 40e6);
  EXPECT_DOUBLE_EQ(fill.close(30e6), 70e6);
  EXPECT_EQ(fill.held(), 0);
  EXPECT_EQ(fill.close(), 0);  // nothing held: no last bucket
  // Exactly the size is full.
  EXPECT_DOUBLE_EQ(fill.add(100e6, 100e6), 100e6);
  // A tensor-parallel rank's shares (degree 4) cut by the bytes per rank of a holder of degree
  // 2: the size is 2 x 100 MB of whole gradients, 4 x the shares held: out at 50 MB held.
  EXPECT_EQ(fill.add(40e6, 2 * 100e6, 4), 0);
  EXPECT_DOUBLE_EQ(fill.add(10e6, 2 * 100e6, 4), 50e6);
}

TEST(LayerRerun, EachLayerRunsAgainWhatTheRecomputeKeysSay) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-h100", 1);
  auto plan = [&](const std::string& keys) {
    return load_plan_text("pipeline_parallel: 2\nglobal_batch_size: 8\n" + keys, "p.yaml", m, c);
  };
  const Plan none = plan("recompute: none\n"), full = plan("recompute: full\n"),
             selective = plan("recompute: selective\n"),
             first3 = plan("recompute: full\nrecompute_layers: 3\n");
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(layer_rerun(none, i), LayerRerun::nothing) << i;
    EXPECT_EQ(layer_rerun(full, i), LayerRerun::forward) << i;
    EXPECT_EQ(layer_rerun(selective, i), LayerRerun::attention_core) << i;
    EXPECT_EQ(layer_rerun(first3, i), i < 3 ? LayerRerun::forward : LayerRerun::nothing) << i;
  }
  EXPECT_EQ(rerun_layers(none, 4), 0);
  EXPECT_EQ(rerun_layers(full, 4), 4);
  EXPECT_EQ(rerun_layers(selective, 4), 4);
  EXPECT_EQ(rerun_layers(first3, 4), 3);
  EXPECT_EQ(rerun_layers(first3, 2), 2);
  // The job runs exactly that: a stage of 4 layers recomputes its first 3 layers' forward passes,
  // one segment each per micro-batch (one GPU a stage: no collective cuts them).
  const TrainingJob job = build_training_job(m, first3, c, DatasheetCostModel());
  std::map<int, int> recomputed;  // layer -> recompute tasks
  for (const Task& t : job.copies[0].program)
    if (t.pass == Pass::recompute && t.kind == TaskKind::compute) ++recomputed[t.layer];
  ASSERT_EQ(recomputed.size(), 3u);
  for (const auto& [layer, n] : recomputed) {
    EXPECT_LT(layer, 3);
    EXPECT_EQ(n, first3.micro_batches_of(0)) << layer;
  }
}

TEST(TrainingReplay, BiasDropoutFusionOffRunsTheBiasDropoutAndAddAsKernelsOfTheirOwn) {
  // bias_dropout_fusion: false (Megatron-LM's --no-bias-dropout-fusion): where a fused framework
  // runs one kernel that reads the branch and the stream and writes the stream (3 e n bytes), the
  // branch's bias is added (2 e n), dropout writes its output and a one-byte mask ((2 e + 1) n)
  // and the add writes the stream (3 e n), n = tokens x hidden; the backward pass is the dropout's
  // backward alone ((2 e + 1) n, where the fused kernel's is 3 e n). No FLOPs change.
  ModelConfig m = small_gpt(4);
  m.dropout = 0.1;
  ASSERT_TRUE(m.bias && m.mlp_bias);
  LayerShape s;
  s.micro_batch = 2;
  s.sequence = 512;
  s.precision = Precision::fp16;
  const double n = 2.0 * 512 * m.hidden, e = 2;
  auto bytes = [](const std::vector<Step>& steps, const std::string& prefix) {
    double b = 0;
    for (const Step& st : steps)
      if (st.op.name.rfind(prefix, 0) == 0) b += st.op.bytes;
    return b;
  };
  auto flops = [](const std::vector<Step>& steps) {
    double f = 0;
    for (const Step& st : steps) f += st.op.flops;
    return f;
  };
  const std::vector<Step> fused = layer_forward(m, s), fused_b = layer_backward(m, s);
  EXPECT_DOUBLE_EQ(bytes(fused, "dropout_residual1"), 3 * e * n);
  s.kernels.bias_dropout_fusion = false;
  const std::vector<Step> unfused = layer_forward(m, s), unfused_b = layer_backward(m, s);
  for (const char* r : {"dropout_residual1", "dropout_residual2"}) {
    EXPECT_DOUBLE_EQ(bytes(unfused, std::string(r) + ".bias"), 2 * e * n) << r;
    EXPECT_DOUBLE_EQ(bytes(unfused, std::string(r) + ".dropout"), (2 * e + 1) * n) << r;
    EXPECT_DOUBLE_EQ(bytes(unfused, std::string(r) + ".add"), 3 * e * n) << r;
    EXPECT_DOUBLE_EQ(bytes(unfused_b, std::string(r)), (2 * e + 1) * n) << r;
  }
  EXPECT_EQ(unfused.size(), fused.size() + 4);  // two branches, three kernels where one ran
  EXPECT_DOUBLE_EQ(flops(unfused), flops(fused));
  EXPECT_DOUBLE_EQ(flops(unfused_b), flops(fused_b));
  // A branch without a bias (Llama's) has no bias kernel; nor does an eager framework, whose
  // linear layers add theirs in the GEMM, and whose kernels the key does not change.
  ModelConfig no_bias = m;
  no_bias.bias = no_bias.mlp_bias = false;
  EXPECT_DOUBLE_EQ(bytes(layer_forward(no_bias, s), "dropout_residual1.bias"), 0);
  LayerShape eager = s;
  eager.eager = true;
  LayerShape eager_fused = eager;
  eager_fused.kernels.bias_dropout_fusion = true;
  EXPECT_EQ(layer_forward(m, eager).size(), layer_forward(m, eager_fused).size());
  EXPECT_DOUBLE_EQ(bytes(layer_forward(m, eager), "dropout_residual1"),
                   bytes(layer_forward(m, eager_fused), "dropout_residual1"));

  // Read from a plan, replayed on a DGX-1: the same work, more memory traffic, a longer
  // iteration; the estimator's cache tells the two plans apart by the shape alone.
  const platform::Cluster c = cluster("dgx1-v100", 1);
  const DatasheetCostModel cost;
  const std::string base =
      "tensor_parallel: 2\nmicro_batch_size: 2\nglobal_batch_size: 8\nsequence_length: 512\n"
      "precision: fp16\n";
  const Plan off = load_plan_text(base + "bias_dropout_fusion: false\n", "p.yaml", m, c);
  EXPECT_FALSE(off.kernels.bias_dropout_fusion);
  EXPECT_TRUE(load_plan_text(base, "p.yaml", m, c).kernels.bias_dropout_fusion);
  const Replayed a = run(m, load_plan_text(base, "p.yaml", m, c), c, cost);
  const Replayed b = run(m, off, c, cost);
  EXPECT_GT(b.result.iteration, a.result.iteration);
  EXPECT_EQ(plan_error(base + "bias_dropout_fusion: maybe\n", m, c),
            "p.yaml:6: bias_dropout_fusion: expected true or false");
}

TEST(TrainingReplay, Fp8LayersCountTransformerEnginesCastKernels) {
  // Under fp8 (a fused framework), per layer and micro-batch: proj's and fc2's 16-bit inputs cast
  // to fp8 and transposed forward (2 read + 1 + 1 written bytes an element), every linear layer's
  // output gradient the same backward, qkv's and fc1's fp8 inputs transposed for their weight
  // gradients (1 + 1). small_gpt: hidden 1024, ffn 4096, 16 heads; TP 2, 1024 tokens.
  const ModelConfig m = small_gpt(4);
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.tensor_parallel = 2;
  s.precision = Precision::fp8;
  auto bytes = [](const std::vector<Step>& steps) {
    std::map<std::string, double> b;
    for (const Step& st : steps)
      if (st.op.name.find(".fp8_") != std::string::npos) b[st.op.name] += st.op.bytes;
    return b;
  };
  const double T = 1024;
  const std::map<std::string, double> fwd = bytes(layer_forward(m, s));
  EXPECT_EQ(fwd, (std::map<std::string, double>{{"proj.input.fp8_cast", 4 * T * 512},
                                                {"fc2.input.fp8_cast", 4 * T * 2048}}));
  const std::map<std::string, double> bwd = bytes(layer_backward(m, s));
  EXPECT_EQ(bwd, (std::map<std::string, double>{{"fc2.grad_output.fp8_cast", 4 * T * 1024},
                                                {"fc1.grad_output.fp8_cast", 4 * T * 2048},
                                                {"fc1.input.fp8_transpose", 2 * T * 1024},
                                                {"proj.grad_output.fp8_cast", 4 * T * 1024},
                                                {"qkv.grad_output.fp8_cast", 4 * T * 1536},
                                                {"qkv.input.fp8_transpose", 2 * T * 1024}}));
  // bf16, or an eager framework under fp8: none.
  s.eager = true;
  EXPECT_TRUE(bytes(layer_forward(m, s)).empty());
  s.eager = false;
  s.precision = Precision::bf16;
  EXPECT_TRUE(bytes(layer_backward(m, s)).empty());
}

TEST(TrainingReplay, Fp8MoeLayersCastTheExpertsInputsAndGradients) {
  // A MoE layer under fp8 (Transformer Engine's grouped linear layers): the routed tokens at the
  // experts' fc1 and fc2 inputs forward and their output gradients backward, cast to fp8 with a
  // transposed copy (4 bytes an element); the shared expert's the same over the layer's tokens.
  // 1024 tokens, top-2 of 8 experts at even load: 2048 routed rows; expert and shared FFN 512.
  const ModelConfig m = load_model_yaml_text(
      "name: moe\nfamily: gpt\nlayers: 2\nhidden: 1024\nheads: 16\nvocab: 1000\n"
      "sequence: 1024\nactivation: gelu\nnorm: layernorm\nposition: learned\n"
      "tied_embeddings: true\ncausal: true\nbias: false\nexperts: 8\nexperts_per_token: 2\n"
      "expert_ffn_hidden: 512\nshared_experts: 1\n",
      "moe.yaml");
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.precision = Precision::fp8;
  s.moe_layer = true;
  auto bytes = [](const std::vector<Step>& steps) {
    std::map<std::string, double> b;
    for (const Step& st : steps) {
      const std::string& n = st.op.name;
      if (n.find(".fp8_") != std::string::npos &&
          (n.rfind("experts.", 0) == 0 || n.rfind("shared.", 0) == 0))
        b[n] += st.op.bytes;
    }
    return b;
  };
  const double T = 1024, routed = 2048;
  EXPECT_EQ(bytes(layer_forward(m, s)),
            (std::map<std::string, double>{{"experts.fc1.input.fp8_cast", 4 * routed * 1024},
                                           {"experts.fc2.input.fp8_cast", 4 * routed * 512},
                                           {"shared.fc1.input.fp8_cast", 4 * T * 1024},
                                           {"shared.fc2.input.fp8_cast", 4 * T * 512}}));
  EXPECT_EQ(bytes(layer_backward(m, s)),
            (std::map<std::string, double>{{"experts.fc2.grad_output.fp8_cast", 4 * routed * 1024},
                                           {"experts.fc1.grad_output.fp8_cast", 4 * routed * 512},
                                           {"shared.fc2.grad_output.fp8_cast", 4 * T * 1024},
                                           {"shared.fc1.grad_output.fp8_cast", 4 * T * 512}}));
}

TEST(TrainingReplay, EagerLlamaLayersRunRmsNormRotaryAndSwigluOpByOp) {
  // Eager PyTorch (pytorch-fsdp's `kernels: eager`) runs a Llama layer's RMSNorm, rotary
  // embeddings and SwiGLU as the composite ops the reference code writes, each its own kernel,
  // where Megatron-LM fuses each into one. 1024 tokens, hidden 256, 4 query heads and 2 key/value
  // heads of 64, FFN 512, bf16 (2 bytes), no tensor parallelism.
  const ModelConfig m = tiny_llama();
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.precision = Precision::bf16;
  const double T = 1024, n = T * 256, q = T * 256, k = T * 128, f = T * 512;
  auto summed = [](const std::vector<Step>& steps, const std::string& prefix) {
    double b = 0;
    int kernels = 0;
    for (const Step& st : steps) {
      if (st.op.name.rfind(prefix, 0) == 0) b += st.op.bytes, ++kernels;
    }
    return std::pair{b, kernels};
  };
  s.eager = true;
  const std::vector<Step> fwd = layer_forward(m, s), bwd = layer_backward(m, s);
  // RMSNorm forward: cast to fp32 (6), pow (8), mean (4), times rsqrt (8), cast back (6), times
  // the weight (4) an element; mean, add eps, rsqrt and the product write or read 4 + 8 + 8 + 4
  // bytes a token. 8 kernels.
  EXPECT_EQ(summed(fwd, "norm1"), std::pair(36 * n + 24 * T, 8));
  // Backward: 4 + 6 + 2 (the weight), 6 (cast), 8 + 12 + 4 (the product), 4 (mean), 8 + 12
  // (pow), 12 (the two paths added), 6 (cast) an element, 4 + 12 + 4 a token. 13 kernels.
  EXPECT_EQ(summed(bwd, "norm1"), std::pair(84 * n + 20 * T, 13));
  // Rotary, complex form, over the queries and the keys: cast (6), product (8), cast back (6).
  EXPECT_EQ(summed(fwd, "rotary"), std::pair(20 * (q + k), 6));
  EXPECT_EQ(summed(bwd, "rotary"), std::pair(20 * (q + k), 6));
  // The keys and values repeated to the 4 query heads: 2 tensors read at 2 heads, written at 4.
  EXPECT_EQ(summed(fwd, "repeat_kv"), std::pair(2 * 2 * (q + k), 1));
  // SwiGLU: silu (2e) and the product (3e); backward 3 x 3e.
  EXPECT_EQ(summed(fwd, "swiglu"), std::pair(5 * 2 * f, 2));
  EXPECT_EQ(summed(bwd, "swiglu"), std::pair(9 * 2 * f, 3));
  // Under autocast the stream is fp32: no casts inside the norm (8 + 4 + 8 + 8 an element), then
  // autocast's cast of its fp32 output for the matmul (4 + 2).
  s.autocast = true;
  EXPECT_EQ(summed(layer_forward(m, s), "norm1."), std::pair(28 * n + 24 * T + 6 * n, 7));
  // Fused (Megatron-LM): one kernel each, as before.
  s.eager = s.autocast = false;
  const std::vector<Step> ffwd = layer_forward(m, s), fbwd = layer_backward(m, s);
  EXPECT_EQ(summed(ffwd, "norm1"), std::pair(4 * n, 1));
  EXPECT_EQ(summed(fbwd, "norm1"), std::pair(6 * n, 1));
  EXPECT_EQ(summed(ffwd, "rotary"), std::pair(4 * T * 512, 1));
  EXPECT_EQ(summed(ffwd, "repeat_kv"), std::pair(0.0, 0));
  EXPECT_EQ(summed(ffwd, "swiglu"), std::pair(3 * 2 * f, 1));
}

TEST(TrainingReplay, SelectiveOpRecomputesEverySecondMatmulAndTheElementwiseOps) {
  // torchtitan's op-level checkpointing of a Llama layer: of the matmuls wq, wk, wv, wo, w1, w3,
  // w2 the second, fourth and sixth run again (wk, wo, w3), with the elementwise ops; attention
  // does not. 1024 tokens, hidden 256, 4 query heads and 2 key/value heads of 64, FFN 512, bf16.
  const ModelConfig m = tiny_llama();
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.precision = Precision::bf16;
  s.eager = true;
  const std::vector<Step> rc = selective_op_recompute(m, s);
  double flops = 0;
  std::vector<std::string> gemms;
  for (const Step& st : rc) {
    if (st.op.kind == OpKind::gemm) gemms.push_back(st.op.name), flops += st.op.flops;
    EXPECT_NE(st.op.kind, OpKind::attention_forward) << st.op.name;
  }
  EXPECT_EQ(gemms, (std::vector<std::string>{"k", "proj", "w3"}));
  const double T = 1024;
  EXPECT_EQ(flops, 2 * T * 256 * (128 + 256 + 512));
  // Its memory-bound ops are the forward pass's but the final residual add: both norms, the
  // rotary embeddings, the repeat, the reshape of attention's output, the first residual add
  // and SwiGLU's two ops.
  double fwd_bytes = 0, rc_bytes = 0;
  for (const Step& st : layer_forward(m, s))
    if (st.op.kind == OpKind::memory && st.op.name != "dropout_residual2.add")
      fwd_bytes += st.op.bytes;
  for (const Step& st : rc)
    if (st.op.kind == OpKind::memory) rc_bytes += st.op.bytes;
  EXPECT_EQ(rc_bytes, fwd_bytes);
  // Kept a layer: its input and the outputs of wq (256), wv (128), attention (256), w1 (512) and
  // w2 (256) per token, 2 bytes each, and attention's fp32 log-sum-exp per head and token.
  EXPECT_EQ(layer_activation_bytes(m, s, Recompute::selective_op),
            T * 2 * (256 + 256 + 128 + 256 + 512 + 256) + T * 4 * 4);
}

TEST(TrainingReplay, SelectiveOpIsRefusedWhereItIsNotReplayed) {
  const platform::Cluster c = cluster("dgx-a100", 1);
  auto error = [&](const ModelConfig& m, const std::string& plan) {
    try {
      load_plan_text(plan, "p.yaml", m, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string plan =
      "micro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\nrecompute: selective_op\n";
  EXPECT_EQ(
      error(small_gpt(4), plan + "devices: \"0\"\n"),
      "p.yaml:4: recompute: selective_op (torchtitan's op-level checkpointing) is replayed for "
      "Llama-style layers (SwiGLU, separate query, key and value projections); small has "
      "a GeLU MLP");
  const ModelConfig llama = load_model("llama3-8b");
  EXPECT_EQ(error(llama, plan + "devices: \"0\"\n"), "accepted");
  // Accepted, its memory: each layer keeps what the policy keeps, and the layer being recomputed
  // holds the rest of its activations for the while (a transient, beside the kept ones).
  const DatasheetCostModel cost;
  const Plan op = load_plan_text(plan + "devices: \"0\"\n", "p.yaml", llama, c);
  const Plan none = load_plan_text(
      "micro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\n"
      "recompute: none\ndevices: \"0\"\n",
      "p.yaml", llama, c);
  const DeviceMemory a = memory_per_copy(build_training_job(llama, op, c, cost))[0];
  const DeviceMemory b = memory_per_copy(build_training_job(llama, none, c, cost))[0];
  const LayerShape s = stage_shape(op, 1, 1);
  const double kept = layer_activation_bytes(llama, s, Recompute::selective_op);
  const double whole = layer_activation_bytes(llama, s, Recompute::none);
  EXPECT_NEAR(a.activations, kept * llama.layers, 1e-6 * a.activations);
  EXPECT_NEAR(b.activations, whole * llama.layers, 1e-6 * b.activations);
  EXPECT_NEAR(a.workspace - b.workspace, whole - kept, 1e-6 * whole);
  EXPECT_EQ(
      error(llama, plan + "tensor_parallel: 2\ndevices: \"0-1\"\n"),
      "p.yaml:4: recompute: selective_op is replayed without tensor parallelism (torchtitan's "
      "policy then also keeps the reduce-scatters' outputs); use selective or full");
}

TEST(TrainingMemory, ActivationsFollowKorthikantiTable2) {
  const ModelConfig m = load_model("korthikanti-175b");
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 2048;
  s.tensor_parallel = 8;
  s.flash_attention = false;
  const double sbh = 2048.0 * 12288, a = 96, t = 8, h = 12288, seq = 2048;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::none),
                   sbh * (10 + 24 / t + 5 * a * seq / (h * t)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::selective), sbh * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::full), 2 * sbh);
  s.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::selective), 34 * sbh / t);
  s.flash_attention = true;  // flash stores no scores: as selective recompute
  s.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::none), sbh * (10 + 24 / t));
  // Without dropout (as Llama trains): no 1-byte masks outside (10 -> 8), and standard attention
  // keeps the softmax output alone (5 a s / h -> 2 a s / h).
  ModelConfig no_dropout = m;
  no_dropout.dropout = 0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(no_dropout, s, Recompute::none), sbh * (8 + 24 / t));
  s.flash_attention = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(no_dropout, s, Recompute::none),
                   sbh * (8 + 24 / t + 2 * a * seq / (h * t)));
}

TEST(TrainingMemory, StatesPerParameterFollowZeroStages) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  for (int zero : {0, 1, 2, 3}) {
    std::ostringstream y;
    y << "data_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\n"
         "main_grads: same\nzero_stage: "
      << zero << "\n";
    const Plan p = load_plan_text(y.str(), "p.yaml", m, c);
    const TrainingJob job = build_training_job(m, p, c, cost);
    const DeviceMemory mem = memory_per_copy(job)[0];
    const double per_param = (mem.weights + mem.gradients + mem.optimizer) / job.copies[0].params;
    const double d = 8;
    const double expected[] = {16, 4 + 12 / d, 2 + 14 / d, 16 / d};  // formulas.md
    EXPECT_DOUBLE_EQ(per_param, expected[zero]) << "zero " << zero;
  }
}

TEST(TrainingMemory, AModelThatDoesNotFitIsReportedPerDevice) {
  const ModelConfig m = load_model("gpt3-175b");
  const platform::Cluster c = cluster("dgx-a100", 1);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 1\nsequence_length: 2048\n",
      "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  const auto mem = memory_per_copy(job);
  EXPECT_TRUE(mem[0].oom());
  EXPECT_GT(mem[0].peak, 175e9 * 18 / 8);
}

TEST(TrainingReplay, SameInputGivesByteIdenticalReportAndTrace) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\nmicro_batch_size: 1\n"
      "global_batch_size: 16\nsequence_length: 1024\nsequence_parallel: true\n",
      "p.yaml", m, c);
  std::string out[2], traces[2];
  for (int i = 0; i < 2; ++i) {
    const TrainingJob job = build_training_job(m, p, c, cost);
    report::ChromeTrace trace(report::TraceFilter{});
    const ReplayResult res = replay(job, &trace);
    out[i] = report::to_json(report::make_training_report(job, res, memory_per_copy(job))).dump();
    std::ostringstream t;
    trace.write(t, job);
    traces[i] = t.str();
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(traces[0], traces[1]);
}

TEST(TrainingTrace, ParsesAndSlicesOnOneStreamNeverOverlap) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\nmicro_batch_size: 1\n"
      "global_batch_size: 16\nsequence_length: 1024\nschedule: interleaved\ninterleave: 2\n",
      "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  report::ChromeTrace trace(report::TraceFilter{});
  replay(job, &trace);
  std::ostringstream s;
  trace.write(s, job);
  const nlohmann::json j = nlohmann::json::parse(s.str());
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  int flows = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
    if (e["ph"] == "s") ++flows;
  }
  EXPECT_GT(slices.size(), 16u);
  EXPECT_GT(flows, 0);
  for (auto& [k, v] : slices) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) {
      EXPECT_LE(v[i - 1].second, v[i].first + 1e-3) << "pid " << k.first << " tid " << k.second;
    }
  }
}

TEST(TrainingTrace, FiltersKeepOnlyTheChosenDevicesAndMicroBatches) {
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "tensor_parallel: 8\ndata_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
      "sequence_length: 1024\n",
      "p.yaml", m, c);
  const TrainingJob job = build_training_job(m, p, c, cost);
  report::ChromeTrace trace(report::make_trace_filter(c, "8-9", "1"));
  replay(job, &trace);
  std::ostringstream s;
  trace.write(s, job);
  const nlohmann::json j = nlohmann::json::parse(s.str());
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], 1);
    EXPECT_LT(e["tid"].get<int>(), 8);  // node1 gpu0 and gpu1: tids 0-2 and 4-6
    const std::string name = e["name"];
    if (name.find("mb") != std::string::npos) {
      EXPECT_NE(name.find("mb1"), std::string::npos) << name;
    }
  }
}

TEST(Plans, ImpossiblePlansAreRejectedWithTheReason) {
  const ModelConfig m = load_model("gpt3-1.3b");
  const platform::Cluster c = cluster("dgx-a100", 1);
  auto err = [&](const std::string& y) { return plan_error(y, m, c); };
  EXPECT_EQ(err("tensor_parallel: 4\npipeline_parallel: 4\nglobal_batch_size: 8\n"),
            "p.yaml: tensor_parallel x pipeline_parallel x data_parallel = 4 x 4 x 1 = 16, but the "
            "plan has 8 GPUs (the whole cluster; set devices to use fewer)");
  EXPECT_EQ(
      err("tensor_parallel: 8\nglobal_batch_size: 5\nmicro_batch_size: 2\n"),
      "p.yaml:2: global_batch_size: 5 is not divisible by micro_batch_size x data_parallel = 2");
  EXPECT_EQ(
      err("tensor_parallel: 32\nglobal_batch_size: 8\ndevices: \"0-7\"\ndata_parallel: 1\n"),
      "p.yaml: tensor_parallel x pipeline_parallel x data_parallel = 32 x 1 x 1 = 32, but the "
      "plan has 8 GPUs (devices)");
  const platform::Cluster big = cluster("dgx-a100", 4);
  EXPECT_EQ(
      plan_error("tensor_parallel: 32\nglobal_batch_size: 8\n", m, big),
      "p.yaml: stage 0: tensor_parallel 32 does not divide the 16 attention heads (wider than the "
      "heads)");
  EXPECT_EQ(
      err("pipeline_parallel: 8\nglobal_batch_size: 8\nschedule: interleaved\ninterleave: 4\n"),
      "p.yaml: pipeline_parallel x interleave = 32 exceeds the 24 layers by more than the two "
      "chunks that may hold only the embedding and the head");
  EXPECT_EQ(
      err("replicas:\n  - micro_batches: 2\n    stages:\n      - {layers: 0, devices: \"0\"}\n"),
      "p.yaml:4: replicas[0].stages[0].layers: a stage with no layers");
  EXPECT_EQ(err("tensor_parallel: 8\nglobal_batch_size: 8\nzero_stage: 4\n"),
            "p.yaml:3: zero_stage: expected an integer from 0 to 3, got \"4\"");
  EXPECT_EQ(err("tensor_parallel: 8\nglobal_batch_size: 8\nschedul: gpipe\n"),
            "p.yaml:3: schedul: unknown key (did you mean \"schedule\"?)");
}

TEST(Plans, HeterogeneousStagesRunWithTheirOwnDevicesAndDegrees) {
  const ModelConfig m = load_model("gpt3-1.3b");
  const platform::Cluster c = cluster("mixed-a100-v100", 0);
  const DatasheetCostModel cost;
  const Plan p = load_plan_text(
      "micro_batch_size: 1\nsequence_length: 1024\nprecision: fp16\nreplicas:\n"
      "  - micro_batches: 6\n    stages:\n      - {layers: 16, tensor_parallel: 4, devices: "
      "\"0-3\"}\n"
      "      - {layers: 8, tensor_parallel: 2, devices: \"16-17\"}\n"
      "  - micro_batches: 2\n    stages:\n      - {layers: 16, tensor_parallel: 4, devices: "
      "\"4-7\"}\n"
      "      - {layers: 8, tensor_parallel: 2, devices: \"20-21\"}\n",
      "p.yaml", m, c);
  EXPECT_EQ(p.global_batch_size, 8);
  const Replayed r = run(m, p, c, cost);
  EXPECT_EQ(r.job.copies.size(), 4u);
  EXPECT_EQ(r.job.copies[1].gpu->architecture, "volta");
  EXPECT_GT(r.result.iteration, Time());
  // The replica with more micro-batches works longer.
  EXPECT_GT(r.result.copies[0].compute, r.result.copies[2].compute);
}

TEST(Plans, StageLayersSplitAUniformPlanAsTheSamePlanSpelledOutAsReplicas) {
  // GPT-3 1.3B's 24 layers as 5/7/7/5 over a 4-stage pipeline, tensor parallel 2, data parallel
  // 2 on two DGX A100: the uniform form with stage_layers and devices in its rank order
  // (tensor-parallel fastest, then data, then pipeline) is the replicas: form, to the bit.
  const ModelConfig m = load_model("gpt3-1.3b");
  const platform::Cluster c = cluster("dgx-a100", 2);
  const DatasheetCostModel cost;
  const Plan compact = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 4\ndata_parallel: 2\nmicro_batch_size: 1\n"
      "global_batch_size: 16\ndevices: \"0-7,12-15,8-11\"\nstage_layers: [5, 7, 7, 5]\n",
      "p.yaml", m, c);
  std::string spelled = "micro_batch_size: 1\nreplicas:\n";
  const char* devices[2][4] = {{"0, 1", "4, 5", "12, 13", "8, 9"},
                               {"2, 3", "6, 7", "14, 15", "10, 11"}};
  const int layers[4] = {5, 7, 7, 5};
  for (int r = 0; r < 2; ++r) {
    spelled += "  - micro_batches: 8\n    stages:\n";
    for (int s = 0; s < 4; ++s) {
      spelled += "      - {layers: " + std::to_string(layers[s]) +
                 ", tensor_parallel: 2, devices: [" + devices[r][s] + "]}\n";
    }
  }
  const Plan full = load_plan_text(spelled, "q.yaml", m, c);
  ASSERT_EQ(compact.replicas.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    for (size_t s = 0; s < 4; ++s) {
      EXPECT_EQ(compact.replicas[r].stages[s].layers, layers[s]);
      EXPECT_EQ(compact.replicas[r].stages[s].first_layer, full.replicas[r].stages[s].first_layer);
      EXPECT_EQ(compact.replicas[r].stages[s].devices, full.replicas[r].stages[s].devices);
    }
  }
  EXPECT_TRUE(compact.uniform);  // its replicas alike: one stands for all in an estimate
  const Replayed a = run(m, compact, c, cost), b = run(m, full, c, cost);
  EXPECT_EQ(a.result.iteration, b.result.iteration);
  // The stage with 7 layers computes 7/5 of the one with 5, less the embedding and head.
  EXPECT_GT(a.result.copies[1].compute, a.result.copies[0].compute);
  // Unlike the even split of the same degrees.
  const Plan even = load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 4\ndata_parallel: 2\nmicro_batch_size: 1\n"
      "global_batch_size: 16\ndevices: \"0-7,12-15,8-11\"\n",
      "e.yaml", m, c);
  EXPECT_EQ(even.replicas[0].stages[1].layers, 6);
  EXPECT_NE(run(m, even, c, cost).result.iteration, a.result.iteration);

  const platform::Cluster one = cluster("dgx-a100", 1);
  auto err = [&](const std::string& y) {
    return plan_error("pipeline_parallel: 4\ntensor_parallel: 2\nglobal_batch_size: 8\n" + y, m,
                      one);
  };
  EXPECT_EQ(err("stage_layers: [5, 7, 7]\n"),
            "p.yaml:4: stage_layers: expected a list of 4 layer counts, one per pipeline stage "
            "(got 3 entries)");
  EXPECT_EQ(err("stage_layers: [5, 7, 7, 6]\n"),
            "p.yaml:4: stage_layers: the layers add up to 25, but gpt3-1.3b has 24");
  EXPECT_EQ(err("stage_layers: [5, 0, 7, 12]\n"),
            "p.yaml:4: stage_layers[1]: expected an integer from 1 to 16384, got \"0\"");
  EXPECT_EQ(err("stage_layers: [5, x, 7, 12]\n"),
            "p.yaml:4: stage_layers[1]: expected an integer from 1 to 16384, got \"x\"");
  EXPECT_EQ(err("stage_layers: 24\n"),
            "p.yaml:4: stage_layers: expected a list of 4 layer counts, one per pipeline stage "
            "(got no list)");
  EXPECT_EQ(err("schedule: interleaved\ninterleave: 2\nstage_layers: [6, 6, 6, 6]\n"),
            "p.yaml:6: stage_layers: the interleaved schedule splits the layers evenly over its "
            "model chunks; give stage_layers without interleave");
  EXPECT_EQ(plan_error("stage_layers: [24]\nreplicas:\n  - micro_batches: 2\n    stages:\n"
                       "      - {layers: 24, devices: \"0\"}\n",
                       m, one),
            "p.yaml:1: stage_layers: give either uniform degrees or replicas, not both");
}

TEST(LayerOps, MegatronSoftmaxRunsUnfusedWhereItsKernelCannot) {
  // megatron-lm-2021's `masked_softmax` (FusedScaleMaskSoftmax.is_kernel_available): 16-bit
  // scores of 17 to 2048 keys, queries and micro-batch x local heads in multiples of 4, a block's
  // rows (4 past 128 keys, 8 up to 128) dividing the queries (the heads' count when causal).
  ModelConfig m = small_gpt(4);
  m.heads = 16;
  m.causal = false;
  m.dropout = 0.1;
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 2048;
  s.precision = Precision::fp16;
  s.flash_attention = false;
  s.softmax.given = true;
  s.softmax.fused_up_to = 2048;
  s.softmax.unfused_fp32 = true;
  EXPECT_TRUE(fused_softmax_runs(m, s, 16));
  EXPECT_FALSE(fused_softmax_runs(m, s, 2));  // tp8 at micro-batch 1: 2 heads a rank
  EXPECT_TRUE(fused_softmax_runs(m, s, 4));
  s.sequence = 4096;
  EXPECT_FALSE(fused_softmax_runs(m, s, 16));  // past the kernel's 2048 keys
  s.softmax.fused_up_to = 0;
  EXPECT_TRUE(fused_softmax_runs(m, s, 16));  // no limit
  s.sequence = 68;  // 128-key kernel: 8 rows a block, and 68 queries are no multiple of 8
  EXPECT_FALSE(fused_softmax_runs(m, s, 16));
  s.sequence = 64;
  EXPECT_TRUE(fused_softmax_runs(m, s, 16));
  m.causal = true;  // causal: the rows (8) must divide micro-batch x heads
  EXPECT_FALSE(fused_softmax_runs(m, s, 4));
  EXPECT_TRUE(fused_softmax_runs(m, s, 8));
  s.sequence = 2048;
  s.precision = Precision::fp32;
  EXPECT_FALSE(fused_softmax_runs(m, s, 16));
  s.softmax.given = false;  // a framework that does not say: fused everywhere
  EXPECT_TRUE(fused_softmax_runs(m, s, 16));

  // The attention kernels' bytes: 16 passes more forward and 17 backward over the 16-bit scores
  // (a s^2 b elements, 2 bytes each) where the fp32 path runs; 4 either way over fp32 scores; 2
  // in the plan's precision. The FLOPs are the same.
  auto attention = [](const std::vector<Step>& steps) {
    for (const Step& st : steps)
      if (st.op.kind == OpKind::attention_forward || st.op.kind == OpKind::attention_backward)
        return st.op;
    return Op{};
  };
  m.causal = false;
  s.softmax.given = true;
  s.softmax.fused_up_to = 2048;
  s.tensor_parallel = 8;  // 2 heads a rank
  for (Precision p : {Precision::fp16, Precision::fp32}) {
    s.precision = p;
    const double e = p == Precision::fp32 ? 4 : 2;
    const double scores = e * 2 * 2048.0 * 2048;
    LayerShape fused = s;
    fused.softmax.given = false;
    for (bool fp32 : {true, false}) {
      s.softmax.unfused_fp32 = fp32;
      const double fwd = fp32 ? (e == 2 ? 16 : 4) : 2, bwd = fp32 ? (e == 2 ? 17 : 4) : 2;
      const Op a = attention(layer_forward(m, s)), f = attention(layer_forward(m, fused));
      const Op ab = attention(layer_backward(m, s)), fb = attention(layer_backward(m, fused));
      EXPECT_DOUBLE_EQ(a.bytes - f.bytes, fwd * scores) << e << fp32;
      EXPECT_DOUBLE_EQ(ab.bytes - fb.bytes, bwd * scores) << e << fp32;
      EXPECT_EQ(a.flops, f.flops);
      EXPECT_EQ(ab.flops, fb.flops);
    }
  }
  // Memory: a softmax taken in fp32 from 16-bit scores keeps its output in fp32, 2 bytes more an
  // element than the fused kernel's 16-bit one.
  s.precision = Precision::fp16;
  s.softmax.unfused_fp32 = true;
  LayerShape fused = s;
  fused.softmax.given = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::none) -
                       layer_activation_bytes(m, fused, Recompute::none),
                   2.0 * 2 * 2048.0 * 2048);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, s, Recompute::full),
                   layer_activation_bytes(m, fused, Recompute::full));
}

}  // namespace
}  // namespace hetsim::workload
