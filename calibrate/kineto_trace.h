// A PyTorch profiler trace (Kineto's Chrome-trace JSON, as torch.profiler's export_chrome_trace
// and tensorboard_trace_handler write it, plain or gzip-compressed) read into events with their
// nesting: each CPU-side event knows the event around it on its thread, each GPU kernel the
// runtime call that launched it (by Kineto's "correlation" id) and so the operator that ran it.
//
// What is read of each complete ("ph": "X") event: name, category ("cat": cpu_op,
// user_annotation, kernel, cuda_runtime, gpu_memcpy, gpu_memset, ...), ts and dur (microseconds),
// pid and tid, and of its args: "Input Dims" and "Input type" (record_shapes=True), "Sequence
// number" (the autograd node a forward op made, and the backward node that runs for it),
// "correlation", and record_param_comms' collective arguments ("Collective name", "In msg
// nelems", "Out msg nelems", "Group size", "dtype").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetsim::calibrate {

// One input of an operator as "Input Dims" gives it: a tensor's shape, a tensor list's shapes
// (their elements summed), or nothing (a scalar or another argument).
struct TraceInput {
  std::vector<int64_t> shape;  // a tensor's; empty for a list or a non-tensor
  double numel = 0;            // elements of the tensor, or of every tensor of the list
  bool tensor = false;         // a tensor (or a non-empty list of them)
  std::string type;            // "Input type": "float", "c10::BFloat16", ...; empty when unknown
};

enum class TraceCategory : uint8_t {
  cpu_op,      // an operator (aten::mm, autograd::engine::evaluate_function: ..., ...)
  annotation,  // record_function ranges: ProfilerStep#N, Optimizer.step#AdamW.step, user ranges
  kernel,      // a GPU kernel
  runtime,     // a CUDA runtime or driver call (cudaLaunchKernel, ...)
  gpu_other,   // GPU memcpy and memset
  other,
};

struct TraceEvent {
  std::string name;
  TraceCategory cat = TraceCategory::other;
  double ts = 0, dur = 0;  // microseconds
  std::string pid, tid;    // as written (numbers or names)
  std::vector<TraceInput> inputs;
  int64_t sequence = -1;     // "Sequence number"
  int64_t correlation = -1;  // runtime call <-> kernel
  // record_param_comms (a collective's arguments); -1 where absent
  std::string collective, comm_dtype;
  int64_t in_nelems = -1, out_nelems = -1, group_size = -1;
  // The innermost CPU-side event around this one on its thread (cpu_op, annotation or runtime);
  // for a kernel, the runtime call that launched it. -1: none.
  int32_t parent = -1;
  double end() const { return ts + dur; }
};

struct KinetoTrace {
  std::string path;
  std::vector<TraceEvent> events;  // in the file's order
  std::vector<uint32_t> steps;     // the ProfilerStep#N annotations, in time order
  bool has_kernels = false;        // GPU kernels were recorded (else a CPU-only trace)
  std::string writer;              // "hetsim_writer" where torch_profile_trace.py wrote the layout
};

// Reads a trace (.json or .json.gz). Throws InputError naming the file, and the event and field
// where one is malformed; the legacy profiler's export (a bare array without categories or
// shapes) is refused with what to do instead.
KinetoTrace read_kineto_trace(const std::string& path);

// The same from text already in memory (`path` names it in errors).
KinetoTrace parse_kineto_trace(const std::string& text, const std::string& path);

// The ProfilerStep that contains event `e` (its index in steps), or -1.
int step_of(const KinetoTrace& t, uint32_t e);

}  // namespace hetsim::calibrate
