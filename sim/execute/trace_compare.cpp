// A profiler trace's iterations against the replay; see trace_compare.h.
#include "sim/execute/trace_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "calibrate/measured_cost_model.h"
#include "sim/core/error.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::execute {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double rel(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0;
}

// The row of `key` in `rows`, added where missing (rows keep their first order).
TraceComparison::Row& row(std::vector<TraceComparison::Row>& rows,
                          std::map<std::string, size_t>& index, const std::string& key) {
  const auto [it, fresh] = index.emplace(key, rows.size());
  if (fresh) rows.push_back(TraceComparison::Row{key, 0, 0, 0, 0, {}, {}});
  return rows[it->second];
}

// A name, once (op names differ by layer only in the layers' own programs).
void add_name(std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

std::string names(const std::vector<std::string>& v, size_t most) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < most; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > most) s += fmt::format(", +{}", v.size() - most);
  return s;
}

// A GEMM and its transpose (C^T = B^T A^T: m and n swapped) are one kernel's work; frameworks
// differ in which they call (hetsim's weight gradient is x^T dY, PyTorch's dY^T x). Rows match
// them with m <= n.
template <typename G>
G canonical(G g) {
  if (g.m > g.n) std::swap(g.m, g.n);
  return g;
}
workload::Op canonical(const workload::Op& op) {
  if (op.kind != workload::OpKind::gemm) return op;
  workload::Op o = op;
  if (o.m > o.n) std::swap(o.m, o.n);
  return o;
}

}  // namespace

TraceComparison compare_trace(const workload::TrainingJob& job,
                              const workload::ReplayResult& predicted,
                              const calibrate::TraceImport& measured, platform::GpuId device) {
  if (measured.steps.empty()) {
    throw InputError(
        "the trace recorded no iteration (no ProfilerStep#N range: record it with "
        "torch.profiler's schedule and call prof.step() after each iteration)");
  }
  const workload::StageCopy* group = nullptr;
  uint32_t gi = 0;
  for (uint32_t g = 0; g < job.copies.size() && !group; ++g) {
    for (platform::GpuId d : job.copies[g].devices)
      if (d == device) group = &job.copies[g], gi = g;
  }
  if (!group) throw InputError(fmt::format("--device {}: not a device of the plan", device));
  TraceComparison c;
  c.device = fmt::format("gpu{} (replica {}, stage {})", device, group->replica, group->stage);
  c.predicted_s = predicted.iteration.seconds();
  c.measured_median_s = median(measured.iteration_s);
  c.measured_min_s = *std::min_element(measured.iteration_s.begin(), measured.iteration_s.end());
  c.measured_max_s = *std::max_element(measured.iteration_s.begin(), measured.iteration_s.end());
  c.error = rel(c.predicted_s, c.measured_median_s);
  c.iterations = measured.steps.size();

  // Kinds of time.
  const workload::CopyTimes& pt = predicted.copies[gi];
  const double waits = (pt.tp_wait + pt.pp_wait + pt.dp_wait + pt.ep_wait + pt.cp_wait).seconds();
  std::vector<double> mc, mm, mi;
  for (const calibrate::StepTimes& s : measured.steps) {
    mc.push_back(s.compute);
    mm.push_back(s.communication);
    mi.push_back(s.idle);
  }
  c.kinds = {
      {"compute", 0, 0, pt.compute.seconds(), median(mc), {}, {}},
      {"exposed communication", 0, 0, waits, median(mm), {}, {}},
      {"idle (host, bubble, skew)",
       0,
       0,
       std::max(0.0, c.predicted_s - pt.compute.seconds() - waits),
       median(mi),
       {},
       {}},
  };

  // Tables and kernels: the replayed device's compute tasks against the trace's operators.
  std::map<std::string, size_t> ti, ki;
  const workload::Precision p = job.plan->precision;
  for (const workload::Task& t : group->program) {
    if (t.kind != workload::TaskKind::compute) continue;
    for (const auto& [op, d] : group->segments[t.index].ops) {
      const auto [table, label] = calibrate::measurement_key(canonical(group->ops[op]), p);
      TraceComparison::Row& a = row(c.tables, ti, table);
      TraceComparison::Row& b = row(c.kernels, ki, table + " " + label);
      a.predicted_calls += 1, a.predicted_s += d.seconds();
      b.predicted_calls += 1, b.predicted_s += d.seconds();
      add_name(b.predicted_names, group->ops[op].name);
    }
  }
  const double n = static_cast<double>(measured.steps.size());
  for (const calibrate::TraceOp& op : measured.ops) {
    if (op.step < 0) continue;
    TraceComparison::Row& a = row(c.tables, ti, op.table);
    const std::string label =
        op.table.rfind("gemm/", 0) == 0 ? calibrate::point_label(canonical(op.gemm)) : op.label;
    TraceComparison::Row& b = row(c.kernels, ki, op.table + " " + label);
    a.measured_calls += 1 / n, a.measured_s += op.seconds / n;
    b.measured_calls += 1 / n, b.measured_s += op.seconds / n;
    add_name(b.measured_names, op.name);
  }
  TraceComparison::Row& u = row(c.tables, ti, "unmapped");
  for (const calibrate::UnmappedOp& x : measured.unmapped) {
    // The host's time between operators is idle above, not an operator.
    if (x.name.rfind("ProfilerStep", 0) == 0) continue;
    u.measured_calls += static_cast<double>(x.calls) / n;
    u.measured_s += x.seconds / n;
  }
  std::stable_sort(c.tables.begin(), c.tables.end(), [](const auto& a, const auto& b) {
    return std::max(a.measured_s, a.predicted_s) > std::max(b.measured_s, b.predicted_s);
  });
  std::stable_sort(c.kernels.begin(), c.kernels.end(), [](const auto& a, const auto& b) {
    return std::max(a.measured_s, a.predicted_s) > std::max(b.measured_s, b.predicted_s);
  });
  return c;
}

std::string to_text(const TraceComparison& c, size_t top) {
  std::string s;
  s += fmt::format(
      "  iteration       predicted {:.4f} s   measured {:.4f} s (median of {}; min {:.4f}, max "
      "{:.4f})   error {:+.1f}%\n",
      c.predicted_s, c.measured_median_s, c.iterations, c.measured_min_s, c.measured_max_s,
      100 * c.error);
  auto err = [](double p, double m) {
    return m > 0 ? fmt::format("{:+7.1f}%", 100 * rel(p, m)) : std::string("");
  };
  s += fmt::format("  per iteration on {}         predicted    measured    error\n", c.device);
  for (const auto& r : c.kinds) {
    s += fmt::format("    {:<36} {:9.5f} s {:9.5f} s  {}\n", r.what, r.predicted_s, r.measured_s,
                     err(r.predicted_s, r.measured_s));
  }
  s += "  kernels by table, per iteration     calls: predicted measured   predicted    measured"
       "    error\n";
  for (const auto& r : c.tables) {
    s += fmt::format("    {:<36} {:9.1f} {:9.1f}  {:9.5f} s {:9.5f} s  {}\n", r.what,
                     r.predicted_calls, r.measured_calls, r.predicted_s, r.measured_s,
                     err(r.predicted_s, r.measured_s));
  }
  s += fmt::format("  kernels by shape, per iteration (the {} longest of {})\n",
                   std::min(top, c.kernels.size()), c.kernels.size());
  for (size_t i = 0; i < c.kernels.size() && i < top; ++i) {
    const auto& r = c.kernels[i];
    s += fmt::format("    {:<60} {:5.1f} {:5.1f}  {:9.5f} s {:9.5f} s  {}\n", r.what,
                     r.predicted_calls, r.measured_calls, r.predicted_s, r.measured_s,
                     err(r.predicted_s, r.measured_s));
    if (!r.predicted_names.empty()) s += "      hetsim: " + names(r.predicted_names, 4) + "\n";
    if (!r.measured_names.empty()) s += "      trace:  " + names(r.measured_names, 4) + "\n";
  }
  return s;
}

std::string side_by_side(const std::string& replayed, const calibrate::KinetoTrace& trace,
                         const calibrate::TraceImport& measured) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(replayed);
  nlohmann::ordered_json& events = j["traceEvents"];
  if (trace.steps.empty()) return j.dump();
  // The iteration of median length.
  std::vector<size_t> order(measured.iteration_s.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return measured.iteration_s[a] < measured.iteration_s[b];
  });
  const int step = static_cast<int>(order[order.size() / 2]);
  const double t0 = trace.events[trace.steps[static_cast<size_t>(step)]].ts;
  constexpr int kPid = 1 << 30;  // beside the replay's processes (one per node)
  events.push_back(
      {{"ph", "M"},
       {"name", "process_name"},
       {"pid", kPid},
       {"args",
        {{"name", fmt::format("measured: {}, {} (the median of {} iterations)", trace.path,
                              trace.events[trace.steps[static_cast<size_t>(step)]].name,
                              measured.iteration_s.size())}}}});
  std::map<std::string, int> tids;
  for (uint32_t i = 0; i < trace.events.size(); ++i) {
    const calibrate::TraceEvent& e = trace.events[i];
    const bool gpu =
        e.cat == calibrate::TraceCategory::kernel || e.cat == calibrate::TraceCategory::gpu_other;
    if (!gpu && e.cat != calibrate::TraceCategory::cpu_op &&
        e.cat != calibrate::TraceCategory::annotation)
      continue;
    if (calibrate::step_of(trace, i) != step) continue;
    const std::string thread = (gpu ? "gpu " : "host ") + e.tid;
    const auto [it, fresh] = tids.emplace(thread, static_cast<int>(tids.size()));
    if (fresh) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", kPid},
                        {"tid", it->second},
                        {"args", {{"name", thread}}}});
    }
    events.push_back({{"ph", "X"},
                      {"name", e.name},
                      {"pid", kPid},
                      {"tid", it->second},
                      {"ts", e.ts - t0},
                      {"dur", e.dur}});
  }
  return j.dump();
}

std::string to_json(const TraceComparison& c) {
  nlohmann::ordered_json j;
  j["device"] = c.device;
  j["predicted_iteration_s"] = c.predicted_s;
  j["measured_median_s"] = c.measured_median_s;
  j["measured_min_s"] = c.measured_min_s;
  j["measured_max_s"] = c.measured_max_s;
  j["iterations"] = c.iterations;
  j["error"] = c.error;
  auto rows = [](const std::vector<TraceComparison::Row>& v, bool calls) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& r : v) {
      nlohmann::ordered_json x = {{"what", r.what}};
      if (calls) {
        x["predicted_calls"] = r.predicted_calls;
        x["measured_calls"] = r.measured_calls;
      }
      x["predicted_s"] = r.predicted_s;
      x["measured_s"] = r.measured_s;
      x["error"] = rel(r.predicted_s, r.measured_s);
      if (calls) {
        x["predicted_names"] = r.predicted_names;
        x["measured_names"] = r.measured_names;
      }
      a.push_back(x);
    }
    return a;
  };
  j["kinds"] = rows(c.kinds, false);
  j["tables"] = rows(c.tables, true);
  j["kernels"] = rows(c.kernels, true);
  return j.dump(2);
}

}  // namespace hetsim::execute
