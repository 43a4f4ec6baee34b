// A PyTorch profiler trace of real training iterations as calibration measurements of the device
// it ran on (`hetsim calibrate import-trace`), and its operators by the kinds of work the cost
// model knows (`hetsim compare --trace`).
//
// Each operator the trace ran is mapped to a measurement of the calibration database, or listed
// as unmapped (never guessed):
// - GEMMs: aten::mm, addmm, bmm, baddbmm, with their shapes from "Input Dims" (m x k . k x n,
//   batch), the element type from "Input type".
// - Attention: fused kernels (aten::_scaled_dot_product_{flash,efficient,cudnn}_attention,
//   _for_cpu, and their _backward) from the query's [batch, heads, sequence, head size]; the
//   unfused core (aten::_scaled_dot_product_attention_math, or a record_function range whose name
//   holds "attention" and runs no fused kernel) as one unfused attention kernel from its first
//   4-d matmul, and its backward as the autograd nodes whose sequence numbers its forward ops
//   made. Causal unless ImportOptions::causal says otherwise (a trace does not say).
// - Memory-bound kernels, by the database's kernel names (calibrate::memory_kernel_of), each
//   with the bytes hetsim's op of that work counts (sim/workload/model/ops.cpp): native_layer_norm
//   (2 passes; backward 3) as layernorm, gelu (2; backward 3), _softmax and _log_softmax (2;
//   backward 3) as softmax, native_dropout and dropout ((2e + 1) n) as dropout, add, mul of two
//   tensors of one size (3) as residual_add, copy_ (source and destination) and embedding (2)
//   as copy. Not the embedding's backward, a sort and scatter-add on the CPU many times slower
//   than a copy of its bytes: filed as a copy it made the copy table's curve meaningless.
// - The optimizer: an Optimizer.step#Adam.step or #AdamW.step range as one adam kernel over the
//   parameters its addcmul_ (or _foreach_addcmul_, _fused_adam(w)_) touch, 28 bytes a parameter
//   (fp32 parameters: ops.cpp's optimizer_step).
// - Collectives: NCCL kernels, by the record_param_comms around their launch (collective, sizes
//   and group), as nccl-tests sizes them.
// A CPU-only trace times an operator by its own duration; a GPU trace by the kernels it launched.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/database.h"
#include "calibrate/kineto_trace.h"
#include "sim/workload/model/ops.h"

namespace hetsim::calibrate {

struct ImportOptions {
  std::string device_type;     // the GPU profile measured (required)
  std::string dtype = "fp32";  // element type where the trace records none
  bool causal = true;          // attention is causal (a decoder's)
  int gpus_per_node = 8;       // a collective over more ranks spans ranks / this many nodes
};

// One run of a mapped operator.
struct TraceOp {
  uint32_t event = 0;  // the operator (or range) in KinetoTrace::events
  std::string name;    // its name in the trace
  int step = -1;       // its ProfilerStep, or -1
  std::string table;   // "gemm/fp32", "attention/fp32", "memory/layernorm", "collective/allreduce"
  std::string label;   // the point's key, as calibrate check prints it
  double seconds = 0;  // measured: the operator's duration, or its kernels' on a GPU
  GemmPoint gemm;      // table "gemm/..."
  AttentionPoint attention;  // "attention/..."
  SizePoint size;            // "memory/..." and "collective/..."
};

struct UnmappedOp {
  std::string name;  // the operator's (CPU trace) or the kernel's (GPU trace)
  uint64_t calls = 0;
  double seconds = 0;  // its own time (CPU: less the operators inside it) or its kernels'
};

// Where one recorded iteration's time went, on the device the trace recorded.
// GPU trace: compute is the time some kernel other than NCCL's ran, communication the time NCCL
// kernels ran with none of those beside them (exposed), idle the rest (the host behind, waits).
// CPU trace: communication is the collectives' operators, idle the host's time between
// operators (the ProfilerStep range's own time), compute the rest.
struct StepTimes {
  double iteration = 0, compute = 0, communication = 0, idle = 0;
};

struct TraceImport {
  // One point per distinct table and key: the mean of its runs as the time (they differ by
  // where they run, not by noise; see trace_import.cpp), the 10th and 90th percentiles.
  Database db;
  std::vector<TraceOp> ops;          // every mapped run, in trace order
  std::vector<UnmappedOp> unmapped;  // by seconds, most first
  double mapped_s = 0, unmapped_s = 0;
  std::vector<double> iteration_s;  // each ProfilerStep's duration
  std::vector<StepTimes> steps;     // each ProfilerStep's
  std::vector<std::string> notes;   // what was assumed
};

// The table and the point's label (as TraceOp's) of the measurement that stands for a workload
// op run in precision p: what import_trace would file that op's kernel under.
std::pair<std::string, std::string> measurement_key(const workload::Op& op, workload::Precision p);

// Throws InputError naming the trace when it holds nothing to map.
TraceImport import_trace(const KinetoTrace& t, const ImportOptions& o);

// A summary for the command line: points per table, the share of time mapped, the unmapped
// operators (the `top` longest).
std::string to_text(const TraceImport& r, size_t top = 15);

}  // namespace hetsim::calibrate
