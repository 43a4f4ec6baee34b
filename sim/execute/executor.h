// `hetsim execute`: runs the programs of a TrainingJob on real devices, one MPI rank per device
// of the plan (rank i is GPU i of the cluster), and measures them. Each rank runs its stage
// copy's program as the replay does: its kernels at their exact shapes, its tensor-parallel
// collectives on the copy's communicator (asynchronous ones non-blocking, joined at tp_wait),
// pipeline sends as non-blocking point-to-point (synchronous where the framework blocks) and
// receives posted at the start of the iteration, gradient collectives non-blocking on the stage's
// data-parallel communicator, joined at dp_wait, and the tied-embedding all-reduce between the
// end stages. Outstanding requests are polled after every kernel, so that they progress under
// compute as the replay assumes they overlap. The CPU backend runs the calibration kernels
// (OpenBLAS GEMMs, the unfused attention and the memory-bound kernels of calibrate/cpu/) and MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/workload/job/training_job.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::execute {

// MPI for the life of the command: initialised on construction, finalised on destruction.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool lead() const { return rank_ == 0; }

 private:
  int rank_ = 0, size_ = 1;
};

struct Options {
  int iterations = 3, warmup = 1;
  double timeout_s = 600;  // an iteration that takes longer ends every rank
  // Fault injection (tests): rank `kill_rank` kills itself with SIGKILL when it reaches task
  // `kill_task` of its program in the first measured iteration.
  int kill_rank = -1;
  size_t kill_task = 0;
};

// Where one device's time went in one iteration, in the replay's kinds (workload::CopyTimes):
// kernels, waiting on tensor-parallel collectives, on pipeline transfers, on data-parallel
// collectives (and the tied embedding), and when it finished.
struct DeviceTimes {
  double compute = 0, tp = 0, pp = 0, dp = 0, finish = 0;
  double ep = 0, cp = 0;  // waits in expert- and context-parallel collectives (synchronous ones)
};

// A task of the last measured iteration on the first rank of its copy, for the trace.
struct Event {
  uint32_t copy = 0, pc = 0, from = 0;
  // 0 compute, 1 tensor-parallel, 2 data-parallel, 3 transfer into `copy`, 4 expert-parallel,
  // 5 context-parallel
  uint8_t kind = 0;
  double start = 0, end = 0;
};

// One kernel (by the op's name, e.g. "fc1.fprop") over every device: measured and predicted
// seconds per iteration, summed over the devices that run it.
struct KernelTimes {
  std::string name;
  uint64_t calls = 0;  // per iteration
  double measured_s = 0, predicted_s = 0;
};

struct Measured {  // complete on rank 0 only
  std::string backend;
  int ranks = 0;
  std::vector<double> iteration_s;   // each measured iteration: the slowest rank's time
  std::vector<DeviceTimes> devices;  // by GPU id of the cluster; mean over the iterations
  std::vector<Event> events;
  std::vector<KernelTimes> kernels;  // sorted by name
  // By GPU id: the seconds of each task of the device's copy's program (compute tasks; 0 for
  // the others), in each iteration the slowest of the copy's devices (they meet at every
  // tensor-parallel collective), then the mean over the iterations; empty where the backend
  // does not report tasks.
  std::vector<std::vector<double>> task_s;
};

// The job with its compute as this run measured it: each compute task its own segment of the
// measured seconds (Measured::task_s; its ops scaled alike). Its replay is what the schedule and
// the communication model make of the measured compute: the prediction's error with the
// calibration's share (kernels measured at another speed than they ran, devices of a copy
// out of step) taken out. Tasks without kernels (a framework's host time) and copies without
// measurements keep the cost model's times.
workload::TrainingJob with_measured_compute(const workload::TrainingJob& job, const Measured& m);
// Gives compute task `t` of `g` a copy of its segment of its own (tasks share segments), to be
// timed apart from the others; returns it.
workload::Segment& own_segment(workload::StageCopy& g, workload::Task& t);

// Refuses what the CPU backend cannot run as the prediction costs it (InputError naming the
// field): a precision other than fp32, fused attention, more devices than ranks.
void check_cpu_job(const workload::TrainingJob& job, int ranks);

// Runs the job's programs on the ranks of MPI_COMM_WORLD with the CPU kernels. Every rank calls
// it; ranks past the plan's devices only take part in the barriers.
Measured run_cpu(const workload::TrainingJob& job, const Options& o, const MpiSession& mpi);

// Predicted against measured.
struct Comparison {
  double predicted_s = 0, measured_median_s = 0, measured_mean_s = 0, measured_min_s = 0,
         measured_max_s = 0, measured_stdev_s = 0;
  // (predicted - measured median) / measured median: the median, since a shared machine's
  // stray slow iteration moves the mean.
  double error = 0;
  struct Row {
    std::string what;  // "compute", "tensor-parallel", ...; or a device "gpu0 (replica 0 stage 1)"
    double predicted_s = 0, measured_s = 0;
  };
  std::vector<Row> kinds;    // mean over devices, per kind
  std::vector<Row> devices;  // per device: the time it finished
  std::vector<KernelTimes> kernels;
  // The replay of with_measured_compute, where there is one: its iteration and its error
  // against the measured median.
  bool replayed = false;
  double replayed_s = 0, replayed_error = 0;
};

// `replayed`: the replay of with_measured_compute(job, measured), or null.
Comparison compare(const workload::TrainingJob& job, const workload::ReplayResult& predicted,
                   const Measured& measured, const workload::ReplayResult* replayed = nullptr);
std::string to_text(const Comparison& c, const Measured& m);
std::string to_json(const Comparison& c, const Measured& m);

}  // namespace hetsim::execute
