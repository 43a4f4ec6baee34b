// Predicted against measured, for `hetsim execute`; see executor.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "sim/execute/executor.h"

namespace hetsim::execute {

namespace {

double rel(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0;
}

}  // namespace

workload::Segment& own_segment(workload::StageCopy& g, workload::Task& t) {
  std::vector<workload::Segment>& segments = g.segments.write();
  segments.push_back(workload::Segment(segments[t.index]));
  t.index = static_cast<uint32_t>(segments.size() - 1);
  return segments.back();
}

workload::TrainingJob with_measured_compute(const workload::TrainingJob& job, const Measured& m) {
  workload::TrainingJob out = job;
  for (workload::StageCopy& g : out.copies) {
    const std::vector<double>* measured = nullptr;
    for (platform::GpuId d : g.devices)
      if (d < m.task_s.size() && m.task_s[d].size() == g.program.size()) measured = &m.task_s[d];
    if (!measured) continue;
    std::vector<workload::Task>& program = g.program.write();
    for (size_t pc = 0; pc < program.size(); ++pc) {
      workload::Task& t = program[pc];
      if (t.kind != workload::TaskKind::compute || g.segments[t.index].ops.empty()) continue;
      workload::Segment& s = own_segment(g, t);
      const Time d = Time::from_seconds((*measured)[pc]);
      const double scale = s.duration > Time() ? d.seconds() / s.duration.seconds() : 0;
      for (auto& op : s.ops) op.second = Time::from_seconds(op.second.seconds() * scale);
      s.duration = d;
    }
  }
  return out;
}

Comparison compare(const workload::TrainingJob& job, const workload::ReplayResult& predicted,
                   const Measured& m, const workload::ReplayResult* replayed) {
  Comparison c;
  if (replayed) {
    c.replayed = true;
    c.replayed_s = replayed->iteration.seconds();
  }
  c.predicted_s = predicted.iteration.seconds();
  const std::vector<double>& it = m.iteration_s;
  if (!it.empty()) {
    double sum = 0;
    for (double x : it) sum += x;
    c.measured_mean_s = sum / static_cast<double>(it.size());
    c.measured_min_s = *std::min_element(it.begin(), it.end());
    c.measured_max_s = *std::max_element(it.begin(), it.end());
    double var = 0;
    for (double x : it) var += (x - c.measured_mean_s) * (x - c.measured_mean_s);
    c.measured_stdev_s = it.size() > 1 ? std::sqrt(var / static_cast<double>(it.size() - 1)) : 0;
    std::vector<double> sorted = it;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    c.measured_median_s = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }
  c.error = rel(c.predicted_s, c.measured_median_s);
  c.replayed_error = rel(c.replayed_s, c.measured_median_s);
  // Per kind, the mean over the plan's devices; per device, when it finished.
  constexpr int kKinds = 6;
  double p[kKinds] = {}, q[kKinds] = {};
  size_t devices = 0;
  for (uint32_t g = 0; g < job.copies.size(); ++g) {
    const workload::CopyTimes& pt = predicted.copies[g];
    for (platform::GpuId d : job.copies[g].devices) {
      const DeviceTimes& mt = m.devices.at(d);
      const double pv[kKinds] = {pt.compute.seconds(), pt.tp_wait.seconds(), pt.pp_wait.seconds(),
                                 pt.dp_wait.seconds(), pt.ep_wait.seconds(), pt.cp_wait.seconds()};
      const double mv[kKinds] = {mt.compute, mt.tp, mt.pp, mt.dp, mt.ep, mt.cp};
      for (int k = 0; k < kKinds; ++k) p[k] += pv[k], q[k] += mv[k];
      ++devices;
      c.devices.push_back(Comparison::Row{fmt::format("gpu{} (replica {}, stage {})", d,
                                                      job.copies[g].replica, job.copies[g].stage),
                                          pt.finish.seconds(), mt.finish});
    }
  }
  std::sort(c.devices.begin(), c.devices.end(), [](const auto& a, const auto& b) {
    return std::stoi(a.what.substr(3)) < std::stoi(b.what.substr(3));
  });
  const char* kinds[kKinds] = {"compute",
                               "tensor-parallel wait",
                               "pipeline wait",
                               "data-parallel wait",
                               "expert-parallel wait",
                               "context-parallel wait"};
  for (int k = 0; k < kKinds; ++k) {
    const double n = std::max<size_t>(1, devices);
    c.kinds.push_back(Comparison::Row{kinds[k], p[k] / n, q[k] / n});
  }
  c.kernels = m.kernels;
  return c;
}

std::string to_text(const Comparison& c, const Measured& m) {
  std::string s;
  s += fmt::format(
      "  iteration       predicted {:.4f} s   measured {:.4f} s (median of {}; mean {:.4f}, min "
      "{:.4f}, max {:.4f}, sd {:.4f})   error {:+.1f}%\n",
      c.predicted_s, c.measured_median_s, m.iteration_s.size(), c.measured_mean_s, c.measured_min_s,
      c.measured_max_s, c.measured_stdev_s, 100 * c.error);
  if (c.replayed) {
    s += fmt::format(
        "  replayed with the measured compute  {:.4f} s   error {:+.1f}% (the schedule's and the "
        "communication's share of the error)\n",
        c.replayed_s, 100 * c.replayed_error);
  }
  s += fmt::format("  per device, mean of {} devices    predicted    measured    error\n",
                   c.devices.size());
  auto row = [&](const Comparison::Row& r) {
    const std::string err = r.measured_s > 0 && (r.predicted_s > 0 || r.measured_s > 1e-4)
                                ? fmt::format("{:+6.1f}%", 100 * rel(r.predicted_s, r.measured_s))
                                : "";
    s += fmt::format("    {:<32} {:9.4f} s {:9.4f} s   {}\n", r.what, r.predicted_s, r.measured_s,
                     err);
  };
  for (const auto& r : c.kinds) row(r);
  s += "  when each device finished\n";
  for (const auto& r : c.devices) row(r);
  s += "  kernels, per iteration over every device   calls    predicted    measured    error\n";
  for (const KernelTimes& k : c.kernels) {
    s += fmt::format("    {:<36} {:6}  {:9.5f} s {:9.5f} s   {:+6.1f}%\n", k.name, k.calls,
                     k.predicted_s, k.measured_s, 100 * rel(k.predicted_s, k.measured_s));
  }
  return s;
}

std::string to_json(const Comparison& c, const Measured& m) {
  nlohmann::ordered_json j;
  j["backend"] = m.backend;
  j["ranks"] = m.ranks;
  j["predicted_iteration_s"] = c.predicted_s;
  j["measured_iteration_s"] = m.iteration_s;
  j["measured_median_s"] = c.measured_median_s;
  j["measured_mean_s"] = c.measured_mean_s;
  j["measured_min_s"] = c.measured_min_s;
  j["measured_max_s"] = c.measured_max_s;
  j["measured_stdev_s"] = c.measured_stdev_s;
  j["error"] = c.error;
  if (c.replayed) {
    j["replayed_iteration_s"] = c.replayed_s;
    j["replayed_error"] = c.replayed_error;
  }
  auto rows = [](const std::vector<Comparison::Row>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& r : v) {
      a.push_back({{"what", r.what},
                   {"predicted_s", r.predicted_s},
                   {"measured_s", r.measured_s},
                   {"error", rel(r.predicted_s, r.measured_s)}});
    }
    return a;
  };
  j["kinds"] = rows(c.kinds);
  j["devices"] = rows(c.devices);
  nlohmann::ordered_json k = nlohmann::ordered_json::array();
  for (const KernelTimes& x : c.kernels) {
    k.push_back({{"name", x.name},
                 {"calls", x.calls},
                 {"predicted_s", x.predicted_s},
                 {"measured_s", x.measured_s},
                 {"error", rel(x.predicted_s, x.measured_s)}});
  }
  j["kernels"] = k;
  return j.dump(2);
}

}  // namespace hetsim::execute
