// Inputs that used to run away (huge counts, endless sweeps, absurd shapes) and inputs that used
// to give a silently wrong answer (a precision the GPU lacks, a shape no framework builds): each
// must end at once with exit code 2 and one message naming the field and the bound, within a
// few seconds and a few hundred MB, measured on the child process itself.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

namespace fs = std::filesystem;

struct Limited {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr
  double seconds = 0;
  long max_rss_kib = 0;
};

// Runs hetsim with its output in a file, killing it after `limit_s`; reports its own peak RSS
// (wait4), which popen cannot give.
Limited run_limited(const std::vector<std::string>& args, double limit_s = 20) {
  const fs::path out =
      fs::temp_directory_path() /
      ("hetsim_limits_" + std::to_string(getpid()) + "_" +
       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(out.c_str(), "w", stdout);
    if (f == nullptr || dup2(fileno(stdout), 2) < 0) _exit(127);
    std::vector<char*> argv;
    std::string program = HETSIM_BINARY;
    argv.push_back(program.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  Limited r;
  int status = 0;
  rusage usage{};
  while (true) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > limit_s) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kib = usage.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  r.output = s.str();
  fs::remove(out);
  return r;
}

// A fresh folder for files a case writes.
fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("hetsim_limits_" + std::to_string(getpid())) / name;
  fs::create_directories(dir);
  return dir;
}

fs::path write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A Hugging Face config with one field's value replaced (the text after `"key": `).
fs::path hf_with(const std::string& key, const std::string& value, const std::string& name) {
  std::string text = read(fs::path(HETSIM_SOURCE_DIR) / "tests/data/hf/llama-2-7b-hf.json");
  const std::string tag = "\"" + key + "\": ";
  const size_t at = text.find(tag);
  EXPECT_NE(at, std::string::npos) << key;
  const size_t end = text.find_first_of(",\n}", at + tag.size());
  text.replace(at + tag.size(), end - at - tag.size(), value);
  return write(scratch("hf") / name, text);
}

// Exit code 2, exactly `message` (one line), quickly and small. Under ASan memory is larger
// and the bound is loose on purpose: a runaway grows by 100 MB a second.
void expect_refused(const std::vector<std::string>& args, const std::string& message) {
  const Limited r = run_limited(args);
  EXPECT_EQ(r.exit_code, 2) << command_line(args) << "\n" << r.output;
  EXPECT_EQ(r.output, "hetsim: error: " + message + "\n") << command_line(args);
  EXPECT_LT(r.seconds, 5.0) << command_line(args);
  EXPECT_LT(r.max_rss_kib, 300 * 1024) << command_line(args);
}

const std::string kPlans = std::string(HETSIM_SOURCE_DIR) + "/tests/data/plans/";

// Pure data parallelism over the whole cluster, for any model.
std::string plain_plan() {
  return write(scratch("plain") / "plan.yaml", "global_batch_size: 32\n").string();
}

TEST(Limits, HugeNodeCountInAClusterIsRefusedBeforeAnythingIsBuilt) {
  expect_refused({"collective", "--bytes", "1MiB", "--set", "groups[0].count=10000000000000"},
                 "topologies/dgx-a100.yaml: groups[0].count: expected an integer from 1 to "
                 "262144, got \"10000000000000\"");
  // Within each group's bound, the groups together still hold too many GPUs.
  expect_refused({"collective", "--bytes", "1MiB", "--set", "groups[0].count=100000"},
                 "topologies/dgx-a100.yaml: groups[0].count: the groups up to this one hold "
                 "800000 GPUs, more than hetsim simulates (262144)");
  expect_refused({"collective", "--bytes", "1MiB", "--nodes", "2000000000"},
                 "--nodes: expected an integer from 1 to 262144, got 2000000000");
  // Within the GPU bound, a rail fabric of one node per unit has more switches (8 rail leaves a
  // node, and the spines) than routing holds.
  expect_refused(
      {"collective", "--bytes", "1MiB", "--nodes", "2048", "--set", "fabric.nodes_per_unit=1"},
      "topologies/dgx-a100.yaml:25: fabric: 16400 switches for 2048 nodes, more than "
      "hetsim routes (8192); use fewer nodes, or more NICs per leaf or nodes per unit");
}

TEST(Limits, HugeBatchesAndMicroBatchCountsAreRefused) {
  const std::string good = plain_plan();
  expect_refused({"simulate", "--model", "gpt3-125m", "--plan", good, "--plan-set",
                  "global_batch_size=10000000000000"},
                 good +
                     ": global_batch_size: expected an integer from 1 to 16777216, got "
                     "\"10000000000000\"");
  const fs::path het = write(scratch("het") / "het.yaml",
                             "replicas:\n"
                             "  - micro_batches: 10000000000000\n"
                             "    stages:\n"
                             "      - {layers: 12, devices: \"0\"}\n");
  expect_refused({"simulate", "--model", "gpt3-125m", "--plan", het.string()},
                 het.string() +
                     ":2: replicas[0].micro_batches: expected an integer from 1 to 1048576, got "
                     "\"10000000000000\"");
}

TEST(Limits, WorkBeyondWhatOneRunHoldsIsRefusedBeforeTheReplay) {
  // 32 GPUs x 2^19 micro-batches x 12 layers; each count alone is within its bound.
  const fs::path plan =
      write(scratch("work") / "work.yaml", "data_parallel: 32\nglobal_batch_size: 16777216\n");
  expect_refused({"simulate", "--model", "gpt3-125m", "--plan", plan.string()},
                 plan.string() +
                     ": the plan asks for 201326592 rank-micro-batch-layers in one iteration "
                     "(GPUs x micro-batches x layers per stage), more than one run can hold "
                     "(33554432); use fewer micro-batches per iteration, a larger micro-batch, "
                     "or fewer GPUs");
}

TEST(Limits, HugeLayerCountInAHuggingFaceConfigIsRefused) {
  const fs::path cfg = hf_with("num_hidden_layers", "10000000000000", "layers.json");
  expect_refused({"simulate", "--model", cfg.string(), "--plan", plain_plan()},
                 cfg.string() +
                     ": num_hidden_layers: expected an integer from 1 to 16384, got "
                     "10000000000000");
}

TEST(Limits, AModelWhoseSpansOverflowTheClockIsRefused) {
  const fs::path model = write(scratch("clock") / "huge.yaml",
                               "name: huge\nfamily: gpt\nlayers: 2\nhidden: 1048576\nheads: 1024\n"
                               "ffn_hidden: 4194304\nvocab: 16777216\nsequence: 16777216\n"
                               "activation: gelu\nnorm: layernorm\nposition: learned\n"
                               "tied_embeddings: true\ncausal: true\nbias: true\n");
  const fs::path plan = write(scratch("clock") / "p.yaml",
                              "data_parallel: 1\ndevices: \"0\"\nglobal_batch_size: 1\n");
  const Limited r = run_limited(
      {"simulate", "--model", model.string(), "--cluster", "cpu-host", "--plan", plan.string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("hetsim: error: simulated time out of range: a span of ", 0), 0u)
      << r.output;
  EXPECT_NE(r.output.find(" s is beyond the 53 days hetsim's clock holds"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 5.0);
}

TEST(Limits, ASweepTooFineToEndIsRefusedAndSweepSizesAreDistinct) {
  expect_refused({"collective", "--bytes", "1:1TiB", "--factor", "1.0001"},
                 "--bytes: the sweep takes 277273 steps of x1.0001; at most 4096 (raise --factor)");
  expect_refused({"collective", "--bytes", "0:1KiB"}, "--bytes: a sweep starts at 1 byte or more");
  // x1.1 from 1 byte: the first steps round to the same byte count, and each is kept once.
  const Limited r =
      run_limited({"collective", "--nodes", "1", "--bytes", "1:64", "--factor", "1.1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> sizes;
  for (size_t at = r.output.find("\"bytes\": "); at != std::string::npos;
       at = r.output.find("\"bytes\": ", at + 1)) {
    sizes.push_back(std::stod(r.output.substr(at + 9)));
  }
  ASSERT_FALSE(sizes.empty()) << r.output;
  EXPECT_EQ(std::set<double>(sizes.begin(), sizes.end()).size(), sizes.size()) << r.output;
  EXPECT_EQ(sizes.front(), 1);
  EXPECT_EQ(sizes.back(), 60);  // 1.1^43 = 60.1; 1.1^44 = 66.2 passes the end
  EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
}

TEST(Precision, APrecisionTheGpuLacksIsRefusedNamingWhatItHas) {
  const std::string good = plain_plan();
  expect_refused({"simulate", "--model", "gpt3-125m", "--cluster", "dgx1-v100", "--nodes", "1",
                  "--plan", good, "--plan-set", "precision=bf16"},
                 good +
                     ": precision: bf16 is not available on v100-sxm2-32gb (it has fp32, fp16); "
                     "train in fp16 with loss scaling (precision: fp16) as frameworks do on it");
  expect_refused({"simulate", "--model", "gpt3-125m", "--cluster", "dgx-a100", "--nodes", "1",
                  "--plan", good, "--plan-set", "precision=fp8"},
                 good +
                     ": precision: fp8 is not available on a100-sxm4-80gb (it has fp32, fp16, "
                     "bf16)");
}

// Without `precision:`, V100 trains in fp16 and A100 in bf16: the same run as the precision
// given explicitly, and the report says which it took and why.
TEST(Precision, WithoutAPrecisionThePlanTakesTheBest16BitTheGpusHave) {
  const std::string good = plain_plan();
  auto json = [&](const std::string& cluster, const std::string& precision) {
    std::vector<std::string> args = {"simulate", "--model", "gpt3-125m", "--cluster", cluster,
                                     "--nodes",  "1",       "--plan",    good,        "--json"};
    if (!precision.empty()) {
      args.push_back("--plan-set");
      args.push_back("precision=" + precision);
    }
    const CommandResult r = run_hetsim(args, Capture::stdout_only);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  auto without_precision = [](nlohmann::json j) {
    j.erase("precision");
    return j;
  };
  const nlohmann::json v100 = json("dgx1-v100", ""), a100 = json("dgx-a100", "");
  EXPECT_EQ(v100["precision"], "fp16 (default: a GPU of the plan has no bf16)");
  EXPECT_EQ(a100["precision"], "bf16 (default: every GPU of the plan has bf16)");
  EXPECT_EQ(without_precision(v100), without_precision(json("dgx1-v100", "fp16")));
  EXPECT_EQ(without_precision(a100), without_precision(json("dgx-a100", "bf16")));
  EXPECT_EQ(json("dgx-a100", "fp32")["precision"], "fp32");
  EXPECT_NE(without_precision(json("dgx-a100", "fp16")),
            without_precision(json("dgx-a100", "fp32")));
}

TEST(Shapes, ShapesNoFrameworkBuildsAreRefused) {
  const std::string good = plain_plan();
  const fs::path hidden = hf_with("hidden_size", "5121", "hidden.json");
  expect_refused({"simulate", "--model", hidden.string(), "--plan", good},
                 hidden.string() +
                     ": num_attention_heads: hidden_size (5121) is not a multiple of "
                     "num_attention_heads (32); give head_dim");
  const fs::path kv = hf_with("num_key_value_heads", "5", "kv.json");
  expect_refused({"simulate", "--model", kv.string(), "--plan", good},
                 kv.string() + ": kv_heads: expected a divisor of heads (32), got 5");
  const fs::path text = hf_with("num_hidden_layers", "\"32\"", "string.json");
  expect_refused({"simulate", "--model", text.string(), "--plan", good},
                 text.string() +
                     ": num_hidden_layers: expected an integer from 1 to 16384, got string \"32\"");
}

TEST(Paths, ADirectoryWhereAFileGoesIsNamedAsSuch) {
  const std::string dir = scratch("dirs").string();
  expect_refused({"simulate", "--model", "gpt3-125m", "--plan", dir},
                 dir + ": is a directory, expected a plan file");
  expect_refused({"simulate", "--model", "gpt3-125m", "--cluster", dir, "--plan", plain_plan()},
                 dir + ": is a directory, expected a cluster file");
  expect_refused({"simulate", "--model", dir, "--plan", plain_plan()},
                 dir +
                     ": is a directory without a config.json; expected a model YAML file, a "
                     "Hugging Face config.json or a folder holding one");
}

// A Hugging Face model folder, as downloaded, is read through its config.json.
TEST(Paths, AHuggingFaceModelFolderIsReadThroughItsConfig) {
  const fs::path dir = scratch("hf-folder") / "Llama-2-7b-hf";
  fs::create_directories(dir);
  fs::copy_file(fs::path(HETSIM_SOURCE_DIR) / "tests/data/hf/llama-2-7b-hf.json",
                dir / "config.json", fs::copy_options::overwrite_existing);
  const std::vector<std::string> base = {"simulate", "--plan", plain_plan(), "--json"};
  auto with_model = [&](const std::string& m) {
    std::vector<std::string> a = base;
    a.insert(a.begin() + 1, {"--model", m});
    return run_hetsim(a, Capture::stdout_only);
  };
  const CommandResult folder = with_model(dir.string());
  const CommandResult file = with_model((dir / "config.json").string());
  ASSERT_EQ(folder.exit_code, 0) << folder.output;
  EXPECT_EQ(folder.output, file.output);
}

}  // namespace
}  // namespace hetsim::e2e
