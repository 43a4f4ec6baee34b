// The progress display and the replay's progress hook: lines only after the threshold, an ETA
// only when the fraction done says something, and results unchanged by observing them.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "sim/report/progress.h"
#include "sim/report/training_report.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::report {
namespace {

workload::ReplayStatus status(uint64_t done, uint64_t total) {
  workload::ReplayStatus s;
  s.now = Time::from_seconds_ceil(1.5);
  s.events = 123456;
  s.tasks_done = done;
  s.tasks_total = total;
  return s;
}

TEST(ProgressMeter, LineSaysWallSimulatedEventsFractionAndEstimate) {
  // 4 s for a quarter of the tasks: 12 s more at the same pace.
  EXPECT_EQ(ProgressMeter::line("simulate", 4.0, status(25, 100)),
            "simulate: 4.0 s, simulated 1.50 s, 123456 events, 25% of tasks, about 12 s left");
}

TEST(ProgressMeter, NoEstimateBelowFivePercentOrWhenDone) {
  const std::string early = ProgressMeter::line("x", 4.0, status(4, 100));
  EXPECT_EQ(early.find("left"), std::string::npos) << early;
  EXPECT_NE(early.find("4% of tasks"), std::string::npos) << early;
  EXPECT_NE(ProgressMeter::line("x", 4.0, status(5, 100)).find("about 76 s left"),
            std::string::npos);
  EXPECT_EQ(ProgressMeter::line("x", 4.0, status(100, 100)).find("left"), std::string::npos);
}

TEST(ProgressMeter, RateLineCountsOnlyWorkDoneNowInRateAndEstimate) {
  // 30 of 100 done, 10 of them before: 20 in 4 s = 5 runs/s, 70 left = 14 s.
  EXPECT_EQ(ProgressMeter::rate_line("sweep", 4.0, 30, 100, 10, "runs"),
            "sweep: 4.0 s, 30 of 100 runs done (10 done before), 70 left, 5.0 runs/s, about 14 s "
            "left");
  // Nothing done yet by this process: no rate, no estimate.
  EXPECT_EQ(ProgressMeter::rate_line("sweep", 1.0, 10, 100, 10, "runs"),
            "sweep: 1.0 s, 10 of 100 runs done (10 done before), 90 left");
  // All done: the rate, no estimate.
  EXPECT_EQ(ProgressMeter::rate_line("sweep", 2.0, 4, 4, 0, "runs"),
            "sweep: 2.0 s, 4 of 4 runs done, 0 left, 2.0 runs/s");
}

TEST(ProgressMeter, SilentBeforeTheThresholdThenALinePerInterval) {
  std::ostringstream late, now;
  ProgressMeter quiet(late, "x", 1e9);
  ProgressMeter eager(now, "x", 0.0, 1e9);
  for (int i = 0; i < 3; ++i) {
    quiet.update(status(1, 2));
    eager.update(status(1, 2));
  }
  quiet.finish();
  eager.finish();
  EXPECT_EQ(late.str(), "");
  // Due at once, then not again within the (huge) interval: exactly one line.
  const std::string text = now.str();
  EXPECT_EQ(text.rfind("x: ", 0), 0u) << text;
  EXPECT_NE(text.find("50% of tasks"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

TEST(ProgressMeter, RewriteModeEndsItsLineOnFinish) {
  std::ostringstream out;
  ProgressMeter m(out, "x", 0.0, 1e9, true);
  m.update(status(1, 2));
  EXPECT_EQ(out.str().front(), '\r');
  EXPECT_EQ(out.str().find('\n'), std::string::npos);
  m.finish();
  EXPECT_EQ(out.str().back(), '\n');
}

TEST(ReplayProgress, ObservingTheReplayChangesNoFigureAndCountsTasksUpToTheTotal) {
  const workload::ModelConfig m = workload::load_model("gpt3-125m");
  config::ClusterOptions o;
  o.nodes = 2;
  const platform::Cluster c(config::load_cluster("dgx-a100", o));
  const workload::Plan p = workload::load_plan_text(
      "tensor_parallel: 2\npipeline_parallel: 2\ndata_parallel: 4\nmicro_batch_size: 1\n"
      "global_batch_size: 16\nsequence_length: 1024\n",
      "p.yaml", m, c);
  const workload::DatasheetCostModel cost;
  const workload::TrainingJob job = workload::build_training_job(m, p, c, cost);
  const workload::ReplayResult plain = workload::replay(job);
  std::vector<workload::ReplayStatus> seen;
  workload::ReplayOptions opt;
  opt.progress_every = 100;
  opt.progress = [&](const workload::ReplayStatus& s) { seen.push_back(s); };
  const workload::ReplayResult observed = workload::replay(job, nullptr, opt);
  const auto mem = workload::memory_per_copy(job);
  EXPECT_EQ(to_json(make_training_report(job, plain, mem)).dump(),
            to_json(make_training_report(job, observed, mem)).dump());
  EXPECT_EQ(observed.events, plain.events);
  // One call per 100 events, each further along than the last, never past the total.
  ASSERT_EQ(seen.size(), plain.events / 100);
  uint64_t total = 0;
  for (const auto& g : job.copies) total += g.program.size();
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].events, 100 * (i + 1));
    EXPECT_EQ(seen[i].tasks_total, total);
    EXPECT_LE(seen[i].tasks_done, total);
    if (i > 0) {
      EXPECT_GE(seen[i].tasks_done, seen[i - 1].tasks_done);
      EXPECT_GE(seen[i].now, seen[i - 1].now);
    }
  }
}

}  // namespace
}  // namespace hetsim::report
