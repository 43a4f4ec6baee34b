// `hetsim execute`'s replay with the measured compute (execute::with_measured_compute): measured
// times that equal the prediction change nothing; a single GPU's iteration is its measured
// compute; a pipeline waits on its slower stage as measured; groups without measurements keep
// the cost model's times; and the comparison reports the replay beside the prediction.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/execute/executor.h"
#include "sim/workload/replay/replay.h"
#include "tests/unit/fixtures.h"

namespace hetsim::execute {
namespace {

using workload::Plan;
using workload::ReplayOptions;
using workload::ReplayResult;
using workload::TaskKind;
using workload::TrainingJob;

struct Built {
  workload::ModelConfig model = test::small_gpt(4);
  platform::Cluster cluster = test::cluster("dgx-a100", 1);
  workload::DatasheetCostModel cost;
  Plan plan;
  TrainingJob job;
  explicit Built(const std::string& plan_text)
      : plan(workload::load_plan_text(plan_text, "p.yaml", model, cluster)),
        job(workload::build_training_job(model, plan, cluster, cost)) {}
};

// Every device's tasks as the prediction times them, each compute task's seconds times
// `scale(group)` (Measured::task_s).
Measured measured_as_predicted(const TrainingJob& job,
                               const std::function<double(uint32_t)>& scale) {
  Measured m;
  uint32_t devices = 0;
  for (const workload::StageCopy& g : job.copies)
    for (platform::GpuId d : g.devices) devices = std::max(devices, d + 1);
  m.task_s.resize(devices);
  for (uint32_t gi = 0; gi < job.copies.size(); ++gi) {
    const workload::StageCopy& g = job.copies[gi];
    std::vector<double> t(g.program.size(), 0.0);
    for (size_t pc = 0; pc < g.program.size(); ++pc) {
      if (g.program[pc].kind == TaskKind::compute)
        t[pc] = g.segments[g.program[pc].index].duration.seconds() * scale(gi);
    }
    for (platform::GpuId d : g.devices) m.task_s[d] = t;
  }
  return m;
}

ReplayResult replay_exact(const TrainingJob& job, bool free_communication = false) {
  ReplayOptions o;
  o.exact = true;
  o.free_communication = free_communication;
  return workload::replay(job, nullptr, o);
}

TEST(MeasuredCompute, TimesEqualToThePredictionChangeNothing) {
  const Built b(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 2\nmicro_batch_size: 1\n"
      "global_batch_size: 8\nsequence_length: 1024\n");
  const ReplayResult before = replay_exact(b.job);
  const ReplayResult after = replay_exact(
      with_measured_compute(b.job, measured_as_predicted(b.job, [](uint32_t) { return 1.0; })));
  // Each task's seconds go through a double and back: a picosecond apart at most per task.
  EXPECT_NEAR(after.iteration.seconds(), before.iteration.seconds(), 1e-9);
  EXPECT_GT(before.iteration.seconds(), 0);
}

TEST(MeasuredCompute, OneGpuIterationIsItsMeasuredCompute) {
  const Built b(
      "devices: \"0\"\nmicro_batch_size: 2\nglobal_batch_size: 4\nsequence_length: 1024\n");
  const ReplayResult before = replay_exact(b.job);
  const ReplayResult twice = replay_exact(
      with_measured_compute(b.job, measured_as_predicted(b.job, [](uint32_t) { return 2.0; })));
  EXPECT_NEAR(twice.iteration.seconds(), 2 * before.iteration.seconds(), 1e-9);
  EXPECT_NEAR(twice.copies[0].compute.seconds(), 2 * before.copies[0].compute.seconds(), 1e-9);
}

TEST(MeasuredCompute, APipelineWaitsOnItsSlowerStageAsMeasured) {
  // Two stages, 8 micro-batches, no communication: the second stage measured 3x slower makes
  // the first wait on it; the iteration becomes the slow stage's compute plus the fast stage's
  // share of the fill and drain, more than the prediction and less than 3x it.
  const Built b(
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\n"
      "schedule: 1f1b\n");
  const ReplayResult before = replay_exact(b.job, true);
  const TrainingJob slow = with_measured_compute(
      b.job, measured_as_predicted(b.job, [](uint32_t g) { return g == 1 ? 3.0 : 1.0; }));
  const ReplayResult after = replay_exact(slow, true);
  EXPECT_NEAR(after.copies[1].compute.seconds(), 3 * before.copies[1].compute.seconds(), 1e-9);
  EXPECT_NEAR(after.copies[0].compute.seconds(), before.copies[0].compute.seconds(), 1e-9);
  EXPECT_GT(after.copies[0].pp_wait.seconds(), before.copies[0].pp_wait.seconds());
  EXPECT_GE(after.iteration.seconds(), after.copies[1].compute.seconds());
  EXPECT_LT(after.iteration.seconds(), 3 * before.iteration.seconds());
}

TEST(MeasuredCompute, GroupsWithoutMeasurementsKeepThePrediction) {
  const Built b(
      "pipeline_parallel: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\nsequence_length: 1024\n");
  Measured m = measured_as_predicted(b.job, [](uint32_t) { return 5.0; });
  // Stage 1's device reported nothing (a backend that does not time tasks).
  for (platform::GpuId d : b.job.copies[1].devices) m.task_s[d].clear();
  const TrainingJob timed = with_measured_compute(b.job, m);
  const ReplayResult before = replay_exact(b.job, true), after = replay_exact(timed, true);
  EXPECT_NEAR(after.copies[0].compute.seconds(), 5 * before.copies[0].compute.seconds(), 1e-9);
  EXPECT_NEAR(after.copies[1].compute.seconds(), before.copies[1].compute.seconds(), 1e-9);
  // Nothing measured at all: the job as it was.
  EXPECT_EQ(replay_exact(with_measured_compute(b.job, Measured{}), true).iteration,
            before.iteration);
}

TEST(MeasuredCompute, TheComparisonReportsTheReplay) {
  const Built b(
      "devices: \"0\"\nmicro_batch_size: 2\nglobal_batch_size: 4\nsequence_length: 1024\n");
  const ReplayResult predicted = replay_exact(b.job);
  Measured m = measured_as_predicted(b.job, [](uint32_t) { return 1.25; });
  m.backend = "cpu";
  m.ranks = 1;
  m.devices.resize(1);
  const double measured = 1.25 * predicted.iteration.seconds();
  m.iteration_s = {measured, measured};
  const ReplayResult replayed = replay_exact(with_measured_compute(b.job, m));
  const Comparison c = compare(b.job, predicted, m, &replayed);
  EXPECT_TRUE(c.replayed);
  EXPECT_NEAR(c.error, 1 / 1.25 - 1, 1e-9);
  EXPECT_NEAR(c.replayed_error, 0, 1e-9);
  const nlohmann::json j = nlohmann::json::parse(to_json(c, m));
  EXPECT_NEAR(j["replayed_iteration_s"].get<double>(), measured, 1e-9);
  EXPECT_NEAR(j["replayed_error"].get<double>(), 0, 1e-9);
  EXPECT_NE(to_text(c, m).find("replayed with the measured compute"), std::string::npos);
  // Without a replay the report has none.
  const Comparison plain = compare(b.job, predicted, m);
  EXPECT_FALSE(nlohmann::json::parse(to_json(plain, m)).contains("replayed_error"));
}

}  // namespace
}  // namespace hetsim::execute
