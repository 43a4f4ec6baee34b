// Collectives as flows: formula oracles (ring on an idle ring, hierarchical across nodes,
// latency-bound sizes), steady == stepwise expansion, conservation and the algorithm choice.
#include "sim/network/collective.h"

#include <gtest/gtest.h>

#include <optional>

#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/network/rings.h"

namespace hetsim::network {
namespace {

using platform::Cluster;
using platform::GpuId;

Cluster builtin(const std::string& name, int nodes = 0) {
  config::ClusterOptions o;
  if (nodes) o.nodes = nodes;
  return Cluster(config::load_cluster(name, o));
}

std::vector<GpuId> first(size_t n) {
  std::vector<GpuId> r;
  for (GpuId g = 0; g < n; ++g) r.push_back(g);
  return r;
}

CollectiveRequest request(Op op, double bytes, std::vector<GpuId> ranks,
                          std::optional<Algorithm> a = Algorithm::ring,
                          std::optional<Protocol> p = Protocol::simple,
                          Expansion x = Expansion::steady) {
  CollectiveRequest r;
  r.op = op;
  r.bytes = bytes;
  r.ranks = std::move(ranks);
  r.algorithm = a;
  r.protocol = p;
  r.expansion = x;
  return r;
}

void expect_same_plan(const CollectivePlan& a, const CollectivePlan& b) {
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.algorithm, b.algorithm);
  EXPECT_EQ(a.protocol, b.protocol);
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.start_delay, b.start_delay);
  EXPECT_EQ(a.estimate_s, b.estimate_s);
  EXPECT_EQ(a.payload_bytes, b.payload_bytes);
  EXPECT_EQ(a.ranks, b.ranks);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const PlanStep &x = a.steps[i], &y = b.steps[i];
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.latency, y.latency);
    EXPECT_EQ(x.deps, y.deps);
    EXPECT_EQ(x.max_rate_Bps, y.max_rate_Bps);
    ASSERT_EQ(x.links.size(), y.links.size()) << "step " << i;
    for (size_t k = 0; k < x.links.size(); ++k) {
      EXPECT_EQ(x.links[k].link, y.links[k].link);
      EXPECT_EQ(x.links[k].count, y.links[k].count);
    }
  }
}

// NodePlans: a plan kept from one node is, on another node of its type, the plan that
// plan_collective makes there, bit for bit (NVSwitch and NVLink-mesh nodes; rings, trees and
// all-to-alls; chosen or fixed algorithms); requests across nodes are planned afresh.
TEST(Collective, APlanKeptFromOneNodeIsThePlanOnAnotherNodeOfItsType) {
  for (const char* name : {"dgx-h100", "aws-p3.16xlarge"}) {
    const Cluster c = builtin(name, 3);
    NodePlans kept(c);
    const std::vector<CollectiveRequest> on_node0 = {
        request(Op::allreduce, 1 << 20, {0, 1}, std::nullopt, std::nullopt),
        request(Op::allgather, 64 << 20, {0, 2, 4, 6}, std::nullopt, std::nullopt),
        request(Op::reducescatter, 3e6, {1, 3}, std::nullopt, std::nullopt),
        request(Op::alltoall, 8 << 20, first(8), std::nullopt, std::nullopt),
        request(Op::allreduce, 256 << 20, first(8), Algorithm::tree, Protocol::ll128),
    };
    for (const CollectiveRequest& r : on_node0) {
      SCOPED_TRACE(std::string(name) + " " + to_string(r.op));
      expect_same_plan(kept.plan(r), plan_collective(c, r));
      // The same ranks on node 2.
      CollectiveRequest on2 = r;
      for (GpuId& g : on2.ranks) g += 16;
      const CollectivePlan from_kept = kept.plan(on2);
      const CollectivePlan fresh = plan_collective(c, on2);
      expect_same_plan(from_kept, fresh);
      for (const PlanStep& s : from_kept.steps) {
        for (const LinkUse& u : s.links)
          EXPECT_EQ(c.link_name(u.link).rfind("node2", 0), 0u) << c.link_name(u.link);
      }
    }
    // Across two nodes: planned afresh, and not mistaken for a node's.
    const CollectiveRequest across =
        request(Op::allreduce, 1 << 20, {0, 8}, std::nullopt, std::nullopt);
    expect_same_plan(kept.plan(across), plan_collective(c, across));
    CollectiveRequest across2 = across;
    across2.ranks = {8, 16};
    expect_same_plan(kept.plan(across2), plan_collective(c, across2));
  }
}

TEST(Collective, RingAllReduceOnAnIdleRingMatchesTheAlphaBetaFormula) {
  const Cluster c = builtin("dgx-a100", 1);
  const double S = 256.0 * (1 << 20);
  for (size_t n : {2, 4, 8}) {
    const CollectiveResult r = simulate_collective(c, request(Op::allreduce, S, first(n)));
    const auto route = c.route(0, 1);
    const double B = c.route_capacity(route);  // each GPU's NVSwitch uplink
    const double alpha =
        (step_latency(Algorithm::ring, Protocol::simple, config::LinkKind::nvlink) +
         c.route_latency(route))
            .seconds();
    const double expected =
        (launch_overhead() + base_latency(Algorithm::ring, Protocol::simple)).seconds() +
        2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * S / B;
    EXPECT_NEAR(r.time.seconds(), expected, 1e-11) << n << " GPUs";
  }
}

TEST(Collective, RingAllGatherAndReduceScatterMoveNMinusOneOverNOfTheBuffer) {
  const Cluster c = builtin("dgx-a100", 1);
  const double S = 64.0 * (1 << 20);
  const double B = c.route_capacity(c.route(0, 1));
  const double fixed =
      (launch_overhead() + base_latency(Algorithm::ring, Protocol::simple)).seconds() +
      7 * (step_latency(Algorithm::ring, Protocol::simple, config::LinkKind::nvlink) +
           c.route_latency(c.route(0, 1)))
              .seconds();
  for (Op op : {Op::allgather, Op::reducescatter}) {
    const CollectiveResult r = simulate_collective(c, request(op, S, first(8)));
    EXPECT_NEAR(r.time.seconds(), fixed + 7.0 / 8 * S / B, 1e-11) << to_string(op);
  }
}

// The steady form (one flow per ring) and the step-by-step form (one flow per rank and step,
// with the ring's dependencies) give the same time on rings whose edges are alike. Where one
// edge is slower (the NIC hop of a multi-node ring), stepwise hides the other edges' step
// latencies behind the slow edge's transfers while steady adds the whole chain latency, as
// NCCL's cost model and the alpha-beta formula do: the two then differ by less than that
// latency, never more.
struct ExpansionCase {
  std::string cluster;
  int nodes;
  size_t ranks;
  Op op;
  Algorithm algorithm;
  bool alike_edges = true;
};

class SteadyEqualsStepwise : public ::testing::TestWithParam<ExpansionCase> {};

TEST_P(SteadyEqualsStepwise, SameTime) {
  const ExpansionCase& k = GetParam();
  const Cluster c = builtin(k.cluster, k.nodes);
  for (double S : {1.0 * (1 << 20), 64.0 * (1 << 20)}) {
    const auto steady = simulate_collective(c, request(k.op, S, first(k.ranks), k.algorithm));
    const auto step = simulate_collective(
        c, request(k.op, S, first(k.ranks), k.algorithm, Protocol::simple, Expansion::stepwise));
    EXPECT_GT(step.plan.steps.size(), steady.plan.steps.size());
    if (k.alike_edges) {
      EXPECT_NEAR(step.time.seconds() / steady.time.seconds(), 1.0, 1e-6)
          << "steady " << steady.time.seconds() << " s, stepwise " << step.time.seconds() << " s";
    } else {
      Time chain;
      for (const PlanStep& s : steady.plan.steps) chain = std::max(chain, s.latency);
      EXPECT_LE(step.time, steady.time);
      EXPECT_LT((steady.time - step.time).seconds(), chain.seconds())
          << "steady " << steady.time.seconds() << " s, stepwise " << step.time.seconds() << " s";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rings, SteadyEqualsStepwise,
    ::testing::Values(ExpansionCase{"dgx-a100", 1, 8, Op::allreduce, Algorithm::ring},
                      ExpansionCase{"dgx-a100", 1, 5, Op::allgather, Algorithm::ring},
                      ExpansionCase{"dgx1-v100", 1, 8, Op::allreduce, Algorithm::ring},
                      ExpansionCase{"dgx1-v100", 1, 6, Op::reducescatter, Algorithm::ring},
                      ExpansionCase{"dgx-a100", 2, 16, Op::allreduce, Algorithm::ring, false},
                      ExpansionCase{"dgx-h100", 4, 32, Op::allreduce, Algorithm::hierarchical}));

// An all-to-all, steady, is one flow per class of alike pairs (NVLink inside a node, the
// network's hops between nodes); stepwise, one per pair. On these idle fabrics (rail-optimised
// with hashed spine paths, PCIe, Ethernet, mixed nodes) each class's pairs share their links
// evenly, so the two agree.
INSTANTIATE_TEST_SUITE_P(
    AllToAll, SteadyEqualsStepwise,
    ::testing::Values(ExpansionCase{"dgx-h100", 8, 64, Op::alltoall, Algorithm::direct},
                      ExpansionCase{"dgx-a100", 32, 256, Op::alltoall, Algorithm::direct},
                      ExpansionCase{"dgx-a100", 3, 20, Op::alltoall, Algorithm::direct},
                      ExpansionCase{"pcie-v100", 4, 16, Op::alltoall, Algorithm::direct},
                      ExpansionCase{"aws-g4dn-12xlarge", 4, 16, Op::alltoall, Algorithm::direct},
                      ExpansionCase{"mixed-a100-v100", 0, 32, Op::alltoall, Algorithm::direct}));

TEST(Collective, ASteadyAllToAllIsOneFlowPerClassAndConservesBytes) {
  const Cluster c = builtin("dgx-h100", 4);
  const double S = 1 << 26;
  const CollectivePlan steady =
      plan_collective(c, request(Op::alltoall, S, first(32), Algorithm::direct));
  const CollectivePlan step =
      plan_collective(c, request(Op::alltoall, S, first(32), Algorithm::direct, Protocol::simple,
                                 Expansion::stepwise));
  EXPECT_EQ(step.steps.size(), 32u * 31);
  EXPECT_LE(steady.steps.size(), 4u);  // NVLink, and the network's hop counts
  const auto crossings = [](const CollectivePlan& p) {
    double bytes = 0, pairs = 0;
    for (const PlanStep& s : p.steps) {
      for (const LinkUse& u : s.links) bytes += s.bytes * u.count;
    }
    for (const PlanStep& s : p.steps) pairs += s.bytes;
    return std::pair{bytes, pairs};
  };
  // Every byte of every pair crosses the same links either way: S/32 for each of 32 x 31 pairs.
  EXPECT_NEAR(crossings(steady).first, crossings(step).first, crossings(step).first * 1e-12);
  EXPECT_NEAR(crossings(step).second, 31.0 * S, 1e-3);
}

TEST(Collective, HierarchicalAllReduceIsIntraReduceScatterInterAllReduceIntraAllGather) {
  const Cluster c = builtin("dgx-h100", 4);
  const double S = 512.0 * (1 << 20);
  const size_t g = 8, m = 4;
  const auto r =
      simulate_collective(c, request(Op::allreduce, S, first(32), Algorithm::hierarchical));
  const double b_nv = c.route_capacity(c.route(0, 1));
  const double b_nic = c.route_capacity(c.route(0, 8));  // rail 0, node0 -> node1
  const Time lat_nv =
      step_latency(Algorithm::hierarchical, Protocol::simple, config::LinkKind::nvlink) +
      c.route_latency(c.route(0, 1));
  const Time lat_net =
      step_latency(Algorithm::hierarchical, Protocol::simple, config::LinkKind::network) +
      c.route_latency(c.route(0, 8));
  const double intra = (g - 1) * lat_nv.seconds() + (g - 1.0) / g * S / b_nv;
  const double inter = 2 * (m - 1) * lat_net.seconds() + 2 * (m - 1.0) / m * (S / g) / b_nic;
  const double expected =
      (launch_overhead() + base_latency(Algorithm::hierarchical, Protocol::simple)).seconds() +
      2 * intra + inter;
  EXPECT_NEAR(r.time.seconds(), expected, 1e-9);
}

TEST(Collective, TheChoiceIsTheBestOfEveryAlgorithmAndProtocolBuiltAlone) {
  // plan_collective skips protocols whose transfers alone cannot beat the best so far; its choice
  // must be the first plan of least estimate among all of them, each built on request.
  for (const auto& [name, nodes] : std::vector<std::pair<std::string, int>>{
           {"dgx-a100", 1}, {"dgx-h100", 4}, {"aws-g4dn-12xlarge", 0}, {"pcie-v100", 0}}) {
    const Cluster c = builtin(name, nodes);
    for (double bytes : {1e3, 6.4e4, 1e6, 1.6e7, 2.6e8, 4e9}) {
      network::CollectiveRequest req;
      req.op = network::Op::allreduce;
      req.bytes = bytes;
      req.ranks = first(c.gpu_count());
      const network::CollectivePlan chosen = network::plan_collective(c, req);
      double least = 0;
      std::optional<std::pair<network::Algorithm, network::Protocol>> argmin;
      for (network::Algorithm a :
           {network::Algorithm::ring, network::Algorithm::tree, network::Algorithm::hierarchical}) {
        for (network::Protocol p :
             {network::Protocol::ll, network::Protocol::ll128, network::Protocol::simple}) {
          if (p == network::Protocol::ll128 && !network::ll128_by_default(c, req.ranks)) continue;
          network::CollectiveRequest one = req;
          one.algorithm = a;
          one.protocol = p;
          double e = 0;
          try {
            e = network::plan_collective(c, one).estimate_s;
          } catch (const InputError&) {
            continue;  // hierarchical on one node
          }
          if (!argmin || e < least) {
            least = e;
            argmin = {a, p};
          }
        }
      }
      ASSERT_TRUE(argmin);
      EXPECT_EQ(chosen.estimate_s, least) << name << " " << bytes;
      EXPECT_EQ(chosen.algorithm, argmin->first) << name << " " << bytes;
      EXPECT_EQ(chosen.protocol, argmin->second) << name << " " << bytes;
    }
  }
}

TEST(Collective, Ll128OnlyWhereNcclEnablesItByDefault) {
  // NCCL's rule [nccl-tune]: one compute capability among 7.0, 8.0, 9.0 (10.0), NVLink inside
  // the node. T4 (Turing) and PCIe-only nodes: off; A100 with V100: two capabilities, off;
  // RTX 4090 (Ada): off.
  EXPECT_TRUE(ll128_by_default(builtin("dgx-a100", 2), first(16)));
  EXPECT_TRUE(ll128_by_default(builtin("dgx-h100", 1), first(8)));
  EXPECT_TRUE(ll128_by_default(builtin("dgx1-v100", 1), first(8)));
  EXPECT_FALSE(ll128_by_default(builtin("aws-g4dn-12xlarge", 0), first(4)));
  EXPECT_FALSE(ll128_by_default(builtin("pcie-v100", 0), first(4)));
  const Cluster mixed = builtin("mixed-a100-v100", 0);
  EXPECT_FALSE(ll128_by_default(mixed, first(mixed.gpu_count())));
  // The automatic choice never takes it there; asked for (NCCL_PROTO=LL128), it is built.
  for (double bytes : {1e5, 4e6, 6.4e7}) {
    const Cluster t4 = builtin("aws-g4dn-12xlarge", 0);
    const auto r = simulate_collective(
        t4, request(Op::allreduce, bytes, first(t4.gpu_count()), std::nullopt, std::nullopt));
    EXPECT_NE(r.plan.protocol, Protocol::ll128) << bytes;
    EXPECT_EQ(simulate_collective(
                  t4, request(Op::allreduce, bytes, first(4), Algorithm::ring, Protocol::ll128))
                  .plan.protocol,
              Protocol::ll128);
  }
}

TEST(Collective, TinyMessagesAreLatencyBoundAndPickLowLatencyProtocols) {
  const Cluster c = builtin("dgx-a100", 1);
  const auto tiny =
      simulate_collective(c, request(Op::allreduce, 8, first(8), std::nullopt, std::nullopt));
  EXPECT_EQ(tiny.plan.protocol, Protocol::ll);
  const double fixed =
      (launch_overhead() + base_latency(tiny.plan.algorithm, Protocol::ll)).seconds();
  EXPECT_GT(tiny.time.seconds(), fixed);
  EXPECT_LT(tiny.time.seconds(), fixed + 20e-6);
  const auto big =
      simulate_collective(c, request(Op::allreduce, 1 << 30, first(8), std::nullopt, std::nullopt));
  EXPECT_EQ(big.plan.protocol, Protocol::simple);
}

TEST(Collective, MultiNodeRingBusBandwidthIsTheNodesNicBandwidth) {
  // hardware.md §3: multi-node ring all-reduce busbw ~ the sum of a node's effective NIC bandwidth.
  const Cluster c = builtin("dgx-a100", 4);
  const double S = 4.0 * (1 << 30);
  const auto r = simulate_collective(c, request(Op::allreduce, S, first(32)));
  const double busbw = S / r.time.seconds() * busbw_factor(Op::allreduce, 32);
  const double nic_sum = 8 * 200e9 / 8 * c.config().link_classes.at("ib_hdr").efficiency;
  EXPECT_NEAR(busbw / nic_sum, 1.0, 0.03);
  EXPECT_EQ(r.plan.channels, 8);
}

TEST(Collective, TreeSizeFactorAndTreeToRingRatioAreNcclsModel) {
  // NCCL's tuning model (hardware.md §3): by hand, 1 MiB = 64 x 2^14 B: Simple 0.5, LL128 0.6;
  // 16 MiB = 64 x 2^18: Simple 0.7, LL128 0.9; 300 MB: column 22, Simple 0.9; 512 MiB: past the
  // table, 1.
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::simple, 1 << 20), 0.5);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::ll128, 1 << 20), 0.6);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::simple, 16 << 20), 0.7);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::ll128, 16 << 20), 0.9);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::simple, 300e6), 0.9);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::simple, 512.0 * (1 << 20)), 1.0);
  EXPECT_DOUBLE_EQ(tree_size_factor(Protocol::ll, 8), 1.0);
  // busBw x 0.92, algbw = busBw / 2 against the ring's n / (2 (n - 1)): 0.92 x 15/16 for 16.
  EXPECT_DOUBLE_EQ(tree_to_ring_bandwidth(16), 0.92 * 15 / 16);
}

TEST(Collective, AcrossNodesATreeMovesNccls0p92TimesNMinusOneOverNOfTheRing) {
  // Two DGX A100: hetsim's heap-shaped trees alone would reach 240 GB/s bus bandwidth, above
  // the 188 GB/s the nodes' eight HDR NICs carry; NCCL's model holds a tree to 0.92 (n-1)/n of
  // the ring over the same ranks, and at 4 GiB the size factor is 1.
  const Cluster c = builtin("dgx-a100", 2);
  const double S = 4.0 * (1 << 30);
  const auto ring = simulate_collective(c, request(Op::allreduce, S, first(16)));
  const auto tree = simulate_collective(c, request(Op::allreduce, S, first(16), Algorithm::tree));
  EXPECT_NEAR(ring.time.seconds() / tree.time.seconds(), tree_to_ring_bandwidth(16), 0.002);
  // At 16 MiB (LL128) the tree also takes NCCL's measured 0.9: more than 1 / (0.8625 x 0.9) of
  // the ring's transfer time, less its latencies.
  const double M = 16.0 * (1 << 20);
  const auto t16 = simulate_collective(
      c, request(Op::allreduce, M, first(16), Algorithm::tree, Protocol::ll128));
  const auto r16 = simulate_collective(
      c, request(Op::allreduce, M, first(16), Algorithm::ring, Protocol::ll128));
  EXPECT_GT(t16.time.seconds(), 0.95 * r16.time.seconds());
}

TEST(Collective, MultiNodeAllReduceNeverOutrunsTheNodesNics) {
  // Measured: 192 GB/s all-reduce bus bandwidth on DGX A100 with 8 x HDR200 [n1576], 85-96 of a
  // theoretical 100 on 4 x HDR [nt119]: across nodes the NICs bound every size and node count.
  const double nic_sum = 8 * 200e9 / 8 * 0.94;  // ib_hdr's efficiency
  for (int nodes : {2, 4, 8, 16}) {
    const Cluster c = builtin("dgx-a100", nodes);
    const size_t n = static_cast<size_t>(8 * nodes);
    for (double S = 1 << 20; S <= 4.0 * (1 << 30); S *= 4) {
      const auto r =
          simulate_collective(c, request(Op::allreduce, S, first(n), std::nullopt, std::nullopt));
      const double busbw = S / r.time.seconds() * busbw_factor(Op::allreduce, n);
      EXPECT_LE(busbw, 1.005 * nic_sum)
          << nodes << " nodes, " << S << " B, " << to_string(r.plan.algorithm) << "/"
          << to_string(r.plan.protocol);
      // On 2 and 4 nodes, where the ring's 2 (n - 1) step latencies are small beside 1 GiB.
      if (S >= 1 << 30 && nodes <= 4) {
        EXPECT_NEAR(busbw / 192e9, 1.0, 0.06) << nodes << " nodes, " << S << " B";
      }
    }
  }
}

TEST(Collective, DgxOneMeshPacksThreeNvlinkCyclesIntoSixRings) {
  const Cluster c = builtin("dgx1-v100", 1);
  const NodeOrders nodes = order_by_node(c, first(8));
  const auto rings = build_rings(c, nodes);
  EXPECT_EQ(rings.size(), 6u);
  for (const auto& ring : rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      EXPECT_EQ(c.route(ring[i], ring[(i + 1) % ring.size()]).size(), 1u) << "direct NVLink";
    }
  }
}

TEST(Collective, BytesOnLinksAreConserved) {
  struct Bytes : FlowObserver {
    const FlowNetwork* net = nullptr;
    void on_rates(const FlowNetwork& n, Time) override { net = &n; }
  };
  const Cluster c = builtin("dgx-a100", 2);
  Engine e;
  FlowNetwork net(e, c.capacities());
  const CollectivePlan plan = plan_collective(c, request(Op::allreduce, 1 << 26, first(16)));
  CollectiveRun run(e, net, plan, nullptr);
  run.start();
  e.run();
  double planned = 0;
  for (const PlanStep& s : plan.steps) {
    for (const LinkUse& u : s.links) planned += s.bytes * u.count;
  }
  EXPECT_NEAR(net.delivered_bytes(), planned, planned * 1e-12);
  EXPECT_NEAR(net.started_bytes(), planned, planned * 1e-12);
}

TEST(Collective, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Op::allreduce, 8), 14.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::allgather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::reducescatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::alltoall, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::sendrecv, 8), 1.0);
}

TEST(Collective, AlgorithmsThatDoNotApplyAreRejected) {
  const Cluster c = builtin("dgx-a100", 1);
  EXPECT_THROW(plan_collective(c, request(Op::allgather, 1e6, first(8), Algorithm::tree)),
               InputError);
  EXPECT_THROW(plan_collective(c, request(Op::allreduce, 1e6, first(8), Algorithm::hierarchical)),
               InputError);
  EXPECT_THROW(plan_collective(c, request(Op::alltoall, 1e6, first(8), Algorithm::ring)),
               InputError);
}

TEST(Collective, SendRecvBetweenTwoGpusIsOneTransferEachWay) {
  const Cluster c = builtin("dgx-a100", 2);
  const double S = 1 << 28;
  const auto r = simulate_collective(c, request(Op::sendrecv, S, {0, 8}, Algorithm::direct));
  const auto route = c.route(0, 8);
  const double expected =
      (launch_overhead() + base_latency(Algorithm::direct, Protocol::simple) +
       step_latency(Algorithm::direct, Protocol::simple, config::LinkKind::network) +
       c.route_latency(route))
          .seconds() +
      S / c.route_capacity(route);
  EXPECT_NEAR(r.time.seconds(), expected, 1e-11);
}

}  // namespace
}  // namespace hetsim::network

namespace hetsim::network {
namespace {

// LinkClass::collective_overhead_s: a collective over a class with a per-call cost starts that
// much later, exactly, whatever its size; a point-to-point send over the same links pays none.
TEST(Collective, ALinkClassesPerCallCostDelaysEachCollectiveOverItExactly) {
  config::ClusterOptions zero;
  zero.sets = {"link_classes.pcie3_host_staged.collective_overhead=0s"};
  // The per-call cost set here, not the fitted one the file ships, so that a refit leaves the
  // figures worked by hand.
  config::ClusterOptions fixed;
  fixed.sets = {"link_classes.pcie3_host_staged.collective_overhead=743us"};
  const Cluster with(config::load_cluster("aws-g4dn-12xlarge", fixed));
  const Cluster without(config::load_cluster("aws-g4dn-12xlarge", zero));
  ASSERT_DOUBLE_EQ(with.config().link_classes.at("pcie3_host_staged").collective_overhead_s * 1e6,
                   743.0);
  auto run = [](const Cluster& c, Op op, double bytes, std::vector<GpuId> ranks) {
    CollectiveRequest r;
    r.op = op;
    r.bytes = bytes;
    r.ranks = std::move(ranks);
    r.host_launch = false;
    return simulate_collective(c, r).time;
  };
  for (double bytes : {2e6, 64e6}) {
    EXPECT_EQ(run(with, Op::allreduce, bytes, {0, 1}) - run(without, Op::allreduce, bytes, {0, 1}),
              Time::from_seconds(743e-6));
    // Across nodes the ring still crosses the staged links: the same cost once.
    EXPECT_EQ(run(with, Op::allgather, bytes, {0, 4}) - run(without, Op::allgather, bytes, {0, 4}),
              Time::from_seconds(743e-6));
    EXPECT_EQ(run(with, Op::sendrecv, bytes, {0, 1}), run(without, Op::sendrecv, bytes, {0, 1}));
  }
  // A DGX's classes have none.
  const Cluster dgx(config::load_cluster("dgx-a100"));
  for (const auto& [name, cls] : dgx.config().link_classes) EXPECT_EQ(cls.collective_overhead_s, 0);
  // Bad values say where.
  config::ClusterOptions bad;
  bad.sets = {"link_classes.pcie3_host_staged.collective_overhead=20ms"};
  try {
    config::load_cluster("aws-g4dn-12xlarge", bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "link_classes.pcie3_host_staged.collective_overhead: expected a time from 0 s to "
                  "10 ms"),
              std::string::npos)
        << e.what();
  }
}

// NCCL's socket transport between two one-GPU cloud instances under tc netem (delay D, rate R on
// each instance's egress): an all-reduce of two ranks is the alpha-beta ring with the route's
// latency (D plus the kernel's and the fabric's) and the least of the shaped NIC and one NCCL
// connection's cap, its sockets times TCP's window over the round trip (2 x the latency).
TEST(Collective, OverTcpARingMovesAtTheShapedRateOrTheWindowOverTheRoundTrip) {
  auto two_instances = [](int sockets, const char* delay) {
    const std::string yaml = std::string(R"(
name: two-p3
link_classes:
  ena_tcp: {kind: network, transport: socket, efficiency: 0.99, latency: 10us, sockets: )") +
                             std::to_string(sockets) + R"(, flow_cap: 10Gbps, tcp_window: 3MiB}
shaping: {delay: )" + delay + R"(, rate: 1Gbps}
node_types:
  - {instance: p3.2xlarge}
groups:
  - {node_type: p3.2xlarge, count: 2}
fabric: {kind: single_switch, latency: 30us}
)";
    return Cluster(config::load_cluster_text(yaml, "two-p3.yaml"));
  };
  const double S = 64.0 * (1 << 20);
  for (int sockets : {1, 16}) {
    for (const char* delay : {"1ms", "50ms"}) {
      const Cluster c = two_instances(sockets, delay);
      const auto route = c.route(0, 1);
      const double D = std::string(delay) == "1ms" ? 1e-3 : 50e-3;
      // Out through the shaped NIC (10 us kernel + D), the switch (30 us), in (10 us), and four
      // PCIe hops between each GPU and its NIC (100 ns each).
      const double one_way = D + 50e-6 + 4 * 100e-9;
      EXPECT_NEAR(c.route_latency(route).seconds(), one_way, 1e-12);
      const double nic = 1e9 / 8 * 0.99;  // the shaped egress, TCP's payload share
      EXPECT_DOUBLE_EQ(c.route_capacity(route), nic);
      const double window = sockets * 3.0 * (1 << 20) / (2 * c.route_latency(route).seconds());
      EXPECT_DOUBLE_EQ(c.route_flow_cap(route), std::min(10e9 / 8 * 0.99 * sockets, window));
      const double B = std::min(nic, window);
      CollectiveRequest r = request(Op::allreduce, S, {0, 1});
      r.host_launch = false;
      const CollectiveResult res = simulate_collective(c, r);
      const double alpha =
          (step_latency(Algorithm::ring, Protocol::simple, config::LinkKind::network) +
           c.route_latency(route))
              .seconds();
      const double expected =
          base_latency(Algorithm::ring, Protocol::simple).seconds() + 2 * alpha + S / B;
      EXPECT_NEAR(res.time.seconds(), expected, 1e-9) << sockets << " sockets, " << delay;
    }
  }
  // One socket at 50 ms is bound by its window: 3 MiB per 100.1 ms round trip, 31 MB/s.
  EXPECT_LT(two_instances(1, "50ms").route_flow_cap(two_instances(1, "50ms").route(0, 1)), 32e6);
}

// Outside a cluster placement group AWS caps a flow at 5 Gb/s, not 10: one socket's connection
// follows; sixteen sockets' do not reach the 25 Gb/s NIC's bound either way.
TEST(Collective, OutsideAPlacementGroupASocketsFlowCapIsTheSpreadOne) {
  auto load = [](bool grouped, const std::string& cls) {
    config::ClusterOptions o;
    o.nodes = 2;
    o.sets = {std::string("placement_group=") + (grouped ? "true" : "false"),
              "node_types[0].nics[0].link_class=" + cls};
    return Cluster(config::load_cluster("aws-p3.16xlarge", o));
  };
  const double eff = 0.99;
  EXPECT_DOUBLE_EQ(
      load(true, "ena_tcp_container").route_flow_cap(load(true, "ena_tcp_container").route(0, 8)),
      10e9 / 8 * eff);
  const Cluster spread = load(false, "ena_tcp_container");
  EXPECT_DOUBLE_EQ(spread.route_flow_cap(spread.route(0, 8)), 5e9 / 8 * eff);
  const Cluster many = load(false, "ena_tcp");
  EXPECT_DOUBLE_EQ(many.route_flow_cap(many.route(0, 8)), 16 * 5e9 / 8 * eff);
  // Inside a node nothing is capped.
  EXPECT_EQ(many.route_flow_cap(many.route(0, 1)), 0);
  // A ring all-reduce across the two instances at one socket outside the group: 5 Gb/s.
  CollectiveRequest r = request(Op::allreduce, 256e6, {0, 8});
  r.host_launch = false;
  const double t_spread = simulate_collective(spread, r).time.seconds();
  const double t_many = simulate_collective(many, r).time.seconds();
  EXPECT_NEAR(t_spread / t_many, 25.0 / 5.0, 0.05);
}

}  // namespace
}  // namespace hetsim::network
