// The CUDA backend of `hetsim execute`, hetsim's side: a single-GPU plan's compute kernels as
// the program file hetsim-execute-cuda runs (calibrate/cuda/execute_program.h has the format),
// and that program's measured CSV read back as an execute::Measured for the comparison. The
// program itself is standalone (calibrate/cuda/), so that it builds on a GPU machine without
// hetsim's dependencies; the two meet only through these two files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/execute/executor.h"
#include "sim/workload/job/training_job.h"

namespace hetsim::execute {

// Refuses (InputError) a plan the CUDA backend cannot run: more than one device.
void check_cuda_job(const workload::TrainingJob& job);

// The program file: every compute task's kernels in program order, with the plan's precision
// and the predicted iteration. `about` goes into a comment line (model, plan, cluster).
std::string cuda_program(const workload::TrainingJob& job, double predicted_iteration_s,
                         const std::string& about);

struct CudaMeasured {
  Measured measured;
  std::string device_name;               // from the CSV's provenance, "" when absent
  double predicted_iteration_s = -1;     // what the program file said, -1 when absent
  std::map<std::string, int> attention;  // implementation ("cudnn", "unfused") -> ops
  std::vector<double> op_s;  // each op of the program, from the iteration timed op by op
};

// Reads the CSV hetsim-execute-cuda wrote (`text`, from `file`) for this job's program: its op
// rows must be the program's ops in order (InputError naming the first that differs).
CudaMeasured read_cuda_measured(const workload::TrainingJob& job, const std::string& text,
                                const std::string& file);

}  // namespace hetsim::execute
