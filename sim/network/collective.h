// Collectives decomposed by algorithm into flows with dependencies (a CollectivePlan), and the
// NCCL-style rule that picks the algorithm and protocol by size and topology.
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/network/flow_network.h"
#include "sim/network/protocol.h"
#include "sim/platform/cluster.h"

namespace hetsim::network {

// halo: every rank sends `bytes` to each of its neighbours in rank order (the first and the last
// have one): the halo exchange of a spatially split (domain-parallel) convolution. Its sends are
// point-to-point, timed as a pipeline transfer is (the simple protocol, each route's latency, no
// collective's base latency), so that its Chakra form (sends and receives) replays the same.
enum class Op { allreduce, allgather, reducescatter, alltoall, broadcast, sendrecv, halo };
std::string to_string(Op op);
std::optional<Op> parse_op(const std::string& s);
std::optional<Algorithm> parse_algorithm(const std::string& s);
std::optional<Protocol> parse_protocol(const std::string& s);

// How ring and tree collectives become flows. steady: each ring (channel) is one flow over all
// of its edges, moving at the pace of its slowest edge, after the latency of its longest chain
// of steps. stepwise: every step of every rank is its own flow, started when the rank has sent
// its previous chunk and received the one it forwards. The two agree exactly on an otherwise
// idle network (tests/unit/collective_test.cpp proves it); stepwise exists to show that and to
// study transients, at O(ranks^2) flows. An all-to-all, steady, is one flow per class of
// rank pairs whose routes are alike (kind and latency), each over all of its pairs' links;
// stepwise, one flow per pair (O(ranks^2)), which the replay's --exact uses.
enum class Expansion { steady, stepwise };

struct CollectiveRequest {
  Op op = Op::allreduce;
  // nccl-tests' size: the buffer of one rank for all-reduce, broadcast, send/recv and
  // all-to-all; the total (count x ranks) for all-gather and reduce-scatter; for a halo
  // exchange, what one rank sends to one neighbour.
  double bytes = 0;
  std::vector<platform::GpuId> ranks;
  std::optional<Algorithm> algorithm;  // nullopt: choose
  std::optional<Protocol> protocol;    // nullopt: choose
  Expansion expansion = Expansion::steady;
  // Count the host's launch-and-wait cost (nccl-tests' wall-clock view). Off inside a training
  // iteration, where kernels are queued ahead on their streams.
  bool host_launch = true;
};

// One flow of a plan; deps index earlier steps of the same plan.
struct PlanStep {
  std::vector<LinkUse> links;
  double bytes = 0;
  Time latency;
  std::vector<uint32_t> deps;
  double max_rate_Bps = 0;  // per-channel cap (one NVLink on mesh nodes), 0: none
};

struct CollectivePlan {
  Op op = Op::allreduce;
  Algorithm algorithm = Algorithm::ring;
  Protocol protocol = Protocol::simple;
  int channels = 1;
  Time start_delay;  // launch overhead + base latency, before any flow starts
  std::vector<PlanStep> steps;
  double estimate_s = 0;  // the analytic estimate the choice was made on
  double payload_bytes = 0;
  size_t ranks = 0;
};

// Builds the plan, choosing algorithm and protocol unless the request fixes them.
// Throws InputError for an algorithm that does not apply (e.g. tree for all-gather).
CollectivePlan plan_collective(const platform::Cluster& c, const CollectiveRequest& r);

// plan_collective's plans of collectives whose ranks all sit on one node, kept by the node's
// type and the ranks' local indices. Every node of a type holds the same links in the same order
// at its own offset (Cluster::build_nodes), so the plan made on one node is the plan on any other
// node of its type with every link shifted by the difference of the nodes' first links: the same
// plan, bit for bit. A replay asks for one tensor-parallel collective in each of its data-parallel
// replicas (SimAI's example: 23,040 of its 24,400 plans, issue 38). Requests that span nodes, and
// every request on a cluster whose links a what-if scaled or failed (Cluster::links_scaled),
// are planned each time.
class NodePlans {
 public:
  explicit NodePlans(const platform::Cluster& c) : c_(c) {}
  CollectivePlan plan(const CollectiveRequest& r);

 private:
  struct Key {
    uint32_t type = 0;
    std::vector<uint32_t> locals;
    Op op = Op::allreduce;
    double bytes = 0;
    std::optional<Algorithm> algorithm;
    std::optional<Protocol> protocol;
    Expansion expansion = Expansion::steady;
    bool host_launch = true;
    auto operator<=>(const Key&) const = default;
  };
  const platform::Cluster& c_;
  std::map<Key, CollectivePlan> plans_;  // links numbered from the node's first link
};

// Whether NCCL enables LL128 by default for these ranks (the automatic choice tries it only
// then): one compute capability among 7.0, 8.0, 9.0 and 10.0, NVLink inside nodes.
bool ll128_by_default(const platform::Cluster& c, const std::vector<platform::GpuId>& ranks);

// Analytic estimate of a plan on an idle network (used to choose, not to report).
double estimate_seconds(const platform::Cluster& c, const CollectivePlan& p);

// nccl-tests' bus bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
// reduce-scatter and all-to-all, 2 for a halo exchange (an inner rank's two sends), 1 otherwise.
double busbw_factor(Op op, size_t ranks);

}  // namespace hetsim::network
