// `hetsim execute --backend cuda` as far as this machine allows: the program file hetsim writes
// for a single-GPU plan against the job's own kernels, the CUDA program's dry run over it (no GPU
// needed), a measured CSV made elsewhere compared here (--measured), the refusal of plans over
// more than one device, and a real run, which skips with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/study/run.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/job/training_job.h"
#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(HETSIM_SOURCE_DIR) + "/tests/data/execute/";
const std::string kModel = kData + "tiny-gpt.yaml";
const std::string kSingle = kData + "single.yaml";

std::string execute_program() {
#ifdef HETSIM_EXECUTE_CUDA_PROGRAM
  return HETSIM_EXECUTE_CUDA_PROGRAM;
#else
  return "";
#endif
}

std::vector<std::string> args(const std::string& plan, std::vector<std::string> more) {
  std::vector<std::string> a = {"execute",  "--backend", "cuda", "--model", kModel, "--cluster",
                                "dgx-h100", "--nodes",   "1",    "--plan",  plan};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
  return f;
}

// The op rows of a program file (after its column line).
std::vector<std::vector<std::string>> op_rows(const std::string& program) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream in(program);
  bool columns = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("task,segment,op,", 0) == 0) {
      columns = true;
    } else if (columns && !line.empty() && line[0] != '#') {
      rows.push_back(split(line));
    }
  }
  return rows;
}

std::string write_program(const std::string& name) {
  const std::string out = ::testing::TempDir() + name;
  const CommandResult r = run_hetsim(args(kSingle, {"--program-out", out}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

TEST(ExecuteCuda, ProgramFileHoldsExactlyTheKernelsOfTheJob) {
  const std::string file = write_program("single-program.csv");
  const std::string program = read(file);
  EXPECT_NE(program.find("\nhetsim-execute-program,2\nprecision,bf16\npredicted_iteration_s,"),
            std::string::npos)
      << program.substr(0, 400);

  study::RunSpec spec;
  spec.model = kModel;
  spec.cluster = "dgx-h100";
  spec.cluster_options.nodes = 1;
  spec.plan = kSingle;
  const study::RunInputs in(spec);
  const workload::DatasheetCostModel cost;
  const workload::TrainingJob job =
      workload::build_training_job(in.model, in.plan, in.cluster, cost);
  ASSERT_EQ(job.copies.size(), 1u);
  const workload::StageCopy& g = job.copies[0];
  std::vector<std::pair<uint32_t, uint32_t>> expected;  // (task, op) in program order
  size_t attention = 0;
  for (uint32_t pc = 0; pc < g.program.size(); ++pc) {
    if (g.program[pc].kind != workload::TaskKind::compute) continue;
    for (const auto& [op, duration] : g.segments[g.program[pc].index].ops) {
      expected.emplace_back(pc, op);
      attention += g.ops[op].kind == workload::OpKind::attention_forward ||
                   g.ops[op].kind == workload::OpKind::attention_backward;
    }
  }
  const auto rows = op_rows(program);
  ASSERT_EQ(rows.size(), expected.size());
  EXPECT_NE(program.find("\nops," + std::to_string(expected.size()) + "\n"), std::string::npos);
  // tiny-gpt: 4 layers, micro-batches 2 of global 4: 2 forward and 2 backward passes, each with
  // one attention kernel per layer.
  EXPECT_EQ(attention, 16u);
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 18u) << i;
    EXPECT_EQ(rows[i][17], "bf16") << i;  // a bf16 plan: every op's math in bf16
    const workload::Op& op = g.ops[expected[i].second];
    EXPECT_EQ(rows[i][0], std::to_string(expected[i].first)) << i;
    EXPECT_EQ(rows[i][2], std::to_string(expected[i].second)) << i;
    EXPECT_EQ(rows[i][4], op.name) << i;
    if (op.kind == workload::OpKind::gemm) {
      EXPECT_EQ(rows[i][3], "gemm");
      EXPECT_EQ(rows[i][5] + "x" + rows[i][6] + "x" + rows[i][7],
                std::to_string(op.m) + "x" + std::to_string(op.n) + "x" + std::to_string(op.k));
    } else if (op.kind == workload::OpKind::memory) {
      EXPECT_EQ(rows[i][3], "memory");
      EXPECT_FALSE(rows[i][15].empty()) << op.name;  // calibrate's kernel for it
    } else {
      EXPECT_EQ(rows[i][13], "1") << op.name;  // attention: flash -> fused
      EXPECT_EQ(rows[i][10], "128") << op.name;
    }
  }
}

// The H200 execute experiment's programs (experiments/h200-execute/programs.sh): model,
// micro-batch and precision of each, and hetsim's command for one, from the repository root as
// programs.sh runs it (the program names relative paths).
struct H200Program {
  std::string model;
  int micro_batch;
  std::string precision;
  std::string name() const {
    return model + (precision == "bf16" ? "" : "-" + precision) + "-mb" +
           std::to_string(micro_batch);
  }
  std::string command(const std::string& tail) const {
    return "cd " + shell_quote(HETSIM_SOURCE_DIR) + " && " + shell_quote(HETSIM_BINARY) +
           " execute --backend cuda --model " + model +
           " --cluster dgx-h100 --nodes 1 --set 'node_types[0].gpu=h200-sxm-141gb' --plan "
           "experiments/h200-execute/plan.yaml --plan-set micro_batch_size=" +
           std::to_string(micro_batch) +
           " --plan-set global_batch_size=" + std::to_string(4 * micro_batch) +
           " --plan-set precision=" + precision +
           " --calibration calibrate/data/h200-sxm-141gb.h5 " + tail;
  }
};

const std::vector<H200Program>& h200_programs() {
  static const std::vector<H200Program> programs = {
      {"gpt3-125m", 1, "bf16"}, {"gpt3-125m", 2, "bf16"}, {"gpt3-125m", 4, "bf16"},
      {"gpt3-350m", 1, "bf16"}, {"gpt3-350m", 2, "bf16"}, {"gpt3-350m", 4, "bf16"},
      {"gpt3-1.3b", 1, "bf16"}, {"gpt3-1.3b", 2, "bf16"}, {"gpt3-1.3b", 4, "bf16"},
      {"gpt3-2.7b", 1, "bf16"}, {"gpt3-2.7b", 2, "bf16"}, {"gpt3-2.7b", 4, "bf16"},
      {"gpt3-1.3b", 4, "fp8"},  {"gpt3-2.7b", 2, "fp8"}};
  return programs;
}

TEST(ExecuteCuda, TheCommittedH200ProgramsAreCurrentAndRead) {
  // experiments/h200-execute/programs/ is generated: regenerate it with
  //   experiments/h200-execute/programs.sh write
  const std::string src = HETSIM_SOURCE_DIR;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(src + "/experiments/h200-execute/programs"))
    files += e.path().extension() == ".csv";
  EXPECT_EQ(files, h200_programs().size()) << "programs.sh and this test list the same programs";
  for (const H200Program& p : h200_programs()) {
    const std::string out = ::testing::TempDir() + p.name() + ".csv";
    const CommandResult r =
        run_program("/bin/sh", {"-c", p.command("--program-out " + shell_quote(out))});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string committed = src + "/experiments/h200-execute/programs/" + p.name() + ".csv";
    EXPECT_EQ(read(out), read(committed))
        << committed << " is stale: experiments/h200-execute/programs.sh write";
    if (execute_program().empty()) continue;
    const CommandResult dry = run_program(execute_program(), {"--program", committed, "--dry-run"});
    EXPECT_EQ(dry.exit_code, 0) << dry.output;
  }
}

TEST(ExecuteCuda, TheH200RunsArePredictedWithinTheirBounds) {
  // Measured on a lent H200 on 2026-12-04 (experiments/h200-execute/README.md): each program run
  // by hetsim-execute-cuda, 3 warm-up and 10 measured iterations. hetsim's prediction with the
  // shipped H200 database (read now, so a change to the cost model shows here) against each
  // measured median: 4.28% mean over the 14, the worst +10.5% (GPT-3 125M and 350M at
  // micro-batch 1 and 2, whose small GEMMs the database predicts 10-25% too slow); the two fp8
  // programs (Transformer Engine's cast kernels counted) -1.4% and -1.6%. Before the database
  // was measured again and the calibrated model stopped adding a 10 us launch gap to each kernel
  // and a Python host's 100 us to each issue:
  // +6% to +263%.
  double sum = 0;
  int rows = 0;
  for (const H200Program& p : h200_programs()) {
    const std::string measured =
        std::string(HETSIM_SOURCE_DIR) + "/experiments/h200-execute/measured/" + p.name() + ".csv";
    ASSERT_TRUE(fs::exists(measured)) << measured;
    const CommandResult r = run_program(
        "/bin/sh", {"-c", p.command("--measured " + shell_quote(measured) + " --json")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    const double error = j.at("error").get<double>();
    std::printf("  %-20s predicted %.4f s  measured %.4f s  %+6.1f%%\n", p.name().c_str(),
                j.at("predicted_iteration_s").get<double>(),
                j.at("measured_median_s").get<double>(), 100 * error);
    EXPECT_LT(std::abs(error), 0.15) << p.name();
    sum += std::abs(error);
    ++rows;
  }
  std::printf("  mean |error| over %d runs: %.2f%%\n", rows, 100 * sum / rows);
  EXPECT_LT(sum / rows, 0.065);
}

TEST(ExecuteCuda, AnFp8ProgramRunsEachGemmAtItsOwnPrecision) {
  // Under fp8 the program says, op by op, what runs in bf16 (workload::math_precision):
  // attention, the output layer's GEMMs and GEMMs with a dimension no multiple of 16.
  const std::string out = ::testing::TempDir() + "fp8-program.csv";
  const CommandResult r =
      run_hetsim(args(kSingle, {"--plan-set", "precision=fp8", "--program-out", out}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string program = read(out);
  EXPECT_NE(program.find("\nprecision,fp8\n"), std::string::npos);
  std::map<std::string, std::set<std::string>> by_kind;  // kind (logits apart) -> precisions
  for (const auto& row : op_rows(program)) {
    ASSERT_EQ(row.size(), 18u);
    const bool logits = row[3] == "gemm" && row[4].rfind("logits", 0) == 0;
    by_kind[logits ? "logits" : row[3]].insert(row[17]);
    if (row[3] == "gemm" && !logits) {
      const bool aligned = std::stoll(row[5]) % 16 == 0 && std::stoll(row[6]) % 16 == 0 &&
                           std::stoll(row[7]) % 16 == 0;
      EXPECT_EQ(row[17], aligned ? "fp8" : "bf16")
          << row[4] << " " << row[5] << "x" << row[6] << "x" << row[7];
    }
  }
  EXPECT_EQ(by_kind["logits"], std::set<std::string>{"bf16"});
  EXPECT_EQ(by_kind["attention_forward"], std::set<std::string>{"bf16"});
  EXPECT_EQ(by_kind["attention_backward"], std::set<std::string>{"bf16"});
  EXPECT_TRUE(by_kind["gemm"].count("fp8")) << "the layers' aligned GEMMs run in fp8";
  if (execute_program().empty()) return;
  const CommandResult dry = run_program(execute_program(), {"--program", out, "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("precision fp8 (GEMMs as bf16 "), std::string::npos) << dry.output;
}

TEST(ExecuteCuda, TheCudaProgramsDryRunReadsTheProgram) {
  if (execute_program().empty())
    GTEST_SKIP() << "hetsim-execute-cuda was not built (no CUDA toolkit, or -DHETSIM_CUDA=OFF)";
  const std::string file = write_program("dry-program.csv");
  const size_t ops = op_rows(read(file)).size();
  const CommandResult r = run_program(execute_program(), {"--program", file, "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": " + std::to_string(ops) + " ops ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8 attention_forward, 8 attention_backward"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;

  // A broken program: the line and the field.
  std::string text = read(file);
  const size_t at = text.find(",memory,");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 8, ",memroy,");
  const std::string bad = ::testing::TempDir() + "bad-program.csv";
  std::ofstream(bad) << text;
  const CommandResult b = run_program(execute_program(), {"--program", bad, "--dry-run"});
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_NE(b.output.find("bad-program.csv:"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("kind: expected gemm, attention_forward, attention_backward or memory, "
                          "got \"memroy\""),
            std::string::npos)
      << b.output;
  const CommandResult none = run_program(execute_program(), {"--dry-run"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("--program: required"), std::string::npos) << none.output;
}

TEST(ExecuteCuda, PlansOverMoreThanOneDeviceAreRefused) {
  const CommandResult r = run_hetsim(args(kData + "single-dp2.yaml", {}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("2 devices (data parallel 2, tensor parallel 1, pipeline parallel 1): "
                          "the CUDA backend of execute runs single-GPU plans only"),
            std::string::npos)
      << r.output;
  const CommandResult cpu =
      run_hetsim({"execute", "--model", kModel, "--plan", kSingle, "--measured", "x.csv"});
  EXPECT_EQ(cpu.exit_code, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("--program-out and --measured go with --backend cuda"),
            std::string::npos)
      << cpu.output;
}

TEST(ExecuteCuda, APlanWithWhatIfsIsRefused) {
  // A plan's perturbations would slow the prediction but not the GPU.
  const std::string plan = ::testing::TempDir() + "hetsim-single-perturbed.yaml";
  std::ofstream(plan) << read(kSingle) << "perturbations:\n  slow: {gpu: 0, factor: 2}\n";
  const CommandResult r = run_hetsim(args(plan, {"--program-out", plan + ".program"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "hetsim: error: " + plan +
                          ": perturbations: a plan with what-ifs cannot be executed (the real run "
                          "would not have them; node0.gpu0 (GPU 0) computes 2x slower): remove "
                          "them to execute it\n");
}

std::string exact(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// A measured CSV as hetsim-execute-cuda writes it, every op `factor` times its prediction.
std::string fake_measured(const std::string& program, double factor, bool rename_one) {
  std::string csv =
      "# hetsim-execute-cuda measured\n# device_name=Test GPU\nkind,index,task,name,"
      "impl,seconds\n";
  double sum = 0;
  const auto rows = op_rows(program);
  for (const auto& r : rows) sum += std::stod(r[16]) * factor;
  for (int k = 0; k < 3; ++k) csv += "iteration," + std::to_string(k) + ",,,," + exact(sum) + "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string name = rename_one && i == 5 ? "other" : rows[i][4];
    const std::string impl = rows[i][3] == "gemm"     ? "cublaslt-bf16"
                             : rows[i][3] == "memory" ? rows[i][15]
                                                      : "cudnn";
    csv += "op," + std::to_string(i) + "," + rows[i][0] + "," + name + "," + impl + "," +
           exact(std::stod(rows[i][16]) * factor) + "\n";
  }
  return csv;
}

TEST(ExecuteCuda, AMeasuredCsvFromElsewhereIsComparedHere) {
  const std::string program = read(write_program("measured-program.csv"));
  const std::string csv = ::testing::TempDir() + "measured.csv";
  std::ofstream(csv) << fake_measured(program, 1.25, false);
  const CommandResult r = run_hetsim(args(kSingle, {"--measured", csv}), Capture::stdout_only);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(1 GPU: Test GPU, backend cuda)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("attention ops     16 cudnn"), std::string::npos) << r.output;
  // Every kernel 25% slower than predicted: each kernel's error is -20%.
  EXPECT_NE(r.output.find("qkv"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-20.0%"), std::string::npos) << r.output;
  const CommandResult json =
      run_hetsim(args(kSingle, {"--measured", csv, "--json"}), Capture::stdout_only);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"backend\": \"cuda\""), std::string::npos) << json.output;
  // The iteration here is its ops back to back: replayed with them, the prediction is the
  // measurement (the calibrated one, host-bound at these sizes, is far above it).
  const nlohmann::json j = nlohmann::json::parse(json.output);
  EXPECT_GT(j["error"].get<double>(), 1.0) << json.output;
  EXPECT_NEAR(j["replayed_error"].get<double>(), 0, 1e-6) << json.output;
  // The measured trace: every op at its measured time (the embedding lookup, 1.25 x predicted).
  const std::string trace = ::testing::TempDir() + "measured-trace.json";
  const CommandResult t = run_hetsim(args(kSingle, {"--measured", csv, "--trace", trace}));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string json_trace = read(trace);
  EXPECT_EQ(json_trace.find("{\"displayTimeUnit\""), 0u) << json_trace.substr(0, 200);
  EXPECT_NE(json_trace.find("\"name\":\"optimizer.adam\""), std::string::npos);
  const size_t rows = op_rows(program).size();
  size_t slices = 0;
  for (size_t at = 0; (at = json_trace.find("\"cat\":\"compute\"", at)) != std::string::npos; ++at)
    ++slices;
  EXPECT_EQ(slices, rows);

  std::ofstream(csv) << fake_measured(program, 1.0, true);
  const CommandResult other = run_hetsim(args(kSingle, {"--measured", csv}));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("op 5 is 5 \"other\""), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("measured for another plan?"), std::string::npos) << other.output;
}

TEST(ExecuteCuda, RunsTheSingleGpuPlanOnTheGpu) {
  if (execute_program().empty())
    GTEST_SKIP() << "hetsim-execute-cuda was not built (no CUDA toolkit, or -DHETSIM_CUDA=OFF)";
  const CommandResult r = run_hetsim(args(kSingle, {"--iterations", "3", "--warmup", "1"}));
  if (r.exit_code != 0 && r.output.find("no GPU here") != std::string::npos) {
    // Without a GPU: one message and a non-zero exit, then the skip.
    EXPECT_EQ(r.exit_code, 1) << r.output;
    GTEST_SKIP() << "no GPU on this machine (hetsim said: " << r.output << ")";
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend cuda"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("measured"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hetsim::e2e
