// Failed links (Cluster::fail_link, `link: {..., factor: 0}`): a NIC that is down hands its GPUs
// to the node's next NIC, and two of the eight rings then share one NIC, which doubles the ring
// all-reduce's transfer time across two DGX A100 nodes; a fabric link that is down is routed
// around on the other spines; what cannot fail says why.
#include <gtest/gtest.h>

#include <string>

#include "sim/core/error.h"
#include "sim/network/collective.h"
#include "sim/network/collective_runner.h"
#include "sim/platform/cluster.h"
#include "sim/workload/replay/perturbation.h"

namespace hetsim::platform {
namespace {

Cluster dgx(int nodes) {
  config::ClusterOptions o;
  o.nodes = nodes;
  return Cluster(config::load_cluster("dgx-a100", o));
}

// The network links of a route: the source NIC's cable up, the fabric, the cable down.
std::vector<LinkId> network_links(const Cluster& c, GpuId a, GpuId b) {
  std::vector<LinkId> out;
  for (LinkId l : c.route(a, b)) {
    if (c.links()[l].cls->kind == config::LinkKind::network) out.push_back(l);
  }
  return out;
}

double ring_allreduce_s(const Cluster& c, const std::vector<GpuId>& ranks, double bytes) {
  network::CollectiveRequest r;
  r.op = network::Op::allreduce;
  r.bytes = bytes;
  r.ranks = ranks;
  r.algorithm = network::Algorithm::ring;
  r.protocol = network::Protocol::simple;
  return network::simulate_collective(c, r).time.seconds();
}

std::vector<GpuId> first(GpuId n) {
  std::vector<GpuId> v;
  for (GpuId g = 0; g < n; ++g) v.push_back(g);
  return v;
}

void expect_no_route_crosses_a_failed_link(const Cluster& c) {
  for (GpuId a = 0; a < c.gpu_count(); ++a) {
    for (GpuId b = 0; b < c.gpu_count(); ++b) {
      for (LinkId l : c.route(a, b)) {
        ASSERT_FALSE(c.link_failed(l))
            << c.gpu_name(a) << " -> " << c.gpu_name(b) << " crosses " << c.link_name(l);
      }
    }
  }
}

TEST(FailedLink, ANicDownHandsItsGpusToTheNextNicAndDoublesTheRingTransferTime) {
  const Cluster healthy = dgx(2);
  Cluster broken = dgx(2);
  // node0.gpu0's NIC: its cable up (first network link to node1) and down (last one back).
  const LinkId up = network_links(healthy, 0, 8).front();
  const LinkId down = network_links(healthy, 8, 0).back();
  broken.fail_link(up);
  broken.fail_link(down);
  EXPECT_TRUE(broken.links_scaled());  // the replay no longer folds replicas
  expect_no_route_crosses_a_failed_link(broken);
  // node0.gpu0 now leaves and is reached through node0's NIC 1, over NVLink to gpu1 (PXN).
  const std::vector<LinkId> via = network_links(broken, 0, 8);
  EXPECT_EQ(via.front(), network_links(healthy, 1, 9).front());
  EXPECT_EQ(network_links(broken, 8, 0).back(), network_links(healthy, 9, 1).back());
  // Eight rings, one per NIC: NIC 1 now carries two of them at half the rate each, and the
  // all-reduce ends with its slowest ring. 4 GiB: the latencies are a small part of the time.
  const double S = 4.0 * (1 << 30);
  const double t0 = ring_allreduce_s(healthy, first(16), S);
  const double t1 = ring_allreduce_s(broken, first(16), S);
  EXPECT_NEAR(t1 / t0, 2.0, 0.02);
  // Traffic inside a node does not touch the NICs.
  EXPECT_EQ(ring_allreduce_s(healthy, first(8), S), ring_allreduce_s(broken, first(8), S));
}

TEST(FailedLink, AFabricLinkDownIsRoutedAroundOnTheOtherSpines) {
  // 64 DGX A100 in two scalable units of 32: node0.gpu0 to node32.gpu0 crosses a spine.
  const Cluster healthy = dgx(64);
  const GpuId far = 32 * 8;
  const std::vector<LinkId> before = network_links(healthy, 0, far);
  ASSERT_GE(before.size(), 4u);  // up, leaf -> spine, spine -> leaf, down
  const LinkId spine_link = before[1];
  Cluster broken = dgx(64);
  broken.fail_link(spine_link);
  const std::vector<LinkId> after = network_links(broken, 0, far);
  EXPECT_EQ(after.size(), before.size());  // another spine, as short
  EXPECT_NE(after[1], spine_link);
  for (GpuId b = 0; b < broken.gpu_count(); b += 7) {
    for (LinkId l : broken.route(0, b)) EXPECT_FALSE(broken.link_failed(l)) << broken.link_name(l);
  }
  // One spine link of many: a two-rank all-reduce between the units takes the same time.
  EXPECT_DOUBLE_EQ(ring_allreduce_s(healthy, {0, far}, 1 << 30),
                   ring_allreduce_s(broken, {0, far}, 1 << 30));
}

TEST(FailedLink, WhatCannotFailSaysWhy) {
  Cluster c = dgx(2);
  // A link inside a node (GPU to NVSwitch).
  const LinkId nvlink = c.route(0, 1).front();
  try {
    c.fail_link(nvlink);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "perturbation link: " + c.link_name(nvlink) +
                  " is inside a node; hetsim cannot fail it (the routes inside a node are fixed): "
                  "give it a factor above 0");
  }
  // The only NIC of a node (AWS g4dn.12xlarge has one).
  config::ClusterOptions o;
  o.nodes = 2;
  Cluster g4(config::load_cluster("aws-g4dn-12xlarge", o));
  const LinkId nic = network_links(g4, 0, 4).front();
  try {
    g4.fail_link(nic);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "perturbation link: " + g4.link_name(nic) +
                                         " is the last working NIC of node0; a node without a "
                                         "NIC cannot train with the rest");
  }
}

TEST(FailedLink, FactorZeroInAPerturbationFailsTheLinkAndSaysSo) {
  const Cluster healthy = dgx(2);
  const std::string name = healthy.link_name(network_links(healthy, 0, 8).front());
  const workload::Perturbations p =
      workload::parse_perturbation("link: {link: \"" + name + "\", factor: 0}");
  Cluster c = dgx(2);
  const workload::ResolvedPerturbations r = workload::resolve_perturbations(p, c);
  workload::scale_links(r, c);
  ASSERT_EQ(r.description.size(), 1u);
  EXPECT_EQ(r.description[0], "link " + name + " is down, routes go around it");
  expect_no_route_crosses_a_failed_link(c);
}

}  // namespace
}  // namespace hetsim::platform
