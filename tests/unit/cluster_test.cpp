// The cluster graph: node layouts, routes inside and between nodes, ECMP, fabric sizing, and the
// cluster-file options (--nodes, --set).
#include "sim/platform/cluster.h"

#include <gtest/gtest.h>

#include <set>

#include "sim/core/error.h"

namespace hetsim::platform {
namespace {

Cluster builtin(const std::string& name, config::ClusterOptions o = {}) {
  return Cluster(config::load_cluster(name, o));
}

std::vector<VertexKind> hops(const Cluster& c, const std::vector<LinkId>& route) {
  std::vector<VertexKind> v;
  for (LinkId l : route) v.push_back(c.vertex_kind(c.links()[l].dst));
  return v;
}

TEST(Cluster, DgxA100HasEightGpusPerNodeAndTheDefaultNodeCount) {
  const Cluster c = builtin("dgx-a100");
  EXPECT_EQ(c.node_count(), 4u);
  EXPECT_EQ(c.gpu_count(), 32u);
  EXPECT_EQ(c.gpu(9).node, 1u);
  EXPECT_EQ(c.gpu(9).local, 1u);
  EXPECT_EQ(c.gpu(9).profile->name, "a100-sxm4-80gb");
  EXPECT_EQ(c.gpu_name(9), "node1.gpu1");
}

TEST(Cluster, NvSwitchRouteIsUpAndDownOneSwitch) {
  const Cluster c = builtin("dgx-a100");
  const auto r = c.route(0, 5);
  EXPECT_EQ(hops(c, r), (std::vector<VertexKind>{VertexKind::nvswitch, VertexKind::gpu}));
  EXPECT_EQ(c.route_kind(r), config::LinkKind::nvlink);
  // 300 GB/s NVLink3 per GPU per direction at the class's efficiency.
  EXPECT_DOUBLE_EQ(c.route_capacity(r), 300e9 * c.config().link_classes.at("nvlink3").efficiency);
}

TEST(Cluster, MeshRouteUsesDirectNvlinkOrElsePcieThroughTheSockets) {
  const Cluster c = builtin("dgx1-v100");
  const auto direct = c.route(0, 3);  // two NVLinks
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_DOUBLE_EQ(c.links()[direct[0]].bandwidth_Bps, 2 * 25e9);
  const auto indirect = c.route(0, 5);  // no NVLink: GPU never relays, so PCIe and QPI
  EXPECT_EQ(hops(c, indirect), (std::vector<VertexKind>{VertexKind::pcie_switch, VertexKind::socket,
                                                        VertexKind::socket, VertexKind::pcie_switch,
                                                        VertexKind::gpu}));
  EXPECT_EQ(c.route_kind(indirect), config::LinkKind::socket);
}

TEST(Cluster, SameRailRouteCrossesOneLeafOnly) {
  const Cluster c = builtin("dgx-a100");
  const auto r = c.route(0, 8);  // node0.gpu0 -> node1.gpu0: rail 0 both ends
  EXPECT_EQ(hops(c, r), (std::vector<VertexKind>{VertexKind::pcie_switch, VertexKind::nic,
                                                 VertexKind::fabric_switch, VertexKind::nic,
                                                 VertexKind::pcie_switch, VertexKind::gpu}));
  EXPECT_EQ(c.route_kind(r), config::LinkKind::network);
}

TEST(Cluster, CrossRailRouteIsRelayedOverNvlinkToTheDestinationRail) {
  const Cluster c = builtin("dgx-a100");
  const auto r = c.route(1, 8);  // node0.gpu1 -> node1.gpu0: PXN through node0.gpu0's NIC
  const std::vector<VertexKind> h = hops(c, r);
  EXPECT_EQ(h.front(), VertexKind::nvswitch);
  EXPECT_EQ(std::count(h.begin(), h.end(), VertexKind::fabric_switch), 1);
}

TEST(Cluster, RoutesAreDeterministicAndEcmpSpreadsAcrossSpines) {
  config::ClusterOptions o;
  o.nodes = 64;  // two scalable units of 32 nodes: traffic between them crosses the spines
  const Cluster c = builtin("dgx-h100", o);
  std::set<LinkId> first_uplinks;
  for (GpuId g = 0; g < 256; g += 8) {
    const auto r1 = c.route(g, g + 256);
    const auto r2 = c.route(g, g + 256);
    EXPECT_EQ(r1, r2);
    ASSERT_GE(r1.size(), 4u);
    // gpu->pcie->nic->leaf->spine: the 4th link is the leaf-to-spine uplink.
    EXPECT_EQ(c.vertex_kind(c.links()[r1[3]].dst), VertexKind::fabric_switch);
    first_uplinks.insert(r1[3]);
  }
  EXPECT_GT(first_uplinks.size(), 4u) << "32 flows should hash onto several of the 16 spines";
}

TEST(Cluster, FatTreeUplinksCarryLeafBandwidthOverOversubscriptionAndSpines) {
  const Cluster c = builtin("mixed-a100-v100");
  // Leaf 0 holds the 8 HDR NICs of node 0 (8 x 200 Gb/s = 200 GB/s); oversubscription 2, 4
  // spines: 25 GB/s per leaf-spine link.
  bool found = false;
  for (const Link& l : c.links()) {
    if (c.vertex_kind(l.src) == VertexKind::fabric_switch &&
        c.vertex_kind(l.dst) == VertexKind::fabric_switch &&
        l.src == c.links()[c.route(0, 8)[2]].dst) {
      EXPECT_DOUBLE_EQ(l.bandwidth_Bps, 25e9);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(Cluster, ANodeAloneInItsScalableUnitReachesTheOthersAtItsNicsSpeed) {
  config::ClusterOptions o;
  o.nodes = 33;  // units of 32 nodes: node 32 is alone in the second unit
  const Cluster c = builtin("dgx-h100", o);
  const auto r = c.route(32 * 8, 0);  // node32.gpu0 -> node0.gpu0, over a spine
  ASSERT_GE(r.size(), 6u);            // gpu->pcie->nic->leaf->spine->...
  const Link& nic_up = c.links()[r[2]];
  const Link& uplink = c.links()[r[3]];
  ASSERT_EQ(c.vertex_kind(nic_up.dst), VertexKind::fabric_switch);
  ASSERT_EQ(c.vertex_kind(uplink.dst), VertexKind::fabric_switch);
  // The leaf is built for 32 NICs of 400 Gb/s: 32 x 50 GB/s over 16 spines is 100 GB/s a
  // spine, whether one node or 32 are under it (scaled to the one NIC in use, 50 / 16 GB/s).
  EXPECT_DOUBLE_EQ(uplink.bandwidth_Bps, 32 * 50e9 / 16);
  EXPECT_DOUBLE_EQ(c.route_capacity(r), c.route_capacity(c.route(8, 0)));
}

TEST(Cluster, MixedClusterKeepsEachGroupsGpuType) {
  const Cluster c = builtin("mixed-a100-v100");
  EXPECT_EQ(c.gpu(0).profile->name, "a100-sxm4-80gb");
  EXPECT_EQ(c.gpu(c.gpu_count() - 1).profile->architecture, "volta");
  // A100 to V100 crosses the fabric and the 25 GbE NIC is the bottleneck.
  const auto r = c.route(0, static_cast<GpuId>(c.gpu_count() - 1));
  EXPECT_EQ(c.route_kind(r), config::LinkKind::network);
  EXPECT_LT(c.route_capacity(r), 25e9 / 8 + 1);
}

TEST(ClusterOptions, NodesAndSetOverrideTheFile) {
  config::ClusterOptions o;
  o.nodes = 2;
  EXPECT_EQ(builtin("dgx-a100", o).gpu_count(), 16u);
  config::ClusterOptions s;
  s.sets = {"groups[0].count=3", "node_types[0].intra.bandwidth=150GB/s"};
  const Cluster c = builtin("dgx-a100", s);
  EXPECT_EQ(c.gpu_count(), 24u);
  EXPECT_DOUBLE_EQ(c.route_capacity(c.route(0, 1)),
                   150e9 * c.config().link_classes.at("nvlink3").efficiency);
}

TEST(ClusterOptions, NodesNeedsASingleGroup) {
  config::ClusterOptions o;
  o.nodes = 2;
  EXPECT_THROW(builtin("mixed-a100-v100", o), InputError);
}

constexpr const char* kTwoNodes = R"(
name: tiny
node_types:
  - name: box
    gpus: 2
    gpu: h100-sxm5-80gb
    intra: {kind: nvswitch, link_class: nvlink4, bandwidth: 450GB/s}
    nics: {count: 2, link_class: ib_ndr, bandwidth: 400Gbps}
groups: [{node_type: box, count: 2}]
fabric: {kind: single_switch, latency: 100ns}
)";

constexpr const char* kTwoNodesReordered = R"(
fabric: {latency: 100ns, kind: single_switch}
groups: [{count: 2, node_type: box}]
node_types:
  - nics: {bandwidth: 400Gbps, link_class: ib_ndr, count: 2}
    intra: {bandwidth: 450GB/s, link_class: nvlink4, kind: nvswitch}
    gpu: h100-sxm5-80gb
    gpus: 2
    name: box
name: tiny
)";

TEST(ClusterFile, PermutingKeyOrderChangesNothing) {
  const Cluster a(config::load_cluster_text(kTwoNodes, "a.yaml"));
  const Cluster b(config::load_cluster_text(kTwoNodesReordered, "b.yaml"));
  ASSERT_EQ(a.links().size(), b.links().size());
  for (size_t l = 0; l < a.links().size(); ++l) {
    EXPECT_EQ(a.links()[l].capacity_Bps, b.links()[l].capacity_Bps);
    EXPECT_EQ(a.links()[l].latency, b.links()[l].latency);
  }
  EXPECT_EQ(a.route(0, 3), b.route(0, 3));
}

TEST(ClusterFile, SingleSwitchFabricLatencyIsNicHopsPlusSwitchHop) {
  const Cluster c(config::load_cluster_text(kTwoNodes, "a.yaml"));
  const auto r = c.route(0, 2);  // gpu -> nic -> switch -> nic -> gpu
  ASSERT_EQ(r.size(), 4u);
  const auto& classes = c.config().link_classes;
  const Time expected = Time::from_seconds(classes.at("ib_ndr").latency_s) * 4 + Time::ns(100);
  EXPECT_EQ(c.route_latency(r), expected);
}

}  // namespace
}  // namespace hetsim::platform

namespace hetsim::platform {
namespace {

// pcie.nic_link_class: on a g4dn node the GPUs' links are NCCL's host-staged class and the NIC's
// is a plain Gen3 link (pcie3: 0.76 of 15.75 GB/s), so four GPUs sending off the node share the
// 50 Gb/s NIC (0.9 of it by the fitted TCP class), not one staged link; without the key the NIC's
// link takes the tree's class.
TEST(Cluster, ANicsPcieLinkTakesItsOwnClass) {
  const Cluster c = builtin("aws-g4dn-12xlarge");
  const auto r = c.route(0, 4);  // node 0 to node 1
  EXPECT_EQ(hops(c, r),
            (std::vector<VertexKind>{VertexKind::pcie_switch, VertexKind::socket, VertexKind::nic,
                                     VertexKind::fabric_switch, VertexKind::nic, VertexKind::socket,
                                     VertexKind::pcie_switch, VertexKind::gpu}));
  const config::LinkClass& staged = c.config().link_classes.at("pcie3_host_staged");
  const config::LinkClass& tcp = c.config().link_classes.at("ethernet_tcp");
  EXPECT_EQ(c.links()[r[0]].cls, &staged);        // GPU to its root port
  EXPECT_EQ(c.links()[r[1]].cls, &staged);        // root port to the socket
  EXPECT_EQ(c.links()[r[2]].cls->name, "pcie3");  // socket to the NIC
  EXPECT_DOUBLE_EQ(c.links()[r[2]].capacity_Bps, 15.75e9 * 0.76);
  EXPECT_DOUBLE_EQ(c.links()[r[3]].capacity_Bps, 50e9 / 8 * tcp.efficiency);
  EXPECT_GT(c.links()[r[2]].capacity_Bps, c.links()[r[3]].capacity_Bps);
  // One GPU's own traffic is bounded by its staged link.
  EXPECT_DOUBLE_EQ(c.route_capacity(r), 15.75e9 * staged.efficiency);
  // Without the key (a DGX's PCIe tree) the NIC's link is of the tree's class.
  const Cluster d = builtin("dgx-a100");
  const auto rd = d.route(0, 8);
  ASSERT_GE(rd.size(), 3u);
  EXPECT_EQ(d.vertex_kind(d.links()[rd[1]].dst), VertexKind::nic);
  EXPECT_EQ(d.links()[rd[1]].cls, d.links()[rd[0]].cls);
  // An unknown class names the field and the classes there are.
  config::ClusterOptions bad;
  bad.sets = {"node_types[0].pcie.nic_link_class=pcie9"};
  try {
    builtin("aws-g4dn-12xlarge", bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "node_types[0].pcie.nic_link_class: unknown link class \"pcie9\""),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hetsim::platform

namespace hetsim::platform {
namespace {

// Cloud instances by name: a cluster file mixes them (`instance:` in node_types), each keeps its
// built-in file's node type and link classes under the name given.
TEST(ClusterFile, InstancesByNameMixInOneCluster) {
  const char* yaml = R"(
name: mixed-aws
node_types:
  - {instance: p3.16xlarge}
  - {instance: p3.2xlarge, name: single}
groups:
  - {node_type: p3.16xlarge, count: 2}
  - {node_type: single, count: 4}
fabric: {kind: single_switch, latency: 30us}
)";
  const Cluster c(config::load_cluster_text(yaml, "mixed-aws.yaml"));
  EXPECT_EQ(c.gpu_count(), 20u);
  EXPECT_EQ(c.node_count(), 6u);
  EXPECT_EQ(c.node_type(0).name, "p3.16xlarge");
  EXPECT_EQ(c.node_type(2).name, "single");
  EXPECT_EQ(c.node_type(0).gpu, "v100-sxm2-16gb");
  EXPECT_EQ(c.node_type(0).nics.at(0).link_class, "ena_tcp");
  // The 25 Gb/s and the 10 Gb/s NICs, in TCP's payload share.
  const auto r = c.route(0, 16);  // a p3.16xlarge to a p3.2xlarge
  EXPECT_DOUBLE_EQ(c.route_capacity(r), std::min(25e9, 10e9) / 8 * 0.99);
  // The AMP-era files spell the instance with a dash: g4dn.12xlarge is aws-g4dn-12xlarge.yaml's
  // node (its link classes, fitted on AMP's T4 set, come with it).
  const Cluster t4(config::load_cluster_text(
      "name: t4\nnode_types:\n  - {instance: g4dn.12xlarge}\ngroups:\n"
      "  - {node_type: g4dn.12xlarge, count: 2}\nfabric: {kind: single_switch}\n",
      "t4.yaml"));
  EXPECT_EQ(t4.gpu_count(), 8u);
  EXPECT_EQ(t4.node_type(0).gpu, "t4");
  EXPECT_EQ(t4.config().link_classes.at("pcie3_host_staged").efficiency,
            builtin("aws-g4dn-12xlarge").config().link_classes.at("pcie3_host_staged").efficiency);
  // The built-in instances are clusters of their own, one instance by default.
  EXPECT_EQ(builtin("aws-p3.16xlarge").gpu_count(), 8u);
  // An unknown instance names the field and the ones there are.
  const std::string bad =
      std::string(yaml).replace(std::string(yaml).find("p3.2xlarge"), 10, "p3.4xlarge");
  try {
    config::load_cluster_text(bad, "bad.yaml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("node_types[1].instance: unknown instance \"p3.4xlarge\""),
              std::string::npos)
        << e.what();
  }
}

// `shaping:` is tc netem on each NIC's way out: its delay is paid once per direction, its rate
// caps the egress only; a node type's own shaping overrides the cluster's.
TEST(ClusterFile, ShapingDelaysAndCapsEachNicsEgress) {
  config::ClusterOptions o;
  o.nodes = 2;
  const Cluster plain = builtin("aws-p3.2xlarge", o);
  o.sets = {"shaping={delay: 5ms, rate: 2Gbps}"};
  const Cluster shaped = builtin("aws-p3.2xlarge", o);
  const auto r = shaped.route(0, 1);
  EXPECT_EQ(shaped.route_latency(r) - plain.route_latency(plain.route(0, 1)), Time::us(5000));
  EXPECT_DOUBLE_EQ(shaped.route_capacity(r), 2e9 / 8 * 0.99);
  // The way in is not shaped (the sender's egress already was).
  int into_nic = 0;
  for (LinkId l : r) {
    if (shaped.vertex_kind(shaped.links()[l].src) != VertexKind::fabric_switch) continue;
    EXPECT_DOUBLE_EQ(shaped.links()[l].bandwidth_Bps, 10e9 / 8);
    ++into_nic;
  }
  EXPECT_EQ(into_nic, 1);
  config::ClusterOptions bad = o;
  bad.sets = {"shaping={delay: 5ms, jitter: 1ms}"};
  try {
    builtin("aws-p3.2xlarge", bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shaping"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("jitter"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hetsim::platform

namespace hetsim::platform {
namespace {

// Sites and the wide area between them: each site's nodes behind a switch of their own, each pair
// of sites joined by its `wan:` link (bandwidth, one-way latency); a route between sites crosses
// exactly that link, a route inside a site none.
const char* kTwoSites = R"(
name: two-regions
node_types:
  - {instance: p3.2xlarge}
groups:
  - {node_type: p3.2xlarge, count: 2, site: oregon}
  - {node_type: p3.2xlarge, count: 2, site: virginia}
  - {node_type: p3.2xlarge, count: 1, site: ireland}
wan:
  - {a: oregon, b: virginia, bandwidth: 1Gbps, latency: 30ms}
  - {a: virginia, b: ireland, bandwidth: 2Gbps, latency: 40ms}
  - {a: oregon, b: ireland, bandwidth: 500Mbps, latency: 70ms}
fabric: {kind: single_switch, latency: 30us}
)";

TEST(ClusterFile, SitesAreJoinedByTheirWideAreaLinks) {
  const Cluster c(config::load_cluster_text(kTwoSites, "two-regions.yaml"));
  ASSERT_EQ(c.config().sites, (std::vector<std::string>{"oregon", "virginia", "ireland"}));
  const Time inside = c.route_latency(c.route(0, 1));
  // GPU 0 (oregon) to GPU 2 (virginia): the same path as inside a site, and the 30 ms link.
  EXPECT_EQ(c.route_latency(c.route(0, 2)) - inside, Time::us(30000));
  EXPECT_EQ(c.route_latency(c.route(0, 4)) - inside, Time::us(70000));
  EXPECT_DOUBLE_EQ(c.route_capacity(c.route(0, 2)), 1e9 / 8 * 0.94);
  EXPECT_DOUBLE_EQ(c.route_capacity(c.route(4, 2)), 2e9 / 8 * 0.94);
  EXPECT_DOUBLE_EQ(c.route_capacity(c.route(0, 1)), 10e9 / 8 * 0.99);
  // TCP's window over the 60 ms round trip: 16 sockets x 3 MiB / RTT, 0.84 GB/s, above the link.
  EXPECT_NEAR(c.route_flow_cap(c.route(0, 2)),
              16 * 3.0 * (1 << 20) / (2 * c.route_latency(c.route(0, 2)).seconds()), 1);
}

TEST(ClusterFile, SitesThatAreNotAllJoinedOrUnknownAreRefused) {
  auto error = [](std::string yaml, const std::string& from, const std::string& to) {
    yaml.replace(yaml.find(from), from.size(), to);
    try {
      config::load_cluster_text(yaml, "sites.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string y = kTwoSites;
  EXPECT_NE(error(y, "  - {a: oregon, b: ireland, bandwidth: 500Mbps, latency: 70ms}\n", "")
                .find("wan: no link between the sites oregon and ireland"),
            std::string::npos);
  EXPECT_NE(error(y, "b: ireland, bandwidth: 2Gbps", "b: dublin, bandwidth: 2Gbps")
                .find("wan[1].b: unknown site \"dublin\""),
            std::string::npos);
  EXPECT_NE(error(y, "count: 1, site: ireland", "count: 1").find("either every group names"),
            std::string::npos);
  EXPECT_NE(error(y, "{kind: single_switch, latency: 30us}", "{kind: fat_tree, nics_per_leaf: 2}")
                .find("with sites each site's nodes sit behind one switch"),
            std::string::npos);
}

}  // namespace
}  // namespace hetsim::platform
