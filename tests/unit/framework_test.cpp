// Frameworks (frameworks/*.yaml, sim/workload/cost/framework.h): the profiles load and bad ones say
// what is wrong; each behaviour changes the replay as worked out by hand: host time per pass and
// per step adds exactly, a reduction after the backward pass exposes every bucket's collective,
// a blocking send holds its stage for the transfer, a partitioned pipeline transfer is gathered
// over the receiving stage's tensor-parallel ranks, DeepSpeed's order sends each gradient after
// the next activation arrives and a send beyond the buffer waits for its receiver; the loss
// counts every pass over the logits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/policy/estimate.h"
#include "sim/policy/policy.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

platform::Cluster dgx(int nodes) {
  config::ClusterOptions o;
  o.nodes = nodes;
  return platform::Cluster(config::load_cluster("dgx-a100", o));
}

ModelConfig small_gpt(int layers) {
  return load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: 16\nvocab: 50304\nsequence: 1024\nactivation: gelu\n"
          "norm: layernorm\nposition: learned\ntied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// A collective with nothing beside it, as the replay launches one (no host launch cost).
Time collective_alone(const platform::Cluster& c, network::Op op, double bytes,
                      std::vector<platform::GpuId> ranks) {
  network::CollectiveRequest req;
  req.op = op;
  req.bytes = bytes;
  req.ranks = std::move(ranks);
  req.host_launch = false;
  return network::simulate_collective(c, req).time;
}

Time allreduce_alone(const platform::Cluster& c, double bytes, std::vector<platform::GpuId> ranks) {
  return collective_alone(c, network::Op::allreduce, bytes, std::move(ranks));
}

const char* kFramework =
    "name: test\ngradient_reduction: overlapped\npipeline_p2p: async\n"
    "host: {per_pass: 1ms, per_step: 5ms}\n";

TEST(FrameworkProfiles, BuiltInsLoadAndUnknownNamesListTheValidOnes) {
  const std::vector<std::string> names = framework_names();
  for (const char* n : {"deepspeed", "hetsim-execute", "megatron", "megatron-lm-2021",
                        "pytorch-ddp", "pytorch-fsdp", "pytorch-fsdp2"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    EXPECT_EQ(load_framework(n).name, n);
  }
  const Framework ds = load_framework("deepspeed");
  EXPECT_EQ(ds.gradient_reduction, GradReduction::after_backward);
  EXPECT_TRUE(ds.blocking_p2p);
  const Framework mg = load_framework("megatron");
  EXPECT_EQ(mg.gradient_reduction, GradReduction::overlapped);
  EXPECT_FALSE(mg.blocking_p2p);
  EXPECT_EQ(mg.host_per_pass, Time());
  EXPECT_EQ(load_framework("pytorch-fsdp").zero_stage, 3);
  EXPECT_FALSE(load_framework("pytorch-fsdp").gather_copy_out);
  EXPECT_TRUE(load_framework("pytorch-fsdp2").gather_copy_out);
  EXPECT_EQ(load_framework("pytorch-fsdp2").zero_stage, 3);
  // hetsim's own C++ runner: a launch's host time per kernel, not a Python host's.
  EXPECT_EQ(load_framework("hetsim-execute").host_per_kernel, Time::us(5));
  EXPECT_EQ(
      error_of([] { load_framework("deepspeeed"); }),
      "unknown framework \"deepspeeed\" (expected one of deepspeed, hetsim-execute, megatron, "
      "megatron-lm-2021, pytorch-ddp, pytorch-fsdp, pytorch-fsdp2, or a framework YAML file) (did "
      "you mean "
      "\"deepspeed\"?)");
}

TEST(FrameworkProfiles, SequenceParallelismOnlyWhereTheFrameworkHasIt) {
  EXPECT_TRUE(load_framework("megatron").sequence_parallel);
  EXPECT_FALSE(load_framework("deepspeed").sequence_parallel);
  const platform::Cluster c = dgx(1);
  const ModelConfig m = small_gpt(4);
  const std::string plan =
      "tensor_parallel: 2\ndata_parallel: 4\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
      "sequence_length: 1024\nframework: deepspeed\nsequence_parallel: ";
  EXPECT_EQ(error_of([&] { load_plan_text(plan + "true\n", "p.yaml", m, c); }),
            "p.yaml:7: sequence_parallel: true, but deepspeed has no sequence parallelism "
            "(frameworks/deepspeed.yaml); use sequence_parallel: false");
  EXPECT_EQ(error_of([&] { load_plan_text(plan + "false\n", "p.yaml", m, c); }), "(no error)");
  // At one tensor-parallel rank it means nothing, and is let be.
  EXPECT_EQ(error_of([&] {
              load_plan_text(
                  "data_parallel: 8\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                  "framework: deepspeed\nsequence_parallel: true\n",
                  "q.yaml", m, c);
            }),
            "(no error)");
  // The planner's policies propose none under such a framework (and load every proposal).
  policy::Request r;
  r.model = &m;
  r.cluster = &c;
  r.global_batch = 16;
  r.sequence = 1024;
  r.framework = "deepspeed";
  size_t tensor_parallel = 0;
  for (const policy::Policy* pol : policy::policies()) {
    for (const policy::Proposal& p : pol->propose(r)) {
      EXPECT_EQ(p.plan.find("sequence_parallel: true"), std::string::npos) << p.label;
      tensor_parallel += p.plan.find("tensor_parallel: 2") != std::string::npos;
    }
  }
  EXPECT_GT(tensor_parallel, 0u);  // there were tensor-parallel proposals to check
  r.framework = "";
  bool any = false;
  for (const policy::Proposal& p : policy::select_policies("megatron").front()->propose(r))
    any = any || p.plan.find("sequence_parallel: true") != std::string::npos;
  EXPECT_TRUE(any);
}

TEST(FrameworkProfiles, BadFieldsAreClearErrors) {
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: later\npipeline_p2p: async\n"
                  "host: {per_pass: 0s, per_step: 0s}\n",
                  "f.yaml");
            }),
            "f.yaml:2: gradient_reduction: unknown value \"later\" (expected one of overlapped, "
            "after_backward)");
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "host: {per_pass: -1ms, per_step: 0s}\n",
                  "f.yaml");
            }),
            "f.yaml:4: host.per_pass: expected a non-negative quantity, got \"-1ms\"");
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "host: {per_pass: 0s, per_step: 61s}\n",
                  "f.yaml");
            }),
            "f.yaml:4: host.per_step: expected a time from 0 s to 60 s");
  EXPECT_NE(error_of([] {
              load_framework_text("name: x\nhost: {}\n", "f.yaml");
            }).find("gradient_reduction: missing required field"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "pipeline_gathers: 2\nhost: {per_pass: 0s, per_step: 0s}\n",
                  "f.yaml");
            }),
            "f.yaml:4: pipeline_gathers: expected a map {forward: N, backward: N}");
  EXPECT_NE(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "pipeline_gathers: {forward: 9}\nhost: {per_pass: 0s, per_step: 0s}\n",
                  "f.yaml");
            }).find("pipeline_gathers.forward: expected an integer from 0 to 4"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "pipeline_gathers: {forwards: 1}\nhost: {per_pass: 0s, per_step: 0s}\n",
                  "f.yaml");
            }).find("forwards"),
            std::string::npos);
  // A plan naming an unknown framework says where.
  const ModelConfig m = small_gpt(2);
  const platform::Cluster c = dgx(1);
  EXPECT_EQ(error_of([&] {
              load_plan_text("global_batch_size: 8\nframework: horovod\n", "p.yaml", m, c);
            }).rfind("p.yaml:2: framework: unknown framework \"horovod\"", 0),
            0u);
}

TEST(Frameworks, HostTimePerPassAndPerStepAddsExactly) {
  // One GPU, 4 micro-batches: 4 forward and 4 backward passes, one step. The framework's host
  // time adds 8 x 1 ms + 5 ms = 13 ms to the iteration and to the device's busy time.
  const ModelConfig m = small_gpt(2);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  const std::string dir = ::testing::TempDir() + "fw_host.yaml";
  { std::ofstream(dir) << kFramework; }
  const std::string base = "micro_batch_size: 1\nglobal_batch_size: 4\ndevices: \"0\"\n";
  const Plan a = load_plan_text(base, "a.yaml", m, c);
  const Plan b = load_plan_text(base + "framework: " + dir + "\n", "b.yaml", m, c);
  const ReplayResult ra = replay(build_training_job(m, a, c, cost));
  const ReplayResult rb = replay(build_training_job(m, b, c, cost));
  EXPECT_EQ(rb.iteration - ra.iteration, Time::from_seconds(13e-3));
  EXPECT_EQ(rb.copies[0].compute - ra.copies[0].compute, Time::from_seconds(13e-3));
}

TEST(Frameworks, ReservedMemoryAddsExactlyItsBytesToEveryDevice) {
  // The framework's own device memory (context, libraries, allocator slack) is counted once per
  // device, beside the training state; it changes no time.
  const ModelConfig m = small_gpt(2);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  const std::string path = ::testing::TempDir() + "fw_reserved.yaml";
  { std::ofstream(path) << kFramework << "reserved_memory: 1.5GiB\n"; }
  const std::string base =
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 2\n"
      "micro_batch_size: 1\nglobal_batch_size: 8\n";
  const Plan a = load_plan_text(base + "framework: megatron\n", "a.yaml", m, c);
  const Plan b = load_plan_text(base + "framework: " + path + "\n", "b.yaml", m, c);
  const TrainingJob ja = build_training_job(m, a, c, cost);
  const TrainingJob jb = build_training_job(m, b, c, cost);
  const auto ma = memory_per_copy(ja);
  const auto mb = memory_per_copy(jb);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t g = 0; g < ma.size(); ++g) {
    EXPECT_DOUBLE_EQ(mb[g].peak - ma[g].peak, 1.5 * 1073741824.0) << "group " << g;
  }
  EXPECT_EQ(load_framework("deepspeed").reserved_memory, 1.5 * 1073741824.0);
  EXPECT_EQ(load_framework("megatron").reserved_memory, 0.0);
  EXPECT_EQ(error_of([] {
              load_framework_text(std::string(kFramework) + "reserved_memory: 100GiB\n", "f.yaml");
            }),
            "f.yaml:5: reserved_memory: expected a size from 0 to 64 GiB");
}

TEST(Frameworks, ReductionAfterTheBackwardPassExposesEveryBucket) {
  // Data parallel 2 on one node, 8 layers, buckets of about two layers' gradients. Overlapped,
  // buckets run beside the remaining backward kernels; after the backward pass they run one
  // after another with nothing beside them, so the wait is the sum of each bucket's collective
  // alone.
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  const std::string base =
      "data_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 4\ndevices: \"0-1\"\n"
      "bucket_size: 100MB\n";
  const Plan over = load_plan_text(base, "o.yaml", m, c);
  const Plan after = load_plan_text(base + "gradient_reduction: after_backward\n", "a.yaml", m, c);
  EXPECT_EQ(after.gradient_reduction, GradReduction::after_backward);
  const TrainingJob jo = build_training_job(m, over, c, cost);
  const TrainingJob ja = build_training_job(m, after, c, cost);
  const ReplayResult ro = replay(jo), ra = replay(ja);
  // The same bytes in the same buckets either way.
  ASSERT_EQ(jo.copies[0].dp.size(), ja.copies[0].dp.size());
  ASSERT_GT(ja.copies[0].dp.size(), 2u);
  Time alone;
  for (size_t i = 0; i < ja.copies[0].dp.size(); ++i) {
    EXPECT_DOUBLE_EQ(jo.copies[0].dp[i].bytes, ja.copies[0].dp[i].bytes);
    alone += allreduce_alone(c, ja.copies[0].dp[i].bytes, {0, 1});
  }
  EXPECT_EQ(ra.copies[0].dp_wait, alone);
  EXPECT_EQ(ra.iteration, ra.copies[0].compute + alone);
  EXPECT_LT(ro.iteration, ra.iteration);
}

TEST(Frameworks, ABlockingSendHoldsItsStageForTheTransfer) {
  // Two pipeline stages on two nodes (the transfer crosses InfiniBand), 1F1B, 8 micro-batches.
  // Non-blocking, stage 0's sends cost it nothing; blocking, each of its 8 forward sends holds
  // it for at least the transfer's own time (the activation over a 200 Gb/s HDR port at the
  // link class's 0.94), so its pipeline wait grows by at least 8 of them.
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = dgx(2);
  const DatasheetCostModel cost;
  const std::string base =
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\ndevices: [0, 8]\n";
  const std::string fw = ::testing::TempDir() + "fw_block.yaml";
  {
    std::ofstream(fw) << "name: b\ngradient_reduction: overlapped\npipeline_p2p: blocking\n"
                         "host: {per_pass: 0s, per_step: 0s}\n";
  }
  const Plan async = load_plan_text(base, "a.yaml", m, c);
  const Plan blocking = load_plan_text(base + "framework: " + fw + "\n", "b.yaml", m, c);
  const TrainingJob ja = build_training_job(m, async, c, cost);
  const ReplayResult ra = replay(ja), rb = replay(build_training_job(m, blocking, c, cost));
  const double bytes = ja.activation_bytes_per_transfer;  // 1 x 1024 x 1024 x 2 B
  EXPECT_DOUBLE_EQ(bytes, 2.0 * 1024 * 1024);
  const Time transfer = Time::from_seconds(bytes / (200e9 / 8 * 0.94));
  EXPECT_GE(rb.copies[0].pp_wait - ra.copies[0].pp_wait, transfer * 8);
  EXPECT_GT(rb.iteration, ra.iteration);
}

TEST(Frameworks, TheTiedEmbeddingIsReducedBetweenTheEndStages) {
  // Two stages on two nodes, tied embeddings: after the backward pass the first and the last
  // stage all-reduce the embedding's gradients (vocab x hidden x 2 B in bf16 for DeepSpeed's
  // model_grads). Stage 0 finishes its backward last, so it waits exactly the collective alone.
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = dgx(2);
  const DatasheetCostModel cost;
  const std::string fw = ::testing::TempDir() + "fw_tied.yaml";
  {
    std::ofstream(fw)
        << "name: t\ngradient_reduction: after_backward\npipeline_p2p: async\n"
           "tied_embedding_reduction: model_grads\nhost: {per_pass: 0s, per_step: 0s}\n";
  }
  const std::string base =
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 4\ndevices: [0, 8]\n";
  const Plan without = load_plan_text(base, "a.yaml", m, c);
  const Plan with = load_plan_text(base + "framework: " + fw + "\n", "b.yaml", m, c);
  const TrainingJob j = build_training_job(m, with, c, cost);
  EXPECT_DOUBLE_EQ(j.copies[0].tied_bytes, 2.0 * 50304 * 1024);
  EXPECT_DOUBLE_EQ(j.copies[1].tied_bytes, 2.0 * 50304 * 1024);
  const ReplayResult r = replay(j), r0 = replay(build_training_job(m, without, c, cost));
  const Time alone = allreduce_alone(c, j.copies[0].tied_bytes, {0, 8});
  EXPECT_EQ(r.copies[0].dp_wait - r0.copies[0].dp_wait, alone);
  EXPECT_GT(r.copies[1].dp_wait - r0.copies[1].dp_wait, alone);
  EXPECT_EQ(r.iteration - r0.iteration, alone);
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

size_t gathers_in(const StageCopy& g, Pass pass) {
  return static_cast<size_t>(std::count_if(g.program.begin(), g.program.end(), [&](const Task& t) {
    return t.kind == TaskKind::tp_comm && t.pass == pass && g.comms[t.index].name == "pp.gather";
  }));
}

TEST(Frameworks, DeepSpeedGathersAPartitionedPipelineTransferOverTheStagesRanks) {
  // Two stages of TP 2 on one DGX A100 node (GPUs 0-1, 2-3), DeepSpeed's partitioned transfers
  // (pipeline_gathers {forward: 1, backward: 2}). Per micro-batch stage 1 gathers the received
  // activation once before its forward pass; stage 0 gathers its own output and the received
  // gradient before its backward pass. One micro-batch runs the stages one after the other, so
  // the three all-gathers of the 1 x 1024 x 1024 x 2 B activation (each as long alone, over
  // GPUs 2-3 and 0-1 of one NVSwitch node) add exactly to the iteration.
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  auto framework = [](const std::string& name, const std::string& gathers) {
    const std::string f = ::testing::TempDir() + name;
    std::ofstream(f) << "name: " << name << "\ngradient_reduction: after_backward\n"
                     << "pipeline_p2p: blocking\n"
                     << gathers << "host: {per_pass: 0s, per_step: 0s}\n";
    return f;
  };
  const std::string with =
      framework("fw_gather.yaml", "pipeline_gathers: {forward: 1, backward: 2}\n");
  const std::string without = framework("fw_nogather.yaml", "");
  auto plan = [&](const std::string& fw, int micro_batches, const std::string& extra = "") {
    return load_plan_text(
        "tensor_parallel: 2\npipeline_parallel: 2\nmicro_batch_size: 1\n"
        "global_batch_size: " +
            std::to_string(micro_batches) + "\ndevices: \"0-3\"\nframework: " + fw + "\n" + extra,
        "p.yaml", m, c);
  };
  // A job refers to its plan: each plan outlives its job.
  const Plan p1 = plan(with, 1), p0 = plan(without, 1);
  const TrainingJob j = build_training_job(m, p1, c, cost);
  const TrainingJob j0 = build_training_job(m, p0, c, cost);
  EXPECT_EQ(gathers_in(j.copies[0], Pass::forward), 0u);
  EXPECT_EQ(gathers_in(j.copies[0], Pass::backward), 2u);
  EXPECT_EQ(gathers_in(j.copies[1], Pass::forward), 1u);
  EXPECT_EQ(gathers_in(j.copies[1], Pass::backward), 0u);
  EXPECT_EQ(gathers_in(j0.copies[0], Pass::backward), 0u);
  const double bytes = 2.0 * 1024 * 1024;
  EXPECT_DOUBLE_EQ(j.activation_bytes_per_transfer, bytes);
  const Time gather = collective_alone(c, network::Op::allgather, bytes, {0, 1});
  EXPECT_EQ(collective_alone(c, network::Op::allgather, bytes, {2, 3}), gather);
  EXPECT_GT(gather, Time());
  const ReplayResult r = replay(j), r0 = replay(j0);
  EXPECT_EQ(r.iteration - r0.iteration, gather * 3);
  // The planner's estimate puts the same three gathers on the same path.
  policy::Estimator est(m, c, cost);
  const double added = est.estimate(p1).iteration_s - est.estimate(p0).iteration_s;
  EXPECT_NEAR(added, 3 * gather.seconds(), 1e-3 * gather.seconds());

  // Eight micro-batches: 16 gathers on stage 0, 8 on stage 1. Sequence parallelism, whose
  // stage input is already split over the ranks, and TP 1 gather nothing.
  const Plan p8 = plan(with, 8), psp = plan(with, 8, "sequence_parallel: true\n");
  const TrainingJob j8 = build_training_job(m, p8, c, cost);
  EXPECT_EQ(gathers_in(j8.copies[0], Pass::backward), 16u);
  EXPECT_EQ(gathers_in(j8.copies[1], Pass::forward), 8u);
  const TrainingJob sp = build_training_job(m, psp, c, cost);
  EXPECT_EQ(gathers_in(sp.copies[0], Pass::backward) + gathers_in(sp.copies[1], Pass::forward), 0u);
  const Plan tp1 = load_plan_text(
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
      "devices: [0, 1]\nframework: " +
          with + "\n",
      "p.yaml", m, c);
  const TrainingJob j1 = build_training_job(m, tp1, c, cost);
  EXPECT_EQ(gathers_in(j1.copies[0], Pass::backward) + gathers_in(j1.copies[1], Pass::forward), 0u);
  // The built-in DeepSpeed profile gathers as its pipeline engine does; Megatron's does not.
  EXPECT_EQ(load_framework("deepspeed").pipeline_gathers_forward, 1);
  EXPECT_EQ(load_framework("deepspeed").pipeline_gathers_backward, 2);
  EXPECT_EQ(load_framework("megatron").pipeline_gathers_backward, 0);
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// The bytes of the op named `name` in a program (0 when absent).
double bytes_of(const std::vector<Step>& steps, const std::string& name) {
  for (const Step& st : steps)
    if (st.comm == CommKind::none && st.op.name == name) return st.op.bytes;
  return 0;
}

double flops_of(const std::vector<Step>& steps) {
  double f = 0;
  for (const Step& st : steps) f += st.op.flops;
  return f;
}

TEST(EagerKernels, AutocastsKernelsAreWorkedOutByHand) {
  // Hidden 64, 8 tokens, bf16 (e = 2 B) under autocast (fp32 residual stream, r = 4 B).
  const ModelConfig m = load_model_yaml_text(
      "name: tiny\nfamily: gpt\nlayers: 1\nhidden: 64\nheads: 4\nvocab: 128\nsequence: 8\n"
      "activation: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\n"
      "causal: true\nbias: true\n",
      "tiny.yaml");
  LayerShape fused;
  fused.micro_batch = 1;
  fused.sequence = 8;
  fused.precision = Precision::bf16;
  LayerShape eager = fused, autocast = fused;
  eager.eager = true;
  autocast.eager = autocast.autocast = true;
  const double T = 8, h = 64;
  const auto f = layer_forward(m, autocast), b = layer_backward(m, autocast);
  EXPECT_EQ(bytes_of(f, "norm1"), 4 * T * h * 2);              // fp32 in, fp32 out
  EXPECT_EQ(bytes_of(f, "norm1.cast"), (4 + 2) * T * h);       // fp32 read, bf16 written
  EXPECT_EQ(bytes_of(f, "qkv.weight_cast"), 6 * h * 3 * h);    // the h x 3h weight
  EXPECT_EQ(bytes_of(f, "attention.reshape"), 2 * 2 * T * h);  // read and write, bf16
  EXPECT_EQ(bytes_of(f, "dropout_residual1.dropout"), (2 * 2 + 1) * T * h);  // + 1 B mask
  EXPECT_EQ(bytes_of(f, "dropout_residual1.add"), (4 + 2 + 4) * T * h);      // fp32 stream
  EXPECT_EQ(bytes_of(b, "fc1.grad_cast"), (2 + 4) * h * 4 * h);
  EXPECT_EQ(bytes_of(b, "fc1.grad_accumulate"), 12 * h * 4 * h);  // read two fp32, write one
  EXPECT_EQ(bytes_of(b, "dropout_residual2.cast.bwd"), (4 + 2) * T * h);
  EXPECT_EQ(bytes_of(b, "dropout_residual2.dropout.bwd"), (2 * 2 + 1) * T * h);
  EXPECT_EQ(bytes_of(b, "residual2.sum"), 3 * 4 * T * h);
  EXPECT_EQ(bytes_of(b, "norm1.bwd"), 4 * T * h * 3);
  // Eager without autocast: the same separate kernels in the plan's precision, no casts.
  const auto ef = layer_forward(m, eager);
  EXPECT_EQ(bytes_of(ef, "norm1"), 2 * T * h * 2);
  EXPECT_EQ(bytes_of(ef, "norm1.cast"), 0);
  EXPECT_EQ(bytes_of(ef, "qkv.weight_cast"), 0);
  EXPECT_EQ(bytes_of(ef, "dropout_residual1.add"), 3 * 2 * T * h);
  // Fused: one kernel for the dropout and the add, no separate ones.
  const auto ff = layer_forward(m, fused);
  EXPECT_EQ(bytes_of(ff, "dropout_residual1"), 3 * 2 * T * h);
  EXPECT_EQ(bytes_of(ff, "dropout_residual1.dropout"), 0);
  EXPECT_EQ(ff.size() + 3, ef.size());  // + two dropouts and the attention reshape, - 0
  // The arithmetic is the same in all three (the extra kernels are memory-bound).
  EXPECT_EQ(flops_of(ff), flops_of(f));
  EXPECT_EQ(flops_of(layer_backward(m, fused)), flops_of(b));
  // The embedding's gradient: its dense fp32 table written and added to .grad (16 B a weight).
  EXPECT_EQ(bytes_of(embedding_backward(m, autocast), "embedding.grad_accumulate"),
            16.0 * 128 * 64);
}

TEST(EagerKernels, AFrameworksHostTimePerKernelReplacesTheCostModels) {
  // One GPU, a framework that takes 1 ms of host time per kernel: every segment of kernels
  // takes the longer of its GPU time and its kernel count in ms (all but the few kernels over
  // 1 ms, the logits and the optimizer, are host-bound); without it, the datasheet model's
  // 100 us a kernel.
  const ModelConfig m = small_gpt(2);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  const std::string fw = ::testing::TempDir() + "fw_host.yaml";
  std::ofstream(fw) << "name: h\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                       "host: {per_pass: 0s, per_step: 0s, per_kernel: 1ms}\n";
  const std::string base = "devices: [0]\nmicro_batch_size: 1\nglobal_batch_size: 2\n";
  const Plan with = load_plan_text(base + "framework: " + fw + "\n", "p.yaml", m, c);
  const Plan without = load_plan_text(base, "p.yaml", m, c);
  const TrainingJob j = build_training_job(m, with, c, cost);
  const TrainingJob j0 = build_training_job(m, without, c, cost);
  auto segments_take = [](const TrainingJob& job, Time per_kernel) {
    size_t host_bound = 0;
    for (const Segment& s : job.copies[0].segments) {
      if (s.ops.empty()) continue;
      Time gpu;
      for (const auto& [op, d] : s.ops) gpu += d;
      const Time host = per_kernel * static_cast<int64_t>(s.ops.size());
      EXPECT_EQ(s.duration, std::max(gpu, host));
      if (host > gpu) ++host_bound;
    }
    return host_bound;
  };
  EXPECT_GT(segments_take(j, Time::from_seconds(1e-3)), 5u);
  segments_take(j0, Time::from_seconds(100e-6));
  EXPECT_GT(replay(j).iteration, replay(j0).iteration);
  // The planner's estimate of one GPU is the replay's, under an eager framework too.
  const Plan ddp = load_plan_text(base + "framework: pytorch-ddp\n", "p.yaml", m, c);
  policy::Estimator est(m, c, cost);
  for (const Plan* p : {&with, &ddp}) {
    EXPECT_NEAR(est.estimate(*p).iteration_s,
                replay(build_training_job(m, *p, c, cost)).iteration.seconds(), 1e-9);
  }
}

TEST(EagerKernels, BadKernelsAndHostTimesAreClearErrors) {
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\nkernels: jit\n"
                  "host: {per_pass: 0s, per_step: 0s}\n",
                  "f.yaml");
            }),
            "f.yaml:4: kernels: unknown value \"jit\" (expected one of fused, eager, "
            "eager_autocast)");
  EXPECT_EQ(error_of([] {
              load_framework_text(
                  "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                  "host: {per_pass: 0s, per_step: 0s, per_kernel: 20ms}\n",
                  "f.yaml");
            }),
            "f.yaml:4: host.per_kernel: expected a time from 0 s to 10 ms");
  const Framework ddp = load_framework("pytorch-ddp");
  EXPECT_TRUE(ddp.eager_kernels);
  EXPECT_TRUE(ddp.autocast);
  ASSERT_TRUE(ddp.host_per_kernel.has_value());
  EXPECT_FALSE(load_framework("megatron").eager_kernels);
  EXPECT_FALSE(load_framework("megatron").host_per_kernel.has_value());
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// DeepSpeed's pipeline engine runs ZeRO 0 or 1 (PipelineEngine asserts stage < 2): a pipelined
// DeepSpeed plan with ZeRO 2 is refused, naming the field and the framework; one stage is fine,
// and so is Megatron-LM's pipeline with ZeRO 2.
TEST(Framework, DeepSpeedPipelinesRunZeroOneAtMost) {
  const platform::Cluster c = test::cluster("dgx-a100", 1);
  const ModelConfig m = load_model("gpt3-1.3b");
  const std::string err = test::plan_error(
      "framework: deepspeed\nzero_stage: 2\npipeline_parallel: 2\ndata_parallel: 4\n"
      "global_batch_size: 32\n",
      m, c);
  EXPECT_NE(err.find("p.yaml:2"), std::string::npos) << err;
  EXPECT_NE(err.find("zero_stage: 2 with a pipeline of 2 stages, which deepspeed runs with ZeRO "
                     "stage 1 at most"),
            std::string::npos)
      << err;
  EXPECT_EQ(test::plan_error("framework: deepspeed\nzero_stage: 2\ndata_parallel: 8\n"
                             "global_batch_size: 32\n",
                             m, c),
            "no error");
  EXPECT_EQ(test::plan_error("framework: deepspeed\nzero_stage: 1\npipeline_parallel: 2\n"
                             "data_parallel: 4\nglobal_batch_size: 32\n",
                             m, c),
            "no error");
  EXPECT_EQ(test::plan_error("zero_stage: 2\npipeline_parallel: 2\ndata_parallel: 4\n"
                             "global_batch_size: 32\n",
                             m, c),
            "no error");
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// gradient_accumulation: add puts one add of 3 x 2 bytes per weight (fp16: read .grad and the
// new gradient, write .grad) after each weight-gradient GEMM: over a layer's four linear layers
// (qkv h x 3h, proj h x h, fc1 h x 4h, fc2 4h x h: 12 h^2 weights) 6 x 12 x 1024^2 bytes, and
// over the embedding table 6 x 50304 x 1024.
TEST(Frameworks, SeparateGradientAccumulationAddsEveryWeightOnce) {
  const ModelConfig m = small_gpt(2);
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.precision = Precision::fp16;
  auto accumulated = [](const std::vector<Step>& steps) {
    double bytes = 0;
    for (const Step& st : steps)
      if (st.op.name.find(".grad_accumulate") != std::string::npos) bytes += st.op.bytes;
    return bytes;
  };
  EXPECT_EQ(accumulated(layer_backward(m, s)), 0.0);
  s.grad_accumulate = true;
  EXPECT_EQ(accumulated(layer_backward(m, s)), 6.0 * 12 * 1024 * 1024);
  EXPECT_EQ(accumulated(embedding_backward(m, s)), 6.0 * 50304 * 1024);
  // The head's logits share the embedding's weight, and accumulate their own gradient of it.
  EXPECT_EQ(accumulated(head_backward(m, s)), 6.0 * 50304 * 1024);
  EXPECT_EQ(accumulated(layer_forward(m, s)), 0.0);
  // DeepSpeed's profile accumulates separately, Megatron-LM's fuses; a plan's layer shape follows.
  EXPECT_TRUE(load_framework("deepspeed").separate_grad_accumulation);
  EXPECT_FALSE(load_framework("megatron").separate_grad_accumulation);
  const platform::Cluster c = dgx(1);
  EXPECT_TRUE(stage_shape(load_plan_text("framework: deepspeed\nglobal_batch_size: 8\n"
                                         "devices: \"0\"\nmicro_batch_size: 1\n",
                                         "p.yaml", m, c),
                          1, 0)
                  .grad_accumulate);
  EXPECT_EQ(
      error_of([] {
        load_framework_text(
            "name: x\ngradient_reduction: overlapped\npipeline_p2p: async\n"
            "gradient_accumulation: later\nhost: {per_pass: 0s, per_step: 0s}\n",
            "f.yaml");
      }),
      "f.yaml:4: gradient_accumulation: unknown value \"later\" (expected one of fused, add)");
  // Under autocast the add is already in the kernel list: not counted twice.
  const std::string fw = ::testing::TempDir() + "fw_acc.yaml";
  std::ofstream(fw) << "name: a\ngradient_reduction: overlapped\npipeline_p2p: async\n"
                       "kernels: eager_autocast\ngradient_accumulation: add\n"
                       "host: {per_pass: 0s, per_step: 0s}\n";
  EXPECT_FALSE(stage_shape(load_plan_text("framework: " + fw +
                                              "\nglobal_batch_size: 8\n"
                                              "devices: \"0\"\nmicro_batch_size: 1\n",
                                          "p.yaml", m, c),
                           1, 0)
                   .grad_accumulate);
}

// In the replay: a one-stage TP 2 plan on a g4dn node takes exactly the link class's per-call
// cost more per tensor-parallel collective it waits for, and a two-stage pipeline without tensor
// parallelism on the same GPUs takes none (its sends pay none).
TEST(Frameworks, ALinkClassesPerCallCostAddsOncePerTensorParallelCollective) {
  const ModelConfig m = small_gpt(2);
  config::ClusterOptions zero;
  zero.sets = {"link_classes.pcie3_host_staged.collective_overhead=0s"};
  // The per-call cost set here, not the fitted one the file ships, so that a refit leaves the
  // figures worked by hand.
  config::ClusterOptions fixed;
  fixed.sets = {"link_classes.pcie3_host_staged.collective_overhead=743us"};
  const platform::Cluster with(config::load_cluster("aws-g4dn-12xlarge", fixed));
  const platform::Cluster without(config::load_cluster("aws-g4dn-12xlarge", zero));
  const DatasheetCostModel cost;
  auto iteration = [&](const platform::Cluster& c, const std::string& plan) {
    return replay(build_training_job(m, load_plan_text(plan, "p.yaml", m, c), c, cost)).iteration;
  };
  const std::string tp =
      "tensor_parallel: 2\ndevices: \"0-1\"\nmicro_batch_size: 1\n"
      "global_batch_size: 3\nprecision: fp16\n";
  const Plan tp_plan = load_plan_text(tp, "p.yaml", m, with);  // the job points into it
  const TrainingJob job = build_training_job(m, tp_plan, with, cost);
  int64_t collectives = 0, waited = 0;
  for (const Task& t : job.copies[0].program) {
    if (t.kind != TaskKind::tp_comm) continue;
    ++collectives;
    waited += job.copies[0].comms[t.index].async ? 0 : 1;
  }
  // Per micro-batch: 2 all-reduces in each layer's forward and 2 in its backward, the
  // embedding's, and the head's cross-entropy and input-gradient ones: 4 x 2 + 1 + 2 = 11. The
  // 6 forward ones are waited for; the 5 input-gradient ones (qkv and fc1 of each layer, the
  // logits) run beside the weight-gradient GEMM after them. A layer's GEMMs at one 1024-token
  // sample take 0.2-0.5 ms on a T4, less than such an all-reduce (0.6 ms) with its cost, so those
  // 4 show in full; the logits' weight gradient (1024 x 25152 per rank) takes about 3 ms and hides
  // its one.
  EXPECT_EQ(collectives, 3 * 11);
  EXPECT_EQ(waited, 3 * 6);
  EXPECT_EQ(iteration(with, tp) - iteration(without, tp),
            Time::from_seconds(743e-6) * (3 * (6 + 4)));
  const std::string pp =
      "pipeline_parallel: 2\ndevices: \"0-1\"\nmicro_batch_size: 1\n"
      "global_batch_size: 4\nprecision: fp16\n";
  EXPECT_EQ(iteration(with, pp), iteration(without, pp));
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// A stage's pipeline tasks in program order: "rF3" receives micro-batch 3's activation, "sB0"
// sends micro-batch 0's gradient.
std::string pipeline_order(const StageCopy& g) {
  std::string out;
  for (const Task& t : g.program) {
    if (t.kind != TaskKind::recv && t.kind != TaskKind::send) continue;
    if (!out.empty()) out += ' ';
    out += t.kind == TaskKind::recv ? 'r' : 's';
    out += t.pass == Pass::forward ? 'F' : 'B';
    out += std::to_string(t.micro_batch);
  }
  return out;
}

// The error of a framework text with these keys between pipeline_p2p and host.
std::string framework_error(const std::string& p2p, const std::string& keys) {
  return error_of([&] {
    load_framework_text("name: x\ngradient_reduction: overlapped\npipeline_p2p: " + p2p + "\n" +
                            keys + "host: {per_pass: 0s, per_step: 0s}\n",
                        "f.yaml");
  });
}

std::string framework_file(const std::string& name, const std::string& keys) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << "name: " << name
                      << "\ngradient_reduction: overlapped\npipeline_p2p: blocking\n"
                      << keys << "host: {per_pass: 0s, per_step: 0s}\n";
  return path;
}

// DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py), worked by hand for 3 stages
// and 4 micro-batches: a forward step runs RecvActivation, then SendGrad of the step before's
// backward pass, then the forward pass; a backward step SendActivation of the step before's
// forward pass, then RecvGrad, then the backward pass. Stage 1 (warm-up 1 forward):
//   F0: rF0 | B-: sF0 | F1: rF1 | B0: sF1 rB0 | F2: rF2 sB0 | B1: sF2 rB1 | F3: rF3 sB1 |
//   B2: sF3 rB2 | F-: sB2 | B3: rB3 | F-: sB3
// Megatron-LM's order sends each gradient right after its backward pass.
TEST(Frameworks, DeepSpeedSendsAGradientAfterTheNextForwardPassHasItsActivation) {
  const ModelConfig m = small_gpt(6);
  const platform::Cluster c = dgx(1);
  const DatasheetCostModel cost;
  const std::string base =
      "pipeline_parallel: 3\nmicro_batch_size: 1\nglobal_batch_size: 4\ndevices: [0, 1, 2]\n";
  const std::string ds =
      framework_file("fw_ds_order.yaml", "pipeline_send_grad: after_next_receive\n");
  const Plan deep_plan = load_plan_text(base + "framework: " + ds + "\n", "p.yaml", m, c);
  const Plan mega_plan = load_plan_text(base, "p.yaml", m, c);  // the jobs point into them
  const TrainingJob deep = build_training_job(m, deep_plan, c, cost);
  const TrainingJob mega = build_training_job(m, mega_plan, c, cost);
  EXPECT_EQ(pipeline_order(deep.copies[1]),
            "rF0 sF0 rF1 sF1 rB0 rF2 sB0 sF2 rB1 rF3 sB1 sF3 rB2 sB2 rB3 sB3");
  EXPECT_EQ(pipeline_order(mega.copies[1]),
            "rF0 sF0 rF1 sF1 rB0 sB0 rF2 sF2 rB1 sB1 rF3 sF3 rB2 sB2 rB3 sB3");
  // The last stage (no warm-up): F0 B0 F1 B1 ...; each gradient after the next activation.
  EXPECT_EQ(pipeline_order(deep.copies[2]), "rF0 rF1 sB0 rF2 sB1 rF3 sB2 sB3");
  // The first stage sends no gradient: its order is Megatron-LM's.
  EXPECT_EQ(pipeline_order(deep.copies[0]), pipeline_order(mega.copies[0]));
  EXPECT_EQ(framework_error("blocking", "pipeline_send_grad: later\n"),
            "f.yaml:4: pipeline_send_grad: unknown value \"later\" (expected one of "
            "after_backward, after_next_receive)");
}

// A blocking send larger than pipeline_p2p_buffer moves only once its receiver has reached the
// receive. Two stages on two nodes, 2 micro-batches, DeepSpeed's order, every transfer c long
// and alone on its link, each backward pass b longer than c, f a forward pass (taken equal on
// both stages for the picture). Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1. Stage 0 issues
// its send of F1 at 2f+c, while stage 1 is in B0 until 2f+c+b. With a buffer the activation
// (2 MiB) fits in, it moves at once and waits in stage 1's buffer; with one it does not fit in,
// it starts at 2f+c+b, and everything after it on both stages ends exactly one c later.
TEST(Frameworks, ASendBeyondTheBufferWaitsForItsReceiver) {
  const ModelConfig m = small_gpt(4);
  const platform::Cluster c = dgx(2);
  const DatasheetCostModel cost;
  const std::string base =
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 2\ndevices: [0, 8]\n";
  const std::string order = "pipeline_send_grad: after_next_receive\n";
  auto run = [&](const std::string& name, const std::string& keys, ReplayObserver* obs) {
    const std::string fw = framework_file(name, order + keys);
    const Plan p = load_plan_text(base + "framework: " + fw + "\n", "p.yaml", m, c);
    return replay(build_training_job(m, p, c, cost), obs);
  };
  struct Transfers : ReplayObserver {
    std::vector<Time> took;
    void on_transfer(const TrainingJob&, uint32_t, uint32_t, const Task&, Time s, Time e) override {
      took.push_back(e - s);
    }
  } eager_transfers, rendezvous_transfers;
  const ReplayResult eager = run("fw_fits.yaml", "pipeline_p2p_buffer: 2MiB\n", &eager_transfers);
  const ReplayResult none = run("fw_none.yaml", "", nullptr);
  const ReplayResult rdv =
      run("fw_small.yaml", "pipeline_p2p_buffer: 1MiB\n", &rendezvous_transfers);
  ASSERT_EQ(eager_transfers.took.size(), 4u);
  ASSERT_EQ(rendezvous_transfers.took, eager_transfers.took);
  const Time transfer = eager_transfers.took.front();
  for (const Time t : eager_transfers.took) EXPECT_EQ(t, transfer);
  EXPECT_EQ(eager.iteration, none.iteration);  // 2 MiB fits a 2 MiB buffer: no wait
  EXPECT_EQ(rdv.iteration - eager.iteration, transfer);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(rdv.copies[g].finish - eager.copies[g].finish, transfer) << g;
    EXPECT_EQ(rdv.copies[g].compute, eager.copies[g].compute) << g;
  }
  EXPECT_EQ(rdv.copies[0].pp_wait - eager.copies[0].pp_wait, transfer);
  EXPECT_EQ(framework_error("async", "pipeline_p2p_buffer: 4MiB\n"),
            "f.yaml:4: pipeline_p2p_buffer: needs pipeline_p2p: blocking (an asynchronous send's "
            "receiver posts its receive ahead)");
}

// Every transfer a rendezvous (buffer 0), DeepSpeed's order: no pipeline depth or micro-batch
// count deadlocks, and the replay of identical replicas folded gives the full replay's answer.
TEST(Frameworks, RendezvousInDeepSpeedsOrderNeverDeadlocks) {
  const ModelConfig m = small_gpt(8);
  const platform::Cluster c = dgx(2);
  const DatasheetCostModel cost;
  const std::string fw = framework_file("fw_rdv0.yaml",
                                        "pipeline_send_grad: after_next_receive\n"
                                        "pipeline_p2p_buffer: 0B\n");
  for (const char* schedule : {"1f1b", "gpipe"}) {
    for (int P : {2, 3, 4, 8}) {
      for (int mbs : {1, 2, 3, 5, 8}) {
        const std::string plan = fmt::format(
            "pipeline_parallel: {}\ndata_parallel: 2\nmicro_batch_size: 1\n"
            "global_batch_size: {}\ndevices: \"0-{}\"\nschedule: {}\nframework: {}\n",
            P, 2 * mbs, 2 * P - 1, schedule, fw);
        const std::string what = fmt::format("{}, {} stages, {} micro-batches", schedule, P, mbs);
        const Plan loaded = load_plan_text(plan, "p.yaml", m, c);  // the job points into it
        const TrainingJob job = build_training_job(m, loaded, c, cost);
        ReplayResult folded, exact;
        ASSERT_NO_THROW(folded = replay(job)) << what;
        ReplayOptions o;
        o.exact = true;
        ASSERT_NO_THROW(exact = replay(job, nullptr, o)) << what;
        EXPECT_EQ(folded.iteration, exact.iteration) << what;
      }
    }
  }
  // The orders that would deadlock are refused: each gradient sent after its own backward pass,
  // and interleaved chunks.
  EXPECT_EQ(framework_error("blocking", "pipeline_p2p_buffer: 4MiB\n"),
            "f.yaml:4: pipeline_p2p_buffer: needs pipeline_send_grad: after_next_receive (with "
            "each gradient sent right after its backward pass, two stages that both send first "
            "wait for each other)");
  EXPECT_EQ(error_of([&] {
              load_plan_text(
                  "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n"
                  "devices: \"0-1\"\nschedule: interleaved\ninterleave: 2\n"
                  "framework: " +
                      fw + "\n",
                  "p.yaml", m, c);
            }),
            "p.yaml:5: schedule: interleaved, which fw_rdv0.yaml does not run (" + fw +
                ": its pipeline sends wait for their receivers in an order with one chunk per "
                "stage); use 1f1b or gpipe");
}

}  // namespace
}  // namespace hetsim::workload

namespace hetsim::workload {
namespace {

// The loss's kernels, in bytes per logit, worked from the code they stand for.
// Megatron-LM (mpu/cross_entropy.py on `output.float()`), fp16: the cast 2 + 4, max 4, subtract
// in place 4 + 4, exp in place 4 + 4, sum 4, divide in place 4 + 4: 38 forward; the softmax
// times the loss's gradient in place 4 + 4, the cast back 4 + 2: 14 backward. Eager PyTorch
// (F.cross_entropy on `.float()` logits): the cast 6, log_softmax 4 + 4: 14 forward; nll_loss's
// gradient written 4, log_softmax's backward 4 + 4 + 4, the cast back 6: 22 backward. In fp32
// no casts. Each a streaming pass, over 1024 x 50304 logits per sequence at TP 1.
TEST(Frameworks, TheLossCountsEveryPassOverTheLogits) {
  const ModelConfig m = small_gpt(2);
  auto loss_bytes = [&](const std::vector<Step>& steps) {
    double bytes = 0;
    for (const Step& st : steps) {
      if (st.op.name.rfind("cross_entropy", 0) != 0) continue;
      EXPECT_TRUE(st.op.streaming) << st.op.name;
      bytes += st.op.bytes;
    }
    return bytes;
  };
  const double logits = 1024.0 * 50304;
  LayerShape s;
  s.micro_batch = 1;
  s.sequence = 1024;
  s.precision = Precision::fp16;
  EXPECT_EQ(loss_bytes(head_forward(m, s)), 38 * logits);
  EXPECT_EQ(loss_bytes(head_backward(m, s)), 14 * logits);
  s.eager = true;
  EXPECT_EQ(loss_bytes(head_forward(m, s)), 14 * logits);
  EXPECT_EQ(loss_bytes(head_backward(m, s)), 22 * logits);
  s.eager = false;
  s.precision = Precision::fp32;
  EXPECT_EQ(loss_bytes(head_forward(m, s)), 32 * logits);
  EXPECT_EQ(loss_bytes(head_backward(m, s)), 8 * logits);
  // Tensor parallel: each rank its 1/t of the vocabulary.
  s.precision = Precision::fp16;
  s.tensor_parallel = 2;
  EXPECT_EQ(loss_bytes(head_forward(m, s)), 38 * logits / 2);
}

TEST(FrameworkProfiles, MaskedSoftmaxSaysWhereTheFusedKernelRuns) {
  const Framework old = load_framework("megatron-lm-2021");
  EXPECT_TRUE(old.masked_softmax.given);
  EXPECT_EQ(old.masked_softmax.fused_up_to, 2048);
  EXPECT_TRUE(old.masked_softmax.unfused_fp32);
  const Framework plain = load_framework_text(kFramework, "f.yaml");
  EXPECT_FALSE(plain.masked_softmax.given);
  const Framework any =
      load_framework_text(std::string(kFramework) + "masked_softmax: {unfused: plan}\n", "f.yaml");
  EXPECT_TRUE(any.masked_softmax.given);
  EXPECT_EQ(any.masked_softmax.fused_up_to, 0);
  EXPECT_FALSE(any.masked_softmax.unfused_fp32);
  EXPECT_EQ(
      error_of([] {
        load_framework_text(std::string(kFramework) + "masked_softmax: {fused_up_to: 8}\n",
                            "f.yaml");
      }),
      "f.yaml:5: masked_softmax.fused_up_to: expected an integer from 17 to 1048576, got \"8\"");
  EXPECT_EQ(error_of([] {
              load_framework_text(std::string(kFramework) + "masked_softmax: 2048\n", "f.yaml");
            }),
            "f.yaml:5: masked_softmax: expected a map {fused_up_to: N, unfused: plan|fp32}");
}

}  // namespace
}  // namespace hetsim::workload
