// hetsim sweep end to end: a study killed with SIGKILL and rerun gives the store an
// uninterrupted one gives; a finished study reruns nothing; stored figures are `simulate
// --json`'s exactly; one thread or two give the same store; bad study files exit 2 naming the
// file, line and key.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "sim/study/store.h"
#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

namespace fs = std::filesystem;
using study::RunRecord;

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/study/";

std::string fresh_folder() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path p = fs::path(::testing::TempDir()) / (std::string("sweep_") + info->name());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// gpt3-350m and gpt3-1.3b on one and two DGX A100 nodes under three plans: 12 runs, 4 of which
// fail (tp2-dp4 needs 8 GPUs, tp4-pp2-dp2 16).
std::string write_study(const std::string& d) {
  const std::string file = d + "/study.yaml";
  write(file,
        "models: [gpt3-350m, gpt3-1.3b]\n"
        "clusters:\n  - cluster: dgx-a100\n    nodes: 1\n"
        "  - cluster: dgx-a100\n    nodes: 2\n"
        "plans:\n  - " +
            kData + "tp8.yaml\n  - " + kData + "tp2-dp4.yaml\n  - " + kData + "tp4-pp2-dp2.yaml\n");
  return file;
}

std::vector<RunRecord> records(const std::string& db) { return study::Store(db).records(); }

// Bit for bit, every figure and text of every run.
void expect_same_store(const std::vector<RunRecord>& a, const std::vector<RunRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(std::bit_cast<uint64_t>(a[i].iteration_time_s),
              std::bit_cast<uint64_t>(b[i].iteration_time_s))
        << a[i].key;
    EXPECT_EQ(std::bit_cast<uint64_t>(a[i].mfu), std::bit_cast<uint64_t>(b[i].mfu)) << a[i].key;
    EXPECT_TRUE(a[i] == b[i]) << "run " << a[i].key << " differs";
  }
}

// Rows in the store, read as a second process would read it; -1 before the table exists.
int64_t stored_rows(const std::string& db) {
  if (!fs::exists(db)) return -1;
  sqlite3* c = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(c, 1000);
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(c, "SELECT count(*) FROM runs", -1, &s, nullptr) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
      n = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(c);
  return n;
}

// Starts `hetsim sweep study --store db --jobs 1` with its output dropped.
pid_t start_sweep(const std::string& study, const std::string& db) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1), dup2(null, 2);
    execl(HETSIM_BINARY, HETSIM_BINARY, "sweep", "--no-report", study.c_str(), "--store",
          db.c_str(), "--jobs", "1", "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

TEST(Sweep, KilledWithSigkillAndRerunGivesTheUninterruptedStore) {
  const std::string d = fresh_folder();
  // 24 runs: the 12 of write_study under two frameworks.
  const std::string study = write_study(d);
  std::ofstream(study, std::ios::app) << "frameworks: [megatron, deepspeed]\n";
  ASSERT_EQ(
      run_hetsim({"sweep", "--no-report", study, "--store", d + "/whole.db", "--quiet"}).exit_code,
      0);
  const std::vector<RunRecord> whole = records(d + "/whole.db");
  ASSERT_EQ(whole.size(), 24u);

  // Kill it whenever two more runs are stored, whatever it is doing then, and start it again,
  // until half the runs are stored; then let a last start finish it.
  const std::string db = d + "/killed.db";
  int kills = 0;
  for (int attempt = 0; attempt < 30 && stored_rows(db) < 12; ++attempt) {
    const int64_t before = std::max<int64_t>(stored_rows(db), 0);
    const pid_t pid = start_sweep(study, db);
    ASSERT_GT(pid, 0);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (stored_rows(db) < before + 2 && std::chrono::steady_clock::now() < deadline &&
           waitpid(pid, &status, WNOHANG) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (kill(pid, SIGKILL) == 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status)) {
      ++kills;
      const int64_t kept = stored_rows(db);
      EXPECT_GE(kept, before + 2) << "a committed run was lost";
      continue;
    }
    break;  // it finished before the kill
  }
  EXPECT_GE(kills, 2) << "the study was never interrupted: nothing tested";
  EXPECT_LT(stored_rows(db), 24) << "a killed start finished the study: nothing left to resume";

  const CommandResult r = run_hetsim({"sweep", "--no-report", study, "--store", db, "--jobs", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" already in " + db), std::string::npos) << r.output;
  expect_same_store(whole, records(db));
}

TEST(Sweep, RerunningAFinishedStudyRunsNothingNew) {
  const std::string d = fresh_folder();
  const std::string study = write_study(d);
  const CommandResult first = run_hetsim({"sweep", "--no-report", study, "--jobs", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // The store and the table beside the study by default.
  const std::string db = d + "/study.db";
  EXPECT_NE(
      first.output.find("sweep: 12 runs: 12 run now on 2 threads (4 failed), 0 already in " + db +
                        "; 4 failed in all (see the error column); table in " + d + "/study.csv\n"),
      std::string::npos)
      << first.output;
  const std::vector<RunRecord> before = records(db);
  const CommandResult again = run_hetsim({"sweep", "--no-report", study, "--jobs", "2"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("sweep: 12 runs: 0 run now on 2 threads (0 failed), 12 already in "),
            std::string::npos)
      << again.output;
  expect_same_store(before, records(db));
}

TEST(Sweep, AFailingRunIsRecordedWithItsErrorAndTheStudyGoesOn) {
  const std::string d = fresh_folder();
  const std::string study = write_study(d);
  const CommandResult r = run_hetsim(
      {"sweep", "--no-report", study, "--csv", d + "/t.csv", "--json"}, Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["runs"].size(), 12u);
  size_t failed = 0;
  for (const auto& run : j["runs"]) {
    if (run["status"] == "failed") {
      ++failed;
      EXPECT_NE(run["error"].get<std::string>().find("but the plan has"), std::string::npos)
          << run.dump();
    } else {
      EXPECT_GT(run["iteration_time_s"].get<double>(), 0) << run.dump();
    }
  }
  EXPECT_EQ(failed, 4u);
  std::ifstream csv(d + "/t.csv");
  size_t lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 13u) << "a header and a row per run";
}

TEST(Sweep, StoredFiguresAreSimulateJsonExactly) {
  const std::string d = fresh_folder();
  const std::string study = write_study(d);
  ASSERT_EQ(run_hetsim({"sweep", "--no-report", study, "--quiet"}).exit_code, 0);
  size_t compared = 0;
  for (const RunRecord& rec : records(d + "/study.db")) {
    if (!rec.ok) continue;
    const nlohmann::json in = nlohmann::json::parse(rec.inputs);
    const CommandResult sim =
        run_hetsim({"simulate", "--model", in["model"], "--cluster", in["cluster"], "--nodes",
                    std::to_string(in["nodes"].get<int>()), "--plan", in["plan"], "--json"},
                   Capture::stdout_only);
    ASSERT_EQ(sim.exit_code, 0) << rec.inputs;
    EXPECT_EQ(rec.report_json, sim.output) << "the stored report is simulate's, byte for byte";
    const nlohmann::json j = nlohmann::json::parse(sim.output);
    EXPECT_EQ(std::bit_cast<uint64_t>(rec.iteration_time_s),
              std::bit_cast<uint64_t>(j["iteration_time_s"].get<double>()));
    EXPECT_EQ(rec.tokens_per_s, j["throughput_tokens_per_s"].get<double>());
    EXPECT_EQ(rec.samples_per_s, j["throughput_samples_per_s"].get<double>());
    EXPECT_EQ(rec.mfu, j["mfu"].get<double>());
    EXPECT_EQ(rec.oom, j["oom"].get<bool>());
    EXPECT_EQ(rec.compute_s, j["breakdown_s"]["compute"].get<double>());
    EXPECT_EQ(rec.communication_exposed_s, j["breakdown_s"]["communication_exposed"].get<double>());
    EXPECT_EQ(rec.bubble_s, j["breakdown_s"]["bubble"].get<double>());
    int64_t peak = 0;
    for (const auto& dev : j["devices"])
      peak = std::max(peak, dev["peak_memory_bytes"].get<int64_t>());
    EXPECT_EQ(rec.peak_memory_bytes, peak);
    ++compared;
  }
  EXPECT_EQ(compared, 8u);
}

TEST(Sweep, PolicyPlanIsThePlannersBestReplayedAsSimulateWould) {
  const std::string d = fresh_folder();
  write(d + "/study.yaml",
        "models: [gpt3-350m]\nclusters:\n  - cluster: dgx-a100\n    nodes: 1\n"
        "plans:\n  - policy: megatron\n    global_batch_size: 16\n    sequence_length: 512\n");
  ASSERT_EQ(run_hetsim({"sweep", "--no-report", d + "/study.yaml", "--quiet"}).exit_code, 0);
  const std::vector<RunRecord> recs = records(d + "/study.db");
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_TRUE(recs[0].ok) << recs[0].error;
  EXPECT_EQ(recs[0].plan, "policy megatron global_batch_size=16 sequence_length=512");
  ASSERT_EQ(run_hetsim({"plan", "--model", "gpt3-350m", "--cluster", "dgx-a100", "--nodes", "1",
                        "--global-batch-size", "16", "--sequence-length", "512", "--policy",
                        "megatron", "--out", d + "/best.yaml"})
                .exit_code,
            0);
  const nlohmann::json j =
      nlohmann::json::parse(run_hetsim({"simulate", "--model", "gpt3-350m", "--cluster", "dgx-a100",
                                        "--nodes", "1", "--plan", d + "/best.yaml", "--json"},
                                       Capture::stdout_only)
                                .output);
  EXPECT_EQ(recs[0].iteration_time_s, j["iteration_time_s"].get<double>());
  EXPECT_EQ(recs[0].mfu, j["mfu"].get<double>());
}

TEST(Sweep, OneJobAndTwoGiveIdenticalStores) {
  const std::string d = fresh_folder();
  const std::string study = write_study(d);
  ASSERT_EQ(
      run_hetsim({"sweep", "--no-report", study, "--store", d + "/1.db", "--jobs", "1", "--quiet"})
          .exit_code,
      0);
  ASSERT_EQ(
      run_hetsim({"sweep", "--no-report", study, "--store", d + "/2.db", "--jobs", "2", "--quiet"})
          .exit_code,
      0);
  expect_same_store(records(d + "/1.db"), records(d + "/2.db"));
}

TEST(Sweep, UnderMpirunTheSameStoreAsOneProcess) {
  // Open MPI's plugins keep allocations LeakSanitizer cannot attribute (see calibrate_test.cpp).
  setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  const std::string d = fresh_folder();
  const std::string study = write_study(d);
  ASSERT_EQ(
      run_hetsim({"sweep", "--no-report", study, "--store", d + "/1.db", "--jobs", "1", "--quiet"})
          .exit_code,
      0);
  // Rank 0 hands out the runs, ranks 1 and 2 simulate.
  const CommandResult m =
      run_program("mpirun", {"--allow-run-as-root", "--oversubscribe", "-np", "3", HETSIM_BINARY,
                             "sweep", "--no-report", study, "--store", d + "/3.db"});
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("run now on 2 worker ranks"), std::string::npos) << m.output;
  expect_same_store(records(d + "/1.db"), records(d + "/3.db"));
  // A bad study file is said once, by rank 0, and every rank stops.
  write(d + "/bad.yaml", "models: [gpt3-125m]\nclustres: []\n");
  const CommandResult bad =
      run_program("mpirun", {"--allow-run-as-root", "--oversubscribe", "-np", "2", HETSIM_BINARY,
                             "sweep", "--no-report", d + "/bad.yaml"});
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  const size_t at = bad.output.find("clustres");
  EXPECT_NE(at, std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("hetsim: error", bad.output.find("hetsim: error") + 1),
            std::string::npos)
      << bad.output;
}

struct BadStudy {
  const char* rule;
  std::string text;
  std::string message;  // after "hetsim: error: <study file>"
};

void PrintTo(const BadStudy& c, std::ostream* os) { *os << c.rule; }

class BadStudyFile : public ::testing::TestWithParam<BadStudy> {};

TEST_P(BadStudyFile, ExitsWithCode2AndExactMessage) {
  const std::string d = fresh_folder();
  const std::string file = d + "/study.yaml";
  write(file, GetParam().text);
  const CommandResult r = run_hetsim({"sweep", file});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "hetsim: error: " + file + GetParam().message + "\n");
  EXPECT_FALSE(fs::exists(d + "/study.db")) << "bad input leaves no store";
}

INSTANTIATE_TEST_SUITE_P(
    Studies, BadStudyFile,
    ::testing::Values(
        BadStudy{"UnknownKeyNamesLineAndKey",
                 "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [" + kData +
                     "tp8.yaml]\nframework: [megatron]\n",
                 ":4: framework: unknown key (did you mean \"frameworks\"?)"},
        BadStudy{"EmptyCrossProductSaysSo",
                 "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: []\n",
                 ": no runs: the cross product of 1 models, 1 clusters, 0 plans, 1 frameworks and "
                 "1 perturbations is empty (plans is missing or empty)"},
        BadStudy{"MissingPlanFileIsNamed",
                 "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans:\n  - missing-plan.yaml\n",
                 ":4: plans[0]: missing-plan.yaml: cannot open plan file"}),
    [](const ::testing::TestParamInfo<BadStudy>& info) { return info.param.rule; });

// Whether some python3 hetsim tries (the first on PATH, then /usr/bin/python3) has matplotlib.
bool have_matplotlib() {
  for (const char* p : {"python3", "/usr/bin/python3"}) {
    if (run_program(p, {"-c", "import matplotlib"}).exit_code == 0) return true;
  }
  return false;
}

TEST(SweepReport, WritesTheHtmlTableAndThreePlotsBesideTheCsv) {
  if (!have_matplotlib()) {
    GTEST_SKIP() << "python3-matplotlib is not installed (scripts/setup.sh installs it): no plots "
                    "to check";
  }
  const std::string d = fresh_folder();
  write(d + "/study.yaml",
        "models: [gpt3-350m]\nclusters: [{cluster: dgx-a100, nodes: 1}]\nplans: [" + kData +
            "tp8.yaml, " + kData + "tp2-dp4.yaml, " + kData + "tp4-pp2-dp2.yaml]\n");
  const CommandResult r = run_hetsim({"sweep", d + "/study.yaml", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("; report in " + d + "/study.html\n"), std::string::npos) << r.output;
  for (const char* png : {"throughput", "time_split", "cost"}) {
    std::ifstream f(d + "/study." + png + ".png", std::ios::binary);
    std::string head(8, '\0');
    f.read(head.data(), 8);
    EXPECT_EQ(head, "\x89PNG\r\n\x1a\n") << png;
  }
  std::ifstream f(d + "/study.html");
  const std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("<table id=\"runs\">"), std::string::npos);
  EXPECT_NE(html.find("<img src=\"study.cost.png\""), std::string::npos);
  EXPECT_NE(html.find("tp4-pp2-dp2.yaml: tensor_parallel x pipeline_parallel"), std::string::npos)
      << "a failed run is listed with its error";
}

TEST(SweepReport, TheHtmlLoadsInHeadlessChromiumWithItsTable) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib is not installed: no report";
  std::string chromium;
  for (const char* c : {"chromium", "chromium-browser"}) {
    if (run_program("sh", {"-c", std::string("command -v ") + c}).exit_code == 0) chromium = c;
  }
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian: apt-get install chromium): the report is "
                    "not loaded in a browser";
  }
  const std::string d = fresh_folder();
  write(d + "/study.yaml",
        "models: [gpt3-350m]\nclusters: [{cluster: dgx-a100, nodes: 1}]\nplans: [" + kData +
            "tp8.yaml, " + kData + "tp2-dp4.yaml]\n");
  ASSERT_EQ(run_hetsim({"sweep", d + "/study.yaml", "--quiet"}).exit_code, 0);
  const CommandResult dom = run_program(
      chromium,
      {"--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + d + "/study.html"},
      Capture::stdout_only);
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  // The DOM as the browser built it: the table with its header and one row per run.
  EXPECT_NE(dom.output.find("<table id=\"runs\">"), std::string::npos) << dom.output;
  size_t rows = 0;
  for (size_t at = dom.output.find("<tr"); at != std::string::npos;
       at = dom.output.find("<tr", at + 1))
    ++rows;
  EXPECT_EQ(rows, 3u) << "the header and two runs";
}

}  // namespace
}  // namespace hetsim::e2e
