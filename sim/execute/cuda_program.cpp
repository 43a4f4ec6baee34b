// The CUDA backend of `hetsim execute`, hetsim's side; see cuda_program.h.
#include "sim/execute/cuda_program.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "calibrate/measured_cost_model.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::execute {

using workload::OpKind;

namespace {

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::gemm:
      return "gemm";
    case OpKind::attention_forward:
      return "attention_forward";
    case OpKind::attention_backward:
      return "attention_backward";
    case OpKind::memory:
      return "memory";
    case OpKind::conv:
      return "conv";
  }
  return "memory";
}

// One op of the program: its task, segment, op index and predicted duration.
struct ProgramOp {
  uint32_t task = 0, segment = 0, op = 0;
  double predicted_s = 0;
};

std::vector<ProgramOp> program_ops(const workload::StageCopy& g) {
  std::vector<ProgramOp> out;
  for (uint32_t pc = 0; pc < g.program.size(); ++pc) {
    const workload::Task& t = g.program[pc];
    if (t.kind != workload::TaskKind::compute) continue;
    for (const auto& [op, duration] : g.segments[t.index].ops)
      out.push_back(ProgramOp{pc, t.index, op, duration.seconds()});
  }
  return out;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

}  // namespace

void check_cuda_job(const workload::TrainingJob& job) {
  if (job.model->convolutional()) {
    throw InputError(fmt::format(
        "{}: is a convolutional network; {} handles transformers only (hetsim simulate replays it "
        "on a grid plan: grid: {{rows, columns}}, split: gholami)",
        job.model->name, "execute"));
  }
  size_t devices = 0;
  for (const workload::StageCopy& g : job.copies) devices += g.devices.size();
  if (devices != 1) {
    const workload::Plan& p = *job.plan;
    throw InputError(fmt::format(
        "plan {}: {} devices (data parallel {}, tensor parallel {}, pipeline parallel {}): the "
        "CUDA backend of execute runs single-GPU plans only (one device: every degree 1); "
        "--backend cpu runs plans over several ranks",
        p.source, devices, p.data_parallel, p.tensor_parallel, p.pipeline_parallel));
  }
}

std::string cuda_program(const workload::TrainingJob& job, double predicted_iteration_s,
                         const std::string& about) {
  check_cuda_job(job);
  const workload::StageCopy& g = job.copies.front();
  const std::vector<ProgramOp> ops = program_ops(g);
  size_t other = 0;
  for (const workload::Task& t : g.program) other += t.kind != workload::TaskKind::compute;
  std::string s =
      "# hetsim execute program: the compute kernels of one device's training iteration, in "
      "order (calibrate/README.md)\n";
  s += "# " + about + "\n";
  if (other > 0)
    s += fmt::format("# {} communication task(s) of the program left out (one device)\n", other);
  s += "hetsim-execute-program,2\n";
  s += "precision," + workload::to_string(job.plan->precision) + "\n";
  s += fmt::format("predicted_iteration_s,{}\n", predicted_iteration_s);
  s += fmt::format("ops,{}\n", ops.size());
  s += "task,segment,op,kind,name,m,n,k,batch,heads,seq,head_dim,causal,fused,bytes,memory_kernel,"
       "predicted_s,precision\n";
  for (const ProgramOp& p : ops) {
    const workload::Op& op = g.ops[p.op];
    if (op.name.empty() || op.name.find_first_of(",\n\r") != std::string::npos)
      throw InputError("op name \"" + op.name + "\": cannot go into the program file (a comma)");
    const bool memory = op.kind == OpKind::memory;
    s +=
        fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", p.task, p.segment,
                    p.op, kind_name(op.kind), op.name, op.m, op.n, op.k, op.batch, op.heads, op.seq,
                    op.head_dim, op.causal ? 1 : 0, op.fused ? 1 : 0, memory ? op.bytes : 0.0,
                    memory ? calibrate::memory_kernel_of(op.name) : "", p.predicted_s,
                    workload::to_string(workload::math_precision(op, job.plan->precision)));
  }
  return s;
}

CudaMeasured read_cuda_measured(const workload::TrainingJob& job, const std::string& text,
                                const std::string& file) {
  check_cuda_job(job);
  const workload::StageCopy& g = job.copies.front();
  const std::vector<ProgramOp> ops = program_ops(g);
  CudaMeasured r;
  Measured& m = r.measured;
  m.backend = "cuda";
  m.ranks = 1;
  std::vector<double> op_s;
  std::stringstream in(text);
  std::string line;
  int number = 0;
  bool header = false;
  auto fail = [&](const std::string& what) {
    throw InputError(fmt::format("{}:{}: {}", file, number, what));
  };
  auto seconds = [&](const std::string& cell) {
    const std::optional<double> v = config::parse_whole<double>(cell);
    if (!v || !(*v >= 0)) fail("seconds: expected a number >= 0, got \"" + cell + "\"");
    return *v;
  };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# device_name=", 0) == 0) r.device_name = line.substr(14);
      if (line.rfind("# predicted_iteration_s=", 0) == 0)
        r.predicted_iteration_s = config::parse_whole<double>(line.substr(24)).value_or(-1);
      continue;
    }
    if (!header) {
      if (line != "kind,index,task,name,impl,seconds")
        fail(
            "not a hetsim-execute-cuda CSV: expected the header kind,index,task,name,impl,seconds");
      header = true;
      continue;
    }
    const std::vector<std::string> f = split(line);
    if (f.size() != 6) fail(fmt::format("expected 6 fields, got {}", f.size()));
    if (f[0] == "iteration") {
      m.iteration_s.push_back(seconds(f[5]));
    } else if (f[0] == "op") {
      const size_t i = op_s.size();
      if (i >= ops.size())
        fail(fmt::format("more op rows than the program's {} ops: measured for another plan?",
                         ops.size()));
      const std::string& want = g.ops[ops[i].op].name;
      if (f[1] != std::to_string(i) || f[3] != want)
        fail(fmt::format("op {} is {} \"{}\", the program's is \"{}\": measured for another plan?",
                         i, f[1], f[3], want));
      op_s.push_back(seconds(f[5]));
      if (g.ops[ops[i].op].kind == OpKind::attention_forward ||
          g.ops[ops[i].op].kind == OpKind::attention_backward)
        ++r.attention[f[4]];
    } else {
      fail("kind: expected iteration or op, got \"" + f[0] + "\"");
    }
  }
  if (!header) throw InputError(file + ": empty: no header kind,index,task,name,impl,seconds");
  if (m.iteration_s.empty()) throw InputError(file + ": no iteration rows");
  if (op_s.size() != ops.size())
    throw InputError(
        fmt::format("{}: {} op rows, the program has {} ops: measured for another plan?", file,
                    op_s.size(), ops.size()));
  // The one device: everything it does is compute. Its compute is the iteration timed op by op
  // (events between the ops, so launch gaps fall to the op after them); it finished after the
  // mean measured iteration.
  double mean = 0, compute = 0;
  for (double x : m.iteration_s) mean += x;
  mean /= static_cast<double>(m.iteration_s.size());
  std::map<std::string, KernelTimes> kernels;
  double at = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    compute += op_s[i];
    const workload::Op& op = g.ops[ops[i].op];
    KernelTimes& k = kernels[op.name];
    k.name = op.name;
    ++k.calls;
    k.measured_s += op_s[i];
    k.predicted_s += ops[i].predicted_s;
    // Trace events: one per compute task, from its first op to its last.
    if (i == 0 || ops[i].task != ops[i - 1].task)
      m.events.push_back(Event{0, ops[i].task, 0, 0, at, at});
    at += op_s[i];
    m.events.back().end = at;
  }
  const platform::GpuId d = g.devices.front();
  m.devices.resize(d + 1);
  m.devices[d].compute = compute;
  m.devices[d].finish = mean;
  for (auto& [name, k] : kernels) m.kernels.push_back(k);
  r.op_s = std::move(op_s);
  return r;
}

}  // namespace hetsim::execute
