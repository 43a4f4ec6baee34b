// `hetsim export`: the launch command and configuration that run a plan in Megatron-LM, DeepSpeed
// or PyTorch (sim/launch/). A plan the framework cannot express is bad input unless --force.
#include <fstream>
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "sim/launch/launcher.h"

namespace hetsim::cli {

void add_export_command(CLI::App& app, Action& action) {
  struct Opts {
    RunFlags run;
    std::string framework, out;
    bool json = false, force = false;
  };
  auto o = std::make_shared<Opts>();
  std::string frameworks;
  for (const launch::Launcher* l : launch::launchers()) {
    frameworks += std::string("\n  ") + l->name() + ": " + l->summary();
  }
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Print the launch command and configuration that run a plan in the framework people deploy "
      "with (Megatron-LM, DeepSpeed, PyTorch DDP/FSDP)");
  o->run.add_to(*cmd, "dgx-a100");
  cmd->add_option("--framework", o->framework, "Framework to export to:" + frameworks)->required();
  cmd->add_option("--out", o->out, "Write the output to this file instead of standard output");
  cmd->add_flag("--json", o->json,
                "Print JSON: framework, command, config, env, hosts, unsupported, approximation");
  cmd->add_flag("--force", o->force,
                "Export the closest uniform plan when the framework cannot express the "
                "plan (what it changes goes to standard error)");
  cmd->callback([o, &action] {
    action = [o] {
      const launch::Launcher& launcher = launch::find_launcher(o->framework);
      const workload::ModelConfig model = workload::load_model(o->run.model);
      if (model.convolutional()) {
        throw InputError(o->run.model +
                         ": is a convolutional network; export writes transformer launches "
                         "(Megatron-LM, DeepSpeed, torchrun) only");
      }
      const platform::Cluster cluster(
          config::load_cluster(o->run.cluster.cluster, o->run.cluster.options()));
      workload::PlanOptions popt;
      popt.sets = o->run.plan_sets;
      const workload::Plan plan = workload::load_plan(o->run.plan, model, cluster, popt);
      const launch::Launch l = launcher.make({&model, &plan, &cluster});
      if (!l.unsupported.empty() && !o->force) {
        std::string msg = o->run.plan + ": " + launcher.name() + " cannot express this plan:";
        for (const std::string& u : l.unsupported) msg += "\n  " + u;
        msg += "\n--force exports the " + l.approximation;
        throw InputError(msg);
      }
      for (const std::string& u : l.unsupported) std::cerr << "hetsim: warning: " << u << "\n";
      if (!l.approximation.empty()) {
        std::cerr << "hetsim: warning: exported the " << l.approximation << "\n";
      }
      const std::string text = o->json ? launch::to_json(l).dump(2) + "\n" : launch::to_text(l);
      if (o->out.empty()) {
        std::cout << text;
        return 0;
      }
      std::ofstream out(o->out, std::ios::binary);
      if (!out) throw InputError("--out " + o->out + ": cannot write the file");
      out << text;
      if (!out) throw RunError("--out " + o->out + ": write failed");
      return 0;
    };
  });
}

}  // namespace hetsim::cli
