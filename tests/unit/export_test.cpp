// hetsim export's launchers (sim/launch/): the Korthikanti GPT-3 175B plan gives exactly
// Megatron-LM's flags; exported flags parse back to the plan's degrees, batch, schedule, recompute,
// ZeRO stage and precision; DeepSpeed's batch arithmetic holds; heterogeneous plans and rank orders
// say what the framework cannot express.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "sim/core/error.h"
#include "sim/launch/launcher.h"

namespace hetsim::launch {
namespace {

// A model, cluster and plan, as `hetsim export` loads them.
struct Inputs {
  workload::ModelConfig model;
  std::unique_ptr<platform::Cluster> cluster;
  workload::Plan plan;
};

Inputs inputs(const std::string& model, const std::string& cluster, long nodes,
              const std::string& plan_text) {
  Inputs in;
  in.model = workload::load_model(model);
  config::ClusterOptions o;
  if (nodes > 0) o.nodes = nodes;
  in.cluster = std::make_unique<platform::Cluster>(config::load_cluster(cluster, o));
  in.plan = workload::load_plan_text(plan_text, "plan.yaml", in.model, *in.cluster);
  return in;
}

Inputs inputs_from_file(const std::string& model, const std::string& cluster, long nodes,
                        const std::string& plan_file) {
  Inputs in;
  in.model = workload::load_model(model);
  config::ClusterOptions o;
  if (nodes > 0) o.nodes = nodes;
  in.cluster = std::make_unique<platform::Cluster>(config::load_cluster(cluster, o));
  in.plan =
      workload::load_plan(std::string(HETSIM_SOURCE_DIR "/") + plan_file, in.model, *in.cluster);
  return in;
}

Launch export_to(const Inputs& in, const std::string& framework) {
  return find_launcher(framework).make({&in.model, &in.plan, in.cluster.get()});
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += a + "\n";
  return s;
}

// ---- Golden: Korthikanti et al.'s GPT-3 175B on 64 A100s -----------------------------------

// The plan names the paper's era (framework: megatron-lm-2021): gradients reduced after the
// backward pass, so no --overlap-grad-reduce.
TEST(MegatronExport, Korthikanti175bSelectiveGivesExactlyMegatronsFlags) {
  const Inputs in = inputs_from_file("korthikanti-175b", "dgx-a100", 8,
                                     "experiments/korthikanti/175b-selective.yaml");
  const Launch l = export_to(in, "megatron");
  EXPECT_EQ(joined(l.command),
            "torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py"
            " --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8"
            " --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel"
            " --micro-batch-size 1 --global-batch-size 64 --seq-length 2048"
            " --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --ffn-hidden-size 49152"
            " --max-position-embeddings 2048 --position-embedding-type learned_absolute"
            " --vocab-size 51200 --recompute-granularity selective --bf16"
            " --ddp-bucket-size 40000000");
  EXPECT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  EXPECT_TRUE(l.env.empty());
  EXPECT_TRUE(l.hosts.empty());
  EXPECT_TRUE(l.approximation.empty());
}

// ---- Round trip: the exported flags parsed back --------------------------------------------

// Megatron-LM's command line as flag -> values (a flag without values maps to none).
struct Parsed {
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& f) const { return flags.count(f) > 0; }
  long num(const std::string& f) const {
    const auto it = flags.find(f);
    if (it == flags.end() || it->second.size() != 1) {
      ADD_FAILURE() << "flag " << f << " missing or without one value";
      return -1;
    }
    return std::stol(it->second[0]);
  }
  std::string str(const std::string& f) const {
    const auto it = flags.find(f);
    return it == flags.end() || it->second.empty() ? "" : it->second[0];
  }
};

// torchrun's own flags come before the script; Megatron-LM's after it.
Parsed parse_megatron(const std::vector<std::string>& argv, Parsed* launcher = nullptr) {
  Parsed out, before;
  Parsed* target = &before;
  std::string flag;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 3 && a.compare(a.size() - 3, 3, ".py") == 0) {
      target = &out;
      flag.clear();
    } else if (a.rfind("--", 0) == 0) {
      flag = a;
      EXPECT_FALSE(target->has(flag)) << "flag " << flag << " given twice";
      target->flags[flag];
    } else {
      EXPECT_FALSE(flag.empty()) << "value " << a << " without a flag";
      target->flags[flag].push_back(a);
    }
  }
  if (launcher) *launcher = before;
  return out;
}

// What the flags say, in the plan's terms.
struct Derived {
  int tp = 0, pp = 0, dp = 0, interleave = 1, zero = 0;
  long micro_batch = 0, global_batch = 0, sequence = 0;
  workload::Schedule schedule = workload::Schedule::one_f_one_b;
  workload::Recompute recompute = workload::Recompute::none;
  workload::Precision precision = workload::Precision::fp32;
};

Derived derive(const std::vector<std::string>& argv) {
  Parsed launcher;
  const Parsed p = parse_megatron(argv, &launcher);
  Derived d;
  d.tp = static_cast<int>(p.num("--tensor-model-parallel-size"));
  d.pp = static_cast<int>(p.num("--pipeline-model-parallel-size"));
  const long world = launcher.num("--nnodes") * launcher.num("--nproc-per-node");
  d.dp = static_cast<int>(world / (d.tp * d.pp));
  if (p.has("--num-layers-per-virtual-pipeline-stage")) {
    d.schedule = workload::Schedule::interleaved;
    const long layers = p.num("--num-layers") + p.has("--account-for-embedding-in-pipeline-split") +
                        p.has("--account-for-loss-in-pipeline-split");
    d.interleave =
        static_cast<int>(layers / d.pp / p.num("--num-layers-per-virtual-pipeline-stage"));
  }
  d.micro_batch = p.num("--micro-batch-size");
  d.global_batch = p.num("--global-batch-size");
  d.sequence = p.num("--seq-length");
  const std::string r = p.str("--recompute-granularity");
  if (r == "selective") d.recompute = workload::Recompute::selective;
  if (r == "full") {
    d.recompute = workload::Recompute::full;
    EXPECT_EQ(p.str("--recompute-method"), "uniform");
    EXPECT_EQ(p.num("--recompute-num-layers"), 1);
  }
  if (p.has("--use-distributed-optimizer")) d.zero = 1;
  if (p.has("--bf16")) d.precision = workload::Precision::bf16;
  if (p.has("--fp16")) d.precision = workload::Precision::fp16;
  if (p.has("--fp8-format")) d.precision = workload::Precision::fp8;  // over --bf16, as TE runs
  return d;
}

struct RoundTripCase {
  const char* name;
  const char* model;
  const char* cluster;
  long nodes;
  const char* plan;  // YAML text, or a file under the source tree when it ends in .yaml
};

const RoundTripCase kRoundTrip[] = {
    {"Uniform1F1B", "gpt3-1.3b", "dgx-a100", 2,
     "tensor_parallel: 2\npipeline_parallel: 2\nmicro_batch_size: 2\nglobal_batch_size: 64\n"
     "sequence_length: 2048\nschedule: 1f1b\n"},
    {"InterleavedFullRecompute", "korthikanti-175b", "dgx-a100", 8,
     "experiments/korthikanti/175b-full.yaml"},
    {"InterleavedSelectiveSequenceParallel", "korthikanti-175b", "dgx-a100", 8,
     "experiments/korthikanti/175b-selective.yaml"},
    {"Zero1DataParallel", "gpt3-1.3b", "dgx-a100", 1,
     "micro_batch_size: 4\nglobal_batch_size: 128\nzero_stage: 1\nrecompute: full\n"},
    {"Fp16OnV100", "gpt3-1.3b", "dgx1-v100", 2,
     "tensor_parallel: 4\npipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 32\n"
     "recompute: selective\n"},
    {"Fp16UnfusedBiasDropout", "gpt3-1.3b", "dgx1-v100", 1,
     "tensor_parallel: 2\nmicro_batch_size: 2\nglobal_batch_size: 16\nprecision: fp16\n"
     "bias_dropout_fusion: false\n"},
    {"GqaLlamaInterleavedGroup", "llama3-8b", "dgx-h100", 2,
     "tensor_parallel: 2\npipeline_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 16\n"
     "schedule: interleaved\ninterleave: 2\nmicrobatch_group: 8\nsequence_length: 8192\n"},
    {"Fp8TpCommOverlap", "llama3-70b", "dgx-h100", 8,
     "tensor_parallel: 4\npipeline_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 128\n"
     "schedule: interleaved\ninterleave: 5\nsequence_length: 8192\nsequence_parallel: true\n"
     "tp_comm_overlap: true\nprecision: fp8\nzero_stage: 1\n"},
};

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

class MegatronRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(MegatronRoundTrip, ParsedFlagsGiveThePlansDegreesBatchScheduleRecomputeZeroPrecision) {
  const RoundTripCase& c = GetParam();
  const std::string plan = c.plan;
  const Inputs in = plan.size() > 5 && plan.compare(plan.size() - 5, 5, ".yaml") == 0
                        ? inputs_from_file(c.model, c.cluster, c.nodes, plan)
                        : inputs(c.model, c.cluster, c.nodes, plan);
  const Launch l = export_to(in, "megatron");
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  const Derived d = derive(l.command);
  const workload::Plan& p = in.plan;
  EXPECT_EQ(d.tp, p.tensor_parallel);
  EXPECT_EQ(d.pp, p.pipeline_parallel);
  EXPECT_EQ(d.dp, p.data_parallel);
  EXPECT_EQ(d.interleave, p.interleave);
  EXPECT_EQ(d.micro_batch, p.micro_batch_size);
  EXPECT_EQ(d.global_batch, p.global_batch_size);
  EXPECT_EQ(d.sequence, p.sequence_length);
  EXPECT_EQ(workload::to_string(d.schedule), workload::to_string(p.schedule));
  EXPECT_EQ(workload::to_string(d.recompute), workload::to_string(p.recompute));
  EXPECT_EQ(d.zero, p.zero_stage);
  EXPECT_EQ(workload::to_string(d.precision), workload::to_string(p.precision));
  const Parsed flags = parse_megatron(l.command);
  EXPECT_EQ(flags.has("--sequence-parallel"), p.sequence_parallel);
  EXPECT_EQ(flags.has("--tp-comm-overlap"), p.kernels.tp_comm_overlap);
  EXPECT_EQ(flags.has("--no-bias-dropout-fusion"), !p.kernels.bias_dropout_fusion);
  EXPECT_EQ(flags.num("--num-layers"), in.model.layers);
  EXPECT_EQ(flags.num("--num-attention-heads"), in.model.heads);
  EXPECT_EQ(flags.has("--group-query-attention"), in.model.kv_heads != in.model.heads);
  if (in.model.kv_heads != in.model.heads) {
    EXPECT_EQ(flags.num("--num-query-groups"), in.model.kv_heads);
  }
  if (p.microbatch_group > 0) {
    EXPECT_EQ(flags.num("--microbatch-group-size-per-virtual-pipeline-stage"), p.microbatch_group);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, MegatronRoundTrip, ::testing::ValuesIn(kRoundTrip),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MegatronExport, Fp16OnV100KeepsFp32MainGradients) {
  const Inputs in =
      inputs("gpt3-1.3b", "dgx1-v100", 1, "micro_batch_size: 1\nglobal_batch_size: 8\n");
  const Parsed p = parse_megatron(export_to(in, "megatron").command);
  EXPECT_TRUE(p.has("--fp16"));
  EXPECT_FALSE(p.has("--bf16"));
  EXPECT_TRUE(p.has("--accumulate-allreduce-grads-in-fp32"));
}

TEST(MegatronExport, RecomputeLayersIsTheBlockMethod) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                           "recompute: full\nrecompute_layers: 5\n");
  const Launch l = export_to(in, "megatron");
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  const Parsed p = parse_megatron(l.command);
  EXPECT_EQ(p.str("--recompute-granularity"), "full");
  EXPECT_EQ(p.str("--recompute-method"), "block");
  EXPECT_EQ(p.num("--recompute-num-layers"), 5);
  // Megatron v1.1.5 (DeepSpeed) checkpoints every layer: said, and exported so.
  const Launch d = export_to(in, "deepspeed");
  ASSERT_EQ(d.unsupported.size(), 1u) << lines(d.unsupported);
  EXPECT_EQ(d.unsupported[0].rfind("recompute_layers: ", 0), 0u) << d.unsupported[0];
}

TEST(MegatronExport, LlamaShapeFlagsFollowTheModel) {
  const Inputs in = inputs("llama3-8b", "dgx-h100", 1,
                           "tensor_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 1\n");
  const Parsed p = parse_megatron(export_to(in, "megatron").command);
  EXPECT_EQ(p.str("--position-embedding-type"), "rope");
  EXPECT_EQ(p.str("--normalization"), "RMSNorm");
  EXPECT_TRUE(p.has("--swiglu"));
  EXPECT_TRUE(p.has("--untie-embeddings-and-output-weights"));
  EXPECT_TRUE(p.has("--disable-bias-linear"));
  EXPECT_EQ(p.num("--vocab-size"), 128256);
}

// Qwen2's query/key/value biases and Qwen3's per-head query/key norms are Megatron-LM flags;
// layers it has no module for (Falcon's parallel attention, Gemma 2's sandwich norms and sliding
// windows) are said, not exported as something else.
TEST(MegatronExport, LayerLayoutsAreFlagsOrSaidToBeMissing) {
  const std::string plan = "tensor_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 2\n";
  const std::string hf = std::string(HETSIM_SOURCE_DIR) + "/tests/data/hf/";
  const Parsed qwen2 = parse_megatron(
      export_to(inputs(hf + "qwen2-7b.json", "dgx-a100", 1, plan), "megatron").command);
  EXPECT_TRUE(qwen2.has("--add-qkv-bias"));
  EXPECT_FALSE(qwen2.has("--qk-layernorm"));
  const Launch qwen3 = export_to(inputs(hf + "qwen3-8b.json", "dgx-a100", 1, plan), "megatron");
  EXPECT_TRUE(qwen3.unsupported.empty()) << lines(qwen3.unsupported);
  EXPECT_TRUE(parse_megatron(qwen3.command).has("--qk-layernorm"));
  EXPECT_EQ(lines(export_to(inputs(hf + "falcon-7b.json", "dgx-a100", 1,
                                   "micro_batch_size: 1\nglobal_batch_size: 8\n"),
                            "megatron")
                      .unsupported),
            "falcon-7b's parallel attention and MLP (parallel_attention): Megatron-LM has no such "
            "layer\n");
  EXPECT_EQ(
      lines(export_to(inputs(hf + "gemma-2-9b.json", "dgx-a100", 1, plan), "megatron").unsupported),
      "gemma-2-9b's norms after the blocks (norm_placement sandwich): Megatron-LM has no such "
      "layer\n"
      "gemma-2-9b's local attention (attention_window): Megatron-LM has no such layer\n");
}

TEST(MegatronExport, AfterBackwardReductionDropsOverlapGradReduce) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "micro_batch_size: 1\nglobal_batch_size: 8\n"
                           "gradient_reduction: after_backward\n");
  EXPECT_FALSE(parse_megatron(export_to(in, "megatron").command).has("--overlap-grad-reduce"));
}

TEST(MegatronExport, FewerKeyValueHeadsThanTensorParallelIsNotExpressible) {
  // hetsim replicates Llama 3 8B's 8 key/value heads over 16 ranks; Megatron divides them.
  const Inputs in = inputs("llama3-8b", "dgx-h100", 2,
                           "tensor_parallel: 16\nmicro_batch_size: 1\nglobal_batch_size: 1\n");
  EXPECT_EQ(lines(export_to(in, "megatron").unsupported),
            "tensor parallel 16 with 8 key/value heads: Megatron-LM needs the key/value heads "
            "divisible by the tensor-parallel degree\n");
}

// ---- Layer splits ----------------------------------------------------------------------------

// Llama 3 405B (Meta, 2024): 126 layers over 16 stages x 8 chunks; the first chunk holds only
// the embedding and the last only the head, as Megatron-LM counts them as layers.
TEST(MegatronExport, Llama3InterleavedSplitCountsEmbeddingAndLossAsLayers) {
  const Inputs in = inputs_from_file("llama3-405b", "dgx-h100", 2048,
                                     "experiments/llama3-405b/llama3-405b-16384.yaml");
  const Launch l = export_to(in, "megatron");
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  const Parsed p = parse_megatron(l.command);
  EXPECT_EQ(p.num("--num-layers-per-virtual-pipeline-stage"), 1);
  EXPECT_TRUE(p.has("--account-for-embedding-in-pipeline-split"));
  EXPECT_TRUE(p.has("--account-for-loss-in-pipeline-split"));
  EXPECT_TRUE(p.has("--use-distributed-optimizer"));
  EXPECT_EQ(derive(l.command).interleave, 8);
}

workload::ModelConfig gpt_with_layers(int layers) {
  return workload::load_model_yaml_text(
      "name: m" + std::to_string(layers) + "\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: 16\nvocab: 50304\nsequence: 1024\nactivation: gelu\n"
          "norm: layernorm\nposition: learned\ntied_embeddings: true\ncausal: true\nbias: true\n",
      "m.yaml");
}

Launch export_four_stages(int layers) {
  const workload::ModelConfig m = gpt_with_layers(layers);
  config::ClusterOptions o;
  o.nodes = 1;
  const platform::Cluster c(config::load_cluster("dgx-a100", o));
  const workload::Plan plan = workload::load_plan_text(
      "pipeline_parallel: 4\ntensor_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n",
      "plan.yaml", m, c);
  return megatron_launcher().make({&m, &plan, &c});
}

TEST(MegatronExport, UnevenStagesCountEmbeddingAndLossAsLayers) {
  // 42 layers on 4 stages: hetsim gives 10/11/11/10, Megatron-LM the same counting the embedding
  // and the loss as layers (44 / 4 = 11 each).
  const Launch l = export_four_stages(42);
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  const Parsed p = parse_megatron(l.command);
  EXPECT_TRUE(p.has("--account-for-embedding-in-pipeline-split"));
  EXPECT_TRUE(p.has("--account-for-loss-in-pipeline-split"));
  EXPECT_FALSE(p.has("--num-layers-per-virtual-pipeline-stage"));
}

TEST(MegatronExport, SplitWithoutAMegatronLayoutIsNamedWithItsClosest) {
  // 41 layers on 4 stages: hetsim gives 10/11/10/10, which no Megatron-LM flag gives.
  const Launch l = export_four_stages(41);
  EXPECT_EQ(lines(l.unsupported),
            "the plan splits the layers 10/11/10/10 over 4 pipeline stages: Megatron-LM splits "
            "them evenly, with only the first and last stage different (exported as "
            "11/10/10/10)\n");
  EXPECT_EQ(parse_megatron(l.command).num("--decoder-first-pipeline-num-layers"), 11);
}

TEST(MegatronExport, InterleavedSplitWithoutAMegatronLayoutFallsBackTo1F1B) {
  // GPT-3 1.3B's 24 layers over 4 stages x 4 chunks: hetsim gives the 8 middle chunks 2 layers
  // and the others 1; Megatron-LM's interleaving needs equal chunks (up to the embedding and loss).
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "pipeline_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                           "schedule: interleaved\ninterleave: 4\n");
  const Launch l = export_to(in, "megatron");
  EXPECT_EQ(lines(l.unsupported),
            "the plan splits the layers 1/1/1/1/2/2/2/2/2/2/2/2/1/1/1/1 over 16 virtual pipeline "
            "stages: Megatron-LM splits them evenly, with only the first and last stage "
            "different; exported without interleaving (exported as 6/6/6/6)\n");
  const Parsed p = parse_megatron(l.command);
  EXPECT_FALSE(p.has("--num-layers-per-virtual-pipeline-stage"));
  EXPECT_EQ(derive(l.command).schedule, workload::Schedule::one_f_one_b);
}

// The default study's plan is heterogeneous, yet Megatron-LM can run it: the same stages in both
// replicas, one tensor-parallel degree, and a 27/13 split given as the first stage's size.
TEST(MegatronExport, DefaultStudyPlanIsExpressibleWithAFirstStageSize) {
  const Inputs in = inputs_from_file("llama2-13b", "mixed-h100-a100", 0,
                                     "experiments/default/llama2-13b-mixed.yaml");
  const Launch l = export_to(in, "megatron");
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  const Parsed p = parse_megatron(l.command);
  EXPECT_EQ(p.num("--decoder-first-pipeline-num-layers"), 27);
  EXPECT_FALSE(p.has("--decoder-last-pipeline-num-layers"));
  const Derived d = derive(l.command);
  EXPECT_EQ(d.tp, 8);
  EXPECT_EQ(d.pp, 2);
  EXPECT_EQ(d.dp, 2);
  EXPECT_EQ(d.global_batch, 32);
  EXPECT_TRUE(l.hosts.empty());
}

// ---- Heterogeneous plans ---------------------------------------------------------------------

TEST(MegatronExport, HeterogeneousPlanListsEachInexpressibleFeature) {
  const Inputs in =
      inputs_from_file("llama2-13b", "mixed-h100-a100", 0, "tests/data/plans/export_hetero.yaml");
  const Launch l = export_to(in, "megatron");
  EXPECT_EQ(lines(l.unsupported),
            "stage 2 has tensor parallel 2 where stage 0 has 4: Megatron-LM needs one "
            "tensor-parallel degree\n"
            "stage 3 has tensor parallel 2 where stage 0 has 4: Megatron-LM needs one "
            "tensor-parallel degree\n"
            "replica 1 runs 12 micro-batches where replica 0 runs 20: Megatron-LM gives every "
            "data-parallel replica the same share of the batch\n"
            "the plan splits the layers 14/12/8/6 over 4 pipeline stages: Megatron-LM splits them "
            "evenly, with only the first and last stage different (exported as 14/10/10/6)\n");
  EXPECT_EQ(l.approximation,
            "closest uniform plan: tensor parallel 4, pipeline parallel 4, data parallel 2 (32 "
            "GPUs), 16 micro-batches of 1 per replica (global batch 32)");
  const Derived d = derive(l.command);
  EXPECT_EQ(d.tp, 4);
  EXPECT_EQ(d.pp, 4);
  EXPECT_EQ(d.dp, 2);
  EXPECT_EQ(d.global_batch, 32);
}

TEST(DeepSpeedExport, HeterogeneousPlanAlsoNamesThePipelineSplitAndSelectiveRecompute) {
  const Inputs in =
      inputs_from_file("llama2-13b", "mixed-h100-a100", 0, "tests/data/plans/export_hetero.yaml");
  const Launch l = export_to(in, "deepspeed");
  const std::string text = lines(l.unsupported);
  EXPECT_NE(text.find("DeepSpeed needs one tensor-parallel degree"), std::string::npos) << text;
  EXPECT_NE(text.find("recompute selective"), std::string::npos) << text;
  EXPECT_NE(text.find("splits the layers 14/12/8/6"), std::string::npos) << text;
}

// The loader refuses replicas whose stages differ (gradients are reduced stage by stage), but a
// plan built in code may have them: each difference gets its line.
TEST(MegatronExport, ReplicasWithOtherStagesAreNamed) {
  Inputs in = inputs_from_file("llama2-13b", "mixed-h100-a100", 0,
                               "experiments/default/llama2-13b-mixed.yaml");
  // Replica 1: three stages (20 + 13 + 7 layers) where replica 0 has two (27 + 13).
  workload::ReplicaPlan& r1 = in.plan.replicas[1];
  r1.stages[0].layers = 20;
  r1.stages.push_back(r1.stages[1]);
  r1.stages[2].first_layer = 33;
  r1.stages[2].layers = 7;
  r1.stages[2].devices = {28, 29, 30, 31, 0, 1, 2, 3};
  const Launch l = export_to(in, "megatron");
  EXPECT_EQ(lines(l.unsupported),
            "replica 1 has 3 stages where replica 0 has 2: Megatron-LM needs one pipeline degree\n"
            "replica 1 stage 0 holds 20 layers where replica 0's holds 27: Megatron-LM splits the "
            "layers the same way in every replica\n");
  EXPECT_EQ(l.approximation,
            "closest uniform plan: tensor parallel 8, pipeline parallel 2, data parallel 2 (32 "
            "GPUs), 16 micro-batches of 1 per replica (global batch 32)");
}

// ---- Rank order ------------------------------------------------------------------------------

TEST(RankOrder, SwappedNodesGiveTheHostOrder) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 2,
                           "tensor_parallel: 8\ndevices: \"8-15,0-7\"\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "megatron");
  EXPECT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  ASSERT_EQ(l.hosts.size(), 2u);
  EXPECT_EQ(l.hosts[0].node, "node1");
  EXPECT_EQ(l.hosts[1].node, "node0");
  EXPECT_TRUE(l.env.empty());
}

TEST(RankOrder, DeepSpeedGivesTheOrderAsIncludeAndHostfile) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 2,
                           "tensor_parallel: 4\ndevices: \"12-15,4-7\"\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "deepspeed");
  EXPECT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  EXPECT_TRUE(l.env.empty());
  EXPECT_EQ(joined({l.command.begin(), l.command.begin() + 6}),
            "deepspeed --hostfile hostfile --include node1:4,5,6,7@node0:4,5,6,7 pretrain_gpt.py");
}

TEST(RankOrder, HeterogeneousReplicasOnOtherNodesGiveTheHostOrder) {
  // The default study's plan with the replicas' H100 nodes swapped: rank 0 is on node1.
  const Inputs in = inputs("llama2-13b", "mixed-h100-a100", 0,
                           "micro_batch_size: 1\nsequence_length: 4096\nreplicas:\n"
                           "  - micro_batches: 16\n    stages:\n"
                           "      - {layers: 27, tensor_parallel: 8, devices: \"8-15\"}\n"
                           "      - {layers: 13, tensor_parallel: 8, devices: \"16-23\"}\n"
                           "  - micro_batches: 16\n    stages:\n"
                           "      - {layers: 27, tensor_parallel: 8, devices: \"0-7\"}\n"
                           "      - {layers: 13, tensor_parallel: 8, devices: \"24-31\"}\n");
  const Launch l = export_to(in, "megatron");
  EXPECT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  std::string order;
  for (const HostRanks& h : l.hosts) order += h.node + " ";
  EXPECT_EQ(order, "node1 node0 node2 node3 ");
}

TEST(RankOrder, PermutedLocalGpusGiveCudaVisibleDevices) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "tensor_parallel: 4\ndevices: \"4-7\"\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "megatron");
  ASSERT_EQ(l.env.size(), 1u);
  EXPECT_EQ(l.env[0].first, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(l.env[0].second, "4,5,6,7");
  const Parsed launcher = [&] {
    Parsed before;
    parse_megatron(l.command, &before);
    return before;
  }();
  EXPECT_EQ(launcher.num("--nnodes"), 1);
  EXPECT_EQ(launcher.num("--nproc-per-node"), 4);
}

TEST(RankOrder, RanksSplitAcrossNodesUnevenlyCannotBeLaunched) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 2,
                           "tensor_parallel: 2\ndevices: \"0-5,8-9\"\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "megatron");
  ASSERT_EQ(l.unsupported.size(), 1u);
  EXPECT_EQ(l.unsupported[0],
            "the plan's rank order (node0 x6, node1 x2) does not give each node one block of "
            "equally many consecutive ranks: torchrun's launcher starts the same number of ranks "
            "on every node, node by node");
}

// ---- DeepSpeed -------------------------------------------------------------------------------

TEST(DeepSpeedExport, TrainBatchIsMicroTimesAccumulationTimesDataParallel) {
  for (const char* plan :
       {"tensor_parallel: 2\npipeline_parallel: 2\nmicro_batch_size: 2\nglobal_batch_size: 64\n",
        "micro_batch_size: 4\nglobal_batch_size: 256\nzero_stage: 2\n",
        "tensor_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 6\nzero_stage: 3\n"}) {
    const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 2, plan);
    const Launch l = export_to(in, "deepspeed");
    ASSERT_TRUE(l.unsupported.empty()) << plan << lines(l.unsupported);
    const Parsed p = parse_megatron(l.command);
    const long tp = p.num("--tensor-model-parallel-size");
    const long pp =
        p.has("--pipeline-model-parallel-size") ? p.num("--pipeline-model-parallel-size") : 1;
    EXPECT_EQ(pp == 1, p.has("--no-pipeline-parallel"));
    const long dp = 16 / (tp * pp);
    const auto& c = l.config;
    EXPECT_EQ(c["train_batch_size"].get<long>(), in.plan.global_batch_size) << plan;
    EXPECT_EQ(c["train_batch_size"].get<long>(), c["train_micro_batch_size_per_gpu"].get<long>() *
                                                     c["gradient_accumulation_steps"].get<long>() *
                                                     dp)
        << plan;
    EXPECT_EQ(c["zero_optimization"]["stage"].get<int>(), in.plan.zero_stage) << plan;
    EXPECT_EQ(p.num("--zero-stage"), in.plan.zero_stage) << plan;
    EXPECT_EQ(p.str("--deepspeed_config"), "ds_config.json");
  }
}

TEST(DeepSpeedExport, BucketInElementsPrecisionAndCheckpointing) {
  const Inputs in = inputs("gpt3-1.3b", "dgx1-v100", 1,
                           "micro_batch_size: 1\nglobal_batch_size: 8\nrecompute: full\n"
                           "bucket_size: 100MB\n");
  const Launch l = export_to(in, "deepspeed");
  ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
  EXPECT_EQ(l.config["zero_optimization"]["reduce_bucket_size"].get<long>(), 25000000);
  EXPECT_TRUE(l.config["fp16"]["enabled"].get<bool>());
  EXPECT_FALSE(l.config.contains("bf16"));
  EXPECT_TRUE(l.config.contains("activation_checkpointing"));
  const Parsed p = parse_megatron(l.command);
  EXPECT_TRUE(p.has("--checkpoint-activations"));
  EXPECT_TRUE(p.has("--deepspeed-activation-checkpointing"));
}

TEST(DeepSpeedExport, PipelineWithZero2OrInterleavingIsNotExpressible) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "pipeline_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                           "zero_stage: 2\nschedule: interleaved\ninterleave: 2\n");
  const Launch l = export_to(in, "deepspeed");
  const std::string text = lines(l.unsupported);
  EXPECT_NE(text.find("schedule interleaved: DeepSpeed's pipeline engine runs its own 1F1B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("zero_stage 2 with pipeline parallel 4"), std::string::npos) << text;
}

TEST(DeepSpeedExport, FlagKeysTakeMegatronDeepSpeedsFlagsFromThePlanKeysTable) {
  // The DT-FM fork's --no-bias-dropout-fusion and sequence parallelism pass as Megatron-DeepSpeed's
  // flags; --tp-comm-overlap has none there, and is listed as unsupported.
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "tensor_parallel: 2\nsequence_parallel: true\ntp_comm_overlap: true\n"
                           "bias_dropout_fusion: false\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "deepspeed");
  const Parsed p = parse_megatron(l.command);
  EXPECT_TRUE(p.has("--sequence-parallel"));
  EXPECT_TRUE(p.has("--no-bias-dropout-fusion"));
  EXPECT_FALSE(p.has("--tp-comm-overlap"));
  EXPECT_EQ(lines(l.unsupported),
            lines({"tp_comm_overlap: Megatron-DeepSpeed has no --tp-comm-overlap (Transformer "
                   "Engine's userbuffers); exported without it"}));
  // The defaults pass none of them.
  const Launch plain =
      export_to(inputs("gpt3-1.3b", "dgx-a100", 1, "micro_batch_size: 1\nglobal_batch_size: 8\n"),
                "deepspeed");
  const Parsed q = parse_megatron(plain.command);
  EXPECT_FALSE(q.has("--sequence-parallel"));
  EXPECT_FALSE(q.has("--no-bias-dropout-fusion"));
  EXPECT_TRUE(plain.unsupported.empty()) << lines(plain.unsupported);
}

// ---- torchrun --------------------------------------------------------------------------------

TEST(TorchrunExport, ZeroStageChoosesTheFsdpShardingStrategy) {
  const std::map<int, std::string> expected = {{2, "SHARD_GRAD_OP"}, {3, "FULL_SHARD"}};
  for (int zero = 0; zero <= 3; ++zero) {
    const Inputs in = inputs(
        "gpt3-1.3b", "dgx-a100", 1,
        "micro_batch_size: 2\nglobal_batch_size: 64\nzero_stage: " + std::to_string(zero) + "\n");
    const Launch l = export_to(in, "torchrun");
    ASSERT_TRUE(l.unsupported.empty()) << lines(l.unsupported);
    if (zero >= 2) {
      EXPECT_EQ(l.config["wrapper"], "FullyShardedDataParallel");
      EXPECT_EQ(l.config["sharding_strategy"], expected.at(zero));
      // Prefetched a layer ahead, as the replay gathers them.
      EXPECT_EQ(l.config.contains("backward_prefetch"), zero == 3);
      if (zero == 3) {
        EXPECT_EQ(l.config["backward_prefetch"], "BACKWARD_PRE");
        EXPECT_EQ(l.config["forward_prefetch"], true);
      }
    } else {
      EXPECT_EQ(l.config["wrapper"], "DistributedDataParallel");
      EXPECT_DOUBLE_EQ(l.config["bucket_cap_mb"].get<double>(), 160e6 / (1024.0 * 1024.0));
      EXPECT_EQ(l.config.contains("optimizer"), zero == 1);
    }
    EXPECT_EQ(l.config["gradient_accumulation_steps"].get<int>(), 4);
    EXPECT_EQ(joined(l.command), "torchrun --nnodes 1 --nproc-per-node 8 train.py");
  }
}

TEST(TorchrunExport, TensorAndPipelineParallelAreNotExpressible) {
  const Inputs in = inputs("gpt3-1.3b", "dgx-a100", 1,
                           "tensor_parallel: 2\npipeline_parallel: 2\nmicro_batch_size: 1\n"
                           "global_batch_size: 8\n");
  const Launch l = export_to(in, "torchrun");
  EXPECT_EQ(lines(l.unsupported),
            "tensor parallel 2: plain DDP/FSDP has no tensor parallelism (use megatron or "
            "deepspeed); exported as data parallel\n"
            "pipeline parallel 2: plain DDP/FSDP has no pipeline parallelism (use megatron or "
            "deepspeed); exported as data parallel\n");
  EXPECT_EQ(l.config["global_batch_size"].get<int>(), 8);
  EXPECT_EQ(l.config["gradient_accumulation_steps"].get<int>(), 1);
}

// ---- Registry and output ---------------------------------------------------------------------

TEST(LauncherRegistry, UnknownFrameworkListsTheValidNames) {
  try {
    find_launcher("colossalai");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "--framework: unknown framework \"colossalai\" (expected one of megatron, "
                 "deepspeed, torchrun)");
  }
}

TEST(LaunchOutput, TextGivesTheRankOrderAndEnvironmentBeforeTheCommand) {
  const Inputs swapped = inputs("gpt3-1.3b", "dgx-a100", 2,
                                "tensor_parallel: 4\ndevices: \"12-15,4-7\"\nmicro_batch_size: 1\n"
                                "global_batch_size: 8\n");
  const std::string text = to_text(export_to(swapped, "megatron"));
  EXPECT_EQ(
      text.substr(0, text.find(" \\\n")),
      "# rank order: node rank, node and its GPUs in local-rank order (CUDA_VISIBLE_DEVICES)\n"
      "#   node rank 0: node1 GPUs 4,5,6,7\n"
      "#   node rank 1: node0 GPUs 4,5,6,7\n"
      "export CUDA_VISIBLE_DEVICES=4,5,6,7\n"
      "torchrun --nnodes 2 --nproc-per-node 4 pretrain_gpt.py");
}

TEST(LaunchOutput, SameInputGivesTheSameBytes) {
  const Inputs in =
      inputs_from_file("korthikanti-175b", "dgx-a100", 8, "experiments/korthikanti/175b-full.yaml");
  for (const char* fw : {"megatron", "deepspeed", "torchrun"}) {
    EXPECT_EQ(to_text(export_to(in, fw)), to_text(export_to(in, fw))) << fw;
    EXPECT_EQ(to_json(export_to(in, fw)).dump(), to_json(export_to(in, fw)).dump()) << fw;
  }
}

}  // namespace
}  // namespace hetsim::launch
