// YAML -> ClusterConfig, GpuProfile and LinkClass, with strict validation; see cluster_config.h.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/config/cluster_config.h"
#include "sim/config/embedded_data.h"
#include "sim/config/limits.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::config {

namespace {

std::string idx(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

double positive(const std::string& file, const YAML::Node& node, std::string_view path,
                std::string_view key, Dimension dim) {
  const double v = get_quantity(file, node, path, key, dim);
  if (!(v > 0)) {
    throw InputError(where(file, node[std::string(key)]) + ": " + join_path(path, key) +
                     ": expected a positive " + dimension_name(dim) + ", got \"" +
                     node[std::string(key)].as<std::string>() + "\"");
  }
  return v;
}

// A choice key's values, from the cluster's (or the link classes file's) key table.
std::vector<std::string> choices(std::string_view key) {
  const bool link_class = key.starts_with("classes.");
  return choices_of(find_key(link_class ? link_class_keys() : cluster_keys(), key,
                             link_class ? "the link class keys" : "the cluster keys"));
}

std::vector<std::string> keys_of(const auto& map) {
  std::vector<std::string> k;
  for (const auto& [name, _] : map) k.push_back(name);
  return k;
}

// One of `choices`, or an error listing them.
std::string choice_of(const std::string& file, const YAML::Node& node, std::string_view path,
                      std::string_view key, const std::vector<std::string>& choices) {
  return choices[get_choice(file, node, path, key, choices)];
}

std::vector<int> int_list(const std::string& file, const YAML::Node& node, const std::string& path,
                          int limit, const char* what) {
  if (!node.IsSequence()) {
    throw InputError(where(file, node) + ": " + path + ": expected a list of " + what);
  }
  std::vector<int> out;
  for (size_t i = 0; i < node.size(); ++i) {
    int v = -1;
    try {
      v = node[i].as<int>();
    } catch (const YAML::Exception&) {
    }
    if (v < 0 || v >= limit) {
      throw InputError(where(file, node[i]) + ": " + idx(path, i) + ": expected a " + what +
                       " index in [0, " + std::to_string(limit) + ")");
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::vector<int>> int_lists(const std::string& file, const YAML::Node& node,
                                        const std::string& path, int limit, const char* what) {
  if (!node.IsSequence()) {
    throw InputError(where(file, node) + ": " + path + ": expected a list of lists of " + what);
  }
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < node.size(); ++i)
    out.push_back(int_list(file, node[i], idx(path, i), limit, what));
  return out;
}

// Every value in [0, n) appears exactly once across the lists.
void check_partition(const std::string& file, const YAML::Node& node, const std::string& path,
                     const std::vector<std::vector<int>>& lists, int n, const char* what) {
  std::vector<int> seen(n, 0);
  for (const auto& l : lists) {
    for (int v : l) ++seen[v];
  }
  for (int v = 0; v < n; ++v) {
    if (seen[v] != 1) {
      throw InputError(where(file, node) + ": " + path + ": " + what + " " + std::to_string(v) +
                       (seen[v] == 0 ? " is in no entry" : " is in more than one entry") +
                       " (each must be in exactly one)");
    }
  }
}

GpuProfile parse_gpu(const std::string& file, const YAML::Node& n, const std::string& path) {
  check_keys(file, n, path, key_names(gpu_profile_keys()));
  GpuProfile g;
  g.source = file;
  g.name = get_string(file, n, path, "name");
  g.description = get_string(file, n, path, "description", g.name);
  g.architecture = get_string(file, n, path, "architecture", "");
  g.compute_capability = get_number(file, n, path, "compute_capability", 0.0);
  if (g.compute_capability < 0 || g.compute_capability > 100) {
    throw InputError(where(file, n["compute_capability"]) + ": " +
                     join_path(path, "compute_capability") +
                     ": expected a CUDA compute capability such as 8.0");
  }
  g.sms = static_cast<int>(get_int(file, n, path, "sms", 1, limits::kSms));
  g.memory_bytes = positive(file, n, path, "memory", Dimension::bytes);
  g.memory_bandwidth_Bps = positive(file, n, path, "memory_bandwidth", Dimension::bandwidth);
  g.l2_bytes = get_quantity(file, n, path, "l2_cache", Dimension::bytes, 0.0);
  const std::string ppath = join_path(path, "peak");
  const YAML::Node peak = require(file, n, path, "peak");
  const std::vector<std::string> precisions = key_names(gpu_profile_keys(), "peak");
  check_keys(file, peak, ppath, precisions);
  for (const std::string& p : precisions) {
    if (peak[p]) g.peak_flops[p] = positive(file, peak, ppath, p, Dimension::flop_rate);
  }
  if (g.peak_flops.empty()) {
    throw InputError(where(file, peak) + ": " + ppath + ": expected at least one precision");
  }
  // The dense matmul rate the board holds under continuous load (power or clock limit): at most
  // the peak of the same precision, which it throttles (see workload::throttle_factor).
  if (const YAML::Node sustained = n["sustained"]) {
    const std::string spath = join_path(path, "sustained");
    check_keys(file, sustained, spath, precisions);
    for (const std::string& p : precisions) {
      if (!sustained[p]) continue;
      const double v = positive(file, sustained, spath, p, Dimension::flop_rate);
      const auto it = g.peak_flops.find(p);
      if (it == g.peak_flops.end()) {
        throw InputError(where(file, sustained[p]) + ": " + join_path(spath, p) + ": no peak." + p +
                         " to sustain (give the peak first)");
      }
      if (v > it->second) {
        throw InputError(where(file, sustained[p]) + ": " + join_path(spath, p) + ": " +
                         sustained[p].as<std::string>() + " exceeds peak." + p + " (" +
                         peak[p].as<std::string>() +
                         "); a board cannot sustain more than its peak");
      }
      g.sustained_flops[p] = v;
    }
  }
  g.tdp_w = get_quantity(file, n, path, "tdp", Dimension::power, 0.0);
  if (n["price_per_hour"]) g.price_per_hour = get_number(file, n, path, "price_per_hour");
  return g;
}

std::map<std::string, LinkClass> parse_link_classes(const std::string& file, const YAML::Node& n,
                                                    const std::string& path) {
  if (!n.IsMap()) throw InputError(where(file, n) + ": " + path + ": expected a map");
  std::map<std::string, LinkClass> out;
  for (const auto& kv : n) {
    const std::string name = kv.first.as<std::string>();
    const std::string p = join_path(path, name);
    const YAML::Node c = kv.second;
    check_keys(file, c, p, key_names(link_class_keys(), "classes.*"));
    LinkClass lc;
    lc.name = name;
    const std::string kind = choice_of(file, c, p, "kind", choices("classes.*.kind"));
    lc.kind = kind == "nvlink"   ? LinkKind::nvlink
              : kind == "pcie"   ? LinkKind::pcie
              : kind == "socket" ? LinkKind::socket
                                 : LinkKind::network;
    lc.efficiency = get_number(file, c, p, "efficiency", 1.0);
    if (!(lc.efficiency > 0 && lc.efficiency <= 1)) {
      throw InputError(where(file, c["efficiency"]) + ": " + join_path(p, "efficiency") +
                       ": expected a number in (0, 1]");
    }
    lc.latency_s = get_quantity(file, c, p, "latency", Dimension::time, 0.0);
    lc.collective_overhead_s =
        get_quantity(file, c, p, "collective_overhead", Dimension::time, 0.0);
    if (!(lc.collective_overhead_s >= 0 && lc.collective_overhead_s <= 0.01)) {
      throw InputError(where(file, c["collective_overhead"]) + ": " +
                       join_path(p, "collective_overhead") + ": expected a time from 0 s to 10 ms");
    }
    lc.socket_transport =
        get_choice(file, c, p, "transport", choices("classes.*.transport"), "rdma") == 1;
    if (lc.socket_transport && lc.kind != LinkKind::network) {
      throw InputError(where(file, c["transport"]) + ": " + join_path(p, "transport") +
                       ": socket applies to network classes (kind: network)");
    }
    if (!lc.socket_transport) {
      for (const char* k : {"sockets", "flow_cap", "flow_cap_spread", "tcp_window"}) {
        if (c[k]) {
          throw InputError(where(file, c[k]) + ": " + join_path(p, k) +
                           ": applies to NCCL's socket transport only (transport: socket)");
        }
      }
    } else {
      // NCCL caps NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD at 64 (MAX_SOCKETS).
      lc.sockets = static_cast<int>(get_int(file, c, p, "sockets", 1, 64, 1));
      lc.flow_cap_Bps = get_quantity(file, c, p, "flow_cap", Dimension::bandwidth, 0.0);
      lc.flow_cap_spread_Bps =
          get_quantity(file, c, p, "flow_cap_spread", Dimension::bandwidth, lc.flow_cap_Bps);
      lc.tcp_window_bytes = get_quantity(file, c, p, "tcp_window", Dimension::bytes, 0.0);
      for (const char* k : {"flow_cap", "flow_cap_spread", "tcp_window"}) {
        if (c[k] && !(get_quantity(file, c, p, k,
                                   k[0] == 't' ? Dimension::bytes : Dimension::bandwidth) > 0)) {
          throw InputError(where(file, c[k]) + ": " + join_path(p, k) +
                           ": expected a positive value (leave it out for none)");
        }
      }
    }
    out[name] = lc;
  }
  return out;
}

const EmbeddedFile* find_embedded(const std::string& path) {
  for (const EmbeddedFile& f : embedded_files()) {
    if (path == f.path) return &f;
  }
  return nullptr;
}

// `shaping: {delay: 10ms, rate: 1Gbps}`: tc netem on every NIC's egress (NicSpec).
struct Shaping {
  double delay_s = 0, rate_Bps = 0;
};

class ClusterParser {
 public:
  ClusterParser(const std::string& file, const YAML::Node& root) : file_(file), root_(root) {}

  ClusterConfig parse() {
    check_keys(file_, root_, "", key_names(cluster_keys()));
    ClusterConfig c;
    c.file = file_;
    c.name = get_string(file_, root_, "", "name", std::filesystem::path(file_).stem().string());
    c.link_classes = builtin_link_classes();
    const YAML::Node types = require(file_, root_, "", "node_types");
    if (!types.IsSequence() || types.size() == 0) {
      throw InputError(where(file_, types) + ": node_types: expected a non-empty list");
    }
    read_link_classes(c, types);
    read_node_types(c, types);
    const long total_nodes = read_groups(c);
    if (total_nodes > 1) {
      for (size_t i = 0; i < c.node_types.size(); ++i) {
        if (c.node_types[i].nics.empty()) {
          throw InputError(where(file_, types[i]) + ": " + idx("node_types", i) +
                           ".nics: a cluster of several nodes needs NICs on every node type");
        }
      }
    }
    c.fabric = parse_fabric(static_cast<int>(total_nodes));  // <= kGpus: a node has a GPU
    parse_wan(c);
    check_switch_count(c, total_nodes);
    return c;
  }

 private:
  // Over the built-in link classes: those of the built-in instances the node types take, then
  // the cluster's own link_classes, each overriding the ones before.
  void read_link_classes(ClusterConfig& c, const YAML::Node& types) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (!types[i].IsMap() || !types[i]["instance"]) continue;
      const Instance& inst = instance(types[i], idx("node_types", i));
      if (const YAML::Node lc = inst.root["link_classes"]) {
        for (auto& [k, v] : parse_link_classes(inst.file, lc, "link_classes"))
          c.link_classes[k] = v;
      }
    }
    if (root_["link_classes"]) {
      for (auto& [k, v] : parse_link_classes(file_, root_["link_classes"], "link_classes")) {
        c.link_classes[k] = v;
      }
    }
    classes_ = &c.link_classes;
  }

  // The GPU profiles (built-in and the cluster's own), the placement group, and the node types.
  void read_node_types(ClusterConfig& c, const YAML::Node& types) {
    std::map<std::string, GpuProfile> known = builtin_gpus();
    if (const YAML::Node g = root_["gpu_types"]) {
      if (!g.IsSequence()) throw InputError(where(file_, g) + ": gpu_types: expected a list");
      for (size_t i = 0; i < g.size(); ++i) {
        GpuProfile p = parse_gpu(file_, g[i], idx("gpu_types", i));
        known[p.name] = p;
      }
    }
    c.placement_group = get_bool(file_, root_, "", "placement_group", true);
    if (!c.placement_group) {
      for (auto& [name, cls] : c.link_classes) {
        if (cls.socket_transport) cls.flow_cap_Bps = cls.flow_cap_spread_Bps;
      }
    }
    const Shaping cluster_shaping = shaping(root_, "");
    for (size_t i = 0; i < types.size(); ++i) {
      NodeType t = parse_node_type(types[i], idx("node_types", i), cluster_shaping);
      for (const NodeType& other : c.node_types) {
        if (other.name == t.name) {
          throw InputError(where(file_, types[i]) + ": " + idx("node_types", i) +
                           ".name: duplicate node type \"" + t.name + "\"");
        }
      }
      auto it = known.find(t.gpu);
      if (it == known.end()) {
        throw InputError(where(file_, types[i]["gpu"]) + ": " + idx("node_types", i) +
                         ".gpu: unknown GPU type \"" + t.gpu +
                         "\" (no profile; add one under gpu_types or use a built-in one)" +
                         did_you_mean(t.gpu, keys_of(known)));
      }
      c.gpu_types[t.gpu] = it->second;
      c.node_types.push_back(std::move(t));
    }
  }

  // The groups of nodes and their sites; returns the node count.
  long read_groups(ClusterConfig& c) {
    const YAML::Node groups = require(file_, root_, "", "groups");
    if (!groups.IsSequence() || groups.size() == 0) {
      throw InputError(where(file_, groups) + ": groups: expected a non-empty list");
    }
    std::vector<std::string> type_names;
    for (const NodeType& t : c.node_types) type_names.push_back(t.name);
    long total_nodes = 0, total_gpus = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string p = idx("groups", i);
      check_keys(file_, groups[i], p, key_names(cluster_keys(), "groups[]"));
      NodeGroup g;
      if (groups[i]["site"]) {
        const std::string site = get_string(file_, groups[i], p, "site");
        auto it = std::find(c.sites.begin(), c.sites.end(), site);
        g.site = static_cast<int>(it - c.sites.begin());
        if (it == c.sites.end()) c.sites.push_back(site);
      }
      if ((g.site >= 0) != (i == 0 ? g.site >= 0 : c.groups.front().site >= 0)) {
        throw InputError(where(file_, groups[i]) + ": " + p +
                         ".site: either every group names its site or none does");
      }
      g.node_type = get_string(file_, groups[i], p, "node_type");
      if (std::find(type_names.begin(), type_names.end(), g.node_type) == type_names.end()) {
        throw InputError(where(file_, groups[i]["node_type"]) + ": " + p +
                         ".node_type: unknown node type \"" + g.node_type + "\"" +
                         did_you_mean(g.node_type, type_names));
      }
      g.count = static_cast<int>(get_int(file_, groups[i], p, "count", 1, limits::kNodes));
      total_nodes += g.count;
      for (const NodeType& t : c.node_types) {
        if (t.name == g.node_type) total_gpus += static_cast<long>(g.count) * t.gpus;
      }
      if (total_gpus > limits::kGpus) {
        throw InputError(where(file_, groups[i]["count"]) + ": " + p + ".count: the groups up to " +
                         "this one hold " + std::to_string(total_gpus) +
                         " GPUs, more than hetsim simulates (" + std::to_string(limits::kGpus) +
                         ")");
      }
      c.groups.push_back(g);
    }
    return total_nodes;
  }

  // `wan:` a link between every pair of the sites the groups name.
  void parse_wan(ClusterConfig& c) {
    const YAML::Node w = root_["wan"];
    if (c.sites.empty()) {
      if (w) throw InputError(where(file_, w) + ": wan: no group names a site (groups[i].site)");
      return;
    }
    if (c.fabric.kind != FabricKind::single_switch) {
      throw InputError(where(file_, root_["fabric"]) +
                       ": fabric.kind: with sites each site's nodes sit behind one switch "
                       "(single_switch); other kinds are not built per site");
    }
    const size_t n = c.sites.size();
    if (n < 2) {
      if (w) throw InputError(where(file_, w) + ": wan: one site has no wide-area links");
      return;
    }
    if (!w || !w.IsSequence()) {
      throw InputError((w ? where(file_, w) : file_) +
                       ": wan: expected a list of links, one per "
                       "pair of sites ({a: SITE, b: SITE, bandwidth: 10Gbps, latency: 30ms})");
    }
    std::vector<int> seen(n * n, 0);
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string p = idx("wan", i);
      check_keys(file_, w[i], p, key_names(cluster_keys(), "wan[]"));
      auto site = [&](const char* key) {
        const std::string name = get_string(file_, w[i], p, key);
        auto it = std::find(c.sites.begin(), c.sites.end(), name);
        if (it == c.sites.end()) {
          throw InputError(where(file_, w[i][key]) + ": " + join_path(p, key) +
                           ": unknown site \"" + name + "\" (sites: " + join_names(c.sites) + ")" +
                           did_you_mean(name, c.sites));
        }
        return static_cast<int>(it - c.sites.begin());
      };
      WanLink l;
      l.a = site("a");
      l.b = site("b");
      if (l.a == l.b) {
        throw InputError(where(file_, w[i]) + ": " + p + ": a and b are the same site");
      }
      if (seen[l.a * n + l.b]++ || seen[l.b * n + l.a]++) {
        throw InputError(where(file_, w[i]) + ": " + p + ": the sites " + c.sites[l.a] + " and " +
                         c.sites[l.b] + " are joined twice");
      }
      l.bandwidth_Bps = positive(file_, w[i], p, "bandwidth", Dimension::bandwidth);
      l.latency_s = get_quantity(file_, w[i], p, "latency", Dimension::time);
      if (!(l.latency_s >= 0 && l.latency_s <= 10)) {
        throw InputError(where(file_, w[i]["latency"]) + ": " + join_path(p, "latency") +
                         ": expected a one-way time from 0 s to 10 s");
      }
      l.link_class = w[i]["link_class"] ? link_class(w[i], p) : "wan";
      c.wan.push_back(l);
    }
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        if (!seen[a * n + b] && !seen[b * n + a]) {
          throw InputError(where(file_, w) + ": wan: no link between the sites " + c.sites[a] +
                           " and " + c.sites[b] + " (every pair needs one)");
        }
      }
    }
  }

  Shaping shaping(const YAML::Node& n, const std::string& path, Shaping inherited = {}) const {
    const YAML::Node s = n["shaping"];
    if (!s) return inherited;
    const std::string sp = join_path(path, "shaping");
    if (!s.IsMap()) {
      throw InputError(where(file_, s) + ": " + sp +
                       ": expected a map of delay and rate (e.g. {delay: 10ms, rate: 1Gbps})");
    }
    check_keys(file_, s, sp, key_names(cluster_keys(), "shaping"));
    Shaping out;
    out.delay_s = get_quantity(file_, s, sp, "delay", Dimension::time, 0.0);
    if (!(out.delay_s >= 0 && out.delay_s <= 10)) {
      throw InputError(where(file_, s["delay"]) + ": " + join_path(sp, "delay") +
                       ": expected a time from 0 s to 10 s");
    }
    if (s["rate"]) out.rate_Bps = positive(file_, s, sp, "rate", Dimension::bandwidth);
    return out;
  }

  // A built-in instance (`instance: p3.16xlarge`): the node type of the built-in cluster
  // topologies/aws-<name>.yaml, parsed in that file's own terms.
  struct Instance {
    std::string file;
    YAML::Node root;
  };
  const Instance& instance(const YAML::Node& n, const std::string& path) {
    const std::string name = get_string(file_, n, path, "instance");
    auto it = instances_.find(name);
    if (it != instances_.end()) return it->second;
    // topologies/aws-<name>.yaml; the AMP-era files spell the instance with dashes
    // (aws-g4dn-12xlarge.yaml, aws-p4de-24xlarge.yaml).
    std::string file = "topologies/aws-" + name + ".yaml";
    const EmbeddedFile* f = find_embedded(file);
    if (!f) {
      std::string dashed = name;
      std::replace(dashed.begin(), dashed.end(), '.', '-');
      file = "topologies/aws-" + dashed + ".yaml";
      f = find_embedded(file);
    }
    if (!f) {
      std::vector<std::string> known;
      for (const std::string& c : builtin_cluster_names()) {
        if (c.rfind("aws-", 0) != 0 || c == "aws-p3-g4dn") continue;  // a cluster, not an instance
        std::string n = c.substr(4);
        // g4dn-12xlarge is g4dn.12xlarge: the dash before the size is the instance's dot.
        const size_t dash = n.rfind('-');
        if (n.find('.') == std::string::npos && dash != std::string::npos) n[dash] = '.';
        known.push_back(n);
      }
      throw InputError(where(file_, n["instance"]) + ": " + join_path(path, "instance") +
                       ": unknown instance \"" + name + "\" (built-in: " + join_names(known) + ")" +
                       did_you_mean(name, known));
    }
    return instances_.emplace(name, Instance{file, load_yaml(f->text, file)}).first->second;
  }

  // The fabric's switch count, known before anything is built: routing keeps all-pairs switch
  // distances (limits::kSwitches).
  void check_switch_count(const ClusterConfig& c, long nodes) const {
    long nics = 0;
    size_t rails = 0;
    for (const NodeGroup& g : c.groups) {
      for (const NodeType& t : c.node_types) {
        if (t.name != g.node_type) continue;
        nics += static_cast<long>(g.count) * static_cast<long>(t.nics.size());
        rails = std::max(rails, t.nics.size());
      }
    }
    const Fabric& f = c.fabric;
    long leaves = 1;
    if (f.kind == FabricKind::fat_tree) leaves = (nics + f.nics_per_leaf - 1) / f.nics_per_leaf;
    if (f.kind == FabricKind::rail_optimized) {
      leaves = (nodes + f.nodes_per_unit - 1) / f.nodes_per_unit * static_cast<long>(rails);
    }
    const long switches = f.kind == FabricKind::explicit_links
                              ? static_cast<long>(f.switches.size())
                          : leaves > 1 ? leaves + std::max(1, f.spines)
                                       : leaves;
    if (switches > limits::kSwitches) {
      throw InputError(where(file_, root_["fabric"]) + ": fabric: " + std::to_string(switches) +
                       " switches for " + std::to_string(nodes) +
                       " nodes, more than hetsim routes (" + std::to_string(limits::kSwitches) +
                       "); use fewer nodes, or more NICs per leaf or nodes per unit");
    }
  }

  std::string link_class(const YAML::Node& n, std::string_view path,
                         const char* key = "link_class") {
    const std::string v = get_string(file_, n, path, key);
    if (!classes_->count(v)) {
      throw InputError(where(file_, n[key]) + ": " + join_path(path, key) +
                       ": unknown link class \"" + v + "\" (expected one of " +
                       join_names(keys_of(*classes_)) + ")" + did_you_mean(v, keys_of(*classes_)));
    }
    return v;
  }

  NodeType parse_node_type(const YAML::Node& n, const std::string& path, const Shaping& inherited) {
    if (n.IsMap() && n["instance"]) {
      // A built-in instance's node type, under the name given here (default: the instance's),
      // shaped as this cluster or this entry says.
      const std::string given = "given";
      check_keys(file_, n, path, key_names(cluster_keys(), "node_types[]", "instance", &given));
      const Instance& inst = instance(n, path);
      const YAML::Node types = require(inst.file, inst.root, "", "node_types");
      ClusterParser sub(inst.file, inst.root);
      sub.classes_ = classes_;
      NodeType t = sub.parse_node_type(types[0], "node_types[0]", shaping(n, path, inherited));
      t.name = get_string(file_, n, path, "name", get_string(file_, n, path, "instance"));
      return t;
    }
    check_keys(file_, n, path, key_names(cluster_keys(), "node_types[]", "instance", nullptr));
    const Shaping shaped = shaping(n, path, inherited);
    NodeType t;
    t.name = get_string(file_, n, path, "name");
    t.gpu = get_string(file_, n, path, "gpu");
    t.gpus = static_cast<int>(get_int(file_, n, path, "gpus", 1, limits::kGpusPerNode));
    parse_intra(n, path, t);
    parse_pcie(n, path, t);
    parse_nics(n, path, shaped, t);
    return t;
  }

  // The node's GPU interconnect: NVSwitch, an NVLink mesh (its links), or PCIe alone.
  void parse_intra(const YAML::Node& n, const std::string& path, NodeType& t) {
    const std::string ip = join_path(path, "intra");
    const YAML::Node intra = require(file_, n, path, "intra");
    const std::string kind =
        choice_of(file_, intra, ip, "kind", choices("node_types[].intra.kind"));
    check_keys(file_, intra, ip, key_names(cluster_keys(), "node_types[].intra", "kind", &kind));
    if (kind == "nvswitch") {
      t.intra = IntraKind::nvswitch;
      t.intra_class = link_class(intra, ip);
      t.intra_bandwidth_Bps = positive(file_, intra, ip, "bandwidth", Dimension::bandwidth);
    } else if (kind == "nvlink_mesh") {
      t.intra = IntraKind::nvlink_mesh;
      t.intra_class = link_class(intra, ip);
      t.intra_bandwidth_Bps = positive(file_, intra, ip, "link_bandwidth", Dimension::bandwidth);
      const YAML::Node links = require(file_, intra, ip, "links");
      const std::string lp = join_path(ip, "links");
      if (!links.IsSequence())
        throw InputError(where(file_, links) + ": " + lp + ": expected a list");
      for (size_t i = 0; i < links.size(); ++i) {
        const std::vector<int> v =
            int_list(file_, links[i], idx(lp, i), std::max(t.gpus, 1 << 20), "GPU");
        if (v.size() != 3 || v[0] >= t.gpus || v[1] >= t.gpus || v[0] == v[1] || v[2] < 1) {
          throw InputError(where(file_, links[i]) + ": " + idx(lp, i) +
                           ": expected [gpu a, gpu b, number of links] with two different GPUs in "
                           "[0, " +
                           std::to_string(t.gpus) + ") and at least one link");
        }
        t.mesh.push_back(MeshLink{v[0], v[1], v[2]});
      }
    } else {
      t.intra = IntraKind::pcie;
    }
  }

  // The PCIe tree (switches, sockets and the link between sockets), required with intra pcie.
  void parse_pcie(const YAML::Node& n, const std::string& path, NodeType& t) {
    if (const YAML::Node pcie = n["pcie"]) {
      const std::string pp = join_path(path, "pcie");
      check_keys(file_, pcie, pp, key_names(cluster_keys(), "node_types[].pcie"));
      PcieTree& tree = t.pcie;
      tree.present = true;
      tree.link_class = link_class(pcie, pp);
      tree.nic_class =
          pcie["nic_link_class"] ? link_class(pcie, pp, "nic_link_class") : tree.link_class;
      tree.bandwidth_Bps = positive(file_, pcie, pp, "bandwidth", Dimension::bandwidth);
      const std::string sp = join_path(pp, "switches");
      tree.switches = int_lists(file_, require(file_, pcie, pp, "switches"), sp, t.gpus, "GPU");
      check_partition(file_, pcie["switches"], sp, tree.switches, t.gpus, "GPU");
      const int nsw = static_cast<int>(tree.switches.size());
      if (pcie["sockets"]) {
        const std::string kp = join_path(pp, "sockets");
        tree.sockets = int_lists(file_, pcie["sockets"], kp, nsw, "PCIe switch");
        check_partition(file_, pcie["sockets"], kp, tree.sockets, nsw, "PCIe switch");
      } else {
        tree.sockets.emplace_back();
        for (int s = 0; s < nsw; ++s) tree.sockets.back().push_back(s);
      }
      if (tree.sockets.size() > 1) {
        const std::string xp = join_path(pp, "inter_socket");
        const YAML::Node x = require(file_, pcie, pp, "inter_socket");
        check_keys(file_, x, xp, key_names(cluster_keys(), "node_types[].pcie.inter_socket"));
        tree.socket_class = link_class(x, xp);
        tree.socket_bandwidth_Bps = positive(file_, x, xp, "bandwidth", Dimension::bandwidth);
      }
    } else if (t.intra == IntraKind::pcie) {
      throw InputError(where(file_, n) + ": " + path +
                       ".pcie: missing required field (intra kind "
                       "pcie needs the PCIe tree)");
    }
  }

  // The NICs, as a count spread over the GPUs or a list with their GPUs; each shaped as the
  // cluster or the entry says (tc netem's delay and rate on the way out).
  void parse_nics(const YAML::Node& n, const std::string& path, const Shaping& shaped,
                  NodeType& t) {
    if (const YAML::Node nics = n["nics"]) {
      const std::string np = join_path(path, "nics");
      if (nics.IsMap()) {
        check_keys(file_, nics, np, key_names(cluster_keys(), "node_types[].nics"));
        const int count =
            static_cast<int>(get_int(file_, nics, np, "count", 1, limits::kGpusPerNode));
        if (count > t.gpus) {
          throw InputError(where(file_, nics["count"]) + ": " + np +
                           ".count: more NICs than GPUs; list them with their GPUs instead");
        }
        NicSpec spec;
        spec.link_class = link_class(nics, np);
        spec.bandwidth_Bps = positive(file_, nics, np, "bandwidth", Dimension::bandwidth);
        t.nics.assign(count, spec);
        for (int g = 0; g < t.gpus; ++g)
          t.nics[static_cast<size_t>(g) * count / t.gpus].gpus.push_back(g);
      } else if (nics.IsSequence()) {
        std::vector<std::vector<int>> owners;
        for (size_t i = 0; i < nics.size(); ++i) {
          const std::string p = idx(np, i);
          check_keys(file_, nics[i], p, key_names(cluster_keys(), "node_types[].nics[]"));
          NicSpec spec;
          spec.link_class = link_class(nics[i], p);
          spec.bandwidth_Bps = positive(file_, nics[i], p, "bandwidth", Dimension::bandwidth);
          spec.gpus = int_list(file_, require(file_, nics[i], p, "gpus"), join_path(p, "gpus"),
                               t.gpus, "GPU");
          if (spec.gpus.empty()) {
            throw InputError(where(file_, nics[i]) + ": " + p + ".gpus: expected at least one GPU");
          }
          owners.push_back(spec.gpus);
          t.nics.push_back(spec);
        }
        check_partition(file_, nics, np, owners, t.gpus, "GPU");
      } else {
        throw InputError(where(file_, nics) + ": " + np +
                         ": expected a list of NICs or a map with count");
      }
      for (NicSpec& nic : t.nics) {
        nic.egress_delay_s = shaped.delay_s;
        nic.egress_rate_Bps = shaped.rate_Bps;
      }
    }
  }

  Fabric parse_fabric(int total_nodes) {
    Fabric f;
    const YAML::Node n = root_["fabric"];
    if (!n) {
      if (total_nodes > 1) {
        throw InputError(file_ + ": fabric: missing required field (a cluster of " +
                         std::to_string(total_nodes) + " nodes needs a scale-out fabric)");
      }
      return f;
    }
    const std::string kind = choice_of(file_, n, "fabric", "kind", choices("fabric.kind"));
    check_keys(file_, n, "fabric", key_names(cluster_keys(), "fabric", "kind", &kind));
    f.latency_s = get_quantity(file_, n, "fabric", "latency", Dimension::time, 100e-9);
    if (kind == "single_switch") {
      f.kind = FabricKind::single_switch;
    } else if (kind == "fat_tree" || kind == "rail_optimized") {
      const bool rail = kind == "rail_optimized";
      f.kind = rail ? FabricKind::rail_optimized : FabricKind::fat_tree;
      if (rail) {
        f.nodes_per_unit =
            static_cast<int>(get_int(file_, n, "fabric", "nodes_per_unit", 1, limits::kNodes));
      } else {
        f.nics_per_leaf =
            static_cast<int>(get_int(file_, n, "fabric", "nics_per_leaf", 1, limits::kGpus));
      }
      f.spines = static_cast<int>(get_int(file_, n, "fabric", "spines", 1, limits::kGpus, 1));
      f.oversubscription = get_number(file_, n, "fabric", "oversubscription", 1.0);
      if (!(f.oversubscription >= 1)) {
        throw InputError(where(file_, n["oversubscription"]) +
                         ": fabric.oversubscription: expected a number >= 1 (down:up ratio)");
      }
    } else {
      f.kind = FabricKind::explicit_links;
      const YAML::Node sw = require(file_, n, "fabric", "switches");
      if (!sw.IsSequence())
        throw InputError(where(file_, sw) + ": fabric.switches: expected a list");
      std::set<std::string> names;
      for (size_t i = 0; i < sw.size(); ++i) {
        const std::string p = idx("fabric.switches", i);
        check_keys(file_, sw[i], p, key_names(cluster_keys(), "fabric.switches[]"));
        ExplicitSwitch s{get_string(file_, sw[i], p, "name"),
                         get_quantity(file_, sw[i], p, "latency", Dimension::time, f.latency_s)};
        if (!names.insert(s.name).second) {
          throw InputError(where(file_, sw[i]) + ": " + p + ".name: duplicate switch \"" + s.name +
                           "\"");
        }
        f.switches.push_back(s);
      }
      const YAML::Node links = require(file_, n, "fabric", "links");
      if (!links.IsSequence())
        throw InputError(where(file_, links) + ": fabric.links: expected a list");
      for (size_t i = 0; i < links.size(); ++i) {
        const std::string p = idx("fabric.links", i);
        check_keys(file_, links[i], p, key_names(cluster_keys(), "fabric.links[]"));
        ExplicitLink l;
        l.a = get_string(file_, links[i], p, "a");
        l.b = get_string(file_, links[i], p, "b");
        l.bandwidth_Bps = positive(file_, links[i], p, "bandwidth", Dimension::bandwidth);
        l.link_class = link_class(links[i], p);
        l.where = where(file_, links[i]) + ": " + p;
        f.links.push_back(l);
      }
    }
    return f;
  }

  const std::string& file_;
  const YAML::Node& root_;
  const std::map<std::string, LinkClass>* classes_ = nullptr;
  std::map<std::string, Instance> instances_;
};

}  // namespace

namespace {
std::vector<Key> make_gpu_profile_keys() {
  using T = KeyType;
  constexpr std::string_view all = "";
  std::vector<Key> keys = {
      {"name", T::text, {}, 0, 0, "", "The profile's name, as a cluster's `gpu:` names it", all},
      {"description", T::text, {}, 0, 0, "the name", "One line on the board", all},
      {"architecture", T::text, {}, 0, 0, "", "volta, ampere, hopper, ... (cpu for the host)", all},
      {"compute_capability", T::number, {}, 0, 100, "", "CUDA compute capability (8.0)", all},
      {"sms",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kSms),
       "",
       "Streaming multiprocessors",
       all},
      {"memory", T::size, {}, 0, 0, "", "Device memory (80GiB)", all},
      {"memory_bandwidth",
       T::bandwidth,
       {},
       0,
       0,
       "",
       "Device memory bandwidth, the datasheet's",
       all},
      {"l2_cache", T::size, {}, 0, 0, "0", "Last-level cache", all},
      {"peak",
       T::map,
       {},
       0,
       0,
       "",
       "Dense peak matmul rate per precision, the datasheet's (at least one)",
       all},
      {"sustained",
       T::map,
       {},
       0,
       0,
       "the peak",
       "The dense matmul rate the board holds under continuous load (a power or clock limit), "
       "per precision, at most its peak",
       all},
      {"tdp", T::power, {}, 0, 0, "", "Board power", all},
      {"price_per_hour", T::number, {}, 0, 1e6, "", "On-demand price of one GPU-hour (USD)", all},
  };
  // The precisions, under both maps.
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const char* map : {"peak", "sustained"})
      for (const char* p : {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8"})
        v.push_back(std::string(map) + "." + p);
    return v;
  }();
  for (const std::string& n : names)
    keys.push_back({n, T::flop_rate, {}, 0, 0, "", "This precision's dense matmul rate", all});
  return keys;
}
}  // namespace

const std::vector<Key>& gpu_profile_keys() {
  static const std::vector<Key> table = make_gpu_profile_keys();
  return table;
}

std::string gpu_keys_markdown() {
  return "# GPU profile keys\n\n"
         "<!-- Generated by `hetsim reference gpu-keys` from sim/config/cluster_loader.cpp; do "
         "not edit. -->\n\n"
         "The keys of a GPU profile (`topologies/gpus/*.yaml`, or an entry of a cluster's "
         "`gpu_types:`); `peak` and `sustained` take one rate per precision. How profiles and "
         "clusters "
         "fit together: [clusters and GPU profiles](../../topologies/README.md). Editors check "
         "profiles against [the JSON Schema](../schemas/gpu.schema.json).\n\n" +
         keys_markdown(gpu_profile_keys(), false);
}

nlohmann::ordered_json gpu_json_schema() {
  return keys_json_schema(gpu_profile_keys(), "hetsim GPU profile",
                          "Generated by `hetsim reference gpu-schema` from "
                          "sim/config/cluster_loader.cpp; do not edit.",
                          {"name", "sms", "memory", "memory_bandwidth", "peak"});
}

const std::map<std::string, GpuProfile>& builtin_gpus() {
  static const std::map<std::string, GpuProfile> gpus = [] {
    std::map<std::string, GpuProfile> m;
    for (const EmbeddedFile& f : embedded_files()) {
      const std::string path = f.path;
      if (path.rfind("topologies/gpus/", 0) != 0) continue;
      GpuProfile g = parse_gpu(path, load_yaml(f.text, path), "");
      const std::string expected = std::filesystem::path(path).stem().string();
      if (g.name != expected) {
        throw InputError(path + ": name: \"" + g.name + "\" must match the file name \"" +
                         expected + "\"");
      }
      m[g.name] = g;
    }
    return m;
  }();
  return gpus;
}

const std::map<std::string, LinkClass>& builtin_link_classes() {
  static const std::map<std::string, LinkClass> classes = [] {
    const std::string path = "topologies/link_classes.yaml";
    const EmbeddedFile* f = find_embedded(path);
    if (!f) throw RunError("built-in data is missing " + path);
    const YAML::Node root = load_yaml(f->text, path);
    check_keys(path, root, "", key_names(link_class_keys()));
    return parse_link_classes(path, require(path, root, "", "classes"), "classes");
  }();
  return classes;
}

std::vector<std::string> builtin_cluster_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : embedded_files()) {
    const std::filesystem::path p(f.path);
    if (p.parent_path() == "topologies" && p.extension() == ".yaml" && p.stem() != "link_classes") {
      names.push_back(p.stem().string());
    }
  }
  return names;
}

ClusterConfig load_cluster_text(const std::string& text, const std::string& file,
                                const ClusterOptions& options) {
  YAML::Node root = load_yaml(text, file);
  if (!root.IsMap()) throw InputError(file + ": expected a map at the top level");
  for (const std::string& s : options.sets) {
    try {
      apply_override(root, s);
    } catch (const InputError& e) {
      throw InputError(file + ": " + e.what());
    }
  }
  if (options.nodes) {
    if (*options.nodes < 1 || *options.nodes > limits::kNodes) {
      throw InputError("--nodes: expected an integer from 1 to " + std::to_string(limits::kNodes) +
                       ", got " + std::to_string(*options.nodes));
    }
    const YAML::Node groups = root["groups"];
    if (!groups.IsSequence() || groups.size() != 1) {
      throw InputError(file +
                       ": --nodes needs a cluster with exactly one group; use --set "
                       "groups[i].count=N instead");
    }
    YAML::Node g0 = groups[0];
    g0["count"] = *options.nodes;
  }
  return ClusterParser(file, root).parse();
}

ClusterConfig load_cluster(const std::string& path_or_name, const ClusterOptions& options) {
  if (std::filesystem::is_regular_file(path_or_name)) {
    return load_cluster_text(read_text_file(path_or_name), path_or_name, options);
  }
  if (std::filesystem::is_directory(path_or_name)) {
    throw InputError(path_or_name + ": is a directory, expected a cluster file");
  }
  for (const std::string& candidate :
       {path_or_name, "topologies/" + path_or_name, "topologies/" + path_or_name + ".yaml"}) {
    if (const EmbeddedFile* f = find_embedded(candidate)) {
      return load_cluster_text(f->text, f->path, options);
    }
  }
  const std::vector<std::string> names = builtin_cluster_names();
  throw InputError(path_or_name + ": no such cluster file, nor a built-in cluster (built-in: " +
                   join_names(names) + ")" + did_you_mean(path_or_name, names));
}

}  // namespace hetsim::config
