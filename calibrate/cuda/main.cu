// hetsim-calibrate-cuda: measures the kernels of a training iteration on this node and writes
// calibrate/README.md's CSV. Plan first (with a time estimate), then one Bench per kind.
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "bench.h"
#include "check.h"
#include "csv_log.h"
#include "mpi_collectives.h"
#include "options.h"
#include "plan.h"
#include "progress.h"
#include "provenance.h"
#include "timer.h"

namespace hetsim::calibrate::cuda {
namespace {

struct KindEntry {
  const char* name;
  std::vector<PlanItem> (*plan)(const PlanConfig&);
  BenchFactory make;
  double setup_s;  // buffers, handles, communicators: outside the per-point estimates
};

// One row per kind: the planner and the Bench that measures its points.
const KindEntry kKindTable[] = {
    {"copy", &plan_copy, &make_copy_bench, 1.0},
    {"memory", &plan_memory, &make_memory_bench, 0.5},
#ifdef HETSIM_CALIBRATE_NCCL
    {"collective", &plan_collective, &make_collective_bench, 4.0},
#else
    {"collective", &plan_collective, nullptr, 0.0},  // plans nothing without NCCL
#endif
    {"attention", &plan_attention, &make_attention_bench, 0.5},
#ifdef HETSIM_CALIBRATE_CUDNN
    {"conv", &plan_conv, &make_conv_bench, 0.5},
#else
    {"conv", &plan_conv, nullptr, 0.0},              // plans nothing without cuDNN
#endif
    {"gemm", &plan_gemm, &make_gemm_bench, 1.0},
};

const KindEntry& kind_entry(const std::string& name) {
  for (const KindEntry& e : kKindTable)
    if (name == e.name) return e;
  throw std::invalid_argument("unknown kind " + name);
}

double planned_seconds(const PlanItem& item) {
  if (item.key.kind == "collective") return collective_harness_seconds(item.estimate_s);
  return item.setup_s + harness_seconds(item.estimate_s, item.key.kind != "copy");
}

struct KindPlan {
  const KindEntry* entry;
  std::vector<PlanItem> items;
  double planned_s = 0;
};

std::vector<KindPlan> build_plan(const Options& options, const PlanConfig& config,
                                 const CsvLog* log) {
  std::vector<KindPlan> plans;
  for (const std::string& kind : options.ops) {
    KindPlan plan{&kind_entry(kind), {}, 0};
    for (const PlanItem& item : plan.entry->plan(config))
      if (log == nullptr || !log->has(item.key)) plan.items.push_back(item);
    if (plan.items.empty()) continue;
    plan.planned_s = plan.entry->setup_s;
    for (const PlanItem& item : plan.items) plan.planned_s += planned_seconds(item);
    plans.push_back(std::move(plan));
  }
  return plans;
}

double print_plan(const std::vector<KindPlan>& plans, double budget_s) {
  double total = 0;
  std::fprintf(stderr, "plan (estimated wall time):\n");
  for (const KindPlan& plan : plans) {
    std::fprintf(stderr, "  %-10s %6zu points  ~%6.1f s", plan.entry->name, plan.items.size(),
                 plan.planned_s);
    std::map<std::string, std::pair<int, double>> by_type;  // gemm: per dtype
    if (std::string(plan.entry->name) == "gemm") {
      for (const PlanItem& item : plan.items) {
        auto& [count, seconds] = by_type[item.key.dtype];
        ++count;
        seconds += planned_seconds(item);
      }
      std::fprintf(stderr, "  (");
      const char* sep = "";
      for (const auto& [dtype, cs] : by_type) {
        std::fprintf(stderr, "%s%s %d ~%.1f s", sep, dtype.c_str(), cs.first, cs.second);
        sep = ", ";
      }
      std::fprintf(stderr, ")");
    }
    std::fprintf(stderr, "\n");
    total += plan.planned_s;
  }
  std::fprintf(stderr, "  total      ~%.1f s against a budget of %.0f s%s\n", total, budget_s,
               total > budget_s ? " (over: the last points of each kind will be cut)" : "");
  return total;
}

// What this build lacks, said loudly before planning: the data it cannot produce.
void print_build_limits(const Options& options) {
#ifndef HETSIM_CALIBRATE_NCCL
  std::fprintf(stderr,
               "*** built WITHOUT NCCL (not found at configure time): collectives are NOT "
               "measured ***\n");
#endif
#ifndef HETSIM_CALIBRATE_CUDNN
  std::fprintf(stderr,
               "*** built WITHOUT cuDNN (not found at configure time): attention is measured "
               "UNFUSED only ***\n");
  std::fprintf(stderr,
               "*** built WITHOUT cuDNN (not found at configure time): convolutions are NOT "
               "measured ***\n");
#else
  if (options.no_cudnn) {
    std::fprintf(stderr, "*** --no-cudnn: attention is measured UNFUSED only ***\n");
    std::fprintf(stderr, "*** --no-cudnn: convolutions are NOT measured ***\n");
  }
#endif
  (void)options;
}

// The points a run would measure, as its CSV lines, with the planner's estimates for times and 0
// repetitions; marked so that no reader takes them for measurements.
void write_dry_run_plan(const Options& options, const PlanConfig& config,
                        const std::vector<KindPlan>& plans) {
  if (std::FILE* probe = std::fopen(options.out.c_str(), "r")) {
    std::fclose(probe);
    throw std::invalid_argument("--out " + options.out +
                                ": exists; a dry run writes its plan only to a new file");
  }
  std::vector<std::pair<std::string, std::string>> provenance = {
      {"backend", "cuda"},
      {"device_type", "h200-sxm-141gb"},
      {"device_name", "dry run"},
      {"dry_run", "planner estimates, nothing measured"},
      {"gpus_in_node", "8"}};
  for (const auto& line : library_provenance()) provenance.push_back(line);
  CsvLog plan_log(options.out, provenance);
  std::size_t points = 0;
  for (const KindPlan& plan : plans)
    for (const PlanItem& item : plan.items) {
      Stats s;
      s.median_s = s.p10_s = s.p90_s = item.estimate_s;
      s.repetitions = 0;
      Key key = item.key;
      if (key.kind == "attention") key.name = config.cudnn ? "cudnn" : "unfused";
      plan_log.append(key, s);
      ++points;
    }
  std::fprintf(stderr, "dry run: %zu planned points written to %s\n", points, options.out.c_str());
}

int dry_run(const Options& options, PlanConfig& config) {
  config.gpus = 8;  // an assumed HGX node of H200 (compute capability 9.0)
  std::fprintf(stderr, "dry run: assuming 8 GPUs of compute capability 9.0 (H200)\n");
  const std::vector<KindPlan> plans = build_plan(options, config, nullptr);
  print_plan(plans, options.budget_s);
  if (!options.out.empty()) write_dry_run_plan(options, config, plans);
  return 0;
}

// What this node will not measure, said before the plan.
void print_skipped_kinds(const Options& options, const PlanConfig& config, int count,
                         const cudaDeviceProp& prop) {
  for (const std::string& kind : options.ops) {
    if (kind == "conv" && !config.cudnn)
      std::fprintf(stderr, "*** conv: SKIPPED, %s ***\n",
                   options.no_cudnn ? "--no-cudnn" : "built without cuDNN");
    if (kind != "collective") continue;
    if (!config.nccl)
      std::fprintf(stderr, "*** collective: SKIPPED, built without NCCL ***\n");
    else if (count < 2)
      std::fprintf(stderr,
                   "*** collective: SKIPPED, only 1 GPU in this node (NCCL collectives need 2 or "
                   "more) ***\n");
  }
  if (!config.has_fp8())
    std::fprintf(stderr, "gemm fp8: skipped, compute capability %d.%d < 8.9\n", prop.major,
                 prop.minor);
}

// Measures the planned points kind by kind into `log`, within the budget.
void measure_plans(const Options& options, const PlanConfig& config,
                   const std::vector<KindPlan>& plans, double planned_total, CsvLog& log) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int measured = 0, unsupported = 0, cut = 0, fused = 0, unfused = 0;
  {
    Timer timer(options.device, stream);
    const BenchContext context{options.device, stream, &timer, config.cudnn};
    Progress progress(planned_total);
    // Each kind may run until its cumulative share of the budget: a kind that runs long eats into
    // its own points, not the next kind's, and the run never passes the budget.
    double cumulative = 0;
    timer.warm_up(0.3);  // clocks ramp up before the first point
    for (const KindPlan& plan : plans) {
      cumulative += plan.planned_s;
      const double kind_deadline = options.budget_s * cumulative / planned_total;
      std::fprintf(stderr, "%s: %zu points\n", plan.entry->name, plan.items.size());
      const auto bench = plan.entry->make(context, plan.items);
      progress.advance(plan.entry->setup_s, std::string(plan.entry->name) + " set up");
      int kind_cut = 0;
      for (const PlanItem& item : plan.items) {
        const double planned = planned_seconds(item);
        if (progress.elapsed_s() > kind_deadline) {
          ++kind_cut;
          progress.advance(planned, item.key.label() + " (cut: over budget)");
          continue;
        }
        const std::optional<Stats> stats = bench->measure(item.key);
        if (stats) {
          Key logged = item.key;
          if (!stats->impl.empty()) logged.name = stats->impl;  // attention: cudnn or unfused
          if (item.key.kind == "attention") ++(stats->impl == "cudnn" ? fused : unfused);
          log.append(logged, *stats);
          ++measured;
        } else {
          ++unsupported;
          std::fprintf(stderr, "skipped %s: %s has no algorithm for it\n", item.key.label().c_str(),
                       item.key.kind == "conv" ? "cuDNN" : "cuBLASLt");
        }
        progress.advance(planned, item.key.label());
      }
      if (kind_cut > 0)
        std::fprintf(stderr, "%s: %d points cut to stay within the %.0f s budget\n",
                     plan.entry->name, kind_cut, options.budget_s);
      cut += kind_cut;
    }
    std::fprintf(stderr, "done: %d measured, %d unsupported, %d cut, %.1f s\n", measured,
                 unsupported, cut, progress.elapsed_s());
    if (unfused > 0)
      std::fprintf(stderr, "*** attention: %d point(s) measured UNFUSED (%d fused by cuDNN) ***\n",
                   unfused, fused);
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
}

int run(const Options& options) {
  PlanConfig config;
  config.quick = options.quick;
  if (!options.shapes.empty()) config.model_shapes = read_model_shapes(options.shapes);
#ifdef HETSIM_CALIBRATE_CUDNN
  config.cudnn = !options.no_cudnn;
#endif
#ifdef HETSIM_CALIBRATE_NCCL
  config.nccl = true;
#endif
  if (!options.print_device_type) print_build_limits(options);
  if (options.dry_run) return dry_run(options, config);

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    // Without a GPU the runtime answers "CUDA driver version is insufficient for CUDA runtime
    // version" (no driver at all): the cause, not that message, comes first.
    std::fprintf(stderr, "hetsim-calibrate-cuda: no CUDA GPU found (cudaGetDeviceCount: %s)\n",
                 status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 1;
  }
  if (options.device >= count)
    throw std::invalid_argument("--device " + std::to_string(options.device) + ": this node has " +
                                std::to_string(count) + " CUDA device(s)");
  CHECK_CUDA(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, options.device));
  if (options.print_device_type) {
    std::printf("%s\n", device_type_from_name(prop.name).c_str());
    return 0;
  }
  config.cc_major = prop.major;
  config.cc_minor = prop.minor;
  config.gpus = count;
  config.rates = RateGuess::for_compute_capability(prop.major, prop.minor);

  CsvLog log(options.out, collect_provenance(options.device));
  std::fprintf(stderr, "%s (cc %d.%d, %d SMs), %d GPU(s) in the node; writing %s\n", prop.name,
               prop.major, prop.minor, prop.multiProcessorCount, count, options.out.c_str());
  if (log.resumed_count() > 0)
    std::fprintf(stderr, "resuming: %zu measurements already in %s are skipped\n",
                 log.resumed_count(), options.out.c_str());
  print_skipped_kinds(options, config, count, prop);

  const std::vector<KindPlan> plans = build_plan(options, config, &log);
  const double planned_total = print_plan(plans, options.budget_s);
  if (plans.empty()) {
    std::fprintf(stderr, "nothing left to measure\n");
    return 0;
  }
  measure_plans(options, config, plans, planned_total, log);
  return 0;
}

}  // namespace
}  // namespace hetsim::calibrate::cuda

int main(int argc, char** argv) {
  namespace c = hetsim::calibrate::cuda;
  c::Options options;
  try {
    bool help = false;
    options = c::parse_options(argc, argv, &help);
    if (help) {
      std::fputs(c::usage(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hetsim-calibrate-cuda: %s\n%s", e.what(), c::usage());
    return 2;
  }
  try {
    // Started by an MPI launcher with several ranks: collectives across them, one GPU each.
    if (c::launcher_world_size() > 1 && !options.dry_run && !options.print_device_type)
      return c::run_mpi_collectives(options);
    return c::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hetsim-calibrate-cuda: %s\n", e.what());
    return 1;
  }
}
