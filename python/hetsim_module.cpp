// The Python module's native part (import hetsim; see python/hetsim/__init__.py): the library run
// API (sim/study/run.h) as `simulate`, the report as the JSON `hetsim simulate --json` prints.
// Input errors become ValueError, run failures RuntimeError; the GIL is released while the
// engine runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "calibrate/cost_models.h"
#include "sim/core/error.h"
#include "sim/report/training_report.h"
#include "sim/study/run.h"
#include "sim/workload/perturbation.h"

namespace py = pybind11;

namespace {

// One replayed iteration, as `hetsim simulate --json` reports it (a JSON text).
std::string simulate_json(const std::string& model, const std::string& cluster, long nodes,
                          const std::vector<std::string>& cluster_sets, const std::string& plan,
                          const std::string& plan_text, const std::vector<std::string>& plan_sets,
                          const std::vector<std::string>& perturbations,
                          const std::string& calibration, const std::string& efficiency, bool exact,
                          bool free_communication, double tokens) {
  hetsim::study::RunSpec spec;
  spec.model = model;
  spec.cluster = cluster;
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
  hetsim::study::RunOutput out = hetsim::study::run(inputs, costs.get(), options);
  out.report.warnings = costs.warnings();
  if (tokens > 0) hetsim::report::add_run_cost(out.report, tokens);
  return hetsim::report::to_json(out.report).dump(2);
}

}  // namespace

PYBIND11_MODULE(_hetsim, m) {
  m.doc() = "hetsim's native part: use the hetsim package (import hetsim)";
  py::register_exception<hetsim::InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<hetsim::RunError>(m, "RunError", PyExc_RuntimeError);
  m.def("simulate_json", &simulate_json, py::arg("model"), py::arg("cluster"), py::arg("nodes"),
        py::arg("cluster_sets"), py::arg("plan"), py::arg("plan_text"), py::arg("plan_sets"),
        py::arg("perturbations"), py::arg("calibration"), py::arg("efficiency"), py::arg("exact"),
        py::arg("free_communication"), py::arg("tokens"));
  m.attr("__version__") = HETSIM_VERSION;
}
