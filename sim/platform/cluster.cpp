// Builds the cluster graph and answers routes; see cluster.h.
#include "sim/platform/cluster.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>

#include "sim/core/error.h"
#include "sim/core/hash.h"

namespace hetsim::platform {

namespace {
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr uint16_t kFar = std::numeric_limits<uint16_t>::max();

int kind_rank(config::LinkKind k) {
  switch (k) {
    case config::LinkKind::nvlink:
      return 0;
    case config::LinkKind::pcie:
      return 1;
    case config::LinkKind::socket:
      return 2;
    case config::LinkKind::network:
      return 3;
  }
  return 3;
}
}  // namespace

Cluster::Cluster(config::ClusterConfig cfg) : cfg_(std::move(cfg)) {
  for (const auto& [name, cls] : cfg_.link_classes) {
    has_collective_overhead_ = has_collective_overhead_ || cls.collective_overhead_s > 0;
    has_socket_transport_ = has_socket_transport_ || cls.socket_transport;
  }
  for (const config::NodeType& t : cfg_.node_types) build_template(t);
  build_nodes();
  build_fabric();
  last_class_name_ = nullptr;  // make_link's memo points into cfg_: none is kept
  last_class_ = nullptr;
  build_switch_routes();
}

void Cluster::build_template(const config::NodeType& t) {
  NodeTemplate tp;
  auto add_vertex = [&](VertexKind k) {
    tp.kinds.push_back(k);
    return static_cast<uint32_t>(tp.kinds.size() - 1);
  };
  auto add_pair = [&](uint32_t a, uint32_t b, double bw, const std::string& cls) {
    tp.links.push_back({a, b, bw, cls});
    tp.links.push_back({b, a, bw, cls});
  };
  for (int g = 0; g < t.gpus; ++g) tp.gpu_vertex.push_back(add_vertex(VertexKind::gpu));
  if (t.intra == config::IntraKind::nvswitch) {
    const uint32_t sw = add_vertex(VertexKind::nvswitch);
    for (int g = 0; g < t.gpus; ++g)
      add_pair(tp.gpu_vertex[g], sw, t.intra_bandwidth_Bps, t.intra_class);
  } else if (t.intra == config::IntraKind::nvlink_mesh) {
    for (const config::MeshLink& m : t.mesh) {
      add_pair(tp.gpu_vertex[m.a], tp.gpu_vertex[m.b], t.intra_bandwidth_Bps * m.count,
               t.intra_class);
      tp.direct.push_back(m);
    }
  }
  std::vector<uint32_t> gpu_switch(t.gpus, kNone);
  std::vector<uint32_t> pcie_switch_vertex, socket_vertex;
  std::map<uint32_t, uint32_t> switch_socket;  // PCIe switch vertex -> its socket's
  if (t.pcie.present) {
    for (size_t s = 0; s < t.pcie.switches.size(); ++s) {
      const uint32_t v = add_vertex(VertexKind::pcie_switch);
      pcie_switch_vertex.push_back(v);
      for (int g : t.pcie.switches[s]) {
        gpu_switch[g] = v;
        add_pair(tp.gpu_vertex[g], v, t.pcie.bandwidth_Bps, t.pcie.link_class);
      }
    }
    for (const auto& sock : t.pcie.sockets) {
      const uint32_t v = add_vertex(VertexKind::socket);
      socket_vertex.push_back(v);
      for (int s : sock) {
        switch_socket[pcie_switch_vertex[s]] = v;
        add_pair(pcie_switch_vertex[s], v, t.pcie.bandwidth_Bps, t.pcie.link_class);
      }
    }
    for (size_t a = 0; a < socket_vertex.size(); ++a) {
      for (size_t b = a + 1; b < socket_vertex.size(); ++b) {
        add_pair(socket_vertex[a], socket_vertex[b], t.pcie.socket_bandwidth_Bps,
                 t.pcie.socket_class);
      }
    }
  }
  tp.gpu_nic.assign(t.gpus, -1);
  for (size_t n = 0; n < t.nics.size(); ++n) {
    const config::NicSpec& nic = t.nics[n];
    const uint32_t v = add_vertex(VertexKind::nic);
    tp.nic_vertex.push_back(v);
    for (int g : nic.gpus) tp.gpu_nic[g] = static_cast<int>(n);
    if (t.pcie.present) {
      // Under the switch of its GPUs; a NIC that serves GPUs under several switches hangs off
      // the root complex above them (its own root port, as on hosts whose GPUs each have one).
      const uint32_t sw = gpu_switch[nic.gpus.front()];
      const bool one_switch =
          std::all_of(nic.gpus.begin(), nic.gpus.end(), [&](int g) { return gpu_switch[g] == sw; });
      const auto sock = switch_socket.find(sw);
      add_pair(v, one_switch || sock == switch_socket.end() ? sw : sock->second,
               t.pcie.bandwidth_Bps, t.pcie.nic_class);
    } else {
      for (int g : nic.gpus) add_pair(tp.gpu_vertex[g], v, nic.bandwidth_Bps, nic.link_class);
    }
  }
  find_template_paths(tp, t);
  templates_.push_back(std::move(tp));
}

// Endpoint-to-endpoint paths by BFS that never passes through a GPU or a NIC.
void Cluster::find_template_paths(NodeTemplate& tp, const config::NodeType& t) const {
  std::vector<uint32_t> endpoints = tp.gpu_vertex;
  endpoints.insert(endpoints.end(), tp.nic_vertex.begin(), tp.nic_vertex.end());
  tp.endpoints = static_cast<uint32_t>(endpoints.size());
  std::vector<std::vector<uint32_t>> out(tp.kinds.size());
  for (uint32_t l = 0; l < tp.links.size(); ++l) out[tp.links[l].src].push_back(l);
  tp.paths.assign(tp.endpoints * tp.endpoints, {});
  for (uint32_t e = 0; e < tp.endpoints; ++e) {
    std::vector<uint32_t> parent(tp.kinds.size(), kNone);
    std::vector<bool> seen(tp.kinds.size(), false);
    std::deque<uint32_t> queue{endpoints[e]};
    seen[endpoints[e]] = true;
    while (!queue.empty()) {
      const uint32_t u = queue.front();
      queue.pop_front();
      const bool terminal =
          u != endpoints[e] && (tp.kinds[u] == VertexKind::gpu || tp.kinds[u] == VertexKind::nic);
      if (terminal) continue;
      for (uint32_t l : out[u]) {
        const uint32_t v = tp.links[l].dst;
        if (seen[v]) continue;
        seen[v] = true;
        parent[v] = l;
        queue.push_back(v);
      }
    }
    for (uint32_t f = 0; f < tp.endpoints; ++f) {
      if (f == e) continue;
      if (!seen[endpoints[f]]) {
        const bool f_gpu = f < tp.gpu_vertex.size();
        const bool e_gpu = e < tp.gpu_vertex.size();
        if (e_gpu && f_gpu) {
          throw InputError(cfg_.file + ": node_types: node type \"" + t.name + "\": GPU " +
                           std::to_string(e) + " cannot reach GPU " + std::to_string(f) +
                           " (add a PCIe tree or links)");
        }
        continue;  // a NIC not reachable from every GPU is fine: routes use the GPU's own NIC
      }
      std::vector<uint32_t> path;
      for (uint32_t v = endpoints[f]; v != endpoints[e]; v = tp.links[parent[v]].src) {
        path.push_back(parent[v]);
      }
      std::reverse(path.begin(), path.end());
      tp.paths[e * tp.endpoints + f] = std::move(path);
    }
  }
}

Link Cluster::make_link(VertexId a, VertexId b, double bandwidth, const std::string& cls,
                        Time extra_latency, const std::string& where) const {
  // The fabric adds hundreds of thousands of links of one or two classes: the last class found
  // is asked first.
  if (last_class_ != nullptr && *last_class_name_ == cls) {
    return Link{a,
                b,
                bandwidth,
                bandwidth * last_class_->efficiency,
                Time::from_seconds(last_class_->latency_s) + extra_latency,
                last_class_};
  }
  auto it = cfg_.link_classes.find(cls);
  if (it == cfg_.link_classes.end()) {
    throw InputError(where + ": unknown link class \"" + cls + "\"");
  }
  Link l;
  l.src = a;
  l.dst = b;
  l.bandwidth_Bps = bandwidth;
  l.capacity_Bps = bandwidth * it->second.efficiency;
  l.latency = Time::from_seconds(it->second.latency_s) + extra_latency;
  l.cls = &it->second;
  last_class_name_ = &it->first;
  last_class_ = &it->second;
  return l;
}

LinkId Cluster::add_link(VertexId a, VertexId b, double bandwidth, const std::string& cls,
                         Time extra_latency, const std::string& where) {
  links_.push_back(make_link(a, b, bandwidth, cls, extra_latency, where));
  return static_cast<LinkId>(links_.size() - 1);
}

void Cluster::build_nodes() {
  uint32_t nic_count = 0;
  // Each node type's links made once (class, capacity, latency; vertices local to the node),
  // when its first node is: every node of the type copies them at its own offset.
  std::vector<std::vector<Link>> type_links(cfg_.node_types.size());
  std::vector<bool> made(cfg_.node_types.size(), false);
  size_t nodes = 0, vertices = 0, links = 0, gpus = 0, nics = 0;
  for (const config::NodeGroup& group : cfg_.groups) {
    uint32_t type = 0;
    while (cfg_.node_types[type].name != group.node_type) ++type;
    const size_t count = static_cast<size_t>(std::max(0, group.count));
    nodes += count;
    vertices += count * templates_[type].kinds.size();
    links += count * templates_[type].links.size();
    gpus += count * static_cast<size_t>(cfg_.node_types[type].gpus);
    nics += count * cfg_.node_types[type].nics.size();
  }
  // Room for the fabric's links too (two a NIC; two between each leaf and each spine), so that
  // the node links are not copied again as build_fabric adds them.
  links += 2 * nics;
  const config::Fabric& f = cfg_.fabric;
  const size_t spines = static_cast<size_t>(std::max(1, f.spines));
  if (f.kind == config::FabricKind::fat_tree && f.nics_per_leaf > 0) {
    links += 2 * spines * ((nics + static_cast<size_t>(f.nics_per_leaf) - 1) / f.nics_per_leaf);
  } else if (f.kind == config::FabricKind::rail_optimized && f.nodes_per_unit > 0) {
    size_t rails = 0;
    for (const config::NodeType& t : cfg_.node_types) rails = std::max(rails, t.nics.size());
    links += 2 * spines * rails *
             ((nodes + static_cast<size_t>(f.nodes_per_unit) - 1) / f.nodes_per_unit);
  }
  nodes_.reserve(nodes);
  vertex_kind_.reserve(vertices);
  links_.reserve(links);
  gpus_.reserve(gpus);
  for (size_t gi = 0; gi < cfg_.groups.size(); ++gi) {
    const config::NodeGroup& group = cfg_.groups[gi];
    uint32_t type = 0;
    while (cfg_.node_types[type].name != group.node_type) ++type;
    const config::NodeType& t = cfg_.node_types[type];
    const NodeTemplate& tp = templates_[type];
    const config::GpuProfile* profile = &cfg_.gpu_types.at(t.gpu);
    if (group.count > 0 && !made[type]) {
      const std::string where = cfg_.file + ": node_types: \"" + t.name + "\"";
      for (const TemplateLink& tl : tp.links) {
        type_links[type].push_back(
            make_link(tl.src, tl.dst, tl.bandwidth_Bps, tl.cls, Time(), where));
      }
      made[type] = true;
    }
    for (int c = 0; c < group.count; ++c) {
      Node n;
      n.type = type;
      n.first_gpu = static_cast<GpuId>(gpus_.size());
      n.gpu_count = static_cast<uint32_t>(t.gpus);
      n.vertex_base = static_cast<VertexId>(vertex_kind_.size());
      n.link_base = static_cast<LinkId>(links_.size());
      n.first_nic = nic_count;
      nic_count += static_cast<uint32_t>(t.nics.size());
      const uint32_t node_index = static_cast<uint32_t>(nodes_.size());
      vertex_kind_.insert(vertex_kind_.end(), tp.kinds.begin(), tp.kinds.end());
      for (Link l : type_links[type]) {
        l.src += n.vertex_base;
        l.dst += n.vertex_base;
        links_.push_back(l);
      }
      for (int g = 0; g < t.gpus; ++g) {
        gpus_.push_back(Gpu{node_index, static_cast<uint32_t>(g), profile});
      }
      for (size_t k = 0; k < t.nics.size(); ++k) {
        nics_.push_back(NicPort{node_index, static_cast<uint32_t>(k), kNone, 0, 0});
      }
      nodes_.push_back(n);
    }
  }
}

uint32_t Cluster::add_switch(std::string name) {
  switch_vertex_.push_back(static_cast<VertexId>(vertex_kind_.size()));
  vertex_kind_.push_back(VertexKind::fabric_switch);
  switch_name_.push_back(std::move(name));
  return static_cast<uint32_t>(switch_vertex_.size() - 1);
}

const config::NicSpec& Cluster::nic_spec(const NicPort& p) const {
  return node_type(p.node).nics[p.index];
}

VertexId Cluster::nic_vertex(const NicPort& p) const {
  return nodes_[p.node].vertex_base + templates_[nodes_[p.node].type].nic_vertex[p.index];
}

void Cluster::attach_nic(NicPort& p, uint32_t sw, Time switch_latency) {
  const config::NicSpec& spec = nic_spec(p);
  const std::string where = cfg_.file + ": fabric";
  p.fabric_switch = sw;
  // Egress shaping (tc netem on the instance): its rate caps the NIC's way out, its delay is paid
  // by every packet leaving.
  const double out_Bps = spec.egress_rate_Bps > 0
                             ? std::min(spec.bandwidth_Bps, spec.egress_rate_Bps)
                             : spec.bandwidth_Bps;
  p.up = add_link(nic_vertex(p), switch_vertex_[sw], out_Bps, spec.link_class,
                  Time::from_seconds(spec.egress_delay_s), where);
  p.down = add_link(switch_vertex_[sw], nic_vertex(p), spec.bandwidth_Bps, spec.link_class,
                    switch_latency, where);
}

// Leaves in [0, leaves) link to every spine. A leaf's uplinks are built for the ports it has
// (`ports` NICs of its fastest kind), whether or not every port is in use: the last scalable unit
// or leaf of a cluster that does not fill it keeps the fabric's full uplinks, not a share scaled
// by its NICs (one node alone in a unit would otherwise reach each spine at 1/spines of its NIC's
// speed, and every flow, pinned to one spine, would crawl).
void Cluster::connect_spines(uint32_t leaves, int spines, double ports) {
  if (leaves <= 1) return;
  const config::Fabric& f = cfg_.fabric;
  const Time hop = Time::from_seconds(f.latency_s);
  const std::string where = cfg_.file + ": fabric";
  const int s_count = std::max(1, spines);
  std::vector<uint32_t> spine;
  for (int s = 0; s < s_count; ++s) spine.push_back(add_switch("spine" + std::to_string(s)));
  std::vector<double> fastest(leaves, 0);
  std::vector<std::string> cls(leaves);
  for (const NicPort& p : nics_) {
    fastest[p.fabric_switch] = std::max(fastest[p.fabric_switch], nic_spec(p).bandwidth_Bps);
    if (cls[p.fabric_switch].empty()) cls[p.fabric_switch] = nic_spec(p).link_class;
  }
  for (uint32_t l = 0; l < leaves; ++l) {
    if (fastest[l] == 0) continue;
    const double bw = ports * fastest[l] / f.oversubscription / s_count;
    for (uint32_t s : spine) {
      add_link(switch_vertex_[l], switch_vertex_[s], bw, cls[l], hop, where);
      add_link(switch_vertex_[s], switch_vertex_[l], bw, cls[l], hop, where);
    }
  }
}

void Cluster::build_fabric() {
  const config::Fabric& f = cfg_.fabric;
  const Time hop = Time::from_seconds(f.latency_s);
  switch (f.kind) {
    case config::FabricKind::single_switch: {
      if (cfg_.sites.empty()) {
        const uint32_t sw = add_switch("switch");
        for (NicPort& p : nics_) attach_nic(p, sw, hop);
        break;
      }
      // A switch per site, its nodes' NICs on it, and the wide-area links between them.
      std::vector<uint32_t> site_switch;
      for (const std::string& s : cfg_.sites) site_switch.push_back(add_switch("site." + s));
      const std::vector<int> site = node_sites();
      for (NicPort& p : nics_) attach_nic(p, site_switch[site[p.node]], hop);
      add_wan_links(site_switch, cfg_.file + ": fabric");
      break;
    }
    case config::FabricKind::fat_tree: {
      const uint32_t per = static_cast<uint32_t>(f.nics_per_leaf);
      const uint32_t leaves = (static_cast<uint32_t>(nics_.size()) + per - 1) / per;
      for (uint32_t l = 0; l < leaves; ++l) add_switch("leaf" + std::to_string(l));
      for (size_t i = 0; i < nics_.size(); ++i)
        attach_nic(nics_[i], static_cast<uint32_t>(i / per), hop);
      connect_spines(leaves, f.spines, per);
      break;
    }
    case config::FabricKind::rail_optimized: {
      uint32_t rails = 0;
      for (const config::NodeType& t : cfg_.node_types) {
        rails = std::max(rails, static_cast<uint32_t>(t.nics.size()));
      }
      const uint32_t per = static_cast<uint32_t>(f.nodes_per_unit);
      const uint32_t units = (static_cast<uint32_t>(nodes_.size()) + per - 1) / per;
      for (uint32_t u = 0; u < units; ++u) {
        for (uint32_t r = 0; r < rails; ++r) {
          add_switch("unit" + std::to_string(u) + ".rail" + std::to_string(r));
        }
      }
      for (NicPort& p : nics_) attach_nic(p, (p.node / per) * rails + p.index, hop);
      connect_spines(units * rails, f.spines, per);
      pxn_ = true;
      break;
    }
    case config::FabricKind::explicit_links:
      build_explicit_fabric();
      break;
  }
}

// fabric.switches and fabric.links as the file gives them: switch to switch, NIC to switch.
void Cluster::build_explicit_fabric() {
  const config::Fabric& f = cfg_.fabric;
  std::map<std::string, uint32_t> by_name;
  for (const config::ExplicitSwitch& s : f.switches) by_name[s.name] = add_switch(s.name);
  std::vector<int> nic_links(nics_.size(), 0);
  auto resolve_nic = [&](const std::string& name) -> int {
    unsigned node = 0, nic = 0;
    char tail = 0;
    if (std::sscanf(name.c_str(), "node%u.nic%u%c", &node, &nic, &tail) != 2) return -1;
    if (node >= nodes_.size() || nic >= node_type(node).nics.size()) return -2;
    return static_cast<int>(nodes_[node].first_nic + nic);
  };
  for (const config::ExplicitLink& l : f.links) {
    const auto sa = by_name.find(l.a);
    const auto sb = by_name.find(l.b);
    const int na = sa == by_name.end() ? resolve_nic(l.a) : -1;
    const int nb = sb == by_name.end() ? resolve_nic(l.b) : -1;
    auto dangling = [&](const std::string& end) {
      return InputError(l.where + ": dangling link: \"" + end +
                        "\" is neither a switch of fabric.switches nor an existing nodeN.nicK");
    };
    if (sa == by_name.end() && na < 0) throw dangling(l.a);
    if (sb == by_name.end() && nb < 0) throw dangling(l.b);
    if (sa == by_name.end() && sb == by_name.end()) {
      throw InputError(l.where + ": a link joins two NICs; NICs connect to switches");
    }
    if (sa != by_name.end() && sb != by_name.end()) {
      const Time la = Time::from_seconds(f.switches[sa->second].latency_s);
      const Time lb = Time::from_seconds(f.switches[sb->second].latency_s);
      add_link(switch_vertex_[sa->second], switch_vertex_[sb->second], l.bandwidth_Bps,
               l.link_class, la, l.where);
      add_link(switch_vertex_[sb->second], switch_vertex_[sa->second], l.bandwidth_Bps,
               l.link_class, lb, l.where);
      continue;
    }
    const int nic = na >= 0 ? na : nb;
    const uint32_t sw = sa != by_name.end() ? sa->second : sb->second;
    if (++nic_links[nic] > 1) {
      throw InputError(l.where + ": NIC " + (na >= 0 ? l.a : l.b) +
                       " has more than one link; each NIC connects to exactly one switch");
    }
    attach_nic(nics_[nic], sw, Time::from_seconds(f.switches[sw].latency_s));
  }
  for (size_t i = 0; i < nics_.size(); ++i) {
    if (nic_links[i] == 0 && nodes_.size() > 1) {
      throw InputError(cfg_.file + ": fabric.links: node" + std::to_string(nics_[i].node) + ".nic" +
                       std::to_string(nics_[i].index) +
                       " has no link (every NIC needs exactly one link, to a switch)");
    }
  }
}

std::vector<int> Cluster::node_sites() const {
  std::vector<int> site;
  for (const config::NodeGroup& g : cfg_.groups) site.insert(site.end(), g.count, g.site);
  return site;
}

void Cluster::add_wan_links(const std::vector<uint32_t>& site_switch, const std::string& where) {
  for (const config::WanLink& w : cfg_.wan) {
    const Time one_way = Time::from_seconds(w.latency_s);
    const uint32_t a = switch_vertex_[site_switch[w.a]], b = switch_vertex_[site_switch[w.b]];
    add_link(a, b, w.bandwidth_Bps, w.link_class, one_way, where);
    add_link(b, a, w.bandwidth_Bps, w.link_class, one_way, where);
  }
}

void Cluster::build_switch_routes() {
  const size_t s = switch_vertex_.size();
  vertex_switch_.assign(vertex_kind_.size(), kNone);
  for (uint32_t i = 0; i < s; ++i) vertex_switch_[switch_vertex_[i]] = i;
  switch_out_.assign(s, {});
  for (LinkId l = 0; l < links_.size(); ++l) {
    const uint32_t a = vertex_switch_[links_[l].src];
    const uint32_t b = vertex_switch_[links_[l].dst];
    if (a != kNone && b != kNone && !link_failed(l)) switch_out_[a].push_back({l, b});
  }
  switch_out_by_to_ = switch_out_;
  for (std::vector<SwitchHop>& hops : switch_out_by_to_) {
    std::sort(hops.begin(), hops.end(), [](const SwitchHop& x, const SwitchHop& y) {
      return x.to != y.to ? x.to < y.to : x.link < y.link;
    });
  }
  // Breadth-first from every switch (BFS backwards is the same as forwards: every switch link
  // comes in a pair), a level at a time over sets of switches as bits: the next level is the
  // union of the level's neighbour sets, S / 64 words per switch reached instead of one step
  // per link. Switches with the same neighbours (every leaf of a two-level fat tree, every
  // spine) are one search: from either, every other switch is as far, and each is two hops from
  // the other; so the searches are one per class (2 on a 12,288-node SuperPOD, not 3,088).
  const size_t words = (s + 63) / 64;
  std::vector<uint64_t> neighbours(s * words, 0);
  for (uint32_t u = 0; u < s; ++u) {
    for (const SwitchHop& h : switch_out_[u]) {
      neighbours[u * words + h.to / 64] |= uint64_t{1} << (h.to % 64);
    }
  }
  switch_class_.assign(s, 0);
  class_rep_.clear();
  class_linked_.clear();
  {
    std::map<std::span<const uint64_t>, uint32_t,
             decltype([](std::span<const uint64_t> a, std::span<const uint64_t> b) {
               return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
             })>
        by_neighbours;
    for (uint32_t u = 0; u < s; ++u) {
      const std::span<const uint64_t> row(&neighbours[u * words], words);
      // A switch linked to itself is not like another with the same neighbours.
      const bool self = (row[u / 64] >> (u % 64)) & 1;
      const auto [it, fresh] =
          self ? std::pair{by_neighbours.end(), true}
               : by_neighbours.emplace(row, static_cast<uint32_t>(class_rep_.size()));
      if (fresh) {
        switch_class_[u] = static_cast<uint32_t>(class_rep_.size());
        class_rep_.push_back(u);
        class_linked_.push_back(!switch_out_[u].empty());
      } else {
        switch_class_[u] = it->second;
      }
    }
  }
  class_dist_.assign(class_rep_.size() * s, kFar);
  std::vector<uint64_t> seen(words), level(words), next(words);
  for (uint32_t c = 0; c < class_rep_.size(); ++c) {
    const uint32_t from = class_rep_[c];
    uint16_t* dist = &class_dist_[c * s];
    dist[from] = 0;
    std::fill(seen.begin(), seen.end(), 0);
    std::fill(level.begin(), level.end(), 0);
    seen[from / 64] = level[from / 64] = uint64_t{1} << (from % 64);
    for (uint16_t d = 1;; ++d) {
      std::fill(next.begin(), next.end(), 0);
      for (size_t w = 0; w < words; ++w) {
        for (uint64_t bits = level[w]; bits != 0; bits &= bits - 1) {
          const uint64_t* row = &neighbours[(w * 64 + std::countr_zero(bits)) * words];
          for (size_t k = 0; k < words; ++k) next[k] |= row[k];
        }
      }
      bool any = false;
      for (size_t w = 0; w < words; ++w) {
        next[w] &= ~seen[w];
        seen[w] |= next[w];
        any = any || next[w] != 0;
        for (uint64_t bits = next[w]; bits != 0; bits &= bits - 1) {
          dist[w * 64 + std::countr_zero(bits)] = d;
        }
      }
      if (!any) break;
      level.swap(next);
    }
  }
  // Every switch that holds a NIC must reach every other such switch (one member of a class
  // stands for the rest: each reaches what the class's search reached, and the others of its
  // class through any neighbour).
  std::vector<uint32_t> used;
  for (const NicPort& p : nics_) {
    if (p.fabric_switch != kNone) used.push_back(p.fabric_switch);
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<char> checked(class_rep_.size(), 0);
  for (uint32_t a : used) {
    if (checked[switch_class_[a]]) continue;
    checked[switch_class_[a]] = 1;
    for (uint32_t b : used) {
      if (b != a && switch_distance(a, b) == kFar) {
        throw InputError(cfg_.file + ": fabric: switch \"" + switch_name_[a] +
                         "\" cannot reach switch \"" + switch_name_[b] + "\"");
      }
    }
  }
}

uint16_t Cluster::switch_distance(uint32_t from, uint32_t to) const {
  if (from == to) return 0;
  const uint32_t c = switch_class_[from];
  if (to == class_rep_[c]) return class_linked_[c] ? 2 : kFar;
  return class_dist_[c * switch_vertex_.size() + to];
}

std::vector<double> Cluster::capacities() const {
  std::vector<double> c;
  c.reserve(links_.size());
  for (const Link& l : links_) c.push_back(l.capacity_Bps);
  return c;
}

void Cluster::fail_link(LinkId l) {
  if (l >= links_.size()) throw InputError("fail_link: no link " + std::to_string(l));
  if (failed_.empty()) failed_.assign(links_.size(), 0);
  if (failed_[l]) return;
  for (size_t i = 0; i < nics_.size(); ++i) {
    if (nics_[i].up != l && nics_[i].down != l) continue;
    const NicPort& p = nics_[i];
    const Node& n = nodes_[p.node];
    const size_t count = templates_[n.type].nic_vertex.size();
    if (nic_down_.empty()) nic_down_.assign(nics_.size(), 0);
    size_t working = 0;
    for (size_t k = 0; k < count; ++k)
      working += !nic_down_[n.first_nic + k] && n.first_nic + k != i;
    if (working == 0) {
      throw InputError("perturbation link: " + link_name(l) + " is the last working NIC of node" +
                       std::to_string(p.node) +
                       "; a node without a NIC cannot train with the rest");
    }
    nic_down_[i] = 1;
    failed_[l] = 1;
    links_scaled_ = true;
    return;
  }
  if (vertex_switch_[links_[l].src] == kNone || vertex_switch_[links_[l].dst] == kNone) {
    throw InputError("perturbation link: " + link_name(l) +
                     " is inside a node; hetsim cannot fail it (the routes inside a node are "
                     "fixed): give it a factor above 0");
  }
  failed_[l] = 1;
  links_scaled_ = true;
  try {
    build_switch_routes();
  } catch (const InputError& e) {
    throw InputError("perturbation link: with " + link_name(l) + " failed, " + e.what());
  }
}

int Cluster::working_nic(uint32_t node, int nic) const {
  if (nic < 0 || nic_down_.empty()) return nic;
  const Node& n = nodes_[node];
  const int count = static_cast<int>(templates_[n.type].nic_vertex.size());
  for (int k = 0; k < count; ++k) {
    const int c = (nic + k) % count;
    if (!nic_down_[n.first_nic + c]) return c;
  }
  throw RunError("route: node" + std::to_string(node) + " has no working NIC");
}

void Cluster::scale_link_capacity(LinkId l, double factor) {
  links_.at(l).capacity_Bps *= factor;
  links_scaled_ = true;
}

std::string Cluster::gpu_name(GpuId g) const {
  return "node" + std::to_string(gpus_[g].node) + ".gpu" + std::to_string(gpus_[g].local);
}

std::string Cluster::link_name(LinkId l) const {
  auto vname = [&](VertexId v) -> std::string {
    if (vertex_switch_[v] != kNone) return switch_name_[vertex_switch_[v]];
    const auto it = std::upper_bound(nodes_.begin(), nodes_.end(), v,
                                     [](VertexId x, const Node& n) { return x < n.vertex_base; });
    const Node& n = *(it - 1);
    const uint32_t local = v - n.vertex_base;
    const uint32_t idx = static_cast<uint32_t>(it - 1 - nodes_.begin());
    static const char* names[] = {"gpu", "nvswitch", "pcie", "socket", "nic", "switch"};
    return "node" + std::to_string(idx) + "." + names[static_cast<int>(vertex_kind_[v])] +
           std::to_string(local);
  };
  return vname(links_[l].src) + "->" + vname(links_[l].dst);
}

void Cluster::append_node_path(std::vector<LinkId>& out, uint32_t node, uint32_t from_ep,
                               uint32_t to_ep) const {
  const Node& n = nodes_[node];
  const std::vector<uint32_t>& path = templates_[n.type].path(from_ep, to_ep);
  const size_t at = out.size();
  out.resize(at + path.size());
  for (size_t i = 0; i < path.size(); ++i) out[at + i] = n.link_base + path[i];
}

void Cluster::append_switch_path(std::vector<LinkId>& out, uint32_t from_sw, uint32_t to_sw,
                                 uint64_t hash) const {
  uint32_t u = from_sw;
  while (u != to_sw) {
    // The links one hop nearer: counted, then the hash picks one (no list is kept).
    const uint16_t want = static_cast<uint16_t>(switch_distance(u, to_sw) - 1);
    const uint64_t draw = splitmix64(hash ^ (static_cast<uint64_t>(u) << 40));
    if (want == 0) {
      // The last hop: the links to `to_sw` itself, in switch_out_'s order, found by bisection.
      const std::vector<SwitchHop>& by_to = switch_out_by_to_[u];
      const auto [first, last] =
          std::equal_range(by_to.begin(), by_to.end(), SwitchHop{0, to_sw},
                           [](const SwitchHop& x, const SwitchHop& y) { return x.to < y.to; });
      out.push_back(first[static_cast<ptrdiff_t>(draw % static_cast<uint64_t>(last - first))].link);
      return;
    }
    auto nearer = [&](const SwitchHop& h) { return switch_distance(h.to, to_sw) == want; };
    size_t options = 0;
    for (const SwitchHop& h : switch_out_[u]) options += nearer(h);
    size_t k = draw % options;
    SwitchHop pick{0, to_sw};
    for (const SwitchHop& h : switch_out_[u]) {
      if (nearer(h) && k-- == 0) {
        pick = h;
        break;
      }
    }
    out.push_back(pick.link);
    u = pick.to;
  }
}

std::vector<LinkId> Cluster::route(GpuId a, GpuId b) const {
  std::vector<LinkId> out;
  append_route(out, a, b);
  return out;
}

void Cluster::append_route(std::vector<LinkId>& out, GpuId a, GpuId b) const {
  if (a == b) return;
  const Gpu& ga = gpus_[a];
  const Gpu& gb = gpus_[b];
  if (ga.node == gb.node) {
    append_node_path(out, ga.node, ga.local, gb.local);
    return;
  }
  const Node& na = nodes_[ga.node];
  const Node& nb = nodes_[gb.node];
  const NodeTemplate& ta = templates_[na.type];
  const NodeTemplate& tb = templates_[nb.type];
  if (ta.gpu_nic[ga.local] < 0 || tb.gpu_nic[gb.local] < 0) {
    throw RunError("route " + gpu_name(a) + " -> " + gpu_name(b) + ": a node without NICs");
  }
  // A NIC that is down (fail_link) hands its GPUs to the node's next working one.
  int dst_nic = working_nic(gb.node, tb.gpu_nic[gb.local]);
  int src_nic = working_nic(ga.node, ta.gpu_nic[ga.local]);
  const uint32_t a_gpus = static_cast<uint32_t>(ta.gpu_vertex.size());
  const uint32_t b_gpus = static_cast<uint32_t>(tb.gpu_vertex.size());
  // PXN: on NVSwitch nodes of a rail-optimised fabric, go to the destination's rail over NVLink.
  // Where this node's NIC on that rail is down, take its next working rail, and arrive on the
  // same rail where the destination node has it (as NCCL's rings, found over the NICs that
  // work, use one rail at both ends of a hop).
  const config::NodeType& type_a = cfg_.node_types[na.type];
  if (pxn_ && type_a.intra == config::IntraKind::nvswitch &&
      dst_nic < static_cast<int>(ta.nic_vertex.size())) {
    const int rail = working_nic(ga.node, dst_nic);
    if (rail != dst_nic && rail < static_cast<int>(tb.nic_vertex.size()) &&
        working_nic(gb.node, rail) == rail) {
      dst_nic = rail;
    }
    src_nic = rail;
  }
  if (src_nic != ta.gpu_nic[ga.local] && type_a.intra == config::IntraKind::nvswitch) {
    const int relay = type_a.nics[src_nic].gpus.front();
    if (relay != static_cast<int>(ga.local)) append_node_path(out, ga.node, ga.local, relay);
    append_node_path(out, ga.node, relay, a_gpus + src_nic);
  } else {
    append_node_path(out, ga.node, ga.local, a_gpus + src_nic);
  }
  const NicPort& pa = nics_[na.first_nic + src_nic];
  const NicPort& pb = nics_[nb.first_nic + dst_nic];
  out.push_back(pa.up);
  append_switch_path(
      out, pa.fabric_switch, pb.fabric_switch,
      splitmix64((static_cast<uint64_t>(na.first_nic + src_nic) << 32) | (nb.first_nic + dst_nic)));
  out.push_back(pb.down);
  append_node_path(out, gb.node, b_gpus + dst_nic, gb.local);
}

config::LinkKind Cluster::route_kind(std::span<const LinkId> route) const {
  config::LinkKind k = config::LinkKind::nvlink;
  for (LinkId l : route) {
    if (kind_rank(links_[l].cls->kind) > kind_rank(k)) k = links_[l].cls->kind;
  }
  return k;
}

Time Cluster::route_latency(std::span<const LinkId> route) const {
  Time t;
  for (LinkId l : route) t += links_[l].latency;
  return t;
}

double Cluster::route_flow_cap(std::span<const LinkId> route) const {
  if (!has_socket_transport_) return 0;
  // TCP's window over the round trip: the way there and back, taken as twice the way there.
  const double rtt = 2 * route_latency(route).seconds();
  double cap = 0;
  for (LinkId l : route) {
    const config::LinkClass& c = *links_[l].cls;
    if (!c.socket_transport) continue;
    double per_socket = std::numeric_limits<double>::infinity();
    if (c.flow_cap_Bps > 0) per_socket = c.flow_cap_Bps * c.efficiency;
    if (c.tcp_window_bytes > 0 && rtt > 0)
      per_socket = std::min(per_socket, c.tcp_window_bytes / rtt);
    if (!std::isfinite(per_socket)) continue;
    const double connection = per_socket * c.sockets;
    cap = cap == 0 ? connection : std::min(cap, connection);
  }
  return cap;
}

double Cluster::route_capacity(std::span<const LinkId> route) const {
  double c = std::numeric_limits<double>::infinity();
  for (LinkId l : route) c = std::min(c, links_[l].capacity_Bps);
  return c;
}

const std::vector<config::MeshLink>& Cluster::direct_links(uint32_t node_type) const {
  return templates_[node_type].direct;
}

}  // namespace hetsim::platform
