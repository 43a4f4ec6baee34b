// One-step changes to a plan; see neighbours.h.
#include "sim/policy/neighbours.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hetsim::policy {

namespace {

std::string emit(const YAML::Node& root) {
  YAML::Emitter e;
  e << root;
  return std::string(e.c_str()) + "\n";
}

// Replicas (or a staged stage's groups) by the GPU type and tensor degree of their devices, in
// order of first appearance: the sets a batch share moves between.
template <typename Key>
std::vector<std::vector<size_t>> by_kind(const std::vector<Key>& keys) {
  std::vector<Key> seen;
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto it = std::find(seen.begin(), seen.end(), keys[i]);
    if (it == seen.end()) {
      seen.push_back(keys[i]);
      out.push_back({i});
    } else {
      out[static_cast<size_t>(it - seen.begin())].push_back(i);
    }
  }
  return out;
}

// The plan's text and what the moves below add to: each a copy of the text with one change.
struct Moves {
  const YAML::Node& root;
  const workload::Plan& plan;
  const platform::Cluster& cluster;
  std::vector<Neighbour>& out;
  bool replicas = false;  // the plan lists its replicas
  bool staged = false;    // the plan lists its stages (Plan::staged)

  void add(const std::string& change, const YAML::Node& n) { out.push_back({change, emit(n)}); }
  YAML::Node copy() const { return YAML::Clone(root); }

  // The micro-batch size doubled or halved, the global batch kept.
  void micro_batch() {
    const int64_t mb = plan.micro_batch_size;
    for (const bool up : {true, false}) {
      if (!up && mb % 2 != 0) continue;
      YAML::Node n = copy();
      const int64_t to = up ? mb * 2 : mb / 2;
      n["micro_batch_size"] = to;
      bool ok = true;
      if (replicas) {
        for (YAML::Node rep : n["replicas"]) {
          const int m = rep["micro_batches"].as<int>();
          if (up && m % 2 != 0) ok = false;
          rep["micro_batches"] = up ? m / 2 : m * 2;
        }
      } else if (staged) {
        ok = scale_group_batches(n, up);
      }
      if (ok) add(fmt::format("micro-batch {}", to), n);
    }
  }
  // A staged plan's group batches doubled or halved; false where a group has no batch or an odd
  // one would be halved.
  static bool scale_group_batches(YAML::Node& n, bool up) {
    bool ok = true;
    for (YAML::Node st : n["stages"]) {
      if (!st["groups"]) return false;
      for (YAML::Node g : st["groups"]) {
        if (!g["batch"]) return false;
        const int64_t b = g["batch"].as<int64_t>();
        if (!up && b % 2 != 0) ok = false;
        g["batch"] = up ? b * 2 : b / 2;
      }
    }
    return ok;
  }

  // The other recompute policies, and partial recompute (recompute_layers, the first N layers
  // of each stage's chunk): from full, half of the largest chunk's layers; from N, halfway down
  // to 1 or up to every layer. Fewer recomputed layers cost memory and save a forward pass each.
  void recompute() {
    for (const workload::Recompute rc :
         {workload::Recompute::none, workload::Recompute::selective, workload::Recompute::full}) {
      if (rc == plan.recompute) continue;
      YAML::Node n = copy();
      n["recompute"] = workload::to_string(rc);
      if (rc != workload::Recompute::full) n.remove("recompute_layers");
      add("recompute " + workload::to_string(rc), n);
    }
    if (plan.recompute != workload::Recompute::full) return;
    int chunk = 0;
    for (int s = 0; s < plan.stages(); ++s) {
      const workload::StagePlan& st = plan.stage_plan(0, static_cast<size_t>(s));
      for (int c = 0; c < std::max(1, plan.interleave); ++c)
        chunk = std::max(chunk, st.layers_of(c));
    }
    const int now = plan.recompute_layers == 0 ? chunk : std::min(plan.recompute_layers, chunk);
    for (const int to : {now / 2, (now + chunk + 1) / 2}) {
      if (to < 1 || to == now) continue;
      YAML::Node n = copy();
      if (to >= chunk) {
        n.remove("recompute_layers");
      } else {
        n["recompute_layers"] = to;
      }
      add(to >= chunk ? std::string("recompute every layer")
                      : fmt::format("recompute_layers {}", to),
          n);
    }
  }

  void zero() {
    for (const int z : {plan.zero_stage - 1, plan.zero_stage + 1}) {
      if (z < 0 || z > 3 || staged) continue;
      YAML::Node n = copy();
      n["zero_stage"] = z;
      add(fmt::format("ZeRO {}", z), n);
    }
  }

  // The schedule: 1F1B and interleaved by 2 (uniform pipelines).
  void schedule() {
    if (!plan.uniform || plan.stages() <= 1 || root["stage_layers"]) return;
    YAML::Node n = copy();
    if (plan.schedule == workload::Schedule::interleaved) {
      n["schedule"] = "1f1b";
      n.remove("interleave");
      n.remove("microbatch_group");
      add("schedule 1f1b", n);
    } else if (plan.schedule == workload::Schedule::one_f_one_b && plan.framework.interleaves()) {
      n["schedule"] = "interleaved";
      n["interleave"] = 2;
      add("interleaved by 2", n);
    }
  }

  // One layer across each stage boundary, in every replica alike.
  void layers() {
    const int S = plan.stages();
    if (S <= 1 || plan.interleave != 1 || plan.asymmetric()) return;
    std::vector<int> layers;
    for (int s = 0; s < S; ++s) layers.push_back(plan.replicas.front().stages[s].layers);
    for (int s = 0; s + 1 < S; ++s) {
      for (const bool down : {true, false}) {
        const int from = down ? s : s + 1, to = down ? s + 1 : s;
        if (layers[static_cast<size_t>(from)] <= 1) continue;
        YAML::Node n = copy();
        if (staged) {
          n["stages"][from]["layers"] = layers[static_cast<size_t>(from)] - 1;
          n["stages"][to]["layers"] = layers[static_cast<size_t>(to)] + 1;
        } else if (replicas) {
          for (YAML::Node rep : n["replicas"]) {
            rep["stages"][from]["layers"] = layers[static_cast<size_t>(from)] - 1;
            rep["stages"][to]["layers"] = layers[static_cast<size_t>(to)] + 1;
          }
        } else {
          std::vector<int> split = layers;
          --split[static_cast<size_t>(from)];
          ++split[static_cast<size_t>(to)];
          n["stage_layers"] = split;
          n["stage_layers"].SetStyle(YAML::EmitterStyle::Flow);
        }
        add(fmt::format("a layer from stage {} to {}", from, to), n);
      }
    }
  }

  // Batch shares: one unit from each of the first k members of one kind to the first k of
  // another (k the smaller count), unless a member would be left with none; `set` writes member
  // i's new count into the copy, `what` names the move (k, from, to).
  template <typename Set, typename What>
  void share_moves(const std::vector<std::pair<const config::GpuProfile*, int>>& keys,
                   const std::vector<int64_t>& counts, Set&& set, What&& what) {
    const auto kinds = by_kind(keys);
    for (size_t a = 0; a < kinds.size(); ++a) {
      for (size_t b = 0; b < kinds.size(); ++b) {
        if (a == b) continue;
        YAML::Node n = copy();
        const size_t k = std::min(kinds[a].size(), kinds[b].size());
        bool ok = true;
        for (size_t i = 0; i < k; ++i) {
          const size_t x = kinds[a][i], y = kinds[b][i];
          if (counts[x] <= 1) ok = false;
          set(n, x, counts[x] - 1);
          set(n, y, counts[y] + 1);
        }
        if (ok) add(what(k, keys[kinds[a][0]].first->name, keys[kinds[b][0]].first->name), n);
      }
    }
  }

  // Micro-batches between the replicas of one GPU type (and degree) and another's.
  void replica_shares() {
    if (!replicas || plan.replicas.size() <= 1 || (plan.zero_stage >= 2 && !plan.layered)) return;
    std::vector<std::pair<const config::GpuProfile*, int>> keys;
    std::vector<int64_t> counts;
    for (const workload::ReplicaPlan& rep : plan.replicas) {
      keys.emplace_back(cluster.gpu(rep.stages.front().devices.front()).profile,
                        rep.stages.front().tensor_parallel());
      counts.push_back(rep.micro_batches);
    }
    share_moves(
        keys, counts,
        [](YAML::Node& n, size_t i, int64_t v) { n["replicas"][i]["micro_batches"] = v; },
        [](size_t k, const std::string& from, const std::string& to) {
          return fmt::format("a micro-batch from {} replicas of {} to {}", k, from, to);
        });
  }

  // A staged stage's samples between its groups of one GPU type (and degree) and another's.
  void group_shares() {
    if (!staged) return;
    for (int s = 0; s < plan.stages(); ++s) {
      const workload::DataParallelStage& ds = plan.dp_stages[static_cast<size_t>(s)];
      if (!root["stages"][s]["groups"]) continue;
      std::vector<std::pair<const config::GpuProfile*, int>> keys;
      for (const workload::StagePlan& g : ds.groups)
        keys.emplace_back(cluster.gpu(g.devices.front()).profile, g.tensor_parallel());
      share_moves(
          keys, ds.batch,
          [s](YAML::Node& n, size_t i, int64_t v) { n["stages"][s]["groups"][i]["batch"] = v; },
          [s](size_t k, const std::string& from, const std::string& to) {
            return fmt::format("a sample from {} groups of {} to {} in stage {}", k, from, to, s);
          });
    }
  }
};

}  // namespace

std::vector<Neighbour> neighbours(const std::string& text, const workload::Plan& plan,
                                  const platform::Cluster& cluster) {
  std::vector<Neighbour> out;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return out;
  }
  Moves m{root, plan, cluster, out, static_cast<bool>(root["replicas"]), plan.staged()};
  m.micro_batch();
  m.recompute();
  m.zero();
  m.schedule();
  m.layers();
  m.replica_shares();
  m.group_shares();
  return out;
}

}  // namespace hetsim::policy
