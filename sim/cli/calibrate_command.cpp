// `hetsim calibrate`: measure kernels and collectives on this machine into a calibration
// database; `calibrate check` predicts held-out points; `calibrate import` turns the CUDA
// backend's CSV into the database.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "calibrate/compare.h"
#include "calibrate/cpu/cpu_backend.h"
#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "calibrate/model_shapes.h"
#include "calibrate/nccl_tests.h"
#include "calibrate/trace_import.h"
#include "sim/cli/commands.h"
#include "sim/config/cluster_config.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/platform/cluster.h"

namespace hetsim::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size() && !s.empty()) {
    const size_t c = std::min(s.find(',', pos), s.size());
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

const config::GpuProfile& profile_of(const calibrate::Database& db) {
  const auto& gpus = config::builtin_gpus();
  auto it = gpus.find(db.device_type());
  if (it == gpus.end()) {
    throw InputError(db.source + ": device_type \"" + db.device_type() +
                     "\" has no GPU profile (topologies/gpus/)");
  }
  return it->second;
}

// `calibrate check`: the held-out error per table, then a WARNING line per table beyond the
// sanity bounds (calibrate/database.h says why these) and a summary; --strict makes that bad input.
int run_check(const std::string& file, bool points, bool strict) {
  const calibrate::Database db = calibrate::read_database(file);
  const config::GpuProfile& gpu = profile_of(db);
  std::cout << fmt::format("{} ({} measurements, {} on {}): held-out error, every fifth point\n",
                           file, db.size(), db.device_type(),
                           db.attrs.count("host") ? db.attrs.at("host") : "?");
  std::cout << fmt::format("  {:<28} {:>8} {:>10} {:>10} {:>10}\n", "table", "points", "mean %",
                           "max %", "spread %");
  double gemm = 0, coll = 0;
  size_t ng = 0, nc = 0;
  std::vector<std::string> warnings;
  std::set<std::string> offending;
  for (const auto& r : calibrate::check_database(db, gpu)) {
    std::cout << fmt::format("  {:<28} {:>8} {:>10.2f} {:>10.2f} {:>10.2f}\n", r.table, r.held_out,
                             100 * r.mean_error, 100 * r.max_error, 100 * r.mean_spread);
    if (points) {
      for (const auto& p : r.points) {
        std::cout << fmt::format(
            "    {:<40} measured {:>11.4g} s  predicted {:>11.4g} s  "
            "error {:>+7.2f}%  spread {:>6.2f}%\n",
            p.label, p.measured_s, p.predicted_s, 100 * (p.predicted_s / p.measured_s - 1),
            100 * p.spread);
      }
    }
    if (r.table.rfind("gemm/", 0) == 0) gemm += r.mean_error * r.held_out, ng += r.held_out;
    if (r.table.rfind("collective/", 0) == 0) coll += r.mean_error * r.held_out, nc += r.held_out;
    if (r.mean_error > calibrate::kMaxHeldOutError) {
      warnings.push_back(fmt::format(
          "{}: held-out error {:.1f}% mean over {} points exceeds {:.0f}% (neighbouring points "
          "disagree: noise rather than the kernel's curve)",
          r.table, 100 * r.mean_error, r.held_out, 100 * calibrate::kMaxHeldOutError));
      offending.insert(r.table);
    }
  }
  if (ng)
    std::cout << fmt::format("  GEMMs: {:.2f}% mean over {} held-out points\n", 100 * gemm / ng,
                             ng);
  if (nc)
    std::cout << fmt::format("  collectives: {:.2f}% mean over {} held-out points\n",
                             100 * coll / nc, nc);
  const std::vector<calibrate::TableSpread> spreads = calibrate::table_spreads(db);
  for (const calibrate::TableSpread& t : spreads) {
    if (t.median_spread <= calibrate::kMaxMedianSpread) continue;
    warnings.push_back(fmt::format(
        "{}: median spread {:.0f}% over {} points exceeds {:.0f}% ((p90 - p10) / median of "
        "repeated runs: measured on a loaded machine?)",
        t.table, 100 * t.median_spread, t.points, 100 * calibrate::kMaxMedianSpread));
    offending.insert(t.table);
  }
  for (const std::string& w : warnings) std::cout << "WARNING: " << w << "\n";
  if (offending.empty()) {
    std::cout << fmt::format(
        "sanity: all {} tables within bounds (median spread <= {:.0f}%, held-out error <= "
        "{:.0f}%)\n",
        spreads.size(), 100 * calibrate::kMaxMedianSpread, 100 * calibrate::kMaxHeldOutError);
    return 0;
  }
  std::cout << fmt::format(
      "sanity: {} of {} tables beyond reason (median spread > {:.0f}% or held-out error > "
      "{:.0f}%): re-measure on a quiet machine before simulating with this database\n",
      offending.size(), spreads.size(), 100 * calibrate::kMaxMedianSpread,
      100 * calibrate::kMaxHeldOutError);
  if (strict) {
    throw InputError(
        fmt::format("{}: {} table(s) beyond the sanity bounds (--strict)", file, offending.size()));
  }
  return 0;
}

}  // namespace

// A table of measurements against a prediction (calibrate compare, calibrate diff): its header,
// and one row (`skipped`: why it has no points), with every point where `points`.
std::string comparison_header() {
  return fmt::format("  {:<40} {:>7} {:>9} {:>9} {:>9}\n", "table", "points", "mean %", "max %",
                     "bias %");
}

void print_comparison_row(const calibrate::CheckRow& r, const std::string& skipped, bool points,
                          const char* predictor) {
  if (!skipped.empty()) {
    std::cout << fmt::format("  {:<40} skipped: {}\n", r.table, skipped);
    return;
  }
  double bias = 0;
  for (const auto& p : r.points) bias += p.predicted_s / p.measured_s - 1;
  bias /= static_cast<double>(std::max<size_t>(1, r.points.size()));
  std::cout << fmt::format("  {:<40} {:>7} {:>9.2f} {:>9.2f} {:>+9.2f}\n", r.table, r.held_out,
                           100 * r.mean_error, 100 * r.max_error, 100 * bias);
  if (!points) return;
  for (const auto& p : r.points) {
    std::cout << fmt::format("    {:<40} measured {:>11.4g} s  {} {:>11.4g} s  error {:>+7.2f}%\n",
                             p.label, p.measured_s, predictor, p.predicted_s,
                             100 * (p.predicted_s / p.measured_s - 1));
  }
}

void check_device_type(const std::string& device) {
  if (config::builtin_gpus().count(device)) return;
  std::vector<std::string> names;
  for (const auto& [name, _] : config::builtin_gpus()) names.push_back(name);
  throw InputError("--device-type: no GPU profile \"" + device +
                   "\" (known: " + config::join_names(names) + ")");
}

// `calibrate import-trace`: a PyTorch profiler trace as measurements (calibrate/trace_import.h).
void add_import_trace_command(CLI::App& calibrate, Action& action) {
  struct Opts {
    std::string trace, device, out, dtype = "fp32";
    bool non_causal = false;
    int gpus_per_node = 8;
    size_t top = 15;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = calibrate.add_subcommand(
      "import-trace",
      "Read a PyTorch profiler (Kineto) trace of real iterations into a database: its GEMMs, "
      "attention, memory-bound kernels, optimizer and NCCL collectives as measurements of the "
      "device type, with the operators it cannot map listed");
  cmd->add_option("trace", o->trace, "The trace (.json or .json.gz, torch.profiler's export)")
      ->required();
  cmd->add_option("--device-type", o->device, "GPU profile that ran it (topologies/gpus/)")
      ->required();
  cmd->add_option("--out", o->out, "Database file to write (.h5)")->required();
  cmd->add_option("--dtype", o->dtype,
                  "Element type where the trace records none: fp32 | bf16 | fp16")
      ->capture_default_str();
  cmd->add_flag("--non-causal", o->non_causal, "Attention is not causal (an encoder's)");
  cmd->add_option("--gpus-per-node", o->gpus_per_node,
                  "GPUs a node: a collective over more ranks spans several nodes")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Unmapped operators to list")->capture_default_str();
  cmd->callback([o, &action] {
    action = [o] {
      check_device_type(o->device);
      calibrate::ImportOptions io;
      io.device_type = o->device;
      io.dtype = o->dtype;
      io.causal = !o->non_causal;
      io.gpus_per_node = o->gpus_per_node;
      const calibrate::TraceImport r =
          calibrate::import_trace(calibrate::read_kineto_trace(o->trace), io);
      calibrate::write_database(o->out, r.db);
      std::cout << o->trace << ": " << calibrate::to_text(r, o->top);
      std::cout << r.db.size() << " measurements (" << o->device << ") written to " << o->out
                << "\n";
      return 0;
    };
  });
}

// `calibrate diff`: one database's measurements against another's model (calibrate/compare.h).
void add_diff_command(CLI::App& calibrate, Action& action) {
  struct Opts {
    std::string reference, other;
    bool points = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = calibrate.add_subcommand(
      "diff",
      "One database's measurements against another's: each point of OTHER predicted from "
      "REFERENCE (its own measurement of that shape, else interpolated), per table (a trace's "
      "kernels against the calibration of the same GPU, say)");
  cmd->add_option("reference", o->reference, "Calibration database that predicts")->required();
  cmd->add_option("other", o->other, "Calibration database whose measurements are compared")
      ->required();
  cmd->add_flag("--points", o->points, "Also print every point");
  cmd->callback([o, &action] {
    action = [o] {
      const calibrate::Database ref = calibrate::read_database(o->reference);
      const calibrate::Database other = calibrate::read_database(o->other);
      const config::GpuProfile& gpu = profile_of(ref);
      std::cout << fmt::format("{} ({} measurements, {}) against {} ({}, {})\n", o->other,
                               other.size(), other.device_type(), o->reference, ref.size(),
                               ref.device_type());
      if (other.device_type() != ref.device_type()) {
        std::cout << "  note: another device type; the reference's measurements stand for it "
                     "unscaled\n";
      }
      std::cout << comparison_header();
      for (const calibrate::CheckRow& r : calibrate::compare_databases(ref, other, gpu)) {
        print_comparison_row(r, r.points.empty() ? "the reference has no such table" : "",
                             o->points, "reference");
      }
      return 0;
    };
  });
}

struct MeasureOpts {
  std::string backend = "cpu", out, ops, shapes_file;
  bool quick = false;
};

// `calibrate` itself: measure this machine with the CPU backend, or run the CUDA backend's
// program and convert its CSV.
int run_measure(const MeasureOpts& o) {
  if (o.out.empty()) throw InputError("calibrate: --out FILE is required");
  if (o.backend == "cpu") {
    calibrate::cpu::Options c;
    c.out = o.out;
    c.quick = o.quick;
    c.ops = split_list(o.ops);
    c.shapes = o.shapes_file;
    return calibrate::cpu::run(c);
  }
  if (o.backend == "cuda") {
    // The CUDA backend is a standalone program beside this one (calibrate/cuda/).
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
    const std::filesystem::path prog =
        self.parent_path() / "calibrate" / "cuda" / "hetsim-calibrate-cuda";
    const std::filesystem::path alt = self.parent_path() / "hetsim-calibrate-cuda";
    const std::filesystem::path bin = std::filesystem::exists(prog) ? prog : alt;
    if (!std::filesystem::exists(bin)) {
      throw RunError("the CUDA backend was not built (no CUDA toolkit when hetsim was configured)");
    }
    const std::string csv = o.out + ".csv";
    // The shipped models' exact shapes join the CUDA backend's grids (as run_gpu.sh does).
    std::string shapes = o.out + ".shapes.csv";
    if (!o.shapes_file.empty()) {
      calibrate::read_model_shapes_csv(o.shapes_file);  // bad input found here, not there
      shapes = o.shapes_file;
    } else {
      const calibrate::ModelShapes s =
          calibrate::model_shapes(calibrate::builtin_model_names(), {1, 2, 4, 8}, {1, 2, 4, 8});
      std::ofstream f(shapes);
      if (!(f << calibrate::model_shapes_csv(s)))
        throw InputError("--out " + o.out + ": cannot write " + shapes);
    }
    auto quote = [](const std::string& w) {
      std::string q = "'";
      for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      return q + "'";
    };
    std::string cmdline = quote(bin.string()) + " --out " + quote(csv) + " --shapes " +
                          quote(shapes) + (o.quick ? " --quick" : "");
    if (!o.ops.empty()) cmdline += " --ops " + quote(o.ops);
    const int status = std::system(cmdline.c_str());
    const int rc = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (rc != 0) {
      // Name the CSV only where the backend wrote one (it fails before creating it when
      // there is no GPU), with how many measurements a rerun would resume from.
      std::string kept = "; it wrote no measurements";
      if (std::ifstream in(csv); in) {
        std::size_t rows = 0;
        bool header = false;
        for (std::string line; std::getline(in, line);) {
          if (line.empty() || line[0] == '#') continue;
          if (header) ++rows;
          header = true;  // the first other line is the header
        }
        kept = "; " + csv + " keeps the " + std::to_string(rows) +
               " measurement(s) it took: run the same command again to resume";
      }
      throw RunError("the CUDA backend failed (exit status " + std::to_string(rc) + ")" + kept);
    }
    calibrate::write_database(o.out, calibrate::read_csv(csv));
    return 0;
  }
  throw InputError("--backend: expected cpu or cuda, got \"" + o.backend + "\"");
}

struct ShapesOpts {
  std::string shape_models, shape_tp = "1,2,4,8", shape_mb = "1,2,4,8", shape_out;
};

int run_shapes(const ShapesOpts& o) {
  auto numbers = [](const std::string& flag, const std::string& text) {
    std::vector<int64_t> v;
    for (const std::string& x : split_list(text)) {
      const std::optional<long long> n = config::parse_whole<long long>(x);
      if (!n || *n < 1 || *n > 4096) {
        throw InputError(flag + ": expected positive integers separated by commas, got \"" + text +
                         "\"");
      }
      v.push_back(*n);
    }
    if (v.empty()) throw InputError(flag + ": expected at least one value");
    return v;
  };
  const std::vector<int64_t> tp = numbers("--tp", o.shape_tp);
  const std::vector<int64_t> mb = numbers("--micro-batch", o.shape_mb);
  const std::vector<std::string> models =
      o.shape_models.empty() ? calibrate::builtin_model_names() : split_list(o.shape_models);
  const calibrate::ModelShapes s = calibrate::model_shapes(models, tp, mb);
  const std::string text = "# models=" + config::join_names(models) + "\n# tp=" + o.shape_tp +
                           "\n# micro_batch=" + o.shape_mb + "\n" + calibrate::model_shapes_csv(s);
  for (const std::string& why : s.skipped) std::cerr << "calibrate shapes: skipped " << why << "\n";
  if (o.shape_out.empty()) {
    std::cout << text;
  } else {
    std::ofstream f(o.shape_out);
    if (!(f << text)) throw InputError("--out " + o.shape_out + ": cannot write");
    std::cerr << fmt::format("{} GEMM and {} attention shapes written to {}\n", s.gemm.size(),
                             s.attention.size(), o.shape_out);
  }
  return 0;
}

struct NcclOpts {
  std::vector<std::string> nccl_files;
  std::string nccl_device, nccl_op = "allreduce", nccl_out;
};

int run_import_nccl(const NcclOpts& o) {
  const std::vector<std::string> ops = {"allreduce", "allgather", "reducescatter",
                                        "alltoall",  "broadcast", "sendrecv"};
  if (std::find(ops.begin(), ops.end(), o.nccl_op) == ops.end()) {
    throw InputError("--op: expected one of " + config::join_names(ops) + ", got \"" + o.nccl_op +
                     "\"");
  }
  check_device_type(o.nccl_device);
  calibrate::Database db;
  db.attrs = {{"backend", "nccl-tests"}, {"device_type", o.nccl_device}};
  std::string sources;
  for (const std::string& a : o.nccl_files) {
    const calibrate::NcclTestsFile f = calibrate::parse_nccl_tests_argument(a);
    calibrate::import_nccl_tests(f, o.nccl_op, db);
    sources += (sources.empty() ? "" : ", ") + std::filesystem::path(f.path).filename().string();
  }
  db.attrs["host"] = "imported: " + sources;
  calibrate::write_database(o.nccl_out, db);
  std::cout << db.size() << " " << o.nccl_op << " measurements (" << o.nccl_device
            << ") written to " << o.nccl_out << "\n";
  return 0;
}

struct CompareDbOpts {
  std::string compare_file;
  ClusterFlags compare_cluster;
  bool points = false;
};

int run_compare_db(const CompareDbOpts& o) {
  const calibrate::Database db = calibrate::read_database(o.compare_file);
  const config::GpuProfile& gpu = profile_of(db);
  auto print = [&](const calibrate::CheckRow& r, const std::string& skipped) {
    print_comparison_row(r, skipped, o.points, "model");
  };
  const std::string header = comparison_header();
  std::cout << fmt::format("{} ({} measurements, {}): measured against hetsim's models\n",
                           o.compare_file, db.size(), db.device_type());
  const calibrate::MeasuredCostModel model(db, workload::DatasheetCostModel());
  const auto kernels = model.compare_datasheet(gpu);
  if (!kernels.empty()) {
    std::cout << "kernels against the datasheet model (kernel time, no launch gap) of " << gpu.name
              << "\n"
              << header;
    for (const auto& r : kernels) print(r, "");
  }
  if (!db.collective.empty()) {
    if (o.compare_cluster.cluster.empty()) {
      std::cout << "collectives: give --cluster (a built-in name or a file) to replay them on "
                   "hetsim's network model\n";
    } else {
      const platform::Cluster cluster(
          config::load_cluster(o.compare_cluster.cluster, o.compare_cluster.options()));
      std::cout << "collectives against the network model on " << o.compare_cluster.cluster
                << " (alone, nccl-tests' timing)\n";
      // A cluster of other GPUs compares another machine's fabric: say so.
      std::vector<std::string> others;
      for (size_t n = 0; n < cluster.node_count(); ++n) {
        const platform::Node& node = cluster.node(static_cast<uint32_t>(n));
        if (node.gpu_count == 0) continue;
        const std::string& name = cluster.gpu(node.first_gpu).profile->name;
        if (name != db.device_type() &&
            std::find(others.begin(), others.end(), name) == others.end())
          others.push_back(name);
      }
      if (!others.empty()) {
        std::cout << "  note: the cluster has " << config::join_names(others)
                  << " GPUs; the database measured " << db.device_type() << "\n";
      }
      std::cout << header;
      for (const auto& c : calibrate::compare_collectives(db, cluster)) print(c.row, c.skipped);
    }
  }
  return 0;
}

int run_import_csv(const std::string& csv, const std::string& import_out) {
  const calibrate::Database db = calibrate::read_csv(csv);
  if (db.device_type().empty()) throw InputError(csv + ": no \"# device_type=\" line");
  if (db.attrs.count("dry_run")) {
    throw InputError(csv + ": a dry run's plan (\"# dry_run=" + db.attrs.at("dry_run") +
                     "\"), not measurements");
  }
  calibrate::write_database(import_out, db);
  std::cout << db.size() << " measurements written to " << import_out << "\n";
  return 0;
}

void add_check_command(CLI::App& calibrate, Action& action) {
  struct Opts {
    std::string file;
    bool points = false, strict = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* check = calibrate.add_subcommand(
      "check", "Hold out every fifth point, predict it from the rest, print the error per table");
  check->add_option("file", o->file, "Calibration database")->required();
  check->add_flag("--points", o->points,
                  "Also print every held-out point: measured, predicted, error, spread");
  check->add_flag("--strict", o->strict,
                  "Exit with status 2 when a table is beyond the sanity bounds (median spread over "
                  "50% or held-out error over 25%)");
  check->callback(
      [o, &action] { action = [o] { return run_check(o->file, o->points, o->strict); }; });
}

void add_shapes_command(CLI::App& calibrate, Action& action) {
  auto o = std::make_shared<ShapesOpts>();
  CLI::App* shapes = calibrate.add_subcommand(
      "shapes",
      "Write the exact GEMM and attention shapes of models (default: every built-in one) for the "
      "CUDA backend's --shapes");
  shapes->add_option("--models", o->shape_models,
                     "Models, comma-separated (built-in names or files); default all built-in");
  shapes->add_option("--tp", o->shape_tp, "Tensor-parallel degrees")->capture_default_str();
  shapes->add_option("--micro-batch", o->shape_mb, "Micro-batch sizes")->capture_default_str();
  shapes->add_option("--out", o->shape_out, "CSV file to write (default: standard output)");
  shapes->callback([o, &action] { action = [o] { return run_shapes(*o); }; });
}

void add_import_nccl_command(CLI::App& calibrate, Action& action) {
  auto o = std::make_shared<NcclOpts>();
  CLI::App* nccl = calibrate.add_subcommand(
      "import-nccl-tests",
      "Read nccl-tests results (its text output, or vTrain's CSV form) into a database, as "
      "measured collectives of a GPU type");
  nccl->add_option("files", o->nccl_files,
                   "nccl-tests outputs; FILE:RANKS where the file does not list its ranks")
      ->required();
  nccl->add_option("--device-type", o->nccl_device, "GPU profile measured (topologies/gpus/)")
      ->required();
  nccl->add_option("--op", o->nccl_op,
                   "allreduce | allgather | reducescatter | alltoall | broadcast | sendrecv")
      ->capture_default_str();
  nccl->add_option("--out", o->nccl_out, "Database file to write")->required();
  nccl->callback([o, &action] { action = [o] { return run_import_nccl(*o); }; });
}

void add_compare_db_command(CLI::App& calibrate, Action& action) {
  auto o = std::make_shared<CompareDbOpts>();
  CLI::App* compare = calibrate.add_subcommand(
      "compare",
      "Measured kernels against the datasheet model, and measured collectives against the "
      "network model on a cluster: how far uncalibrated hetsim is from this machine");
  compare->add_option("file", o->compare_file, "Calibration database")->required();
  o->compare_cluster.add_to(*compare, "");
  compare->add_flag("--points", o->points, "Also print every point");
  compare->callback([o, &action] { action = [o] { return run_compare_db(*o); }; });
}

void add_import_csv_command(CLI::App& calibrate, Action& action) {
  auto csv = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* imp = calibrate.add_subcommand("import", "Convert a backend's CSV into the database");
  imp->add_option("csv", *csv, "CSV written by a backend")->required();
  imp->add_option("--out", *out, "Database file to write")->required();
  imp->callback(
      [csv, out, &action] { action = [csv, out] { return run_import_csv(*csv, *out); }; });
}

void add_calibrate_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<MeasureOpts>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure GEMMs, memory-bound kernels and collectives on this machine into an HDF5 "
      "calibration database (CPU backend; CUDA backend on a GPU machine)");
  cmd->add_option("--backend", o->backend, "cpu | cuda")->capture_default_str();
  cmd->add_option("--out", o->out, "Database file to write (.h5)");
  cmd->add_flag("--quick", o->quick, "A small grid (for tests)");
  cmd->add_option("--ops", o->ops,
                  "Kinds to measure: gemm,attention,memory,conv,collective (cpu); gemm,attention,"
                  "memory,conv,collective,copy (cuda); default all");
  cmd->add_option("--shapes", o->shapes_file,
                  "GEMM and attention shapes to measure besides the grid (hetsim calibrate shapes "
                  "writes them for a model; default: none on the CPU, every built-in model's on "
                  "CUDA)");
  add_check_command(*cmd, action);
  add_shapes_command(*cmd, action);
  add_import_nccl_command(*cmd, action);
  add_compare_db_command(*cmd, action);
  add_import_csv_command(*cmd, action);
  add_import_trace_command(*cmd, action);
  add_diff_command(*cmd, action);
  cmd->callback([o, cmd, &action] {
    if (cmd->get_subcommands().size() > 0) return;
    action = [o] { return run_measure(*o); };
  });
}

}  // namespace hetsim::cli
