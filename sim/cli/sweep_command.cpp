// `hetsim sweep`: run a study (sim/study/): every combination of its models, clusters, plans and
// frameworks, on local threads, into a store that a crash does not lose and a rerun resumes.
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "sim/cli/commands.h"
#include "sim/config/embedded_data.h"
#include "sim/core/error.h"
#include "sim/report/progress.h"
#include "sim/study/mpi_runner.h"
#include "sim/study/results.h"
#include "sim/study/runner.h"

namespace hetsim::cli {

namespace {

// `s` as one word for /bin/sh.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The study's plots and HTML page from its CSV, by sim/study/study_report.py (embedded in the
// binary, piped to python3): OUT_PREFIX.html and OUT_PREFIX.{throughput,time_split,cost}.png.
// Reports are an extra: without python3 and matplotlib (Debian's python3-matplotlib; the
// interpreter first on PATH, else /usr/bin/python3, which may differ from a pyenv one) the study
// is complete and the reason is returned.
std::string write_report(const std::string& csv_path, const std::string& prefix) {
  std::string script;
  for (const config::EmbeddedFile& f : config::embedded_files()) {
    if (std::string(f.path) == "sim/study/study_report.py") script = f.text;
  }
  if (script.empty()) throw RunError("built-in data is missing sim/study/study_report.py");
  std::string python;
  for (const char* p : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(p) + " -c 'import matplotlib' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) {
      python = p;
      break;
    }
  }
  if (python.empty()) {
    return "no python3 with matplotlib (Debian: apt-get install python3-matplotlib)";
  }
  const std::string cmd =
      python + " - " + shell_quote(csv_path) + " " + shell_quote(prefix) + " >&2";
  FILE* pipe = popen(cmd.c_str(), "w");
  if (!pipe) return "cannot start " + python;
  std::fwrite(script.data(), 1, script.size(), pipe);
  const int rc = pclose(pipe);
  if (rc != 0) return fmt::format("{} sim/study/study_report.py failed (status {})", python, rc);
  return "";
}

struct SweepOpts {
  std::string study, store, csv;
  unsigned jobs = 0;
  bool json = false, quiet = false, no_report = false;
  double progress_after_s = 2;
};

// Rank 0's inputs: the study, its store, and where the CSV goes.
struct OpenedStudy {
  std::unique_ptr<study::Study> study;
  std::unique_ptr<study::Store> store;
  std::string store_path, csv_path;
};

// Reads the study and opens its store on rank 0. Under mpirun, tells the other ranks whether it
// could (ready); when it could not, it says why and ends with that status.
OpenedStudy open_study(const SweepOpts& o, bool mpi) {
  namespace fs = std::filesystem;
  OpenedStudy out;
  int ready = 0;
  try {
    out.study = std::make_unique<study::Study>(study::load_study(o.study));
    // The cost model's inputs fail here, before a thread starts.
    {
      const CostModels costs(out.study->efficiency, out.study->calibration);
      print_warnings(costs);
    }
    out.store_path =
        o.store.empty() ? fs::path(o.study).replace_extension(".db").string() : o.store;
    out.csv_path =
        o.csv.empty() ? fs::path(out.store_path).replace_extension(".csv").string() : o.csv;
    out.store = std::make_unique<study::Store>(out.store_path);
    ready = 1;
  } catch (...) {
    if (!mpi) throw;
    const int status = say_error(std::current_exception());
    MPI_Bcast(&ready, 1, MPI_INT, 0, MPI_COMM_WORLD);
    throw Said{status};
  }
  if (mpi) MPI_Bcast(&ready, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return out;
}

// The table of every run (CSV), the report beside it, the JSON and the summary line.
void write_results(const SweepOpts& o, const OpenedStudy& opened, const study::RunnerSummary& sum,
                   unsigned jobs, int ranks) {
  namespace fs = std::filesystem;
  const study::Study& s = *opened.study;
  const std::string& csv_path = opened.csv_path;
  const std::vector<study::RunRecord> records = study::study_records(s, *opened.store);
  {
    std::ofstream f(csv_path, std::ios::binary);
    if (!f) throw InputError("--csv " + csv_path + ": cannot write the file");
    study::write_csv(f, records, s.tokens);
    if (!f) throw RunError("--csv " + csv_path + ": write failed");
  }
  std::string report_note;
  if (!o.no_report) {
    const std::string prefix = fs::path(csv_path).replace_extension().string();
    const std::string why_not = write_report(csv_path, prefix);
    report_note = why_not.empty() ? "; report in " + prefix + ".html" : "; no report: " + why_not;
  }
  size_t failed = 0;
  for (const study::RunRecord& r : records) failed += r.ok ? 0 : 1;
  if (o.json) std::cout << study::to_json(s, opened.store_path, records).dump(2) << "\n";
  std::cerr << fmt::format(
      "sweep: {} runs: {} run now on {} {}{} ({} failed), {} already in {}; {} failed "
      "in all{}; table in {}{}\n",
      sum.total, sum.ran, jobs, ranks > 1 ? "worker rank" : "thread", jobs == 1 ? "" : "s",
      sum.failed, sum.stored_before, opened.store_path, failed,
      failed ? " (see the error column)" : "", csv_path, report_note);
}

// The study's runs that its store does not hold yet, on threads or on mpirun's ranks.
int run_sweep(const SweepOpts& o) {
  // Under mpirun: rank 0 reads the inputs, keeps the store and hands out the runs; the other
  // ranks simulate (sim/study/mpi_runner.h).
  const bool mpi = study::launched_by_mpirun();
  int rank = 0, ranks = 1;
  if (mpi) {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  struct Finalize {
    bool on;
    ~Finalize() {
      int done = 0;
      if (on && (MPI_Finalized(&done), !done)) MPI_Finalize();
    }
  } finalize{mpi};
  // ready: rank 0 read the study and opened the store. When it could not, it says why and
  // exits with that status (mpirun's own); the other ranks leave with 0, so that mpirun
  // cannot end rank 0 before its message is out (it ends every rank once one exits non-zero).
  if (rank != 0) {
    int ready = 0;
    MPI_Bcast(&ready, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ready) return 0;
    const study::Study s = study::load_study(o.study);
    study::run_study_mpi(s, nullptr, {});
    return 0;
  }
  const OpenedStudy opened = open_study(o, mpi);
  const study::Study& s = *opened.study;
  study::Store& store = *opened.store;
  const unsigned jobs =
      ranks > 1 ? static_cast<unsigned>(ranks - 1)
                : (o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency()));
  report::ProgressMeter meter(std::cerr, "sweep", o.progress_after_s, 1.0,
                              report::stderr_is_terminal());
  study::RunnerOptions ropt;
  ropt.jobs = jobs;
  if (!o.quiet && !o.json) {
    ropt.progress = [&meter](size_t done, size_t total, size_t before) {
      meter.update_rate(done, total, before, "runs");
    };
  }
  const study::RunnerSummary sum =
      ranks > 1 ? study::run_study_mpi(s, &store, ropt) : study::run_study(s, store, ropt);
  meter.finish();
  write_results(o, opened, sum, jobs, ranks);
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<SweepOpts>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run a study: every combination of its models, clusters, plans and frameworks, each run "
      "recorded in an SQLite store as it finishes; a rerun skips what the store holds");
  cmd->add_option("STUDY", o->study, "Study file (YAML; see experiments/sweep-example)")
      ->required();
  cmd->add_option("--store", o->store, "SQLite store (default: the study file with .db)");
  cmd->add_option("--jobs", o->jobs, "Threads (default: the machine's cores)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--csv", o->csv, "CSV of every run (default: the store with .csv)");
  cmd->add_flag("--json", o->json, "Print every run as JSON (and no progress)");
  cmd->add_flag("--quiet", o->quiet, "No progress lines on standard error");
  cmd->add_flag("--no-report", o->no_report,
                "No HTML report and plots beside the CSV (they need python3-matplotlib)");
  cmd->add_option("--progress-after", o->progress_after_s,
                  "Seconds of wall time before progress lines start")
      ->group("");
  cmd->callback([o, &action] { action = [o] { return run_sweep(*o); }; });
}

}  // namespace hetsim::cli
