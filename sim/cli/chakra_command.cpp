// `hetsim export-chakra` and `hetsim replay-chakra`: a training job as Chakra execution traces,
// and Chakra traces (hetsim's or another tool's) replayed over a hetsim cluster. A command of its
// own rather than `simulate --workload`: simulate's model, plan, memory and MFU report have no
// counterpart in a trace, which carries only timed nodes and their communication.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "sim/chakra/et_io.h"
#include "sim/chakra/export.h"
#include "sim/chakra/replay.h"
#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "sim/study/run.h"

namespace hetsim::cli {

void add_export_chakra_command(CLI::App& app, Action& action) {
  struct Opts {
    RunFlags run;
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export-chakra",
      "Write the replayed training iteration as Chakra execution traces, one per GPU "
      "(OUT/et.<rank>.et and OUT/comm_group.json)");
  o->run.add_to(*cmd, "dgx-a100");
  cmd->add_option("--out", o->out, "Folder to write the traces to (created if needed)")->required();
  cmd->callback([o, &action] {
    action = [o] {
      const study::RunInputs inputs(o->run.spec());
      const CostModels costs("", "");
      const workload::TrainingJob job =
          workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, costs.get());
      const chakra::Exported ex = chakra::export_job(job);
      chakra::write_traces(o->out, ex.traces);
      size_t nodes = 0;
      for (const chakra::Trace& t : ex.traces.ranks) nodes += t.nodes.size();
      const size_t n = ex.traces.ranks.size();
      std::cout << fmt::format("wrote {} Chakra traces ({} .. {}), {} nodes, {} process groups\n",
                               n, chakra::trace_path(o->out, 0),
                               chakra::trace_path(o->out, static_cast<uint32_t>(n - 1)), nodes,
                               ex.traces.groups.size());
      for (uint32_t r = 0; r < n; ++r) {
        if (ex.gpu_of_rank[r] == r) continue;
        std::cerr << "hetsim: warning: the plan's GPUs are not 0 to " << n - 1 << ": rank " << r
                  << " ran on GPU " << ex.gpu_of_rank[r]
                  << " (replay-chakra puts rank i on GPU i)\n";
        break;
      }
      return 0;
    };
  });
}

void add_replay_chakra_command(CLI::App& app, Action& action) {
  struct Opts {
    ClusterFlags cluster;
    std::string dir;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "replay-chakra",
      "Replay a folder of Chakra execution traces (<prefix>.<rank>.et, comm_group.json) over a "
      "cluster: rank i on GPU i, collectives and sends as flows; print the iteration time");
  cmd->add_option("DIR", o->dir, "Folder of Chakra traces")->required();
  o->cluster.add_to(*cmd, "dgx-a100");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, &action] {
    action = [o] {
      const chakra::TraceSet traces = chakra::read_traces(o->dir);
      const platform::Cluster cluster(
          config::load_cluster(o->cluster.cluster, o->cluster.options()));
      const chakra::ReplayResult r = chakra::replay(traces, cluster);
      if (o->json) {
        nlohmann::json j;
        j["iteration_time_s"] = r.iteration.seconds();
        j["ranks"] = r.ranks.size();
        j["nodes"] = r.nodes;
        j["collectives"] = r.collectives;
        j["transfers"] = r.transfers;
        j["flows"] = r.flows;
        j["events"] = r.events;
        j["devices"] = nlohmann::json::array();
        for (uint32_t i = 0; i < r.ranks.size(); ++i) {
          j["devices"].push_back({{"rank", i},
                                  {"id", cluster.gpu_name(i)},
                                  {"gpu", cluster.gpu(i).profile->name},
                                  {"busy_s", r.ranks[i].compute.seconds()},
                                  {"cpu_s", r.ranks[i].cpu.seconds()},
                                  {"copy_s", r.ranks[i].copy.seconds()},
                                  {"finish_s", r.ranks[i].finish.seconds()}});
        }
        std::cout << j.dump(2) << "\n";
        return 0;
      }
      std::cout << fmt::format("Chakra replay of {} ({} ranks) on {}\n", o->dir, r.ranks.size(),
                               o->cluster.cluster);
      std::cout << fmt::format("  iteration      {:.3f} ms\n", r.iteration.seconds() * 1e3);
      std::cout << fmt::format("  nodes          {} ({} collectives, {} transfers, {} flows)\n",
                               r.nodes, r.collectives, r.transfers, r.flows);
      std::cout << "  rank  gpu                       busy ms   finish ms\n";
      for (uint32_t i = 0; i < r.ranks.size(); ++i) {
        std::cout << fmt::format("  {:4}  {:24}  {:8.3f}  {:10.3f}\n", i, cluster.gpu_name(i),
                                 r.ranks[i].compute.seconds() * 1e3,
                                 r.ranks[i].finish.seconds() * 1e3);
      }
      return 0;
    };
  });
}

}  // namespace hetsim::cli
