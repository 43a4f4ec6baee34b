// The Chakra trace replay; see replay.h.
#include "sim/chakra/replay.h"

#include <algorithm>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <tuple>

#include "sim/chakra/et_io.h"
#include "sim/core/engine.h"
#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/network/protocol.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::chakra {

namespace {

network::Op to_op(CommType t) {
  switch (t) {
    case CommType::all_gather:
      return network::Op::allgather;
    case CommType::reduce_scatter:
      return network::Op::reducescatter;
    case CommType::all_to_all:
      return network::Op::alltoall;
    case CommType::broadcast:
      return network::Op::broadcast;
    default:
      return network::Op::allreduce;  // et_io.cpp admits no other type
  }
}

class Runner {
 public:
  Runner(const TraceSet& t, const platform::Cluster& c)
      : t_(t), c_(c), net_(engine_, c.capacities()) {
    const size_t n = t.ranks.size();
    if (n > c.gpu_count()) {
      throw InputError(where_all() + ": " + std::to_string(n) + " ranks but the cluster has " +
                       std::to_string(c.gpu_count()) +
                       " GPUs (rank i runs on GPU i; expected at most " +
                       std::to_string(c.gpu_count()) + " trace files)");
    }
    ranks_.resize(n);
    for (uint32_t r = 0; r < n; ++r) index_rank(r);
  }

  ReplayResult run() {
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      for (uint32_t i = 0; i < ranks_[r].nodes.size(); ++i)
        if (ranks_[r].nodes[i].waiting == 0) ready_.push_back({r, i});
    }
    engine_.schedule_at(Time(), [this] { drain(); });
    engine_.run();
    check_finished();
    ReplayResult out;
    for (const Rank& r : ranks_) {
      out.ranks.push_back(r.times);
      out.iteration = std::max(out.iteration, r.times.finish);
      out.nodes += r.nodes.size();
    }
    out.collectives = instances_.size();
    out.transfers = transfers_.size();
    out.events = engine_.events_executed();
    out.flows = flows_;
    return out;
  }

 private:
  struct NodeState {
    uint32_t waiting = 0;  // dependencies not done
    bool ready = false, done = false;
    std::vector<uint32_t> children;
    int64_t instance = -1;  // collective: index into instances_
    int64_t transfer = -1;  // send / recv: index into transfers_
  };
  // One of a rank's serial engines: its nodes in the order they became ready, one at a time.
  struct Queue {
    std::deque<uint32_t> ready;
    bool busy = false;
  };
  // The GPU's compute stream, the host thread that runs the CPU operators (is_cpu_op: the
  // PyTorch converter's aten ops beside their kernels, as ASTRA-sim runs one CPU and one GPU
  // operator at a time) and the copy engine that loads and stores tensors over PCIe.
  enum Lane { kGpu, kCpu, kCopy };
  struct Rank {
    std::vector<NodeState> nodes;
    Queue queues[3];
    RankTimes times;
  };
  // One collective as every member runs it: the k-th collective of a process group in each
  // member's file.
  struct Instance {
    std::string group;
    uint32_t seq = 0;
    std::vector<uint32_t> members;
    std::vector<int64_t> node;  // per member: its node, -1 while none seen
    uint32_t arrived = 0;
  };
  // One send and its receive: the k-th of (source, destination, tag) on each side.
  struct Transfer {
    uint32_t src = 0, dst = 0;
    int64_t tag = 0;
    int64_t send = -1, recv = -1;  // node index on each side
    bool arrived = false, recv_ready = false;
  };

  std::string where(uint32_t r) const {
    return r < t_.sources.size() ? t_.sources[r] : "rank " + std::to_string(r);
  }
  std::string where_all() const {
    if (t_.sources.empty()) return "traces";
    const auto slash = t_.sources.front().find_last_of('/');
    return slash == std::string::npos ? "." : t_.sources.front().substr(0, slash);
  }
  std::string describe(uint32_t r, uint32_t i) const {
    const Node& n = t_.ranks[r].nodes[i];
    return where(r) + ": node " + std::to_string(n.id) + " \"" + n.name + "\" (" +
           to_string(n.type) + ")";
  }

  // Node indices, children, collective instances and transfers of rank r.
  void index_rank(uint32_t r) {
    const std::vector<Node>& nodes = t_.ranks[r].nodes;
    Rank& rank = ranks_[r];
    rank.nodes.resize(nodes.size());
    std::map<uint64_t, uint32_t> at;
    for (uint32_t i = 0; i < nodes.size(); ++i) at[nodes[i].id] = i;
    std::map<std::string, uint32_t> seq;
    for (uint32_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      std::vector<uint32_t> deps;
      for (uint64_t d : n.data_deps) deps.push_back(at.at(d));
      for (uint64_t d : n.ctrl_deps) deps.push_back(at.at(d));
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      rank.nodes[i].waiting = static_cast<uint32_t>(deps.size());
      for (uint32_t d : deps) rank.nodes[d].children.push_back(i);
      if (n.type == NodeType::collective) {
        // No pg_name: every rank (the group "" stands for them).
        const std::string g = n.pg_name.value_or("");
        rank.nodes[i].instance = join(g, seq[g]++, r, i);
      } else if (n.type == NodeType::send || n.type == NodeType::recv) {
        rank.nodes[i].transfer = pair_up(r, i);
      }
    }
  }

  int64_t join(const std::string& g, uint32_t k, uint32_t r, uint32_t i) {
    auto [it, fresh] = instance_at_.try_emplace({g, k}, instances_.size());
    if (fresh) {
      Instance inst;
      inst.group = g;
      inst.seq = k;
      if (g.empty()) {
        for (uint32_t m = 0; m < ranks_.size(); ++m) inst.members.push_back(m);
      } else {
        inst.members = t_.groups.at(g);
      }
      inst.node.assign(inst.members.size(), -1);
      instances_.push_back(std::move(inst));
    }
    Instance& inst = instances_[it->second];
    const size_t m = static_cast<size_t>(std::find(inst.members.begin(), inst.members.end(), r) -
                                         inst.members.begin());
    inst.node[m] = i;
    // Every member's copy must be the same collective.
    for (size_t o = 0; o < inst.members.size(); ++o) {
      if (o == m || inst.node[o] < 0) continue;
      const Node& a = t_.ranks[inst.members[o]].nodes[static_cast<size_t>(inst.node[o])];
      const Node& b = t_.ranks[r].nodes[i];
      if (a.comm_type != b.comm_type || a.comm_size != b.comm_size) {
        throw InputError(describe(r, i) + ": collective #" + std::to_string(k) + " of group \"" +
                         g + "\" is " + to_string(*b.comm_type) + " of " +
                         std::to_string(*b.comm_size) + " bytes, but " +
                         describe(inst.members[o], static_cast<uint32_t>(inst.node[o])) + " is " +
                         to_string(*a.comm_type) + " of " + std::to_string(*a.comm_size) +
                         " bytes (expected every member to run the same collective)");
      }
      break;
    }
    return static_cast<int64_t>(it->second);
  }

  int64_t pair_up(uint32_t r, uint32_t i) {
    const Node& n = t_.ranks[r].nodes[i];
    const bool is_send = n.type == NodeType::send;
    const auto src = static_cast<uint32_t>(is_send ? r : *n.comm_src);
    const auto dst = static_cast<uint32_t>(is_send ? *n.comm_dst : r);
    const int64_t tag = n.comm_tag.value_or(0);
    const auto key = std::make_tuple(src, dst, tag);
    uint32_t& k = (is_send ? sends_seen_ : recvs_seen_)[key];
    auto [it, fresh] =
        transfer_at_.try_emplace(std::make_tuple(src, dst, tag, k++), transfers_.size());
    if (fresh) transfers_.push_back({src, dst, tag});
    Transfer& x = transfers_[it->second];
    (is_send ? x.send : x.recv) = i;
    return static_cast<int64_t>(it->second);
  }

  // ---- running ------------------------------------------------------------------------------
  // Starts every node whose dependencies are done; a loop, not recursion, so that long chains of
  // nodes that finish at once cannot exhaust the stack.
  void drain() {
    if (draining_) return;
    draining_ = true;
    while (!ready_.empty()) {
      const auto [r, i] = ready_.front();
      ready_.pop_front();
      start(r, i);
    }
    draining_ = false;
  }

  void finish(uint32_t r, uint32_t i) {
    Rank& rank = ranks_[r];
    NodeState& s = rank.nodes[i];
    s.done = true;
    rank.times.finish = std::max(rank.times.finish, engine_.now());
    for (uint32_t ch : s.children)
      if (--rank.nodes[ch].waiting == 0) ready_.push_back({r, ch});
    drain();
  }

  void start(uint32_t r, uint32_t i) {
    Rank& rank = ranks_[r];
    NodeState& s = rank.nodes[i];
    s.ready = true;
    const Node& n = t_.ranks[r].nodes[i];
    switch (n.type) {
      case NodeType::compute:
        run_on(r, n.is_cpu_op ? kCpu : kGpu, i);
        return;
      case NodeType::mem_load:
      case NodeType::mem_store:
        run_on(r, kCopy, i);
        return;
      case NodeType::collective:
        arrive(static_cast<size_t>(s.instance));
        return;
      case NodeType::send:
        send(static_cast<size_t>(s.transfer));
        return;
      case NodeType::recv: {
        Transfer& x = transfers_[static_cast<size_t>(s.transfer)];
        x.recv_ready = true;
        if (x.arrived) finish(r, i);
        return;
      }
      default:  // metadata: nothing to run
        finish(r, i);
        return;
    }
  }

  void run_on(uint32_t r, Lane e, uint32_t i) {
    ranks_[r].queues[e].ready.push_back(i);
    next(r, e);
  }

  // How long node n of rank r takes: hetsim's exact duration where the trace has it, else
  // Chakra's microseconds; a node that gives neither but its work (symbolic_tensor_graph's
  // num_ops and tensor_size) takes the roofline of its GPU's datasheet, as ASTRA-sim's does: the
  // larger of its FLOPs at the 16-bit dense peak and its bytes at the memory bandwidth; a
  // tensor loaded or stored takes its bytes over the node's PCIe link.
  Time duration(uint32_t r, const Node& n) const {
    if (n.duration_ps) return Time::ps(static_cast<int64_t>(*n.duration_ps));
    if (n.duration_micros > 0) return Time::us(static_cast<int64_t>(n.duration_micros));
    const platform::Gpu& gpu = c_.gpu(r);
    const double bytes = static_cast<double>(n.tensor_size.value_or(0));
    if (n.type == NodeType::mem_load || n.type == NodeType::mem_store) {
      const config::PcieTree& pcie = c_.node_type(gpu.node).pcie;
      if (!pcie.present || !(pcie.bandwidth_Bps > 0)) {
        throw InputError(where(r) + ": node " + std::to_string(n.id) + " \"" + n.name + "\" (" +
                         to_string(n.type) + ") moves " +
                         std::to_string(n.tensor_size.value_or(0)) +
                         " bytes to or from the host, but " + c_.gpu_name(r) +
                         "'s node type describes no PCIe link (give its `pcie:`)");
      }
      return Time::from_seconds_ceil(bytes / pcie.bandwidth_Bps);
    }
    const double flops = static_cast<double>(n.num_ops.value_or(0));
    if (flops == 0 && bytes == 0) return Time();
    const config::GpuProfile& p = *gpu.profile;
    return Time::from_seconds_ceil(
        std::max(flops > 0 ? flops / workload::peak_flops(p, workload::Precision::fp16) : 0.0,
                 bytes / p.memory_bandwidth_Bps));
  }

  void next(uint32_t r, Lane e) {
    Queue& q = ranks_[r].queues[e];
    if (q.busy || q.ready.empty()) return;
    const uint32_t i = q.ready.front();
    q.ready.pop_front();
    q.busy = true;
    const Time d = duration(r, t_.ranks[r].nodes[i]);
    engine_.schedule_in(d, [this, r, e, i, d] {
      Rank& rk = ranks_[r];
      (e == kGpu ? rk.times.compute : e == kCpu ? rk.times.cpu : rk.times.copy) += d;
      rk.queues[e].busy = false;
      finish(r, i);
      next(r, e);
    });
  }

  void arrive(size_t k) {
    Instance& inst = instances_[k];
    if (++inst.arrived < inst.members.size()) return;
    const Node& first = t_.ranks[inst.members[0]].nodes[static_cast<size_t>(inst.node[0])];
    std::vector<platform::GpuId> gpus(inst.members.begin(), inst.members.end());
    auto& plan =
        plans_[std::make_tuple(static_cast<int>(*first.comm_type), *first.comm_size, gpus)];
    if (!plan) {
      network::CollectiveRequest req;
      req.op = to_op(*first.comm_type);
      req.bytes = static_cast<double>(*first.comm_size);
      req.ranks = gpus;
      req.host_launch = false;  // queued ahead on the stream, as in hetsim's training replay
      plan = std::make_unique<network::CollectivePlan>(network::plan_collective(c_, req));
    }
    flows_ += plan->steps.size();
    runs_.emplace_back();
    auto it = std::prev(runs_.end());
    *it = std::make_unique<network::CollectiveRun>(engine_, net_, *plan, [this, it, k] {
      // Free the run after this event (it is on the stack).
      engine_.schedule_in(Time(), [this, it] { runs_.erase(it); });
      const Instance& done = instances_[k];
      for (size_t m = 0; m < done.members.size(); ++m)
        finish(done.members[m], static_cast<uint32_t>(done.node[m]));
    });
    (*it)->start();
  }

  void send(size_t k) {
    Transfer& x = transfers_[k];
    const Node& n = t_.ranks[x.src].nodes[static_cast<size_t>(x.send)];
    auto arrived = [this, k] {
      Transfer& y = transfers_[k];
      y.arrived = true;
      finish(y.src, static_cast<uint32_t>(y.send));
      if (y.recv >= 0 && y.recv_ready) finish(y.dst, static_cast<uint32_t>(y.recv));
    };
    network::FlowSpec f;
    f.bytes = static_cast<double>(*n.comm_size);
    if (x.src != x.dst) {
      const auto route = c_.route(x.src, x.dst);
      for (platform::LinkId l : route) f.links.push_back({l, 1});
      network::merge_links(f.links);
      // As the training replay times a pipeline transfer.
      f.latency = network::step_latency(network::Algorithm::direct, network::Protocol::simple,
                                        c_.route_kind(route)) +
                  c_.route_latency(route);
    }
    f.on_done = arrived;
    ++flows_;
    net_.start(std::move(f));
  }

  // ---- a stalled replay -----------------------------------------------------------------------
  void check_finished() const {
    std::vector<std::string> why;
    bool any_left = false;
    for (uint32_t r = 0; r < ranks_.size() && why.size() < 4; ++r) {
      for (uint32_t i = 0; i < ranks_[r].nodes.size(); ++i) {
        const NodeState& s = ranks_[r].nodes[i];
        if (s.done) continue;
        any_left = true;
        if (!s.ready) continue;
        why.push_back(stalled_at(r, i));
        break;  // the first blocked node of a rank says enough
      }
    }
    if (!any_left) return;
    std::string msg = where_all() + ": replay stalled at " +
                      std::to_string(engine_.now().seconds() * 1e3) + " ms:";
    if (why.empty()) {
      msg += "\n  every unfinished node waits for another unfinished node (a dependency cycle)";
    }
    for (const std::string& w : why) msg += "\n  " + w;
    throw InputError(msg);
  }

  std::string stalled_at(uint32_t r, uint32_t i) const {
    const NodeState& s = ranks_[r].nodes[i];
    const std::string at = describe(r, i);
    if (s.instance >= 0) {
      const Instance& inst = instances_[static_cast<size_t>(s.instance)];
      std::string missing;
      for (size_t m = 0; m < inst.members.size(); ++m) {
        const uint32_t o = inst.members[m];
        if (inst.node[m] >= 0 && ranks_[o].nodes[static_cast<size_t>(inst.node[m])].ready) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(o);
        missing += inst.node[m] < 0 ? " (has no such collective)" : " (its node waits on others)";
      }
      return at + ": collective #" + std::to_string(inst.seq) + " of group \"" + inst.group +
             "\" waits for ranks " + missing + " that never reach it";
    }
    if (s.transfer >= 0) {
      const Transfer& x = transfers_[static_cast<size_t>(s.transfer)];
      if (x.send < 0) {
        return at + ": no COMM_SEND_NODE in rank " + std::to_string(x.src) +
               "'s trace matches it (comm_src " + std::to_string(x.src) + ", comm_tag " +
               std::to_string(x.tag) + ")";
      }
      return at + ": waits for " + describe(x.src, static_cast<uint32_t>(x.send)) +
             ", which never starts";
    }
    return at + ": never finishes";
  }

  const TraceSet& t_;
  const platform::Cluster& c_;
  Engine engine_;
  network::FlowNetwork net_;
  std::vector<Rank> ranks_;
  std::deque<std::pair<uint32_t, uint32_t>> ready_;
  bool draining_ = false;
  std::vector<Instance> instances_;
  std::map<std::pair<std::string, uint32_t>, size_t> instance_at_;
  std::vector<Transfer> transfers_;
  std::map<std::tuple<uint32_t, uint32_t, int64_t>, uint32_t> sends_seen_, recvs_seen_;
  std::map<std::tuple<uint32_t, uint32_t, int64_t, uint32_t>, size_t> transfer_at_;
  std::map<std::tuple<int, uint64_t, std::vector<platform::GpuId>>,
           std::unique_ptr<network::CollectivePlan>>
      plans_;
  std::list<std::unique_ptr<network::CollectiveRun>> runs_;
  uint64_t flows_ = 0;
};

}  // namespace

ReplayResult replay(const TraceSet& traces, const platform::Cluster& cluster) {
  validate(traces);  // read_traces has, but traces made in memory may not have been
  return Runner(traces, cluster).run();
}

}  // namespace hetsim::chakra
