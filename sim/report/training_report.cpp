// Training iteration report; see training_report.h.
#include "sim/report/training_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "sim/config/units.h"
#include "sim/config/yaml_util.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/model/cnn.h"

namespace hetsim::report {

namespace {

// What one rank sends in one collective of kind k of `bytes` over p ranks.
double sent(workload::CommKind k, double bytes, double p) {
  using workload::CommKind;
  if (p <= 1) return 0.0;
  switch (k) {
    case CommKind::allreduce:
      return 2 * bytes * (p - 1) / p;
    case CommKind::allgather:
    case CommKind::reducescatter:
    case CommKind::alltoall:
      return bytes * (p - 1) / p;
    case CommKind::halo:
      // The mean over the ranks: p - 1 boundaries, `bytes` each way across each (the first
      // and the last rank have one neighbour).
      return 2 * bytes * (p - 1) / p;
    case CommKind::none:
      break;
  }
  return 0.0;
}

// What one rank of each stage copy sends in one iteration: over its own copy's (or expert-,
// context-parallel group's) ranks, and among the replicas. Copies whose programs and collectives
// are one in memory (alike replicas' stages) and whose data-parallel collectives send alike are
// summed once, in the same order: the replicas' copies are not read again.
class SentBytes {
 public:
  explicit SentBytes(const workload::TrainingJob& job) : job_(job) {}

  std::pair<double, double> operator()(uint32_t gi) {
    const workload::StageCopy& g = job_.copies[gi];
    std::vector<double> dp_sent(g.dp.size());
    for (size_t i = 0; i < g.dp.size(); ++i) {
      const workload::DpCollective& dc = g.dp[i];
      const workload::DpSync& sync = job_.dp_syncs[dc.sync];
      double p = static_cast<double>(sync.members.size());
      if (dc.grid) {
        p = 0;
        for (const auto& [m, k] : sync.members) p += job_.copies[m].devices.size();
      }
      dp_sent[i] = sent(dc.kind, dc.bytes, p);
    }
    if (g.program.id() == nullptr) return sum(g, dp_sent);
    Key key{g.program.id(), g.comms.id(), g.devices.size(), std::move(dp_sent)};
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      const auto value = sum(g, key.dp_sent);
      it = memo_.emplace(std::move(key), value).first;
    }
    return it->second;
  }

 private:
  struct Key {
    const void* program;
    const void* comms;
    size_t devices;
    std::vector<double> dp_sent;
    bool operator<(const Key& o) const {
      return std::tie(program, comms, devices, dp_sent) <
             std::tie(o.program, o.comms, o.devices, o.dp_sent);
    }
  };

  std::pair<double, double> sum(const workload::StageCopy& g,
                                const std::vector<double>& dp_sent) const {
    using workload::TaskKind;
    double group = 0, replicas = 0;
    for (const workload::Task& t : g.program) {
      if (t.kind == TaskKind::tp_comm || t.kind == TaskKind::ep_comm ||
          t.kind == TaskKind::cp_comm) {
        const workload::CommTemplate& ct = g.comms[t.index];
        const double p =
            ct.expert || ct.context ? job_.group_size(ct) : static_cast<double>(g.devices.size());
        group += sent(ct.kind, ct.bytes, p);
      } else if (t.kind == TaskKind::dp_comm) {
        replicas += dp_sent[t.index];
      }
    }
    return {group, replicas};
  }

  const workload::TrainingJob& job_;
  std::map<Key, std::pair<double, double>> memo_;
};

}  // namespace

TrainingReport make_training_report(const workload::TrainingJob& job,
                                    const workload::ReplayResult& result,
                                    const std::vector<workload::DeviceMemory>& memory) {
  const workload::Plan& p = *job.plan;
  const platform::Cluster& c = *job.cluster;
  TrainingReport r;
  r.model = job.model->name;
  r.parameters = job.model->params();
  r.cluster = c.config().name;
  r.plan = p.source;
  r.framework =
      p.framework.name + (p.framework.description.empty() ? "" : ": " + p.framework.description);
  r.precision = workload::to_string(p.precision);
  if (p.precision_defaulted) {
    r.precision += p.precision == workload::Precision::bf16
                       ? " (default: every GPU of the plan has bf16)"
                       : " (default: a GPU of the plan has no bf16)";
  }
  r.iteration_time_s = result.iteration.seconds();
  const double samples = static_cast<double>(p.global_batch_size);
  r.samples_per_s = samples / r.iteration_time_s;
  r.tokens_per_s = samples * p.sequence_length / r.iteration_time_s;
  double peak = 0, price = 0;
  std::set<std::string> unpriced;
  double devices = 0;
  for (size_t i = 0; i < job.copies.size(); ++i) {
    const workload::StageCopy& g = job.copies[i];
    const workload::CopyTimes& t = result.copies[i];
    const double n = static_cast<double>(g.devices.size());
    devices += n;
    r.model_flops += g.model_flops * n;
    peak += workload::peak_flops(*g.gpu, p.precision) * n;
    if (g.gpu->price_per_hour) {
      price += *g.gpu->price_per_hour * n;
    } else {
      unpriced.insert(g.gpu->name);
    }
    r.compute_s += t.compute.seconds() * n;
    r.tp_exposed_s += t.tp_wait.seconds() * n;
    r.dp_exposed_s += t.dp_wait.seconds() * n;
    r.ep_exposed_s += t.ep_wait.seconds() * n;
    r.cp_exposed_s += t.cp_wait.seconds() * n;
    r.bubble_s += (t.pp_wait + (result.iteration - t.finish)).seconds() * n;
    for (platform::GpuId d : g.devices) {
      DeviceReport dr;
      dr.id = c.gpu_name(d);
      dr.index = d;
      dr.gpu = g.gpu->name;
      dr.node = c.gpu(d).node;
      dr.local = c.gpu(d).local;
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
  r.ep_exposed_s /= devices;
  r.cp_exposed_s /= devices;
  SentBytes sent_bytes(job);
  for (size_t i = 0; i < job.copies.size(); ++i) {
    const auto [group, replicas] = sent_bytes(static_cast<uint32_t>(i));
    const double n = static_cast<double>(job.copies[i].devices.size());
    r.sent_group_bytes += group * n / devices;
    r.sent_replicas_bytes += replicas * n / devices;
  }
  if (job.model->convolutional()) {
    r.grid_rows = p.tensor_parallel;
    r.grid_columns = p.data_parallel;
    for (size_t l = 0; l < job.model->cnn.size(); ++l) {
      const workload::CnnLayer& layer = job.model->cnn[l];
      if (layer.kind == workload::CnnKind::pool) continue;
      r.layer_splits.emplace_back(layer.name, workload::to_string(p.layer_splits[l]));
    }
  }
  r.expert_parallel = p.expert_parallel;
  r.context_parallel = p.context_parallel;
  r.bubble_s /= devices;
  r.communication_exposed_s = r.tp_exposed_s + r.dp_exposed_s + r.ep_exposed_s + r.cp_exposed_s;
  r.mfu = r.model_flops / (r.iteration_time_s * peak);
  if (unpriced.empty()) {
    // Every GPU is paid for the whole iteration, busy or waiting.
    r.price_per_hour_usd = price;
    r.cost_per_iteration_usd = price * r.iteration_time_s / 3600;
    r.cost_per_million_tokens_usd = price / 3600 / r.tokens_per_s * 1e6;
  }
  r.unpriced_gpus.assign(unpriced.begin(), unpriced.end());
  r.cost_sources = job.op_sources;
  r.events = result.events;
  r.folded_replicas = result.folded_replicas;
  return r;
}

void add_run_cost(TrainingReport& r, double tokens) {
  r.run_tokens = tokens;
  r.run_time_s = tokens / r.tokens_per_s;
  if (r.price_per_hour_usd >= 0) r.cost_per_run_usd = r.price_per_hour_usd / 3600 * r.run_time_s;
}

nlohmann::ordered_json to_json(const TrainingReport& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["parameters"] = r.parameters;
  j["cluster"] = r.cluster;
  j["plan"] = r.plan;
  j["precision"] = r.precision;
  j["framework"] = r.framework;
  j["gpus"] = r.gpus;
  j["iteration_time_s"] = r.iteration_time_s;
  j["throughput_tokens_per_s"] = r.tokens_per_s;
  j["throughput_samples_per_s"] = r.samples_per_s;
  j["mfu"] = r.mfu;
  j["model_flops"] = r.model_flops;
  j["sent_bytes_per_device"] = {{"group", r.sent_group_bytes},
                                {"replicas", r.sent_replicas_bytes},
                                {"total", r.sent_group_bytes + r.sent_replicas_bytes}};
  if (r.grid_rows > 0) {
    nlohmann::ordered_json splits = nlohmann::ordered_json::object();
    for (const auto& [layer, split] : r.layer_splits) splits[layer] = split;
    j["grid"] = {{"rows", r.grid_rows}, {"columns", r.grid_columns}, {"splits", splits}};
  }
  j["oom"] = r.oom;
  j["breakdown_s"] = {{"compute", r.compute_s},
                      {"communication_exposed", r.communication_exposed_s},
                      {"bubble", r.bubble_s},
                      {"tensor_parallel_exposed", r.tp_exposed_s},
                      {"data_parallel_exposed", r.dp_exposed_s}};
  if (r.expert_parallel > 1) j["breakdown_s"]["expert_parallel_exposed"] = r.ep_exposed_s;
  if (r.context_parallel > 1) j["breakdown_s"]["context_parallel_exposed"] = r.cp_exposed_s;
  // Null, not absent, when a GPU type has no price: the reader learns which ones.
  if (r.cost_per_iteration_usd >= 0) {
    j["cost_per_iteration_usd"] = r.cost_per_iteration_usd;
    j["cost_per_million_tokens_usd"] = r.cost_per_million_tokens_usd;
  } else {
    j["cost_per_iteration_usd"] = nullptr;
    j["cost_per_million_tokens_usd"] = nullptr;
    j["gpus_without_price"] = r.unpriced_gpus;
  }
  if (r.run_tokens > 0) {
    j["training_run"] = {
        {"tokens", r.run_tokens},
        {"time_s", r.run_time_s},
        {"cost_usd", r.cost_per_run_usd >= 0 ? nlohmann::ordered_json(r.cost_per_run_usd)
                                             : nlohmann::ordered_json(nullptr)}};
  }
  if (!r.perturbations.empty()) j["perturbations"] = r.perturbations;
  if (r.lost) {
    const LostNodeReport& l = *r.lost;
    j["lost_node"] = {{"node", l.node},
                      {"hit", l.hit},
                      {"replace", l.spare ? "spare" : "shrink"},
                      {"at_s", l.at_s},
                      {"detect_s", l.detect_s},
                      {"restart_s", l.restart_s},
                      {"iteration_before_s", l.before_s},
                      {"iteration_after_s", l.after_s},
                      {"failed_step_s", l.failed_step_s},
                      {"gpus_before", l.gpus_before},
                      {"gpus_after", l.gpus_after},
                      {"replicas_before", l.replicas_before},
                      {"replicas_after", l.replicas_after},
                      {"global_batch_before", l.global_batch_before},
                      {"global_batch_after", l.global_batch_after}};
  }
  j["warnings"] = r.warnings;
  j["op_costs_from"] = r.cost_sources;
  j["folded_replicas"] = r.folded_replicas;
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

namespace {

// Sorted distinct ids as short text: "0-63", "0,8,..,120" (a progression), "0-3,8-11"; long
// irregular lists keep their first runs and last run ("0-3,8,..,120").
std::string compress_ids(std::vector<uint32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) return "";
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (uint32_t v : ids) {
    if (!runs.empty() && runs.back().second + 1 == v) {
      runs.back().second = v;
    } else {
      runs.emplace_back(v, v);
    }
  }
  auto run_text = [](const std::pair<uint32_t, uint32_t>& x) {
    return x.first == x.second ? std::to_string(x.first) : fmt::format("{}-{}", x.first, x.second);
  };
  if (runs.size() > 4 && ids.size() == runs.size()) {
    const uint32_t step = ids[1] - ids[0];
    bool progression = true;
    for (size_t i = 1; i < ids.size(); ++i)
      progression = progression && ids[i] - ids[i - 1] == step;
    if (progression) return fmt::format("{},{},..,{}", ids[0], ids[1], ids.back());
  }
  std::string s;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > 4 && i == 3) {
      s += ",..," + run_text(runs.back());
      break;
    }
    s += (i ? "," : "") + run_text(runs[i]);
  }
  return s;
}

// Devices that share every figure of the text report: within a node, consecutive GPUs (of any
// replica and stage: those columns list the set); across nodes, rows whose GPU type, GPU slots and
// figures are identical (a 1024-GPU run of identical replicas prints a handful of rows, not 128).
struct RowGroup {
  const DeviceReport* d = nullptr;  // a representative device
  uint32_t first_local = 0, last_local = 0;
  std::vector<uint32_t> nodes, replicas, stages;
  size_t gpus = 0;
  std::string label() const {
    const std::string slots = first_local == last_local
                                  ? fmt::format("gpu{}", first_local)
                                  : fmt::format("gpu{}-{}", first_local, last_local);
    if (nodes.size() == 1) return fmt::format("node{}.{}", nodes[0], slots);
    return fmt::format("nodes {} {}", compress_ids(nodes), slots);
  }
};

bool same_figures(const DeviceReport& a, const DeviceReport& b) {
  const workload::DeviceMemory &x = a.memory, &y = b.memory;
  return a.gpu == b.gpu && a.busy_s == b.busy_s && x.peak == y.peak && x.capacity == y.capacity &&
         x.weights == y.weights && x.gradients == y.gradients && x.optimizer == y.optimizer &&
         x.activations == y.activations && x.workspace == y.workspace;
}

std::vector<RowGroup> group_rows(const std::vector<DeviceReport>& devices) {
  std::vector<RowGroup> rows;
  // Index of the merged row by its figures and GPU slots; first appearance keeps its place.
  std::map<std::tuple<std::string, double, double, uint32_t, uint32_t>, std::vector<size_t>> index;
  for (size_t i = 0; i < devices.size();) {
    const DeviceReport& d = devices[i];
    size_t j = i + 1;
    while (j < devices.size() && devices[j].node == d.node &&
           devices[j].local == devices[j - 1].local + 1 && same_figures(devices[j], d)) {
      ++j;
    }
    const uint32_t lo = d.local, hi = devices[j - 1].local;
    auto& candidates = index[{d.gpu, d.busy_s, d.memory.peak, lo, hi}];
    RowGroup* row = nullptr;
    for (size_t k : candidates) {
      if (same_figures(*rows[k].d, d)) row = &rows[k];
    }
    if (row == nullptr) {
      candidates.push_back(rows.size());
      rows.push_back(RowGroup{&d, lo, hi, {}, {}, {}, 0});
      row = &rows.back();
    }
    if (row->nodes.empty() || row->nodes.back() != d.node) row->nodes.push_back(d.node);
    for (size_t k = i; k < j; ++k) {
      row->replicas.push_back(devices[k].replica);
      row->stages.push_back(devices[k].stage);
    }
    row->gpus += j - i;
    i = j;
  }
  return rows;
}

constexpr size_t kMaxRows = 64;  // the text stays readable; --json lists every device

std::string device_table(const std::vector<RowGroup>& rows) {
  using config::format_bytes;
  std::string s = fmt::format("  {:<26} {:>5} {:<16} {:>7} {:>7} {:>10} {:>12} {:>12}\n", "devices",
                              "gpus", "gpu", "repl", "stage", "busy", "peak memory", "capacity");
  for (size_t i = 0; i < rows.size() && i < kMaxRows; ++i) {
    const RowGroup& g = rows[i];
    const DeviceReport& d = *g.d;
    s += fmt::format("  {:<26} {:>5} {:<16} {:>7} {:>7} {:>10} {:>12} {:>12}{}\n", g.label(),
                     g.gpus, d.gpu, compress_ids(g.replicas), compress_ids(g.stages),
                     config::format_time(d.busy_s), format_bytes(d.memory.peak),
                     format_bytes(d.memory.capacity), d.memory.oom() ? "  OOM" : "");
  }
  if (rows.size() > kMaxRows)
    s += fmt::format("  ... {} rows in all (--json lists every device)\n", rows.size());
  // The memory model's split of each row's peak, so an OOM says what to shrink.
  s += fmt::format("  {:<26} {:>10} {:>10} {:>10} {:>11} {:>10}\n", "memory per device", "weights",
                   "gradients", "optimizer", "activations", "workspace");
  for (size_t i = 0; i < rows.size() && i < kMaxRows; ++i) {
    const workload::DeviceMemory& m = rows[i].d->memory;
    s += fmt::format("  {:<26} {:>10} {:>10} {:>10} {:>11} {:>10}\n", rows[i].label(),
                     format_bytes(m.weights), format_bytes(m.gradients), format_bytes(m.optimizer),
                     format_bytes(m.activations), format_bytes(m.workspace));
  }
  return s;
}

// One line per distinct (need, capacity), worst first, naming the devices.
std::string oom_summary(const std::vector<RowGroup>& rows, size_t gpus) {
  using config::format_bytes;
  struct Shortfall {
    double peak, capacity;
    size_t devices = 0;
    std::vector<std::string> where;
  };
  std::vector<Shortfall> by;
  size_t over = 0;
  for (const RowGroup& g : rows) {
    const workload::DeviceMemory& m = g.d->memory;
    if (!m.oom()) continue;
    over += g.gpus;
    auto it = std::find_if(by.begin(), by.end(), [&](const Shortfall& f) {
      return f.peak == m.peak && f.capacity == m.capacity;
    });
    if (it == by.end()) it = by.insert(by.end(), Shortfall{m.peak, m.capacity, 0, {}});
    it->devices += g.gpus;
    it->where.push_back(g.label());
  }
  std::stable_sort(by.begin(), by.end(), [](const Shortfall& a, const Shortfall& b) {
    return a.peak - a.capacity > b.peak - b.capacity;
  });
  std::string s = fmt::format(
      "  OUT OF MEMORY: {} of {} devices over capacity, worst {} over ({} needs {} of {})\n", over,
      gpus, format_bytes(by[0].peak - by[0].capacity), by[0].where[0], format_bytes(by[0].peak),
      format_bytes(by[0].capacity));
  constexpr size_t kMaxLines = 16;
  for (size_t i = 0; i < by.size() && i < kMaxLines; ++i) {
    const Shortfall& f = by[i];
    std::string where;
    for (size_t k = 0; k < f.where.size() && k < 4; ++k) where += (k ? "; " : "") + f.where[k];
    if (f.where.size() > 4) where += fmt::format("; ... {} rows", f.where.size());
    s += fmt::format("    {} device{} need {} of {} ({} over): {}\n", f.devices,
                     f.devices == 1 ? "" : "s", format_bytes(f.peak), format_bytes(f.capacity),
                     format_bytes(f.peak - f.capacity), where);
  }
  if (by.size() > kMaxLines)
    s += fmt::format("    ... {} distinct shortfalls in all (--json lists every device)\n",
                     by.size());
  return s;
}

}  // namespace

std::string to_text(const TrainingReport& r) {
  using config::format_time;
  std::string s = fmt::format("{} on {} ({} GPUs), plan {}\n", r.model, r.cluster, r.gpus, r.plan);
  for (const std::string& w : r.warnings) s += "  WARNING: " + w + "\n";
  for (const std::string& p : r.perturbations) s += "  what-if        " + p + "\n";
  if (r.lost && !r.lost->hit) {
    s += fmt::format("  lost node      node{} holds none of the plan's GPUs: nothing lost\n",
                     r.lost->node);
  } else if (r.lost) {
    const LostNodeReport& l = *r.lost;
    s += fmt::format(
        "  lost node      node{}: the step it hit took {} ({} run, {} until the timeout, {} to "
        "relaunch, {} again); iteration {} before, {} after{}\n",
        l.node, format_time(l.failed_step_s), format_time(l.at_s), format_time(l.detect_s),
        format_time(l.restart_s), format_time(l.after_s), format_time(l.before_s),
        format_time(l.after_s),
        l.spare
            ? " (on a spare node)"
            : fmt::format(" on {} of {} GPUs ({} of {} replicas, global batch {}{})", l.gpus_after,
                          l.gpus_before, l.replicas_after, l.replicas_before, l.global_batch_after,
                          l.global_batch_after == l.global_batch_before
                              ? std::string(" kept")
                              : fmt::format(" where {}", l.global_batch_before)));
  }
  s += fmt::format("  parameters     {} ({:.2f}B)\n", r.parameters, r.parameters / 1e9);
  s += fmt::format("  framework      {}\n", r.framework);
  s += fmt::format("  precision      {}\n", r.precision);
  s += fmt::format("  iteration      {}\n", format_time(r.iteration_time_s));
  if (r.grid_rows > 0) {
    s += fmt::format("  throughput     {:.1f} images/s\n", r.samples_per_s);
  } else {
    s += fmt::format("  throughput     {:.0f} tokens/s, {:.2f} samples/s\n", r.tokens_per_s,
                     r.samples_per_s);
  }
  s += fmt::format("  MFU            {:.1f}%\n", 100 * r.mfu);
  if (r.grid_rows > 0) {
    std::map<std::string, int> count;
    for (const auto& [layer, split] : r.layer_splits) ++count[split];
    std::string splits;
    for (const auto& [split, n] : count)
      splits += fmt::format("{}{} {}", splits.empty() ? "" : ", ", n, split);
    s += fmt::format("  grid           {} rows x {} columns (layers: {})\n", r.grid_rows,
                     r.grid_columns, splits);
  }
  if (r.sent_group_bytes + r.sent_replicas_bytes > 0) {
    s += fmt::format("  sent           {} per device per iteration ({} within {}, {} among {})\n",
                     config::format_bytes(r.sent_group_bytes + r.sent_replicas_bytes),
                     config::format_bytes(r.sent_group_bytes),
                     r.grid_rows > 0 ? "columns" : "stages (tensor, expert, context parallel)",
                     config::format_bytes(r.sent_replicas_bytes),
                     r.grid_rows > 0 ? "the grid" : "replicas");
  }
  if (r.cost_per_iteration_usd >= 0) {
    s += fmt::format(
        "  cost           ${:.4f} per iteration, ${:.4f} per million {} (on-demand prices, "
        "${:.2f}/h for the cluster)\n",
        r.cost_per_iteration_usd, r.cost_per_million_tokens_usd,
        r.grid_rows > 0 ? "images" : "tokens", r.price_per_hour_usd);
  } else {
    s += "  cost           no price for GPU " + config::join_names(r.unpriced_gpus) +
         " (price_per_hour in its profile, topologies/gpus/)\n";
  }
  if (r.run_tokens > 0) {
    s += fmt::format("  training run   {:.4g} tokens: {:.1f} days", r.run_tokens,
                     r.run_time_s / 86400);
    s += r.cost_per_run_usd >= 0 ? fmt::format(", ${:.0f}\n", r.cost_per_run_usd)
                                 : std::string(" (no price)\n");
  }
  const double it = r.iteration_time_s;
  s += fmt::format(
      "  time split     compute {} ({:.0f}%), exposed communication {} ({:.0f}%: tensor {}, data "
      "{}{}), pipeline bubble {} ({:.0f}%)   (mean over devices)\n",
      format_time(r.compute_s), 100 * r.compute_s / it, format_time(r.communication_exposed_s),
      100 * r.communication_exposed_s / it, format_time(r.tp_exposed_s),
      format_time(r.dp_exposed_s),
      (r.expert_parallel > 1 ? ", expert all-to-all " + format_time(r.ep_exposed_s) : "") +
          (r.context_parallel > 1 ? ", ring attention " + format_time(r.cp_exposed_s) : ""),
      format_time(r.bubble_s), 100 * r.bubble_s / it);
  s += "  op costs from  ";
  for (size_t i = 0; i < r.cost_sources.size(); ++i) s += (i ? "; " : "") + r.cost_sources[i];
  s += "\n";
  if (r.folded_replicas > 1) {
    s += fmt::format(
        "  replay         {} identical data-parallel replicas replayed as one, in lockstep "
        "(--exact replays each)\n",
        r.folded_replicas);
  }
  const std::vector<RowGroup> rows = group_rows(r.devices);
  s += device_table(rows);
  if (r.oom) s += oom_summary(rows, r.gpus);
  return s;
}

}  // namespace hetsim::report
