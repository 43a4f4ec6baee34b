// The Python module's native part (import hetsim; see python/hetsim/__init__.py): the library run
// API (sim/study/run.h) as `simulate`, the report as the JSON `hetsim simulate --json` prints.
// Input errors become ValueError, run failures RuntimeError; the GIL is released while the
// engine runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/cost_models.h"
#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/launch/launcher.h"
#include "sim/network/collective.h"
#include "sim/network/collective_runner.h"
#include "sim/policy/planner.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/collective_report.h"
#include "sim/report/training_report.h"
#include "sim/study/results.h"
#include "sim/study/run.h"
#include "sim/study/runner.h"
#include "sim/study/store.h"
#include "sim/study/study.h"
#include "sim/workload/replay/perturbation.h"

namespace py = pybind11;

namespace {

// One replayed iteration, as `hetsim simulate --json` reports it (a JSON text).
std::string simulate_json(const std::string& model, const std::string& model_text,
                          const std::string& cluster, const std::string& cluster_text, long nodes,
                          const std::vector<std::string>& cluster_sets, const std::string& plan,
                          const std::string& plan_text, const std::vector<std::string>& plan_sets,
                          const std::vector<std::string>& perturbations,
                          const std::string& calibration, const std::string& efficiency, bool exact,
                          bool free_communication, double tokens, const std::string& trace) {
  if (!trace.empty()) hetsim::report::check_trace_path(trace, "trace");
  hetsim::study::RunSpec spec;
  spec.model = model;
  if (!model_text.empty()) spec.model_text = model_text;
  spec.cluster = cluster;
  if (!cluster_text.empty()) spec.cluster_text = cluster_text;
  if (nodes > 0) spec.cluster_options.nodes = nodes;
  spec.cluster_options.sets = cluster_sets;
  spec.plan = plan;
  if (!plan_text.empty()) spec.plan_text = plan_text;
  spec.plan_sets = plan_sets;
  for (const std::string& p : perturbations) {
    spec.perturbations.merge(hetsim::workload::parse_perturbation(p));
  }
  py::gil_scoped_release release;
  const hetsim::study::RunInputs inputs(spec);
  const hetsim::calibrate::CostModels costs(efficiency, calibration);
  hetsim::study::RunOptions options;
  options.exact = exact;
  options.free_communication = free_communication;
  // The Chrome trace, with simulate --trace's default selection of devices and micro-batches.
  std::unique_ptr<hetsim::report::ChromeTrace> chrome;
  if (!trace.empty()) {
    chrome = std::make_unique<hetsim::report::ChromeTrace>(hetsim::report::make_trace_filter(
        inputs.cluster, "", "", hetsim::report::most_micro_batches(inputs.plan)));
    options.observer = chrome.get();
  }
  hetsim::study::RunOutput out = hetsim::study::run(inputs, costs.get(), options);
  out.report.warnings = costs.warnings();
  if (tokens > 0) hetsim::report::add_run_cost(out.report, tokens);
  if (chrome) {
    std::ofstream file(trace, std::ios::binary);
    if (!file) throw hetsim::InputError("trace " + trace + ": cannot write the file");
    chrome->write(file, out.job);
    if (!file) throw hetsim::RunError("trace " + trace + ": write failed");
  }
  return hetsim::report::to_json(out.report).dump(2);
}

hetsim::config::ClusterOptions cluster_options(long nodes, const std::vector<std::string>& sets) {
  hetsim::config::ClusterOptions options;
  if (nodes > 0) options.nodes = nodes;
  options.sets = sets;
  return options;
}

// A model or a cluster from its name (or file), or from the text a dict became.
hetsim::workload::ModelConfig load_model(const std::string& name, const std::string& text) {
  return text.empty() ? hetsim::workload::load_model(name)
                      : hetsim::workload::load_model_yaml_text(text, name);
}
hetsim::config::ClusterConfig load_cluster(const std::string& name, const std::string& text,
                                           long nodes, const std::vector<std::string>& sets) {
  return text.empty() ? hetsim::config::load_cluster(name, cluster_options(nodes, sets))
                      : hetsim::config::load_cluster_text(text, name, cluster_options(nodes, sets));
}

// A plan search, as `hetsim plan --json` reports it (a JSON text).
std::string plan_json(const std::string& model, const std::string& model_text,
                      const std::string& cluster, const std::string& cluster_text, long nodes,
                      const std::vector<std::string>& cluster_sets, int64_t global_batch,
                      int64_t sequence, const std::string& policies, const std::string& framework,
                      const std::vector<std::string>& plan_sets, int top, bool search,
                      const std::string& calibration, const std::string& efficiency) {
  py::gil_scoped_release release;
  const std::vector<const hetsim::policy::Policy*> chosen =
      hetsim::policy::select_policies(policies);
  const hetsim::workload::ModelConfig m = load_model(model, model_text);
  const hetsim::platform::Cluster c(load_cluster(cluster, cluster_text, nodes, cluster_sets));
  if (!framework.empty()) hetsim::workload::load_framework(framework);  // fails early if bad
  const hetsim::calibrate::CostModels costs(efficiency, calibration);
  hetsim::policy::Request req;
  req.model = &m;
  req.cluster = &c;
  req.global_batch = global_batch;
  req.sequence = sequence > 0 ? sequence : m.sequence;
  req.framework = framework;
  req.plan_sets = plan_sets;
  hetsim::policy::check_plan_sets(req.plan_sets);
  hetsim::policy::SearchOptions sopt;
  sopt.keep = static_cast<size_t>(top);
  sopt.explore = search;
  const hetsim::policy::Search s = hetsim::policy::search(req, chosen, costs.get(), sopt);
  return hetsim::policy::to_json(s, req).dump(2);
}

// One collective, as `hetsim collective --json` reports it (a JSON text).
std::string collective_json(const std::string& cluster, const std::string& cluster_text, long nodes,
                            const std::vector<std::string>& cluster_sets, const std::string& op,
                            const std::string& bytes, const std::vector<uint32_t>& ranks,
                            const std::string& algorithm, const std::string& protocol) {
  using hetsim::InputError;
  namespace network = hetsim::network;
  network::CollectiveRequest req;
  const auto o = network::parse_op(op);
  if (!o) {
    throw InputError("op: unknown collective \"" + op +
                     "\" (expected allreduce, allgather, reducescatter, alltoall, broadcast or "
                     "sendrecv)");
  }
  req.op = *o;
  try {
    req.bytes = std::round(hetsim::config::parse_quantity(bytes, hetsim::config::Dimension::bytes));
  } catch (const InputError& e) {
    throw InputError(std::string("bytes: ") + e.what());
  }
  if (algorithm != "auto") {
    req.algorithm = network::parse_algorithm(algorithm);
    if (!req.algorithm) {
      throw InputError("algorithm: unknown algorithm \"" + algorithm +
                       "\" (expected auto, ring, tree, hierarchical or direct)");
    }
  }
  if (protocol != "auto") {
    req.protocol = network::parse_protocol(protocol);
    if (!req.protocol) {
      throw InputError("protocol: unknown protocol \"" + protocol +
                       "\" (expected auto, LL, LL128 or Simple)");
    }
  }
  py::gil_scoped_release release;
  const hetsim::platform::Cluster c(load_cluster(cluster, cluster_text, nodes, cluster_sets));
  std::vector<bool> seen(c.gpu_count(), false);
  for (uint32_t r : ranks) {
    if (r < c.gpu_count() && seen[r]) {
      throw InputError("ranks: GPU " + std::to_string(r) + " is listed twice");
    }
    if (r < c.gpu_count()) seen[r] = true;
    if (r >= c.gpu_count()) {
      throw InputError("ranks: GPU " + std::to_string(r) + " does not exist (the cluster has " +
                       std::to_string(c.gpu_count()) + " GPUs)");
    }
  }
  if (ranks.empty()) {
    for (hetsim::platform::GpuId g = 0; g < c.gpu_count(); ++g) req.ranks.push_back(g);
  } else {
    req.ranks = ranks;
  }
  const network::CollectiveResult result = network::simulate_collective(c, req);
  return hetsim::report::to_json(hetsim::report::make_collective_report(c, req, result)).dump(2);
}

// A plan as a framework's launch, as `hetsim export --json` writes it (a JSON text); with
// unsupported parts and not `force`, an InputError that lists them.
std::string export_json(const std::string& model, const std::string& model_text,
                        const std::string& cluster, const std::string& cluster_text, long nodes,
                        const std::vector<std::string>& cluster_sets, const std::string& plan,
                        const std::string& plan_text, const std::vector<std::string>& plan_sets,
                        const std::string& framework, bool force) {
  py::gil_scoped_release release;
  const hetsim::launch::Launcher& launcher = hetsim::launch::find_launcher(framework);
  const hetsim::workload::ModelConfig m = load_model(model, model_text);
  const hetsim::platform::Cluster c(load_cluster(cluster, cluster_text, nodes, cluster_sets));
  hetsim::workload::PlanOptions popt;
  popt.sets = plan_sets;
  const hetsim::workload::Plan p =
      plan_text.empty() ? hetsim::workload::load_plan(plan, m, c, popt)
                        : hetsim::workload::load_plan_text(plan_text, plan, m, c, popt);
  const hetsim::launch::Launch l = launcher.make({&m, &p, &c});
  if (!l.unsupported.empty() && !force) {
    std::string msg = plan + ": " + launcher.name() + " cannot express this plan:";
    for (const std::string& u : l.unsupported) msg += "\n  " + u;
    msg += "\nforce=True exports the " + l.approximation;
    throw hetsim::InputError(msg);
  }
  return hetsim::launch::to_json(l).dump(2);
}

// A study (hetsim sweep's file), every run stored in `store` as it finishes (runs the store
// already has are not run again), as `hetsim sweep --json` reports it (a JSON text).
std::string sweep_json(const std::string& study_file, const std::string& store_path,
                       unsigned jobs) {
  py::gil_scoped_release release;
  const hetsim::study::Study s = hetsim::study::load_study(study_file);
  { const hetsim::calibrate::CostModels costs(s.efficiency, s.calibration); }  // fails early
  hetsim::study::Store store(store_path);
  hetsim::study::RunnerOptions options;
  options.jobs = jobs;
  hetsim::study::run_study(s, store, options);
  return hetsim::study::to_json(s, store_path, hetsim::study::study_records(s, store)).dump(2);
}

}  // namespace

PYBIND11_MODULE(_hetsim, m) {
  m.doc() = "hetsim's native part: use the hetsim package (import hetsim)";
  py::register_exception<hetsim::InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<hetsim::RunError>(m, "RunError", PyExc_RuntimeError);
  m.def("simulate_json", &simulate_json, py::arg("model"), py::arg("model_text"),
        py::arg("cluster"), py::arg("cluster_text"), py::arg("nodes"), py::arg("cluster_sets"),
        py::arg("plan"), py::arg("plan_text"), py::arg("plan_sets"), py::arg("perturbations"),
        py::arg("calibration"), py::arg("efficiency"), py::arg("exact"),
        py::arg("free_communication"), py::arg("tokens"), py::arg("trace"));
  m.def("plan_json", &plan_json, py::arg("model"), py::arg("model_text"), py::arg("cluster"),
        py::arg("cluster_text"), py::arg("nodes"), py::arg("cluster_sets"), py::arg("global_batch"),
        py::arg("sequence"), py::arg("policies"), py::arg("framework"), py::arg("plan_sets"),
        py::arg("top"), py::arg("search"), py::arg("calibration"), py::arg("efficiency"));
  m.def("collective_json", &collective_json, py::arg("cluster"), py::arg("cluster_text"),
        py::arg("nodes"), py::arg("cluster_sets"), py::arg("op"), py::arg("bytes"),
        py::arg("ranks"), py::arg("algorithm"), py::arg("protocol"));
  m.def("export_json", &export_json, py::arg("model"), py::arg("model_text"), py::arg("cluster"),
        py::arg("cluster_text"), py::arg("nodes"), py::arg("cluster_sets"), py::arg("plan"),
        py::arg("plan_text"), py::arg("plan_sets"), py::arg("framework"), py::arg("force"));
  m.def("sweep_json", &sweep_json, py::arg("study"), py::arg("store"), py::arg("jobs"));
  m.attr("__version__") = HETSIM_VERSION;
}
