// NCCL collectives across nodes under MPI; see mpi_collectives.h.
#include "mpi_collectives.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef HETSIM_CALIBRATE_MPI
#include <mpi.h>

#include <algorithm>
#include <memory>

#include "check.h"
#include "collective_ops.h"
#include "csv_log.h"
#include "device_buffer.h"
#include "plan.h"
#include "progress.h"
#include "provenance.h"
#include "timer.h"
#endif

namespace hetsim::calibrate::cuda {

int launcher_world_size() {
  // Only what a launcher sets for the processes it starts (not, e.g., Slurm's job-wide counts,
  // which a plain run inside an allocation also sees).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  }
  return 1;
}

#ifndef HETSIM_CALIBRATE_MPI

bool built_with_mpi() { return false; }

int run_mpi_collectives(const Options&) {
  std::fprintf(stderr,
               "hetsim-calibrate-cuda: started by an MPI launcher with %d ranks, but built without "
               "MPI (none was found when it was configured): rebuild where MPI's headers are, or "
               "run one process per node\n",
               launcher_world_size());
  return 2;
}

#else

bool built_with_mpi() { return true; }

namespace {

// Times one rank's part of a collective: CUDA events on its stream; each repetition's time is
// the slowest rank's (an all-reduce of the samples), so every rank sees the same samples and
// takes the same repetition decisions. A barrier starts each batch together.
class MpiTimer {
 public:
  explicit MpiTimer(cudaStream_t stream) : stream_(stream) {
    starts_.resize(policy_.max_reps);
    stops_.resize(policy_.max_reps);
    for (auto& e : starts_) CHECK_CUDA(cudaEventCreate(&e));
    for (auto& e : stops_) CHECK_CUDA(cudaEventCreate(&e));
  }
  ~MpiTimer() {
    for (auto& e : starts_) cudaEventDestroy(e);
    for (auto& e : stops_) cudaEventDestroy(e);
  }
  MpiTimer(const MpiTimer&) = delete;
  MpiTimer& operator=(const MpiTimer&) = delete;

  Stats measure(const std::function<void()>& launch) {
    launch();  // warm-up: NCCL connects lazily
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<double> warm;
    batch(launch, 1, &warm);
    std::vector<double> samples;
    double sum_s = 0;
    while (true) {
      const int reps = policy_.next_batch(static_cast<int>(samples.size()), sum_s, warm.front());
      if (reps == 0) break;
      sum_s += batch(launch, reps, &samples);
    }
    return summarize(samples);
  }

 private:
  double batch(const std::function<void()>& launch, int reps, std::vector<double>* samples) {
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < reps; ++r) {
      CHECK_CUDA(cudaEventRecord(starts_[r], stream_));
      launch();
      CHECK_CUDA(cudaEventRecord(stops_[r], stream_));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<double> local(reps), slowest(reps);
    for (int r = 0; r < reps; ++r) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, starts_[r], stops_[r]));
      local[r] = static_cast<double>(ms) * 1e-3;
    }
    MPI_Allreduce(local.data(), slowest.data(), reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double sum_s = 0;
    for (double t : slowest) samples->push_back(t), sum_s += t;
    return sum_s;
  }

  cudaStream_t stream_;
  std::vector<cudaEvent_t> starts_, stops_;
  RepetitionPolicy policy_;
};

void abort_all_ranks() { MPI_Abort(MPI_COMM_WORLD, 1); }

int measure(const Options& options, int rank, int size);

}  // namespace

int run_mpi_collectives(const Options& options) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Every rank takes the same decisions below (same options, same world), so all return together.
  if (size != launcher_world_size()) {
    std::fprintf(stderr,
                 "hetsim-calibrate-cuda: rank %d: the launcher started %d ranks but this MPI "
                 "library sees a world of %d: was the program built against another MPI?\n",
                 rank, launcher_world_size(), size);
    MPI_Finalize();
    return 2;
  }
  if (std::find(options.ops.begin(), options.ops.end(), "collective") == options.ops.end()) {
    if (rank == 0)
      std::fprintf(stderr,
                   "hetsim-calibrate-cuda: under MPI only collectives are measured; --ops has no "
                   "\"collective\" (run one process per node for the other kinds)\n");
    MPI_Finalize();
    return 2;
  }
  // From here a failure on one rank (an exception, a failed CUDA/NCCL call) aborts them all.
  fail_hook = &abort_all_ranks;
  int status = 1;
  try {
    status = measure(options, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hetsim-calibrate-cuda: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  fail_hook = nullptr;
  MPI_Finalize();
  return status;
}

namespace {

// This rank's place on its node, and the world's nodes.
struct NodePlace {
  int local_rank = 0, local_size = 1;  // among the ranks of this node
  int nodes = 0;
};

// The ranks of this node share memory: their count and this rank's place pick the GPU.
NodePlace node_place(int rank) {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  int leader = local_rank == 0 ? 1 : 0, nodes = 0;
  MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return NodePlace{local_rank, local_size, nodes};
}

// This rank's GPU, or -1 when any rank has none (said by each rank that has none).
int pick_device(int rank, const NodePlace& place) {
  const int local_rank = place.local_rank, local_size = place.local_size;
  int gpus = 0;
  const cudaError_t status = cudaGetDeviceCount(&gpus);
  // One GPU per rank: the node's GPUs by local rank, or the one GPU a launcher bound to the rank
  // (CUDA_VISIBLE_DEVICES per rank); NCCL refuses two ranks on one GPU.
  const bool bound = status == cudaSuccess && gpus == 1;
  int usable = status == cudaSuccess && (gpus >= local_size || bound) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!usable) {
    if (status != cudaSuccess || (gpus < local_size && !bound))
      std::fprintf(
          stderr,
          "hetsim-calibrate-cuda: rank %d: %d rank(s) on this node but %d CUDA device(s)%s%s "
          "(one rank per GPU)\n",
          rank, local_size, status == cudaSuccess ? gpus : 0, status != cudaSuccess ? ": " : "",
          status != cudaSuccess ? cudaGetErrorString(status) : "");
    return -1;
  }
  return bound ? 0 : local_rank;
}

// Rank 0's CSV, the MPI library and world in its provenance; null, said, when it cannot be
// opened (another device's, or unwritable).
std::unique_ptr<CsvLog> open_lead_log(const Options& options, int size, int nodes, int device,
                                      const cudaDeviceProp& prop) {
  std::unique_ptr<CsvLog> log;
  try {
    auto provenance = collect_provenance(device);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    const std::string mpi_name(mpi, static_cast<std::size_t>(std::min(len, 60)));
    for (auto& [key, value] : provenance)
      if (key == "mpi") value = mpi_name.substr(0, mpi_name.find('\n'));
    provenance.emplace_back("mpi_ranks", std::to_string(size));
    provenance.emplace_back("mpi_nodes", std::to_string(nodes));
    log = std::make_unique<CsvLog>(options.out, provenance);
    std::fprintf(stderr, "%s: %d ranks on %d node(s), one GPU each; writing %s\n", prop.name, size,
                 nodes, options.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hetsim-calibrate-cuda: %s\n", e.what());
    log.reset();
  }
  return log;
}

std::vector<PlanItem> plan_items(const Options& options, const cudaDeviceProp& prop, int size,
                                 int nodes) {
  PlanConfig config;
  config.quick = options.quick;
  config.cc_major = prop.major;
  config.cc_minor = prop.minor;
  config.gpus = size;
  config.rates = RateGuess::for_compute_capability(prop.major, prop.minor);
  // Across nodes the network, not NVLink, bounds the rate: budget with a 50 GB/s bus rate.
  if (nodes > 1) config.rates.nvlink_bus_Bps = 50e9;
  return plan_collective(config);
}

// Every planned collective measured across all ranks into rank 0's `log` (reset at the end),
// within the budget.
int measure_collectives(const Options& options, int rank, int size, int nodes,
                        const cudaDeviceProp& prop, std::unique_ptr<CsvLog>& log) {
  const bool lead = rank == 0;
  ncclUniqueId id{};
  if (lead) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRank(&comm, size, id, rank));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::vector<PlanItem> items = plan_items(options, prop, size, nodes);

  std::size_t bytes = 0;
  for (const PlanItem& item : items)
    bytes = std::max(bytes, static_cast<std::size_t>(item.key.bytes));
  DeviceBuffer send(bytes), recv(bytes);
  CHECK_CUDA(cudaMemset(send.get(), 0, bytes));
  CHECK_CUDA(cudaMemset(recv.get(), 0, bytes));
  int measured = 0, skipped = 0, cut = 0;
  {
    MpiTimer timer(stream);
    double planned_total = 0;
    for (const PlanItem& item : items) planned_total += collective_harness_seconds(item.estimate_s);
    Progress progress(planned_total);
    for (PlanItem& item : items) {
      item.key.nodes = nodes;
      // The lead decides for everyone: 0 measure, 1 already in the CSV, 2 over the budget.
      int decision = 0;
      if (lead) decision = log->has(item.key) ? 1 : progress.elapsed_s() > options.budget_s ? 2 : 0;
      MPI_Bcast(&decision, 1, MPI_INT, 0, MPI_COMM_WORLD);
      const double planned = collective_harness_seconds(item.estimate_s);
      if (decision != 0) {
        (decision == 1 ? skipped : cut) += 1;
        if (lead)
          progress.advance(planned, item.key.label() + (decision == 1 ? " (resumed)" : " (cut)"));
        continue;
      }
      const std::size_t elements = static_cast<std::size_t>(item.key.bytes) / 2;  // bf16
      const Stats stats = timer.measure([&] {
        enqueue_collective(item.key.name, send.get(), recv.get(), elements, size, rank, comm,
                           stream);
      });
      ++measured;
      if (lead) {
        log->append(item.key, stats);
        progress.advance(planned, item.key.label());
      }
    }
    if (lead)
      std::fprintf(
          stderr, "done: %d measured, %d already in %s, %d cut by the %.0f s budget, %.1f s\n",
          measured, skipped, options.out.c_str(), cut, options.budget_s, progress.elapsed_s());
  }
  log.reset();
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}

int measure(const Options& options, int rank, int size) {
  const bool lead = rank == 0;
  const NodePlace place = node_place(rank);
  const int nodes = place.nodes;
  const int device = pick_device(rank, place);
  if (device < 0) return 1;
  CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  if (lead) {
    for (const std::string& kind : options.ops)
      if (kind != "collective")
        std::fprintf(stderr, "%s: not measured under MPI (run one process per node for it)\n",
                     kind.c_str());
  }
  // Rank 0's CSV first (it may be another device's, or unwritable): all ranks hear whether it
  // opened before anything else is collective.
  std::unique_ptr<CsvLog> log;
  int opened = 1;
  if (lead) {
    log = open_lead_log(options, size, nodes, device, prop);
    if (!log) opened = 0;
  }
  MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!opened) return 1;
  return measure_collectives(options, rank, size, nodes, prop, log);
}

}  // namespace

#endif

}  // namespace hetsim::calibrate::cuda
