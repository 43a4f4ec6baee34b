// The policy table and the helpers the policies share; see policy.h.
#include "sim/policy/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <string>

#include "sim/core/error.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::policy {

namespace {
// What a planner user may fix for every proposal: the keys no policy chooses.
const std::vector<std::string> kPlanSetKeys = {"attention", "precision", "main_grads",
                                               "bucket_size", "gradient_reduction"};
}  // namespace

void check_plan_sets(const std::vector<std::string>& sets) {
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) {
      throw InputError("--plan-set " + s + ": expected KEY=VALUE");
    }
    const std::string key = s.substr(0, eq);
    if (std::find(kPlanSetKeys.begin(), kPlanSetKeys.end(), key) == kPlanSetKeys.end()) {
      std::string keys;
      for (const std::string& k : kPlanSetKeys) keys += (keys.empty() ? "" : ", ") + k;
      throw InputError("--plan-set " + s + ": " + key +
                       " is not a key the planner leaves to you (the policies choose degrees, "
                       "batch, schedule, recompute and ZeRO; expected one of " +
                       keys + ")");
    }
  }
}

std::string plan_set_lines(const std::vector<std::string>& sets) {
  std::string out;
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    out += s.substr(0, eq) + ": " + s.substr(eq + 1) + "\n";
  }
  return out;
}

const std::vector<const Policy*>& policies() {
  static const std::vector<const Policy*> table = {
      &megatron_policy(), &zero_policy(),    &whale_policy(),     &cannikin_policy(), &amp_policy(),
      &metis_policy(),    &hetpipe_policy(), &flashflex_policy(), &cephalo_policy()};
  return table;
}

std::vector<const Policy*> select_policies(const std::string& name) {
  if (name == "all") return policies();
  std::string names;
  for (const Policy* p : policies()) {
    if (p->name() == name) return {p};
    names += std::string(names.empty() ? "" : ", ") + p->name();
  }
  throw InputError("--policy: unknown policy \"" + name + "\" (expected all or one of " + names +
                   ")");
}

double kernel_seconds(const std::vector<workload::Step>& steps, const config::GpuProfile& gpu,
                      workload::Precision p, const workload::CostModel& cost) {
  Time t;
  for (const workload::Step& st : steps) {
    if (st.comm == workload::CommKind::none) t += cost.duration(st.op, gpu, p);
  }
  return t.seconds();
}

std::vector<const config::GpuProfile*> gpu_types(const platform::Cluster& c) {
  std::vector<const config::GpuProfile*> types;
  for (platform::GpuId g = 0; g < c.gpu_count(); ++g) {
    if (std::find(types.begin(), types.end(), c.gpu(g).profile) == types.end())
      types.push_back(c.gpu(g).profile);
  }
  return types;
}

workload::Precision cluster_precision(const platform::Cluster& c) {
  return workload::default_precision(gpu_types(c));
}

std::string gpu_ranges(const std::vector<platform::GpuId>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", ids[i]);
    if (j > i) out += fmt::format("-{}", ids[j]);
    i = j + 1;
  }
  return out;
}

std::vector<StageMemory> stage_memory(const workload::ModelConfig& m, const workload::Plan& plan,
                                      const platform::Cluster& c) {
  const workload::TrainingJob job = workload::skeleton_job(m, plan, c);
  const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(job);
  std::vector<StageMemory> out(static_cast<size_t>(plan.stages()));
  for (size_t g = 0; g < memory.size(); ++g) {
    StageMemory& st = out[job.copies[g].stage];
    st.fill = std::max(st.fill, memory[g].peak / memory[g].capacity);
    st.room = std::min(st.room, memory[g].capacity - memory[g].peak);
  }
  return out;
}

bool sequence_parallel(const Request& r, bool wanted) {
  if (!wanted) return false;
  if (r.framework.empty()) return true;  // the policies' own frameworks all have it
  // Frameworks are parsed once per name (proposals ask for every candidate).
  static std::mutex mu;
  static std::map<std::string, bool> known;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(r.framework);
  if (it == known.end())
    it = known.emplace(r.framework, workload::load_framework(r.framework).sequence_parallel).first;
  return it->second;
}

std::string pipelines_plan(const Request& r, const std::string& header, int64_t micro_batch,
                           int64_t micro_batches, const char* recompute, int tp,
                           const std::vector<int>& layers,
                           const std::vector<std::vector<std::vector<platform::GpuId>>>& devices) {
  // The uniform form with the split given (stage_layers) and the devices in its rank order
  // (tensor-parallel fastest, then data, then pipeline): the same plan as every replica and
  // stage spelled out, in a few hundred bytes instead of tens of kilobytes to parse (GPT-3
  // 175B on 1024 GPUs: 64 stages x 8 replicas).
  const size_t R = devices.size(), S = layers.size();
  std::vector<platform::GpuId> order;
  for (size_t s = 0; s < S; ++s)
    for (size_t q = 0; q < R; ++q)
      for (platform::GpuId g : devices[q][s]) order.push_back(g);
  const std::string ranges = gpu_ranges(order);
  std::string split;
  for (int l : layers) split += fmt::format("{}{}", split.empty() ? "" : ", ", l);
  std::string plan = fmt::format(
      "{}micro_batch_size: {}\nsequence_length: {}\nrecompute: {}\nsequence_parallel: {}\n", header,
      micro_batch, r.sequence, recompute, sequence_parallel_value(r, tp > 1));
  if (!r.framework.empty()) plan += "framework: " + r.framework + "\n";
  plan += fmt::format(
      "tensor_parallel: {}\npipeline_parallel: {}\ndata_parallel: {}\nglobal_batch_size: {}\n"
      "devices: \"{}\"\nstage_layers: [{}]\n",
      tp, S, R, static_cast<int64_t>(R) * micro_batches * micro_batch, ranges, split);
  return plan;
}

LayerProfiler::LayerProfiler(const Request& r, workload::Precision p, int tp, int64_t micro_batch,
                             bool full_recompute)
    : cost_(*r.cost), precision_(p), full_(full_recompute) {
  workload::LayerShape shape;
  shape.micro_batch = micro_batch;
  shape.sequence = r.sequence;
  shape.tensor_parallel = tp;
  shape.sequence_parallel = sequence_parallel(r, tp > 1);
  shape.precision = p;
  lf_ = workload::layer_forward(*r.model, shape);
  lb_ = workload::layer_backward(*r.model, shape);
  ef_ = workload::embedding_forward(*r.model, shape);
  eb_ = workload::embedding_backward(*r.model, shape);
  hf_ = workload::head_forward(*r.model, shape);
  hb_ = workload::head_backward(*r.model, shape);
}

const LayerProfiler::Times& LayerProfiler::of(const config::GpuProfile& gpu) {
  auto [it, fresh] = times_.try_emplace(gpu.name);
  if (fresh) {
    const double f = kernel_seconds(lf_, gpu, precision_, cost_);
    it->second.layer = f + kernel_seconds(lb_, gpu, precision_, cost_) + (full_ ? f : 0);
    it->second.embedding =
        kernel_seconds(ef_, gpu, precision_, cost_) + kernel_seconds(eb_, gpu, precision_, cost_);
    it->second.head =
        kernel_seconds(hf_, gpu, precision_, cost_) + kernel_seconds(hb_, gpu, precision_, cost_);
  }
  return it->second;
}

int min_gpus_per_node(const platform::Cluster& c) {
  std::map<uint32_t, int> per_node;
  for (platform::GpuId g = 0; g < c.gpu_count(); ++g) ++per_node[c.gpu(g).node];
  int least = 0;
  for (const auto& [node, n] : per_node) least = least == 0 ? n : std::min(least, n);
  return least;
}

std::vector<int> tensor_parallel_degrees(const workload::ModelConfig& m, int limit) {
  std::vector<int> out;
  for (int t = 1; t <= limit; t *= 2) {
    if (m.heads % t != 0 || m.ffn_hidden % t != 0) continue;
    if (m.kv_heads % t != 0 && t % m.kv_heads != 0) continue;
    out.push_back(t);
  }
  return out;
}

std::vector<int64_t> micro_batch_sizes(int64_t per_replica) {
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= std::min<int64_t>(per_replica, 16); b *= 2) {
    if (per_replica % b == 0) out.push_back(b);
  }
  return out;
}

std::vector<std::vector<platform::GpuId>> node_groups(const platform::Cluster& c, int tp) {
  std::map<uint32_t, std::vector<platform::GpuId>> nodes;
  for (platform::GpuId g = 0; g < c.gpu_count(); ++g) nodes[c.gpu(g).node].push_back(g);
  std::vector<std::vector<platform::GpuId>> groups;
  for (const auto& [node, gpus] : nodes) {
    for (size_t i = 0; i + tp <= gpus.size(); i += tp) {
      groups.emplace_back(gpus.begin() + i, gpus.begin() + i + tp);
    }
  }
  return groups;
}

PipelineSplit split_pipeline(const PipelineCosts& p, int64_t micro_batches) {
  PipelineSplit out;
  out.layers = amp_partition(p.cost, p.fixed, micro_batches);
  double sum = 0;
  for (size_t s = 0, first = 0; s < out.layers.size(); first += out.layers[s], ++s) {
    double t = p.fixed[s];
    for (int l = 0; l < out.layers[s]; ++l) t += p.cost[s][first + l];
    out.slowest = std::max(out.slowest, t);
    sum += t;
  }
  out.time = static_cast<double>(micro_batches - 1) * out.slowest + sum;
  return out;
}

std::vector<int64_t> speed_shares(const std::vector<PipelineCosts>& pipelines, int64_t total) {
  const auto n = static_cast<int64_t>(pipelines.size());
  std::vector<double> speed;
  double sum = 0;
  for (const PipelineCosts& p : pipelines) {
    const PipelineSplit split = split_pipeline(p, std::max<int64_t>(1, total / n));
    if (split.layers.empty()) return {};
    speed.push_back(1.0 / split.slowest);
    sum += speed.back();
  }
  std::vector<double> exact;
  for (double s : speed) exact.push_back(static_cast<double>(total) * s / sum);
  return whole_shares(total, exact);
}

std::vector<int64_t> whole_shares(int64_t total, const std::vector<double>& exact) {
  const int64_t n = static_cast<int64_t>(exact.size());
  std::vector<int64_t> share(n, 1);
  std::vector<double> over(n);
  int64_t given = n;
  for (int64_t i = 0; i < n; ++i) {
    over[i] = exact[i] - 1;
    const int64_t whole = std::max<int64_t>(0, static_cast<int64_t>(std::floor(over[i])));
    share[i] += whole;
    given += whole;
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Largest remainder first; a share already over its exact figure (exact below one) last.
  auto remainder = [&](int64_t i) { return over[i] < 0 ? over[i] : over[i] - std::floor(over[i]); };
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return remainder(a) > remainder(b); });
  for (int64_t k = 0; given < total; k = (k + 1) % n) {
    ++share[order[k]];
    ++given;
  }
  for (int64_t k = n - 1; given > total; k = (k + n - 1) % n) {
    if (share[order[k]] > 1) {
      --share[order[k]];
      --given;
    }
  }
  return share;
}

std::string replicas_plan(const Request& r, const std::string& header, int64_t micro_batch,
                          const char* recompute, int tp,
                          const std::vector<std::vector<platform::GpuId>>& groups,
                          const std::vector<int64_t>& shares) {
  std::string plan = fmt::format(
      "{}micro_batch_size: {}\nsequence_length: {}\nrecompute: {}\nsequence_parallel: {}\n", header,
      micro_batch, r.sequence, recompute, sequence_parallel_value(r, tp > 1));
  if (!r.framework.empty()) plan += "framework: " + r.framework + "\n";
  plan += "replicas:\n";
  for (size_t i = 0; i < groups.size(); ++i) {
    plan += fmt::format(
        "  - micro_batches: {}\n    stages:\n"
        "      - {{layers: {}, tensor_parallel: {}, devices: \"{}-{}\"}}\n",
        shares[i], r.model->layers, tp, groups[i].front(), groups[i].back());
  }
  return plan;
}

}  // namespace hetsim::policy
