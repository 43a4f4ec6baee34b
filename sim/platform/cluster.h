// The cluster graph: GPUs, switches, NICs and directional links built from a ClusterConfig,
// and the routes between GPUs. Each node type is laid out once as a template (its vertices,
// links and intra-node paths); nodes instantiate it at an offset, so routing inside a node is
// a table lookup and routing between nodes only searches the (small) switch graph.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/config/cluster_config.h"
#include "sim/core/time.h"

namespace hetsim::platform {

using GpuId = uint32_t;
using LinkId = uint32_t;
using VertexId = uint32_t;

enum class VertexKind { gpu, nvswitch, pcie_switch, socket, nic, fabric_switch };

struct Link {
  VertexId src = 0, dst = 0;
  double bandwidth_Bps = 0;  // line rate, per direction
  double capacity_Bps = 0;   // bandwidth * class efficiency
  Time latency;
  const config::LinkClass* cls = nullptr;
};

struct Gpu {
  uint32_t node = 0;
  uint32_t local = 0;
  const config::GpuProfile* profile = nullptr;
};

struct Node {
  uint32_t type = 0;  // index into config().node_types
  GpuId first_gpu = 0;
  uint32_t gpu_count = 0;
  VertexId vertex_base = 0;
  LinkId link_base = 0;
  uint32_t first_nic = 0;  // global NIC index of its NIC 0
};

class Cluster {
 public:
  explicit Cluster(config::ClusterConfig cfg);

  const config::ClusterConfig& config() const { return cfg_; }
  // Whether some link class has a cost per collective call (LinkClass::collective_overhead_s),
  // so that planning a collective need not look for one otherwise.
  bool has_collective_overhead() const { return has_collective_overhead_; }
  size_t gpu_count() const { return gpus_.size(); }
  size_t node_count() const { return nodes_.size(); }
  const Gpu& gpu(GpuId g) const { return gpus_[g]; }
  const Node& node(uint32_t n) const { return nodes_[n]; }
  const config::NodeType& node_type(uint32_t n) const { return cfg_.node_types[nodes_[n].type]; }
  std::span<const Link> links() const { return links_; }
  std::vector<double> capacities() const;
  size_t vertex_count() const { return vertex_kind_.size(); }
  VertexKind vertex_kind(VertexId v) const { return vertex_kind_[v]; }
  std::string gpu_name(GpuId g) const;
  std::string link_name(LinkId l) const;

  // Directional route from GPU a to GPU b; empty when a == b. Deterministic.
  std::vector<LinkId> route(GpuId a, GpuId b) const;
  // The same route appended to `out`, for callers that keep many routes in one vector.
  void append_route(std::vector<LinkId>& out, GpuId a, GpuId b) const;
  // The slowest kind of link on a route (network > socket > pcie > nvlink), as NCCL classes paths.
  config::LinkKind route_kind(std::span<const LinkId> route) const;
  Time route_latency(std::span<const LinkId> route) const;
  // The most one NCCL connection moves over a route through NCCL's socket transport (bytes/s of
  // payload; config::LinkClass::socket_transport): its sockets times the least of the cloud's
  // per-flow cap and TCP's window over the round trip (twice the route's latency); 0 where no
  // class on the route caps it.
  double route_flow_cap(std::span<const LinkId> route) const;
  // Line-rate bottleneck of a route (bytes/s), ignoring other traffic.
  double route_capacity(std::span<const LinkId> route) const;
  // The NIC (index in its node) that the node type assigns GPU g; -1 when the node has none.
  int gpu_nic(GpuId g) const {
    return templates_[nodes_[gpus_[g].node].type].gpu_nic[gpus_[g].local];
  }
  // Local GPU pairs joined by direct NVLink in a node type (for ring search), with link count.
  const std::vector<config::MeshLink>& direct_links(uint32_t node_type) const;

  // What-if (sim/workload/replay/perturbation.h): the link carries `factor` of its capacity (a
  // degraded cable, a NIC that trained at a lower rate). Routes and line rates stay as built, as
  // NCCL sees the topology it detected. factor > 0.
  void scale_link_capacity(LinkId l, double factor);
  // What-if: the link is down (a cut cable, a dead port). Between two fabric switches, routes
  // take the shortest paths that remain (every switch's distances are found again, and equal
  // paths share the load as before). A NIC's cable (either direction): the GPUs behind that NIC
  // reach the fabric through the node's next working NIC (over NVLink to that NIC's GPU on
  // NVSwitch nodes with PXN, as NCCL does; else over the node's PCIe paths), and traffic to them
  // enters there. Call it before any route is taken. Throws InputError for a link inside a node
  // (its routes are fixed), when no path is left between two switches that hold NICs, or when a
  // node would have no working NIC.
  void fail_link(LinkId l);
  bool link_failed(LinkId l) const { return !failed_.empty() && failed_[l]; }
  // Whether some link's capacity was scaled or a link failed: replicas whose copies cross
  // different capacities are no longer symmetric (the replay then does not fold them).
  bool links_scaled() const { return links_scaled_; }
  // How many links each node of node n's type holds (at node(n).link_base on): every node of a
  // type holds the same links in the same order (build_nodes).
  size_t node_link_count(uint32_t n) const { return templates_[nodes_[n].type].links.size(); }

 private:
  struct TemplateLink {
    uint32_t src, dst;
    double bandwidth_Bps;
    std::string cls;
  };
  struct NodeTemplate {
    std::vector<VertexKind> kinds;
    std::vector<TemplateLink> links;
    std::vector<uint32_t> gpu_vertex, nic_vertex;
    std::vector<int> gpu_nic;  // local GPU -> NIC index, -1 when the node has no NIC
    // Paths between endpoints (GPUs first, then NICs) as template link lists.
    std::vector<std::vector<uint32_t>> paths;
    uint32_t endpoints = 0;
    std::vector<config::MeshLink> direct;
    const std::vector<uint32_t>& path(uint32_t from, uint32_t to) const {
      return paths[from * endpoints + to];
    }
  };
  struct NicPort {
    uint32_t node = 0, index = 0;
    uint32_t fabric_switch = 0;  // index among fabric switches
    LinkId up = 0, down = 0;
  };

  void build_template(const config::NodeType& t);
  void find_template_paths(NodeTemplate& tp, const config::NodeType& t) const;
  void build_nodes();
  void build_fabric();
  void build_explicit_fabric();
  uint32_t add_switch(std::string name);  // a fabric switch; its index among them
  const config::NicSpec& nic_spec(const NicPort& p) const;
  VertexId nic_vertex(const NicPort& p) const;
  // NIC p's cable to fabric switch sw: up (with the NIC's egress shaping) and down.
  void attach_nic(NicPort& p, uint32_t sw, Time switch_latency);
  // Every leaf in [0, leaves) to each of `spines` new spine switches.
  void connect_spines(uint32_t leaves, int spines, double ports);
  // Each node's site (config::NodeGroup::site), in node order.
  std::vector<int> node_sites() const;
  // The `wan:` links between the sites' switches (indices into switch_vertex_).
  void add_wan_links(const std::vector<uint32_t>& site_switch, const std::string& where);
  void build_switch_routes();
  // Hops from switch `from` to switch `to` (UINT16_MAX: unreachable).
  uint16_t switch_distance(uint32_t from, uint32_t to) const;
  Link make_link(VertexId a, VertexId b, double bandwidth, const std::string& cls,
                 Time extra_latency, const std::string& where) const;
  LinkId add_link(VertexId a, VertexId b, double bandwidth, const std::string& cls,
                  Time extra_latency, const std::string& where);
  void append_node_path(std::vector<LinkId>& out, uint32_t node, uint32_t from_ep,
                        uint32_t to_ep) const;
  void append_switch_path(std::vector<LinkId>& out, uint32_t from_sw, uint32_t to_sw,
                          uint64_t hash) const;
  // `nic` of `node` if it works, else the node's next working NIC (by index, wrapping).
  int working_nic(uint32_t node, int nic) const;

  config::ClusterConfig cfg_;
  mutable const std::string* last_class_name_ = nullptr;  // make_link's last class, and its name
  mutable const config::LinkClass* last_class_ = nullptr;
  bool has_collective_overhead_ = false;
  bool has_socket_transport_ = false;
  std::vector<NodeTemplate> templates_;
  std::vector<Gpu> gpus_;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<VertexKind> vertex_kind_;
  std::vector<NicPort> nics_;
  std::vector<VertexId> switch_vertex_;
  std::vector<std::string> switch_name_;
  struct SwitchHop {
    LinkId link;
    uint32_t to;  // the switch it leads to
  };
  std::vector<std::vector<SwitchHop>> switch_out_;  // switch -> links to other switches
  // The same hops sorted by the switch they lead to (then by link, so the hops to one switch keep
  // switch_out_'s order): the last hop of a switch path, to a neighbour, is a binary search
  // among a spine's hundreds of links rather than a scan of them.
  std::vector<std::vector<SwitchHop>> switch_out_by_to_;
  // Hop counts between switches, one row per class of switches with the same neighbours
  // (switch_distance() reads them).
  std::vector<uint32_t> switch_class_;   // switch -> its class
  std::vector<uint32_t> class_rep_;      // class -> the switch its row was searched from
  std::vector<char> class_linked_;       // class -> whether its switches have neighbours
  std::vector<uint16_t> class_dist_;     // [class * S + to]
  std::vector<uint32_t> vertex_switch_;  // vertex -> switch index, or UINT32_MAX
  bool pxn_ = false;
  bool links_scaled_ = false;
  std::vector<char> failed_;    // by link; empty when none failed
  std::vector<char> nic_down_;  // by global NIC index; empty when none is down
};

}  // namespace hetsim::platform
