// Operators of a PyTorch profiler trace as calibration measurements; see trace_import.h.
#include "calibrate/trace_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include "calibrate/measured_cost_model.h"
#include "sim/core/error.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::calibrate {

namespace {

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The database's element type of a PyTorch scalar type, or "" for one it has no table of.
std::string dtype_of(const std::string& torch_type, const std::string& fallback) {
  if (torch_type.empty()) return fallback;
  if (torch_type == "float") return "fp32";
  if (torch_type == "c10::BFloat16") return "bf16";
  if (torch_type == "c10::Half") return "fp16";
  if (starts(torch_type, "c10::Float8")) return "fp8";
  return "";
}

// Bytes of one element of a PyTorch scalar type (indices and masks included).
double element_size(const std::string& torch_type, const std::string& fallback) {
  if (torch_type == "double" || torch_type == "long int" || torch_type == "int64_t") return 8;
  if (torch_type == "float" || torch_type == "int") return 4;
  if (torch_type == "c10::BFloat16" || torch_type == "c10::Half") return 2;
  if (torch_type == "bool" || torch_type == "unsigned char" || starts(torch_type, "c10::Float8"))
    return 1;
  return fallback == "fp32" ? 4 : fallback == "fp8" ? 1 : 2;
}

const std::vector<std::string>& fused_attention_forward() {
  static const std::vector<std::string> v = {"aten::_scaled_dot_product_flash_attention",
                                             "aten::_scaled_dot_product_flash_attention_for_cpu",
                                             "aten::_scaled_dot_product_efficient_attention",
                                             "aten::_scaled_dot_product_cudnn_attention",
                                             "aten::_flash_attention_forward",
                                             "aten::_efficient_attention_forward"};
  return v;
}

// What a mapped operator measures, before its time is known.
struct Rule {
  enum Kind { none, gemm, attention, memory, optimizer, collective, attention_range } kind = none;
  TraceOp op;  // table, label and key filled
};

class Importer {
 public:
  Importer(const KinetoTrace& t, const ImportOptions& o) : t_(t), o_(o) {
    children_.resize(t.events.size());
    for (uint32_t i = 0; i < t.events.size(); ++i) {
      const TraceEvent& e = t.events[i];
      if (e.parent >= 0 && e.cat != TraceCategory::kernel && e.cat != TraceCategory::gpu_other)
        children_[static_cast<size_t>(e.parent)].push_back(i);
    }
    for (auto& c : children_)
      std::stable_sort(c.begin(), c.end(),
                       [&](uint32_t a, uint32_t b) { return t.events[a].ts < t.events[b].ts; });
  }

  TraceImport run() {
    TraceImport r;
    for (uint32_t s : t_.steps) r.iteration_s.push_back(t_.events[s].dur * 1e-6);
    rules_.assign(t_.events.size(), Rule());
    root_.assign(t_.events.size(), -2);
    for (uint32_t i = 0; i < t_.events.size(); ++i)
      if (cpu_side(i)) rules_[i] = rule(i);
    link_backward();
    // Each mapped operator's runs and time.
    std::unordered_map<uint32_t, size_t> op_of;  // mapped root -> index in r.ops
    auto add_time = [&](uint32_t root, double seconds, uint32_t at) {
      auto it = op_of.find(root);
      if (it == op_of.end()) {
        TraceOp op = rules_[root].op;
        op.event = root;
        const auto range = range_of_backward_.find(root);
        op.name = range == range_of_backward_.end() ? t_.events[root].name
                                                    : t_.events[range->second].name + " (backward)";
        op.step = step_of(t_, at);
        op.seconds = 0;
        it = op_of.emplace(root, r.ops.size()).first;
        r.ops.push_back(std::move(op));
      }
      r.ops[it->second].seconds += seconds;
    };
    std::map<std::string, UnmappedOp> unmapped;
    size_t launched = 0;  // GPU events joined to the runtime call that launched them
    auto count_unmapped = [&](const std::string& name, double seconds) {
      UnmappedOp& u = unmapped[name];
      u.name = name;
      u.calls += 1;
      u.seconds += seconds;
    };
    for (uint32_t i = 0; i < t_.events.size(); ++i) {
      const TraceEvent& e = t_.events[i];
      if (!t_.steps.empty() && step_of(t_, i) < 0) continue;  // outside the recorded iterations
      if (t_.has_kernels) {
        if (e.cat != TraceCategory::kernel && e.cat != TraceCategory::gpu_other) continue;
        if (e.parent >= 0) ++launched;
        const int32_t m = e.parent >= 0 ? root(static_cast<uint32_t>(e.parent)) : -1;
        // Copies between host and device (and memsets) are the bus's time, not a kernel's:
        // listed by name, never filed under the operator that asked for them.
        if (m >= 0 && e.cat == TraceCategory::kernel) {
          add_time(static_cast<uint32_t>(m), e.dur * 1e-6, i);
        } else {
          count_unmapped(e.name, e.dur * 1e-6);
        }
        continue;
      }
      if (!cpu_side(i)) continue;
      const int32_t m = root(i);
      // An operator, or a node of a composite's backward (not one inside another mapped
      // operator, whose time that operator already holds).
      const auto node = backward_root_.find(i);
      if (m == static_cast<int32_t>(i) ||
          (m >= 0 && node != backward_root_.end() && static_cast<int32_t>(node->second) == m)) {
        add_time(static_cast<uint32_t>(m), e.dur * 1e-6, i);  // an operator, or a backward node
      } else if (m < 0) {  // (inside a mapped operator, its time is the operator's)
        double self = e.dur;
        for (uint32_t c : children_[i]) self -= t_.events[c].dur;
        if (self <= 0) continue;
        const bool step = e.cat == TraceCategory::annotation && starts(e.name, "ProfilerStep#");
        count_unmapped(step ? "ProfilerStep (host time between operators)" : e.name, self * 1e-6);
      }
    }
    r.steps = step_times(r.ops);
    for (TraceOp& op : r.ops) r.mapped_s += op.seconds;
    for (auto& [_, u] : unmapped) {
      r.unmapped_s += u.seconds;
      r.unmapped.push_back(u);
    }
    std::stable_sort(
        r.unmapped.begin(), r.unmapped.end(),
        [](const UnmappedOp& a, const UnmappedOp& b) { return a.seconds > b.seconds; });
    if (t_.has_kernels && launched == 0) {
      throw InputError(t_.path +
                       ": GPU kernels are recorded but none is joined to the runtime call that "
                       "launched it (no cuda_runtime or cuda_driver events with their "
                       "\"correlation\" ids): the operators behind the kernels are unknown");
    }
    if (r.ops.empty()) {
      throw InputError(t_.path +
                       ": no operator maps to a measurement (was it recorded with "
                       "record_shapes=True?)");
    }
    r.db = database(r.ops);
    r.notes = notes_;
    return r;
  }

 private:
  bool cpu_side(uint32_t i) const {
    const TraceCategory c = t_.events[i].cat;
    return c == TraceCategory::cpu_op || c == TraceCategory::annotation ||
           c == TraceCategory::runtime;
  }

  // The outermost mapped operator at or around event i (a CPU-side event), or -1.
  int32_t root(uint32_t i) {
    if (root_[i] != -2) return root_[i];
    const int32_t p = t_.events[i].parent;
    int32_t r = p >= 0 ? root(static_cast<uint32_t>(p)) : -1;
    if (r < 0 && rules_[i].kind != Rule::none) r = static_cast<int32_t>(i);
    if (r < 0) {
      const auto b = backward_root_.find(i);
      if (b != backward_root_.end()) r = static_cast<int32_t>(b->second);
    }
    root_[i] = r;
    return r;
  }

  std::string dtype(const TraceEvent& e) {
    const std::string& type = e.inputs.empty() ? std::string() : e.inputs.front().type;
    if (type.empty() && !said_dtype_) {
      notes_.push_back("the trace records no element types: " + o_.dtype + " assumed (--dtype)");
      said_dtype_ = true;
    }
    return dtype_of(type, o_.dtype);
  }
  double bytes(const TraceEvent& e, size_t input, double passes) {
    if (input >= e.inputs.size()) return 0;
    return passes * e.inputs[input].numel * element_size(e.inputs[input].type, o_.dtype);
  }

  Rule gemm_rule(const TraceEvent& e) {
    Rule r;
    const size_t a = e.name == "aten::addmm" || e.name == "aten::baddbmm" ? 1 : 0;
    if (e.inputs.size() < a + 2) return r;
    const std::vector<int64_t>& x = e.inputs[a].shape;
    const std::vector<int64_t>& y = e.inputs[a + 1].shape;
    const bool batched = e.name == "aten::bmm" || e.name == "aten::baddbmm";
    const size_t rank = batched ? 3 : 2;
    if (x.size() != rank || y.size() != rank) return r;
    const std::string d = dtype(e);
    if (d.empty()) return r;
    r.kind = Rule::gemm;
    GemmPoint& g = r.op.gemm;
    g.batch = batched ? x[0] : 1;
    g.m = x[rank - 2];
    g.k = x[rank - 1];
    g.n = y[rank - 1];
    r.op.table = "gemm/" + d;
    r.op.label = point_label(g);
    return r;
  }

  Rule attention_rule(const TraceEvent& e, const std::vector<int64_t>& q, bool bshd, bool fused,
                      bool backward) {
    Rule r;
    if (q.size() != 4) return r;
    const std::string d = dtype(e);
    if (d.empty()) return r;
    r.kind = Rule::attention;
    AttentionPoint& a = r.op.attention;
    a.batch = q[0];
    a.heads = bshd ? q[2] : q[1];
    a.seq = bshd ? q[1] : q[2];
    a.head_dim = q[3];
    a.causal = o_.causal;
    a.fused = fused;
    a.backward = backward;
    r.op.table = "attention/" + d;
    r.op.label = point_label(a);
    return r;
  }

  Rule memory_rule(const char* kernel, double bytes) {
    Rule r;
    if (bytes <= 0) return r;
    r.kind = Rule::memory;
    r.op.size.bytes = bytes;
    r.op.table = std::string("memory/") + kernel;
    r.op.label = fmt::format("bytes={:.0f}", bytes);
    return r;
  }

  // The range's first matmul: its query ([b, h, s, d]; a 3-d bmm's [b h, s, d] as one batch of
  // b h heads) and the event, for its element type.
  struct Query {
    std::vector<int64_t> shape;
    uint32_t event = 0;
  };
  std::optional<Query> range_query(uint32_t i) const {
    std::optional<Query> bmm;
    std::function<std::optional<Query>(uint32_t)> walk = [&](uint32_t e) -> std::optional<Query> {
      for (uint32_t c : children_[e]) {
        const TraceEvent& x = t_.events[c];
        if ((x.name == "aten::matmul" || x.name == "aten::bmm") && !x.inputs.empty()) {
          const std::vector<int64_t>& s = x.inputs[0].shape;
          if (s.size() == 4) return Query{s, c};
          if (s.size() == 3 && !bmm) bmm = Query{{1, s[0], s[1], s[2]}, c};
        }
        if (auto q = walk(c)) return q;
      }
      return std::nullopt;
    };
    if (auto q = walk(i)) return q;
    return bmm;
  }
  bool runs_fused_attention(uint32_t i) const {
    for (uint32_t c : children_[i]) {
      const std::string& n = t_.events[c].name;
      for (const std::string& f : fused_attention_forward())
        if (n == f) return true;
      if (runs_fused_attention(c)) return true;
    }
    return false;
  }
  double optimizer_params(uint32_t i) const {
    double n = 0;
    for (uint32_t c : children_[i]) {
      const TraceEvent& x = t_.events[c];
      if ((x.name == "aten::addcmul_" || x.name == "aten::_foreach_addcmul_" ||
           x.name == "aten::_fused_adam_" || x.name == "aten::_fused_adamw_") &&
          !x.inputs.empty()) {
        n += x.inputs[0].numel;
        continue;
      }
      n += optimizer_params(c);
    }
    return n;
  }

  Rule rule(uint32_t i) {
    const TraceEvent& e = t_.events[i];
    const std::string& n = e.name;
    if (e.cat == TraceCategory::annotation) {
      if (starts(n, "ProfilerStep#")) return {};
      if (n == "Optimizer.step#Adam.step" || n == "Optimizer.step#AdamW.step" ||
          n == "Optimizer.step#FusedAdam.step") {
        const double params = optimizer_params(i);
        if (params <= 0) return {};
        Rule r = memory_rule("adam", 28 * params);
        r.kind = Rule::optimizer;
        return r;
      }
      if (lower(n).find("attention") != std::string::npos && !runs_fused_attention(i))
        return range_rule(i);
      return {};
    }
    if (e.cat != TraceCategory::cpu_op) return {};
    if (!e.collective.empty()) return collective_rule(e);
    if (n == "aten::mm" || n == "aten::addmm" || n == "aten::bmm" || n == "aten::baddbmm")
      return gemm_rule(e);
    for (const std::string& f : fused_attention_forward()) {
      const bool bshd =
          f == "aten::_flash_attention_forward" || f == "aten::_efficient_attention_forward";
      const std::string backward =
          bshd ? (f == "aten::_flash_attention_forward" ? "aten::_flash_attention_backward"
                                                        : "aten::_efficient_attention_backward")
               : f + "_backward";
      if ((n == f || n == backward) && !e.inputs.empty())
        return attention_rule(e, e.inputs[0].shape, bshd, true, n == backward);
    }
    if (n == "aten::_scaled_dot_product_attention_math") return range_rule(i);
    if (n == "aten::native_layer_norm") return memory_rule("layernorm", bytes(e, 0, 2));
    if (n == "aten::native_layer_norm_backward") return memory_rule("layernorm", bytes(e, 0, 3));
    if (n == "aten::gelu") return memory_rule("gelu", bytes(e, 0, 2));
    if (n == "aten::gelu_backward") return memory_rule("gelu", bytes(e, 0, 3));
    if (n == "aten::_softmax" || n == "aten::_log_softmax")
      return memory_rule("softmax", bytes(e, 0, 2));
    if (n == "aten::_softmax_backward_data" || n == "aten::_log_softmax_backward_data")
      return memory_rule("softmax", bytes(e, 0, 3));
    // (aten::dropout without operators inside it did nothing: p = 0, or evaluation.)
    if (n == "aten::native_dropout" || n == "aten::native_dropout_backward" ||
        (n == "aten::dropout" && !children_[i].empty())) {
      // hetsim's dropout: the tensor read and written, and a one-byte mask
      if (e.inputs.empty()) return {};
      const double el = e.inputs[0].numel;
      return memory_rule("dropout", (2 * element_size(e.inputs[0].type, o_.dtype) + 1) * el);
    }
    if ((n == "aten::add" || n == "aten::add_" || n == "aten::mul" || n == "aten::mul_") &&
        e.inputs.size() >= 2 && e.inputs[0].tensor && e.inputs[1].tensor &&
        e.inputs[0].numel == e.inputs[1].numel && e.inputs[0].numel > 1)
      return memory_rule("residual_add", bytes(e, 0, 1) + bytes(e, 1, 1) + bytes(e, 0, 1));
    if (n == "aten::copy_" && e.inputs.size() >= 2 && e.inputs[0].numel == e.inputs[1].numel)
      return memory_rule("copy", bytes(e, 0, 1) + bytes(e, 1, 1));
    if (n == "aten::embedding" && e.inputs.size() >= 2 && e.inputs[0].shape.size() == 2) {
      const double out = e.inputs[1].numel * static_cast<double>(e.inputs[0].shape[1]);
      return memory_rule("copy", 2 * out * element_size(e.inputs[0].type, o_.dtype));
    }
    return {};
  }

  Rule range_rule(uint32_t i) {
    const std::optional<Query> q = range_query(i);
    if (!q) return {};
    // a range records no inputs: the element type is its matmul's
    Rule r = attention_rule(t_.events[q->event], q->shape, false, false, false);
    if (r.kind == Rule::none) return r;
    r.kind = Rule::attention_range;
    return r;
  }

  Rule collective_rule(const TraceEvent& e) {
    Rule r;
    const std::string c = lower(e.collective);
    const char* op = nullptr;
    if (c.find("all_reduce") != std::string::npos || c.find("allreduce") != std::string::npos)
      op = "allreduce";
    else if (c.find("reduce_scatter") != std::string::npos ||
             c.find("reducescatter") != std::string::npos)
      op = "reducescatter";
    else if (c.find("all_gather") != std::string::npos || c.find("allgather") != std::string::npos)
      op = "allgather";
    else if (c.find("all_to_all") != std::string::npos || c.find("alltoall") != std::string::npos)
      op = "alltoall";
    else if (c.find("broadcast") != std::string::npos)
      op = "broadcast";
    else if (c == "send" || c == "recv" || c.find("sendrecv") != std::string::npos)
      op = "sendrecv";
    if (!op || e.group_size < 1) return r;
    // c10's scalar type names, as record_param_comms writes them.
    static const std::map<std::string, double> sizes = {{"Float", 4},
                                                        {"Double", 8},
                                                        {"Half", 2},
                                                        {"BFloat16", 2},
                                                        {"Long", 8},
                                                        {"Int", 4},
                                                        {"Short", 2},
                                                        {"Char", 1},
                                                        {"Byte", 1},
                                                        {"Bool", 1},
                                                        {"Float8_e4m3fn", 1},
                                                        {"Float8_e5m2", 1},
                                                        {"Float8_e4m3fnuz", 1},
                                                        {"Float8_e5m2fnuz", 1}};
    const auto size = sizes.find(e.comm_dtype);
    if (size == sizes.end()) return r;  // an element type it cannot size: listed as unmapped
    const double es = size->second;
    const int64_t n = std::string(op) == "allgather" ? e.out_nelems : e.in_nelems;
    if (n <= 0) return r;
    r.kind = Rule::collective;
    SizePoint& s = r.op.size;
    s.bytes = static_cast<double>(n) * es;
    s.ranks = e.group_size;
    s.nodes = (e.group_size + o_.gpus_per_node - 1) / o_.gpus_per_node;
    r.op.table = std::string("collective/") + op;
    r.op.label = fmt::format("bytes={:.0f} ranks={} nodes={}", s.bytes, s.ranks, s.nodes);
    return r;
  }

  // Mapped operators made of other operators, whose backward is their autograd nodes': an
  // unfused attention range, and a dropout composed of bernoulli_, div and mul (PyTorch before
  // native_dropout on the CPU).
  bool composite(uint32_t i) const {
    return rules_[i].kind == Rule::attention_range ||
           (rules_[i].kind == Rule::memory && t_.events[i].name == "aten::dropout" &&
            !children_[i].empty());
  }

  // The backward of each composite operator: the autograd nodes (evaluate_function events)
  // whose sequence numbers its operators made.
  void link_backward() {
    std::unordered_map<int64_t, uint32_t> range_of;  // sequence number -> range
    for (uint32_t i = 0; i < t_.events.size(); ++i) {
      if (!composite(i)) continue;
      if (t_.events[i].parent >= 0 && root(static_cast<uint32_t>(t_.events[i].parent)) >= 0)
        continue;  // inside another mapped operator
      std::function<void(uint32_t)> walk = [&](uint32_t e) {
        for (uint32_t c : children_[e]) {
          if (t_.events[c].sequence >= 0) range_of.emplace(t_.events[c].sequence, i);
          walk(c);
        }
      };
      walk(i);
    }
    if (range_of.empty()) return;
    std::fill(root_.begin(), root_.end(), -2);
    for (uint32_t i = 0; i < t_.events.size(); ++i) {
      const TraceEvent& e = t_.events[i];
      if (e.cat != TraceCategory::cpu_op || e.sequence < 0 ||
          !starts(e.name, "autograd::engine::evaluate_function: "))
        continue;
      const auto it = range_of.find(e.sequence);
      if (it == range_of.end()) continue;
      // One backward per forward range: its first node stands for all of them.
      auto [b, fresh] = backward_of_.emplace(it->second, i);
      backward_root_[i] = b->second;
      if (fresh) {
        range_of_backward_[i] = it->second;
        Rule r = rules_[it->second];
        if (r.kind == Rule::attention_range) {
          r.kind = Rule::attention;
          r.op.attention.backward = true;
          r.op.label = point_label(r.op.attention);
        }  // a dropout's backward moves what its forward does (ops.cpp's dropout.bwd)
        rules_[i] = r;
      }
    }
  }

  // Length of the union of [start, end) intervals.
  static double covered(std::vector<std::pair<double, double>> v) {
    std::sort(v.begin(), v.end());
    double total = 0, start = 0, end = -1e300;
    for (const auto& [a, b] : v) {
      if (a > end) {
        if (end > start) total += end - start;
        start = a, end = b;
      } else {
        end = std::max(end, b);
      }
    }
    if (end > start) total += end - start;
    return total;
  }

  std::vector<StepTimes> step_times(const std::vector<TraceOp>& ops) const {
    std::vector<StepTimes> v(t_.steps.size());
    for (size_t s = 0; s < t_.steps.size(); ++s) {
      const TraceEvent& e = t_.events[t_.steps[s]];
      v[s].iteration = e.dur * 1e-6;
      if (!t_.has_kernels) {
        double self = e.dur;
        for (uint32_t c : children_[t_.steps[s]]) self -= t_.events[c].dur;
        v[s].idle = std::max(0.0, self) * 1e-6;
      }
    }
    if (t_.has_kernels) {
      std::vector<std::vector<std::pair<double, double>>> compute(v.size()), comm(v.size());
      for (uint32_t i = 0; i < t_.events.size(); ++i) {
        const TraceEvent& e = t_.events[i];
        if (e.cat != TraceCategory::kernel) continue;
        const int s = step_of(t_, i);
        if (s < 0) continue;
        (lower(e.name).find("nccl") != std::string::npos ? comm : compute)[s].push_back(
            {e.ts, e.end()});
      }
      for (size_t s = 0; s < v.size(); ++s) {
        const double busy = covered(compute[s]);
        std::vector<std::pair<double, double>> all = compute[s];
        all.insert(all.end(), comm[s].begin(), comm[s].end());
        const double any = covered(all);
        v[s].compute = busy * 1e-6;
        v[s].communication = (any - busy) * 1e-6;
        v[s].idle = std::max(0.0, v[s].iteration - any * 1e-6);
      }
      return v;
    }
    for (const TraceOp& op : ops)
      if (op.step >= 0 && starts(op.table, "collective/"))
        v[static_cast<size_t>(op.step)].communication += op.seconds;
    for (StepTimes& s : v) s.compute = std::max(0.0, s.iteration - s.idle - s.communication);
    return v;
  }

  Database database(const std::vector<TraceOp>& ops) {
    Database db;
    db.attrs = {{"backend", "torch-profiler-trace"},
                {"device_type", o_.device_type},
                {"host", "imported: " + t_.path}};
    if (!t_.writer.empty()) db.attrs["trace_writer"] = t_.writer;
    std::vector<std::pair<std::string, std::string>> order;
    std::map<std::pair<std::string, std::string>, std::vector<const TraceOp*>> runs;
    for (const TraceOp& op : ops) {
      auto& v = runs[{op.table, op.label}];
      if (v.empty()) order.push_back({op.table, op.label});
      v.push_back(&op);
    }
    size_t unresolved = 0;
    for (const auto& key : order) {
      const std::vector<const TraceOp*>& v = runs.at(key);
      std::vector<double> s;
      for (const TraceOp* op : v) s.push_back(op->seconds);
      std::sort(s.begin(), s.end());
      auto at = [&](double q) {
        return s[static_cast<size_t>(std::lround(q * static_cast<double>(s.size() - 1)))];
      };
      Timing t;
      // The time stored is the runs' mean, not their median: the runs of one key differ by where
      // they run, not by noise (a dropout's forward draws random numbers and its backward, of
      // the same bytes, does not; a micro-batch's first buffers page-fault on a CPU), and an
      // iteration is their sum. The percentiles keep the spread.
      double sum = 0;
      for (double x : s) sum += x;
      t.median_s = sum / static_cast<double>(s.size());
      if (!(t.median_s > 0)) {  // every run under the trace's clock resolution
        ++unresolved;
        continue;
      }
      t.p10_s = at(0.1);
      t.p90_s = at(0.9);
      t.repetitions = static_cast<int64_t>(s.size());
      const TraceOp& first = *v.front();
      const std::string table = key.first.substr(0, key.first.find('/'));
      const std::string name = key.first.substr(key.first.find('/') + 1);
      if (table == "gemm") {
        GemmPoint g = first.gemm;
        g.t = t;
        db.gemm[name].push_back(g);
      } else if (table == "attention") {
        AttentionPoint a = first.attention;
        a.t = t;
        db.attention[name].push_back(a);
      } else {
        SizePoint p = first.size;
        p.t = t;
        (table == "memory" ? db.memory : db.collective)[name].push_back(p);
      }
    }
    if (unresolved > 0) {
      notes_.push_back(fmt::format(
          "{} shape(s) ran in 0 us every time (under the trace's clock resolution): left out of "
          "the database",
          unresolved));
    }
    return db;
  }

  const KinetoTrace& t_;
  const ImportOptions& o_;
  std::vector<std::vector<uint32_t>> children_;
  std::vector<Rule> rules_;
  std::vector<int32_t> root_;
  std::unordered_map<uint32_t, uint32_t> backward_of_;        // range -> its first backward node
  std::unordered_map<uint32_t, uint32_t> backward_root_;      // backward node -> that first node
  std::unordered_map<uint32_t, uint32_t> range_of_backward_;  // first node -> its range
  std::vector<std::string> notes_;
  bool said_dtype_ = false;
};

}  // namespace

std::pair<std::string, std::string> measurement_key(const workload::Op& op, workload::Precision p) {
  const std::string d = workload::to_string(workload::math_precision(op, p));
  switch (op.kind) {
    case workload::OpKind::gemm:
      return {"gemm/" + d,
              point_label(GemmPoint{op.m, op.n, op.k, std::max<int64_t>(1, op.batch), {}})};
    case workload::OpKind::attention_forward:
    case workload::OpKind::attention_backward:
      return {"attention/" + d,
              point_label(AttentionPoint{op.batch,
                                         op.heads,
                                         op.seq,
                                         op.head_dim,
                                         op.causal,
                                         op.kind == workload::OpKind::attention_backward,
                                         {},
                                         op.fused})};
    case workload::OpKind::memory:
      return {std::string("memory/") + memory_kernel_of(op.name),
              fmt::format("bytes={:.0f}", op.bytes)};
    case workload::OpKind::conv:
      return {"conv/" + d, point_label(ConvPoint{op.conv, {}})};
  }
  return {"?", ""};
}

TraceImport import_trace(const KinetoTrace& t, const ImportOptions& o) {
  if (o.device_type.empty()) throw InputError("import-trace: --device-type is required");
  if (o.dtype != "fp32" && o.dtype != "bf16" && o.dtype != "fp16")
    throw InputError("--dtype: expected fp32, bf16 or fp16, got \"" + o.dtype + "\"");
  if (o.gpus_per_node < 1) {
    throw InputError("--gpus-per-node: expected 1 or more, got " + std::to_string(o.gpus_per_node));
  }
  return Importer(t, o).run();
}

std::string to_text(const TraceImport& r, size_t top) {
  std::string s;
  const double total = r.mapped_s + r.unmapped_s;
  auto pct = [&](double x) { return total > 0 ? 100 * x / total : 0.0; };
  std::map<std::string, std::pair<size_t, double>> tables;
  std::map<std::string, size_t> points;
  for (const TraceOp& op : r.ops) {
    tables[op.table].first += 1;
    tables[op.table].second += op.seconds;
  }
  auto count = [&](const auto& m, const char* kind) {
    for (const auto& [name, v] : m) points[std::string(kind) + "/" + name] = v.size();
  };
  count(r.db.gemm, "gemm");
  count(r.db.attention, "attention");
  count(r.db.memory, "memory");
  count(r.db.collective, "collective");
  s += fmt::format("{} iterations recorded", r.iteration_s.size());
  if (!r.iteration_s.empty()) {
    std::vector<double> v = r.iteration_s;
    std::sort(v.begin(), v.end());
    s += fmt::format(" (median {:.4f} s)", v[v.size() / 2]);
  }
  s += fmt::format("; {} measurements from {} operator runs\n", r.db.size(), r.ops.size());
  s += fmt::format("  {:<28} {:>7} {:>7} {:>11} {:>7}\n", "table", "points", "runs", "seconds",
                   "share");
  for (const auto& [table, v] : tables) {
    s += fmt::format("  {:<28} {:>7} {:>7} {:>11.6f} {:>6.1f}%\n", table, points[table], v.first,
                     v.second, pct(v.second));
  }
  s += fmt::format("  {:<28} {:>7} {:>7} {:>11.6f} {:>6.1f}%\n", "mapped", "", "", r.mapped_s,
                   pct(r.mapped_s));
  s += fmt::format("unmapped: {:.6f} s ({:.1f}%) in {} kinds of operator, not measurements\n",
                   r.unmapped_s, pct(r.unmapped_s), r.unmapped.size());
  for (size_t i = 0; i < r.unmapped.size() && i < top; ++i) {
    const UnmappedOp& u = r.unmapped[i];
    s += fmt::format("  {:<60} {:>6} calls {:>11.6f} s {:>6.1f}%\n",
                     u.name.size() > 60 ? u.name.substr(0, 57) + "..." : u.name, u.calls, u.seconds,
                     pct(u.seconds));
  }
  if (r.unmapped.size() > top) s += fmt::format("  ... and {} more\n", r.unmapped.size() - top);
  for (const std::string& n : r.notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace hetsim::calibrate
