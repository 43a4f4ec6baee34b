// `hetsim compare --trace`: a user's own measured iterations (a PyTorch profiler trace, read by
// calibrate::import_trace) against hetsim's replay of the same model, cluster and plan: per
// iteration, per kind of time, per kind of kernel (the calibration's tables) and per kernel
// shape, as `hetsim execute` reports its own runs.
#pragma once

#include <string>
#include <vector>

#include "calibrate/trace_import.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::execute {

struct TraceComparison {
  std::string device;  // the replayed device the trace is compared with ("gpu0 (...)")
  double predicted_s = 0, measured_median_s = 0, measured_min_s = 0, measured_max_s = 0;
  double error = 0;  // (predicted - measured median) / measured median
  size_t iterations = 0;
  struct Row {
    std::string what;
    double predicted_calls = 0, measured_calls = 0;  // per iteration
    double predicted_s = 0, measured_s = 0;          // per iteration
    // kernel rows: the replay's op names and the trace's operator names behind the row
    std::vector<std::string> predicted_names, measured_names;
  };
  // compute, exposed communication, idle (host, bubble): predicted from the replay's times of
  // that device, measured the median of calibrate::StepTimes.
  std::vector<Row> kinds;
  // Per table ("gemm/fp32", "memory/layernorm", ...; "unmapped" for the trace's operators
  // that map to none), by measured time, most first.
  std::vector<Row> tables;
  // Per table and point ("gemm/fp32 m=256 n=768 k=256 batch=1"), by the larger of the two times.
  std::vector<Row> kernels;
};

// `device`: the GPU of the cluster whose program the trace recorded (its group's program is the
// replay's; the trace is one rank's). Throws InputError when the trace recorded no iteration.
TraceComparison compare_trace(const workload::TrainingJob& job,
                              const workload::ReplayResult& predicted,
                              const calibrate::TraceImport& measured, platform::GpuId device);
// `top`: kernel rows printed.
std::string to_text(const TraceComparison& c, size_t top = 25);
std::string to_json(const TraceComparison& c);

// One Chrome trace with both: `replayed` (report::ChromeTrace's JSON of the replay), and the
// trace's iteration of median length (its operators and kernels, from 0 like the replay's, as a
// process of its own named after the trace).
std::string side_by_side(const std::string& replayed, const calibrate::KinetoTrace& trace,
                         const calibrate::TraceImport& measured);

}  // namespace hetsim::execute
