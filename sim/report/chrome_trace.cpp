// Chrome trace writer; see chrome_trace.h.
#include "sim/report/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "sim/core/error.h"

namespace hetsim::report {

namespace {

// `what` names the items ("GPUs"), `where` what holds `limit` of them ("the cluster has 32
// GPUs"); an item beyond the limit is an error, not an empty trace.
std::vector<bool> parse_set(const std::string& text, size_t limit, const char* flag,
                            const std::string& what, const std::string& where) {
  std::vector<bool> out(limit, false);
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    long lo = -1, hi = -1;
    try {
      size_t used = 0;
      lo = std::stol(item.substr(0, dash), &used);
      if (used != std::min(dash, item.size())) lo = -1;
      if (dash != std::string::npos) {
        hi = std::stol(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) lo = -1;
      } else {
        hi = lo;
      }
    } catch (const std::exception&) {
    }
    if (lo < 0 || hi < lo) {
      throw InputError(std::string(flag) + " " + text + ": expected a list such as 0-3,8");
    }
    if (static_cast<size_t>(hi) >= limit) {
      throw InputError(fmt::format("{} {}: {} {} out of range ({}: valid {})", flag, text, what,
                                   item, where, limit == 1 ? "0" : fmt::format("0-{}", limit - 1)));
    }
    for (long v = lo; v <= hi; ++v) out[v] = true;
    pos = comma + 1;
  }
  return out;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

const char* pass_name(workload::Pass p) {
  switch (p) {
    case workload::Pass::forward:
      return "F";
    case workload::Pass::backward:
      return "B";
    case workload::Pass::recompute:
      return "R";
    case workload::Pass::other:
      return "";
  }
  return "";
}

}  // namespace

void check_trace_path(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw InputError(option + " " + path + ": is a directory (expected a file name, e.g. " +
                     (fs::path(path) / "trace.json").string() + ")");
  }
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec)) {
    throw InputError(option + " " + path + ": folder " + folder.string() + " does not exist");
  }
}

uint32_t most_micro_batches(const workload::Plan& plan) {
  int n = 0;
  for (const auto& r : plan.replicas) n = std::max(n, r.micro_batches);
  return static_cast<uint32_t>(n);
}

TraceFilter make_trace_filter(const platform::Cluster& c, const std::string& devices,
                              const std::string& micro_batches, uint32_t micro_batch_count) {
  TraceFilter f;
  if (!devices.empty()) {
    f.devices = parse_set(devices, c.gpu_count(), "--trace-devices", "GPU(s)",
                          fmt::format("the cluster has {} GPUs", c.gpu_count()));
  } else if (c.gpu_count() > 64) {
    f.devices.assign(c.gpu_count(), false);
    for (uint32_t g = 0; g < c.node(0).gpu_count; ++g) f.devices[c.node(0).first_gpu + g] = true;
  }
  if (!micro_batches.empty()) {
    f.micro_batches =
        parse_set(micro_batches, micro_batch_count, "--trace-micro-batches", "micro-batch(es)",
                  fmt::format("the plan has {} micro-batches per replica", micro_batch_count));
  }
  return f;
}

bool ChromeTrace::keep_mb(uint32_t mb) const {
  return filter_.micro_batches.empty() ||
         (mb < filter_.micro_batches.size() && filter_.micro_batches[mb]);
}

void ChromeTrace::on_compute(const workload::TrainingJob&, uint32_t copy, const workload::Task& t,
                             Time start, Time end) {
  if (t.pass != workload::Pass::other && !keep_mb(t.micro_batch)) return;
  records_.push_back(Record{0, copy, 0, t, start, end, {}});
}

void ChromeTrace::on_collective(const workload::TrainingJob&, uint32_t copy, const char* stream,
                                const std::string& name, const workload::Task& t, Time start,
                                Time end) {
  // Tensor- and expert-parallel collectives belong to a micro-batch; data-parallel ones do not.
  const uint8_t kind = stream[0] == 't' ? 1 : stream[0] == 'e' || stream[0] == 'c' ? 4 : 2;
  if (kind != 2 && !keep_mb(t.micro_batch)) return;
  records_.push_back(Record{kind, copy, 0, t, start, end, name});
}

void ChromeTrace::on_transfer(const workload::TrainingJob&, uint32_t from, uint32_t to,
                              const workload::Task& t, Time start, Time end) {
  if (!keep_mb(t.micro_batch)) return;
  records_.push_back(Record{3, from, to, t, start, end, {}});
}

void ChromeTrace::write(std::ostream& out, const workload::TrainingJob& job) {
  const platform::Cluster& c = *job.cluster;
  auto keep_dev = [&](platform::GpuId d) { return filter_.devices.empty() || filter_.devices[d]; };
  auto us = [](Time t) { return fmt::format("{:.6f}", t.ps() * 1e-6); };  // exact: ps
  bool first = true;
  auto emit = [&](const std::string& e) {
    out << (first ? "\n" : ",\n") << e;
    first = false;
    ++written_;
  };
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  // Names: a process per node, a thread per GPU stream.
  // A thread per stream: compute, tensor-parallel, data-parallel, and expert-parallel where
  // the plan has it (tid 4 x local GPU + stream; transfers start on the compute thread).
  const char* streams[] = {"compute", "tensor-parallel", "data-parallel",
                           job.plan->expert_parallel > 1 ? "expert-parallel" : "context-parallel"};
  const int stream_count = job.plan->expert_parallel > 1 || job.plan->context_parallel > 1 ? 4 : 3;
  std::set<uint32_t> nodes;
  for (platform::GpuId d = 0; d < c.gpu_count(); ++d) {
    if (!keep_dev(d)) continue;
    const uint32_t node = c.gpu(d).node;
    if (nodes.insert(node).second) {
      emit(fmt::format(
          R"j({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"node{} ({})"}}}})j", node,
          node, c.node_type(node).name));
    }
    for (int s = 0; s < stream_count; ++s) {
      emit(fmt::format(
          R"j({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"gpu{} {}"}}}})j",
          node, c.gpu(d).local * 4 + s, c.gpu(d).local, streams[s]));
    }
  }
  uint64_t flow_id = 0;
  for (const Record& r : records_) {
    const workload::StageCopy& g = job.copies[r.copy];
    const std::string where = r.task.layer >= 0 ? fmt::format(" L{}", r.task.layer) : std::string();
    const std::string tag =
        r.task.pass == workload::Pass::other
            ? std::string()
            : fmt::format("{}{} mb{}", where, pass_name(r.task.pass), r.task.micro_batch);
    if (r.kind == 3) {
      // A transfer: async slice from sender to receiver, linked by a flow arrow.
      const workload::StageCopy& dst = job.copies[r.to];
      const platform::GpuId a = g.devices.front(), b = dst.devices.front();
      if (!keep_dev(a) && !keep_dev(b)) continue;
      const std::string name =
          fmt::format("send {} mb{}", r.task.pass == workload::Pass::backward ? "grad" : "act",
                      r.task.micro_batch);
      ++flow_id;
      emit(fmt::format(
          R"j({{"ph":"s","id":{},"name":"{}","cat":"pipeline","ts":{},"pid":{},"tid":{}}})j",
          flow_id, name, us(r.start), c.gpu(a).node, c.gpu(a).local * 4));
      emit(fmt::format(
          R"j({{"ph":"f","bp":"e","id":{},"name":"{}","cat":"pipeline","ts":{},"pid":{},"tid":{}}})j",
          flow_id, name, us(r.end), c.gpu(b).node, c.gpu(b).local * 4));
      continue;
    }
    for (platform::GpuId d : g.devices) {
      if (!keep_dev(d)) continue;
      const uint32_t pid = c.gpu(d).node;
      const uint32_t tid = c.gpu(d).local * 4 + (r.kind == 4 ? 3 : r.kind);
      if (r.kind != 0) {
        emit(fmt::format(
            R"j({{"ph":"X","name":"{}{}","cat":"comm","ts":{},"dur":{},"pid":{},"tid":{}}})j",
            escape(r.name), tag, us(r.start), us(r.end - r.start), pid, tid));
        continue;
      }
      Time t = r.start;
      if (g.segments[r.task.index].ops.empty()) {
        // The framework's host time (training_job.cpp: CopyBuilder::host).
        emit(fmt::format(
            R"j({{"ph":"X","name":"framework host{}","cat":"host","ts":{},"dur":{},"pid":{},"tid":{}}})j",
            tag, us(r.start), us(r.end - r.start), pid, tid));
      }
      for (const auto& [op, dur] : g.segments[r.task.index].ops) {
        emit(fmt::format(
            R"j({{"ph":"X","name":"{}{}","cat":"compute","ts":{},"dur":{},"pid":{},"tid":{}}})j",
            escape(g.ops[op].name), tag, us(t), us(dur), pid, tid));
        t += dur;
      }
    }
  }
  out << "\n]}\n";
}

}  // namespace hetsim::report
