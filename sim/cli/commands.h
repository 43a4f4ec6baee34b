// The hetsim subcommands. Each registers its options on the CLI11 app and returns the action
// to run after parsing; main() maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/measured_cost_model.h"
#include "sim/config/cluster_config.h"
#include "sim/workload/cost_model.h"

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

// The kernel costs of --efficiency and --calibration: measured where the database has them, the
// datasheet model elsewhere. A database's spread warnings are kept and printed on standard error.
class CostModels {
 public:
  CostModels(const std::string& efficiency, const std::string& calibration);
  CostModels(const CostModels&) = delete;
  CostModels& operator=(const CostModels&) = delete;
  const workload::CostModel& get() const;
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  workload::DatasheetCostModel datasheet_;
  std::unique_ptr<calibrate::MeasuredCostModel> measured_;
  std::vector<std::string> warnings_;
};

void add_collective_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_simulate_command(CLI::App& app, Action& action);
void add_calibrate_command(CLI::App& app, Action& action);
void add_plan_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);

// "8" -> the first 8 GPUs; "0,1,8-15" -> that list. Throws InputError.
std::vector<uint32_t> parse_ranks(const std::string& text, size_t gpu_count);

}  // namespace hetsim::cli
