// `hetsim compare --trace`: a PyTorch profiler trace of the user's own iterations against the
// replay of the same model, cluster and plan (sim/execute/trace_compare.h).
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "calibrate/trace_import.h"
#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "sim/execute/trace_compare.h"
#include "sim/report/chrome_trace.h"
#include "sim/study/run.h"

namespace hetsim::cli {

namespace {

struct CompareOpts {
  std::string trace, calibration, efficiency, dtype = "fp32", chrome;
  RunFlags run;
  uint32_t device = 0;
  bool non_causal = false, json = false;
  int gpus_per_node = 8;
  size_t top = 25;
};

workload::ReplayResult replay_exact(const workload::TrainingJob& job) {
  workload::ReplayOptions ro;
  ro.exact = true;
  return workload::replay(job, nullptr, ro);
}

void write_chrome(const CompareOpts& o, report::ChromeTrace& chrome,
                  const workload::TrainingJob& job, const calibrate::KinetoTrace& trace,
                  const calibrate::TraceImport& measured) {
  std::ostringstream replayed;
  chrome.write(replayed, job);
  std::ofstream f(o.chrome);
  if (!(f << execute::side_by_side(replayed.str(), trace, measured) << "\n"))
    throw RunError("--chrome-trace " + o.chrome + ": cannot write");
  if (!o.json)
    std::cout << "  Chrome trace (the replay and the measured iteration) " << o.chrome << "\n";
}

int run_compare(const CompareOpts& o) {
  const study::RunInputs inputs(o.run.spec());
  if (o.device >= inputs.cluster.gpu_count()) {
    throw InputError(fmt::format("--device {}: the cluster has {} devices", o.device,
                                 inputs.cluster.gpu_count()));
  }
  calibrate::ImportOptions io;
  io.device_type = inputs.cluster.gpu(o.device).profile->name;
  io.dtype = o.dtype;
  io.causal = !o.non_causal;
  io.gpus_per_node = o.gpus_per_node;
  if (!o.chrome.empty()) report::check_trace_path(o.chrome, "--chrome-trace");
  const calibrate::KinetoTrace trace = calibrate::read_kineto_trace(o.trace);
  const calibrate::TraceImport measured = calibrate::import_trace(trace, io);
  // The prediction: with --calibration where given, else with the trace's own kernel times
  // (then the error is the schedule's, the kernels hetsim's op list has or lacks, the host).
  const CostModels own(o.efficiency, measured.db);
  std::unique_ptr<CostModels> given;
  if (!o.calibration.empty()) {
    given = std::make_unique<CostModels>(o.efficiency, o.calibration);
    print_warnings(*given);
  }
  const CostModels& primary = given ? *given : own;
  const workload::TrainingJob job =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, primary.get());
  // The Chrome trace of the replay: the compared device's streams, every micro-batch.
  report::TraceFilter filter;
  filter.devices.assign(inputs.cluster.gpu_count(), false);
  filter.devices[o.device] = true;
  report::ChromeTrace chrome(filter);
  workload::ReplayOptions ro;
  ro.exact = true;
  const workload::ReplayResult predicted =
      workload::replay(job, o.chrome.empty() ? nullptr : &chrome, ro);
  const execute::TraceComparison c = execute::compare_trace(job, predicted, measured, o.device);
  // The other prediction, for scale.
  const CostModels datasheet(o.efficiency, "");
  const CostModels& other = given ? own : datasheet;
  const workload::TrainingJob other_job =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, other.get());
  const double other_s = replay_exact(other_job).iteration.seconds();
  const double other_error =
      c.measured_median_s > 0 ? (other_s - c.measured_median_s) / c.measured_median_s : 0;
  const std::string other_what =
      given ? "replayed with the trace's own kernel times" : "the datasheet model alone";
  if (o.json) {
    if (!o.chrome.empty()) write_chrome(o, chrome, job, trace, measured);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(execute::to_json(c));
    j["calibration"] = given ? o.calibration : "trace";
    j[given ? "trace_calibrated_iteration_s" : "datasheet_iteration_s"] = other_s;
    j["mapped_s"] = measured.mapped_s;
    j["unmapped_s"] = measured.unmapped_s;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "{} against {} on {}, plan {} ({} operator runs mapped, {:.1f}% of "
      "their time)\n",
      o.trace, inputs.model.name, o.run.cluster.cluster, o.run.plan, measured.ops.size(),
      measured.mapped_s > 0 ? 100 * measured.mapped_s / (measured.mapped_s + measured.unmapped_s)
                            : 0.0);
  std::cout << "  kernel times from "
            << (given ? o.calibration
                      : std::string("the trace itself (give --calibration to "
                                    "judge a database)"))
            << "\n";
  std::cout << execute::to_text(c, o.top);
  std::cout << fmt::format("  {:<44} {:.4f} s   error {:+.1f}%\n", other_what, other_s,
                           100 * other_error);
  for (const std::string& n : measured.notes) std::cout << "  note: " << n << "\n";
  if (!o.chrome.empty()) write_chrome(o, chrome, job, trace, measured);
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<CompareOpts>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "A PyTorch profiler trace of your own iterations against the replay of the same model, "
      "cluster and plan: per iteration, kind of time, kind of kernel and kernel shape");
  cmd->add_option("--trace", o->trace, "The trace (.json or .json.gz, torch.profiler's export)")
      ->required();
  o->run.add_to(*cmd, "");
  cmd->add_option("--device", o->device, "The device of the cluster whose rank the trace recorded")
      ->capture_default_str();
  cmd->add_option("--calibration", o->calibration,
                  "Calibration database for the prediction (default: the trace's own kernel "
                  "times)");
  cmd->add_option("--efficiency", o->efficiency, "Datasheet efficiency constants");
  cmd->add_option("--dtype", o->dtype,
                  "Element type where the trace records none: fp32 | bf16 | fp16")
      ->capture_default_str();
  cmd->add_flag("--non-causal", o->non_causal, "Attention is not causal (an encoder's)");
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs a node, for the trace's collectives")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Kernel shapes to list")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--chrome-trace", o->chrome,
                  "Write one Chrome trace (Perfetto) with the replayed device and the trace's "
                  "iteration of median length side by side");
  cmd->callback([o, &action] { action = [o] { return run_compare(*o); }; });
}

}  // namespace hetsim::cli
