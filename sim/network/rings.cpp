// Ring, chain and tree construction; see rings.h.
#include "sim/network/rings.h"

#include <algorithm>
#include <functional>
#include <map>

namespace hetsim::network {

namespace {

// NVLink counts between the given local GPUs of one node type.
std::vector<std::vector<int>> nvlink_counts(const platform::Cluster& c, uint32_t node,
                                            const std::vector<uint32_t>& locals) {
  const size_t n = locals.size();
  std::vector<std::vector<int>> cap(n, std::vector<int>(n, 0));
  for (const config::MeshLink& m : c.direct_links(c.node(node).type)) {
    auto ia = std::find(locals.begin(), locals.end(), static_cast<uint32_t>(m.a));
    auto ib = std::find(locals.begin(), locals.end(), static_cast<uint32_t>(m.b));
    if (ia == locals.end() || ib == locals.end()) continue;
    cap[ia - locals.begin()][ib - locals.begin()] += m.count;
    cap[ib - locals.begin()][ia - locals.begin()] += m.count;
  }
  return cap;
}

// All Hamiltonian cycles over edges with cap > 0 (vertex 0 first; each undirected cycle once).
std::vector<std::vector<int>> nvlink_cycles(const std::vector<std::vector<int>>& cap) {
  const int n = static_cast<int>(cap.size());
  std::vector<std::vector<int>> out;
  std::vector<int> path{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  std::function<void()> dfs = [&] {
    if (out.size() >= 20000) return;
    if (static_cast<int>(path.size()) == n) {
      if (cap[path.back()][0] > 0 && path[1] < path.back()) out.push_back(path);
      return;
    }
    for (int v = 0; v < n; ++v) {
      if (used[v] || cap[path.back()][v] == 0) continue;
      used[v] = true;
      path.push_back(v);
      dfs();
      path.pop_back();
      used[v] = false;
    }
  };
  dfs();
  return out;
}

// The largest set of cycles that fits in the link counts (bounded search, deterministic).
std::vector<std::vector<int>> pack_cycles(const std::vector<std::vector<int>>& cycles,
                                          std::vector<std::vector<int>> cap) {
  std::vector<std::vector<int>> best, cur;
  long budget = 200000;
  std::function<void(size_t)> search = [&](size_t from) {
    if (cur.size() > best.size()) best = cur;
    if (--budget < 0) return;
    for (size_t i = from; i < cycles.size(); ++i) {
      const std::vector<int>& cy = cycles[i];
      const size_t n = cy.size();
      bool fits = true;
      for (size_t k = 0; k < n && fits; ++k) fits = cap[cy[k]][cy[(k + 1) % n]] > 0;
      if (!fits) continue;
      for (size_t k = 0; k < n; ++k) {
        --cap[cy[k]][cy[(k + 1) % n]];
        --cap[cy[(k + 1) % n]][cy[k]];
      }
      cur.push_back(cy);
      search(i);  // a cycle may be used again where links are doubled
      cur.pop_back();
      for (size_t k = 0; k < n; ++k) {
        ++cap[cy[k]][cy[(k + 1) % n]];
        ++cap[cy[(k + 1) % n]][cy[k]];
      }
      if (budget < 0) return;
    }
  };
  search(0);
  return best;
}

// The cycle (or, with open = true, the path) with the fewest steps off NVLink. A cycle may
// start anywhere; a path is tried from every start.
std::vector<int> fewest_gaps(const std::vector<std::vector<int>>& cap, bool open) {
  const int n = static_cast<int>(cap.size());
  std::vector<int> best, path;
  int best_cost = n + 1;
  long budget = 500000;
  std::vector<bool> used(n, false);
  std::function<void(int)> dfs = [&](int cost) {
    if (cost >= best_cost || --budget < 0) return;
    if (static_cast<int>(path.size()) == n) {
      const int total = cost + (open ? 0 : (cap[path.back()][path.front()] > 0 ? 0 : 1));
      if (total < best_cost) {
        best_cost = total;
        best = path;
      }
      return;
    }
    for (int v = 0; v < n; ++v) {
      if (used[v]) continue;
      used[v] = true;
      path.push_back(v);
      dfs(cost + (cap[path[path.size() - 2]][v] > 0 ? 0 : 1));
      path.pop_back();
      used[v] = false;
    }
  };
  for (int start = 0; start < (open ? n : 1) && best_cost > 0; ++start) {
    used[start] = true;
    path = {start};
    dfs(0);
    used[start] = false;
  }
  if (best.empty()) {
    for (int v = 0; v < n; ++v) best.push_back(v);
  }
  return best;
}

}  // namespace

NodeOrders order_by_node(const platform::Cluster& c, std::span<const GpuId> ranks) {
  std::map<uint32_t, std::vector<uint32_t>> locals;
  for (GpuId g : ranks) locals[c.gpu(g).node].push_back(c.gpu(g).local);
  NodeOrders out;
  for (auto& [node, loc] : locals) {
    std::sort(loc.begin(), loc.end());
    const GpuId base = c.node(node).first_gpu;
    std::vector<int> order(loc.size());
    for (size_t i = 0; i < loc.size(); ++i) order[i] = static_cast<int>(i);
    std::vector<int> path = order;
    std::vector<std::vector<int>> cycles;
    if (c.node_type(node).intra == config::IntraKind::nvlink_mesh && loc.size() >= 3) {
      const auto cap = nvlink_counts(c, node, loc);
      cycles = pack_cycles(nvlink_cycles(cap), cap);
      order = cycles.empty() ? fewest_gaps(cap, locals.size() > 1) : cycles.front();
      path = cycles.empty() ? fewest_gaps(cap, true) : cycles.front();
    }
    auto to_gpus = [&](const std::vector<int>& o) {
      std::vector<GpuId> v;
      for (int i : o) v.push_back(base + loc[i]);
      return v;
    };
    out.nodes.push_back(node);
    out.order.push_back(to_gpus(order));
    out.chain.push_back(to_gpus(path));
    if (locals.size() == 1) {
      for (size_t k = 1; k < cycles.size(); ++k) out.extra_cycles.push_back(to_gpus(cycles[k]));
    }
    if (out.order.back().size() != out.order.front().size()) out.equal_sizes = false;
  }
  return out;
}

std::vector<std::vector<std::vector<GpuId>>> channel_orders(const platform::Cluster& c,
                                                            const NodeOrders& nodes) {
  size_t channels = SIZE_MAX;
  const size_t m = nodes.nodes.size();
  // Per node: each rank's NIC in ring order, and the node's NICs in ascending order.
  std::vector<std::vector<int>> nic_of(m);
  std::vector<std::vector<int>> nic_list(m);
  for (size_t i = 0; i < m; ++i) {
    nic_of[i].reserve(nodes.order[i].size());
    for (GpuId g : nodes.order[i]) {
      const int nic = c.gpu_nic(g);
      nic_of[i].push_back(nic);
      if (std::find(nic_list[i].begin(), nic_list[i].end(), nic) == nic_list[i].end()) {
        nic_list[i].push_back(nic);
      }
    }
    std::sort(nic_list[i].begin(), nic_list[i].end());
    channels = std::min(channels, nic_list[i].size());
  }
  std::vector<std::vector<std::vector<GpuId>>> out(channels);
  for (size_t ch = 0; ch < channels; ++ch) {
    out[ch].reserve(m);
    for (size_t i = 0; i < m; ++i) {
      const std::vector<GpuId>& o = nodes.order[i];
      const int want = nic_list[i][ch];
      size_t start = 0;
      while (nic_of[i][start] != want) ++start;
      std::vector<GpuId>& rotated = out[ch].emplace_back();
      rotated.reserve(o.size());
      for (size_t k = 0; k < o.size(); ++k) rotated.push_back(o[(start + k) % o.size()]);
    }
  }
  return out;
}

std::vector<std::vector<GpuId>> build_rings(const platform::Cluster& c, const NodeOrders& nodes) {
  std::vector<std::vector<GpuId>> rings;
  if (nodes.nodes.size() == 1) {
    const std::vector<GpuId>& o = nodes.order.front();
    const config::NodeType& t = c.node_type(nodes.nodes.front());
    if (t.intra == config::IntraKind::nvlink_mesh && o.size() == 2) {
      // Two GPUs: one ring per NVLink between them (each ring uses both directions).
      int links = 0;
      for (const config::MeshLink& m : c.direct_links(c.node(nodes.nodes.front()).type)) {
        const int a = static_cast<int>(c.gpu(o[0]).local), b = static_cast<int>(c.gpu(o[1]).local);
        if ((m.a == a && m.b == b) || (m.a == b && m.b == a)) links += m.count;
      }
      for (int k = 0; k < std::max(1, links); ++k) rings.push_back(o);
      return rings;
    }
    const bool mesh_cycles = t.intra == config::IntraKind::nvlink_mesh && o.size() >= 3;
    std::vector<std::vector<GpuId>> cycles{o};
    cycles.insert(cycles.end(), nodes.extra_cycles.begin(), nodes.extra_cycles.end());
    for (const auto& cy : cycles) {
      rings.push_back(cy);
      if (mesh_cycles) rings.emplace_back(cy.rbegin(), cy.rend());
    }
    return rings;
  }
  // Several nodes: one channel per NIC in use on every node.
  for (const auto& per_node : channel_orders(c, nodes)) {
    std::vector<GpuId> ring;
    size_t size = 0;
    for (const auto& o : per_node) size += o.size();
    ring.reserve(size);
    for (const auto& o : per_node) ring.insert(ring.end(), o.begin(), o.end());
    rings.push_back(std::move(ring));
  }
  return rings;
}

std::vector<TreeEdges> build_trees(const platform::Cluster& c, const NodeOrders& nodes) {
  std::vector<TreeEdges> trees;
  auto chain = [](TreeEdges& t, const std::vector<GpuId>& o) {
    for (size_t k = 1; k < o.size(); ++k) t.edges.emplace_back(o[k], o[k - 1]);
  };
  const size_t m = nodes.nodes.size();
  if (m == 1) {
    TreeEdges t;
    t.root = nodes.chain.front().front();
    chain(t, nodes.chain.front());
    trees.push_back(std::move(t));
    return trees;
  }
  // Per channel (NIC): tree 0 is a heap-shaped binary tree over node positions, tree 1 the same
  // over reversed positions, so nodes interior in one tree are leaves in the other. Each node's
  // ranks hang in a chain below the GPU of the channel's NIC.
  for (const auto& per_node : channel_orders(c, nodes)) {
    for (int which = 0; which < 2; ++which) {
      TreeEdges t;
      size_t ranks = 0;
      for (const auto& o : per_node) ranks += o.size();
      t.edges.reserve(ranks - 1);
      auto node_at = [&](size_t pos) { return which == 0 ? pos : m - 1 - pos; };
      t.root = per_node[node_at(0)].front();
      for (size_t pos = 0; pos < m; ++pos) {
        const std::vector<GpuId>& o = per_node[node_at(pos)];
        chain(t, o);
        if (pos > 0) t.edges.emplace_back(o.front(), per_node[node_at((pos - 1) / 2)].front());
      }
      trees.push_back(std::move(t));
    }
  }
  return trees;
}

}  // namespace hetsim::network
