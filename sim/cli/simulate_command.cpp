// `hetsim simulate`: replay one training iteration of a model on a cluster under a plan.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/progress.h"
#include "sim/report/training_report.h"
#include "sim/study/run.h"

namespace hetsim::cli {

namespace {

struct SimulateOpts {
  ClusterFlags cluster;
  std::string model, plan, trace, efficiency, calibration;
  std::vector<std::string> plan_sets, perturb;
  double tokens = 0;
  std::string trace_devices, trace_micro_batches;
  bool json = false, quiet = false;
  bool free_communication = false;
  bool exact = false;
  double progress_after_s = 2;
};

// --trace and its selections: a path that can be written, and no selection without it.
void check_trace_options(const SimulateOpts& o) {
  if (!o.trace.empty()) report::check_trace_path(o.trace, "--trace");
  // A selection without a trace would be silently ignored.
  if (o.trace.empty() && !(o.trace_devices + o.trace_micro_batches).empty()) {
    throw InputError(
        std::string(o.trace_devices.empty() ? "--trace-micro-batches" : "--trace-devices") +
        ": selects what --trace FILE writes; give --trace too");
  }
}

// The run's inputs as the options name them.
study::RunSpec run_spec(const SimulateOpts& o) {
  study::RunSpec spec;
  spec.model = o.model;
  spec.cluster = o.cluster.cluster;
  spec.cluster_options = o.cluster.options();
  spec.plan = o.plan;
  spec.plan_sets = o.plan_sets;
  for (const std::string& p : o.perturb) spec.perturbations.merge(workload::parse_perturbation(p));
  return spec;
}

// One replay as the options give it: the report as text or JSON, and the trace if asked.
int run_simulate(const SimulateOpts& o) {
  report::ProgressMeter progress(std::cerr, "simulate", o.progress_after_s, 1.0,
                                 report::stderr_is_terminal());
  check_trace_options(o);
  const study::RunSpec spec = run_spec(o);
  const study::RunInputs inputs(spec);
  const CostModels costs(o.efficiency, o.calibration);
  print_warnings(costs);
  report::TraceFilter filter;
  if (!o.trace.empty()) {
    filter = report::make_trace_filter(inputs.cluster, o.trace_devices, o.trace_micro_batches,
                                       report::most_micro_batches(inputs.plan));
  }
  std::unique_ptr<report::ChromeTrace> trace;
  if (!o.trace.empty()) trace = std::make_unique<report::ChromeTrace>(filter);
  study::RunOptions ropt;
  ropt.free_communication = o.free_communication;
  ropt.exact = o.exact;
  ropt.observer = trace.get();
  if (!o.quiet && !o.json)
    ropt.progress = [&progress](const workload::ReplayStatus& s) { progress.update(s); };
  study::RunOutput result = study::run(inputs, costs.get(), ropt);
  progress.finish();
  const workload::TrainingJob& job = result.job;
  report::TrainingReport& rep = result.report;
  rep.warnings = costs.warnings();
  if (o.tokens > 0) report::add_run_cost(rep, o.tokens);
  if (trace) {
    std::ofstream out(o.trace, std::ios::binary);
    if (!out) throw InputError("--trace " + o.trace + ": cannot write the file");
    trace->write(out, job);
    if (!out) throw RunError("--trace " + o.trace + ": write failed");
  }
  if (o.json) {
    std::cout << report::to_json(rep).dump(2) << "\n";
  } else {
    std::cout << report::to_text(rep);
    if (trace) {
      std::cout << "  trace          " << o.trace << " (" << trace->events()
                << " events; open in https://ui.perfetto.dev)\n";
    }
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<SimulateOpts>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Replay one training iteration (every micro-batch, kernel, collective and transfer) and "
      "report time, throughput, MFU, the time split and memory per device");
  cmd->add_option("--model", o->model,
                  "Model file (models/*.yaml or a Hugging Face config.json) or a built-in name")
      ->required();
  o->cluster.add_to(*cmd, "dgx-a100");
  cmd->add_option("--plan", o->plan, "Plan file (YAML; keys in docs/reference/plan-keys.md)")
      ->required();
  cmd->add_option("--plan-set", o->plan_sets,
                  "Override a field of the plan: PATH=VALUE, e.g. micro_batch_size=2 (repeatable)");
  cmd->add_option("--calibration", o->calibration,
                  "Calibration database (HDF5, hetsim calibrate): measured costs for its GPU type, "
                  "derived costs for other GPU types");
  cmd->add_option("--efficiency", o->efficiency,
                  "Datasheet efficiency constants (default: calibrate/datasheet_efficiency.yaml)");
  cmd->add_option("--trace", o->trace, "Write a Chrome trace (JSON; open in Perfetto)");
  cmd->add_option("--trace-devices", o->trace_devices,
                  "GPUs to trace, e.g. 0-7,64 (default: all up to 64 GPUs, else node 0's)");
  cmd->add_option("--trace-micro-batches", o->trace_micro_batches,
                  "Micro-batches to trace, e.g. 0-3 (default: all)");
  cmd->add_flag("--free-communication", o->free_communication,
                "What-if bound: every collective and transfer takes no time");
  cmd->add_flag("--exact", o->exact,
                "Replay every data-parallel replica on its own (default: identical replicas are "
                "replayed as one, in lockstep)");
  cmd->add_option("--perturb", o->perturb,
                  "What-if, as YAML (repeatable, combined): 'slow: {gpu: 3, factor: 2}' (a GPU's "
                  "kernels take 2x as long), 'link: {link: \"node0.nic8<->leaf0\", factor: 0.5}' "
                  "(links keep half their capacity), 'stragglers: {seed: 1, probability: 0.1, "
                  "min: 1.2, max: 2}' (seeded random slowdowns), 'lost: {node: 3, at: 0.5, "
                  "detect: 600, restart: 120, replace: shrink|spare}' (a node lost mid-step: the "
                  "timeout, the relaunch, and the step again on the survivors or a spare node)");
  cmd->add_option("--tokens", o->tokens,
                  "Tokens of a whole training run (e.g. 300e9): its days and cost in the report")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "Print JSON (and no progress)");
  cmd->add_flag("--quiet", o->quiet, "No progress lines on standard error");
  // Hidden: tests force progress on a short run.
  cmd->add_option("--progress-after", o->progress_after_s,
                  "Seconds of wall time before progress lines start")
      ->group("");
  cmd->callback([o, &action] { action = [o] { return run_simulate(*o); }; });
}

}  // namespace hetsim::cli
