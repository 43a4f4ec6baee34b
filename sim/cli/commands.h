// The hetsim subcommands. Each registers its options on the CLI11 app and returns the action
// to run after parsing; main() maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "sim/config/cluster_config.h"

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

void add_collective_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_simulate_command(CLI::App& app, Action& action);
void add_calibrate_command(CLI::App& app, Action& action);
void add_plan_command(CLI::App& app, Action& action);

// "8" -> the first 8 GPUs; "0,1,8-15" -> that list. Throws InputError.
std::vector<uint32_t> parse_ranks(const std::string& text, size_t gpu_count);

}  // namespace hetsim::cli
