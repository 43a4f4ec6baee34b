// Reading a PyTorch profiler (Kineto) trace; see kineto_trace.h.
#include "calibrate/kineto_trace.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "sim/core/error.h"

namespace hetsim::calibrate {

namespace {

using Json = nlohmann::json;

// The whole file, inflated where it is gzip-compressed (zlib reads plain files as they are).
std::string read_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw InputError(path + ": cannot open the trace");
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(f, &code);
      gzclose(f);
      throw InputError(path + ": cannot read the trace (" + why + ")");
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return text;
}

TraceCategory category(const std::string& cat) {
  if (cat == "cpu_op" || cat == "Operator" || cat == "operator") return TraceCategory::cpu_op;
  // Ranges the user or PyTorch opened on the host. Not gpu_user_annotation (the same ranges
  // drawn again on the GPU's timeline) nor python_function (with_stack's Python frames, module
  // names among them: "nn.Module: CausalSelfAttention_0" would read as an attention range).
  if (cat == "user_annotation") return TraceCategory::annotation;
  if (cat == "kernel" || cat == "Kernel") return TraceCategory::kernel;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime")
    return TraceCategory::runtime;
  if (cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Memcpy" || cat == "Memset")
    return TraceCategory::gpu_other;
  return TraceCategory::other;
}

std::string id_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return fmt::format("{}", v.get<double>());
  return "";
}

class EventReader {
 public:
  EventReader(const std::string& path, size_t index, const Json& e)
      : path_(path), index_(index), e_(e) {}

  std::string where() const {
    const auto n = e_.find("name");
    return fmt::format(
        "{}: traceEvents[{}]{}", path_, index_,
        n != e_.end() && n->is_string() ? " (\"" + n->get<std::string>() + "\")" : "");
  }
  double number(const char* field) const {
    const auto it = e_.find(field);
    if (it == e_.end() || !it->is_number())
      throw InputError(where() + ": field \"" + field + "\": expected a number");
    return it->get<double>();
  }
  int64_t arg_int(const Json& args, const char* field) const {
    const auto it = args.find(field);
    if (it == args.end() || it->is_null()) return -1;
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_number()) {
      const double d = it->get<double>();
      if (!(std::abs(d) < 9e18))
        throw InputError(where() + ": args \"" + field + "\": expected a whole number");
      return static_cast<int64_t>(d);
    }
    throw InputError(where() + ": args \"" + field + "\": expected a whole number");
  }
  std::vector<TraceInput> inputs(const Json& args) const {
    std::vector<TraceInput> v;
    const auto dims = args.find("Input Dims");
    if (dims == args.end()) return v;
    if (!dims->is_array()) throw InputError(where() + ": args \"Input Dims\": expected a list");
    for (const Json& d : *dims) {
      TraceInput in;
      if (!d.is_array()) throw InputError(where() + ": args \"Input Dims\": expected lists");
      bool list = !d.empty() && d.front().is_array();
      if (list) {
        for (const Json& shape : d) in.numel += numel(shape);
      } else if (!d.empty()) {
        in.numel = numel(d);
        for (const Json& x : d) in.shape.push_back(x.get<int64_t>());
      }
      in.tensor = !d.empty();
      v.push_back(std::move(in));
    }
    const auto types = args.find("Input type");
    if (types != args.end() && types->is_array()) {
      for (size_t i = 0; i < v.size() && i < types->size(); ++i)
        if ((*types)[i].is_string()) v[i].type = (*types)[i].get<std::string>();
    }
    return v;
  }

 private:
  double numel(const Json& shape) const {
    if (!shape.is_array()) throw InputError(where() + ": args \"Input Dims\": expected a shape");
    double n = 1;
    for (const Json& x : shape) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw InputError(where() + ": args \"Input Dims\": expected sizes of 0 or more");
      n *= static_cast<double>(x.get<int64_t>());
    }
    return n;
  }
  const std::string& path_;
  size_t index_;
  const Json& e_;
};

// Each CPU-side event's innermost enclosing event on its (pid, tid).
void link_threads(KinetoTrace& t) {
  std::map<std::pair<std::string, std::string>, std::vector<uint32_t>> threads;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const TraceCategory c = t.events[i].cat;
    if (c == TraceCategory::cpu_op || c == TraceCategory::annotation || c == TraceCategory::runtime)
      threads[{t.events[i].pid, t.events[i].tid}].push_back(i);
  }
  for (auto& [_, ids] : threads) {
    std::stable_sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
      const TraceEvent &x = t.events[a], &y = t.events[b];
      if (x.ts != y.ts) return x.ts < y.ts;
      return x.dur > y.dur;  // the enclosing one first
    });
    // On one thread events nest or follow each other: one that starts before the open one ends
    // is inside it. One that ends after it (the microsecond rounding of start and end apart, in
    // torch_profile_trace.py's layout of the legacy profiler) is clipped to it, so that no
    // microsecond is counted twice.
    std::vector<uint32_t> open;
    for (uint32_t i : ids) {
      TraceEvent& e = t.events[i];
      while (!open.empty() && e.ts >= t.events[open.back()].end()) open.pop_back();
      e.parent = open.empty() ? -1 : static_cast<int32_t>(open.back());
      if (!open.empty()) e.dur = std::min(e.dur, t.events[open.back()].end() - e.ts);
      open.push_back(i);
    }
  }
  // Kernels: their launch, by correlation id.
  std::unordered_map<int64_t, uint32_t> launch;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    if (e.cat == TraceCategory::runtime && e.correlation >= 0) launch.emplace(e.correlation, i);
  }
  for (TraceEvent& e : t.events) {
    if (e.cat != TraceCategory::kernel && e.cat != TraceCategory::gpu_other) continue;
    const auto it = launch.find(e.correlation);
    if (it != launch.end()) e.parent = static_cast<int32_t>(it->second);
  }
}

}  // namespace

KinetoTrace parse_kineto_trace(const std::string& text, const std::string& path) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {  // malformed, or a number out of range
    throw InputError(path + ": not JSON (" + e.what() + ")");
  }
  if (j.is_array()) {
    throw InputError(path +
                     ": a legacy profiler export (a bare list of events, without \"cat\" or "
                     "\"Input Dims\"): PyTorch was built without Kineto; write the trace with "
                     "calibrate/tools/torch_profile_trace.py, which keeps the shapes");
  }
  const auto list = j.find("traceEvents");
  if (!j.is_object() || list == j.end() || !list->is_array())
    throw InputError(path + ": no \"traceEvents\" list: not a PyTorch profiler (Kineto) trace");
  KinetoTrace t;
  t.path = path;
  if (const auto w = j.find("hetsim_writer"); w != j.end() && w->is_string()) t.writer = *w;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& e = (*list)[i];
    if (!e.is_object())
      throw InputError(fmt::format("{}: traceEvents[{}]: expected an object", path, i));
    const auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string() || *ph != "X") continue;  // only complete events
    const EventReader r(path, i, e);
    TraceEvent ev;
    const auto name = e.find("name");
    if (name == e.end() || !name->is_string())
      throw InputError(r.where() + ": field \"name\": expected a string");
    ev.name = *name;
    const auto cat = e.find("cat");
    const bool has_cat = cat != e.end() && cat->is_string();
    ev.cat = has_cat ? category(*cat) : TraceCategory::other;
    ev.ts = r.number("ts");
    ev.dur = r.number("dur");
    if (!(ev.dur >= 0) || !std::isfinite(ev.ts) || !std::isfinite(ev.dur))
      throw InputError(r.where() + ": field \"dur\": expected a finite time of 0 or more");
    if (const auto p = e.find("pid"); p != e.end()) ev.pid = id_text(*p);
    if (const auto p = e.find("tid"); p != e.end()) ev.tid = id_text(*p);
    if (const auto a = e.find("args"); a != e.end() && a->is_object()) {
      ev.inputs = r.inputs(*a);
      ev.sequence = r.arg_int(*a, "Sequence number");
      ev.correlation = r.arg_int(*a, "correlation");
      ev.in_nelems = r.arg_int(*a, "In msg nelems");
      ev.out_nelems = r.arg_int(*a, "Out msg nelems");
      ev.group_size = r.arg_int(*a, "Group size");
      if (const auto c = a->find("Collective name"); c != a->end() && c->is_string())
        ev.collective = *c;
      if (const auto d = a->find("dtype"); d != a->end() && d->is_string()) ev.comm_dtype = *d;
    }
    // A writer without categories: its ProfilerStep ranges are the iterations.
    if (!has_cat && ev.name.rfind("ProfilerStep#", 0) == 0) ev.cat = TraceCategory::annotation;
    if (ev.cat == TraceCategory::kernel) t.has_kernels = true;
    t.events.push_back(std::move(ev));
  }
  link_threads(t);
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    if (e.cat == TraceCategory::annotation && e.name.rfind("ProfilerStep#", 0) == 0)
      t.steps.push_back(i);
  }
  std::sort(t.steps.begin(), t.steps.end(),
            [&](uint32_t a, uint32_t b) { return t.events[a].ts < t.events[b].ts; });
  return t;
}

KinetoTrace read_kineto_trace(const std::string& path) {
  return parse_kineto_trace(read_file(path), path);
}

int step_of(const KinetoTrace& t, uint32_t e) {
  // A GPU kernel belongs to the step that launched it.
  uint32_t at = e;
  if ((t.events[e].cat == TraceCategory::kernel || t.events[e].cat == TraceCategory::gpu_other) &&
      t.events[e].parent >= 0)
    at = static_cast<uint32_t>(t.events[e].parent);
  const double ts = t.events[at].ts;
  // The latest-starting step that contains it (steps of several threads may overlap).
  auto it = std::upper_bound(t.steps.begin(), t.steps.end(), ts,
                             [&](double x, uint32_t s) { return x < t.events[s].ts; });
  while (it != t.steps.begin()) {
    --it;
    if (ts <= t.events[*it].end()) return static_cast<int>(it - t.steps.begin());
  }
  return -1;
}

}  // namespace hetsim::calibrate
