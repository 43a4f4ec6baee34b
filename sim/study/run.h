// The library run API: one simulation from a spec (model, cluster, plan, as `hetsim simulate`
// takes them) to a report. `simulate` runs it once; a study (sim/study/runner.h) many times.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/cluster_config.h"
#include "sim/platform/cluster.h"
#include "sim/report/training_report.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/perturbation.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::study {

struct RunSpec {
  std::string model;                        // a file, a Hugging Face folder or a built-in name
  std::optional<std::string> model_text;    // a model made in code (YAML), instead; model names it
  std::string cluster;                      // a file or a built-in name
  std::optional<std::string> cluster_text;  // a cluster made in code (YAML); cluster names it
  config::ClusterOptions cluster_options;   // --nodes, --set
  std::string plan;                         // the plan file; with plan_text, the name errors use
  std::optional<std::string> plan_text;     // a plan made in code (a policy's), instead of a file
  std::vector<std::string> plan_sets;       // --plan-set
  workload::Perturbations perturbations;    // --perturb
};

// The parsed and validated inputs: every input error is thrown here, before anything runs.
// Not copyable or movable: the plan and the job point into the model and the cluster.
struct RunInputs {
  explicit RunInputs(const RunSpec& spec);
  RunInputs(const RunInputs&) = delete;
  RunInputs& operator=(const RunInputs&) = delete;
  workload::ModelConfig model;
  platform::Cluster cluster;
  workload::Plan plan;
  // Resolved against the cluster; its link capacities are already scaled.
  workload::ResolvedPerturbations perturbed;
};

struct RunOptions {
  bool free_communication = false;               // --free-communication
  bool exact = false;                            // --exact
  workload::ReplayObserver* observer = nullptr;  // a Chrome trace, say
  std::function<void(const workload::ReplayStatus&)> progress;
};

struct RunOutput {
  // A node lost mid-iteration (workload::LostNode) and the job shrunk around it: the plan of the
  // survivors, which the job replays (stable when the output moves).
  std::unique_ptr<workload::Plan> survivors;
  workload::TrainingJob job;  // points into the RunInputs (and survivors)
  report::TrainingReport report;
};

// Builds the job (slowed where the inputs' perturbations say), checks memory, replays one
// iteration and reports it. With a node lost mid-iteration, the plan is replayed as it is (the
// iteration before the loss), then as it runs after the restart (on a spare node, or shrunk to
// the survivors: policy::drop_node); the report is of the iteration after, and says what the
// loss cost (report::LostNodeReport). The cost model is only
// read (see calibrate/cost_models.h on sharing one between threads).
RunOutput run(const RunInputs& inputs, const workload::CostModel& cost,
              const RunOptions& options = {});

}  // namespace hetsim::study
