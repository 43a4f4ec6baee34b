// Interpolation over calibration tables; see measured_cost_model.h.
#include "calibrate/measured_cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace hetsim::calibrate {

namespace {

using workload::Op;
using workload::OpKind;

// Monotone piecewise-cubic (Fritsch-Carlson, "PCHIP") interpolation between nodes xs[i] and
// xs[i + 1] at q, using the nodes around them where they exist. Exact at the nodes, monotone
// where the data is, no overshoot; it follows the curvature a straight line in log space misses
// (a rate that saturates with size: linear interpolation would under-predict it between nodes).
double pchip(const std::vector<double>& xs, const std::vector<double>& ys, size_t i, double q) {
  const size_t n = xs.size();
  if (n < 2) return ys.front();
  auto secant = [&](size_t k) { return (ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k]); };
  // The slope at node k: zero at a local extremum, a weighted harmonic mean of the neighbouring
  // secants inside, the adjacent secant at an end.
  auto slope = [&](size_t k) {
    if (k == 0) return secant(0);
    if (k == n - 1) return secant(n - 2);
    const double d0 = secant(k - 1), d1 = secant(k);
    if (d0 * d1 <= 0) return 0.0;
    const double h0 = xs[k] - xs[k - 1], h1 = xs[k + 1] - xs[k];
    const double w0 = 2 * h1 + h0, w1 = h1 + 2 * h0;
    return (w0 + w1) / (w0 / d0 + w1 / d1);
  };
  const double h = xs[i + 1] - xs[i];
  const double t = (q - xs[i]) / h;
  if (t <= 0) return ys[i];
  if (t >= 1) return ys[i + 1];
  const double t2 = t * t, t3 = t2 * t;
  return (2 * t3 - 3 * t2 + 1) * ys[i] + (t3 - 2 * t2 + t) * h * slope(i) +
         (-2 * t3 + 3 * t2) * ys[i + 1] + (t3 - t2) * h * slope(i + 1);
}

// Interpolation of log(time) over log(bytes) (monotone cubic, above); outside the table, time
// scales with bytes from the nearest edge (bandwidth-bound), so the fallback meets the table there.
struct SizeTable {
  std::vector<double> xs, ys;  // log bytes (sorted, distinct), log seconds (median of repeats)
  void build(const std::vector<SizePoint>& v, int64_t ranks, int64_t nodes) {
    std::map<double, std::vector<double>> by;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].ranks != ranks || v[i].nodes != nodes || v[i].bytes <= 0) continue;
      by[std::log(v[i].bytes)].push_back(std::log(v[i].t.median_s));
    }
    for (auto& [x, same] : by) {
      std::sort(same.begin(), same.end());
      xs.push_back(x);
      ys.push_back(same[same.size() / 2]);
    }
  }
  std::optional<double> seconds(double bytes) const {
    if (xs.empty() || bytes <= 0) return std::nullopt;
    const double x = std::log(bytes);
    if (x <= xs.front()) return std::exp(ys.front()) * bytes / std::exp(xs.front());
    if (x >= xs.back()) return std::exp(ys.back()) * bytes / std::exp(xs.back());
    const size_t hi = static_cast<size_t>(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
    return std::exp(pchip(xs, ys, hi - 1, x));
  }
};

}  // namespace

const char* memory_kernel_of(const std::string& name) {
  // A MoE layer's expert and shared-expert activations are the dense FFN's kernels.
  std::string op = name;
  for (const char* prefix : {"experts.", "shared."})
    if (op.rfind(prefix, 0) == 0) op = op.substr(std::char_traits<char>::length(prefix));
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  auto contains = [&](const char* p) { return op.find(p) != std::string::npos; };
  // Eager PyTorch's separate kernels (ops.cpp, LayerShape::eager): casts are copies; a dropout,
  // a residual add, a gradient summed or accumulated are elementwise adds of two tensors.
  if (contains(".cast")) return "copy";
  if (contains(".dropout")) return "dropout";
  if (contains(".add") || contains(".sum") || contains(".grad_accumulate")) return "residual_add";
  if (starts("router.topk")) return "softmax";
  if (starts("norm") || starts("final_norm")) return "layernorm";
  if (starts("dropout_residual")) return "residual_add";
  if (starts("gelu")) return "gelu";
  if (starts("swiglu")) return "swiglu";
  if (starts("cross_entropy")) return "softmax";
  if (starts("optimizer")) return "adam";
  return "copy";  // embedding lookups, rotary, positions: reads and writes
}

namespace {

std::string gemm_dtype(const Database& db, workload::Precision p) {
  auto has = [&](const char* d) { return db.gemm.count(d) > 0; };
  switch (p) {
    case workload::Precision::fp32:
      return has("tf32") ? "tf32" : "fp32";
    case workload::Precision::fp16:
      return "fp16";
    case workload::Precision::bf16:
      return has("bf16") ? "bf16" : "fp16";
    case workload::Precision::fp8:
      return has("fp8") ? "fp8" : (has("bf16") ? "bf16" : "fp16");
  }
  return "bf16";
}

// The convolution table for a precision: the first of its types the database has (fp32 as TF32
// where measured so), else the first's name for the report.
std::string conv_dtype(const Database& db, workload::Precision p) {
  std::vector<const char*> order;
  switch (p) {
    case workload::Precision::fp32:
      order = {"tf32", "fp32"};
      break;
    case workload::Precision::fp16:
      order = {"fp16", "bf16"};
      break;
    case workload::Precision::bf16:
      order = {"bf16", "fp16"};
      break;
    case workload::Precision::fp8:
      order = {"fp8", "bf16", "fp16"};
      break;
  }
  for (const char* d : order)
    if (db.conv.count(d)) return d;
  return order.front();
}

bool same_conv(const workload::ConvShape& a, const workload::ConvShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r &&
         a.s == b.s && a.stride == b.stride && a.pad_h == b.pad_h && a.pad_w == b.pad_w &&
         a.pass == b.pass;
}

}  // namespace

struct MeasuredCostModel::Tables {
  // GEMM: log(rate / shape efficiency) on the measured (m, n, k) points of batch 1.
  struct Gemm {
    std::vector<double> ms, ns, ks;                                 // axes (log)
    std::map<std::tuple<int64_t, int64_t, int64_t>, double> value;  // log normalised rate
  };
  // dtype -> (m, n, k, batch) -> seconds: every measured point, whatever its table.
  std::map<std::string, std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, double>>
      gemm_exact;
  // (dtype, GPU type, batch, aligned): units differ by type; batched GEMMs (attention's) have
  // their own; so do shapes whose leading dimensions break cuBLAS's 16-byte alignment (below)
  std::map<std::tuple<std::string, std::string, int64_t, bool>, Gemm> gemm;
  // (name, ranks, nodes)
  std::map<std::tuple<std::string, int64_t, int64_t>, SizeTable> memory, collective, copy;
};

namespace {

// Tensor-product monotone cubic in log space over the measured grid around (m, n, k): along k,
// then n, then m, on up to four nodes per axis (the bracketing pair and one beyond each side).
// A node that was not measured drops out of its line; a line left without nodes on both sides
// of the query drops out of the next axis. nullopt when nothing brackets the query: the caller
// falls back to trilinear over the corners.
std::optional<double> tensor_pchip(const MeasuredCostModel::Tables::Gemm& g, double m, double n,
                                   double k) {
  auto window = [](const std::vector<double>& axis, double v) {
    auto hi = std::lower_bound(axis.begin(), axis.end(), v);
    size_t i = static_cast<size_t>(hi - axis.begin());
    if (i == axis.size()) i = axis.size() - 1;
    if (i > 0 && axis[i] != v) --i;  // the left node of the bracket
    return std::make_pair(i > 0 ? i - 1 : 0, std::min(axis.size() - 1, i + 2));
  };
  // The value at log(v) from the nodes (log x, y) of one line, if they bracket it.
  auto along = [](const std::vector<double>& xs, const std::vector<double>& ys,
                  double v) -> std::optional<double> {
    const double q = std::log(v);
    if (xs.empty() || q < xs.front() - 1e-12 || q > xs.back() + 1e-12) return std::nullopt;
    if (xs.size() == 1) return ys.front();
    size_t i = static_cast<size_t>(std::upper_bound(xs.begin(), xs.end(), q) - xs.begin());
    i = std::clamp<size_t>(i, 1, xs.size() - 1) - 1;
    return pchip(xs, ys, i, q);
  };
  const auto [m_from, m_to] = window(g.ms, m);
  const auto [n_from, n_to] = window(g.ns, n);
  const auto [k_from, k_to] = window(g.ks, k);
  std::vector<double> mx, my;
  for (size_t a = m_from; a <= m_to; ++a) {
    std::vector<double> nx, ny;
    for (size_t b = n_from; b <= n_to; ++b) {
      std::vector<double> kx, ky;
      for (size_t c = k_from; c <= k_to; ++c) {
        auto v = g.value.find({static_cast<int64_t>(g.ms[a]), static_cast<int64_t>(g.ns[b]),
                               static_cast<int64_t>(g.ks[c])});
        if (v != g.value.end()) kx.push_back(std::log(g.ks[c])), ky.push_back(v->second);
      }
      if (auto y = along(kx, ky, k)) nx.push_back(std::log(g.ns[b])), ny.push_back(*y);
    }
    if (auto y = along(nx, ny, n)) mx.push_back(std::log(g.ms[a])), my.push_back(*y);
  }
  return along(mx, my, m);
}

}  // namespace

MeasuredCostModel::MeasuredCostModel(Database db, workload::DatasheetCostModel datasheet)
    : db_(std::move(db)), datasheet_(std::move(datasheet)), tables_(std::make_unique<Tables>()) {
  const auto& gpus = config::builtin_gpus();
  const auto it = gpus.find(db_.device_type());
  cpu_ = it != gpus.end() && it->second.architecture == "cpu";
}

MeasuredCostModel::~MeasuredCostModel() = default;

namespace {

// A GEMM table's element type: its precision for the datasheet and its bytes per element.
workload::Precision dtype_precision(const std::string& dtype) {
  if (dtype == "fp8") return workload::Precision::fp8;
  if (dtype == "fp16") return workload::Precision::fp16;
  if (dtype == "tf32" || dtype == "fp32") return workload::Precision::fp32;
  return workload::Precision::bf16;
}

double dtype_bytes(const std::string& dtype) {
  return dtype == "fp8" ? 1 : dtype == "tf32" || dtype == "fp32" ? 4 : 2;
}

// Whether a GEMM's leading dimensions are multiples of 16 bytes in the calibration's "TN"
// layout (A and B stored with leading dimension k, C with m). cuBLAS's tensor-core kernels need
// that alignment; without it they fall back to far slower ones (on the H200, k = 50257 ran at
// 110-170 TFLOP/s where its aligned neighbours ran at 650-800), so such shapes form their own
// table: one cannot stand for the other's neighbours. n, the stored matrices' column count,
// does not matter (n = 50257 measured at the aligned rate).
bool gemm_aligned(int64_t m, int64_t k, const std::string& dtype) {
  const int64_t in = static_cast<int64_t>(dtype_bytes(dtype));
  const int64_t out = dtype == "tf32" || dtype == "fp32" ? 4 : 2;  // fp8 writes bf16
  return (k * in) % 16 == 0 && (m * out) % 16 == 0;
}

Op gemm_op(int64_t m, int64_t n, int64_t k, int64_t batch, const std::string& dtype) {
  Op op;
  op.kind = OpKind::gemm;
  op.m = m, op.n = n, op.k = k, op.batch = batch;
  op.flops = 2.0 * m * n * k * std::max<int64_t>(1, batch);
  op.bytes = dtype_bytes(dtype) * (double(m) * k + double(k) * n + double(m) * n) *
             std::max<int64_t>(1, batch);
  return op;
}

}  // namespace

double MeasuredCostModel::gemm_reference(const Op& op, const config::GpuProfile& gpu,
                                         const std::string& dtype) const {
  // A CPU's BLAS has no tiles or waves: its table holds rates (FLOPs per second).
  if (gpu.architecture == "cpu") return op.flops;
  // A GPU's: the datasheet kernel time of the shape (roofline with tile and wave quantisation;
  // no launch gap, which event-timed kernels do not contain).
  return datasheet_.duration(op, gpu, dtype_precision(dtype)).seconds() -
         datasheet_.efficiency().kernel_overhead.seconds();
}

std::optional<double> MeasuredCostModel::predict_gemm(const std::string& dtype, const GemmPoint& q,
                                                      const config::GpuProfile& gpu) const {
  auto it = db_.gemm.find(dtype);
  if (it == db_.gemm.end() || it->second.empty()) return std::nullopt;
  auto& tables = tables_->gemm;
  // The points of the query's batch count where there are any (attention's batched GEMMs),
  // else the plain GEMMs, whose factor then carries the reference's batch dependence.
  const int64_t want_batch = std::max<int64_t>(1, q.batch);
  const bool batched_table =
      want_batch > 1 && std::any_of(it->second.begin(), it->second.end(),
                                    [&](const GemmPoint& p) { return p.batch == want_batch; });
  const int64_t table_batch = batched_table ? want_batch : 1;
  auto [ex, fresh] = tables_->gemm_exact.try_emplace(dtype);
  if (fresh) {
    for (const GemmPoint& p : it->second) ex->second[{p.m, p.n, p.k, p.batch}] = p.t.median_s;
  }
  if (auto e = ex->second.find({q.m, q.n, q.k, q.batch}); e != ex->second.end()) return e->second;
  // The table of the query's alignment class where it has points, else the other class's.
  auto table_of = [&](bool aligned) -> const Tables::Gemm& {
    const auto table_key = std::make_tuple(dtype, gpu.name, table_batch, aligned);
    auto tit = tables.find(table_key);
    if (tit != tables.end()) return tit->second;
    Tables::Gemm g;
    std::vector<int64_t> ms, ns, ks;
    for (const GemmPoint& p : it->second) {
      if (p.batch != table_batch || gemm_aligned(p.m, p.k, dtype) != aligned) continue;
      // log(reference / time): a CPU's log rate, a GPU's log of datasheet time over measured, a
      // correction factor that varies slowly where the raw rate steps (tiles, waves, the
      // compute/memory crossover).
      g.value[{p.m, p.n, p.k}] = std::log(
          gemm_reference(gemm_op(p.m, p.n, p.k, table_batch, dtype), gpu, dtype) / p.t.median_s);
      ms.push_back(p.m), ns.push_back(p.n), ks.push_back(p.k);
    }
    for (auto* axis : {&ms, &ns, &ks}) {
      std::sort(axis->begin(), axis->end());
      axis->erase(std::unique(axis->begin(), axis->end()), axis->end());
    }
    for (int64_t v : ms) g.ms.push_back(double(v));
    for (int64_t v : ns) g.ns.push_back(double(v));
    for (int64_t v : ks) g.ks.push_back(double(v));
    return tables.emplace(table_key, std::move(g)).first->second;
  };
  const bool want_aligned = gemm_aligned(q.m, q.k, dtype);
  const Tables::Gemm* chosen = &table_of(want_aligned);
  if (chosen->value.empty()) chosen = &table_of(!want_aligned);
  const Tables::Gemm& g = *chosen;
  if (g.value.empty()) return std::nullopt;
  // Clamp to the table, interpolate there, then carry the datasheet's shape dependence out.
  auto clamp = [](const std::vector<double>& axis, double v) {
    return std::clamp(v, axis.front(), axis.back());
  };
  const double cm = clamp(g.ms, double(q.m)), cn = clamp(g.ns, double(q.n)),
               ck = clamp(g.ks, double(q.k));
  // Bracketing sizes on each axis and trilinear weights in log space; missing corners drop out.
  auto bracket = [](const std::vector<double>& axis, double v) {
    auto hi = std::lower_bound(axis.begin(), axis.end(), v);
    if (hi == axis.end()) hi = axis.end() - 1;
    auto lo = hi == axis.begin() || *hi == v ? hi : hi - 1;
    const double w =
        *hi == *lo ? 0.0 : (std::log(v) - std::log(*lo)) / (std::log(*hi) - std::log(*lo));
    return std::make_tuple(static_cast<int64_t>(*lo), static_cast<int64_t>(*hi), w);
  };
  const auto [m0, m1, wm] = bracket(g.ms, cm);
  const auto [n0, n1, wn] = bracket(g.ns, cn);
  const auto [k0, k1, wk] = bracket(g.ks, ck);
  double log_factor = 0;
  if (auto cubic = tensor_pchip(g, cm, cn, ck)) {
    log_factor = *cubic;
  } else {
    // Trilinear in log space over the bracketing corners that were measured.
    double sum = 0, wsum = 0;
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        for (int c = 0; c < 2; ++c) {
          const double w = (a ? wm : 1 - wm) * (b ? wn : 1 - wn) * (c ? wk : 1 - wk);
          if (w <= 0) continue;
          auto v = g.value.find({a ? m1 : m0, b ? n1 : n0, c ? k1 : k0});
          if (v == g.value.end()) continue;
          sum += w * v->second;
          wsum += w;
        }
      }
    }
    if (wsum > 0) {
      log_factor = sum / wsum;
    } else {
      // No corner measured: the nearest point in log distance.
      double best = 1e300;
      for (const auto& [key, v] : g.value) {
        const double d = std::pow(std::log(std::get<0>(key) / cm), 2) +
                         std::pow(std::log(std::get<1>(key) / cn), 2) +
                         std::pow(std::log(std::get<2>(key) / ck), 2);
        if (d < best) best = d, log_factor = v;
      }
    }
  }
  // Inside the table, the reference of the shape over the interpolated factor; beyond it, the
  // factor at the nearest edge carries the reference's shape dependence out (continuous there).
  return gemm_reference(gemm_op(q.m, q.n, q.k, q.batch, dtype), gpu, dtype) / std::exp(log_factor);
}

std::optional<double> MeasuredCostModel::predict_size(const std::string& kind,
                                                      const std::string& name,
                                                      const SizePoint& q) const {
  const auto& from = kind == "memory"       ? db_.memory
                     : kind == "collective" ? db_.collective
                                            : db_.copy;
  auto& tables = kind == "memory"       ? tables_->memory
                 : kind == "collective" ? tables_->collective
                                        : tables_->copy;
  const auto key = std::make_tuple(name, q.ranks, q.nodes);
  auto it = tables.find(key);
  if (it == tables.end()) {
    auto src = from.find(name);
    if (src == from.end()) return std::nullopt;
    SizeTable t;
    t.build(src->second, q.ranks, q.nodes);
    it = tables.emplace(key, std::move(t)).first;
  }
  return it->second.seconds(q.bytes);
}

namespace {

// The attention kernel of a point, for its reference time: its FLOPs (as the workload counts
// them) and the bytes it moves (Q, K, V, O, and the scores an unfused kernel writes and reads
// about 6 times forward, 9 backward).
Op attention_op(const AttentionPoint& a) {
  Op op;
  op.kind = a.backward ? OpKind::attention_backward : OpKind::attention_forward;
  op.batch = a.batch, op.heads = a.heads, op.seq = a.seq, op.head_dim = a.head_dim;
  op.causal = a.causal, op.fused = a.fused;
  op.flops =
      workload::attention_flops(a.batch, a.heads, a.seq, a.head_dim, a.causal, a.fused, a.backward);
  const double io = 2.0 * 4 * a.batch * a.heads * double(a.seq) * a.head_dim;
  const double scores = a.fused ? 0 : 2.0 * a.batch * a.heads * double(a.seq) * a.seq;
  op.bytes = a.backward ? 2 * io + 9 * scores : io + 6 * scores;
  return op;
}

}  // namespace

double MeasuredCostModel::attention_reference(const AttentionPoint& a,
                                              const config::GpuProfile& gpu) const {
  const Op op = attention_op(a);
  if (gpu.architecture == "cpu") return op.flops;
  const double kernel = datasheet_.duration(op, gpu, workload::Precision::bf16).seconds() -
                        datasheet_.efficiency().kernel_overhead.seconds();
  // Fused kernels (FlashAttention, cuDNN's SDPA) give each block of 128 query rows (forward) or
  // key rows (backward) of one head a thread block: a launch of fewer blocks than the GPU has
  // multiprocessors leaves the rest idle. On the H200 (132 SMs) 2 heads of 2048 tokens are 32
  // blocks: measured 24 us, where 16 heads of 512 (64 blocks, half the work) took 13 us. Past
  // one wave the blocks of a causal mask differ in length and the scheduler evens them out, so
  // no tail of a last wave is counted (counted, GPT-3 125M's 192 blocks were predicted 15-20%
  // too slow on the H200).
  if (!a.fused || gpu.sms <= 0) return kernel;
  const double blocks = double(a.batch) * a.heads * std::ceil(a.seq / 128.0);
  return kernel * std::max(1.0, gpu.sms / blocks);
}

std::optional<double> MeasuredCostModel::predict_attention(const std::string& dtype,
                                                           const AttentionPoint& q,
                                                           const config::GpuProfile& gpu) const {
  auto it = db_.attention.find(dtype);
  if (it == db_.attention.end()) return std::nullopt;
  // log(reference / time) over log(reference), for the same mask and pass (the reference counts
  // the work and the idle multiprocessors of a small launch, so a point of few heads lies beside
  // the launches it resembles, not beside points of equal work; held out one in five, the H200
  // table's error is 12.1% mean, 27.7% over log(b h s^2 d)): the points
  // of the asked implementation (fused or not; the other's only if it has none), of the same head
  // size where they bracket the query, else of every head size.
  const auto& all = it->second;
  const double x = std::log(attention_reference(q, gpu));
  auto same_kind = [&](const AttentionPoint& p) {
    return p.causal == q.causal && p.backward == q.backward;
  };
  const bool have_impl = std::any_of(all.begin(), all.end(), [&](const AttentionPoint& p) {
    return same_kind(p) && p.fused == q.fused;
  });
  auto collect = [&](bool same_head) {
    std::vector<std::pair<double, double>> pts;
    for (const AttentionPoint& p : all) {
      if (!same_kind(p) || (have_impl && p.fused != q.fused)) continue;
      if (same_head && p.head_dim != q.head_dim) continue;
      const double r = attention_reference(p, gpu);
      pts.emplace_back(std::log(r), std::log(r / p.t.median_s));
    }
    std::sort(pts.begin(), pts.end());
    return pts;
  };
  std::vector<std::pair<double, double>> pts = collect(true);
  const bool brackets = !pts.empty() && pts.front().first <= x && pts.back().first >= x;
  if (!brackets) {
    std::vector<std::pair<double, double>> wider = collect(false);
    if (pts.empty() || (wider.front().first <= x && wider.back().first >= x)) pts = wider;
  }
  if (pts.empty()) return std::nullopt;
  // Points of equal reference (b h taken apart alike) share one node: their median.
  std::vector<double> xs, ys;
  for (size_t i = 0; i < pts.size();) {
    size_t j = i;
    while (j < pts.size() && pts[j].first == pts[i].first) ++j;
    std::vector<double> same;
    for (size_t k = i; k < j; ++k) same.push_back(pts[k].second);
    std::sort(same.begin(), same.end());
    xs.push_back(pts[i].first);
    ys.push_back(same[same.size() / 2]);
    i = j;
  }
  double y;
  if (x <= xs.front()) {
    y = ys.front();
  } else if (x >= xs.back()) {
    y = ys.back();
  } else {
    const size_t hi = static_cast<size_t>(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
    y = pchip(xs, ys, hi - 1, x);
  }
  // Beyond the points the factor at the nearest one carries the reference out.
  return attention_reference(q, gpu) / std::exp(y);
}

double MeasuredCostModel::conv_reference(const workload::ConvShape& c,
                                         const config::GpuProfile& gpu,
                                         const std::string& dtype) const {
  const Op op = workload::conv_op("", c, static_cast<int>(dtype_bytes(dtype)));
  // A CPU's im2col and BLAS have no tiles or waves: its points scale by FLOPs.
  if (gpu.architecture == "cpu") return op.flops;
  return datasheet_.duration(op, gpu, dtype_precision(dtype)).seconds() -
         datasheet_.efficiency().kernel_overhead.seconds();
}

std::optional<double> MeasuredCostModel::predict_conv(const std::string& dtype,
                                                      const workload::ConvShape& q,
                                                      const config::GpuProfile& gpu) const {
  auto it = db_.conv.find(dtype);
  if (it == db_.conv.end()) return std::nullopt;
  const auto& all = it->second;
  auto same_filter = [&](const workload::ConvShape& c) {
    return c.pass == q.pass && c.r == q.r && c.s == q.s && c.stride == q.stride;
  };
  const bool have_filter =
      std::any_of(all.begin(), all.end(), [&](const ConvPoint& p) { return same_filter(p.shape); });
  auto sq_log = [](double a, double b) { return std::pow(std::log(a / b), 2); };
  const ConvPoint* nearest = nullptr;
  double best = 1e300;
  for (const ConvPoint& p : all) {
    const workload::ConvShape& c = p.shape;
    if (c.pass != q.pass || (have_filter && !same_filter(c))) continue;
    if (same_conv(c, q)) return p.t.median_s;
    const double d = sq_log(c.n, q.n) + sq_log(c.c, q.c) + sq_log(c.h, q.h) + sq_log(c.w, q.w) +
                     sq_log(c.k, q.k) + sq_log(1.0 + c.pad_h, 1.0 + q.pad_h) +
                     sq_log(1.0 + c.pad_w, 1.0 + q.pad_w) + sq_log(c.r, q.r) + sq_log(c.s, q.s) +
                     sq_log(c.stride, q.stride);
    if (d < best) best = d, nearest = &p;  // the first of equals: the table's order decides
  }
  if (!nearest) return std::nullopt;
  return nearest->t.median_s * conv_reference(q, gpu, dtype) /
         conv_reference(nearest->shape, gpu, dtype);
}

Time MeasuredCostModel::duration(const Op& op, const config::GpuProfile& gpu,
                                 workload::Precision p) const {
  const Time ds = datasheet_.duration(op, gpu, p);
  if (gpu.name != db_.device_type()) {
    // Derived: the measured type's time, scaled by the datasheet ratio of the two types.
    const config::GpuProfile* ref = reference();
    if (!ref) return ds;
    const Time measured = duration(op, *ref, p);
    const Time ref_ds = datasheet_.duration(op, *ref, p);
    return Time::from_seconds_ceil(measured.seconds() * ds.seconds() / ref_ds.seconds());
  }
  std::optional<double> s;
  switch (op.kind) {
    case OpKind::gemm:
      s = predict_gemm(gemm_dtype(db_, workload::math_precision(op, p)),
                       GemmPoint{op.m, op.n, op.k, std::max<int64_t>(1, op.batch), {}}, gpu);
      break;
    case OpKind::attention_forward:
    case OpKind::attention_backward:
      s = predict_attention(gemm_dtype(db_, workload::math_precision(op, p)),
                            AttentionPoint{op.batch,
                                           op.heads,
                                           op.seq,
                                           op.head_dim,
                                           op.causal,
                                           op.kind == OpKind::attention_backward,
                                           {},
                                           op.fused},
                            gpu);
      // Local attention: the measured full causal kernel's time over the blocks it computes.
      if (s) *s *= op.span;
      break;
    case OpKind::memory:
      s = predict_size("memory", memory_kernel_of(op.name), SizePoint{op.bytes, 1, {}});
      break;
    case OpKind::conv:
      s = predict_conv(conv_dtype(db_, p), op.conv, gpu);
      break;
  }
  if (!s) return ds;
  // The measured time is all there is, on a CPU (a function call) and on a GPU alike: a kernel
  // timed alone between two events takes as long as it does in a stream of kernels issued ahead
  // of the GPU (an H200 running GPT-3 125M's 1193 kernels back to back took 40.7 ms, where the
  // same kernels timed one by one summed to 43.2; experiments/h200-execute/README.md), so the
  // datasheet model's launch gap (kernel_overhead, fitted on vTrain's host-bound runs) is not
  // added. Where the host falls behind, its time per kernel (host_time) sets the pace instead.
  return Time::from_seconds_ceil(*s);
}

std::optional<Time> MeasuredCostModel::collective_time(workload::CommKind kind, double bytes,
                                                       int ranks, int nodes,
                                                       const config::GpuProfile& gpu) const {
  if (gpu.name != db_.device_type() || ranks < 2) return std::nullopt;
  const char* name = kind == workload::CommKind::allreduce       ? "allreduce"
                     : kind == workload::CommKind::allgather     ? "allgather"
                     : kind == workload::CommKind::reducescatter ? "reducescatter"
                     : kind == workload::CommKind::alltoall      ? "alltoall"
                                                                 : nullptr;
  if (!name) return std::nullopt;
  const std::optional<double> s =
      predict_size("collective", name, SizePoint{bytes, ranks, {}, nodes});
  if (!s) return std::nullopt;
  return Time::from_seconds_ceil(*s);
}

std::string MeasuredCostModel::source(const Op&, const config::GpuProfile& gpu) const {
  if (gpu.name == db_.device_type()) return "measured (" + db_.source + ")";
  if (reference())
    return "derived from " + db_.device_type() + " measurements and datasheet ratios";
  return "datasheet";
}

std::string MeasuredCostModel::coverage(const Op& op, const config::GpuProfile& gpu,
                                        workload::Precision p) const {
  if (gpu.name != db_.device_type()) return source(op, gpu);
  const std::string measured = "measured", beyond = "beyond the table (datasheet-scaled from it)";
  switch (op.kind) {
    case OpKind::gemm: {
      const std::string dtype = gemm_dtype(db_, workload::math_precision(op, p));
      auto it = db_.gemm.find(dtype);
      if (it == db_.gemm.end() || it->second.empty())
        return "datasheet (no " + dtype + " GEMM table)";
      int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, hi[3] = {0, 0, 0};
      const int64_t batch = std::max<int64_t>(1, op.batch);
      for (const GemmPoint& g : it->second) {
        if (g.m == op.m && g.n == op.n && g.k == op.k && g.batch == batch) return measured;
        if (g.batch != 1) continue;
        const int64_t v[3] = {g.m, g.n, g.k};
        for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], v[a]), hi[a] = std::max(hi[a], v[a]);
      }
      const int64_t q[3] = {op.m, op.n, op.k};
      for (int a = 0; a < 3; ++a)
        if (q[a] < lo[a] || q[a] > hi[a]) return beyond;
      return batch > 1 ? beyond : measured;
    }
    case OpKind::attention_forward:
    case OpKind::attention_backward: {
      const std::string dtype = gemm_dtype(db_, workload::math_precision(op, p));
      auto it = db_.attention.find(dtype);
      const bool backward = op.kind == OpKind::attention_backward;
      bool same_head = false, any = false;
      if (it != db_.attention.end()) {
        for (const AttentionPoint& a : it->second) {
          if (a.causal != op.causal || a.backward != backward) continue;
          any = true;
          same_head = same_head || a.head_dim == op.head_dim;
        }
      }
      if (same_head) return measured;
      if (any) return "measured, other head sizes";
      return "datasheet (no " + dtype + " " + (op.causal ? "causal " : "") +
             (backward ? "backward" : "forward") + " attention table)";
    }
    case OpKind::memory: {
      const std::string kernel = memory_kernel_of(op.name);
      auto it = db_.memory.find(kernel);
      if (it == db_.memory.end() || it->second.empty())
        return "datasheet (no " + kernel + " table)";
      double lo = 1e300, hi = 0;
      for (const SizePoint& s : it->second) lo = std::min(lo, s.bytes), hi = std::max(hi, s.bytes);
      return op.bytes >= lo && op.bytes <= hi ? measured : beyond;
    }
    case OpKind::conv: {
      const std::string dtype = conv_dtype(db_, p);
      auto it = db_.conv.find(dtype);
      if (it == db_.conv.end() || it->second.empty())
        return "datasheet (no " + dtype + " convolution table)";
      bool any = false;
      for (const ConvPoint& c : it->second) {
        if (c.shape.pass != op.conv.pass) continue;
        if (same_conv(c.shape, op.conv)) return measured;
        any = true;
      }
      if (any) return beyond;
      return "datasheet (no " + dtype + " " + conv_pass_name(op.conv.pass) + " convolution table)";
    }
  }
  return source(op, gpu);
}

const config::GpuProfile* MeasuredCostModel::reference() const {
  // GPU types are derived from a measured GPU, never from a CPU.
  const auto& gpus = config::builtin_gpus();
  auto it = gpus.find(db_.device_type());
  if (it == gpus.end() || it->second.architecture == "cpu") return nullptr;
  return &it->second;
}

void summarise_row(CheckRow& r) {
  r.held_out = r.points.size();
  r.mean_error = r.max_error = r.mean_spread = 0;
  for (const CheckPoint& p : r.points) {
    const double e = std::abs(p.predicted_s / p.measured_s - 1);
    r.mean_error += e, r.max_error = std::max(r.max_error, e), r.mean_spread += p.spread;
  }
  if (r.held_out > 0) r.mean_error /= r.held_out, r.mean_spread /= r.held_out;
}

CheckPoint check_point(std::string label, const Timing& t, double predicted) {
  return CheckPoint{std::move(label), t.median_s, predicted, (t.p90_s - t.p10_s) / t.median_s};
}

template <>
std::string point_label(const GemmPoint& p) {
  return fmt::format("m={} n={} k={} batch={}", p.m, p.n, p.k, p.batch);
}

template <>
std::string point_label(const AttentionPoint& p) {
  return fmt::format("batch={} heads={} seq={} head_dim={}{}{}{}", p.batch, p.heads, p.seq,
                     p.head_dim, p.causal ? " causal" : "", p.backward ? " backward" : "",
                     p.fused ? " fused" : "");
}

template <>
std::string point_label(const ConvPoint& p) {
  const workload::ConvShape& c = p.shape;
  return fmt::format("n={} c={} h={} w={} k={} r={} s={} stride={} pad={}x{} {}", c.n, c.c, c.h,
                     c.w, c.k, c.r, c.s, c.stride, c.pad_h, c.pad_w, conv_pass_name(c.pass));
}

std::vector<CheckRow> MeasuredCostModel::compare_datasheet(const config::GpuProfile& gpu) const {
  const double gap = datasheet_.efficiency().kernel_overhead.seconds();
  std::vector<CheckRow> rows;
  for (const auto& [dtype, points] : db_.gemm) {
    CheckRow row;
    row.table = "gemm/" + dtype;
    for (const GemmPoint& p : points) {
      const Op op = gemm_op(p.m, p.n, p.k, p.batch, dtype);
      row.points.push_back(
          check_point(point_label(p), p.t,
                      datasheet_.duration(op, gpu, dtype_precision(dtype)).seconds() - gap));
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [dtype, points] : db_.attention) {
    CheckRow row;
    row.table = "attention/" + dtype;
    for (const AttentionPoint& p : points) {
      row.points.push_back(check_point(
          point_label(p), p.t,
          datasheet_.duration(attention_op(p), gpu, dtype_precision(dtype)).seconds() - gap));
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [dtype, points] : db_.conv) {
    CheckRow row;
    row.table = "conv/" + dtype;
    for (const ConvPoint& p : points) {
      const Op op = workload::conv_op("", p.shape, static_cast<int>(dtype_bytes(dtype)));
      row.points.push_back(
          check_point(point_label(p), p.t,
                      datasheet_.duration(op, gpu, dtype_precision(dtype)).seconds() - gap));
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [kernel, points] : db_.memory) {
    CheckRow row;
    row.table = "memory/" + kernel;
    for (const SizePoint& p : points) {
      Op op;
      op.kind = OpKind::memory;
      op.bytes = p.bytes;
      row.points.push_back(
          check_point(fmt::format("bytes={:.0f}", p.bytes), p.t,
                      datasheet_.duration(op, gpu, workload::Precision::bf16).seconds() - gap));
    }
    rows.push_back(std::move(row));
  }
  for (CheckRow& r : rows) summarise_row(r);
  return rows;
}

namespace {

// One table's held-out check: every fifth point (from the third) predicted by a model built from
// the others alone, in a database holding just them (`with`) and the provenance.
template <typename Point>
void hold_out(
    const std::string& table, const std::vector<Point>& points, const Database& db,
    const workload::DatasheetCostModel& datasheet,
    const std::function<void(Database&, std::vector<Point>)>& with,
    const std::function<std::optional<double>(const MeasuredCostModel&, const Point&)>& predict,
    const std::function<std::string(const Point&)>& label, std::vector<CheckRow>& rows) {
  std::vector<Point> held, kept;
  for (size_t i = 0; i < points.size(); ++i) (i % 5 == 2 ? held : kept).push_back(points[i]);
  Database rest;
  rest.source = db.source;
  rest.attrs = db.attrs;
  with(rest, std::move(kept));
  const MeasuredCostModel m(std::move(rest), datasheet);
  CheckRow row;
  row.table = table;
  for (const Point& p : held) {
    if (auto s = predict(m, p)) row.points.push_back(check_point(label(p), p.t, *s));
  }
  if (row.points.empty()) return;
  summarise_row(row);
  rows.push_back(std::move(row));
}

}  // namespace

std::vector<CheckRow> check_database(const Database& db, const config::GpuProfile& gpu) {
  std::vector<CheckRow> rows;
  const workload::DatasheetCostModel datasheet;
  for (const auto& [dtype, pts] : db.gemm) {
    hold_out<GemmPoint>(
        "gemm/" + dtype, pts, db, datasheet,
        [&](Database& r, std::vector<GemmPoint> kept) { r.gemm[dtype] = std::move(kept); },
        [&](const MeasuredCostModel& m, const GemmPoint& p) {
          return m.predict_gemm(dtype, p, gpu);
        },
        point_label<GemmPoint>, rows);
  }
  for (const auto& [dtype, pts] : db.attention) {
    hold_out<AttentionPoint>(
        "attention/" + dtype, pts, db, datasheet,
        [&](Database& r, std::vector<AttentionPoint> kept) {
          r.attention[dtype] = std::move(kept);
        },
        [&](const MeasuredCostModel& m, const AttentionPoint& p) {
          return m.predict_attention(dtype, p, gpu);
        },
        point_label<AttentionPoint>, rows);
  }
  for (const auto& [dtype, pts] : db.conv) {
    hold_out<ConvPoint>(
        "conv/" + dtype, pts, db, datasheet,
        [&](Database& r, std::vector<ConvPoint> kept) { r.conv[dtype] = std::move(kept); },
        [&](const MeasuredCostModel& m, const ConvPoint& p) {
          return m.predict_conv(dtype, p.shape, gpu);
        },
        point_label<ConvPoint>, rows);
  }
  using SizeTables = std::map<std::string, std::vector<SizePoint>> Database::*;
  for (const auto& [kind, member] :
       {std::pair<const char*, SizeTables>{"memory", &Database::memory},
        {"collective", &Database::collective},
        {"copy", &Database::copy}}) {
    for (const auto& [name, pts] : db.*member) {
      hold_out<SizePoint>(
          std::string(kind) + "/" + name, pts, db, datasheet,
          [&](Database& r, std::vector<SizePoint> kept) { (r.*member)[name] = std::move(kept); },
          [&](const MeasuredCostModel& m, const SizePoint& p) {
            return m.predict_size(kind, name, p);
          },
          [](const SizePoint& p) {
            return fmt::format("bytes={:.0f} ranks={} nodes={}", p.bytes, p.ranks, p.nodes);
          },
          rows);
    }
  }
  return rows;
}

}  // namespace hetsim::calibrate
