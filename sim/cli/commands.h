// The hetsim subcommands. Each registers its options on the CLI11 app and returns the action
// to run after parsing; main() maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/cost_models.h"
#include "sim/config/cluster_config.h"
#include "sim/study/run.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::cli {

using Action = std::function<int()>;

// --cluster, --nodes, --set, shared by every command that reads a cluster.
struct ClusterFlags {
  std::string cluster;
  long nodes = 0;
  CLI::Option* nodes_option = nullptr;
  std::vector<std::string> sets;
  void add_to(CLI::App& app, const std::string& default_cluster);
  config::ClusterOptions options() const;
};

// --model, the cluster's flags, --plan, --plan-set: what every command that builds a plan's job
// reads, with one help text.
struct RunFlags {
  std::string model, plan;
  ClusterFlags cluster;
  std::vector<std::string> plan_sets;
  void add_to(CLI::App& app, const std::string& default_cluster);
  study::RunSpec spec() const;
};

// The kernel costs of --efficiency and --calibration (calibrate/cost_models.h). The commands
// print the database's spread warnings on standard error as soon as it is read.
using CostModels = calibrate::CostModels;
void print_warnings(const CostModels& costs);

void add_collective_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_simulate_command(CLI::App& app, Action& action);
void add_calibrate_command(CLI::App& app, Action& action);
void add_plan_command(CLI::App& app, Action& action);
void add_sweep_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);
void add_execute_command(CLI::App& app, Action& action);
void add_export_chakra_command(CLI::App& app, Action& action);
void add_replay_chakra_command(CLI::App& app, Action& action);
void add_reference_command(CLI::App& app, Action& action);
void add_compare_command(CLI::App& app, Action& action);

// Prints why a command failed on standard error, as main() does ("hetsim: error: ..." for bad
// input, "hetsim: failure: ..." otherwise, after prefix), and returns the exit status: 2 for bad
// input, 1 otherwise. Under mpirun a rank says it before it lets the others leave (mpirun ends
// every rank once one exits non-zero, which could cut the message off).
int say_error(const std::exception_ptr& error, const std::string& prefix = "");

// Thrown by a command that has already said why it failed: main() exits with status, quietly.
struct Said {
  int status = 2;
};

// "8" -> the first 8 GPUs; "0,1,8-15" -> that list. Throws InputError.
std::vector<uint32_t> parse_ranks(const std::string& text, size_t gpu_count);

}  // namespace hetsim::cli
