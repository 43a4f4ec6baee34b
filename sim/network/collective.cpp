// Collective -> flows; see collective.h.
#include "sim/network/collective.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include "sim/core/error.h"
#include "sim/core/hash.h"
#include "sim/network/rings.h"

namespace hetsim::network {

using platform::Cluster;
using platform::GpuId;

std::string to_string(Op op) {
  static const char* names[] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                "broadcast", "sendrecv",  "halo"};
  return names[static_cast<int>(op)];
}

std::optional<Op> parse_op(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(Op::halo); ++i) {
    if (to_string(static_cast<Op>(i)) == s) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::optional<Algorithm> parse_algorithm(const std::string& s) {
  for (Algorithm a :
       {Algorithm::ring, Algorithm::tree, Algorithm::hierarchical, Algorithm::direct}) {
    if (to_string(a) == s) return a;
  }
  return std::nullopt;
}

std::optional<Protocol> parse_protocol(const std::string& s) {
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    std::string lower = to_string(p);
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (to_string(p) == s || lower == s) return p;
  }
  return std::nullopt;
}

double busbw_factor(Op op, size_t n) {
  const double dn = static_cast<double>(n);
  switch (op) {
    case Op::allreduce:
      return 2 * (dn - 1) / dn;
    case Op::allgather:
    case Op::reducescatter:
    case Op::alltoall:
      return (dn - 1) / dn;
    case Op::halo:
      return n > 2 ? 2 : 1;
    default:
      return 1;
  }
}

namespace {

// The links of each step of a bare plan (Builder::set_bare), by step; null: the step's own.
using LinkRefs = std::vector<const std::vector<LinkUse>*>;

// Each step's rate on an idle network from the links it crosses alone (its own cap not
// applied; infinity for a step without links).
std::vector<double> link_rates(const Cluster& c, const CollectivePlan& p,
                               const LinkRefs* refs = nullptr);
// The analytic estimate of a plan whose steps move at `rates` (link_rates), capped by their own.
double estimate(const CollectivePlan& p, const std::vector<double>& rates, bool with_latency);

// A route between two ranks, its links kept in the builder's one vector of them.
struct Edge {
  uint32_t first = 0, size = 0;  // its links: Builder::edge_links_[first, first + size)
  config::LinkKind kind = config::LinkKind::nvlink;
  Time wire_latency;
  double cap = 0;  // one NCCL connection's cap over NCCL's socket transport (0: none)
};

// The tighter of two caps, 0 standing for none.
double tighter(double a, double b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// Edges by (source, destination) GPU: open addressing with linear probing. A request over
// thousands of nodes asks for 10^5 edges; a node-based map would allocate (and free) each.
class EdgeIndex {
 public:
  // The value slot of the key, null when it was not there (the caller then fills it).
  const Edge*& slot(GpuId a, GpuId b) {
    if (2 * (used_ + 1) > keys_.size()) grow();
    const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    const size_t mask = keys_.size() - 1;
    size_t i = splitmix64(key) & mask;
    while (keys_[i] != kNoKey && keys_[i] != key) i = (i + 1) & mask;
    if (keys_[i] == kNoKey) {
      keys_[i] = key;
      values_[i] = nullptr;
      ++used_;
    }
    return values_[i];
  }

 private:
  static constexpr uint64_t kNoKey = std::numeric_limits<uint64_t>::max();  // no GPU pair
  void grow() {
    std::vector<uint64_t> keys(std::max<size_t>(64, 2 * keys_.size()), kNoKey);
    std::vector<const Edge*> values(keys.size(), nullptr);
    const size_t mask = keys.size() - 1;
    for (size_t j = 0; j < keys_.size(); ++j) {
      if (keys_[j] == kNoKey) continue;
      size_t i = splitmix64(keys_[j]) & mask;
      while (keys[i] != kNoKey) i = (i + 1) & mask;
      keys[i] = keys_[j];
      values[i] = values_[j];
    }
    keys_.swap(keys);
    values_.swap(values);
  }
  std::vector<uint64_t> keys_;
  std::vector<const Edge*> values_;
  size_t used_ = 0;
};

// Builds the flows of one plan; routes are cached across the plans tried for one request.
// A rank's path to its tree's root: the wire latency and the hops of each kind of link, so that
// its latency under a protocol is a sum (exact: Time is an integer).
struct Depth {
  Time wire;
  std::array<uint32_t, 4> hops{};  // by LinkKind
  Depth plus(config::LinkKind kind, Time w) const {
    Depth d = *this;
    d.wire += w;
    ++d.hops[static_cast<int>(kind)];
    return d;
  }
};

// The trees' depth scratch, by GPU, kept by each thread from one plan to the next and stamped
// per tree: a collective over a few ranks of a 100,000-GPU cluster costs its ranks, not the
// cluster's GPUs (issue 38).
struct TreeScratch {
  std::vector<uint32_t> mark, done, inner;
  std::vector<GpuId> parent;
  std::vector<std::pair<config::LinkKind, Time>> hop;  // to the parent
  std::vector<Depth> depth;
  uint32_t stamp = 0;
  void fit(size_t gpus) {
    if (mark.size() == gpus) return;
    mark.assign(gpus, 0);
    done.assign(gpus, 0);
    inner.assign(gpus, 0);
    parent.resize(gpus);
    hop.resize(gpus);
    depth.resize(gpus);
    stamp = 0;
  }
};
thread_local TreeScratch tree_scratch;

class Builder {
 public:
  Builder(const Cluster& c, const CollectiveRequest& r) : c_(c), r_(r) {
    nodes_ = order_by_node(c, r.ranks);
    // An NCCL channel crosses one NVLink per hop of a mesh: its bandwidth is one link's
    // (NCCL's per-channel NVLink figure, [nccl-topo]), however many links join the pair.
    for (uint32_t node : nodes_.nodes) {
      const config::NodeType& t = c.node_type(node);
      if (t.intra != config::IntraKind::nvlink_mesh) continue;
      const double one_link =
          t.intra_bandwidth_Bps * c.config().link_classes.at(t.intra_class).efficiency;
      channel_cap_ = channel_cap_ == 0 ? one_link : std::min(channel_cap_, one_link);
    }
  }

  CollectivePlan build(Algorithm a, Protocol p) {
    const double tree_cap_Bps = a == Algorithm::tree ? tree_cap(p) : 0;
    CollectivePlan plan;
    plan.op = r_.op;
    plan.algorithm = a;
    plan.protocol = p;
    plan.payload_bytes = r_.bytes;
    plan.ranks = r_.ranks.size();
    // A halo exchange is point-to-point sends (ncclSend / ncclRecv in a group, or MPI's isend
    // and irecv), timed as the replay times a pipeline transfer: no collective's base latency.
    plan.start_delay = (r_.host_launch ? launch_overhead() : Time()) +
                       (r_.op == Op::halo ? Time() : base_latency(a, p));
    a_ = a;
    p_ = p;
    for (int k = 0; k < 4; ++k)
      kind_latency_[k] = step_latency(a, p, static_cast<config::LinkKind>(k));
    plan_ = &plan;
    ordinal_ = 0;
    ring_ordinal_ = 0;
    refs_.clear();
    last_ref_ = nullptr;
    const double wire = r_.bytes / payload_fraction(p);  // bytes the protocol puts on the wire
    const size_t n = r_.ranks.size();
    if (n < 2) return plan;
    switch (a) {
      case Algorithm::ring:
        add_rings(plan, wire);
        break;
      case Algorithm::tree:
        add_trees(plan, wire, tree_cap_Bps);
        break;
      case Algorithm::hierarchical:
        if (r_.op != Op::allreduce) {
          throw InputError("--algorithm hierarchical applies to allreduce only");
        }
        if (nodes_.nodes.size() < 2 || !nodes_.equal_sizes) {
          throw InputError(
              "--algorithm hierarchical needs ranks on two or more nodes, the same number on each");
        }
        add_hierarchical(wire);
        break;
      case Algorithm::direct:
        add_direct(wire);
        break;
    }
    add_collective_overhead(plan);
    return plan;
  }

  bool hierarchical_possible() const { return nodes_.nodes.size() >= 2 && nodes_.equal_sizes; }

 private:
  // A ring collective: its steps around each of the rings.
  void add_rings(CollectivePlan& plan, double wire) {
    const size_t n = r_.ranks.size();
    const auto& rings = this->rings();
    plan.channels = static_cast<int>(rings.size());
    const double per_channel = wire / static_cast<double>(rings.size());
    for (const auto& ring : rings) {
      switch (r_.op) {
        case Op::allreduce:
          add_ring(ring, 2 * (n - 1), per_channel / n, {});
          break;
        case Op::allgather:
        case Op::reducescatter:
          add_ring(ring, n - 1, per_channel / n, {});
          break;
        case Op::broadcast:
          add_chain_from(ring, r_.ranks.front(), per_channel);
          break;
        default:
          throw InputError("--algorithm ring does not apply to " + to_string(r_.op));
      }
    }
    if (caps_trees() && !ring_rate_.count(static_cast<int>(p_))) {
      const double t = estimate(plan, rates(plan), false);  // moving bytes, no latencies
      ring_rate_[static_cast<int>(p_)] = t > 0 ? r_.bytes / t : 0;
    }
  }

  // A tree all-reduce: its steps up and down each tree, under the cap NCCL's model gives trees.
  void add_trees(CollectivePlan& plan, double wire, double tree_cap_Bps) {
    if (r_.op != Op::allreduce) {
      throw InputError("--algorithm tree applies to allreduce only");
    }
    const auto& trees = this->trees();
    plan.channels = static_cast<int>(trees.size());
    const double per_tree = 1.0 / static_cast<double>(trees.size());
    for (const TreeEdges& t : trees) {
      add_tree(t, wire * per_tree);
      double& cap = plan.steps.back().max_rate_Bps;
      if (tree_cap_Bps > 0)
        cap = cap > 0 ? std::min(cap, tree_cap_Bps * per_tree) : tree_cap_Bps * per_tree;
    }
  }

  // Point-to-point sends: a halo exchange, a send-receive ring, or an all-to-all.
  void add_direct(double wire) {
    const size_t n = r_.ranks.size();
    if (r_.op != Op::alltoall && r_.op != Op::sendrecv && r_.op != Op::halo) {
      throw InputError("--algorithm direct applies to alltoall, sendrecv and halo only");
    }
    const auto& ranks = r_.ranks;
    for (size_t i = 0; i < n; ++i) {
      if (r_.op == Op::halo) {
        if (i > 0) add_p2p(ranks[i], ranks[i - 1], wire);
        if (i + 1 < n) add_p2p(ranks[i], ranks[i + 1], wire);
      } else if (r_.op == Op::sendrecv) {
        add_p2p(ranks[i], ranks[(i + 1) % n], wire);
      } else if (r_.expansion == Expansion::stepwise) {
        for (size_t k = 1; k < n; ++k) add_p2p(ranks[i], ranks[(i + k) % n], wire / n);
      }
    }
    if (r_.op == Op::alltoall && r_.expansion == Expansion::steady) add_alltoall(wire / n);
  }

  // The largest per-call cost of the link classes the collective crosses
  // (LinkClass::collective_overhead_s), on its start; point-to-point sends pay none, as no base
  // latency.
  void add_collective_overhead(CollectivePlan& plan) const {
    if (r_.op != Op::halo && r_.op != Op::sendrecv && c_.has_collective_overhead()) {
      double overhead = 0;
      for (const PlanStep& s : plan.steps) {
        for (const LinkUse& u : s.links)
          overhead = std::max(overhead, c_.links()[u.link].cls->collective_overhead_s);
      }
      plan.start_delay += Time::from_seconds(overhead);
    }
  }

  // Across nodes a tree all-reduce moves at most what NCCL's model gives it beside the ring over
  // the same ranks (protocol.h).
  bool caps_trees() const {
    return r_.op == Op::allreduce && nodes_.nodes.size() > 1 && r_.ranks.size() > 1;
  }
  // The bytes/s one tree may carry in all: from the ring's payload rate, which the ring's own
  // build records (the request's ring candidates come first; a tree asked for alone builds it).
  double tree_cap(Protocol p) {
    if (!caps_trees()) return 0;
    if (!ring_rate_.count(static_cast<int>(p))) build(Algorithm::ring, p);
    return ring_rate_.at(static_cast<int>(p)) * tree_to_ring_bandwidth(r_.ranks.size()) *
           tree_size_factor(p, r_.bytes) / payload_fraction(p);
  }

  // The edge from a to b, routed on first use. The reference stays valid (edges_ is a deque);
  // its edge_links() do not once another edge is routed.
  const Edge& edge(GpuId a, GpuId b) {
    const Edge*& found = edge_index_.slot(a, b);
    if (found) return *found;
    Edge e;
    e.first = static_cast<uint32_t>(edge_links_.size());
    c_.append_route(edge_links_, a, b);
    e.size = static_cast<uint32_t>(edge_links_.size() - e.first);
    e.kind = c_.route_kind(edge_links(e));
    e.wire_latency = c_.route_latency(edge_links(e));
    e.cap = c_.route_flow_cap(edge_links(e));
    found = &edges_.emplace_back(e);
    return *found;
  }
  std::span<const platform::LinkId> edge_links(const Edge& e) const {
    return {edge_links_.data() + e.first, e.size};
  }

  Time step_lat(const Edge& e) const {
    return kind_latency_[static_cast<int>(e.kind)] + e.wire_latency;
  }

  const std::vector<TreeEdges>& trees() {
    if (trees_.empty()) trees_ = build_trees(c_, nodes_);
    return trees_;
  }

  const std::vector<std::vector<GpuId>>& rings() {
    if (rings_.empty()) rings_ = build_rings(c_, nodes_);
    return rings_;
  }

  // Per node, the rings of its ranks alone (the hierarchical all-reduce's first and last phase).
  const std::vector<std::vector<std::vector<GpuId>>>& intra_rings() {
    if (intra_rings_.empty()) {
      for (size_t i = 0; i < nodes_.nodes.size(); ++i) {
        NodeOrders one;
        one.nodes = {nodes_.nodes[i]};
        one.order = {nodes_.order[i]};
        intra_rings_.push_back(build_rings(c_, one));
      }
    }
    return intra_rings_;
  }

  // The merged links of the next step. A request's candidate plans for one algorithm differ
  // only in protocol, so their k-th steps cross the same links: merged once, then reused.
  // Bare (set_bare), the step gets no copy: its links stay in the cache, named by refs_.
  template <typename Collect>
  std::vector<LinkUse> step_links(Collect collect) {
    auto& cache = link_cache_[static_cast<int>(a_)];
    const size_t k = ordinal_++;
    if (k >= cache.size()) {
      step_ids_.clear();  // kept between steps: a tree's 10^5 crossings are not regrown each time
      collect(step_ids_);
      cache.push_back(merge(step_ids_));
    }
    if (bare_) {
      last_ref_ = &cache[k];
      return {};
    }
    return cache[k];
  }

 public:
  // Bare plans carry no links of their own (refs_ names them): the candidates of a request are
  // estimated without copying every step's links for every protocol tried.
  void set_bare(bool bare) { bare_ = bare; }
  // Each step's rate by its links (link_rates), worked out once per algorithm: the candidates
  // of one algorithm cross the same links step by step, whatever their protocol.
  const std::vector<double>& rates(const CollectivePlan& plan) {
    std::vector<double>& r = rates_[static_cast<int>(plan.algorithm)];
    if (r.size() != plan.steps.size()) r = link_rates(c_, plan, bare_ ? &refs_ : nullptr);
    return r;
  }

 private:
  // Crossings sorted by link, repeats merged. A step over many links (a tree or ring over a
  // whole job) is counted in a dense array and read back in link order: O(links in its id range)
  // rather than a sort of every crossing.
  std::vector<LinkUse> merge(std::vector<platform::LinkId>& ids) {
    std::vector<LinkUse> out;
    if (ids.empty()) return out;
    const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
    const size_t span = static_cast<size_t>(*hi - *lo) + 1;
    if (ids.size() < 64 || span > 8 * ids.size()) {
      std::sort(ids.begin(), ids.end());
      for (platform::LinkId l : ids) {
        if (!out.empty() && out.back().link == l) {
          ++out.back().count;
        } else {
          out.push_back(LinkUse{l, 1});
        }
      }
      return out;
    }
    if (crossings_.size() < c_.links().size()) crossings_.assign(c_.links().size(), 0);
    out.reserve(std::min(ids.size(), span));
    const platform::LinkId first = *lo, last = *hi;
    for (platform::LinkId l : ids) ++crossings_[l];
    for (platform::LinkId l = first; l <= last; ++l) {
      if (crossings_[l] == 0) continue;
      out.push_back(LinkUse{l, crossings_[l]});
      crossings_[l] = 0;
    }
    return out;
  }

  // `cap`: the socket transport's per-connection cap of the edges the step crosses (Edge::cap).
  uint32_t add_step(std::vector<LinkUse> links, double bytes, Time latency,
                    std::vector<uint32_t> deps, bool channel = true, double cap = 0) {
    if (bare_) refs_.push_back(std::exchange(last_ref_, nullptr));
    plan_->steps.push_back(PlanStep{std::move(links), bytes, latency, std::move(deps),
                                    tighter(channel ? channel_cap_ : 0.0, cap)});
    return static_cast<uint32_t>(plan_->steps.size() - 1);
  }

  // A ring of `steps` steps moving `chunk` bytes per edge per step. Returns the steps that end it.
  std::vector<uint32_t> add_ring(const std::vector<GpuId>& ring, size_t steps, double chunk,
                                 const std::vector<uint32_t>& deps) {
    const size_t n = ring.size();
    // The ring's edges, looked up once: the k-th ring of every candidate of one algorithm is the
    // same ring (as its steps' links are, step_links).
    auto& cache = ring_edges_[static_cast<int>(a_)];
    const size_t which = ring_ordinal_++;
    if (which >= cache.size()) {
      std::vector<const Edge*>& fresh = cache.emplace_back();
      fresh.reserve(n);
      for (size_t i = 0; i < n; ++i) fresh.push_back(&edge(ring[i], ring[(i + 1) % n]));
    }
    const std::vector<const Edge*>& edges = cache[which];
    if (r_.expansion == Expansion::stepwise) {
      if (n * steps > 2'000'000) {
        throw InputError("stepwise expansion would need " + std::to_string(2 * n * steps) +
                         " flows; use the steady expansion at this scale");
      }
      // Per rank and step: a transfer, then the arrival of its chunk one step latency later. A
      // rank sends step k+1 once its own step-k transfer is out and the chunk it forwards has
      // arrived, so latencies overlap with transfers as NCCL's pipelined slots do.
      std::vector<uint32_t> sent(n), arrived(n), next_sent(n), next_arrived(n);
      for (size_t k = 0; k < steps; ++k) {
        for (size_t i = 0; i < n; ++i) {
          std::vector<uint32_t> d =
              k == 0 ? deps : std::vector<uint32_t>{sent[i], arrived[(i + n - 1) % n]};
          next_sent[i] =
              add_step(step_links([&](auto& ids) {
                         ids.assign(edge_links(*edges[i]).begin(), edge_links(*edges[i]).end());
                       }),
                       chunk, Time(), std::move(d), true, edges[i]->cap);
          next_arrived[i] = add_step({}, 0, step_lat(*edges[i]), {next_sent[i]});
        }
        std::swap(sent, next_sent);
        std::swap(arrived, next_arrived);
      }
      return arrived;
    }
    // Steady: one flow over every edge; latency of the longest chain of `steps` consecutive edges.
    std::vector<int64_t> lat(2 * n + 1, 0);
    std::vector<LinkUse> links = step_links([&](auto& ids) {
      for (size_t i = 0; i < n; ++i) {
        const std::span<const platform::LinkId> l = edge_links(*edges[i]);
        ids.insert(ids.end(), l.begin(), l.end());
      }
    });
    for (size_t i = 0; i < 2 * n; ++i) lat[i + 1] = lat[i] + step_lat(*edges[i % n]).ps();
    double cap = 0;
    for (const Edge* e : edges) cap = tighter(cap, e->cap);
    int64_t worst = 0;
    const size_t full = steps / n, rest = steps % n;
    const int64_t cycle = lat[n];
    for (size_t i = 0; i < n; ++i) {
      worst = std::max<int64_t>(worst, static_cast<int64_t>(full) * cycle + lat[i + rest] - lat[i]);
    }
    return {add_step(std::move(links), chunk * static_cast<double>(steps), Time::ps(worst), deps,
                     true, cap)};
  }

  // A pipelined chain from `root` along the ring order: every edge carries all the bytes.
  void add_chain_from(const std::vector<GpuId>& ring, GpuId root, double bytes) {
    const size_t n = ring.size();
    const size_t start = std::find(ring.begin(), ring.end(), root) - ring.begin();
    Time latency;
    double cap = 0;
    for (size_t k = 0; k + 1 < n; ++k) {
      const Edge& e = edge(ring[(start + k) % n], ring[(start + k + 1) % n]);
      latency += step_lat(e);
      cap = tighter(cap, e.cap);
    }
    add_step(step_links([&](auto& ids) {
               for (size_t k = 0; k + 1 < n; ++k) {
                 const Edge& e = edge(ring[(start + k) % n], ring[(start + k + 1) % n]);
                 ids.insert(ids.end(), edge_links(e).begin(), edge_links(e).end());
               }
             }),
             bytes, latency, {}, true, cap);
  }

  // Tree all-reduce, pipelined: reduce up and broadcast down at once; each edge carries all of
  // its tree's bytes in each direction.
  void add_tree(const TreeEdges& t, double bytes) {
    // The tree's depths, worked out once per tree: the protocols tried for one request differ
    // only in the step latency per link kind, not in routes.
    const std::vector<Depth>& depths = tree_depths(t);
    double cap = 0;
    std::vector<LinkUse> links = step_links([&](auto& ids) {
      const std::vector<const Edge*>& ups = tree_up_[static_cast<size_t>(&t - trees_.data())];
      for (size_t i = 0; i < t.edges.size(); ++i) {
        const auto& [child, par] = t.edges[i];
        const Edge& down = edge(par, child);  // may route: take edge_links() only after it
        cap = tighter(cap, tighter(ups[i]->cap, down.cap));
        ids.insert(ids.end(), edge_links(*ups[i]).begin(), edge_links(*ups[i]).end());
        ids.insert(ids.end(), edge_links(down).begin(), edge_links(down).end());
      }
    });
    Time deepest;
    for (const Depth& d : depths) deepest = std::max(deepest, latency(d));
    add_step(std::move(links), bytes, deepest * 2, {}, true, cap);
  }

  Time latency(const Depth& d) const {
    Time t = d.wire;
    for (int k = 0; k < 4; ++k) t += kind_latency_[k] * d.hops[k];
    return t;
  }

  // The depths of the tree's leaves (the ranks that are no other's parent): a parent's depth
  // is its child's less one hop, and latencies are not negative (the unit parser refuses
  // negative quantities; NCCL's step latencies are positive), so the deepest rank is a leaf.
  const std::vector<Depth>& tree_depths(const TreeEdges& t) {
    const size_t which = static_cast<size_t>(&t - trees_.data());
    if (tree_depths_.size() < trees_.size()) {
      tree_depths_.resize(trees_.size());
      tree_up_.resize(trees_.size());
    }
    std::vector<Depth>& out = tree_depths_[which];
    if (!out.empty() || t.edges.empty()) return out;
    std::vector<const Edge*>& ups = tree_up_[which];
    ups.reserve(t.edges.size());
    // Dense per-GPU scratch; the stamp marks what this call has set.
    TreeScratch& x = tree_scratch;
    x.fit(c_.gpu_count());
    if (x.stamp == std::numeric_limits<uint32_t>::max()) {
      std::fill(x.mark.begin(), x.mark.end(), 0);
      std::fill(x.done.begin(), x.done.end(), 0);
      std::fill(x.inner.begin(), x.inner.end(), 0);
      x.stamp = 0;
    }
    const uint32_t mark = ++x.stamp;
    std::vector<uint32_t>& tree_mark_ = x.mark;
    std::vector<uint32_t>& tree_done_ = x.done;
    std::vector<uint32_t>& tree_inner_ = x.inner;
    std::vector<GpuId>& tree_parent_ = x.parent;
    std::vector<std::pair<config::LinkKind, Time>>& tree_hop_ = x.hop;
    std::vector<Depth>& tree_depth_ = x.depth;
    for (const auto& [child, par] : t.edges) {
      const Edge& e = edge(child, par);
      ups.push_back(&e);
      tree_parent_[child] = par;
      tree_hop_[child] = {e.kind, e.wire_latency};
      tree_mark_[child] = mark;
      tree_inner_[par] = mark;
    }
    // Depth of each rank, memoised along the parent chain: O(ranks).
    tree_done_[t.root] = mark;
    tree_depth_[t.root] = Depth{};
    std::vector<GpuId> chain;
    for (const auto& [child, _] : t.edges) {
      chain.clear();
      GpuId g = child;
      while (tree_done_[g] != mark) {
        if (tree_mark_[g] != mark) throw RunError("collective: a tree edge leads off the tree");
        chain.push_back(g);
        g = tree_parent_[g];
      }
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const auto [kind, wire] = tree_hop_[*it];
        tree_depth_[*it] = tree_depth_[tree_parent_[*it]].plus(kind, wire);
        tree_done_[*it] = mark;
      }
      if (tree_inner_[child] != mark) out.push_back(tree_depth_[child]);
    }
    return out;
  }

  // Intra-node reduce-scatter, inter-node all-reduce per local rank (rail), intra-node all-gather.
  void add_hierarchical(double wire) {
    const size_t g = nodes_.order.front().size();
    const size_t m = nodes_.nodes.size();
    std::vector<uint32_t> phase1, phase2;
    const auto& intra = intra_rings();
    plan_->channels = static_cast<int>(g);
    if (g > 1) {
      for (size_t i = 0; i < m; ++i) {
        const double per = wire / static_cast<double>(intra[i].size());
        for (const auto& ring : intra[i]) {
          for (uint32_t s : add_ring(ring, g - 1, per / g, {})) phase1.push_back(s);
        }
      }
    }
    for (size_t j = 0; j < g; ++j) {
      std::vector<GpuId> rail;
      for (size_t i = 0; i < m; ++i) rail.push_back(nodes_.order[i][j]);
      for (uint32_t s : add_ring(rail, 2 * (m - 1), wire / g / m, phase1)) phase2.push_back(s);
    }
    if (g > 1) {
      for (size_t i = 0; i < m; ++i) {
        const double per = wire / static_cast<double>(intra[i].size());
        for (const auto& ring : intra[i]) add_ring(ring, g - 1, per / g, phase2);
      }
    }
  }

  // Steady all-to-all: the pairs whose routes are of one kind and wire latency move as one
  // flow over all of their links (a link crossed by k pairs counts k times), at one common rate,
  // as a ring's edges do. On a symmetric fabric the pairs of a class would get that rate anyway
  // (tests/unit/collective_test.cpp: equal on six clusters); where they would not (hashed spine
  // paths, mixed NICs, a link a what-if slowed), an all-to-all alone still ends when its most
  // loaded link has drained, which a pair-by-pair replay can only match or exceed. Beside other
  // traffic the class holds every pair to its slowest link's pace where single pairs would finish
  // early and leave their bandwidth to others, so a replay may come out either way
  // (tests/unit/moe_test.cpp: within 1%, +0.23% on a mixed cluster). Classes are few (NVLink,
  // PCIe, the network's hop counts): O(classes) flows instead of O(ranks^2); they are ordered
  // by kind and latency, so that copies of one collective fold class by class (replay.cpp).
  void add_alltoall(double bytes) {
    if (!a2a_classes_made_) make_alltoall_classes();
    for (AllToAllClass& c : a2a_classes_) {
      // The first build merges the class's links (step_links), the others reuse them.
      add_step(step_links([&](auto& ids) { ids = std::move(c.ids); }), bytes,
               kind_latency_[static_cast<int>(c.kind)] + c.wire, {}, false, c.cap);
    }
  }
  // The request's pairs by class, made once: the candidates (one per protocol) share them.
  void make_alltoall_classes() {
    const auto& ranks = r_.ranks;
    const size_t n = ranks.size();
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 1; k < n; ++k) {
        const Edge& e = edge(ranks[i], ranks[(i + k) % n]);
        auto it = std::find_if(
            a2a_classes_.begin(), a2a_classes_.end(),
            [&](const AllToAllClass& c) { return c.kind == e.kind && c.wire == e.wire_latency; });
        if (it == a2a_classes_.end()) {
          a2a_classes_.push_back(AllToAllClass{e.kind, e.wire_latency, {}, 0});
          it = a2a_classes_.end() - 1;
        }
        it->ids.insert(it->ids.end(), edge_links(e).begin(), edge_links(e).end());
        it->cap = tighter(it->cap, e.cap);
      }
    }
    std::sort(a2a_classes_.begin(), a2a_classes_.end(),
              [](const AllToAllClass& a, const AllToAllClass& b) {
                return a.kind != b.kind ? a.kind < b.kind : a.wire < b.wire;
              });
    a2a_classes_made_ = true;
  }

  void add_p2p(GpuId a, GpuId b, double bytes) {
    const Edge& e = edge(a, b);
    add_step(step_links([&](auto& ids) { ids.assign(edge_links(e).begin(), edge_links(e).end()); }),
             bytes, step_lat(e), {}, false, e.cap);
  }

  const Cluster& c_;
  const CollectiveRequest& r_;
  NodeOrders nodes_;
  std::vector<std::vector<GpuId>> rings_;
  std::vector<std::vector<std::vector<GpuId>>> intra_rings_;  // by node in nodes_
  std::vector<TreeEdges> trees_;
  EdgeIndex edge_index_;
  std::deque<Edge> edges_;
  std::vector<platform::LinkId> edge_links_;       // every edge's links, one after another
  Time kind_latency_[4];                           // step_latency(a_, p_, kind) by LinkKind
  std::vector<std::vector<Depth>> tree_depths_;    // by tree in trees_
  std::vector<std::vector<const Edge*>> tree_up_;  // by tree: its edges, child to parent
  Algorithm a_ = Algorithm::ring;
  Protocol p_ = Protocol::simple;
  CollectivePlan* plan_ = nullptr;
  double channel_cap_ = 0;
  std::unordered_map<int, double> ring_rate_;  // by protocol: the ring's payload bytes/s
  std::map<int, std::deque<std::vector<LinkUse>>> link_cache_;  // deque: refs_ stay valid
  bool bare_ = false;
  LinkRefs refs_;
  std::map<int, std::vector<double>> rates_;  // by algorithm: rates()
  std::vector<uint32_t> crossings_;         // merge's dense counts, by link; all zero between calls
  std::vector<platform::LinkId> step_ids_;  // step_links' crossings of the step being merged
  const std::vector<LinkUse>* last_ref_ = nullptr;
  size_t ordinal_ = 0;
  // add_ring's edges by algorithm and call (deque: references stay valid), and the next call's.
  std::map<int, std::deque<std::vector<const Edge*>>> ring_edges_;
  size_t ring_ordinal_ = 0;
  // add_alltoall's classes of pairs (kind and wire latency), their crossings and tightest cap.
  struct AllToAllClass {
    config::LinkKind kind;
    Time wire;
    std::vector<platform::LinkId> ids;
    double cap = 0;
  };
  std::vector<AllToAllClass> a2a_classes_;
  bool a2a_classes_made_ = false;
};

std::vector<double> link_rates(const Cluster& c, const CollectivePlan& p, const LinkRefs* refs) {
  auto links_of = [&](size_t i) -> const std::vector<LinkUse>& {
    return refs && (*refs)[i] ? *(*refs)[i] : p.steps[i].links;
  };
  // Steps at the same depth of the dependency graph are taken to run together; each gets the
  // smallest equal share of the links it crosses.
  const size_t n = p.steps.size();
  std::vector<uint32_t> depth(n, 0);
  uint32_t max_depth = 0;
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t d : p.steps[i].deps) depth[i] = std::max(depth[i], depth[d] + 1);
    max_depth = std::max(max_depth, depth[i]);
  }
  // Steps by depth (a step's dependencies are at smaller depths), and one dense load per depth.
  std::vector<std::vector<uint32_t>> at(max_depth + 1);
  for (uint32_t i = 0; i < n; ++i) at[depth[i]].push_back(i);
  // The links' loads, all zero between calls (each level clears what it added): kept per
  // thread, so that a cluster of 10^5 links is not cleared for every small collective.
  thread_local std::vector<double> load;
  if (load.size() < c.links().size()) load.resize(c.links().size(), 0.0);
  std::vector<double> rates(n, std::numeric_limits<double>::infinity());
  for (const std::vector<uint32_t>& level : at) {
    for (uint32_t i : level) {
      for (const LinkUse& u : links_of(i)) load[u.link] += u.count;
    }
    for (uint32_t i : level) {
      for (const LinkUse& u : links_of(i)) {
        rates[i] = std::min(rates[i], c.links()[u.link].capacity_Bps / load[u.link]);
      }
    }
    for (uint32_t i : level) {
      for (const LinkUse& u : links_of(i)) load[u.link] = 0;
    }
  }
  return rates;
}

double estimate(const CollectivePlan& p, const std::vector<double>& rates, bool with_latency) {
  // Steps in order: a step's dependencies come before it.
  const size_t n = p.steps.size();
  std::vector<double> finish(n, 0);
  double end = 0;
  for (size_t i = 0; i < n; ++i) {
    double start = 0;
    for (uint32_t d : p.steps[i].deps) start = std::max(start, finish[d]);
    double rate = rates[i];
    if (p.steps[i].max_rate_Bps > 0) rate = std::min(rate, p.steps[i].max_rate_Bps);
    finish[i] = start + (with_latency ? p.steps[i].latency.seconds() : 0) +
                (std::isinf(rate) ? 0 : p.steps[i].bytes / rate);
    end = std::max(end, finish[i]);
  }
  return (with_latency ? p.start_delay.seconds() : 0) + end;
}

}  // namespace

double estimate_seconds(const Cluster& c, const CollectivePlan& p) {
  return estimate(p, link_rates(c, p), true);
}

bool ll128_by_default(const Cluster& c, const std::vector<GpuId>& ranks) {
  // NCCL enables LL128 by default only where its 128-byte stores are known to arrive in order
  // [nccl-tune]: one compute capability for every rank, among 7.0, 8.0, 9.0 (and 10.0 in recent
  // versions), and NVLink between the ranks of a node. AMD's and Intel's parts (RCCL, HCCL,
  // whose rules hetsim does not hold) keep LL128 open; any other profile without a compute
  // capability (a CPU) does not get it.
  if (ranks.empty()) return false;
  const config::GpuProfile& first = *c.gpu(ranks.front()).profile;
  const double cc = first.compute_capability;
  if (cc == 0) {
    static const char* const other[] = {"cdna2", "cdna3", "gaudi2"};
    return std::any_of(std::begin(other), std::end(other),
                       [&](const char* a) { return first.architecture == a; });
  }
  if (cc != 7.0 && cc != 8.0 && cc != 9.0 && cc != 10.0) return false;
  // The nodes that hold two or more of the ranks (by the ranks, not the cluster's nodes).
  std::vector<uint32_t> nodes;
  nodes.reserve(ranks.size());
  for (GpuId g : ranks) {
    if (c.gpu(g).profile->compute_capability != cc) return false;
    nodes.push_back(c.gpu(g).node);
  }
  std::sort(nodes.begin(), nodes.end());
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i] == nodes[i - 1] && c.node_type(nodes[i]).intra == config::IntraKind::pcie)
      return false;
  }
  return true;
}

CollectivePlan plan_collective(const Cluster& c, const CollectiveRequest& r) {
  if (r.ranks.empty()) throw InputError("a collective needs at least one rank");
  if (!(r.bytes >= 0)) throw InputError("--bytes: expected a non-negative size");
  Builder b(c, r);
  std::vector<Algorithm> algorithms;
  if (r.algorithm) {
    algorithms = {*r.algorithm};
  } else if (r.op == Op::alltoall || r.op == Op::sendrecv || r.op == Op::halo) {
    algorithms = {Algorithm::direct};
  } else if (r.op == Op::allreduce) {
    algorithms = {Algorithm::ring, Algorithm::tree};
    if (b.hierarchical_possible()) algorithms.push_back(Algorithm::hierarchical);
  } else {
    algorithms = {Algorithm::ring};
  }
  std::vector<Protocol> protocols;
  if (r.protocol) {
    protocols = {*r.protocol};  // as NCCL_PROTO, which may enable LL128 where NCCL would not
  } else if (r.op == Op::halo) {
    protocols = {Protocol::simple};  // as pipeline transfers (and Chakra's sends) are timed
  } else if (ll128_by_default(c, r.ranks)) {
    protocols = {Protocol::ll, Protocol::ll128, Protocol::simple};
  } else {
    protocols = {Protocol::ll, Protocol::simple};
  }
  // Every candidate estimated bare (its links left in the builder's cache), then the best one
  // built whole.
  b.set_bare(true);
  Algorithm best_a = algorithms.front();
  Protocol best_p = protocols.front();
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : algorithms) {
    for (Protocol p : protocols) {
      const CollectivePlan plan = b.build(a, p);
      const double s = estimate(plan, b.rates(plan), true);
      if (s < best_s) best_a = a, best_p = p, best_s = s;
    }
  }
  b.set_bare(false);
  CollectivePlan best = b.build(best_a, best_p);
  best.estimate_s = best_s;
  return best;
}

namespace {
void shift_links(CollectivePlan& p, int64_t by) {
  for (PlanStep& s : p.steps) {
    for (LinkUse& u : s.links) u.link = static_cast<platform::LinkId>(u.link + by);
  }
}
}  // namespace

CollectivePlan NodePlans::plan(const CollectiveRequest& r) {
  if (r.ranks.empty() || !(r.bytes >= 0) || c_.links_scaled()) return plan_collective(c_, r);
  const uint32_t node = c_.gpu(r.ranks.front()).node;
  Key k;
  k.type = c_.node(node).type;
  k.locals.reserve(r.ranks.size());
  for (platform::GpuId g : r.ranks) {
    if (c_.gpu(g).node != node) return plan_collective(c_, r);
    k.locals.push_back(c_.gpu(g).local);
  }
  k.op = r.op;
  k.bytes = r.bytes;
  k.algorithm = r.algorithm;
  k.protocol = r.protocol;
  k.expansion = r.expansion;
  k.host_launch = r.host_launch;
  const int64_t base = c_.node(node).link_base;
  if (auto it = plans_.find(k); it != plans_.end()) {
    CollectivePlan p = it->second;
    shift_links(p, base);
    return p;
  }
  CollectivePlan p = plan_collective(c_, r);
  const int64_t end = base + static_cast<int64_t>(c_.node_link_count(node));
  for (const PlanStep& s : p.steps) {
    for (const LinkUse& u : s.links) {
      if (u.link < base || u.link >= end) return p;  // a route that leaves the node: not kept
    }
  }
  CollectivePlan kept = p;
  shift_links(kept, -base);
  plans_.emplace(std::move(k), std::move(kept));
  return p;
}

}  // namespace hetsim::network
