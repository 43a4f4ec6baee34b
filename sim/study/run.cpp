// One simulation from spec to report; see run.h.
#include "sim/study/run.h"

#include "sim/workload/memory.h"

namespace hetsim::study {

namespace {

workload::Plan load_plan(const RunSpec& spec, const workload::ModelConfig& model,
                         const platform::Cluster& cluster) {
  workload::PlanOptions popt;
  popt.sets = spec.plan_sets;
  if (spec.plan_text)
    return workload::load_plan_text(*spec.plan_text, spec.plan, model, cluster, popt);
  return workload::load_plan(spec.plan, model, cluster, popt);
}

// The run's what-ifs: the spec's (a study's axis, --perturb) and the plan file's own.
workload::Perturbations perturbations(const RunSpec& spec, const workload::Plan& plan) {
  workload::Perturbations p = spec.perturbations;
  p.merge(plan.perturbations);
  return p;
}

}  // namespace

RunInputs::RunInputs(const RunSpec& spec)
    : model(workload::load_model(spec.model)),
      cluster(config::load_cluster(spec.cluster, spec.cluster_options)),
      plan(load_plan(spec, model, cluster)),
      perturbed(workload::resolve_perturbations(perturbations(spec, plan), cluster)) {
  workload::scale_links(perturbed, cluster);
}

RunOutput run(const RunInputs& in, const workload::CostModel& cost, const RunOptions& options) {
  RunOutput out{workload::build_training_job(in.model, in.plan, in.cluster, cost), {}};
  workload::slow_down(out.job, in.perturbed.compute_factor);
  workload::slow_down_from(out.job, in.perturbed);
  const std::vector<workload::DeviceMemory> memory = workload::memory_per_group(out.job);
  workload::ReplayOptions ropt;
  ropt.free_communication = options.free_communication;
  ropt.exact = options.exact;
  ropt.progress = options.progress;
  const workload::ReplayResult result = workload::replay(out.job, options.observer, ropt);
  out.report = report::make_training_report(out.job, result, memory);
  out.report.perturbations = in.perturbed.description;
  return out;
}

}  // namespace hetsim::study
