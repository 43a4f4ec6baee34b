// Plan grids per kind and the duration guesses that budget them.
#include "plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "lt_matmul.h"
#include "memory_kernels.h"
#include "timer.h"

namespace hetsim::calibrate::cuda {

RateGuess RateGuess::for_compute_capability(int major, int minor) {
  const int cc = major * 10 + minor;
  if (cc >= 100) return {1500e12, 750e12, 60e12, 3000e12, 6.0e12, 600e9, 45e9};  // Blackwell
  if (cc >= 90) return {700e12, 350e12, 45e12, 1300e12, 3.8e12, 350e9, 45e9};    // H100/H200
  if (cc >= 89) return {250e12, 120e12, 60e12, 500e12, 0.8e12, 20e9, 20e9};      // Ada
  return {250e12, 120e12, 17e12, 250e12, 1.6e12, 200e9, 20e9};                   // Ampere
}

double harness_seconds(double kernel_s, bool flush_l2) {
  const RepetitionPolicy policy;
  const double flush_s = flush_l2 ? 70e-6 : 0.0;  // 256 MiB memset at ~4 TB/s
  const double gap_s = 4e-6;                       // event records and launch gaps per repetition
  const double reps = std::clamp(std::ceil(policy.target_s / std::max(kernel_s, 1e-7)),
                                 static_cast<double>(policy.min_reps),
                                 static_cast<double>(policy.max_reps));
  const double setup_s = 150e-6;  // heuristic query, descriptors, two synchronisations
  return setup_s + 2 * kernel_s + flush_s + reps * (kernel_s + flush_s + gap_s);
}

double collective_harness_seconds(double kernel_s) {
  const RepetitionPolicy policy;
  const double launch_s = 30e-6;  // a grouped NCCL launch over 8 devices, plus 16 event records
  const double per_rep = std::max(kernel_s, launch_s);
  const double reps = std::clamp(std::ceil(policy.target_s / per_rep),
                                 static_cast<double>(policy.min_reps),
                                 static_cast<double>(policy.max_reps));
  return 200e-6 + 2 * per_rep + reps * per_rep;
}

namespace {
double gemm_flops_rate(const RateGuess& r, const std::string& dtype) {
  if (dtype == "fp32") return r.fp32_flops;
  if (dtype == "tf32") return r.tf32_flops;
  if (dtype == "fp8") return r.fp8_flops;
  return r.bf16_flops;
}

double gemm_kernel_seconds(const PlanConfig& c, const std::string& dtype, std::int64_t m,
                           std::int64_t n, std::int64_t k, std::int64_t batch) {
  const GemmType type = gemm_type_from_name(dtype);
  const double flops = 2.0 * m * n * k * batch;
  const double bytes = static_cast<double>(batch) *
                       ((m * k + k * n) * input_element_bytes(type) + m * n * output_element_bytes(type));
  return 5e-6 + std::max(flops / gemm_flops_rate(c.rates, dtype), bytes / c.rates.memory_Bps);
}

// Adds a GEMM point once per (dtype, m, n, k, batch).
struct GemmAdder {
  const PlanConfig& config;
  std::vector<PlanItem>& out;
  std::set<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  void add(const std::string& dtype, std::int64_t m, std::int64_t n, std::int64_t k,
           std::int64_t batch) {
    if (!seen.emplace(dtype, m, n, k, batch).second) return;
    PlanItem item;
    item.key.kind = "gemm";
    item.key.dtype = dtype;
    item.key.m = m;
    item.key.n = n;
    item.key.k = k;
    item.key.batch = batch;
    item.estimate_s = gemm_kernel_seconds(config, dtype, m, n, k, batch);
    out.push_back(item);
  }
};

std::vector<std::int64_t> powers_of_two(std::int64_t from, std::int64_t to, int step_log2) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = from; x <= to; x <<= step_log2) v.push_back(x);
  return v;
}
}  // namespace

std::vector<ModelShape> read_model_shapes(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--shapes " + path + ": cannot open");
  const std::string header = "kind,m,n,k,batch,heads,seq,head_dim,causal";
  std::vector<ModelShape> shapes;
  std::string line;
  int lineno = 0;
  bool seen_header = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file saved with CRLF
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (!seen_header) {
      if (line != header) throw std::invalid_argument(where + "expected the header \"" + header + "\"");
      seen_header = true;
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (f.size() != 9) throw std::invalid_argument(where + "expected 9 fields, got " + std::to_string(f.size()));
    std::int64_t v[8] = {};
    for (int i = 0; i < 8; ++i) {
      std::size_t used = 0;
      try {
        v[i] = std::stoll(f[i + 1], &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      // Each dimension below 2^24 keeps every product of three of them (elements, FLOPs) exact.
      if (used != f[i + 1].size() || v[i] < 0 || v[i] >= (std::int64_t{1} << 24))
        throw std::invalid_argument(where + "field " + std::to_string(i + 2) +
                                    ": expected an integer from 0 to 16777215, got \"" + f[i + 1] + "\"");
    }
    ModelShape s;
    s.m = v[0], s.n = v[1], s.k = v[2], s.batch = v[3], s.heads = v[4], s.seq = v[5], s.head_dim = v[6];
    s.causal = static_cast<int>(v[7]);
    if (f[0] == "gemm") {
      if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1)
        throw std::invalid_argument(where + "a gemm row needs m, n, k and batch of at least 1");
    } else if (f[0] == "attention") {
      s.attention = true;
      if (s.batch < 1 || s.heads < 1 || s.seq < 1 || s.head_dim < 1 || s.causal > 1)
        throw std::invalid_argument(where + "an attention row needs batch, heads, seq, head_dim of at least 1 and causal 0 or 1");
    } else {
      throw std::invalid_argument(where + "kind: expected gemm or attention, got \"" + f[0] + "\"");
    }
    shapes.push_back(s);
  }
  if (!seen_header) throw std::invalid_argument("--shapes " + path + ": empty, or no header \"" + header + "\"");
  return shapes;
}

std::vector<PlanItem> plan_gemm(const PlanConfig& c) {
  std::vector<std::string> dtypes = {"bf16", "fp16"};
  if (c.has_fp8()) dtypes.push_back("fp8");
  dtypes.push_back("tf32");
  dtypes.push_back("fp32");

  // Transformer layers: hidden h, tensor parallel t, micro-batch tokens T. Each linear layer
  // Y[T, n] = X[T, k] W[k, n] runs forward (T, n, k), data gradient (T, k, n) and weight
  // gradient (k, n, T). Layers: QKV (k=h, n=3h/t), attention output (k=h/t, n=h), MLP up
  // (k=h, n=4h/t), MLP down (k=4h/t, n=h).
  const std::vector<std::int64_t> hiddens =
      c.quick ? std::vector<std::int64_t>{1024, 4096, 16384} : powers_of_two(1024, 16384, 1);
  const std::vector<std::int64_t> tps = c.quick ? std::vector<std::int64_t>{1, 8}
                                                : std::vector<std::int64_t>{1, 2, 4, 8};
  const std::vector<std::int64_t> tokens =
      c.quick ? std::vector<std::int64_t>{8192} : powers_of_two(2048, 16384, 1);
  // The log grid (square to tall-skinny); --quick takes every other power of two.
  const std::vector<std::int64_t> grid = powers_of_two(64, 16384, c.quick ? 2 : 1);
  // Largest grid kernel kept: the plateau past it is covered by the transformer shapes.
  const double grid_cap_s = c.quick ? 4e-3 : 8e-3;
  // Attention's strided-batched GEMMs: QK^T is (S, S, d), PV and the gradients (d, S, S).
  const std::vector<std::int64_t> seqs =
      c.quick ? std::vector<std::int64_t>{1024, 4096} : powers_of_two(512, 8192, 1);
  const std::vector<std::int64_t> head_dims =
      c.quick ? std::vector<std::int64_t>{128} : std::vector<std::int64_t>{64, 128};
  const std::vector<std::int64_t> batches =
      c.quick ? std::vector<std::int64_t>{32} : std::vector<std::int64_t>{16, 64};

  std::vector<PlanItem> out;
  GemmAdder adder{c, out, {}};
  // The models' exact shapes first (in bf16, their training type): the cost model answers them
  // exactly. Kernels past ~15 ms sit on the plateau the grid measures; --quick takes a sample.
  {
    const double cap_s = c.quick ? 5e-3 : 15e-3;
    std::size_t index = 0;
    for (const ModelShape& s : c.model_shapes) {
      if (s.attention || gemm_kernel_seconds(c, "bf16", s.m, s.n, s.k, s.batch) > cap_s) continue;
      if (c.quick && index++ % 8 != 0) continue;
      adder.add("bf16", s.m, s.n, s.k, s.batch);
    }
  }
  for (const std::string& dtype : dtypes) {
    const bool training_type = dtype == "bf16" || dtype == "fp16" || dtype == "fp8";
    if (training_type && (dtype != "fp16" || !c.quick)) {
      for (std::int64_t h : hiddens)
        for (std::int64_t t : tps)
          for (std::int64_t T : tokens) {
            const std::int64_t layers[4][2] = {{h, 3 * h / t}, {h / t, h}, {h, 4 * h / t}, {4 * h / t, h}};
            for (const auto& kn : layers) {
              adder.add(dtype, T, kn[1], kn[0], 1);
              adder.add(dtype, T, kn[0], kn[1], 1);
              adder.add(dtype, kn[0], kn[1], T, 1);
            }
          }
    }
    for (std::int64_t m : grid)
      for (std::int64_t n : grid)
        for (std::int64_t k : grid)
          if (gemm_kernel_seconds(c, dtype, m, n, k, 1) <= grid_cap_s) adder.add(dtype, m, n, k, 1);
    if (dtype == "bf16" || dtype == "fp16")
      for (std::int64_t s : seqs)
        for (std::int64_t d : head_dims)
          for (std::int64_t b : batches) {
            adder.add(dtype, s, s, d, b);
            adder.add(dtype, d, s, s, b);
          }
  }
  return out;
}

std::vector<PlanItem> plan_attention(const PlanConfig& c) {
  // A small grid (the cost model interpolates the rate over b h s^2 d per head size, mask and
  // pass), then the models' own head sizes and sequences.
  const std::vector<std::int64_t> seqs =
      c.quick ? std::vector<std::int64_t>{1024, 4096} : powers_of_two(512, 8192, 1);
  const std::vector<std::int64_t> head_dims =
      c.quick ? std::vector<std::int64_t>{128} : std::vector<std::int64_t>{64, 128};
  constexpr double kMaxScoreBytes = 8.0 * (1 << 30);  // one S x S score tensor per head and sample

  std::vector<PlanItem> out;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int>> seen;
  auto add = [&](std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d, int causal,
                 int backward) {
    const double score_bytes = 2.0 * b * h * s * s;  // the unfused fallback materialises them
    if (score_bytes > kMaxScoreBytes || !seen.emplace(b, h, s, d, causal, backward).second) return;
    PlanItem item;
    item.key.kind = "attention";
    item.key.dtype = "bf16";
    item.key.batch = b;
    item.key.heads = h;
    item.key.seq = s;
    item.key.head_dim = d;
    item.key.causal = causal;
    item.key.backward = backward;
    // Forward: 2 GEMMs of 2*S*S*d and ~4 passes over the scores; backward: 4 GEMMs, ~6 passes.
    const double flops = (backward ? 8.0 : 4.0) * s * s * d * b * h;
    const double passes = backward ? 6.0 : 4.0;
    item.estimate_s =
        20e-6 + flops / c.rates.bf16_flops + passes * score_bytes / c.rates.memory_Bps;
    // cuDNN builds (compiles) a plan per shape: ~0.6 s forward, ~1.3 s backward (which builds
    // the forward too). Charged to one repetition's time so the budget sees it once.
    if (c.cudnn) item.setup_s = backward ? 1.3 : 0.6;
    out.push_back(item);
  };
  for (std::int64_t s : seqs)
    for (std::int64_t d : head_dims)
      for (int causal = 0; causal <= 1; ++causal)
        for (int backward = 0; backward <= 1; ++backward) add(1, 16, s, d, causal, backward);
  // The models' calls at micro-batch 1: per (sequence, head size, mask) the fewest and the most
  // heads (the tensor-parallel extremes); --quick keeps the most heads of every other one.
  std::map<std::tuple<std::int64_t, std::int64_t, int>, std::pair<std::int64_t, std::int64_t>> heads;
  for (const ModelShape& m : c.model_shapes) {
    if (!m.attention || m.batch != 1) continue;
    auto [it, fresh] = heads.try_emplace({m.seq, m.head_dim, m.causal}, m.heads, m.heads);
    if (!fresh) it->second = {std::min(it->second.first, m.heads), std::max(it->second.second, m.heads)};
  }
  std::size_t index = 0;
  for (const auto& [key, range] : heads) {
    const auto& [s, d, causal] = key;
    if (c.quick && index++ % 2 != 0) continue;
    for (int backward = 0; backward <= 1; ++backward) {
      add(1, range.second, s, d, causal, backward);
      if (!c.quick) add(1, range.first, s, d, causal, backward);
    }
  }
  return out;
}

std::vector<PlanItem> plan_memory(const PlanConfig& c) {
  std::vector<PlanItem> out;
  // 64 KiB .. 1 GiB moved: x sqrt(2) steps in full (29 sizes), x4 in --quick (8 sizes).
  const int half_steps = c.quick ? 4 : 1;
  for (const MemoryKernelInfo& info : kMemoryKernels) {
    std::set<std::int64_t> seen;
    for (int h = 32; h <= 60; h += half_steps) {
      const double target = std::pow(2.0, h / 2.0);
      const auto elements = static_cast<std::int64_t>(target / info.bytes_per_element /
                                                       static_cast<double>(info.element_multiple)) *
                            info.element_multiple;
      const std::int64_t bytes = elements * info.bytes_per_element;
      if (elements <= 0 || !seen.insert(bytes).second) continue;
      PlanItem item;
      item.key.kind = "memory";
      item.key.dtype = info.dtype;
      item.key.name = info.name;
      item.key.bytes = bytes;
      item.estimate_s = 3e-6 + static_cast<double>(bytes) / c.rates.memory_Bps;
      out.push_back(item);
    }
  }
  return out;
}

std::vector<PlanItem> plan_conv(const PlanConfig& c) {
  std::vector<PlanItem> out;
  if (!c.cudnn) return out;
  // (c, h = w, k, r = s, stride, pad): the CPU backend's layers (calibrate/cpu/cpu_backend.cpp
  // conv_grid): ResNet-50's bottleneck convolutions per stage, its strided 3x3 and 1x1
  // projection, the 7x7/2 and 11x11/4 first layers of ResNet and AlexNet on 224x224 images.
  struct Layer {
    std::int64_t c, hw, k, rs, stride, pad;
  };
  const Layer layers[] = {{64, 56, 64, 3, 1, 1},    {128, 28, 128, 3, 1, 1},
                          {256, 14, 256, 3, 1, 1},  {512, 7, 512, 3, 1, 1},
                          {64, 56, 256, 1, 1, 0},   {256, 56, 64, 1, 1, 0},
                          {1024, 14, 256, 1, 1, 0}, {512, 7, 2048, 1, 1, 0},
                          {2048, 7, 512, 1, 1, 0},  {128, 56, 128, 3, 2, 1},
                          {256, 56, 512, 1, 2, 0},  {3, 224, 64, 7, 2, 3},
                          {3, 224, 64, 11, 4, 2}};
  // Per-GPU batches of ResNet training; --quick one.
  const std::vector<std::int64_t> batches =
      c.quick ? std::vector<std::int64_t>{64} : std::vector<std::int64_t>{32, 64, 128, 256};
  for (const Layer& l : layers)
    for (std::int64_t n : batches)
      for (const char* pass : {"forward", "data_grad", "weight_grad"}) {
        PlanItem item;
        item.key.kind = "conv";
        item.key.dtype = "bf16";
        item.key.name = pass;
        item.key.conv_n = n;
        item.key.conv_c = l.c;
        item.key.conv_h = item.key.conv_w = l.hw;
        item.key.conv_k = l.k;
        item.key.conv_r = item.key.conv_s = l.rs;
        item.key.conv_stride = l.stride;
        item.key.conv_pad_h = item.key.conv_pad_w = l.pad;
        const double p = static_cast<double>((l.hw + 2 * l.pad - l.rs) / l.stride + 1);
        const double flops = 2.0 * n * l.k * l.c * l.rs * l.rs * p * p;
        const double bytes = 2.0 * (n * l.c * l.hw * l.hw + l.k * l.c * l.rs * l.rs + n * l.k * p * p);
        // Implicit GEMMs reach about half the dense GEMM rate (channel counts of 3 far less).
        item.estimate_s = 10e-6 + std::max(flops / (0.5 * c.rates.bf16_flops), bytes / c.rates.memory_Bps);
        // cudnnFind tries every algorithm (about 8 per pass) once, untimed by the harness.
        item.setup_s = 2e-3 + 8 * (item.estimate_s + 50e-6);
        out.push_back(item);
      }
  return out;
}

std::vector<PlanItem> plan_collective(const PlanConfig& c) {
  std::vector<PlanItem> out;
  if (c.gpus < 2 || !c.nccl) return out;
  const int max_log2 = c.quick ? 28 : 32;  // 256 MiB or 4 GiB
  const char* ops[] = {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"};
  const std::int64_t quantum = 2 * static_cast<std::int64_t>(c.gpus);  // bf16 chunks per rank
  const double n = c.gpus;
  for (const char* op : ops)
    for (int l = 10; l <= max_log2; l += 2) {
      const std::int64_t bytes = ((std::int64_t{1} << l) / quantum) * quantum;
      const std::string name = op;
      // Bus-bandwidth factors of nccl-tests (PERFORMANCE.md): 2(n-1)/n all-reduce, (n-1)/n
      // gather/scatter/all-to-all, 1 broadcast and send/receive.
      const double factor = name == "allreduce" ? 2 * (n - 1) / n
                            : (name == "broadcast" || name == "sendrecv") ? 1.0
                                                                           : (n - 1) / n;
      PlanItem item;
      item.key.kind = "collective";
      item.key.dtype = "bf16";
      item.key.name = name;
      item.key.bytes = bytes;
      item.key.ranks = c.gpus;
      item.key.nodes = 1;  // one process drives the GPUs of one node; under MPI, the hosts spanned
      item.estimate_s = 25e-6 + factor * static_cast<double>(bytes) / c.rates.nvlink_bus_Bps;
      out.push_back(item);
    }
  return out;
}

std::vector<PlanItem> plan_copy(const PlanConfig& c) {
  std::vector<PlanItem> out;
  for (const char* direction : {"h2d", "d2h"})
    for (int l = 12; l <= 30; l += c.quick ? 2 : 1) {  // 4 KiB .. 1 GiB
      PlanItem item;
      item.key.kind = "copy";
      item.key.name = direction;
      item.key.bytes = std::int64_t{1} << l;
      item.estimate_s = 8e-6 + static_cast<double>(item.key.bytes) / c.rates.pcie_Bps;
      out.push_back(item);
    }
  return out;
}

}  // namespace hetsim::calibrate::cuda
