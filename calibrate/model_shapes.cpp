// Enumerates the shipped models' kernel shapes; see model_shapes.h.
#include "calibrate/model_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

#include "sim/config/embedded_data.h"
#include "sim/workload/model/model.h"
#include "sim/workload/model/ops.h"

namespace hetsim::calibrate {

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const config::EmbeddedFile& f : config::embedded_files()) {
    const std::filesystem::path p(f.path);
    // Convolutional networks are measured on the conv grid (cpu_backend's conv_grid), not here.
    const bool cnn = std::string_view(f.text).find("\nfamily: cnn") != std::string_view::npos;
    if (p.parent_path() == "models" && p.extension() == ".yaml" && !cnn)
      names.push_back(p.stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelShapes model_shapes(const std::vector<std::string>& models,
                         const std::vector<int64_t>& tensor_parallel,
                         const std::vector<int64_t>& micro_batches) {
  ModelShapes out;
  for (const std::string& name : models) {
    const workload::ModelConfig m = workload::load_model(name);
    if (m.convolutional()) continue;  // convolutions are measured on their own grid
    for (int64_t tp : tensor_parallel) {
      // KV heads fewer than the degree are replicated (Megatron); otherwise they split evenly.
      const int64_t kv = std::max(1, m.kv_heads);
      if (m.heads % tp != 0 || m.ffn_hidden % tp != 0 || (kv % tp != 0 && tp % kv != 0)) {
        out.skipped.push_back(fmt::format("{} tp={}: {} heads, {} KV heads, FFN {} not divisible",
                                          m.name, tp, m.heads, m.kv_heads, m.ffn_hidden));
        continue;
      }
      for (int64_t mb : micro_batches) {
        workload::LayerShape s;
        s.micro_batch = mb;
        s.sequence = m.sequence;
        s.tensor_parallel = static_cast<int>(tp);
        // A MoE model's expert layers too, at an even load on one expert-parallel rank.
        workload::LayerShape x = s;
        x.moe_layer = true;
        x.sequence_parallel = tp > 1;
        std::vector<std::vector<workload::Step>> programs = {
            workload::layer_forward(m, s), workload::layer_backward(m, s),
            workload::head_forward(m, s), workload::head_backward(m, s)};
        if (m.moe()) {
          programs.push_back(workload::layer_forward(m, x));
          programs.push_back(workload::layer_backward(m, x));
        }
        for (const auto& program : programs) {
          for (const workload::Step& st : program) {
            const workload::Op& op = st.op;
            if (st.comm != workload::CommKind::none) continue;
            if (op.kind == workload::OpKind::gemm) {
              out.gemm.emplace(op.m, op.n, op.k, std::max<int64_t>(1, op.batch));
            } else if (op.kind == workload::OpKind::attention_forward) {
              out.attention.emplace(op.batch, op.heads, op.seq, op.head_dim, op.causal);
            }
          }
        }
      }
    }
  }
  return out;
}

std::string model_shapes_csv(const ModelShapes& shapes) {
  std::string s = "kind,m,n,k,batch,heads,seq,head_dim,causal\n";
  for (const auto& [m, n, k, b] : shapes.gemm)
    s += fmt::format("gemm,{},{},{},{},0,0,0,0\n", m, n, k, b);
  for (const auto& [b, h, seq, d, causal] : shapes.attention)
    s += fmt::format("attention,0,0,0,{},{},{},{},{}\n", b, h, seq, d, int(causal));
  return s;
}

ModelShapes read_model_shapes_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the shapes file");
  static const char* kHeader = "kind,m,n,k,batch,heads,seq,head_dim,causal";
  static const char* kFields[] = {"kind",  "m",   "n",        "k",     "batch",
                                  "heads", "seq", "head_dim", "causal"};
  ModelShapes out;
  std::string line;
  bool header = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{} line {}", path, number);
    if (!header) {
      if (line != kHeader) {
        throw InputError(where + ": expected the header \"" + std::string(kHeader) + "\", got \"" +
                         line + "\"");
      }
      header = true;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (cells.size() != 9) {
      throw InputError(fmt::format("{}: expected 9 fields, got {}", where, cells.size()));
    }
    int64_t v[9] = {};
    for (int i = 1; i < 9; ++i) {
      const std::optional<long long> n = config::parse_whole<long long>(cells[i]);
      if (!n || *n < 0 || *n > (int64_t{1} << 24)) {
        throw InputError(fmt::format("{}: field {}: expected a whole number 0 to 2^24, got \"{}\"",
                                     where, kFields[i], cells[i]));
      }
      v[i] = *n;
    }
    auto positive = [&](std::initializer_list<int> fields) {
      for (int i : fields) {
        if (v[i] < 1) {
          throw InputError(fmt::format("{}: field {}: expected a positive size for a {} row", where,
                                       kFields[i], cells[0]));
        }
      }
    };
    if (cells[0] == "gemm") {
      positive({1, 2, 3, 4});
      out.gemm.emplace(v[1], v[2], v[3], v[4]);
    } else if (cells[0] == "attention") {
      positive({4, 5, 6, 7});
      if (v[8] > 1) throw InputError(where + ": field causal: expected 0 or 1");
      out.attention.emplace(v[4], v[5], v[6], v[7], v[8] == 1);
    } else {
      throw InputError(where + ": field kind: expected gemm or attention, got \"" + cells[0] +
                       "\"");
    }
  }
  if (!header) throw InputError(path + ": empty, or no header \"" + std::string(kHeader) + "\"");
  return out;
}

}  // namespace hetsim::calibrate
