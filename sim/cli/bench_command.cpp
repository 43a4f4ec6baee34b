// `hetsim bench`: wall time and peak memory of large simulations, each case in its own child
// process so that its peak resident memory is its own.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "sim/cli/commands.h"
#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/policy/estimate.h"
#include "sim/policy/planner.h"
#include "sim/report/collective_report.h"
#include "sim/report/progress.h"
#include "sim/report/training_report.h"
#include "sim/study/runner.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::cli {

namespace {

// What a case reports back from its child process (plain data: it crosses a pipe).
struct CaseResult {
  double wall_s = 0;
  double sim_s = 0;   // simulated time
  double figure = 0;  // busbw (network) or MFU (training)
  long peak_kib = 0;
  long gpus = 0;        // plan: the cluster's GPU count
  char label[32] = {};  // algorithm (network) or event count (training)
  // training: wall seconds of each phase (model, cluster and plan read; job built; replay;
  // memory and report)
  double phase_s[4] = {};
};

// Runs `work` in a child; returns its wall time (measured inside), result and peak RSS.
CaseResult run_isolated(const std::function<CaseResult()>& work) {
  int fds[2];
  if (pipe(fds) != 0) throw RunError("bench: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw RunError("bench: fork failed");
  if (pid == 0) {
    close(fds[0]);
    int code = 0;
    CaseResult r;
    try {
      r = work();
    } catch (const std::exception& e) {
      std::cerr << "bench: " << e.what() << "\n";
      code = 1;
    }
    if (write(fds[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) code = 1;
    close(fds[1]);
    _exit(code);
  }
  close(fds[1]);
  CaseResult r;
  const ssize_t got = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  if (got != static_cast<ssize_t>(sizeof r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw RunError("bench: a case failed");
  }
  r.peak_kib = usage.ru_maxrss;
  return r;
}

// `bench plan`: the planner's speed. The analytic estimate's evaluations per second (on plans
// already parsed, its caches warm, as in a search), and the wall time of whole searches.
void add_bench_plan(CLI::App& bench, Action& action) {
  CLI::App* cmd = bench.add_subcommand(
      "plan",
      "The planner: analytic estimates per second over every proposal for GPT-3 175B on 1024 "
      "A100 and for GPT-3 13B on 64 mixed H100/A100, and the wall time of both whole searches");
  auto which = std::make_shared<std::vector<std::string>>(
      std::vector<std::string>{"13b-mixed-64", "175b-a100-1024"});
  cmd->add_option("--cases", *which, "Cases to run")->capture_default_str();
  cmd->callback([which, &action] {
    action = [which] {
      struct Case {
        std::string name, model, cluster;
        std::vector<std::string> sets;
        int64_t batch;
      };
      const std::vector<Case> all = {
          {"13b-mixed-64",
           "gpt3-13b",
           "mixed-h100-a100",
           {"groups[0].count=4", "groups[1].count=4"},
           512},
          {"175b-a100-1024", "gpt3-175b", "dgx-a100", {"groups[0].count=128"}, 1536}};
      for (const std::string& w : *which) {
        if (std::none_of(all.begin(), all.end(), [&](const Case& c) { return c.name == w; })) {
          std::string names;
          for (const Case& c : all) names += (names.empty() ? "" : ", ") + c.name;
          throw InputError("--cases: unknown case \"" + w + "\" (expected one of " + names + ")");
        }
      }
      std::cout << fmt::format("{:<16} {:>6} {:>7} {:>14} {:>10} {:>10} {:>12}\n", "case", "gpus",
                               "plans", "estimates/s", "search_s", "peak_MiB", "best_s");
      for (const Case& k : all) {
        if (std::find(which->begin(), which->end(), k.name) == which->end()) continue;
        const CaseResult r = run_isolated([&] {
          const workload::ModelConfig model = workload::load_model(k.model);
          config::ClusterOptions opt;
          opt.sets = k.sets;
          const platform::Cluster c(config::load_cluster(k.cluster, opt));
          const workload::DatasheetCostModel cost;
          policy::Request req;
          req.model = &model;
          req.cluster = &c;
          req.global_batch = k.batch;
          req.sequence = model.sequence;
          req.cost = &cost;
          // Estimates: every proposal that parses, estimated over and over for about a second.
          std::vector<workload::Plan> plans;
          for (const policy::Policy* p : policy::policies()) {
            for (const policy::Proposal& x : p->propose(req)) {
              try {
                plans.push_back(workload::load_plan_text(x.plan, x.policy, model, c));
              } catch (const InputError&) {
              }
            }
          }
          if (plans.empty()) throw RunError("bench plan: no valid proposal");
          policy::Estimator est(model, c, cost);
          double sink = 0;
          for (const workload::Plan& p : plans) sink += est.estimate(p).iteration_s;  // warm
          size_t evals = 0;
          const auto e0 = std::chrono::steady_clock::now();
          double spent = 0;
          while (spent < 1.0) {
            for (const workload::Plan& p : plans) sink += est.estimate(p).iteration_s;
            evals += plans.size();
            spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
          }
          // The whole search, as `hetsim plan` runs it.
          const auto t0 = std::chrono::steady_clock::now();
          const policy::Search s = policy::search(req, policy::policies(), cost);
          CaseResult cr;
          cr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          cr.sim_s = s.ranked.front().iteration_s;
          cr.figure = static_cast<double>(evals) / spent;
          cr.gpus = static_cast<long>(c.gpu_count());
          if (!(sink > 0)) throw RunError("bench plan: an estimate was not positive");
          std::snprintf(cr.label, sizeof cr.label, "%zu", s.proposed);
          return cr;
        });
        std::cout << fmt::format("{:<16} {:>6} {:>7} {:>14.0f} {:>10.2f} {:>10.1f} {:>12.4f}\n",
                                 k.name, r.gpus, r.label, r.figure, r.wall_s, r.peak_kib / 1024.0,
                                 r.sim_s)
                  << std::flush;
      }
      return 0;
    };
  });
}

// The training cases of `hetsim bench training`.
struct TrainingCase {
  std::string name, model, cluster;
  int nodes, tp, pp, dp;
  int64_t batch, seq;
  int interleave = 1;           // > 1: the interleaved schedule, fp8 and ZeRO-1 (MLPerf's GPT-3)
  std::string plan;             // the whole plan file, where not a uniform 3D plan as above
  std::string model_yaml = "";  // the model file, where not a built-in model
};

std::vector<TrainingCase> training_cases() {
  // DeepSeek-V3's pre-training layout (experiments/deepseek-v3/deepseek-v3-2048.yaml): 64-way
  // expert all-to-alls over 8 nodes in every MoE layer of every micro-batch.
  const std::string deepseek =
      "pipeline_parallel: 16\ndata_parallel: 128\nexpert_parallel: 64\nmicro_batch_size: 1\n"
      "global_batch_size: 15360\nsequence_length: 4096\nzero_stage: 1\nprecision: fp8\n";
  // Llama 3 405B as Meta pre-trained it on 16,384 H100 (experiments/llama3-405b/): the
  // interleaved schedule with one layer a virtual stage, no recompute, gradients sharded and
  // reduced in bf16 (the paper's FSDP): it fits in 80 GB as Meta's did.
  const std::string llama =
      "tensor_parallel: 8\npipeline_parallel: 16\ndata_parallel: 128\nmicro_batch_size: 1\n"
      "global_batch_size: 2048\nsequence_length: 8192\nschedule: interleaved\ninterleave: 8\n"
      "sequence_parallel: true\nzero_stage: 2\nmain_grads: same\nrecompute: none\n";
  // SimAI's example workload (SimAI-Analytical v1.6, example/workload_analytical.txt, as
  // rebuilt in shared/reference/peer_cases/): a 96-layer MoE of 192 experts, top 4, on
  // 1152 DGX H100 nodes. SimAI answers it in 0.12 s on a 2-core machine (issue 38).
  const std::string simai_model =
      "name: simai-example-moe\nfamily: gpt\nlayers: 96\nhidden: 6144\nheads: 48\n"
      "head_dim: 128\nffn_hidden: 16384\nvocab: 50257\nsequence: 4096\nactivation: gelu\n"
      "norm: layernorm\nposition: learned\ntied_embeddings: false\ncausal: true\n"
      "bias: false\nexperts: 192\nexperts_per_token: 4\nexpert_ffn_hidden: 16384\n";
  const std::string simai =
      "tensor_parallel: 2\npipeline_parallel: 12\ndata_parallel: 384\nexpert_parallel: 16\n"
      "sequence_parallel: true\nschedule: interleaved\ninterleave: 8\nmicro_batch_size: 1\n"
      "global_batch_size: 9216\nsequence_length: 4096\nzero_stage: 1\n";
  // Llama 3 405B's layout (as llama3-405b) on 12,288 DGX H100 nodes: 768 replicas of 16
  // micro-batches each.
  std::string llama_98k = llama;
  llama_98k.replace(llama_98k.find("data_parallel: 128"), 18, "data_parallel: 768");
  llama_98k.replace(llama_98k.find("global_batch_size: 2048"), 23, "global_batch_size: 12288");
  return {
      {"gpt3-175b", "gpt3-175b", "dgx-a100", 128, 8, 8, 16, 1536, 2048, 1, ""},
      {"llama3-405b", "llama3-405b", "dgx-h100", 2048, 8, 16, 128, 2048, 8192, 1, llama},
      {"gpt3-il-1024", "gpt3-175b", "dgx-h100", 128, 4, 8, 32, 512, 2048, 12, ""},
      {"gpt3-il-3584", "gpt3-175b", "dgx-h100", 448, 4, 8, 112, 2688, 2048, 12, ""},
      {"gpt3-il-10752", "gpt3-175b", "dgx-h100", 1344, 4, 8, 336, 8064, 2048, 12, ""},
      {"deepseek-v3", "deepseek-v3", "dgx-h100", 256, 1, 16, 128, 15360, 4096, 1, deepseek},
      {"simai-moe", "", "dgx-h100", 1152, 2, 12, 384, 9216, 4096, 1, simai, simai_model},
      {"llama3-405b-98k", "llama3-405b", "dgx-h100", 12288, 8, 16, 768, 12288, 8192, 1, llama_98k}};
}

// What `bench training` runs for one case, timed by phase (in the forked process).
struct TrainingOptions {
  std::vector<std::string> cases{"gpt3-175b",     "llama3-405b", "gpt3-il-1024", "gpt3-il-3584",
                                 "gpt3-il-10752", "deepseek-v3", "simai-moe",    "llama3-405b-98k"};
  bool exact = false, quiet = false, phases = false;
  std::string calibration;
  double progress_after_s = 2;  // a case runs for minutes: its progress on standard error
};

CaseResult run_training_case(const TrainingCase& k, const TrainingOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  CaseResult cr;
  auto lap = t0;
  auto phase = [&](int i) {
    const auto now = std::chrono::steady_clock::now();
    cr.phase_s[i] = std::chrono::duration<double>(now - lap).count();
    lap = now;
  };
  report::ProgressMeter meter(std::cerr, "bench " + k.name, o.progress_after_s, 1.0,
                              report::stderr_is_terminal());
  const workload::ModelConfig model =
      k.model_yaml.empty() ? workload::load_model(k.model)
                           : workload::load_model_yaml_text(k.model_yaml, "bench " + k.name);
  config::ClusterOptions opt;
  opt.nodes = k.nodes;
  const platform::Cluster c(config::load_cluster(k.cluster, opt));
  // As a user writes it: plan files go through the same validation.
  std::string text = fmt::format(
      "tensor_parallel: {}\npipeline_parallel: {}\ndata_parallel: {}\n"
      "micro_batch_size: 1\nglobal_batch_size: {}\nsequence_length: {}\n"
      "recompute: selective\nsequence_parallel: true\n",
      k.tp, k.pp, k.dp, k.batch, k.seq);
  if (!k.plan.empty()) text = k.plan;
  if (k.interleave > 1) {
    text += fmt::format("schedule: interleaved\ninterleave: {}\nprecision: fp8\nzero_stage: 1\n",
                        k.interleave);
  }
  const workload::Plan plan = workload::load_plan_text(text, "bench " + k.name, model, c);
  std::unique_ptr<workload::CostModel> cost = std::make_unique<workload::DatasheetCostModel>();
  if (!o.calibration.empty()) {
    cost = std::make_unique<calibrate::MeasuredCostModel>(calibrate::read_database(o.calibration),
                                                          workload::DatasheetCostModel());
  }
  phase(0);
  const workload::TrainingJob job = workload::build_training_job(model, plan, c, *cost);
  phase(1);
  workload::ReplayOptions ropt;
  ropt.exact = o.exact;
  if (!o.quiet) ropt.progress = [&meter](const workload::ReplayStatus& s) { meter.update(s); };
  const auto result = workload::replay(job, nullptr, ropt);
  meter.finish();
  phase(2);
  const auto rep = report::make_training_report(job, result, workload::memory_per_copy(job));
  phase(3);
  cr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cr.sim_s = rep.iteration_time_s;
  cr.figure = rep.mfu;
  std::snprintf(cr.label, sizeof cr.label, "%llu", static_cast<unsigned long long>(rep.events));
  return cr;
}

void add_bench_training(CLI::App& cmd, Action& action) {
  CLI::App* train = cmd.add_subcommand(
      "training",
      "One iteration of GPT-3 175B on 1024 A100 (TP 8, PP 8, DP 16, batch 1536, micro-batch 1), "
      "of Llama 3 405B on 16384 H100 (TP 8, PP 16, DP 128, batch 2048 x 8192 tokens), and of "
      "GPT-3 175B on 1024, 3584 and 10752 H100 as in the MLPerf submissions (TP 4, PP 8, "
      "interleaved by 12, fp8, batch 512, 2688 and 8064), and of DeepSeek-V3 on 2048 H100 in its "
      "pre-training layout (PP 16, EP 64, DP 128, ZeRO-1, fp8, batch 15360 x 4096 tokens); "
      "SimAI's example MoE on 9216 H100 (TP 2, EP 16, PP 12 interleaved by 8, DP 384: "
      "simai-moe), and Llama 3 405B's layout on 98304 H100 (DP 768: llama3-405b-98k)");
  auto o = std::make_shared<TrainingOptions>();
  train->add_option("--cases", o->cases, "Cases to run (separated by spaces or commas)")
      ->delimiter(',')
      ->capture_default_str();
  train->add_flag("--exact", o->exact,
                  "Replay every data-parallel replica on its own (as simulate --exact)");
  train->add_option("--calibration", o->calibration,
                    "Cost kernels from this calibration database (as simulate does)");
  train->add_flag("--quiet", o->quiet, "No progress lines on standard error");
  train->add_flag("--phases", o->phases,
                  "Also print each case's wall time by phase: inputs read (model, cluster, "
                  "plan), job built, replay, report (memory and figures)");
  train
      ->add_option("--progress-after", o->progress_after_s,
                   "Seconds of wall time before progress lines start")
      ->group("");
  train->callback([o, &action] {
    action = [o] {
      using Case = TrainingCase;
      const std::vector<Case> all = training_cases();
      for (const std::string& w : o->cases) {
        if (std::none_of(all.begin(), all.end(), [&](const Case& c) { return c.name == w; })) {
          std::string names;
          for (const Case& c : all) names += (names.empty() ? "" : ", ") + c.name;
          throw InputError("--cases: unknown case \"" + w + "\" (expected one of " + names + ")");
        }
      }
      std::cout << fmt::format("{:<14} {:>6} {:>10} {:>12} {:>12} {:>8} {:>12}", "case", "gpus",
                               "wall_s", "peak_MiB", "iteration_s", "mfu", "events");
      if (o->phases) {
        std::cout << fmt::format(" {:>8} {:>8} {:>8} {:>8}", "inputs_s", "job_s", "replay_s",
                                 "report_s");
      }
      std::cout << "\n";
      for (const Case& k : all) {
        if (std::find(o->cases.begin(), o->cases.end(), k.name) == o->cases.end()) continue;
        if (!o->quiet) {
          std::cerr << fmt::format("bench: {} on {} GPUs ...\n", k.name, k.nodes * 8) << std::flush;
        }
        const CaseResult r = run_isolated([&] { return run_training_case(k, *o); });
        std::cout << fmt::format("{:<14} {:>6} {:>10.2f} {:>12.1f} {:>12.3f} {:>8.3f} {:>12}",
                                 k.name, k.nodes * 8, r.wall_s, r.peak_kib / 1024.0, r.sim_s,
                                 r.figure, r.label);
        if (o->phases) {
          std::cout << fmt::format(" {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}", r.phase_s[0],
                                   r.phase_s[1], r.phase_s[2], r.phase_s[3]);
        }
        std::cout << "\n" << std::flush;
      }
      return 0;
    };
  });
}

void add_bench_sweep(CLI::App& cmd, Action& action) {
  struct SweepOpts {
    std::string study = "experiments/sweep-bench/study.yaml";
    unsigned jobs = 2;
  };
  auto so = std::make_shared<SweepOpts>();
  CLI::App* sweep =
      cmd.add_subcommand("sweep",
                         "Runs per second of a study (default: experiments/sweep-bench, 1000 runs "
                         "of small plans and what-ifs), "
                         "run into a fresh store in the temporary folder as hetsim sweep runs it");
  sweep->add_option("--study", so->study, "Study file")->capture_default_str();
  sweep->add_option("--jobs", so->jobs, "Threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  sweep->callback([so, &action] {
    action = [so] {
      namespace fs = std::filesystem;
      const study::Study s = study::load_study(so->study);
      const fs::path db = fs::temp_directory_path() /
                          fmt::format("hetsim-bench-sweep-{}.db", static_cast<long>(getpid()));
      for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
      study::RunnerSummary sum;
      const auto t0 = std::chrono::steady_clock::now();
      {
        study::Store store(db.string());
        study::RunnerOptions ropt;
        ropt.jobs = so->jobs;
        sum = study::run_study(s, store, ropt);
      }
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
      std::cout << fmt::format(
          "sweep bench: {} runs ({} failed) of {} on {} thread{} in {:.2f} s: {:.1f} runs/s "
          "(each committed to SQLite as it finished)\n",
          sum.ran, sum.failed, so->study, so->jobs, so->jobs == 1 ? "" : "s", wall,
          static_cast<double>(sum.ran) / wall);
      return 0;
    };
  });
}

void add_bench_network(CLI::App& cmd, Action& action) {
  struct Opts {
    std::vector<int> gpus{1024, 8192};
    std::string bytes = "1GiB";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* net = cmd.add_subcommand(
      "network",
      "An all-reduce (algorithm and protocol chosen as hetsim collective does) over DGX H100 "
      "nodes in a rail-optimised fat tree");
  net->add_option("--gpus", o->gpus, "GPU counts (multiples of 8)")->capture_default_str();
  net->add_option("--bytes", o->bytes, "All-reduce size")->capture_default_str();
  net->callback([o, &action] {
    action = [o] {
      for (int gpus : o->gpus) {
        if (gpus < 8 || gpus % 8 != 0) throw InputError("--gpus: expected multiples of 8");
      }
      std::cout << fmt::format("{:>8} {:>10} {:>12} {:>12} {:>12}  {}\n", "gpus", "wall_s",
                               "peak_MiB", "sim_time", "busbw_GB/s", "algorithm");
      for (int gpus : o->gpus) {
        const CaseResult r = run_isolated([&] {
          const auto t0 = std::chrono::steady_clock::now();
          config::ClusterOptions opt;
          opt.nodes = gpus / 8;
          const platform::Cluster c(config::load_cluster("dgx-h100", opt));
          network::CollectiveRequest req;
          req.op = network::Op::allreduce;
          req.bytes = config::parse_quantity(o->bytes, config::Dimension::bytes);
          for (platform::GpuId g = 0; g < c.gpu_count(); ++g) req.ranks.push_back(g);
          const network::CollectiveResult res = network::simulate_collective(c, req);
          const auto rep = report::make_collective_report(c, req, res);
          CaseResult cr;
          cr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          cr.sim_s = rep.time_s;
          cr.figure = rep.busbw_Bps;
          std::snprintf(cr.label, sizeof cr.label, "%s/%s", rep.algorithm.c_str(),
                        rep.protocol.c_str());
          return cr;
        });
        std::cout << fmt::format("{:>8} {:>10.3f} {:>12.1f} {:>12.6f} {:>12.2f}  {}\n", gpus,
                                 r.wall_s, r.peak_kib / 1024.0, r.sim_s, r.figure / 1e9, r.label)
                  << std::flush;
      }
      return 0;
    };
  });
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "Print wall time and peak memory of large simulations (one process per case)");
  add_bench_network(*cmd, action);
  add_bench_training(*cmd, action);
  add_bench_sweep(*cmd, action);
  add_bench_plan(*cmd, action);
  cmd->require_subcommand(1);
}

}  // namespace hetsim::cli
