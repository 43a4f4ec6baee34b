// The keys of a cluster file and of the link classes file, declared once (config/key_table.h):
// cluster_loader.cpp checks a file's keys and reads its choices from these tables, and `hetsim
// reference cluster-keys | cluster-schema | link-class-keys | link-class-schema` writes the
// reference pages and JSON Schemas from them.
#include <string>

#include "sim/config/cluster_config.h"
#include "sim/config/limits.h"

namespace hetsim::config {

namespace {

using T = KeyType;

// A link class's keys, under `prefix` ("link_classes.*" in a cluster, "classes.*" in the link
// classes file).
void add_link_class_keys(std::vector<Key>& keys, std::string_view prefix) {
  auto k = [&](std::string_view name) {
    return keep_name(std::string(prefix) + "." + std::string(name));
  };
  keys.push_back({prefix, T::map, {}, 0, 0, "", "One link class, under its name", ""});
  keys.push_back(
      {k("kind"),
       T::choice,
       {"nvlink", "pcie", "socket", "network"},
       0,
       0,
       "",
       "What the link is: it selects NCCL's per-step latency row (NVLink, PCIe, network)",
       ""});
  keys.push_back({k("efficiency"),
                  T::number,
                  {},
                  0,
                  1,
                  "1",
                  "Share of the line rate bulk transfers reach",
                  ""});
  keys.push_back({k("latency"), T::time, {}, 0, 0, "0", "Per hop (wire and NIC)", ""});
  keys.push_back({k("collective_overhead"),
                  T::time,
                  {},
                  0,
                  0,
                  "0",
                  "Fixed cost of one collective call on this class, 0 to 10 ms",
                  ""});
  keys.push_back({k("transport"),
                  T::choice,
                  {"rdma", "socket"},
                  0,
                  0,
                  "rdma",
                  "NCCL's transport on a network class: RDMA (InfiniBand, RoCE, EFA) or its socket "
                  "transport over kernel TCP",
                  ""});
  keys.push_back({k("sockets"),
                  T::integer,
                  {},
                  1,
                  64,
                  "1",
                  "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD: the TCP flows per peer",
                  "",
                  "transport: socket"});
  keys.push_back({k("flow_cap"),
                  T::bandwidth,
                  {},
                  0,
                  0,
                  "none",
                  "The cloud's cap on one TCP flow inside a placement group",
                  "",
                  "transport: socket"});
  keys.push_back({k("flow_cap_spread"),
                  T::bandwidth,
                  {},
                  0,
                  0,
                  "flow_cap",
                  "The cap on one flow outside a placement group (placement_group: false)",
                  "",
                  "transport: socket"});
  keys.push_back({k("tcp_window"),
                  T::size,
                  {},
                  0,
                  0,
                  "none",
                  "TCP's largest window: one flow moves at most a window per round trip",
                  "",
                  "transport: socket"});
}

// The cluster's name and its node types: their GPUs, the fabric inside a node, its PCIe tree
// and its NICs.
std::vector<Key> node_type_keys() {
  return {
      {"name", T::text, {}, 0, 0, "the file's name", "The cluster's name", ""},
      {"node_types", T::list, {}, 0, 0, "", "The kinds of node, at least one", ""},
      {"node_types[]",
       T::map,
       {},
       0,
       0,
       "",
       "A node type: its GPUs and fabrics, or a built-in AWS instance's",
       ""},
      {"node_types[].instance",
       T::text,
       {},
       0,
       0,
       "",
       "A built-in instance (p3.16xlarge, p4d.24xlarge, ...): its node type, links and classes",
       ""},
      {"node_types[].name", T::text, {}, 0, 0, "the instance's", "The name groups use", ""},
      {"node_types[].gpu",
       T::text,
       {},
       0,
       0,
       "",
       "A GPU profile: built-in (topologies/gpus/) or one of gpu_types",
       "",
       "no instance"},
      {"node_types[].gpus",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kGpusPerNode),
       "",
       "GPUs in one node",
       "",
       "no instance"},
      {"node_types[].intra",
       T::map,
       {},
       0,
       0,
       "",
       "The fabric between the GPUs of one node",
       "",
       "no instance"},
      {"node_types[].intra.kind",
       T::choice,
       {"nvswitch", "nvlink_mesh", "pcie"},
       0,
       0,
       "",
       "An NVSwitch, point-to-point NVLinks, or the PCIe tree only",
       ""},
      {"node_types[].intra.link_class",
       T::text,
       {},
       0,
       0,
       "",
       "The links' class",
       "",
       "kind: nvswitch, nvlink_mesh"},
      {"node_types[].intra.bandwidth",
       T::bandwidth,
       {},
       0,
       0,
       "",
       "Each GPU's bandwidth into the switch, per direction",
       "",
       "kind: nvswitch"},
      {"node_types[].intra.link_bandwidth",
       T::bandwidth,
       {},
       0,
       0,
       "",
       "One NVLink's bandwidth per direction",
       "",
       "kind: nvlink_mesh"},
      {"node_types[].intra.links",
       T::list,
       {},
       0,
       0,
       "",
       "[gpu a, gpu b, number of links] for each pair that is joined",
       "",
       "kind: nvlink_mesh"},
  };
}

// A node type's PCIe tree: switches, sockets, the link between sockets.
void add_pcie_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"node_types[].pcie",
       T::map,
       {},
       0,
       0,
       "none (needed with intra kind pcie)",
       "The PCIe tree: GPUs under switches under CPU sockets",
       "",
       "no instance"},
      {"node_types[].pcie.link_class", T::text, {}, 0, 0, "", "The GPUs' PCIe links' class", ""},
      {"node_types[].pcie.nic_link_class",
       T::text,
       {},
       0,
       0,
       "link_class",
       "The class of a NIC's link to its switch",
       ""},
      {"node_types[].pcie.bandwidth",
       T::bandwidth,
       {},
       0,
       0,
       "",
       "One x16 link's bandwidth per direction",
       ""},
      {"node_types[].pcie.switches",
       T::list,
       {},
       0,
       0,
       "",
       "The GPUs under each PCIe switch (every GPU once)",
       ""},
      {"node_types[].pcie.sockets",
       T::list,
       {},
       0,
       0,
       "one socket",
       "The switches under each CPU socket (every switch once)",
       ""},
      {"node_types[].pcie.inter_socket",
       T::map,
       {},
       0,
       0,
       "",
       "The link between sockets (needed with two or more)",
       ""},
      {"node_types[].pcie.inter_socket.link_class", T::text, {}, 0, 0, "", "Its class", ""},
      {"node_types[].pcie.inter_socket.bandwidth",
       T::bandwidth,
       {},
       0,
       0,
       "",
       "Its bandwidth per direction",
       ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A node type's NICs and their shaping.
void add_nic_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"node_types[].nics",
       T::any,
       {},
       0,
       0,
       "none (a single node)",
       "The scale-out NICs: a map {count, link_class, bandwidth} (GPUs shared out evenly) or a "
       "list of NICs each with its GPUs",
       "",
       "no instance"},
      {"node_types[].nics.count",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kGpusPerNode),
       "",
       "NICs in one node, at most its GPUs",
       ""},
      {"node_types[].nics.link_class", T::text, {}, 0, 0, "", "Their class", ""},
      {"node_types[].nics.bandwidth", T::bandwidth, {}, 0, 0, "", "Each NIC's line rate", ""},
      {"node_types[].nics[]", T::map, {}, 0, 0, "", "One NIC", ""},
      {"node_types[].nics[].link_class", T::text, {}, 0, 0, "", "Its class", ""},
      {"node_types[].nics[].bandwidth", T::bandwidth, {}, 0, 0, "", "Its line rate", ""},
      {"node_types[].nics[].gpus", T::devices, {}, 0, 0, "", "The GPUs that use it", ""},
      {"node_types[].shaping",
       T::map,
       {},
       0,
       0,
       "the cluster's",
       "tc netem on this node type's NICs (as the cluster's shaping)",
       ""},
      {"node_types[].shaping.delay",
       T::time,
       {},
       0,
       0,
       "0",
       "Added one-way delay on each NIC's egress, 0 to 10 s",
       ""},
      {"node_types[].shaping.rate",
       T::bandwidth,
       {},
       0,
       0,
       "none",
       "Cap on each NIC's egress rate",
       ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// How many nodes of each type, and the network between them.
void add_network_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"groups", T::list, {}, 0, 0, "", "How many nodes of each type, at least one group", ""},
      {"groups[]", T::map, {}, 0, 0, "", "One group of nodes", ""},
      {"groups[].node_type", T::text, {}, 0, 0, "", "A node type's name", ""},
      {"groups[].count",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kNodes),
       "",
       "Nodes in the group",
       ""},
      {"groups[].site",
       T::text,
       {},
       0,
       0,
       "none",
       "The site (data centre) the nodes are in; sites are joined by wan",
       ""},
      {"fabric",
       T::map,
       {},
       0,
       0,
       "none (needed with two or more nodes)",
       "The scale-out network between the nodes' NICs",
       ""},
      {"fabric.kind",
       T::choice,
       {"single_switch", "fat_tree", "rail_optimized", "explicit"},
       0,
       0,
       "",
       "One switch, a two-level fat tree, rail-optimized leaves, or switches and links given",
       ""},
      {"fabric.latency", T::time, {}, 0, 0, "100ns", "Per switch hop", ""},
      {"fabric.nics_per_leaf",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kGpus),
       "",
       "NICs under one leaf switch",
       "",
       "kind: fat_tree"},
      {"fabric.nodes_per_unit",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kNodes),
       "",
       "Nodes whose NICs of one rail share a leaf",
       "",
       "kind: rail_optimized"},
      {"fabric.spines",
       T::integer,
       {},
       1,
       static_cast<double>(limits::kGpus),
       "1",
       "Spine switches",
       "",
       "kind: fat_tree, rail_optimized"},
      {"fabric.oversubscription",
       T::number,
       {},
       0,
       1e6,
       "1",
       "Leaf down:up bandwidth ratio, at least 1",
       "",
       "kind: fat_tree, rail_optimized"},
      {"fabric.switches", T::list, {}, 0, 0, "", "The switches", "", "kind: explicit"},
      {"fabric.switches[]", T::map, {}, 0, 0, "", "One switch", ""},
      {"fabric.switches[].name", T::text, {}, 0, 0, "", "Its name, as links give it", ""},
      {"fabric.switches[].latency", T::time, {}, 0, 0, "fabric.latency", "Its hop latency", ""},
      {"fabric.links",
       T::list,
       {},
       0,
       0,
       "",
       "The links between switches and node NICs",
       "",
       "kind: explicit"},
      {"fabric.links[]", T::map, {}, 0, 0, "", "One link", ""},
      {"fabric.links[].a", T::text, {}, 0, 0, "", "A switch or a NIC (NODE.nicN)", ""},
      {"fabric.links[].b", T::text, {}, 0, 0, "", "The other end", ""},
      {"fabric.links[].bandwidth", T::bandwidth, {}, 0, 0, "", "Per direction", ""},
      {"fabric.links[].link_class", T::text, {}, 0, 0, "", "Its class", ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// A cluster's own GPU profiles and link classes, its placement, shaping, and the sites' links.
void add_cluster_option_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"gpu_types",
       T::list,
       {},
       0,
       0,
       "none",
       "GPU profiles of this cluster's own, as topologies/gpus/*.yaml (GPU profile keys)",
       ""},
      {"gpu_types[]", T::map, {}, 0, 0, "", "One GPU profile", ""},
      {"link_classes",
       T::map,
       {},
       0,
       0,
       "none",
       "Link classes of this cluster's own, by name (they override the built-in ones of "
       "topologies/link_classes.yaml)",
       ""},
      {"placement_group",
       T::flag,
       {},
       0,
       0,
       "true",
       "Instances in one cluster placement group (AWS): TCP flows take flow_cap, else "
       "flow_cap_spread",
       ""},
      {"shaping", T::map, {}, 0, 0, "none", "tc netem on every NIC's egress", ""},
      {"shaping.delay", T::time, {}, 0, 0, "0", "Added one-way delay, 0 to 10 s", ""},
      {"shaping.rate", T::bandwidth, {}, 0, 0, "none", "Cap on each NIC's egress rate", ""},
      {"wan",
       T::list,
       {},
       0,
       0,
       "none (needed with two or more sites)",
       "The wide-area links, one between every pair of sites",
       ""},
      {"wan[]", T::map, {}, 0, 0, "", "One wide-area link", ""},
      {"wan[].a", T::text, {}, 0, 0, "", "A site", ""},
      {"wan[].b", T::text, {}, 0, 0, "", "The other site", ""},
      {"wan[].bandwidth", T::bandwidth, {}, 0, 0, "", "Per direction", ""},
      {"wan[].latency", T::time, {}, 0, 0, "", "One way, 0 to 10 s", ""},
      {"wan[].link_class", T::text, {}, 0, 0, "wan", "Its class", ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

std::vector<Key> make_cluster_keys() {
  std::vector<Key> keys = node_type_keys();
  add_pcie_keys(keys);
  add_nic_keys(keys);
  add_network_keys(keys);
  add_cluster_option_keys(keys);
  // A cluster's own GPU profiles and link classes take the keys of their own files.
  for (const Key& g : gpu_profile_keys()) {
    Key k = g;
    k.name = keep_name("gpu_types[]." + std::string(g.name));
    keys.push_back(k);
  }
  add_link_class_keys(keys, "link_classes.*");
  return keys;
}

std::vector<Key> make_link_class_keys() {
  std::vector<Key> keys = {
      {"classes", T::map, {}, 0, 0, "", "The link classes, by name", ""},
  };
  add_link_class_keys(keys, "classes.*");
  return keys;
}

}  // namespace

const std::vector<Key>& cluster_keys() {
  static const std::vector<Key> table = make_cluster_keys();
  return table;
}

const std::vector<Key>& link_class_keys() {
  static const std::vector<Key> table = make_link_class_keys();
  return table;
}

std::string cluster_keys_markdown() {
  return "# Cluster keys\n\n"
         "<!-- Generated by `hetsim reference cluster-keys` from sim/config/cluster_keys.cpp; do "
         "not edit. -->\n\n"
         "The keys of a cluster file (`topologies/*.yaml`, or your own). `node_types[]` is one "
         "entry of the list `node_types`; `link_classes.*` one class under its name. A key marked "
         "\"only with\" belongs to one form of its map (an `intra` of that `kind`, a node type "
         "with or without `instance`). How the parts fit together, with examples: [clusters and "
         "GPU profiles](../../topologies/README.md). The keys of `gpu_types[]` are those of [a GPU "
         "profile](gpu-keys.md), and the built-in link classes' file has [its own "
         "page](link-class-keys.md). Editors check cluster files against [the JSON "
         "Schema](../schemas/cluster.schema.json).\n\n" +
         keys_markdown(cluster_keys(), false);
}

nlohmann::ordered_json cluster_json_schema() {
  return keys_json_schema(cluster_keys(), "hetsim cluster",
                          "Generated by `hetsim reference cluster-schema` from "
                          "sim/config/cluster_keys.cpp; do not edit.",
                          {"node_types", "groups"});
}

std::string link_class_keys_markdown() {
  return "# Link class keys\n\n"
         "<!-- Generated by `hetsim reference link-class-keys` from sim/config/cluster_keys.cpp; "
         "do not edit. -->\n\n"
         "The keys of topologies/link_classes.yaml, the built-in link classes (a cluster's own "
         "`link_classes` take the same keys). What each class is and where its figures come from: "
         "[the network model](../network.md). Editors check the file against [the JSON "
         "Schema](../schemas/link-classes.schema.json).\n\n" +
         keys_markdown(link_class_keys(), false);
}

nlohmann::ordered_json link_class_json_schema() {
  return keys_json_schema(link_class_keys(), "hetsim link classes",
                          "Generated by `hetsim reference link-class-schema` from "
                          "sim/config/cluster_keys.cpp; do not edit.",
                          {"classes"});
}

}  // namespace hetsim::config
