// Plain, validated structs for GPU profiles, link classes and clusters, as read from YAML.
// Parsing and validation live in cluster_loader.cpp; nothing here knows YAML.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/key_table.h"

namespace hetsim::config {

struct GpuProfile {
  std::string name;
  std::string description;
  std::string architecture;
  double compute_capability = 0;  // CUDA's (8.0 for A100); 0: not an NVIDIA part, or not given
  int sms = 0;
  double memory_bytes = 0;
  double memory_bandwidth_Bps = 0;
  double l2_bytes = 0;
  std::map<std::string, double> peak_flops;  // precision -> FLOP/s (dense)
  // precision -> FLOP/s a dense matmul sustains under continuous load (power or clock capped);
  // absent: the board holds its peak as far as the datasheet efficiencies go.
  std::map<std::string, double> sustained_flops;
  double tdp_w = 0;
  std::optional<double> price_per_hour;
  std::string source;  // file it came from
};

// Link kinds select NCCL's per-step latency row (sim/network/protocol.h).
enum class LinkKind { nvlink, pcie, socket, network };

struct LinkClass {
  std::string name;
  LinkKind kind = LinkKind::network;
  double efficiency = 1;  // usable share of the line rate
  double latency_s = 0;   // per hop
  // Per collective call whose links include this class: the time before its transfer starts,
  // beyond the protocol's base latency (`collective_overhead`; point-to-point sends pay none).
  double collective_overhead_s = 0;
  // NCCL's socket transport over kernel TCP (`transport: socket`, network classes only): one
  // NCCL connection (a channel's send to its peer) spreads each message over `sockets` TCP
  // connections (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), and each TCP connection moves at
  // most min(`flow_cap`, `tcp_window` / RTT): the cloud's cap on one 5-tuple flow, and TCP's
  // window over the path's round trip. The connection's cap is `sockets` times that (0: none);
  // Cluster::route_flow_cap works it out per route. `flow_cap_spread` is the cap outside a
  // cluster placement group (ClusterConfig::placement_group false), where a cloud gives one.
  bool socket_transport = false;
  int sockets = 1;
  double flow_cap_Bps = 0;
  double flow_cap_spread_Bps = 0;
  double tcp_window_bytes = 0;
};

enum class IntraKind { nvswitch, nvlink_mesh, pcie };

struct MeshLink {
  int a = 0, b = 0, count = 1;
};

struct PcieTree {
  bool present = false;
  std::string link_class;
  // The class of the links that attach NICs to the tree, where it differs from the GPUs'
  // (`nic_link_class`): a NIC's DMA from host memory is a plain PCIe transfer where GPU pairs
  // without peer-to-peer go through NCCL's host-staged copies. link_class when not given.
  std::string nic_class;
  double bandwidth_Bps = 0;
  std::vector<std::vector<int>> switches;  // GPUs under each PCIe switch
  std::vector<std::vector<int>> sockets;   // switches under each CPU socket
  std::string socket_class;
  double socket_bandwidth_Bps = 0;
};

struct NicSpec {
  std::string link_class;
  double bandwidth_Bps = 0;
  std::vector<int> gpus;  // GPUs that use this NIC
  // Traffic shaping on the NIC's egress, as `tc qdisc ... netem delay D rate R` sets it
  // (`shaping:` of the cluster or of the node type): D added to every packet's way out, the
  // outbound rate capped at R (0: none).
  double egress_delay_s = 0;
  double egress_rate_Bps = 0;
};

struct NodeType {
  std::string name;
  std::string gpu;
  int gpus = 0;
  IntraKind intra = IntraKind::nvswitch;
  std::string intra_class;
  double intra_bandwidth_Bps = 0;  // nvswitch: per GPU per direction; mesh: per NVLink
  std::vector<MeshLink> mesh;
  PcieTree pcie;
  std::vector<NicSpec> nics;
};

// A cluster file's `groups:` entry: `count` nodes of one node type, at one site.
struct NodeGroup {
  std::string node_type;
  int count = 0;
  int site = -1;  // index into ClusterConfig::sites (`site:`), -1 without sites
};

// Geo-distributed clusters: each site's nodes sit behind a switch of their own (the cluster's
// `fabric` is each site's, single_switch), and `wan:` joins every pair of sites by a link of its
// own bandwidth and one-way latency, as a provider's backbone or `tc netem` on the gateways
// gives them.
struct WanLink {
  int a = 0, b = 0;  // site indices
  double bandwidth_Bps = 0;
  double latency_s = 0;
  std::string link_class;
};

enum class FabricKind { single_switch, fat_tree, rail_optimized, explicit_links };

struct ExplicitSwitch {
  std::string name;
  double latency_s = 0;
};

struct ExplicitLink {
  std::string a, b;
  double bandwidth_Bps = 0;
  std::string link_class;
  std::string where;  // file:line, for errors found while building
};

struct Fabric {
  FabricKind kind = FabricKind::single_switch;
  int nics_per_leaf = 0;
  int nodes_per_unit = 0;
  int spines = 0;
  double oversubscription = 1;
  double latency_s = 0;
  std::vector<ExplicitSwitch> switches;
  std::vector<ExplicitLink> links;
};

struct ClusterConfig {
  std::string name;
  std::string file;
  std::vector<NodeType> node_types;
  std::vector<NodeGroup> groups;
  Fabric fabric;
  std::map<std::string, GpuProfile> gpu_types;    // every profile the cluster uses
  std::map<std::string, LinkClass> link_classes;  // every class known
  std::vector<std::string> sites;                 // site names, in the order groups first name them
  std::vector<WanLink> wan;
  // `placement_group:` whether the instances share a cloud's cluster placement group (default
  // true); false takes each socket class's flow_cap_spread as its flow cap.
  bool placement_group = true;
};

struct ClusterOptions {
  std::optional<long> nodes;      // --nodes N (single-group clusters)
  std::vector<std::string> sets;  // --set PATH=VALUE
};

// Reads a cluster from a file path, or from a built-in name such as "dgx-a100".
// Throws InputError naming the file, the line, the field and what was expected.
ClusterConfig load_cluster(const std::string& path_or_name, const ClusterOptions& options = {});
ClusterConfig load_cluster_text(const std::string& text, const std::string& file,
                                const ClusterOptions& options = {});

// The built-in GPU profiles and link classes (topologies/gpus/*.yaml, link_classes.yaml).
const std::map<std::string, GpuProfile>& builtin_gpus();

// The keys of a GPU profile (topologies/gpus/*.yaml, or a cluster's `gpu_types:` entry), declared
// once (config/key_table.h): the loader checks a profile's keys from this table; `hetsim
// reference gpu-keys` and `gpu-schema` write docs/reference/gpu-keys.md and
// docs/schemas/gpu.schema.json from it.
const std::vector<Key>& gpu_profile_keys();
std::string gpu_keys_markdown();
nlohmann::ordered_json gpu_json_schema();
// The keys of a cluster file and of topologies/link_classes.yaml, likewise
// (config/cluster_keys.cpp; `hetsim reference cluster-keys`, `cluster-schema`, `link-class-keys`,
// `link-class-schema`).
const std::vector<Key>& cluster_keys();
std::string cluster_keys_markdown();
nlohmann::ordered_json cluster_json_schema();
const std::vector<Key>& link_class_keys();
std::string link_class_keys_markdown();
nlohmann::ordered_json link_class_json_schema();
const std::map<std::string, LinkClass>& builtin_link_classes();
std::vector<std::string> builtin_cluster_names();

}  // namespace hetsim::config
