// TrainingJob -> Chakra traces; see export.h.
#include "sim/chakra/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "sim/core/error.h"

namespace hetsim::chakra {

namespace {

using workload::CommKind;
using workload::Pass;
using workload::StageCopy;
using workload::Task;
using workload::TaskKind;
using workload::TrainingJob;

CommType comm_type(CommKind k) {
  switch (k) {
    case CommKind::allgather:
      return CommType::all_gather;
    case CommKind::reducescatter:
      return CommType::reduce_scatter;
    case CommKind::alltoall:
      return CommType::all_to_all;
    case CommKind::allreduce:
    case CommKind::halo:  // sends and receives (Exporter::halo), never a collective
    case CommKind::none:
      break;
  }
  return CommType::all_reduce;
}

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::forward:
      return "fwd";
    case Pass::backward:
      return "bwd";
    case Pass::recompute:
      return "recompute";
    case Pass::other:
      break;
  }
  return "other";
}

uint64_t whole(double x) { return static_cast<uint64_t>(std::llround(std::max(0.0, x))); }

class Exporter {
 public:
  explicit Exporter(const TrainingJob& job) : job_(job) {
    std::set<platform::GpuId> gpus;
    for (const StageCopy& g : job.copies) gpus.insert(g.devices.begin(), g.devices.end());
    out_.gpu_of_rank.assign(gpus.begin(), gpus.end());
    for (uint32_t r = 0; r < out_.gpu_of_rank.size(); ++r) rank_of_[out_.gpu_of_rank[r]] = r;
    out_.traces.ranks.resize(gpus.size());
    for (const auto& r : job.plan->replicas)
      mbs_ = std::max(mbs_, static_cast<uint32_t>(r.micro_batches));
  }

  Exported run() {
    for (uint32_t g = 0; g < job_.copies.size(); ++g) {
      for (uint32_t k = 0; k < job_.copies[g].devices.size(); ++k) program(g, k);
    }
    return std::move(out_);
  }

 private:
  // Where rank `k` of copy `g` is in its program: the nodes the next node waits for.
  struct Cursor {
    Trace* trace = nullptr;
    uint32_t rank = 0;
    std::vector<uint64_t> frontier;  // the last blocking node(s) and what a wait added
    std::vector<uint64_t> async_tp;  // asynchronous tensor-parallel collectives not waited for
    // Data-parallel collectives, in issue order: each task's nodes (one per shard this rank
    // holds: one, unless replicas split the layers over different tensor-parallel degrees).
    std::vector<std::vector<uint64_t>> dp;
  };

  uint64_t add(Cursor& c, Node n, std::vector<uint64_t> extra = {}) {
    n.id = c.trace->nodes.size();
    n.data_deps = c.frontier;
    n.data_deps.insert(n.data_deps.end(), extra.begin(), extra.end());
    c.trace->nodes.push_back(std::move(n));
    return c.trace->nodes.back().id;
  }

  uint32_t rank(platform::GpuId g) const { return rank_of_.at(g); }

  // The process group of these GPUs (in the order the replay gives them to the collective).
  std::string group(const std::vector<platform::GpuId>& gpus) {
    std::vector<uint32_t> ranks;
    for (platform::GpuId g : gpus) ranks.push_back(rank(g));
    auto [it, fresh] = group_names_.try_emplace(ranks, std::to_string(group_names_.size()));
    if (fresh) out_.traces.groups[it->second] = ranks;
    return it->second;
  }

  Node collective(std::string name, CommKind kind, double bytes, std::string pg) {
    Node n;
    n.type = NodeType::collective;
    n.name = std::move(name);
    n.comm_type = comm_type(kind);
    n.comm_size = whole(bytes);
    n.pg_name = std::move(pg);
    return n;
  }

  // A pipeline transfer's tag, the same on both ends: the receiving side's (direction, chunk,
  // micro-batch) and the tensor-parallel slice. Unique between two ranks within an iteration.
  int64_t tag(bool backward, uint32_t chunk, uint32_t mb, uint32_t slice, size_t slices) const {
    const int64_t t = ((static_cast<int64_t>(backward) * job_.chunks + chunk) * mbs_ + mb) *
                          static_cast<int64_t>(slices) +
                      slice;
    if (t > std::numeric_limits<int32_t>::max())
      throw RunError("export-chakra: a pipeline transfer tag past 2^31");
    return t;
  }

  void program(uint32_t g, uint32_t k) {
    const StageCopy& copy = job_.copies[g];
    const platform::GpuId self = copy.devices[k];
    Cursor c;
    c.rank = rank(self);
    c.trace = &out_.traces.ranks[c.rank];
    for (size_t at = 0; at < copy.program.size(); ++at) {
      const Task& t = copy.program[at];
      switch (t.kind) {
        case TaskKind::compute: {
          const workload::Segment& seg = copy.segments[t.index];
          Node n;
          n.type = NodeType::compute;
          n.name = fmt::format("{} mb{} chunk{} layer{} segment{}", pass_name(t.pass),
                               t.micro_batch, t.chunk, t.layer, t.index);
          n.duration_micros = whole(static_cast<double>(seg.duration.ps()) * 1e-6);
          n.duration_ps = static_cast<uint64_t>(seg.duration.ps());
          n.num_ops = whole(seg.flops);
          double bytes = 0;
          for (const auto& [op, d] : seg.ops) bytes += copy.ops[op].bytes;
          n.tensor_size = whole(bytes);
          c.frontier = {add(c, std::move(n))};
          break;
        }
        case TaskKind::tp_comm: {
          const workload::CommTemplate& ct = copy.comms[t.index];
          if (ct.kind == CommKind::halo) {
            halo(c, copy, k, ct, t, at);
            break;
          }
          const uint64_t id = add(c, collective(fmt::format("{} mb{}", ct.name, t.micro_batch),
                                                ct.kind, ct.bytes, group(copy.devices)));
          if (ct.async) {
            c.async_tp.push_back(id);
          } else {
            c.frontier = {id};
          }
          break;
        }
        case TaskKind::ep_comm:
        case TaskKind::cp_comm: {
          // Over rank k of this stage in every replica of the expert- or context-parallel
          // group; an async one (ring attention's key/value exchange) joins the next wait.
          const workload::CommTemplate& ct = copy.comms[t.index];
          const std::vector<platform::GpuId> peers = job_.peer_ranks(g, ct, k);
          const uint64_t id = add(c, collective(fmt::format("{} mb{}", ct.name, t.micro_batch),
                                                ct.kind, ct.bytes, group(peers)));
          if (ct.async) {
            c.async_tp.push_back(id);
          } else {
            c.frontier = {id};
          }
          break;
        }
        case TaskKind::tp_wait:
          c.frontier.insert(c.frontier.end(), c.async_tp.begin(), c.async_tp.end());
          c.async_tp.clear();
          break;
        case TaskKind::send:
          send(c, g, self, t);
          break;
        case TaskKind::recv:
          recv(c, g, self, t);
          break;
        case TaskKind::dp_comm: {
          const auto index = static_cast<uint32_t>(c.dp.size());
          const workload::DpCollective& dc = copy.dp.at(index);
          const workload::DpSync& sync = job_.dp_syncs.at(dc.sync);
          const std::vector<uint64_t> after = c.dp.empty() ? std::vector<uint64_t>{} : c.dp.back();
          std::vector<uint64_t> nodes;
          for (uint32_t p = 0; p < sync.pieces; ++p) {
            // A grid's collective (a domain-parallel layer's gradients, which every rank holds
            // whole) is one over every member's ranks, in the replay's order.
            if (!dc.grid && sync.holder(p, copy.devices.size()) != k) continue;
            std::vector<platform::GpuId> peers;
            for (uint32_t m : job_.dp_peers[sync.peers]) {
              const auto& d = job_.copies[m].devices;
              if (dc.grid) {
                peers.insert(peers.end(), d.begin(), d.end());
              } else {
                peers.push_back(d[sync.holder(p, d.size())]);
              }
            }
            nodes.push_back(
                add(c, collective(dc.name, dc.kind, sync.piece_bytes, group(peers)), after));
          }
          c.dp.push_back(std::move(nodes));
          break;
        }
        case TaskKind::dp_wait:
          if (t.index > c.dp.size())
            throw RunError("export-chakra: a data-parallel wait before its collective");
          if (t.index > 0)
            c.frontier.insert(c.frontier.end(), c.dp[t.index - 1].begin(), c.dp[t.index - 1].end());
          break;
        case TaskKind::tied:
          tied(c, copy, self);
          break;
      }
    }
  }

  // The copy and chunk a transfer of task `t` from copy `g` goes to (as the replay sends).
  std::pair<uint32_t, uint32_t> destination(uint32_t g, const Task& t) const {
    const StageCopy& src = job_.copies[g];
    const uint32_t P = job_.stages_of(src.replica);
    uint32_t stage = src.stage, chunk = t.chunk;
    if (t.pass != Pass::backward) {
      if (stage + 1 < P) {
        ++stage;
      } else {
        stage = 0;
        ++chunk;
      }
    } else if (stage > 0) {
      --stage;
    } else {
      stage = P - 1;
      --chunk;
    }
    return {job_.first_copy[src.replica] + stage, chunk};
  }

  // Where a receive of task `t` in copy `g` comes from: the inverse of destination().
  uint32_t source(uint32_t g, const Task& t) const {
    const StageCopy& dst = job_.copies[g];
    const uint32_t P = job_.stages_of(dst.replica);
    uint32_t stage = dst.stage;
    if (t.pass != Pass::backward) {
      stage = stage > 0 ? stage - 1 : P - 1;
    } else {
      stage = stage + 1 < P ? stage + 1 : 0;
    }
    return job_.first_copy[dst.replica] + stage;
  }

  // Megatron's scatter-gather, as the replay moves it: slice j from rank j of the sender to
  // rank j of the receiver (modulo each side's width), 1/n of the activation each.
  void send(Cursor& c, uint32_t g, platform::GpuId self, const Task& t) {
    const auto [dst, chunk] = destination(g, t);
    const auto& a = job_.copies[g].devices;
    const auto& b = job_.copies[dst].devices;
    const size_t n = std::max(a.size(), b.size());
    const bool backward = t.pass == Pass::backward;
    std::vector<uint64_t> sent;
    for (uint32_t j = 0; j < n; ++j) {
      if (a[j % a.size()] != self) continue;
      Node s;
      s.type = NodeType::send;
      s.name =
          fmt::format("send {} mb{} chunk{} slice{}", pass_name(t.pass), t.micro_batch, chunk, j);
      s.comm_src = c.rank;
      s.comm_dst = rank(b[j % b.size()]);
      s.comm_tag = tag(backward, chunk, t.micro_batch, j, n);
      s.comm_size = whole(job_.activation_bytes_per_transfer / static_cast<double>(n));
      sent.push_back(add(c, std::move(s)));
    }
    // DeepSpeed's blocking send holds the stage until the data has arrived.
    if (job_.plan->framework.blocking_p2p && !sent.empty()) c.frontier = sent;
  }

  void recv(Cursor& c, uint32_t g, platform::GpuId self, const Task& t) {
    const uint32_t src = source(g, t);
    const auto& a = job_.copies[src].devices;
    const auto& b = job_.copies[g].devices;
    const size_t n = std::max(a.size(), b.size());
    const bool backward = t.pass == Pass::backward;
    std::vector<uint64_t> got;
    for (uint32_t j = 0; j < n; ++j) {
      if (b[j % b.size()] != self) continue;
      Node r;
      r.type = NodeType::recv;
      r.name =
          fmt::format("recv {} mb{} chunk{} slice{}", pass_name(t.pass), t.micro_batch, t.chunk, j);
      r.comm_src = rank(a[j % a.size()]);
      r.comm_dst = c.rank;
      r.comm_tag = tag(backward, t.chunk, t.micro_batch, j, n);
      r.comm_size = whole(job_.activation_bytes_per_transfer / static_cast<double>(n));
      got.push_back(add(c, std::move(r)));
    }
    if (!got.empty()) c.frontier = got;
  }

  // A halo exchange (a domain-parallel convolution's border columns): rank k of the copy sends
  // to each neighbour in the copy's order and receives from it, as grouped point-to-point
  // calls; what follows waits for all of them, as the replay's exchange ends for the copy at
  // once. The tag is the task's place in the copy's program, the same on both ends.
  void halo(Cursor& c, const StageCopy& copy, uint32_t k, const workload::CommTemplate& ct,
            const Task& t, size_t at) {
    if (at > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw RunError("export-chakra: a halo exchange's tag past 2^31");
    const auto& d = copy.devices;
    std::vector<uint32_t> neighbours;
    if (k > 0) neighbours.push_back(rank(d[k - 1]));
    if (k + 1 < d.size()) neighbours.push_back(rank(d[k + 1]));
    std::vector<uint64_t> nodes;
    for (const bool is_send : {true, false}) {
      for (uint32_t peer : neighbours) {
        Node n;
        n.type = is_send ? NodeType::send : NodeType::recv;
        n.name = fmt::format("{} mb{} {} rank {}", ct.name, t.micro_batch,
                             is_send ? "send to" : "recv from", peer);
        n.comm_src = is_send ? c.rank : peer;
        n.comm_dst = is_send ? peer : c.rank;
        n.comm_tag = static_cast<int64_t>(at);
        n.comm_size = whole(ct.bytes);
        nodes.push_back(add(c, std::move(n)));
      }
    }
    if (!nodes.empty()) c.frontier = std::move(nodes);
  }

  // The tied embedding's gradients: pair j of the end stages' ranks all-reduces its shard.
  void tied(Cursor& c, const StageCopy& copy, platform::GpuId self) {
    const auto& a = job_.copy(copy.replica, 0).devices;
    const auto& b = job_.copy(copy.replica, job_.stages_of(copy.replica) - 1).devices;
    const size_t n = std::max(a.size(), b.size());
    const double bytes = workload::tied_pair_bytes(job_, copy.replica);
    std::vector<uint64_t> pairs;
    for (uint32_t j = 0; j < n; ++j) {
      const std::vector<platform::GpuId> pair{a[j % a.size()], b[j % b.size()]};
      if (pair[0] != self && pair[1] != self) continue;
      pairs.push_back(
          add(c, collective("tied.embedding.grads", CommKind::allreduce, bytes, group(pair))));
    }
    if (!pairs.empty()) c.frontier = pairs;
  }

  const TrainingJob& job_;
  uint32_t mbs_ = 1;
  Exported out_;
  std::map<platform::GpuId, uint32_t> rank_of_;
  std::map<std::vector<uint32_t>, std::string> group_names_;
};

}  // namespace

Exported export_job(const TrainingJob& job) {
  if (job.plan->staged()) {
    throw InputError("plan " + job.plan->source +
                     ": stages: a staged plan's re-sharded transfers (one stage's groups to the "
                     "next's, by shared samples) are not exported to Chakra");
  }
  return Exporter(job).run();
}

}  // namespace hetsim::chakra
