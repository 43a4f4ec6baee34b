// The CPU calibration backend; see cpu_backend.h.
#include "calibrate/cpu/cpu_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>

#include "calibrate/cpu/kernels.h"
#include "calibrate/database.h"
#include "calibrate/model_shapes.h"
#include "sim/core/error.h"

namespace hetsim::calibrate::cpu {

namespace {

std::atomic<bool> interrupted{false};
extern "C" void on_signal(int) { interrupted = true; }

using Clock = std::chrono::steady_clock;

// Writes a buffer larger than the last-level cache, so each repetition starts cold.
void flush_cache() {
  static std::vector<char> junk(64 << 20);
  static char v = 0;
  std::memset(junk.data(), ++v, junk.size());
}

double wall(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Warm-up; then samples until at least `min_reps` and `min_time` of them, or 100. One sample
// times `calls` back-to-back runs after a cache flush (as nccl-tests times its iterations), so
// short kernels are not lost in the clock's and the thread pool's wake-up jitter: `calls` is
// chosen from the warm-up so that a sample lasts about `sample_s`. Memory-bound kernels take one
// call per sample (`cold`): repeated calls would find their data in the cache.
int calls_for(double warm_s, bool quick) {
  const double sample_s = quick ? 5e-4 : 2e-3;
  return static_cast<int>(std::clamp(std::ceil(sample_s / std::max(warm_s, 1e-9)), 1.0, 1000.0));
}

Timing measure(const std::function<void()>& kernel, bool quick, bool cold = false) {
  const int min_reps = quick ? 3 : 7;
  const double min_time = quick ? 0.01 : 0.05;
  const double warm = std::max(wall(kernel), wall(kernel));
  const int calls = cold ? 1 : calls_for(warm, quick);
  std::vector<double> t;
  double total = 0;
  while ((static_cast<int>(t.size()) < min_reps || total < min_time) && t.size() < 100) {
    flush_cache();
    const double s = wall([&] {
      for (int c = 0; c < calls; ++c) kernel();
    });
    t.push_back(s / calls);
    total += s;
  }
  std::sort(t.begin(), t.end());
  auto pct = [&](double q) { return t[static_cast<size_t>(q * (t.size() - 1) + 0.5)]; };
  return Timing{pct(0.5), pct(0.1), pct(0.9), static_cast<int64_t>(t.size())};
}

struct Item {
  std::string key;                   // identifies the measurement in the journal
  std::string label;                 // for the progress line
  bool all_ranks;                    // a collective: every rank takes part
  std::function<std::string()> run;  // returns the CSV line
};

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string key_of(const std::string& csv) {
  // Everything before the timings identifies a measurement.
  size_t commas = 0, i = 0;
  for (; i < csv.size() && commas < kCsvKeyColumns; ++i) commas += csv[i] == ',';
  return csv.substr(0, i);
}

}  // namespace

std::vector<workload::ConvShape> conv_grid(bool quick) {
  // (c, h = w, k, r = s, stride, pad): ResNet-50's bottleneck convolutions, one per stage (the
  // 3x3 of each and the 1x1 reductions and expansions of the first and last; torchvision's v1.5,
  // stride in the 3x3), its strided 3x3 and 1x1 projection, and the large-kernel first layers of
  // ResNet (7x7/2) and AlexNet (11x11/4) on 224x224 images.
  struct Layer {
    int64_t c, hw, k, rs, stride, pad;
  };
  const std::vector<Layer> full = {
      {64, 56, 64, 3, 1, 1},    {128, 28, 128, 3, 1, 1}, {256, 14, 256, 3, 1, 1},
      {512, 7, 512, 3, 1, 1},   {64, 56, 256, 1, 1, 0},  {256, 56, 64, 1, 1, 0},
      {1024, 14, 256, 1, 1, 0}, {512, 7, 2048, 1, 1, 0}, {2048, 7, 512, 1, 1, 0},
      {128, 56, 128, 3, 2, 1},  {256, 56, 512, 1, 2, 0}, {3, 224, 64, 7, 2, 3},
      {3, 224, 64, 11, 4, 2}};
  const std::vector<Layer> small = {
      {128, 28, 128, 3, 1, 1}, {256, 56, 64, 1, 1, 0}, {3, 224, 64, 7, 2, 3}};
  // Batches of 1 to 4 images: a CPU rank's micro-batch; the time of a larger one scales (the
  // cost model carries a measured point out by the datasheet ratio).
  const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 4};
  std::vector<workload::ConvShape> out;
  for (const Layer& l : quick ? small : full)
    for (int64_t n : batches)
      for (auto pass : {workload::ConvPass::forward, workload::ConvPass::data_grad,
                        workload::ConvPass::weight_grad})
        out.push_back(
            workload::ConvShape{n, l.c, l.hw, l.hw, l.k, l.rs, l.rs, l.stride, l.pad, l.pad, pass});
  return out;
}

// The journal the measurements are appended to as they finish (rank 0's): opened for appending
// (a header and the machine's provenance when new), and the keys of what it already holds.
std::set<std::string> open_journal(const Options& o, bool lead, const std::string& journal,
                                   std::ofstream& jout) {
  std::set<std::string> done;
  if (lead && std::filesystem::exists(journal)) {
    // A line cut short by the interruption is dropped before appending after it.
    std::string text;
    {
      std::ifstream in(journal, std::ios::binary);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (!text.empty() && text.back() != '\n') {
      std::filesystem::resize_file(
          journal, text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    }
    std::ifstream in(journal);
    std::string line;
    bool header = false;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (!header) {
        if (line != csv_header()) {
          throw InputError(journal +
                           ": written by another version of hetsim (its header is not \"" +
                           csv_header() + "\"); remove it to start afresh");
        }
        header = true;
        continue;
      }
      done.insert(key_of(line));
    }
  }
  if (lead) {
    const bool fresh = !std::filesystem::exists(journal);
    jout.open(journal, std::ios::app);
    if (!jout) throw InputError("--out " + o.out + ": cannot write " + journal);
    if (fresh) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
      int len = 0;
      MPI_Get_library_version(mpi, &len);
      std::string mpi_name(mpi, std::min<int>(len, 40));
      mpi_name.erase(std::remove(mpi_name.begin(), mpi_name.end(), '\n'), mpi_name.end());
      jout << "# backend=cpu\n# device_type=cpu\n# device_name=host CPU ("
           << sysconf(_SC_NPROCESSORS_ONLN) << " cores)\n# host=" << host
           << "\n# date=" << now_iso() << "\n# hetsim_version=" << HETSIM_VERSION
           << "\n# blas=" << openblas_get_config() << "\n# mpi=" << mpi_name << "\n"
           << csv_header() << "\n";
    }
  }
  return done;
}

// The plan: one item per measurement, each kind's grid and the shapes file's shapes.
void plan_gemms(const Options& o, const ModelShapes& shapes, std::vector<Item>& items) {
  const std::vector<int64_t> dims =
      o.quick ? std::vector<int64_t>{64, 128, 256}
              : std::vector<int64_t>{64, 96, 128, 192, 256, 384, 512, 768, 1024};
  // fp32 only: Debian's OpenBLAS is built without its bfloat16 GEMM (sbgemm).
  std::set<std::tuple<int64_t, int64_t, int64_t>> gemms;
  for (int64_t m : dims)
    for (int64_t n : dims)
      for (int64_t k : dims) gemms.emplace(m, n, k);
  // The shapes file's batched GEMMs are attention's, measured as attention below.
  std::set<std::tuple<int64_t, int64_t, int64_t>> job_shapes;
  for (const auto& [m, n, k, batch] : shapes.gemm)
    if (batch == 1) job_shapes.emplace(m, n, k);
  gemms.insert(job_shapes.begin(), job_shapes.end());
  for (const auto& [m, n, k] : gemms) {
    // A job's own shapes are measured in full even in --quick: its prediction rests on them.
    const bool quick = o.quick && !job_shapes.count({m, n, k});
    GemmPoint g{m, n, k, 1, {}};
    const std::string d = "fp32";
    items.push_back(Item{csv_line("gemm", d, &g, nullptr, nullptr),
                         fmt::format("gemm {} {}x{}x{}", d, m, n, k), false, [=, &o]() mutable {
                           std::vector<float> A(m * k, 0.5f), B(k * n, 0.25f), C(m * n, 0);
                           g.t = measure([&] { gemm_fp32(m, n, k, A, B, C); }, quick);
                           return csv_line("gemm", d, &g, nullptr, nullptr);
                         }});
  }
}

void plan_attention(const Options& o, const ModelShapes& shapes, std::vector<Item>& items) {
  // Unfused, fp32: forward and backward of each shape (a small grid, and the shapes file's).
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>> calls = shapes.attention;
  for (int64_t seq :
       o.quick ? std::vector<int64_t>{64, 256} : std::vector<int64_t>{64, 128, 256, 512, 1024})
    for (int64_t heads : o.quick ? std::vector<int64_t>{2} : std::vector<int64_t>{1, 4, 16})
      calls.emplace(1, heads, seq, 64, true);
  for (const auto& [batch, heads, seq, head_dim, causal] : calls) {
    const bool quick = o.quick && !shapes.attention.count({batch, heads, seq, head_dim, causal});
    for (bool backward : {false, true}) {
      AttentionPoint a{batch, heads, seq, head_dim, causal, backward, {}, false};
      items.push_back(Item{csv_line("attention", "fp32", nullptr, &a, nullptr),
                           fmt::format("attention {}x{}x{}x{}{}", batch, heads, seq, head_dim,
                                       backward ? " backward" : ""),
                           false, [=, &o]() mutable {
                             Attention att(batch, heads, seq, head_dim, causal);
                             volatile double sink = 0;
                             a.t = measure(
                                 [&] { sink = sink + (backward ? att.backward() : att.forward()); },
                                 quick);
                             return csv_line("attention", "fp32", nullptr, &a, nullptr);
                           }});
    }
  }
}

void plan_memory(const Options& o, const ModelShapes& shapes, std::vector<Item>& items) {
  const double top = o.quick ? 4.0 * (1 << 20) : 256.0 * (1 << 20);
  for (const std::string& kernel : memory_kernels()) {
    for (double bytes = 64.0 * 1024; bytes <= top; bytes *= o.quick ? 4 : 2) {
      SizePoint s{bytes, 1, {}};
      items.push_back(
          Item{csv_line("memory", kernel, nullptr, nullptr, &s),
               fmt::format("memory {} {:.0f} KiB", kernel, bytes / 1024), false, [=, &o]() mutable {
                 const size_t n = elements_for(kernel, bytes);
                 std::vector<float> a(n, 0.5f), b(n, 0.25f), c(2 * n, 0.1f);
                 volatile double sink = 0;  // keeps the kernels' work observable
                 // With a job's shapes the grid's repetitions are in full: its memory-bound
                 // kernels are interpolated on it.
                 s.t = measure([&] { sink = sink + run_memory_kernel(kernel, a, b, c, n); },
                               o.quick && shapes.gemm.empty(), /*cold=*/true);
                 return csv_line("memory", kernel, nullptr, nullptr, &s);
               }});
    }
  }
}

void plan_convs(const Options& o, std::vector<Item>& items) {
  for (const workload::ConvShape& shape : conv_grid(o.quick)) {
    ConvPoint c{shape, {}};
    const std::string label =
        fmt::format("conv {}x{}x{}x{} k{} {}x{}/{} {}", shape.n, shape.c, shape.h, shape.w, shape.k,
                    shape.r, shape.s, shape.stride, conv_pass_name(shape.pass));
    items.push_back(Item{csv_line("conv", "fp32", nullptr, nullptr, nullptr, &c), label, false,
                         [=, &o]() mutable {
                           Conv conv(c.shape);
                           volatile double sink = 0;
                           c.t = measure([&] { sink = sink + conv.run(); }, o.quick);
                           return csv_line("conv", "fp32", nullptr, nullptr, nullptr, &c);
                         }});
  }
}

// Collectives over every rank (under mpirun), nccl-tests' sizes.
void plan_collectives(const Options& o, int rank, int size, int nodes, std::vector<Item>& items) {
  const double top = o.quick ? 4.0 * (1 << 20) : 64.0 * (1 << 20);
  for (const char* opname :
       {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"}) {
    // x sqrt(2) steps in full (a message-size curve has protocol steps: eager to rendezvous,
    // cache sizes), x4 in --quick; each a whole number of floats per rank.
    for (int h = 20; h <= (o.quick ? 44 : 52); h += o.quick ? 4 : 1) {
      const double step = std::pow(2.0, h / 2.0);
      const double quantum = 4.0 * size;
      const double bytes = std::max(quantum, std::round(step / quantum) * quantum);
      if (bytes > top) break;
      SizePoint s{bytes, size, {}, nodes};
      const std::string op = opname;
      items.push_back(Item{
          csv_line("collective", op, nullptr, nullptr, &s),
          fmt::format("{} {:.0f} KiB x {} ranks on {} node(s)", op, bytes / 1024, size, nodes),
          true, [=, &o]() mutable {
            // nccl-tests sizes: per-rank buffer, or the total for all-gather / reduce-scatter.
            const size_t total = static_cast<size_t>(bytes / 4);
            const size_t part = std::max<size_t>(1, total / size);
            std::vector<float> in(total + part * size, 1.0f), out(total + part * size, 0.0f);
            auto op_once = [&] {
              if (op == "allreduce")
                MPI_Allreduce(in.data(), out.data(), total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
              if (op == "allgather")
                MPI_Allgather(in.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT,
                              MPI_COMM_WORLD);
              if (op == "reducescatter")
                MPI_Reduce_scatter_block(in.data(), out.data(), part, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD);
              if (op == "alltoall")
                MPI_Alltoall(in.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT,
                             MPI_COMM_WORLD);
              if (op == "broadcast") MPI_Bcast(in.data(), total, MPI_FLOAT, 0, MPI_COMM_WORLD);
              if (op == "sendrecv") {
                MPI_Sendrecv(in.data(), total, MPI_FLOAT, (rank + 1) % size, 0, out.data(), total,
                             MPI_FLOAT, (rank + size - 1) % size, 0, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
              }
            };
            // One sample: a barrier, then `calls` back-to-back operations; the slowest rank's
            // time per operation.
            auto sample = [&](int calls) {
              MPI_Barrier(MPI_COMM_WORLD);
              const double t = wall([&] {
                for (int c = 0; c < calls; ++c) op_once();
              });
              double slowest = 0;
              MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
              return slowest / calls;
            };
            // Every rank gets the same counts: they derive from all-reduced times.
            const double warm = std::max(sample(1), sample(1));
            const int calls = calls_for(warm, o.quick);
            std::vector<double> t;
            // Enough samples for a stable median where processes contend for memory: about
            // 0.25 s of them (15 to 60) in full, 5 in --quick. Derived from all-reduced times,
            // so every rank takes the same count.
            const int reps = o.quick
                                 ? 5
                                 : static_cast<int>(std::clamp(
                                       std::ceil(0.25 / std::max(warm * calls, 1e-9)), 15.0, 60.0));
            for (int r = 0; r < reps; ++r) t.push_back(sample(calls));
            std::sort(t.begin(), t.end());
            auto pct = [&](double q) { return t[static_cast<size_t>(q * (t.size() - 1) + 0.5)]; };
            s.t = Timing{pct(0.5), pct(0.1), pct(0.9), reps};
            return csv_line("collective", op, nullptr, nullptr, &s);
          }});
    }
  }
}

// Runs the items not done yet, rank 0 appending each line to the journal, with progress and an
// estimate of the time left; stops at SIGINT or SIGTERM (on every rank).
void run_items(const std::vector<Item>& items, const std::set<std::string>& done,
               std::ofstream& jout, bool lead, int size) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const bool tty = isatty(STDERR_FILENO);
  size_t todo = 0;
  for (const Item& it : items) todo += !done.count(key_of(it.key));
  int todo_all = static_cast<int>(todo);
  MPI_Bcast(&todo_all, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const auto start = Clock::now();
  size_t finished = 0;
  int last_pct = -1;
  for (const Item& it : items) {
    int stop = interrupted ? 1 : 0;
    // Under mpirun every rank runs every measurement at once (only rank 0 records a kernel's):
    // a kernel is timed with every core computing, as when a plan runs one rank per core
    // (hetsim execute), not on one busy core beside idle ones.
    const bool together = it.all_ranks || size > 1;
    if (together) MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (stop) break;
    int skip = lead ? done.count(key_of(it.key)) : 0;
    if (together) MPI_Bcast(&skip, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (skip) continue;
    if (!lead && !together) continue;
    const std::string line = it.run();
    if (!lead) continue;
    jout << line << "\n" << std::flush;
    ++finished;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double left = elapsed / finished * (todo - finished);
    const int pct = static_cast<int>(100.0 * finished / std::max<size_t>(1, todo));
    if (tty) {
      const int bar = pct / 5;
      std::cerr << fmt::format("\r[{:<20}] {:3d}% ({}/{}) {:<34} ETA {:4.0f} s",
                               std::string(bar, '#'), pct, finished, todo, it.label, left)
                << std::flush;
    } else if (pct / 10 != last_pct / 10) {
      std::cerr << fmt::format("calibrate: {}% ({}/{}), about {:.0f} s left\n", pct, finished, todo,
                               left);
    }
    last_pct = pct;
  }
  if (lead && tty) std::cerr << "\n";
}

int run(const Options& o) {
  int rank = 0, size = 1, inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool lead = rank == 0;
  auto wants = [&](const char* op) {
    return o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
  };
  for (const std::string& op : o.ops) {
    if (op != "gemm" && op != "attention" && op != "memory" && op != "collective" && op != "conv") {
      throw InputError(
          "--ops: unknown kind \"" + op +
          "\" for the CPU backend (expected gemm, attention, memory, collective, conv)");
    }
  }
  const std::string journal = o.out + ".journal.csv";
  std::ofstream jout;
  // Resume: what the journal already holds is not measured again.
  const std::set<std::string> done = open_journal(o, lead, journal, jout);
  const ModelShapes shapes = o.shapes.empty() ? ModelShapes{} : read_model_shapes_csv(o.shapes);
  // The plan.
  std::vector<Item> items;
  if (wants("gemm")) plan_gemms(o, shapes, items);
  if (wants("attention")) plan_attention(o, shapes, items);
  if (wants("memory")) plan_memory(o, shapes, items);
  if (wants("conv")) plan_convs(o, items);
  // Nodes the ranks span: one shared-memory communicator per node.
  int nodes = 1;
  {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    int leader = local_rank == 0 ? 1 : 0;
    MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&local);
  }
  if (wants("collective") && size > 1) {
    plan_collectives(o, rank, size, nodes, items);
  } else if (wants("collective") && lead && !o.ops.empty()) {
    std::cerr << "calibrate: collectives need several processes: run under mpirun -np N\n";
  }
  run_items(items, done, jout, lead, size);
  int stopped = interrupted ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &stopped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int rc = 0;
  if (lead) {
    jout.close();
    Database db = read_csv(journal);
    if (db.size() == 0) {
      std::cerr << "calibrate: nothing measured\n";
      rc = 1;
    } else {
      write_database(o.out, db);
      if (stopped) {
        std::cerr << fmt::format(
            "calibrate: interrupted; {} measurements kept in {} (rerun the same command to "
            "resume)\n",
            db.size(), o.out);
        rc = 1;
      } else {
        std::filesystem::remove(journal);
        std::cerr << fmt::format("calibrate: {} measurements written to {}\n", db.size(), o.out);
      }
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}

}  // namespace hetsim::calibrate::cpu
