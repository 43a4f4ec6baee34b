// One simulation from spec to report; see run.h.
#include "sim/study/run.h"

#include "sim/policy/replan.h"
#include "sim/workload/job/memory.h"

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
    : model(spec.model_text ? workload::load_model_yaml_text(*spec.model_text, spec.model)
                            : workload::load_model(spec.model)),
      cluster(spec.cluster_text ? config::load_cluster_text(*spec.cluster_text, spec.cluster,
                                                            spec.cluster_options)
                                : config::load_cluster(spec.cluster, spec.cluster_options)),
      plan(load_plan(spec, model, cluster)),
      perturbed(workload::resolve_perturbations(perturbations(spec, plan), cluster)) {
  workload::scale_links(perturbed, cluster);
}

namespace {

RunOutput run_plan(const RunInputs& in, const workload::Plan& plan, const workload::CostModel& cost,
                   const RunOptions& options) {
  RunOutput out{nullptr, workload::build_training_job(in.model, plan, in.cluster, cost), {}};
  workload::slow_down(out.job, in.perturbed.compute_factor);
  workload::slow_down_from(out.job, in.perturbed);
  const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(out.job);
  workload::ReplayOptions ropt;
  ropt.free_communication = options.free_communication;
  ropt.exact = options.exact;
  ropt.progress = options.progress;
  const workload::ReplayResult result = workload::replay(out.job, options.observer, ropt);
  out.report = report::make_training_report(out.job, result, memory);
  out.report.perturbations = in.perturbed.description;
  return out;
}

}  // namespace

RunOutput run(const RunInputs& in, const workload::CostModel& cost, const RunOptions& options) {
  if (!in.perturbed.lost) return run_plan(in, in.plan, cost, options);
  const workload::ResolvedPerturbations::Loss& loss = *in.perturbed.lost;
  RunOptions quiet = options;
  quiet.observer = nullptr;  // a trace shows the iteration after the restart
  RunOutput before = run_plan(in, in.plan, cost, quiet);
  report::LostNodeReport lost;
  lost.node = loss.node;
  lost.spare = loss.spare;
  lost.detect_s = loss.detect_s;
  lost.restart_s = loss.restart_s;
  lost.before_s = before.report.iteration_time_s;
  // The step runs until the loss; one lost after the step's end (at past it) hits the step at
  // its end, when all of it has run and none of it is kept.
  lost.at_s = std::min(loss.at_s, lost.before_s);
  // A node that holds none of the plan's GPUs costs the job nothing.
  lost.hit = policy::holds_node(in.plan, in.cluster, loss.node);
  lost.gpus_before = before.report.gpus;
  lost.replicas_before = lost.replicas_after = in.plan.replicas.size();
  lost.global_batch_before = lost.global_batch_after = in.plan.global_batch_size;
  RunOutput out;
  if (!lost.hit || loss.spare) {
    out = options.observer ? run_plan(in, in.plan, cost, options) : std::move(before);
  } else {
    auto survivors = std::make_unique<workload::Plan>(in.plan);
    const policy::Shrunk s = policy::drop_node(*survivors, in.cluster, loss.node);
    lost.replicas_after = s.replicas_after;
    lost.global_batch_after = s.global_batch_after;
    out = run_plan(in, *survivors, cost, options);
    out.survivors = std::move(survivors);
  }
  lost.after_s = out.report.iteration_time_s;
  lost.gpus_after = out.report.gpus;
  lost.failed_step_s =
      lost.hit ? lost.at_s + lost.detect_s + lost.restart_s + lost.after_s : lost.before_s;
  out.report.lost = lost;
  return out;
}

}  // namespace hetsim::study
