// hetsim: the command-line entry point. Exit codes: 0 success, 1 run-time failure, 2 bad input.
#include <yaml-cpp/yaml.h>

#include <iostream>

#include "sim/cli/commands.h"
#include "sim/core/error.h"

namespace hetsim::cli {

void ClusterFlags::add_to(CLI::App& app, const std::string& default_cluster) {
  cluster = default_cluster;
  app.add_option("--cluster", cluster, "Cluster file, or a built-in cluster name (see topologies/)")
      ->capture_default_str();
  nodes_option = app.add_option("--nodes", nodes, "Node count of a single-group cluster");
  app.add_option("--set", sets,
                 "Override a field of the cluster file: PATH=VALUE, e.g. groups[0].count=16 "
                 "(repeatable)");
}

void RunFlags::add_to(CLI::App& app, const std::string& default_cluster) {
  app.add_option("--model", model,
                 "Model file (models/*.yaml or a Hugging Face config.json) or a built-in name")
      ->required();
  cluster.add_to(app, default_cluster);
  if (default_cluster.empty()) app.get_option("--cluster")->required();
  app.add_option("--plan", plan, "Plan file (YAML; keys in docs/reference/plan-keys.md)")
      ->required();
  app.add_option("--plan-set", plan_sets,
                 "Override a field of the plan: PATH=VALUE, e.g. micro_batch_size=2 (repeatable)");
}

study::RunSpec RunFlags::spec() const {
  study::RunSpec s;
  s.model = model;
  s.cluster = cluster.cluster;
  s.cluster_options = cluster.options();
  s.plan = plan;
  s.plan_sets = plan_sets;
  return s;
}

void print_warnings(const CostModels& costs) {
  for (const std::string& w : costs.warnings()) std::cerr << "hetsim: warning: " << w << "\n";
}

config::ClusterOptions ClusterFlags::options() const {
  config::ClusterOptions o;
  if (nodes_option && nodes_option->count() > 0) o.nodes = nodes;
  o.sets = sets;
  return o;
}

int say_error(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const InputError& e) {
    std::cerr << prefix << "hetsim: error: " << e.what() << std::endl;
    return 2;
  } catch (const YAML::Exception& e) {
    std::cerr << prefix << "hetsim: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << prefix << "hetsim: failure: " << e.what() << std::endl;
    return 1;
  } catch (...) {
    std::cerr << prefix << "hetsim: failure: an unknown exception" << std::endl;
    return 1;
  }
}

}  // namespace hetsim::cli

int main(int argc, char** argv) {
  CLI::App app{
      "hetsim: a discrete-event simulator of distributed deep-learning training on heterogeneous "
      "GPU clusters"};
  app.set_version_flag("--version", std::string("hetsim ") + HETSIM_VERSION);
  app.require_subcommand(1);
  hetsim::cli::Action action;
  hetsim::cli::add_simulate_command(app, action);
  hetsim::cli::add_plan_command(app, action);
  hetsim::cli::add_sweep_command(app, action);
  hetsim::cli::add_collective_command(app, action);
  hetsim::cli::add_bench_command(app, action);
  hetsim::cli::add_calibrate_command(app, action);
  hetsim::cli::add_export_command(app, action);
  hetsim::cli::add_execute_command(app, action);
  hetsim::cli::add_compare_command(app, action);
  hetsim::cli::add_export_chakra_command(app, action);
  hetsim::cli::add_replay_chakra_command(app, action);
  hetsim::cli::add_reference_command(app, action);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    const auto subs = app.get_subcommands({});
    for (size_t i = 0; i < subs.size(); ++i) {
      known = known || subs[i]->get_name() == argv[1];
      names += (i == 0 ? "" : i + 1 == subs.size() ? " or " : ", ") + subs[i]->get_name();
    }
    if (!known) {
      std::cerr << "hetsim: error: unknown command \"" << argv[1] << "\" (expected " << names
                << "; see hetsim --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "hetsim: error: " << e.what() << " (see hetsim --help)\n";
    return 2;
  }
  try {
    return action();
  } catch (const hetsim::cli::Said& s) {
    return s.status;
  } catch (...) {
    return hetsim::cli::say_error(std::current_exception());
  }
}
