// Study files, run keys, the store and the runner in process: strict reading (file, line, key),
// the cross product, keys that follow file contents, records that read back bit for bit, a
// failing run recorded while the others complete, and the same store from one thread or two.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fmt/format.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/core/error.h"
#include "sim/study/results.h"
#include "sim/study/runner.h"
#include "sim/study/store.h"
#include "sim/study/study.h"

namespace hetsim::study {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/study/";

// A fresh folder under the test temp dir, named after the running test.
std::string fresh_folder() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path p = fs::path(::testing::TempDir()) / (std::string("study_") + info->name());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The InputError message of loading `text` as `folder`/study.yaml.
std::string load_error(const std::string& folder, const std::string& text) {
  const std::string file = folder + "/study.yaml";
  write(file, text);
  try {
    load_study(file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StudyFile, UnknownTopLevelKeyNamesFileLineKeyAndSuggests) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\nclustres: [dgx-a100]\n"),
            d + "/study.yaml:2: clustres: unknown key (did you mean \"clusters\"?)");
}

TEST(StudyFile, UnknownKeyInAnEntryNamesItsPath) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d,
                       "models: [gpt3-350m]\nclusters:\n  - cluster: dgx-a100\n    node: 1\n"
                       "plans: [" +
                           kData + "tp8.yaml]\n"),
            d + "/study.yaml:4: clusters[0].node: unknown key (did you mean \"nodes\"?)");
}

TEST(StudyFile, EmptyCrossProductSaysWhichListIsEmpty) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\nclusters: []\nplans: [" + kData + "tp8.yaml]\n"),
            d + "/study.yaml: no runs: the cross product of 1 models, 0 clusters, 1 plans, 1 "
                "frameworks and 1 perturbations is empty (clusters is missing or empty)");
  EXPECT_EQ(load_error(d, "frameworks: []\n"),
            d + "/study.yaml: no runs: the cross product of 0 models, 0 clusters, 0 plans, 0 "
                "frameworks and 1 perturbations is empty (models, clusters, plans, frameworks are "
                "missing or empty)");
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [" + kData +
                              "tp8.yaml]\nperturbations: []\n"),
            d + "/study.yaml: no runs: the cross product of 1 models, 1 clusters, 1 plans, 1 "
                "frameworks and 0 perturbations is empty (perturbations is missing or empty)");
}

TEST(StudyFile, CasesGiveEachRunItsModelClusterPlanAndReference) {
  const std::string d = fresh_folder();
  write(d + "/study.yaml",
        "cases:\n"
        "  - model: gpt3-350m\n"
        "    cluster: {cluster: dgx-a100, nodes: 1}\n"
        "    plan: " +
            kData +
            "tp8.yaml\n"
            "    reference: {iteration_time_s: 0.5, source: a paper}\n"
            "  - model: gpt3-125m\n"
            "    cluster: dgx-a100\n"
            "    plan: {file: " +
            kData +
            "tp2-dp4.yaml, name: tp2 dp4}\n"
            "frameworks: [megatron, deepspeed]\n");
  const Study s = load_study(d + "/study.yaml");
  // Two cases under two frameworks, not the 2 x 2 x 2 of a cross product.
  ASSERT_EQ(s.runs.size(), 4u);
  EXPECT_EQ(s.runs[0].model, "gpt3-350m");
  EXPECT_EQ(s.runs[0].cluster, "dgx-a100 nodes=1");
  EXPECT_EQ(s.runs[0].reference_s, 0.5);
  EXPECT_EQ(s.runs[0].reference_source, "a paper");
  EXPECT_EQ(s.runs[1].framework, "deepspeed");
  EXPECT_EQ(s.runs[1].reference_s, 0.5);
  EXPECT_EQ(s.runs[2].model, "gpt3-125m");
  EXPECT_EQ(s.runs[2].plan, "tp2 dp4");
  EXPECT_FALSE(s.runs[2].reference_s);
  // The reference is not part of the run: the same case with another reference has the same key.
  write(d + "/other.yaml",
        "cases:\n  - model: gpt3-350m\n    cluster: {cluster: dgx-a100, nodes: 1}\n"
        "    plan: " +
            kData +
            "tp8.yaml\n    reference: {iteration_time_s: 9}\n"
            "frameworks: [megatron]\n");
  EXPECT_EQ(load_study(d + "/other.yaml").runs[0].key, s.runs[0].key);
}

TEST(StudyFile, CasesAreBadInputWithListsOrWithoutAPositiveReference) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\ncases: []\n"),
            d + "/study.yaml:1: models: a study gives either cases (each its model, cluster and "
                "plan) or the lists of models, clusters and plans to cross, not both");
  EXPECT_EQ(load_error(d, "cases: []\n"), d + "/study.yaml:1: cases: no runs: the list is empty");
  EXPECT_EQ(load_error(d, "cases:\n  - model: gpt3-350m\n    cluster: dgx-a100\n"),
            d + "/study.yaml:2: cases[0]: missing plan");
  EXPECT_EQ(load_error(d, "cases:\n  - model: gpt3-350m\n    cluster: dgx-a100\n    plan: " +
                              kData + "tp8.yaml\n    reference: {iteration_time_s: -1}\n"),
            d + "/study.yaml:5: cases[0].reference.iteration_time_s: expected seconds > 0, got -1");
}

TEST(StudyFile, MissingPlanFileIsNamedWithTheStudyLine) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans:\n  - nope.yaml\n"),
            d + "/study.yaml:4: plans[0]: nope.yaml: cannot open plan file");
}

TEST(StudyFile, MissingModelFileIsNamedWithTheStudyLine) {
  const std::string d = fresh_folder();
  const std::string e = load_error(
      d, "models: [models/none.yaml]\nclusters: [dgx-a100]\nplans: [" + kData + "tp8.yaml]\n");
  EXPECT_EQ(e.rfind(d + "/study.yaml:1: models[0]: models/none.yaml: no such model file", 0), 0u)
      << e;
}

TEST(StudyFile, MissingCalibrationDatabaseIsNamedWithTheStudyLine) {
  const std::string d = fresh_folder();
  EXPECT_EQ(load_error(d, "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [" + kData +
                              "tp8.yaml]\ncalibration: none.h5\n"),
            d + "/study.yaml:4: calibration: none.h5: cannot open calibration database");
}

TEST(StudyFile, UnknownPolicyListsTheNames) {
  const std::string d = fresh_folder();
  const std::string e =
      load_error(d,
                 "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans:\n  - policy: megatorn\n"
                 "    global_batch_size: 8\n");
  EXPECT_EQ(e.rfind(d + "/study.yaml:4: plans[0].policy: unknown value \"megatorn\"", 0), 0u) << e;
  EXPECT_NE(e.find("did you mean \"megatron\""), std::string::npos) << e;
}

TEST(StudyFile, CrossProductInOrderModelsClustersPlansFrameworks) {
  const std::string d = fresh_folder();
  write(d + "/study.yaml",
        "models: [gpt3-350m, gpt3-1.3b]\n"
        "clusters:\n  - cluster: dgx-a100\n    nodes: 1\n  - dgx-h100\n"
        "plans: [" +
            kData +
            "tp8.yaml]\n"
            "frameworks: [megatron, deepspeed]\n");
  const Study s = load_study(d + "/study.yaml");
  ASSERT_EQ(s.runs.size(), 8u);
  EXPECT_EQ(s.runs[0].model, "gpt3-350m");
  EXPECT_EQ(s.runs[0].cluster, "dgx-a100 nodes=1");
  EXPECT_EQ(s.runs[0].framework, "megatron");
  EXPECT_EQ(s.runs[1].framework, "deepspeed");
  EXPECT_EQ(s.runs[2].cluster, "dgx-h100");
  EXPECT_EQ(s.runs[4].model, "gpt3-1.3b");
  std::set<std::string> keys;
  for (const StudyRun& r : s.runs) keys.insert(r.key);
  EXPECT_EQ(keys.size(), 8u) << "every combination has its own key";
}

TEST(StudyFile, KeyFollowsTheFileContentsNotJustThePath) {
  const std::string d = fresh_folder();
  // The plan path is relative to the study's folder.
  write(d + "/study.yaml", "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [plan.yaml]\n");
  write(d + "/plan.yaml", "tensor_parallel: 8\nglobal_batch_size: 8\n");
  const std::string k1 = load_study(d + "/study.yaml").runs.at(0).key;
  EXPECT_EQ(load_study(d + "/study.yaml").runs.at(0).key, k1) << "same inputs, same key";
  write(d + "/plan.yaml", "tensor_parallel: 8\nglobal_batch_size: 16\n");
  EXPECT_NE(load_study(d + "/study.yaml").runs.at(0).key, k1) << "edited plan, new key";
  write(d + "/plan.yaml", "tensor_parallel: 8\nglobal_batch_size: 8\n");
  EXPECT_EQ(load_study(d + "/study.yaml").runs.at(0).key, k1);
  // A model file edited: the same.
  std::ifstream in(std::string(HETSIM_SOURCE_DIR) + "/models/gpt3-350m.yaml");
  std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write(d + "/m.yaml", model);
  write(d + "/study.yaml", "models: [m.yaml]\nclusters: [dgx-a100]\nplans: [plan.yaml]\n");
  const Study a = load_study(d + "/study.yaml");
  model.replace(model.find("layers: 24"), 10, "layers: 12");
  write(d + "/m.yaml", model);
  EXPECT_NE(load_study(d + "/study.yaml").runs.at(0).key, a.runs.at(0).key);
}

TEST(StudyFile, KeysDoNotDependOnTheFolderTheStudyIsRunFrom) {
  const std::string d = fresh_folder();
  write(d + "/study.yaml", "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [plan.yaml]\n");
  write(d + "/plan.yaml", "tensor_parallel: 8\nglobal_batch_size: 8\n");
  const Study a = load_study(d + "/study.yaml");
  const Study b = load_study(fs::relative(d + "/study.yaml").string());
  EXPECT_NE(a.runs.at(0).spec.plan, b.runs.at(0).spec.plan) << "resolved differently";
  EXPECT_EQ(a.runs.at(0).key, b.runs.at(0).key) << "the same study";
}

TEST(StudyFile, HashIsStableAcrossBuilds) {
  // Stored keys must mean the same tomorrow: FNV-1a's published value for "a" in the first lane.
  EXPECT_EQ(hash_hex("a").substr(0, 16), "af63dc4c8601ec8c");
  EXPECT_NE(hash_hex("ab"), hash_hex("ba"));
}

TEST(StudyFile, PerturbationsCrossTheOtherAxesAndNoneKeepsTheUnperturbedKey) {
  const std::string d = fresh_folder();
  const std::string head =
      "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [" + kData + "tp8.yaml]\n";
  write(d + "/study.yaml", head +
                               "perturbations:\n  - none\n"
                               "  - {name: GPU 1 2x slower, slow: {gpu: 1, factor: 2}}\n"
                               "  - stragglers: {seed: 3, max: 1.5}\n"
                               "tokens: 1e9\n");
  const Study s = load_study(d + "/study.yaml");
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].perturbation, "none");
  EXPECT_EQ(s.runs[1].perturbation, "GPU 1 2x slower");
  EXPECT_EQ(s.runs[2].perturbation, "stragglers seed=3 probability=1 factor=1..1.5");
  EXPECT_EQ(s.runs[1].spec.perturbations.slow.at(0).factor, 2);
  EXPECT_EQ(s.tokens, 1e9);
  EXPECT_NE(s.runs[0].key, s.runs[1].key);
  EXPECT_NE(s.runs[1].key, s.runs[2].key);
  EXPECT_NE(s.runs[1].inputs_json.find("\"perturbation\":\"slow 1 x2\""), std::string::npos)
      << s.runs[1].inputs_json;
  write(d + "/plain.yaml", head);
  EXPECT_EQ(load_study(d + "/plain.yaml").runs.at(0).key, s.runs[0].key)
      << "no perturbation is the same run as no list";
}

TEST(StudyFile, BadPerturbationOrTokensNamesFileLineAndField) {
  const std::string d = fresh_folder();
  const std::string head =
      "models: [gpt3-350m]\nclusters: [dgx-a100]\nplans: [" + kData + "tp8.yaml]\n";
  EXPECT_EQ(load_error(d, head + "perturbations:\n  - slow: {gpu: 1, factr: 2}\n"),
            d + "/study.yaml:5: perturbations[0].slow.factr: unknown key (did you mean "
                "\"factor\"?)");
  EXPECT_EQ(load_error(d, head + "perturbations:\n  - {slow: {gpu: 1, factor: 2}, nme: x}\n"),
            d + "/study.yaml:5: perturbations[0].nme: unknown key (did you mean \"name\"?)");
  EXPECT_EQ(load_error(d, head + "perturbations: [slow]\n"),
            d + "/study.yaml:4: perturbations[0]: expected none or a map of what-ifs (slow, "
                "link, stragglers, name)");
  EXPECT_EQ(load_error(d, head + "tokens: -3\n"),
            d + "/study.yaml:4: tokens: expected a number > 0 (the tokens of a whole training "
                "run, e.g. 300e9), got -3");
}

TEST(Runner, APerturbationIsAnAxisOfTheStoreAndTheCsvPricesEachRun) {
  const std::string d = fresh_folder();
  write(d + "/dp8.yaml", "data_parallel: 8\nglobal_batch_size: 8\nsequence_length: 256\n");
  write(d + "/study.yaml",
        "models: [gpt3-350m]\nclusters: [{cluster: dgx-a100, nodes: 1}]\nplans: [dp8.yaml]\n"
        "perturbations:\n  - none\n  - slow: {gpu: 3, factor: 2}\ntokens: 1e9\n");
  const Study s = load_study(d + "/study.yaml");
  Store store(d + "/s.db");
  run_study(s, store, RunnerOptions{});
  const std::vector<RunRecord> recs = study_records(s, store);
  ASSERT_EQ(recs.size(), 2u);
  ASSERT_TRUE(recs[0].ok && recs[1].ok) << recs[0].error << recs[1].error;
  EXPECT_EQ(store.find(s.runs[1].key)->perturbation, "slow 3 x2");
  EXPECT_GT(recs[1].iteration_time_s, recs[0].iteration_time_s);
  EXPECT_GT(recs[1].compute_s, recs[0].compute_s);
  ASSERT_TRUE(recs[0].cost_per_iteration_usd && recs[0].cost_per_million_tokens_usd);
  // Eight A100-SXM4-80GB at $5.12/h; 8 x 256 tokens per iteration.
  EXPECT_DOUBLE_EQ(*recs[0].cost_per_iteration_usd, 8 * 5.12 * recs[0].iteration_time_s / 3600);
  EXPECT_DOUBLE_EQ(*recs[0].cost_per_million_tokens_usd,
                   *recs[0].cost_per_iteration_usd * 1e6 / 2048);
  EXPECT_NE(recs[1].report_json.find("\"perturbations\""), std::string::npos);
  std::ostringstream csv;
  write_csv(csv, recs, s.tokens);
  const std::string text = csv.str();
  EXPECT_NE(text.find(fmt::format(",ok,,8,{},", recs[0].iteration_time_s)), std::string::npos);
  EXPECT_NE(text.find(fmt::format(",{},{},{},true,,\n", *recs[0].cost_per_iteration_usd,
                                  *recs[0].cost_per_million_tokens_usd,
                                  *recs[0].cost_per_million_tokens_usd * 1000)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(",slow 3 x2,ok,"), std::string::npos) << text;
}

RunRecord sample(const std::string& key, double t) {
  RunRecord r;
  r.key = key;
  r.model = "m, \"quoted\"";
  r.cluster = "c";
  r.plan = "p";
  r.inputs = "{}";
  r.ok = true;
  r.gpus = 8;
  r.iteration_time_s = t;
  r.tokens_per_s = 1.0 / 3.0;
  r.samples_per_s = 0.1 + 0.2;
  r.mfu = 5e-324;  // the smallest double: stored bit for bit
  r.peak_memory_bytes = int64_t{1} << 40;
  r.oom = true;
  r.compute_s = 1e300, r.communication_exposed_s = -0.5, r.bubble_s = 0;
  r.report_json = "{\"x\": 1}\n";
  return r;
}

TEST(Store, RecordsReadBackBitForBitAndAReplacedKeyKeepsOneRow) {
  const std::string d = fresh_folder();
  {
    Store s(d + "/s.db");
    s.put(sample("b", 0.1));
    s.put(sample("a", 0.2));
    RunRecord failed = sample("b", 0);
    failed.ok = false;
    failed.error = "bad plan";
    s.put(failed);
  }
  Store s(d + "/s.db");
  const std::vector<RunRecord> all = s.records();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], sample("a", 0.2));
  EXPECT_EQ(std::bit_cast<uint64_t>(all[0].mfu), std::bit_cast<uint64_t>(5e-324));
  EXPECT_EQ(std::bit_cast<uint64_t>(all[0].samples_per_s), std::bit_cast<uint64_t>(0.1 + 0.2));
  EXPECT_FALSE(all[1].ok);
  EXPECT_EQ(all[1].error, "bad plan");
  EXPECT_EQ(s.keys(), (std::set<std::string>{"a", "b"}));
  // A failed run's figures are NULL in the table (aggregates skip it), zero in the record.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((d + "/s.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT count(*) FROM runs WHERE iteration_time_s IS NULL AND mfu "
                               "IS NULL AND gpus IS NULL AND oom IS NULL AND status = 'failed'",
                               -1, &q, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(q, 0), 1);
  sqlite3_finalize(q);
  sqlite3_close(db);
  EXPECT_EQ(all[1].iteration_time_s, 0);
}

TEST(Store, AFileThatIsNotAStoreIsBadInputNamingIt) {
  const std::string d = fresh_folder();
  write(d + "/x.db", std::string(4096, 'x'));
  try {
    Store s(d + "/x.db");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(d + "/x.db: not a hetsim study store (", 0), 0u)
        << e.what();
  }
}

TEST(Results, CsvHasAFixedHeaderQuotesFieldsAndPrintsShortestRoundTripNumbers) {
  std::ostringstream out;
  RunRecord failed = sample("k2", 0);
  failed.ok = false;
  failed.error = "line one\nline two";
  RunRecord referenced = sample("k3", 0.625);
  referenced.reference_s = 0.5;  // the predicted 0.625 s is 25% over it
  write_csv(out, {sample("k1", 0.1), failed, referenced});
  EXPECT_EQ(out.str(),
            "index,key,model,cluster,plan,framework,perturbation,status,error,gpus,"
            "iteration_time_s,tokens_per_s,samples_per_s,mfu,peak_memory_bytes,oom,compute_s,"
            "communication_exposed_s,bubble_s,cost_per_iteration_usd,cost_per_million_tokens_usd,"
            "cost_per_run_usd,pareto,reference_iteration_time_s,error_pct\n"
            "0,k1,\"m, \"\"quoted\"\"\",c,p,,,ok,,8,0.1,0.3333333333333333,0.30000000000000004,"
            "5e-324,1099511627776,true,1e+300,-0.5,0,,,,false,,\n"
            "1,k2,\"m, \"\"quoted\"\"\",c,p,,,failed,\"line one\nline two\",,,,,,,,,,,,,,,,\n"
            "2,k3,\"m, \"\"quoted\"\"\",c,p,,,ok,,8,0.625,0.3333333333333333,0.30000000000000004,"
            "5e-324,1099511627776,true,1e+300,-0.5,0,,,,false,0.5,25\n");
}

// gpt3-350m on one and two DGX A100 nodes under three plans: tp2-dp4 needs 8 GPUs and
// tp4-pp2-dp2 16, so two of the six runs fail.
Study small_study(const std::string& d) {
  write(d + "/study.yaml",
        "models: [gpt3-350m]\n"
        "clusters:\n  - cluster: dgx-a100\n    nodes: 1\n"
        "  - cluster: dgx-a100\n    nodes: 2\n"
        "plans: [" +
            kData + "tp8.yaml, " + kData + "tp2-dp4.yaml, " + kData + "tp4-pp2-dp2.yaml]\n");
  return load_study(d + "/study.yaml");
}

TEST(Runner, AFailingRunIsRecordedWithItsErrorAndTheOthersComplete) {
  const std::string d = fresh_folder();
  const Study s = small_study(d);
  Store store(d + "/s.db");
  RunnerOptions o;
  o.jobs = 2;
  const RunnerSummary sum = run_study(s, store, o);
  EXPECT_EQ(sum.total, 6u);
  EXPECT_EQ(sum.ran, 6u);
  EXPECT_EQ(sum.failed, 2u);
  const std::vector<RunRecord> recs = study_records(s, store);
  ASSERT_EQ(recs.size(), 6u);
  // tp4-pp2-dp2 on one node (8 GPUs).
  EXPECT_FALSE(recs[2].ok);
  EXPECT_EQ(recs[2].error, kData +
                               "tp4-pp2-dp2.yaml: tensor_parallel x pipeline_parallel x "
                               "data_parallel = 4 x 2 x 2 = 16, but the plan has 8 GPUs (the "
                               "whole cluster; set devices to use fewer)");
  EXPECT_FALSE(recs[4].ok);  // tp2-dp4 on 16 GPUs
  for (size_t i : {0, 1, 3, 5}) {
    EXPECT_TRUE(recs[i].ok) << i << ": " << recs[i].error;
    EXPECT_GT(recs[i].iteration_time_s, 0) << i;
    EXPECT_EQ(recs[i].gpus, i < 3 ? 8 : 16) << i;
  }
  // Run again: nothing new.
  const RunnerSummary again = run_study(s, store, o);
  EXPECT_EQ(again.ran, 0u);
  EXPECT_EQ(again.stored_before, 6u);
}

TEST(Runner, EditingAPlanFileRerunsExactlyTheRunsItFeeds) {
  const std::string d = fresh_folder();
  write(d + "/a.yaml", "tensor_parallel: 8\nglobal_batch_size: 8\nsequence_length: 256\n");
  write(d + "/b.yaml", "tensor_parallel: 4\nglobal_batch_size: 8\nsequence_length: 256\n");
  write(d + "/study.yaml",
        "models: [gpt3-350m]\nclusters:\n  - {cluster: dgx-a100, nodes: 1}\n"
        "  - {cluster: dgx-a100, nodes: 2}\nplans: [a.yaml, b.yaml]\n");
  Store store(d + "/s.db");
  RunnerOptions o;
  EXPECT_EQ(run_study(load_study(d + "/study.yaml"), store, o).ran, 4u);
  write(d + "/b.yaml", "tensor_parallel: 2\nglobal_batch_size: 8\nsequence_length: 256\n");
  const RunnerSummary again = run_study(load_study(d + "/study.yaml"), store, o);
  EXPECT_EQ(again.ran, 2u) << "b.yaml on each cluster";
  EXPECT_EQ(again.stored_before, 2u);
  EXPECT_EQ(store.keys().size(), 6u) << "the old results stay, under their own keys";
}

TEST(Runner, OneThreadAndTwoGiveTheSameStore) {
  const std::string d = fresh_folder();
  const Study s = small_study(d);
  Store one(d + "/one.db"), two(d + "/two.db");
  RunnerOptions o;
  o.jobs = 1;
  run_study(s, one, o);
  o.jobs = 2;
  run_study(s, two, o);
  EXPECT_EQ(one.records(), two.records());
}

}  // namespace
}  // namespace hetsim::study
