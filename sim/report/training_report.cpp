// Training iteration report; see training_report.h.
#include "sim/report/training_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sim/config/units.h"
#include "sim/workload/cost_model.h"

namespace hetsim::report {

TrainingReport make_training_report(const workload::TrainingJob& job,
                                    const workload::ReplayResult& result,
                                    const std::vector<workload::DeviceMemory>& memory) {
  const workload::Plan& p = *job.plan;
  const platform::Cluster& c = *job.cluster;
  TrainingReport r;
  r.model = job.model->name;
  r.cluster = c.config().name;
  r.plan = p.source;
  r.iteration_time_s = result.iteration.seconds();
  const double samples = static_cast<double>(p.global_batch_size);
  r.samples_per_s = samples / r.iteration_time_s;
  r.tokens_per_s = samples * p.sequence_length / r.iteration_time_s;
  double peak = 0, price = 0;
  bool priced = true;
  double devices = 0;
  for (size_t i = 0; i < job.groups.size(); ++i) {
    const workload::Group& g = job.groups[i];
    const workload::GroupTimes& t = result.groups[i];
    const double n = static_cast<double>(g.devices.size());
    devices += n;
    r.model_flops += g.model_flops * n;
    peak += workload::peak_flops(*g.gpu, p.precision) * n;
    if (g.gpu->price_per_hour) {
      price += *g.gpu->price_per_hour * n;
    } else {
      priced = false;
    }
    r.compute_s += t.compute.seconds() * n;
    r.tp_exposed_s += t.tp_wait.seconds() * n;
    r.dp_exposed_s += t.dp_wait.seconds() * n;
    r.bubble_s += (t.pp_wait + (result.iteration - t.finish)).seconds() * n;
    for (platform::GpuId d : g.devices) {
      DeviceReport dr;
      dr.id = c.gpu_name(d);
      dr.index = d;
      dr.gpu = g.gpu->name;
      dr.replica = g.replica;
      dr.stage = g.stage;
      dr.busy_s = t.compute.seconds();
      dr.memory = memory[i];
      r.oom = r.oom || dr.memory.oom();
      r.devices.push_back(dr);
    }
  }
  std::sort(r.devices.begin(), r.devices.end(),
            [](const DeviceReport& a, const DeviceReport& b) { return a.index < b.index; });
  r.gpus = r.devices.size();
  r.compute_s /= devices;
  r.tp_exposed_s /= devices;
  r.dp_exposed_s /= devices;
  r.bubble_s /= devices;
  r.communication_exposed_s = r.tp_exposed_s + r.dp_exposed_s;
  r.mfu = r.model_flops / (r.iteration_time_s * peak);
  if (priced) r.cost_per_iteration_usd = price * r.iteration_time_s / 3600;
  r.cost_sources = job.op_sources;
  r.events = result.events;
  return r;
}

nlohmann::ordered_json to_json(const TrainingReport& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["cluster"] = r.cluster;
  j["plan"] = r.plan;
  j["gpus"] = r.gpus;
  j["iteration_time_s"] = r.iteration_time_s;
  j["throughput_tokens_per_s"] = r.tokens_per_s;
  j["throughput_samples_per_s"] = r.samples_per_s;
  j["mfu"] = r.mfu;
  j["model_flops"] = r.model_flops;
  j["oom"] = r.oom;
  j["breakdown_s"] = {{"compute", r.compute_s},
                      {"communication_exposed", r.communication_exposed_s},
                      {"bubble", r.bubble_s},
                      {"tensor_parallel_exposed", r.tp_exposed_s},
                      {"data_parallel_exposed", r.dp_exposed_s}};
  if (r.cost_per_iteration_usd >= 0) j["cost_per_iteration_usd"] = r.cost_per_iteration_usd;
  j["op_costs_from"] = r.cost_sources;
  auto& devs = j["devices"] = nlohmann::ordered_json::array();
  for (const DeviceReport& d : r.devices) {
    devs.push_back({{"id", d.id},
                    {"gpu", d.gpu},
                    {"replica", d.replica},
                    {"stage", d.stage},
                    {"busy_s", d.busy_s},
                    {"peak_memory_bytes", static_cast<int64_t>(d.memory.peak)},
                    {"capacity_bytes", static_cast<int64_t>(d.memory.capacity)},
                    {"memory_bytes",
                     {{"weights", static_cast<int64_t>(d.memory.weights)},
                      {"gradients", static_cast<int64_t>(d.memory.gradients)},
                      {"optimizer", static_cast<int64_t>(d.memory.optimizer)},
                      {"activations", static_cast<int64_t>(d.memory.activations)},
                      {"workspace", static_cast<int64_t>(d.memory.workspace)}}},
                    {"oom", d.memory.oom()}});
  }
  return j;
}

std::string to_text(const TrainingReport& r) {
  using config::format_bytes;
  using config::format_time;
  std::string s = fmt::format("{} on {} ({} GPUs), plan {}\n", r.model, r.cluster, r.gpus, r.plan);
  s += fmt::format("  iteration      {}\n", format_time(r.iteration_time_s));
  s += fmt::format("  throughput     {:.0f} tokens/s, {:.2f} samples/s\n", r.tokens_per_s,
                   r.samples_per_s);
  s += fmt::format("  MFU            {:.1f}%\n", 100 * r.mfu);
  if (r.cost_per_iteration_usd >= 0) {
    s += fmt::format("  cost           ${:.4f} per iteration (on-demand prices)\n",
                     r.cost_per_iteration_usd);
  }
  const double it = r.iteration_time_s;
  s += fmt::format(
      "  time split     compute {} ({:.0f}%), exposed communication {} ({:.0f}%: tensor {}, data "
      "{}), pipeline bubble {} ({:.0f}%)   (mean over devices)\n",
      format_time(r.compute_s), 100 * r.compute_s / it, format_time(r.communication_exposed_s),
      100 * r.communication_exposed_s / it, format_time(r.tp_exposed_s),
      format_time(r.dp_exposed_s), format_time(r.bubble_s), 100 * r.bubble_s / it);
  s += "  op costs from  ";
  for (size_t i = 0; i < r.cost_sources.size(); ++i) s += (i ? "; " : "") + r.cost_sources[i];
  s += "\n";
  // Per device; the GPUs of one node and one (replica, stage) share every figure, so they share a
  // row: node0.gpu0-7.
  s += fmt::format("  {:<18} {:<16} {:>5} {:>5} {:>10} {:>12} {:>12}\n", "devices", "gpu", "repl",
                   "stage", "busy", "peak memory", "capacity");
  size_t rows = 0;
  for (size_t i = 0; i < r.devices.size();) {
    const DeviceReport& d = r.devices[i];
    const std::string node = d.id.substr(0, d.id.find('.'));
    size_t j = i + 1;
    while (j < r.devices.size() && r.devices[j].id.substr(0, r.devices[j].id.find('.')) == node &&
           r.devices[j].replica == d.replica && r.devices[j].stage == d.stage &&
           r.devices[j].busy_s == d.busy_s && r.devices[j].memory.peak == d.memory.peak) {
      ++j;
    }
    std::string id = d.id;
    if (j - i > 1) id += "-" + r.devices[j - 1].id.substr(r.devices[j - 1].id.rfind("gpu") + 3);
    if (rows++ < 64 || d.memory.oom()) {
      s += fmt::format("  {:<18} {:<16} {:>5} {:>5} {:>10} {:>12} {:>12}{}\n", id, d.gpu, d.replica,
                       d.stage, format_time(d.busy_s), format_bytes(d.memory.peak),
                       format_bytes(d.memory.capacity), d.memory.oom() ? "  OOM" : "");
    }
    i = j;
  }
  if (rows > 64) s += fmt::format("  ... {} rows in all (--json lists every device)\n", rows);
  if (r.oom) {
    s += "  OUT OF MEMORY:\n";
    size_t listed = 0;
    for (const DeviceReport& d : r.devices) {
      if (!d.memory.oom()) continue;
      if (listed++ < 16) {
        s += fmt::format("    {} needs {} of {} ({} over)\n", d.id, format_bytes(d.memory.peak),
                         format_bytes(d.memory.capacity),
                         format_bytes(d.memory.peak - d.memory.capacity));
      }
    }
    if (listed > 16) s += fmt::format("    ... {} devices over capacity in all\n", listed);
  }
  return s;
}

}  // namespace hetsim::report
