// `hetsim execute`: run a plan on this machine's devices under mpirun, one rank per device, and
// compare the measured iteration with the prediction (sim/execute/executor.h).
#include <fmt/format.h>
#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "sim/cli/commands.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/execute/cuda_program.h"
#include "sim/execute/executor.h"
#include "sim/report/chrome_trace.h"
#include "sim/study/run.h"

namespace hetsim::cli {

namespace {

struct ExecuteOpts {
  RunFlags run;
  std::string backend = "cpu", calibration, efficiency, trace, fault;
  std::string program_out, measured;  // --backend cuda
  int iterations = 3, warmup = 1;
  double timeout_s = 0;
  bool json = false;
};

void parse_fault(const std::string& text, execute::Options& o) {
  const size_t a = text.find(':'), b = text.rfind(':');
  long long rank = -1, task = -1;
  if (a != std::string::npos && b > a && text.substr(0, a) == "kill") {
    rank = config::parse_whole<long long>(text.substr(a + 1, b - a - 1)).value_or(-1);
    task = config::parse_whole<long long>(text.substr(b + 1)).value_or(-1);
  }
  if (rank < 0 || task < 0)
    throw InputError("--fault: expected kill:RANK:TASK, got \"" + text + "\"");
  o.kill_rank = static_cast<int>(rank);
  o.kill_task = static_cast<size_t>(task);
}

// A plan's own what-ifs (perturbations:) would bend the prediction but not the hardware: the
// comparison would be wrong, so execute refuses them.
void refuse_what_ifs(const std::string& plan, const study::RunInputs& inputs) {
  if (inputs.perturbed.empty()) return;
  throw InputError(plan +
                   ": perturbations: a plan with what-ifs cannot be executed (the real "
                   "run would not have them; " +
                   inputs.perturbed.description.front() + "): remove them to execute it");
}

// Runs f on every rank; when it fails on any, every rank stops here. Rank 0 says why when it
// failed (every rank reads the same inputs, so it is the same reason); else each rank that failed
// says its own. Every rank waits until that is said before it leaves (mpirun ends the others as
// soon as one rank exits non-zero, which could cut rank 0 off before its message), then leaves
// with status 2 for bad input, 1 otherwise.
void agree(const execute::MpiSession& mpi, const std::function<void()>& f) {
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  int failed = error ? 1 : 0, any = 0, lead_failed = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!any) return;
  MPI_Bcast(&lead_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int status = 2;
  if (mpi.lead() && error) {
    status = say_error(error);
  } else if (mpi.lead()) {
    std::cerr << "hetsim: failure: execute: another rank failed before the run (see its message)"
              << std::endl;
    status = 1;
  } else if (error && !lead_failed) {
    // Rank 0 did not fail the same way: say this rank's reason.
    say_error(error, "execute: rank " + std::to_string(mpi.rank()) + ": ");
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  throw Said{status};
}

void check_iterations(const ExecuteOpts& o) {
  if (o.iterations < 1 || o.iterations > 10000)
    throw InputError(fmt::format("--iterations: expected 1 to 10000, got {}", o.iterations));
  if (o.warmup < 0 || o.warmup > 10000)
    throw InputError(fmt::format("--warmup: expected 0 to 10000, got {}", o.warmup));
}

// Before the run, not after it: a trace that cannot be written would waste the run.
void check_trace_folder(const std::string& trace) {
  if (trace.empty()) return;
  const std::filesystem::path folder = std::filesystem::path(trace).parent_path();
  if (!folder.empty() && !std::filesystem::is_directory(folder))
    throw InputError("--trace " + trace + ": folder " + folder.string() + " does not exist");
}

// The CPU backend's measured iteration, every rank's events, as a Chrome trace in `path`.
void write_cpu_trace(const workload::TrainingJob& job, const platform::Cluster& cluster,
                     const execute::Measured& m, const std::string& path) {
  report::ChromeTrace trace(report::make_trace_filter(cluster, "", ""));
  for (const execute::Event& e : m.events) {
    const workload::StageCopy& g = job.copies[e.copy];
    const workload::Task& t = g.program[e.pc];
    const Time start = Time::from_seconds(e.start), end = Time::from_seconds(e.end);
    switch (e.kind) {
      case 0:
        trace.on_compute(job, e.copy, t, start, end);
        break;
      case 1:
      case 4:
      case 5:
        trace.on_collective(job, e.copy,
                            e.kind == 1   ? "tp"
                            : e.kind == 4 ? "ep"
                                          : "cp",
                            g.comms[t.index].name, t, start, end);
        break;
      case 2:
        trace.on_collective(job, e.copy, "dp",
                            t.kind == workload::TaskKind::tied || t.index >= g.dp.size()
                                ? std::string("tied.embedding.grads")
                                : g.dp[t.index].name,
                            t, start, end);
        break;
      default:
        trace.on_transfer(job, e.from, e.copy, t, start, end);
    }
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InputError("--trace " + path + ": cannot write the file");
  trace.write(out, job);
}

int run_execute(const ExecuteOpts& o, const execute::MpiSession& mpi) {
  execute::Options eo;
  const study::RunSpec spec = o.run.spec();
  std::unique_ptr<study::RunInputs> inputs;
  std::unique_ptr<CostModels> costs;
  std::unique_ptr<workload::TrainingJob> owned;
  bool unfused_note = false;
  // Every rank reads the same inputs; they agree on the outcome before any waits for another.
  agree(mpi, [&] {
    if (o.backend != "cpu")
      throw InputError("--backend: expected cpu or cuda, got \"" + o.backend + "\"");
    check_iterations(o);
    if (o.timeout_s < 0) throw InputError("--timeout: expected seconds >= 0 (0: automatic)");
    check_trace_folder(o.trace);
    eo.iterations = o.iterations;
    eo.warmup = o.warmup;
    if (!o.fault.empty()) parse_fault(o.fault, eo);
    inputs = std::make_unique<study::RunInputs>(spec);
    refuse_what_ifs(o.run.plan, *inputs);
    // The CPU has no fused attention: a plan that does not choose runs (and is predicted with)
    // the unfused kernel; one that asks for flash is refused (check_cpu_job).
    if (inputs->plan.flash_attention && inputs->plan.attention_defaulted) {
      inputs->plan.flash_attention = false;
      unfused_note = true;
    }
    costs = std::make_unique<CostModels>(o.efficiency, o.calibration);
    owned = std::make_unique<workload::TrainingJob>(
        workload::build_training_job(inputs->model, inputs->plan, inputs->cluster, costs->get()));
    execute::check_cpu_job(*owned, mpi.size());
  });
  const workload::TrainingJob& job = *owned;
  if (mpi.lead()) print_warnings(*costs);
  if (mpi.lead() && unfused_note) {
    std::cerr << "execute: the plan gives no attention; the CPU backend has no fused kernel, so it "
                 "runs, and the prediction takes, the unfused one (attention: standard)\n";
  }
  // The prediction: every replica replayed on its own, as every rank runs.
  workload::ReplayOptions ro;
  ro.exact = true;
  workload::ReplayResult predicted;
  double predicted_s = 0;
  agree(mpi, [&] {
    if (!mpi.lead()) return;
    predicted = workload::replay(job, nullptr, ro);
    predicted_s = predicted.iteration.seconds();
    const auto& fw = inputs->plan.framework;
    if (fw.host_per_pass > Time() || fw.host_per_step > Time()) {
      std::cerr << fmt::format(
          "execute: note: framework {} spends host time per pass and per step in the "
          "prediction; execute runs no framework, so the measurement has none of it\n",
          fw.name);
    }
    std::cerr << fmt::format(
        "execute: {} on {} ranks, {} warm-up and {} measured iterations (predicted {:.4f} s "
        "each)\n",
        inputs->plan.source, mpi.size(), o.warmup, o.iterations, predicted_s);
  });
  MPI_Bcast(&predicted_s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  eo.timeout_s = o.timeout_s > 0 ? o.timeout_s : std::max(60.0, 20 * predicted_s);
  const execute::Measured m = execute::run_cpu(job, eo, mpi);
  if (!mpi.lead()) return 0;
  const workload::ReplayResult replayed =
      workload::replay(execute::with_measured_compute(job, m), nullptr, ro);
  const execute::Comparison c = execute::compare(job, predicted, m, &replayed);
  if (!o.trace.empty()) write_cpu_trace(job, inputs->cluster, m, o.trace);
  if (o.json) {
    std::cout << execute::to_json(c, m) << "\n";
  } else {
    std::cout << fmt::format("execute: {} on {} ({} ranks, backend {}), plan {}\n",
                             inputs->model.name, o.run.cluster.cluster, m.ranks, m.backend,
                             inputs->plan.source)
              << execute::to_text(c, m);
    if (!o.trace.empty()) std::cout << "  trace (measured)  " << o.trace << "\n";
  }
  return 0;
}

// `--backend cuda`, one process: a single-GPU plan's kernels as a program file, run by the
// standalone hetsim-execute-cuda beside this binary (calibrate/cuda/), or its CSV from elsewhere
// (--measured); then the same comparison as the CPU backend.
std::string quote_word(const std::string& w) {
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " " + path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `cmdline` through the shell; returns its exit status (-1: it could not be started, 128: a
// signal ended it), what it printed in `said`.
int run_capturing(const std::string& cmdline, std::string& said) {
  int status = -1;
  if (FILE* pipe = ::popen(cmdline.c_str(), "r")) {
    char buffer[4096];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) said.append(buffer, n);
    status = ::pclose(pipe);
  }
  return status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Measures `program` with hetsim-execute-cuda here, in a temporary folder removed afterwards;
// returns the CSV it wrote, that file's path in `csv_path`.
std::string measure_cuda_program(const ExecuteOpts& o, const std::string& program,
                                 const std::string& plan, double predicted_s,
                                 std::string& csv_path) {
  // The program is beside this binary, as hetsim-calibrate-cuda is (calibrate_command.cpp).
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  std::filesystem::path bin = self.parent_path() / "calibrate" / "cuda" / "hetsim-execute-cuda";
  if (!std::filesystem::exists(bin)) bin = self.parent_path() / "hetsim-execute-cuda";
  if (!std::filesystem::exists(bin)) {
    throw RunError(
        "--backend cuda: hetsim-execute-cuda was not built (no CUDA toolkit when hetsim was "
        "configured); write the program with --program-out, run it on a GPU machine "
        "(calibrate/run_execute_gpu.sh) and compare here with --measured CSV");
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("hetsim-execute-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string program_file = (dir / "program.csv").string();
  csv_path = (dir / "measured.csv").string();
  {
    std::ofstream out(program_file, std::ios::binary);
    if (!(out << program) || !out.flush())
      throw RunError("cannot write the program file " + program_file);
  }
  std::cerr << fmt::format(
      "execute: {} on one GPU, {} warm-up and {} measured iterations (predicted {:.6f} s "
      "each)\n",
      plan, o.warmup, o.iterations, predicted_s);
  const std::string cmdline =
      quote_word(bin.string()) + " --program " + quote_word(program_file) + " --out " +
      quote_word(csv_path) +
      fmt::format(" --iterations {} --warmup {} 2>&1", o.iterations, o.warmup);
  std::string said;
  const int rc = run_capturing(cmdline, said);
  while (!said.empty() && said.back() == '\n') said.pop_back();
  if (rc != 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    const std::string why = said.empty() ? "it said nothing" : said;
    if (rc == 3) {
      throw RunError("--backend cuda: no GPU here (" + why +
                     "); write the program with --program-out, run it on a GPU machine "
                     "(calibrate/run_execute_gpu.sh) and compare here with --measured CSV");
    }
    throw RunError(
        fmt::format("--backend cuda: hetsim-execute-cuda failed (exit status {}): {}", rc, why));
  }
  if (!said.empty()) std::cerr << said << "\n";
  std::string csv = read_text(csv_path, "measured CSV");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return csv;
}

// The iteration timed op by op: `timed`, a copy of the job, gives each compute task of its one
// copy a segment of its own with the measured times `op_s` (tasks share segments). Its replay
// is the prediction with the measured kernels (execute::with_measured_compute), the trace draws
// its ops. Returns false, `timed` untouched, when `op_s` is not one time per op of the program.
bool time_op_by_op(workload::TrainingJob& timed, const std::vector<double>& op_s) {
  workload::StageCopy& g = timed.copies.front();
  size_t ops = 0;
  for (const workload::Task& t : g.program)
    if (t.kind == workload::TaskKind::compute) ops += g.segments[t.index].ops.size();
  const bool op_by_op = op_s.size() == ops;
  if (op_by_op) {
    size_t i = 0;
    for (workload::Task& t : g.program.write()) {
      if (t.kind != workload::TaskKind::compute) continue;
      if (g.segments[t.index].ops.empty()) continue;  // the framework's host time: not measured
      workload::Segment& s = execute::own_segment(g, t);
      s.duration = Time();
      for (auto& op : s.ops) {
        op.second = Time::from_seconds(op_s[i++]);
        s.duration += op.second;
      }
    }
  }
  return op_by_op;
}

// The CUDA backend's measured iteration, its compute tasks on `timed`'s one device, as a Chrome
// trace in `path`.
void write_cuda_trace(const workload::TrainingJob& timed, const platform::Cluster& cluster,
                      const std::vector<execute::Event>& events, const std::string& path) {
  const workload::StageCopy& g = timed.copies.front();
  report::ChromeTrace trace(report::make_trace_filter(cluster, "", ""));
  for (const execute::Event& e : events) {
    trace.on_compute(timed, e.copy, g.program[e.pc], Time::from_seconds(e.start),
                     Time::from_seconds(e.end));
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InputError("--trace " + path + ": cannot write the file");
  trace.write(out, timed);
}

void print_cuda_comparison(const ExecuteOpts& o, const study::RunInputs& inputs,
                           const execute::CudaMeasured& cm, const execute::Comparison& c) {
  std::string attention;
  for (const auto& [impl, n] : cm.attention)
    attention += fmt::format("{}{} {}", attention.empty() ? "" : ", ", n, impl);
  std::cout << fmt::format("execute: {} on {} (1 GPU{}, backend cuda), plan {}\n",
                           inputs.model.name, o.run.cluster.cluster,
                           cm.device_name.empty() ? "" : ": " + cm.device_name, inputs.plan.source);
  if (!o.measured.empty()) std::cout << "  measured          " << o.measured << "\n";
  if (!attention.empty()) std::cout << "  attention ops     " << attention << "\n";
  std::cout << execute::to_text(c, cm.measured);
  if (!o.trace.empty()) std::cout << "  trace (measured)  " << o.trace << "\n";
}

int run_execute_cuda(const ExecuteOpts& o) {
  check_iterations(o);
  check_trace_folder(o.trace);
  if (!o.fault.empty()) throw InputError("--fault: only with --backend cpu");
  const study::RunSpec spec = o.run.spec();
  const study::RunInputs inputs(spec);
  refuse_what_ifs(o.run.plan, inputs);
  const CostModels costs(o.efficiency, o.calibration);
  const workload::TrainingJob job =
      workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, costs.get());
  execute::check_cuda_job(job);
  print_warnings(costs);
  workload::ReplayOptions ro;
  ro.exact = true;
  const workload::ReplayResult predicted = workload::replay(job, nullptr, ro);
  const double predicted_s = predicted.iteration.seconds();
  const std::string program = execute::cuda_program(
      job, predicted_s,
      fmt::format("model={} cluster={} plan={} micro_batch_size={} "
                  "global_batch_size={} calibration={}",
                  inputs.model.name, o.run.cluster.cluster, inputs.plan.source,
                  inputs.plan.micro_batch_size, inputs.plan.global_batch_size,
                  o.calibration.empty() ? "none" : o.calibration));
  if (!o.program_out.empty()) {
    std::ofstream out(o.program_out, std::ios::binary);
    if (!(out << program) || !out.flush())
      throw InputError("--program-out " + o.program_out + ": cannot write the file");
    std::cerr << fmt::format("execute: wrote the program of {} ({:.6f} s predicted) to {}\n",
                             inputs.plan.source, predicted_s, o.program_out);
    if (o.measured.empty()) return 0;
  }
  std::string csv_path = o.measured, csv;
  if (!o.measured.empty()) {
    csv = read_text(o.measured, "--measured");
  } else {
    csv = measure_cuda_program(o, program, inputs.plan.source, predicted_s, csv_path);
  }
  const execute::CudaMeasured cm = execute::read_cuda_measured(job, csv, csv_path);
  if (cm.predicted_iteration_s > 0 &&
      std::abs(cm.predicted_iteration_s - predicted_s) > 1e-3 * predicted_s) {
    std::cerr << fmt::format(
        "execute: note: the program that was measured predicted {:.6f} s, this prediction "
        "{:.6f} s (another --calibration or hetsim version?)\n",
        cm.predicted_iteration_s, predicted_s);
  }
  workload::TrainingJob timed = job;
  const bool op_by_op = time_op_by_op(timed, cm.op_s);
  std::optional<workload::ReplayResult> replayed;
  if (op_by_op) replayed = workload::replay(timed, nullptr, ro);
  const execute::Comparison c =
      execute::compare(job, predicted, cm.measured, replayed ? &*replayed : nullptr);
  if (!o.trace.empty()) write_cuda_trace(timed, inputs.cluster, cm.measured.events, o.trace);
  if (o.json) {
    std::cout << execute::to_json(c, cm.measured) << "\n";
    return 0;
  }
  print_cuda_comparison(o, inputs, cm, c);
  return 0;
}

}  // namespace

void add_execute_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<ExecuteOpts>();
  CLI::App* cmd = app.add_subcommand(
      "execute",
      "Run a plan on this machine's devices (mpirun -np N, one rank per device), measure its "
      "iterations and compare them with the prediction, per op kind, device and kernel");
  o->run.add_to(*cmd, "cpu-host");
  cmd->add_option("--backend", o->backend, "cpu (OpenBLAS and MPI) | cuda")->capture_default_str();
  cmd->add_option("--calibration", o->calibration,
                  "Calibration database for the prediction (hetsim calibrate on this machine)");
  cmd->add_option("--efficiency", o->efficiency, "Datasheet efficiency constants");
  cmd->add_option("--iterations", o->iterations, "Measured iterations")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Iterations run first and not measured")
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s,
                  "Seconds without progress after which every rank ends (default: 20 x the "
                  "predicted iteration, at least 60)");
  cmd->add_option("--trace", o->trace, "Write the measured iteration as a Chrome trace");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--program-out", o->program_out,
                  "--backend cuda: write the device's kernels as hetsim-execute-cuda's program "
                  "file and stop (unless --measured is given too)");
  cmd->add_option("--measured", o->measured,
                  "--backend cuda: compare with this CSV of hetsim-execute-cuda (measured "
                  "elsewhere, e.g. by calibrate/run_execute_gpu.sh) instead of running");
  cmd->add_option("--fault", o->fault, "Fault injection for tests: kill:RANK:TASK")->group("");
  cmd->callback([o, &action] {
    action = [o] {
      if (o->backend == "cuda") return run_execute_cuda(*o);
      if (!o->program_out.empty() || !o->measured.empty())
        throw InputError("--program-out and --measured go with --backend cuda");
      const execute::MpiSession mpi;
      return run_execute(*o, mpi);
    };
  });
}

}  // namespace hetsim::cli
