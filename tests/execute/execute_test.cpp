// `hetsim execute` on this machine's CPU under mpirun -np 2: a small GPT calibrated here, in the
// same run (its exact GEMM and attention shapes, the memory kernels, the MPI collectives), then
// data parallel 2, a 2-stage 1F1B pipeline and tensor parallel 2 run for real and compared with
// the prediction; and the failures: a rank killed mid-iteration, more devices than ranks.
// One process for all of it (CTest runs it alone: measured times need the machine to
// themselves), so the calibration is made once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/execute/";
const std::string kModel = kData + "tiny-gpt.yaml";

std::string mpirun(const std::string& args) {
  return "mpirun --allow-run-as-root --oversubscribe -np 2 " + shell_quote(HETSIM_BINARY) + " " +
         args;
}

CommandResult shell(const std::string& command) { return run_program("/bin/sh", {"-c", command}); }

class Execute : public ::testing::Test {
 public:  // kind() is used by the free helpers below
  static void SetUpTestSuite() {
    // One BLAS thread per rank (two ranks on two cores), in the calibration as in the run; Open
    // MPI's plugins keep allocations LeakSanitizer cannot attribute (see calibrate_test.cpp).
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    // Per process: two test runs at once (a build tree's and a clean clone's) must not share
    // the calibration they make and read.
    dir_ =
        new std::string(::testing::TempDir() + "hetsim-execute-" + std::to_string(getpid()) + "/");
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    const CommandResult shapes =
        run_hetsim({"calibrate", "shapes", "--models", kModel, "--tp", "1,2", "--micro-batch",
                    "1,2", "--out", *dir_ + "shapes.csv"});
    ASSERT_EQ(shapes.exit_code, 0) << shapes.output;
    db_ = new std::string(*dir_ + "cpu.h5");
    calibrate(*db_);
  }
  static void calibrate(const std::string& db) {
    const CommandResult cal =
        shell(mpirun("calibrate --backend cpu --quick --shapes " +
                     shell_quote(*dir_ + "shapes.csv") + " --out " + shell_quote(db)));
    ASSERT_EQ(cal.exit_code, 0) << cal.output;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(*dir_, ignored);
    delete dir_;
    delete db_;
  }

  // Runs a plan; returns the JSON comparison.
  static nlohmann::json execute(const std::string& plan, const std::string& extra = "") {
    const CommandResult r =
        shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster cpu-host --plan " +
                     shell_quote(kData + plan) + " --calibration " + shell_quote(*db_) +
                     " --iterations 10 --warmup 2 --json " + extra + " 2>/dev/null"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    try {
      return nlohmann::json::parse(r.output);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << r.output;
      return {};
    }
  }

  static double kind(const nlohmann::json& j, const std::string& what, const char* field) {
    for (const auto& k : j["kinds"])
      if (k["what"] == what) return k[field].get<double>();
    ADD_FAILURE() << "no kind " << what;
    return 0;
  }

  // Runs a plan and holds the prediction to the measured median, in two parts. The machines
  // this runs on are shared virtual ones whose speed moves by more than half within minutes
  // (seen: dp2 predicted 0.55 s from a calibration, measured 0.96 s a minute later, its
  // kernels alone 0.78 s against 0.55 s; in CI, pp2 +27% and +38% the other way, every kernel
  // 1.35-1.67x faster than calibrated). So:
  // - the replay with the compute as this run measured it (execute::with_measured_compute) is
  //   held to 10%: the schedule, the waits and the collectives the simulator makes of the
  //   kernels (seen here: within 6%);
  // - the prediction from the calibration is held to 15% when the kernels ran at the speed they
  //   were calibrated at (their predicted time within 10% of their measured time), and to a
  //   factor of 2 when they did not (a wrong shape, a missing kernel or a unit slip is out of
  //   that; a machine's change of speed between the calibration and the run is not).
  // A plan outside the bounds is calibrated afresh and run again once, and that second pair is
  // held to them. A model that is wrong is wrong twice.
  static double drift(const nlohmann::json& j) {  // the kernels' predicted / measured time - 1
    const double measured = kind(j, "compute", "measured_s");
    return measured > 0 ? kind(j, "compute", "predicted_s") / measured - 1 : 0;
  }
  static bool steady(const nlohmann::json& j) { return std::abs(drift(j)) < 0.10; }
  static bool within(const nlohmann::json& j) {
    const double e = j["error"].get<double>();
    return std::abs(j["replayed_error"].get<double>()) < 0.10 &&
           (steady(j) ? std::abs(e) < 0.15 : std::abs(std::log1p(e)) < std::log(2.0));
  }

  static nlohmann::json run_and_compare(const std::string& plan, const std::string& extra = "") {
    nlohmann::json j = execute(plan + ".yaml", extra);
    if (!j.contains("error") || !j.contains("replayed_error")) return j;
    print(j, plan);
#if !defined(__SANITIZE_ADDRESS__)
    if (!within(j)) {
      std::printf("  outside the bounds: calibrating again and running %s once more\n",
                  plan.c_str());
      const std::string fresh = *dir_ + "cpu-again.h5";
      std::filesystem::remove(fresh);
      std::filesystem::remove(fresh + ".journal.csv");
      calibrate(fresh);
      *db_ = fresh;
      j = execute(plan + ".yaml", extra);
      if (!j.contains("error") || !j.contains("replayed_error")) return j;
      print(j, plan);
    }
#endif
    expect_close(j);
    return j;
  }

  static void print(const nlohmann::json& j, const std::string& plan) {
    std::printf(
        "%s: predicted %.4f s, measured %.4f s (median; min %.4f, max %.4f), error %+.1f%%; "
        "replayed with the measured compute %.4f s, error %+.1f%%; kernels %+.1f%%\n",
        plan.c_str(), j["predicted_iteration_s"].get<double>(),
        j["measured_median_s"].get<double>(), j["measured_min_s"].get<double>(),
        j["measured_max_s"].get<double>(), 100 * j["error"].get<double>(),
        j.value("replayed_iteration_s", 0.0), 100 * j.value("replayed_error", 0.0), 100 * drift(j));
  }

  static void expect_close(const nlohmann::json& j) {
    ASSERT_TRUE(j.contains("error")) << j.dump(2);
    ASSERT_TRUE(j.contains("replayed_error")) << j.dump(2);
    EXPECT_EQ(j["ranks"], 2);
    EXPECT_EQ(j["measured_iteration_s"].size(), 10u);
    const double error = j["error"].get<double>();
    const double replayed = j["replayed_error"].get<double>();
#if defined(__SANITIZE_ADDRESS__)
    // Instrumented, the executor's own bookkeeping (buffers, polling) runs several times slower
    // than in the program whose time is predicted: the figures are printed, not held.
    std::printf("  (AddressSanitizer build: the errors, %+.1f%% and %+.1f%%, are not asserted)\n",
                100 * error, 100 * replayed);
#else
    EXPECT_LT(std::abs(replayed), 0.10) << j.dump(2);
    if (steady(j)) {
      EXPECT_LT(std::abs(error), 0.15) << j.dump(2);
    } else {
      std::printf(
          "  the kernels measured %+.1f%% against their calibrated time (the machine's speed "
          "moved): the "
          "calibrated prediction is held to a factor of 2, not 15%%\n",
          -100 * drift(j) / (1 + drift(j)));
      EXPECT_LT(std::abs(std::log1p(error)), std::log(2.0)) << j.dump(2);
    }
#endif
    // Every kernel the prediction costs ran, as often as the program says.
    ASSERT_FALSE(j["kernels"].empty());
    for (const auto& k : j["kernels"]) {
      EXPECT_GT(k["calls"].get<int>(), 0) << k.dump();
      EXPECT_GT(k["measured_s"].get<double>(), 0) << k.dump();
      EXPECT_GT(k["predicted_s"].get<double>(), 0) << k.dump();
    }
  }

  static std::string* dir_;
  static std::string* db_;
};

std::string* Execute::dir_ = nullptr;
std::string* Execute::db_ = nullptr;

TEST_F(Execute, DataParallelTwoPredictsTheIteration) {
  const nlohmann::json j = run_and_compare("dp2");
  // The gradient all-reduce after the backward pass is the only wait.
  EXPECT_GT(kind(j, "data-parallel wait", "measured_s"), 0);
  EXPECT_EQ(kind(j, "pipeline wait", "measured_s"), 0);
  EXPECT_EQ(kind(j, "tensor-parallel wait", "measured_s"), 0);
}

TEST_F(Execute, PipelineTwoStagesOneFOneBPredictsTheIteration) {
  const std::string trace = *dir_ + "pp2.trace.json";
  const nlohmann::json j = run_and_compare("pp2", "--trace " + shell_quote(trace));
  // 1F1B over 8 micro-batches: each stage waits for the other (the bubble), and the tied
  // embedding is all-reduced between the two ends.
  EXPECT_GT(kind(j, "pipeline wait", "measured_s"), 0);
  EXPECT_GT(kind(j, "pipeline wait", "predicted_s"), 0);
  EXPECT_GT(kind(j, "data-parallel wait", "measured_s"), 0);
  // The measured trace: compute slices and the transfers between the stages.
  std::ifstream in(trace);
  ASSERT_TRUE(in) << trace;
  const nlohmann::json t = nlohmann::json::parse(in);
  size_t compute = 0, transfers = 0;
  for (const auto& e : t["traceEvents"]) {
    compute += e.value("cat", "") == "compute";
    transfers += e.value("cat", "") == "pipeline";
  }
  EXPECT_GT(compute, 0u) << t.dump().substr(0, 2000);
  EXPECT_GT(transfers, 0u) << t.dump().substr(0, 2000);
}

// The same pipeline with DeepSpeed's blocking sends in its order, every one a rendezvous (the
// receive posted only when the receiving rank reaches it, the send synchronous): it runs
// without a deadlock, and the prediction, which makes every send wait for its receiver too,
// holds to the same bounds.
TEST_F(Execute, PipelineSendsThatWaitForTheirReceiversPredictTheIteration) {
  const nlohmann::json j =
      run_and_compare("pp2", "--plan-set framework=" + shell_quote(kData + "rendezvous.yaml"));
  EXPECT_GT(kind(j, "pipeline wait", "measured_s"), 0);
  EXPECT_GT(kind(j, "pipeline wait", "predicted_s"), 0);
}

TEST_F(Execute, TensorParallelTwoPredictsTheIteration) {
  const nlohmann::json j = run_and_compare("tp2");
  EXPECT_GT(kind(j, "tensor-parallel wait", "measured_s"), 0);
  EXPECT_GT(kind(j, "tensor-parallel wait", "predicted_s"), 0);
}

TEST_F(Execute, ReplicasAtDifferentTensorParallelDegreesReduceTheirGradientsInShards) {
  // The whole model on rank 0 beside the same layers over ranks 1 and 2 (tensor parallel 2):
  // each layer's gradients go in two shards, rank 0 with rank 1 and rank 0 with rank 2, rank 0
  // holding both. Three ranks on two cores: the kernels share a core, so the calibrated
  // prediction is printed, not held; the run must finish (--timeout: shards that did not
  // match would hang), reduce its gradients, and replay with its measured compute to within a
  // factor of 2.
  const CommandResult r =
      shell("mpirun --allow-run-as-root --oversubscribe -np 3 " + shell_quote(HETSIM_BINARY) +
            " execute --model " + shell_quote(kModel) + " --cluster " +
            shell_quote(kData + "cpu-host-4.yaml") + " --plan " +
            shell_quote(kData + "mixed-tp.yaml") + " --calibration " + shell_quote(*db_) +
            " --iterations 4 --warmup 1 --timeout 120 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  print(j, "mixed-tp");
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_EQ(j["measured_iteration_s"].size(), 4u);
  EXPECT_GT(kind(j, "data-parallel wait", "predicted_s"), 0);
  EXPECT_GT(kind(j, "data-parallel wait", "measured_s"), 0);
  EXPECT_LT(std::abs(std::log1p(j["replayed_error"].get<double>())), std::log(2.0)) << j.dump(2);
}

// A staged plan: two groups on the first stage, one on the second. Each micro-batch's halves
// fan in to rank 2 and their gradients fan back out; stage 0 reduces its gradients between ranks
// 0 and 1. The run must finish with the pipeline and data-parallel waits measured where the
// replay predicts them, and the replay with the measured compute within a factor of 2.
TEST_F(Execute, AStagedPlanReshardsBetweenItsStages) {
  const CommandResult r =
      shell("mpirun --allow-run-as-root --oversubscribe -np 3 " + shell_quote(HETSIM_BINARY) +
            " execute --model " + shell_quote(kModel) + " --cluster " +
            shell_quote(kData + "cpu-host-4.yaml") + " --plan " +
            shell_quote(kData + "staged.yaml") + " --calibration " + shell_quote(*db_) +
            " --iterations 4 --warmup 1 --timeout 120 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  print(j, "staged");
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_GT(kind(j, "pipeline wait", "predicted_s"), 0);
  EXPECT_GT(kind(j, "pipeline wait", "measured_s"), 0);
  EXPECT_GT(kind(j, "data-parallel wait", "predicted_s"), 0);
  EXPECT_LT(std::abs(std::log1p(j["replayed_error"].get<double>())), std::log(2.0)) << j.dump(2);
}

// Expert and context parallelism across the two ranks: the collectives run over the peers in
// the other replica. Their waits on a shared two-core machine are mostly the other rank's
// compute jitter, so the calibrated prediction is printed, not held; the run must finish, the
// waits be measured where the replay predicts them, the trace carry them, and the replay with
// the measured compute come within a factor of 2.
// `prefix`: the trace names of the collectives ("ep." for the dispatch and combine all-to-alls,
// "cp." for the key/value exchanges).
void expect_peers_ran(const nlohmann::json& j, const std::string& wait, const std::string& trace,
                      const std::string& prefix) {
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_GT(Execute::kind(j, wait, "predicted_s"), 0);
  EXPECT_GT(Execute::kind(j, wait, "measured_s"), 0);
  EXPECT_LT(std::abs(std::log1p(j["replayed_error"].get<double>())), std::log(2.0)) << j.dump(2);
  std::ifstream in(trace);
  ASSERT_TRUE(in) << trace;
  const nlohmann::json t = nlohmann::json::parse(in);
  size_t n = 0;
  for (const auto& e : t["traceEvents"])
    n += e.value("cat", "") == "comm" && e.value("name", "").rfind(prefix, 0) == 0;
  EXPECT_GT(n, 0u) << prefix << " in " << t.dump().substr(0, 2000);
}

TEST_F(Execute, ExpertParallelAllToAllsRunBetweenTheReplicas) {
  const std::string trace = *dir_ + "ep2.trace.json";
  const CommandResult r = shell(
      mpirun("execute --model " + shell_quote(kData + "tiny-moe.yaml") +
             " --cluster cpu-host --plan " + shell_quote(kData + "ep2.yaml") + " --calibration " +
             shell_quote(*db_) + " --iterations 4 --warmup 1 --timeout 120 --json --trace " +
             shell_quote(trace) + " 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  print(j, "ep2");
  expect_peers_ran(j, "expert-parallel wait", trace, "ep.");
}

TEST_F(Execute, ContextParallelExchangesRunBetweenTheReplicas) {
  const std::string trace = *dir_ + "cp2.trace.json";
  const CommandResult r =
      shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster cpu-host --plan " +
                   shell_quote(kData + "cp2.yaml") + " --calibration " + shell_quote(*db_) +
                   " --iterations 4 --warmup 1 --timeout 120 --json --trace " + shell_quote(trace) +
                   " 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  print(j, "cp2");
  expect_peers_ran(j, "context-parallel wait", trace, "cp.");
}

TEST_F(Execute, ARankKilledMidIterationEndsEveryRank) {
  const CommandResult r =
      shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster cpu-host --plan " +
                   shell_quote(kData + "pp2.yaml") + " --fault kill:1:40 --timeout 30"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("execute: rank 1: killed by --fault at task 40"), std::string::npos)
      << r.output;
  // mpirun names the rank that died and ends the others.
  EXPECT_NE(r.output.find("signal 9"), std::string::npos) << r.output;
}

TEST_F(Execute, MoreDevicesThanRanksSaysHowManyToStart) {
  // A host of four: data parallel over four devices, two ranks.
  const CommandResult r =
      shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster " +
                   shell_quote(kData + "cpu-host-4.yaml") + " --plan " +
                   shell_quote(kData + "dp2.yaml") + " --plan-set data_parallel=4"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string want = "its devices go up to GPU 3 (4 ranks needed";
  const size_t at = r.output.find(want);
  EXPECT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run under mpirun -np 4"), std::string::npos) << r.output;
  // Said once, by rank 0.
  EXPECT_EQ(r.output.find(want, at + 1), std::string::npos) << r.output;
}

// A plan that does not choose its attention runs the unfused kernel on the CPU (it has no fused
// one), is predicted with it, and the run says so; one that asks for flash is refused (below).
TEST_F(Execute, APlanThatDoesNotChooseItsAttentionRunsTheUnfusedKernelAndSaysSo) {
  const CommandResult r =
      shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster cpu-host --plan " +
                   shell_quote(kData + "dp2-attention-unsaid.yaml") + " --calibration " +
                   shell_quote(*db_) + " --iterations 2 --warmup 1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the CPU backend has no fused kernel, so it runs, and the prediction "
                          "takes, the unfused one (attention: standard)"),
            std::string::npos)
      << r.output;
}

TEST_F(Execute, RefusesWhatTheCpuCannotRunAsPredicted) {
  const CommandResult r =
      shell(mpirun("execute --model " + shell_quote(kModel) + " --cluster cpu-host --plan " +
                   shell_quote(kData + "tp2.yaml") + " --plan-set attention=flash"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("attention: the CPU backend has no fused (flash) attention kernel; "
                          "expected attention: standard"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace hetsim::e2e
