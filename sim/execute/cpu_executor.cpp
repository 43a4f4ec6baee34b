// The CPU backend of `hetsim execute`; see executor.h.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <thread>

#include "calibrate/cpu/kernels.h"
#include "calibrate/measured_cost_model.h"
#include "sim/core/error.h"
#include "sim/execute/executor.h"

namespace hetsim::execute {

using workload::CommKind;
using workload::OpKind;
using workload::StageCopy;
using workload::Task;
using workload::TaskKind;

MpiSession::MpiSession() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void check_cpu_job(const workload::TrainingJob& job, int ranks) {
  const workload::Plan& plan = *job.plan;
  if (job.model->convolutional()) {
    throw InputError(fmt::format(
        "{}: is a convolutional network; {} handles transformers only (hetsim simulate replays it "
        "on a grid plan: grid: {{rows, columns}}, split: gholami)",
        job.model->name, "execute"));
  }
  if (plan.precision != workload::Precision::fp32) {
    throw InputError("plan " + plan.source +
                     ": precision: the CPU backend runs fp32 kernels "
                     "(OpenBLAS has no 16-bit GEMM here); expected precision: fp32, got " +
                     workload::to_string(plan.precision));
  }
  if (plan.flash_attention) {
    throw InputError("plan " + plan.source +
                     ": attention: the CPU backend has no fused (flash) attention kernel; "
                     "expected attention: standard");
  }
  int tag_ub = 32767, flag = 0;
  int* ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_ub = *ub;
  for (const workload::ReplicaPlan& r : plan.replicas) {
    if (2.0 * job.chunks * r.micro_batches > tag_ub) {
      throw InputError(
          fmt::format("plan {}: {} micro-batches x {} chunks: more pipeline "
                      "transfers than this MPI's tags ({}) can tell apart",
                      plan.source, r.micro_batches, job.chunks, tag_ub));
    }
  }
  uint32_t top = 0;
  for (const StageCopy& g : job.copies)
    for (platform::GpuId d : g.devices) top = std::max(top, d + 1);
  if (static_cast<int>(top) > ranks) {
    throw InputError(fmt::format(
        "plan {}: its devices go up to GPU {} ({} ranks needed, one per GPU of the cluster up to "
        "the last the plan uses), but {} rank{} started: run under mpirun -np {}",
        plan.source, top - 1, top, ranks, ranks == 1 ? " was" : "s were", top));
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// Floats in a message of `bytes`; MPI counts are ints.
int floats(double bytes) {
  const double n = std::max(1.0, std::ceil(bytes / 4));
  if (n > static_cast<double>(std::numeric_limits<int>::max())) {
    throw RunError(fmt::format(
        "execute: a message of {:.3g} bytes is beyond MPI's int count of floats; the CPU backend "
        "runs small models",
        bytes));
  }
  return static_cast<int>(n);
}

// The kernels of one rank's program, their buffers made once.
class Kernels {
 public:
  explicit Kernels(const StageCopy& g) {
    size_t a = 1, b = 1, c = 1, mem = 1024;
    for (const workload::Op& op : g.ops) {
      if (op.kind == OpKind::gemm) {
        a = std::max<size_t>(a, op.m * op.k);
        b = std::max<size_t>(b, op.k * op.n);
        c = std::max<size_t>(c, op.m * op.n);
      } else if (op.kind == OpKind::memory) {
        mem = std::max(
            mem, calibrate::cpu::elements_for(calibrate::memory_kernel_of(op.name), op.bytes));
      } else if (op.kind != OpKind::conv) {
        auto key = std::make_tuple(op.batch, op.heads, op.seq, op.head_dim, op.causal);
        if (!attention_.count(key)) {
          attention_[key] = std::make_unique<calibrate::cpu::Attention>(op.batch, op.heads, op.seq,
                                                                        op.head_dim, op.causal);
        }
      }
    }
    a_.assign(a, 0.5f);
    b_.assign(b, 0.25f);
    c_.assign(c, 0.0f);
    ma_.assign(mem, 0.5f);
    mb_.assign(mem, 0.25f);
    mc_.assign(2 * mem, 0.1f);
  }

  void run(const workload::Op& op) {
    switch (op.kind) {
      case OpKind::gemm:
        for (int64_t i = 0; i < std::max<int64_t>(1, op.batch); ++i)
          calibrate::cpu::gemm_fp32(op.m, op.n, op.k, a_, b_, c_);
        break;
      case OpKind::attention_forward:
      case OpKind::attention_backward: {
        auto& att =
            *attention_.at(std::make_tuple(op.batch, op.heads, op.seq, op.head_dim, op.causal));
        sink_ = sink_ + (op.kind == OpKind::attention_forward ? att.forward() : att.backward());
        break;
      }
      case OpKind::memory: {
        const char* k = calibrate::memory_kernel_of(op.name);
        sink_ = sink_ + calibrate::cpu::run_memory_kernel(
                            k, ma_, mb_, mc_, calibrate::cpu::elements_for(k, op.bytes));
        break;
      }
      case OpKind::conv:  // convolutional networks are refused before a run (execute_command)
        break;
    }
  }

 private:
  std::vector<float> a_, b_, c_, ma_, mb_, mc_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>,
           std::unique_ptr<calibrate::cpu::Attention>>
      attention_;
  volatile double sink_ = 0;
};

MPI_Comm comm_of(const std::vector<int>& members, int tag) {
  MPI_Group world, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, static_cast<int>(members.size()), members.data(), &group);
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return c;
}

// A pipeline transfer this rank takes part in: its slice, from or to one peer rank.
struct Transfer {
  int peer = 0;
  int tag = 0;
  int count = 0;  // floats
  uint32_t peer_copy = 0;
  std::vector<float> buffer;  // made once; every request on it ends within its iteration
  // Its receive is posted only when the receiving rank reaches it, so that a synchronous send
  // waits for that (Framework::send_waits_for_receiver); otherwise it is posted at the start of
  // the iteration.
  bool rendezvous = false;
};

// One rank's program, communicators and buffers.
class Rank {
 public:
  Rank(const workload::TrainingJob& job, const Options& o, int rank)
      : job_(job), o_(o), rank_(rank) {
    for (uint32_t g = 0; g < job.copies.size(); ++g) {
      const auto& d = job.copies[g].devices;
      const auto it = std::find(d.begin(), d.end(), static_cast<platform::GpuId>(rank));
      if (it != d.end()) {
        g_ = static_cast<int>(g);
        j_ = static_cast<uint32_t>(it - d.begin());
      }
    }
    // Communicators, created in the same order on every rank; each only by its members. `tag`
    // numbers them, counting on through every kind.
    int tag = 0;
    make_tp_comm(tag);
    make_dp_comms(tag);
    make_peer_comms(tag);
    make_tied_comms(tag);
    if (g_ < 0) return;
    kernels_ = std::make_unique<Kernels>(job.copies[g_]);
    // Every transfer of the program, its peers and slices (as the replay's send()).
    for (const Task& t : job.copies[g_].program) {
      if (t.kind != TaskKind::send && t.kind != TaskKind::recv) continue;
      transfers_.push_back(job.staged() ? staged_transfers(t) : pipeline_transfers(t));
    }
  }

  ~Rank() {
    if (tp_ != MPI_COMM_NULL) MPI_Comm_free(&tp_);
    for (MPI_Comm& c : dp_comms_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    for (MPI_Comm& c : peer_comms_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    for (MPI_Comm& c : tied_) MPI_Comm_free(&c);
  }

  bool active() const { return g_ >= 0; }
  uint32_t copy_index() const { return static_cast<uint32_t>(g_); }
  uint32_t tp_rank() const { return j_; }

  // One iteration. `record`: keep the events for the trace. Returns this rank's times; adds each
  // kernel's seconds to `kernel_s` (by op), sets each compute task's in `task_s` (by task).
  DeviceTimes iterate(bool record, bool fault, std::vector<double>& kernel_s,
                      std::vector<double>& task_s) {
    const StageCopy& copy = job_.copies[g_];
    events_.clear();
    // Receives first: a transfer lands whenever its sender sends.
    post_receives(copy);
    MPI_Barrier(MPI_COMM_WORLD);
    t0_ = Clock::now();
    Walk w{copy, record, kernel_s, task_s};
    for (size_t pc = 0; pc < copy.program.size(); ++pc) {
      const Task& t = copy.program[pc];
      if (fault && pc == o_.kill_task) {
        std::fprintf(stderr, "execute: rank %d: killed by --fault at task %zu\n", rank_, pc);
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      const double start = now();
      beat();
      switch (t.kind) {
        case TaskKind::compute:
          run_compute(w, t, pc, start);
          break;
        case TaskKind::tp_comm:
          tp_collective(w, t, pc, start);
          break;
        case TaskKind::ep_comm:
        case TaskKind::cp_comm:
          peer_collective(w, t, pc, start);
          break;
        case TaskKind::tp_wait:
          wait_tp(w, start);
          break;
        case TaskKind::recv:
          receive_transfers(w, pc, start);
          break;
        case TaskKind::send:
          send_transfers(w, start);
          break;
        case TaskKind::dp_comm:
          start_dp_collective(w, pc, start);
          break;
        case TaskKind::dp_wait:
          wait_dp(w, t, start);
          break;
        case TaskKind::tied:
          reduce_tied(w, pc, start);
          break;
      }
    }
    for (Async& a : sends_) MPI_Wait(&a.request, MPI_STATUS_IGNORE);
    for (DpAsync& a : dp_async_) {
      if (a.end < 0)
        MPI_Waitall(static_cast<int>(a.requests.size()), a.requests.data(), MPI_STATUSES_IGNORE);
    }
    sends_.clear();
    dp_async_.clear();
    w.times.finish = now();
    return w.times;
  }

  const std::vector<Event>& events() const { return events_; }

  // Each element the largest of the copy's devices' (outside the timed iteration).
  void slowest_of_copy(std::vector<double>& v) const {
    if (tp_ != MPI_COMM_NULL)
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, tp_);
  }
  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  // Progress for the watchdog (run_cpu): the wall clock at the last task's start.
  void beat() { heartbeat_.store(Clock::now().time_since_epoch().count()); }
  std::atomic<int64_t> heartbeat_{0};

 private:
  struct Async {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<float> buffer;
    size_t pc = 0;
    double start = 0, end = -1;
    uint8_t kind = 1;  // Event::kind
  };
  // A data-parallel collective: one request per shard this rank holds (none: not a member).
  struct DpAsync {
    std::vector<MPI_Request> requests;
    size_t pc = 0;
    double start = 0, end = -1;
  };
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    const float* buffer = nullptr;  // its Transfer's
    uint32_t peer_copy = 0;
    bool done = false;
    double end = 0;
  };

  // One iteration's walk through its program: what the steps of its tasks share.
  struct Walk {
    const StageCopy& copy;
    bool record;                    // keep the events for the trace
    std::vector<double>& kernel_s;  // by op: each kernel's seconds added
    std::vector<double>& task_s;    // by task: each compute task's seconds
    DeviceTimes times = {};
    size_t ti = 0;           // the next send or recv task's, into transfers_
    size_t ri = 0;           // the next receive's, into recvs_
    uint32_t dp_issued = 0;  // data-parallel collectives started
  };

  // Tensor parallel: this rank's copy's communicator (none for a copy of one device); every
  // copy takes a tag.
  void make_tp_comm(int& tag) {
    for (uint32_t g = 0; g < job_.copies.size(); ++g) {
      const auto& d = job_.copies[g].devices;
      std::vector<int> members(d.begin(), d.end());
      if (static_cast<int>(g) == g_ && members.size() > 1) tp_ = comm_of(members, tag);
      ++tag;
    }
  }

  // Data parallel: each collective's shards (workload::DpSync), each reduced among the
  // ranks of its member copies that hold it: a tensor-parallel rank's share with its peers
  // where the members share one degree; where a layer segment is held over different degrees,
  // lcm(degrees) shards, a rank holding several. One communicator per distinct set of
  // holders, made in the same order on every rank.
  void make_dp_comms(int& tag) {
    std::map<std::vector<int>, size_t> made;  // holders -> index into dp_comms_
    dp_.assign(job_.dp_syncs.size(), {});
    for (size_t s = 0; s < job_.dp_syncs.size(); ++s) {
      const workload::DpSync& sync = job_.dp_syncs[s];
      for (uint32_t q = 0; q < sync.pieces; ++q) {
        std::vector<int> members;
        for (uint32_t g : job_.dp_peers[sync.peers]) {
          const auto& d = job_.copies[g].devices;
          members.push_back(static_cast<int>(d[sync.holder(q, d.size())]));
        }
        auto [it, fresh] = made.try_emplace(members, dp_comms_.size());
        if (fresh) {
          const bool in = std::find(members.begin(), members.end(), rank_) != members.end();
          dp_comms_.push_back(in ? comm_of(members, tag) : MPI_COMM_NULL);
          ++tag;
        }
        if (dp_comms_[it->second] != MPI_COMM_NULL) dp_[s].push_back(dp_comms_[it->second]);
      }
    }
  }

  // Expert- and context-parallel collectives (across replicas): one communicator per
  // distinct set of ranks (TrainingJob::peer_ranks), made in the same order on every rank.
  void make_peer_comms(int& tag) {
    std::map<std::vector<int>, size_t> peers_made;
    for (uint32_t g = 0; g < job_.copies.size(); ++g) {
      const StageCopy& copy = job_.copies[g];
      if (static_cast<int>(g) == g_) peer_.assign(copy.comms.size(), MPI_COMM_NULL);
      for (size_t c = 0; c < copy.comms.size(); ++c) {
        const workload::CommTemplate& ct = copy.comms[c];
        if (!ct.expert && !ct.context) continue;
        for (uint32_t k = 0; k < copy.devices.size(); ++k) {
          const std::vector<platform::GpuId> peers = job_.peer_ranks(g, ct, k);
          std::vector<int> members(peers.begin(), peers.end());
          auto [it, fresh] = peers_made.try_emplace(members, peer_comms_.size());
          if (fresh) {
            const bool in = std::find(members.begin(), members.end(), rank_) != members.end();
            peer_comms_.push_back(in && members.size() > 1 ? comm_of(members, tag) : MPI_COMM_NULL);
            ++tag;
          }
          if (static_cast<int>(g) == g_ && k == j_) peer_[c] = peer_comms_[it->second];
        }
      }
    }
  }

  // The tied embedding's first-last pairs (a staged plan reduces it as a data-parallel
  // collective among both ends' copies instead).
  void make_tied_comms(int& tag) {
    const uint32_t replicas = job_.staged() ? 0 : static_cast<uint32_t>(job_.plan->replicas.size());
    for (uint32_t r = 0; r < replicas; ++r) {
      const uint32_t stages = job_.stages_of(r);
      if (stages < 2) continue;
      const auto& a = job_.copy(r, 0).devices;
      const auto& b = job_.copy(r, stages - 1).devices;
      const size_t n = std::max(a.size(), b.size());
      for (size_t j = 0; j < n; ++j) {
        const std::vector<int> members = {static_cast<int>(a[j % a.size()]),
                                          static_cast<int>(b[j % b.size()])};
        if (members[0] == rank_ || members[1] == rank_) tied_.push_back(comm_of(members, tag));
        ++tag;
      }
    }
  }

  // A send or recv task's transfers in a staged plan: to (from) every copy of the next stage or
  // the one before that shares samples with this one, its share in slices; tagged by the
  // receiver's key.
  std::vector<Transfer> staged_transfers(const Task& t) const {
    const StageCopy& copy = job_.copies[g_];
    const bool backward = t.pass == workload::Pass::backward;
    const bool send = t.kind == TaskKind::send;
    const bool downstream = send ? !backward : backward;
    const auto& peers = downstream ? job_.next_peers[g_] : job_.prev_peers[g_];
    const uint32_t mbs = copy.micro_batches;
    const int tag = static_cast<int>(uint32_t{backward} * mbs + t.micro_batch);
    std::vector<Transfer> list;
    for (const workload::TrainingJob::Peer& q : peers) {
      const auto& mine = copy.devices;
      const auto& theirs = job_.copies[q.copy].devices;
      const size_t n = std::max(mine.size(), theirs.size());
      for (size_t j = 0; j < n; ++j) {
        if (j % mine.size() != j_) continue;
        const int count = std::max(2, floats(job_.activation_bytes_per_transfer * q.share / n));
        list.push_back(Transfer{static_cast<int>(theirs[j % theirs.size()]), tag, count, q.copy,
                                std::vector<float>(count, 0.0f)});
      }
    }
    return list;
  }

  // A send or recv task's transfers in a pipeline of stages: with the same slices of the
  // neighbouring stage's copy.
  std::vector<Transfer> pipeline_transfers(const Task& t) const {
    const StageCopy& copy = job_.copies[g_];
    const bool backward = t.pass == workload::Pass::backward;
    const bool send = t.kind == TaskKind::send;
    // The sender's stage and chunk: a receive gets what the neighbour sent.
    const uint32_t stages = job_.stages_of(copy.replica);
    uint32_t stage = copy.stage, chunk = t.chunk;
    const bool downstream = send ? !backward : backward;  // the peer is the next stage
    if (downstream) {
      if (stage + 1 < stages) {
        ++stage;
      } else {
        stage = 0;
        chunk += send ? 1 : 0;
      }
    } else {
      if (stage > 0) {
        --stage;
      } else {
        stage = stages - 1;
        chunk -= send ? 1 : 0;
      }
    }
    // The key is the receiver's: (direction, the chunk it receives for, micro-batch).
    const uint32_t recv_chunk = send ? chunk : t.chunk;
    const uint32_t mbs = copy.micro_batches;
    const int tag =
        static_cast<int>((uint32_t{backward} * job_.chunks + recv_chunk) * mbs + t.micro_batch);
    const uint32_t peer_copy = job_.first_copy[copy.replica] + stage;
    const auto& mine = copy.devices;
    const auto& theirs = job_.copies[peer_copy].devices;
    const size_t n = std::max(mine.size(), theirs.size());
    std::vector<Transfer> list;
    const bool rendezvous = job_.plan->framework.send_waits_for_receiver(
        job_.activation_bytes_per_transfer / static_cast<double>(n));
    for (size_t j = 0; j < n; ++j) {
      if (j % mine.size() != j_) continue;
      const int count = std::max(2, floats(job_.activation_bytes_per_transfer / n));
      list.push_back(Transfer{static_cast<int>(theirs[j % theirs.size()]), tag, count, peer_copy,
                              std::vector<float>(count, 0.0f), rendezvous});
    }
    return list;
  }

  // One pending receive per transfer into this rank, in program order; posted now unless it is a
  // rendezvous (its recv task posts it).
  void post_receives(const StageCopy& copy) {
    size_t ti = 0;
    recvs_.clear();
    for (const Task& t : copy.program) {
      if (t.kind != TaskKind::send && t.kind != TaskKind::recv) continue;
      if (t.kind == TaskKind::recv) {
        for (Transfer& x : transfers_[ti]) {
          Pending p;
          p.buffer = x.buffer.data();
          p.peer_copy = x.peer_copy;
          if (!x.rendezvous)
            MPI_Irecv(x.buffer.data(), x.count, MPI_FLOAT, x.peer, x.tag, MPI_COMM_WORLD,
                      &p.request);
          recvs_.push_back(std::move(p));
        }
      }
      ++ti;
    }
  }

  void run_compute(Walk& w, const Task& t, size_t pc, double start) {
    for (const auto& [index, d] : w.copy.segments[t.index].ops) {
      const double k0 = now();
      kernels_->run(w.copy.ops[index]);
      w.kernel_s[index] += now() - k0;
      poll();
    }
    const double end = now();
    w.times.compute += end - start;
    w.task_s[pc] = end - start;
    if (w.record) events_.push_back(Event{copy_index(), uint32_t(pc), 0, 0, start, end});
  }

  void tp_collective(Walk& w, const Task& t, size_t pc, double start) {
    const workload::CommTemplate& ct = w.copy.comms[t.index];
    if (tp_ == MPI_COMM_NULL) return;
    if (ct.async) {
      tp_async_.emplace_back();
      Async& a = tp_async_.back();
      a.pc = pc;
      a.start = start;
      collective(ct.kind, ct.bytes, tp_, a.buffer, &a.request);
    } else {
      std::vector<float>& buf = tp_buffer_;
      collective(ct.kind, ct.bytes, tp_, buf, nullptr);
      const double end = now();
      w.times.tp += end - start;
      if (w.record) events_.push_back(Event{copy_index(), uint32_t(pc), 0, 1, start, end});
    }
  }

  // Over this rank's peers in the other replicas (a MoE layer's all-to-alls, ring attention's
  // exchanges); an asynchronous one is waited for at the next tp_wait, as the replay counts it.
  void peer_collective(Walk& w, const Task& t, size_t pc, double start) {
    const workload::CommTemplate& ct = w.copy.comms[t.index];
    const MPI_Comm c = peer_[t.index];
    if (c == MPI_COMM_NULL) return;
    const uint8_t kind = ct.context ? 5 : 4;
    if (ct.async) {
      tp_async_.emplace_back();
      Async& a = tp_async_.back();
      a.pc = pc;
      a.start = start;
      a.kind = kind;
      collective(ct.kind, ct.bytes, c, a.buffer, &a.request);
    } else {
      collective(ct.kind, ct.bytes, c, tp_buffer_, nullptr);
      const double end = now();
      (ct.context ? w.times.cp : w.times.ep) += end - start;
      if (w.record) events_.push_back(Event{copy_index(), uint32_t(pc), 0, kind, start, end});
    }
  }

  void wait_tp(Walk& w, double start) {
    for (Async& a : tp_async_) {
      MPI_Wait(&a.request, MPI_STATUS_IGNORE);
      if (a.end < 0) a.end = now();
      if (w.record)
        events_.push_back(Event{copy_index(), uint32_t(a.pc), 0, a.kind, a.start, a.end});
    }
    tp_async_.clear();
    w.times.tp += now() - start;
  }

  void receive_transfers(Walk& w, size_t pc, double start) {
    // A rendezvous transfer's receive is posted now that this rank is here.
    for (size_t x = 0; x < transfers_[w.ti].size(); ++x) {
      Transfer& tr = transfers_[w.ti][x];
      if (tr.rendezvous)
        MPI_Irecv(tr.buffer.data(), tr.count, MPI_FLOAT, tr.peer, tr.tag, MPI_COMM_WORLD,
                  &recvs_[w.ri + x].request);
    }
    for (size_t x = 0; x < transfers_[w.ti].size(); ++x, ++w.ri) {
      Pending& p = recvs_[w.ri];
      if (!p.done) {
        MPI_Wait(&p.request, MPI_STATUS_IGNORE);
        p.done = true;
        p.end = now();
      }
      if (w.record && tp_rank() == 0) {
        events_.push_back(Event{copy_index(), uint32_t(pc), p.peer_copy, 3,
                                static_cast<double>(p.buffer[0]), p.end});
      }
    }
    w.times.pp += now() - start;
    ++w.ti;
  }

  void send_transfers(Walk& w, double start) {
    const bool blocking = job_.plan->framework.blocking_p2p;
    for (Transfer& x : transfers_[w.ti]) {
      sends_.emplace_back();
      Async& a = sends_.back();
      x.buffer[0] = static_cast<float>(start);  // the receiver's trace shows when it left
      if (blocking) {
        MPI_Issend(x.buffer.data(), x.count, MPI_FLOAT, x.peer, x.tag, MPI_COMM_WORLD, &a.request);
      } else {
        MPI_Isend(x.buffer.data(), x.count, MPI_FLOAT, x.peer, x.tag, MPI_COMM_WORLD, &a.request);
      }
    }
    if (blocking) {
      for (Async& a : sends_) MPI_Wait(&a.request, MPI_STATUS_IGNORE);
      w.times.pp += now() - start;
    }
    ++w.ti;
  }

  void start_dp_collective(Walk& w, size_t pc, double start) {
    const workload::DpCollective& dc = w.copy.dp[w.dp_issued];
    const std::vector<MPI_Comm>& shards = dp_[dc.sync];
    if (dp_buffers_.size() <= w.dp_issued) dp_buffers_.resize(w.dp_issued + 1);
    dp_buffers_[w.dp_issued].resize(shards.size());
    dp_async_.emplace_back();
    DpAsync& a = dp_async_.back();
    a.pc = pc;
    a.start = start;
    a.requests.assign(shards.size(), MPI_REQUEST_NULL);
    for (size_t q = 0; q < shards.size(); ++q) {
      collective(dc.kind, job_.dp_syncs[dc.sync].piece_bytes, shards[q],
                 dp_buffers_[w.dp_issued][q], &a.requests[q]);
    }
    ++w.dp_issued;
  }

  void wait_dp(Walk& w, const Task& t, double start) {
    for (uint32_t i = 0; i < t.index && i < dp_async_.size(); ++i) {
      DpAsync& a = dp_async_[i];
      if (a.end < 0) {
        MPI_Waitall(static_cast<int>(a.requests.size()), a.requests.data(), MPI_STATUSES_IGNORE);
        a.end = now();
        if (w.record) events_.push_back(Event{copy_index(), uint32_t(a.pc), 0, 2, a.start, a.end});
      }
    }
    w.times.dp += now() - start;
  }

  void reduce_tied(Walk& w, size_t pc, double start) {
    const double bytes = workload::tied_pair_bytes(job_, w.copy.replica);
    for (MPI_Comm c : tied_) collective(CommKind::allreduce, bytes, c, tied_buffer_, nullptr);
    const double end = now();
    w.times.dp += end - start;
    if (w.record) events_.push_back(Event{copy_index(), uint32_t(pc), 0, 2, start, end});
  }

  // A collective of the replay's nccl-tests size: per rank for all-reduce, the total for
  // all-gather and reduce-scatter.
  void collective(CommKind kind, double bytes, MPI_Comm comm, std::vector<float>& buf,
                  MPI_Request* request) {
    int size = 1;
    MPI_Comm_size(comm, &size);
    const int total = floats(bytes);
    const int part = std::max(1, total / size);
    const size_t need = static_cast<size_t>(kind == CommKind::allreduce ? total : part * size);
    const size_t out = kind == CommKind::alltoall ? need : static_cast<size_t>(part);
    if (buf.size() < need + out) buf.assign(need + out, 1.0f);
    float* data = buf.data();
    switch (kind) {
      case CommKind::allreduce:
        if (request) {
          MPI_Iallreduce(MPI_IN_PLACE, data, total, MPI_FLOAT, MPI_SUM, comm, request);
        } else {
          MPI_Allreduce(MPI_IN_PLACE, data, total, MPI_FLOAT, MPI_SUM, comm);
        }
        break;
      case CommKind::allgather:
        if (request) {
          MPI_Iallgather(MPI_IN_PLACE, part, MPI_FLOAT, data, part, MPI_FLOAT, comm, request);
        } else {
          MPI_Allgather(MPI_IN_PLACE, part, MPI_FLOAT, data, part, MPI_FLOAT, comm);
        }
        break;
      case CommKind::reducescatter:
        if (request) {
          MPI_Ireduce_scatter_block(data, data + need, part, MPI_FLOAT, MPI_SUM, comm, request);
        } else {
          MPI_Reduce_scatter_block(data, data + need, part, MPI_FLOAT, MPI_SUM, comm);
        }
        break;
      case CommKind::alltoall:
        if (request) {
          MPI_Ialltoall(data, part, MPI_FLOAT, data + need, part, MPI_FLOAT, comm, request);
        } else {
          MPI_Alltoall(data, part, MPI_FLOAT, data + need, part, MPI_FLOAT, comm);
        }
        break;
      case CommKind::halo:  // convolutional networks are refused before a run
      case CommKind::none:
        break;
    }
  }

  // Lets outstanding requests progress, and notes when each finished.
  void poll() {
    int flag = 0;
    for (Pending& p : recvs_) {
      if (p.done || p.request == MPI_REQUEST_NULL) continue;  // done, or a rendezvous not posted
      MPI_Test(&p.request, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        p.done = true;
        p.end = now();
      }
    }
    for (std::vector<Async>* list : {&tp_async_, &sends_}) {
      for (Async& a : *list) {
        if (a.end >= 0 || a.request == MPI_REQUEST_NULL) continue;
        MPI_Test(&a.request, &flag, MPI_STATUS_IGNORE);
        if (flag) a.end = now();
      }
    }
    for (DpAsync& a : dp_async_) {
      if (a.end >= 0 || a.requests.empty()) continue;
      MPI_Testall(static_cast<int>(a.requests.size()), a.requests.data(), &flag,
                  MPI_STATUSES_IGNORE);
      if (flag) a.end = now();
    }
  }

  const workload::TrainingJob& job_;
  const Options& o_;
  int rank_ = 0;
  int g_ = -1;
  uint32_t j_ = 0;
  MPI_Comm tp_ = MPI_COMM_NULL;
  // By TrainingJob::dp_syncs: the communicators of the shards this rank holds (into dp_comms_).
  std::vector<std::vector<MPI_Comm>> dp_;
  std::vector<MPI_Comm> dp_comms_;    // each distinct set of holders (null: this rank not in it)
  std::vector<MPI_Comm> peer_;        // by comm template of this rank's group: its EP / CP peers
  std::vector<MPI_Comm> peer_comms_;  // each distinct set of them (null: this rank not in it)
  std::vector<MPI_Comm> tied_;
  std::unique_ptr<Kernels> kernels_;
  std::vector<std::vector<Transfer>> transfers_;  // per send/recv task, in program order
  std::vector<Pending> recvs_;
  std::vector<Async> tp_async_, sends_;
  std::vector<DpAsync> dp_async_;
  std::vector<std::vector<std::vector<float>>> dp_buffers_;  // by collective, then shard
  std::vector<float> tp_buffer_, tied_buffer_;
  std::vector<Event> events_;
  Clock::time_point t0_;
};

// The times of a DeviceTimes, in its fields' order, as each rank sends them to rank 0.
constexpr int kTimes = 7;

// One rank's run of the job: what run_cpu's steps share.
struct CpuRun {
  const workload::TrainingJob& job;
  const Options& o;
  const MpiSession& mpi;
  Rank& me;
};

// What a rank reports to rank 0 after its iterations: the means over the measured ones of its
// kernels' and compute tasks' seconds, and its trace events.
struct RankReport {
  std::vector<double> kernel_s;  // by op of its copy
  std::vector<double> task_s;    // by task of its copy's program
  std::vector<Event> events;
};

// The watchdog: an iteration past its time ends this process, and with it (mpirun) every rank.
std::thread start_watchdog(const CpuRun& run, const std::atomic<bool>& stop,
                           const std::atomic<int>& iteration) {
  return std::thread([&run, &stop, &iteration] {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int64_t beat = run.me.heartbeat_.load();
      if (iteration.load() < 0 || beat == 0) continue;
      const double since =
          std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(beat))
              .count();
      if (since > run.o.timeout_s) {
        std::fprintf(stderr,
                     "execute: rank %d: no progress for %.0f s in iteration %d (--timeout %.0f "
                     "s): a rank died or a collective hangs; ending every rank\n",
                     run.mpi.rank(), since, iteration.load(), run.o.timeout_s);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  });
}

// The warm-up and measured iterations; each measured one's time (the slowest rank's) goes to
// m.iteration_s. Returns this rank's times summed over the measured iterations, its kernels' and
// tasks' seconds summed in `sums`.
DeviceTimes time_iterations(const CpuRun& run, std::atomic<int>& iteration, Measured& m,
                            RankReport& sums) {
  const Options& o = run.o;
  Rank& me = run.me;
  const StageCopy* copy = me.active() ? &run.job.copies[me.copy_index()] : nullptr;
  std::vector<double>& kernel_s = sums.kernel_s;
  kernel_s.assign(copy ? copy->ops.size() : 0, 0.0);
  std::vector<double> scratch(kernel_s.size(), 0.0);
  std::vector<double>& task_s = sums.task_s;
  task_s.assign(copy ? copy->program.size() : 0, 0.0);
  std::vector<double> task_it(task_s.size(), 0.0);
  DeviceTimes sum;
  const int total = o.warmup + o.iterations;
  for (int it = 0; it < total; ++it) {
    const bool measured = it >= o.warmup;
    const bool last = it == total - 1;
    me.beat();
    iteration.store(it);
    DeviceTimes t;
    if (me.active()) {
      const bool fault = run.mpi.rank() == o.kill_rank && it == o.warmup;
      t = me.iterate(last, fault, measured ? kernel_s : scratch, task_it);
      if (measured) {
        me.slowest_of_copy(task_it);
        for (size_t i = 0; i < task_s.size(); ++i) task_s[i] += task_it[i];
      }
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
    }
    double slowest = 0;
    MPI_Allreduce(&t.finish, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (!measured) continue;
    m.iteration_s.push_back(slowest);
    sum.compute += t.compute;
    sum.tp += t.tp;
    sum.pp += t.pp;
    sum.dp += t.dp;
    sum.ep += t.ep;
    sum.cp += t.cp;
    sum.finish += t.finish;
  }
  return sum;
}

// A rank other than 0 sends its report to rank 0.
void send_report(const RankReport& report) {
  const int count = static_cast<int>(report.kernel_s.size());
  MPI_Send(report.kernel_s.data(), count, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
  MPI_Send(report.task_s.data(), static_cast<int>(report.task_s.size()), MPI_DOUBLE, 0, 4,
           MPI_COMM_WORLD);
  const int bytes = static_cast<int>(report.events.size() * sizeof(Event));
  MPI_Send(&bytes, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
  MPI_Send(report.events.data(), bytes, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
}

// On rank 0: rank r's report (send_report), its sizes from r's copy `g` (none: not in the plan).
RankReport receive_report(int r, const StageCopy* g) {
  RankReport report;
  std::vector<double>& ks = report.kernel_s;
  std::vector<double>& ts = report.task_s;
  std::vector<Event>& ev = report.events;
  ks.resize(g ? g->ops.size() : 0);
  MPI_Recv(ks.data(), static_cast<int>(ks.size()), MPI_DOUBLE, r, 1, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  ts.resize(g ? g->program.size() : 0);
  MPI_Recv(ts.data(), static_cast<int>(ts.size()), MPI_DOUBLE, r, 4, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  int bytes = 0;
  MPI_Recv(&bytes, 1, MPI_INT, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ev.resize(bytes / sizeof(Event));
  MPI_Recv(ev.data(), bytes, MPI_BYTE, r, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return report;
}

// Adds a rank's kernels' measured seconds `ks` (by op of its copy `g`) to `kernels` by name,
// with their calls and predicted seconds.
void add_kernel_times(const StageCopy& g, const std::vector<double>& ks,
                      std::map<std::string, KernelTimes>& kernels) {
  std::vector<double> predicted(g.ops.size(), 0.0);
  std::vector<uint64_t> calls(g.ops.size(), 0);
  for (const Task& t : g.program) {
    if (t.kind != TaskKind::compute) continue;
    for (const auto& [index, d] : g.segments[t.index].ops) {
      predicted[index] += d.seconds();
      ++calls[index];
    }
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    KernelTimes& k = kernels[g.ops[i].name];
    k.name = g.ops[i].name;
    k.calls += calls[i];
    k.measured_s += ks[i];
    k.predicted_s += predicted[i];
  }
}

// Rank 0: per device (`all`: every rank's kTimes times), per kernel name, and the events; its
// own report is `mine`, every other rank's is received.
void collect_reports(const CpuRun& run, const std::vector<double>& all, const RankReport& mine,
                     Measured& m) {
  const workload::TrainingJob& job = run.job;
  uint32_t devices = 0;
  for (const StageCopy& g : job.copies)
    for (platform::GpuId d : g.devices) devices = std::max(devices, d + 1);
  m.devices.resize(devices);
  m.task_s.resize(devices);
  for (uint32_t d = 0; d < devices; ++d) {
    const double* v = all.data() + kTimes * d;
    m.devices[d] = DeviceTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  }
  std::map<std::string, KernelTimes> kernels;
  for (int r = 0; r < run.mpi.size(); ++r) {
    const StageCopy* g = nullptr;
    for (const StageCopy& cand : job.copies)
      if (std::find(cand.devices.begin(), cand.devices.end(), static_cast<platform::GpuId>(r)) !=
          cand.devices.end())
        g = &cand;
    RankReport report = r == 0 ? mine : receive_report(r, g);
    m.events.insert(m.events.end(), report.events.begin(), report.events.end());
    if (!g) continue;
    if (static_cast<uint32_t>(r) < devices) m.task_s[r] = std::move(report.task_s);
    add_kernel_times(*g, report.kernel_s, kernels);
  }
  for (auto& [name, k] : kernels) m.kernels.push_back(k);
}

}  // namespace

Measured run_cpu(const workload::TrainingJob& job, const Options& o, const MpiSession& mpi) {
  check_cpu_job(job, mpi.size());
  Rank me(job, o, mpi.rank());
  const CpuRun run{job, o, mpi, me};
  std::atomic<bool> stop{false};
  std::atomic<int> iteration{-1};
  std::thread watchdog = start_watchdog(run, stop, iteration);
  Measured m;
  m.backend = "cpu";
  m.ranks = mpi.size();
  RankReport mine;
  const DeviceTimes sum = time_iterations(run, iteration, m, mine);
  iteration.store(-1);
  stop.store(true);
  watchdog.join();
  // Gather to rank 0: each rank's times, its kernels' seconds and its trace events.
  const double n = std::max(1, o.iterations);
  std::vector<double> times = {sum.compute / n, sum.tp / n, sum.pp / n, sum.dp / n,
                               sum.finish / n,  sum.ep / n, sum.cp / n};
  std::vector<double> all(kTimes * mpi.size());
  MPI_Gather(times.data(), kTimes, MPI_DOUBLE, all.data(), kTimes, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  for (double& k : mine.kernel_s) k /= n;
  for (double& k : mine.task_s) k /= n;
  if (me.active() && me.tp_rank() == 0) mine.events = me.events();
  if (!mpi.lead()) {
    send_report(mine);
    return m;
  }
  collect_reports(run, all, mine, m);
  return m;
}

}  // namespace hetsim::execute
