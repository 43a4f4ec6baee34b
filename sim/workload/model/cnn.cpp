// Convolutional networks: model files, and layer programs on a process grid; see cnn.h.
#include "sim/workload/model/cnn.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sim/config/limits.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::workload {

std::string to_string(LayerSplit s) {
  switch (s) {
    case LayerSplit::batch:
      return "batch";
    case LayerSplit::model:
      return "model";
    case LayerSplit::domain:
      return "domain";
  }
  return "?";
}

int64_t CnnLayer::weights() const {
  switch (kind) {
    case CnnKind::conv:
      return out_c * in_c * kernel * kernel;
    case CnnKind::fc:
      return out_c * in_elems();
    case CnnKind::pool:
      break;
  }
  return 0;
}

int64_t CnnLayer::params() const {
  if (kind == CnnKind::pool) return 0;
  return weights() + (bias ? out_c : 0) + (batchnorm ? 2 * out_c : 0);
}

double CnnLayer::macs() const {
  switch (kind) {
    case CnnKind::conv:
      return static_cast<double>(out_c) * in_c * kernel * kernel * static_cast<double>(out_h) *
             out_w;
    case CnnKind::fc:
      return static_cast<double>(out_c) * static_cast<double>(in_elems());
    case CnnKind::pool:
      break;
  }
  return 0;
}

double ModelConfig::cnn_macs() const {
  double s = 0;
  for (const CnnLayer& l : cnn) s += l.macs();
  return s;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool global_pool(const CnnLayer& l) {
  return l.kind == CnnKind::pool && l.out_w == 1 && l.kernel == l.in_w;
}

}  // namespace

Halo halo_forward(const CnnLayer& l) {
  return {std::max<int64_t>(0, l.pad), std::max<int64_t>(0, l.kernel - l.stride - l.pad)};
}

Halo halo_backward(const CnnLayer& l) {
  const Halo f = halo_forward(l);
  return {ceil_div(f.right, l.stride), ceil_div(f.left, l.stride)};
}

int cnn_source(const ModelConfig& m, int i) {
  const int from = m.cnn[static_cast<size_t>(i)].input_from;
  if (from != CnnLayer::kPrevious) return from;
  return i == 0 ? CnnLayer::kImages : i - 1;
}

namespace {

// Per layer, whether its output's gradient is wanted: it has parameters, or a layer it reads
// (its input or its shortcut's source) wants its own.
std::vector<bool> output_gradients(const ModelConfig& m) {
  std::vector<bool> out(m.cnn.size(), false);
  auto wanted = [&](int src) { return src >= 0 && out[static_cast<size_t>(src)]; };
  for (size_t i = 0; i < m.cnn.size(); ++i) {
    const CnnLayer& l = m.cnn[i];
    out[i] =
        l.params() > 0 || wanted(cnn_source(m, static_cast<int>(i))) || wanted(l.residual_from);
  }
  return out;
}

}  // namespace

std::vector<bool> cnn_input_gradients(const ModelConfig& m) {
  const std::vector<bool> wanted = output_gradients(m);
  std::vector<bool> out;
  for (size_t i = 0; i < m.cnn.size(); ++i) {
    const int src = cnn_source(m, static_cast<int>(i));
    out.push_back(src >= 0 && wanted[static_cast<size_t>(src)]);
  }
  return out;
}

std::string model_split_misfit(const CnnLayer& l, int rows) {
  if (l.kind == CnnKind::pool || l.out_c >= rows) return "";
  return fmt::format("its {} {} split over {} rows: fewer than one per rank", l.out_c,
                     l.kind == CnnKind::fc ? "outputs" : "filters", rows);
}

std::string domain_split_misfit(const CnnLayer& l, int rows, bool split_input,
                                bool input_gradient) {
  if (l.kind == CnnKind::fc) return "a fully connected layer has no image to split";
  if (global_pool(l) || rows <= 1) return "";  // a global pool sums each rank's columns
  if (l.out_w < rows) {
    return fmt::format(
        "its {} output columns split over {} rows: a spatial split finer than one column", l.out_w,
        rows);
  }
  const std::string kernel =
      fmt::format("{}x{} kernel (stride {}, pad {})", l.kernel, l.kernel, l.stride, l.pad);
  if (split_input) {
    const int64_t slab = l.in_w / rows;  // the narrowest neighbour's
    const Halo h = halo_forward(l);
    if (slab < 1) {
      return fmt::format(
          "its {}-column input split over {} rows: a spatial split finer than one column", l.in_w,
          rows);
    }
    if (h.left > slab || h.right > slab) {
      return fmt::format(
          "its {}-column input split over {} rows leaves {} column{} a rank, fewer than the {} "
          "its {} reads beyond them on the {}: a spatial split finer than the kernel",
          l.in_w, rows, slab, slab == 1 ? "" : "s", h.left > slab ? h.left : h.right, kernel,
          h.left > slab ? "left" : "right");
    }
  }
  if (input_gradient) {
    const int64_t slab = l.out_w / rows;
    const Halo h = halo_backward(l);
    if (h.left > slab || h.right > slab) {
      return fmt::format(
          "its {} output columns split over {} rows leave {} a rank, fewer than the {} output-"
          "gradient columns its {} reads beyond them on the {} for its input's gradient: a "
          "spatial split finer than the kernel",
          l.out_w, rows, slab, h.left > slab ? h.left : h.right, kernel,
          h.left > slab ? "left" : "right");
    }
  }
  return "";
}

Op sgd_step(double params, double grad_bytes) {
  Op op;
  op.name = "optimizer.sgd";
  op.kind = OpKind::memory;
  op.streaming = true;
  op.bytes = params * (grad_bytes + 16);  // the gradient, weights 4 + 4, momentum 4 + 4
  op.flops = params * 4;
  return op;
}

// ---- model files --------------------------------------------------------------------------

namespace {

struct Shape {
  int64_t c = 0, h = 0, w = 0;
};

bool flag(const std::string& file, const YAML::Node& n, const std::string& path, const char* key,
          bool fallback) {
  const YAML::Node v = n[key];
  if (!v) return fallback;
  try {
    return v.as<bool>();
  } catch (const YAML::Exception&) {
    throw InputError(config::where(file, v) + ": " + path + "." + key + ": expected true or false");
  }
}

class NetworkReader {
 public:
  NetworkReader(const std::string& file, ModelConfig& m) : file_(file), m_(m) {}

  void read(const YAML::Node& list) {
    if (!list || !list.IsSequence() || list.size() == 0) {
      throw InputError(config::where(file_, list ? list : YAML::Node()) +
                       ": network: expected a non-empty list of layers ({conv: ...}, {pool: ...}, "
                       "{fc: ...}, {bottleneck: ...})");
    }
    cur_ = Shape{m_.input_c, m_.input_h, m_.input_w};
    for (size_t i = 0; i < list.size(); ++i) entry(list[i], fmt::format("network[{}]", i));
    if (m_.cnn.back().kind != CnnKind::fc) {
      throw InputError(config::where(file_, list[list.size() - 1]) + ": network[" +
                       std::to_string(list.size() - 1) +
                       "]: the last layer must be fully connected (the classifier the loss reads)");
    }
  }

 private:
  void entry(const YAML::Node& n, const std::string& path) {
    if (!n.IsMap()) throw InputError(config::where(file_, n) + ": " + path + ": expected a map");
    int kinds = 0;
    for (const char* k : {"conv", "pool", "fc", "bottleneck"}) kinds += n[k] ? 1 : 0;
    if (kinds != 1) {
      throw InputError(config::where(file_, n) + ": " + path +
                       ": expected exactly one of conv, pool, fc or bottleneck");
    }
    // The entry's form is the one of conv, pool, fc and bottleneck it gives.
    static const std::string given;
    config::check_keys(file_, n, path,
                       config::key_names(model_keys(), "network[]", [&](std::string_view k) {
                         return n[std::string(k)] ? &given : nullptr;
                       }));
    if (n["conv"]) {
      const bool bn = flag(file_, n, path, "batchnorm", false);
      conv(n, path, config::get_int(file_, n, path, "conv", 1, config::limits::kHidden),
           static_cast<int>(config::get_int(file_, n, path, "kernel", 1, 1024)),
           static_cast<int>(config::get_int(file_, n, path, "stride", 1, 1024, 1)),
           static_cast<int>(config::get_int(file_, n, path, "pad", 0, 1024, 0)),
           flag(file_, n, path, "bias", !bn), bn, flag(file_, n, path, "relu", true),
           name(n, path, "conv"));
    } else if (n["pool"]) {
      CnnLayer l = begin(CnnKind::pool, name(n, path, "pool"));
      l.pool = static_cast<PoolKind>(
          config::get_choice(file_, n, path, "pool", model_key_choices("network[].pool")));
      if (flag(file_, n, path, "global", false)) {
        for (const char* k : {"kernel", "stride", "pad"}) {
          if (n[k]) {
            throw InputError(config::where(file_, n[k]) + ": " + path + "." + k +
                             ": a global pool covers the whole image; give no " + k);
          }
        }
        if (cur_.h != cur_.w) {
          throw InputError(config::where(file_, n) + ": " + path +
                           ": a global pool needs a square input, got " + std::to_string(cur_.h) +
                           " x " + std::to_string(cur_.w));
        }
        l.kernel = static_cast<int>(cur_.h);
        l.stride = l.kernel;
      } else {
        l.kernel = static_cast<int>(config::get_int(file_, n, path, "kernel", 1, 1024));
        l.stride = static_cast<int>(config::get_int(file_, n, path, "stride", 1, 1024, l.kernel));
        l.pad = static_cast<int>(config::get_int(file_, n, path, "pad", 0, l.kernel / 2, 0));
      }
      l.out_c = cur_.c;
      finish(l, n, path);
    } else if (n["fc"]) {
      CnnLayer l = begin(CnnKind::fc, name(n, path, "fc"));
      l.out_c = config::get_int(file_, n, path, "fc", 1, config::limits::kFfn);
      l.relu = flag(file_, n, path, "relu", true);
      l.bias = flag(file_, n, path, "bias", true);
      l.dropout = config::get_number(file_, n, path, "dropout", 0.0);
      if (!(l.dropout >= 0 && l.dropout < 1)) {
        throw InputError(config::where(file_, n["dropout"]) + ": " + path +
                         ".dropout: expected a probability in [0, 1)");
      }
      l.out_h = l.out_w = 1;
      push(l, n, path);
      cur_ = Shape{l.out_c, 1, 1};
    } else {
      bottleneck(n, path);
    }
  }

  std::string name(const YAML::Node& n, const std::string& path, const char* kind) {
    const int k = ++count_[kind];
    return config::get_string(file_, n, path, "name", fmt::format("{}{}", kind, k));
  }

  // A layer's name keys its programs and its gradients in the job: each its own, and "loss"
  // is the loss's (after the last layer).
  void claim(const std::string& name, const YAML::Node& n, const std::string& path) {
    const std::string at = config::where(file_, n) + ": " + path + ": ";
    if (name.empty()) throw InputError(at + "a layer's name must not be empty");
    if (name == "loss") {
      throw InputError(at + "layer name \"loss\" is reserved (the loss after the last layer)");
    }
    const auto [it, fresh] = names_.emplace(name, path);
    if (!fresh) {
      throw InputError(
          fmt::format("{}layer name \"{}\" is already {}'s; every layer needs a name "
                      "of its own{}",
                      at, name, it->second,
                      n["name"] ? "" : " (this one is generated: give the entry a name)"));
    }
  }

  CnnLayer begin(CnnKind kind, std::string name) const {
    CnnLayer l;
    l.name = std::move(name);
    l.kind = kind;
    l.in_c = cur_.c;
    l.in_h = cur_.h;
    l.in_w = cur_.w;
    return l;
  }

  void push(const CnnLayer& l, const YAML::Node& n, const std::string& path) {
    // Counts stay far inside int64 (and a double's exact integers) downstream: no network has
    // 10^12 weights in a layer or 10^12 activations an image.
    const double weights = l.kind == CnnKind::fc
                               ? static_cast<double>(l.out_c) * l.in_c * l.in_h * l.in_w
                               : static_cast<double>(l.out_c) * l.in_c * l.kernel * l.kernel;
    const double outputs = static_cast<double>(l.out_c) * l.out_h * l.out_w;
    if (weights > 1e12 || outputs > 1e12) {
      throw InputError(fmt::format(
          "{}: network: layer {} has {:.3g} weights and {:.3g} outputs an image, more than "
          "hetsim simulates (10^12 each)",
          file_, l.name, weights, outputs));
    }
    if (static_cast<long>(m_.cnn.size()) >= config::limits::kLayers) {
      throw InputError(file_ + ": network: more than " + std::to_string(config::limits::kLayers) +
                       " layers");
    }
    claim(l.name, n, path);
    m_.cnn.push_back(l);
  }

  // Output size of a window over the input: (in + 2 pad - kernel) / stride + 1 (PyTorch's
  // floor mode); an error when the window does not fit.
  void finish(CnnLayer& l, const YAML::Node& n, const std::string& path) {
    auto out = [&](int64_t in) {
      if (in + 2 * l.pad < l.kernel) {
        throw InputError(config::where(file_, n) + ": " + path + " (" + l.name + "): kernel " +
                         std::to_string(l.kernel) + " is larger than its " + std::to_string(in) +
                         "-pixel input (padded by " + std::to_string(l.pad) + ")");
      }
      return (in + 2 * l.pad - l.kernel) / l.stride + 1;
    };
    l.out_h = out(l.in_h);
    l.out_w = out(l.in_w);
    push(l, n, path);
    cur_ = Shape{l.out_c, l.out_h, l.out_w};
  }

  void conv(const YAML::Node& n, const std::string& path, int64_t filters, int kernel, int stride,
            int pad, bool bias, bool bn, bool relu, std::string name) {
    CnnLayer l = begin(CnnKind::conv, std::move(name));
    l.out_c = filters;
    l.kernel = kernel;
    l.stride = stride;
    l.pad = pad;
    l.bias = bias;
    l.batchnorm = bn;
    l.relu = relu;
    finish(l, n, path);
  }

  // ResNet v1.5 bottleneck blocks (He et al. 2016; torchvision's resnet50): 1x1 to the width,
  // 3x3 (the block's stride on the first), 1x1 to 4 x the width, each with batch norm; the
  // first block's shortcut a strided 1x1 with batch norm where the shape changes, the identity
  // otherwise; the ReLU after the sum.
  void bottleneck(const YAML::Node& n, const std::string& path) {
    const int64_t width = config::get_int(file_, n, path, "bottleneck", 1, config::limits::kHidden);
    const long blocks = config::get_int(file_, n, path, "blocks", 1, 1024);
    const int stride = static_cast<int>(config::get_int(file_, n, path, "stride", 1, 16, 1));
    const std::string group = name(n, path, "layer");
    for (long b = 0; b < blocks; ++b) {
      const std::string prefix = fmt::format("{}.{}", group, b);
      const int s = b == 0 ? stride : 1;
      // The block's input: the layer before, or the images for a network's first block.
      const int input = m_.cnn.empty() ? CnnLayer::kImages : static_cast<int>(m_.cnn.size()) - 1;
      const Shape in = cur_;
      int shortcut = input;
      if (s != 1 || in.c != 4 * width) {
        conv(n, path, 4 * width, 1, s, 0, false, true, false, prefix + ".downsample");
        m_.cnn.back().input_from = input;
        shortcut = static_cast<int>(m_.cnn.size()) - 1;
        cur_ = in;
      }
      conv(n, path, width, 1, 1, 0, false, true, true, prefix + ".conv1");
      m_.cnn.back().input_from = input;
      conv(n, path, width, 3, s, 1, false, true, true, prefix + ".conv2");
      conv(n, path, 4 * width, 1, 1, 0, false, true, true, prefix + ".conv3");
      m_.cnn.back().residual_from = shortcut;
    }
  }

  const std::string& file_;
  ModelConfig& m_;
  Shape cur_;
  std::map<std::string, int> count_;
  std::map<std::string, std::string> names_;  // layer name -> the entry that gave it
};

}  // namespace

ModelConfig load_cnn_yaml(const YAML::Node& root, const std::string& file) {
  using namespace config;
  const std::string cnn = "cnn";
  check_keys(file, root, "", key_names(model_keys(), "", "family", &cnn));
  ModelConfig m;
  m.source = file;
  m.name = get_string(file, root, "", "name");
  m.family = "cnn";
  const YAML::Node in = require(file, root, "", "input");
  check_keys(file, in, "input", key_names(model_keys(), "input"));
  m.input_c = get_int(file, in, "input", "channels", 1, limits::kHidden);
  m.input_h = get_int(file, in, "input", "height", 1, 1L << 16);
  m.input_w = get_int(file, in, "input", "width", 1, 1L << 16);
  NetworkReader(file, m).read(root["network"]);
  m.layers = static_cast<int>(m.cnn.size());
  m.sequence = 1;  // one image is one sample
  m.vocab = static_cast<int>(m.cnn.back().out_c);
  m.tied_embeddings = false;
  m.causal = false;
  return m;
}

// ---- layer programs -----------------------------------------------------------------------

namespace {

// Where a layer's output lives on the ranks of a column: whole on every rank, split by
// channels (a model-split layer's), or split by image columns (a domain-split layer's).
enum class Layout { full, channels, spatial };

class ProgramBuilder {
 public:
  ProgramBuilder(const ModelConfig& m, const std::vector<LayerSplit>& splits, int rows,
                 int64_t batch, Precision p, const std::string& where)
      : m_(m),
        splits_(splits),
        rows_(rows),
        b_(batch),
        e_(element_bytes(p)),
        where_(where),
        layout_(m.cnn.size(), Layout::full),
        gathered_(m.cnn.size(), false),
        wanted_(output_gradients(m)),
        input_gradient_(cnn_input_gradients(m)) {}

  std::vector<CnnLayerProgram> build() {
    std::vector<CnnLayerProgram> out;
    for (size_t l = 0; l < m_.cnn.size(); ++l) out.push_back(layer(static_cast<int>(l)));
    out.push_back(loss());
    return out;
  }

 private:
  double elems(int64_t n) const { return static_cast<double>(b_) * static_cast<double>(n); }

  Layout layout_of(int src) const {
    return src == CnnLayer::kImages ? Layout::full : layout_[static_cast<size_t>(src)];
  }
  // Whether every rank holds src's output whole (the images; a whole layout; or gathered for
  // an earlier consumer, in forward order).
  bool whole(int src) const {
    return src == CnnLayer::kImages || layout_[static_cast<size_t>(src)] == Layout::full ||
           gathered_[static_cast<size_t>(src)];
  }

  static Step comm(const std::string& name, CommKind kind, double bytes) {
    Step s;
    s.op.name = name;
    s.comm = kind;
    s.comm_bytes = bytes;
    return s;
  }
  void memory(std::vector<Step>& steps, const std::string& name, double bytes) const {
    Op op;
    op.name = name;
    op.kind = OpKind::memory;
    op.bytes = bytes;
    steps.push_back(Step{op});
  }
  void gemm(std::vector<Step>& steps, const std::string& name, int64_t m, int64_t n,
            int64_t k) const {
    Op op;
    op.name = name;
    op.kind = OpKind::gemm;
    op.m = m, op.n = n, op.k = k;
    op.flops = 2.0 * m * n * k;
    op.model_flops = op.flops;
    op.bytes =
        e_ * (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
    steps.push_back(Step{op});
  }

  // Forward: src's output (`bytes` whole) in the layout `need` this layer reads it in. Nothing
  // to send from a whole copy (each rank takes its part) or the same layout; else an all-gather
  // to whole (the copy then serves later consumers too) or an all-to-all between channels and
  // image columns (`name`: the step's).
  void to_layout(int src, Layout need, const std::string& name, double bytes,
                 std::vector<Step>& fwd) {
    if (whole(src) || layout_of(src) == need) return;
    if (need == Layout::full) {
      fwd.push_back(comm(name, CommKind::allgather, bytes));
      gathered_[static_cast<size_t>(src)] = true;
    } else {
      fwd.push_back(comm(name, CommKind::alltoall, bytes / rows_));
    }
  }
  // Backward, independent of any gathered copy: this layer's gradient for src (held in
  // `have`, `bytes` whole) into src's layout, which src's backward reads. Nothing where src
  // wants no gradient (the images, or nothing before it trains), from a whole gradient (each
  // rank takes its part) or in the same layout; else an all-gather (src's output is whole on
  // every rank and its backward runs whole: `gather`) or an all-to-all (`alltoall`).
  void gradient_to(int src, Layout have, const std::string& gather, const std::string& alltoall,
                   double bytes, std::vector<Step>& bwd) const {
    if (src == CnnLayer::kImages || !wanted_[static_cast<size_t>(src)]) return;
    const Layout need = layout_of(src);
    if (have == Layout::full || have == need) return;
    if (need == Layout::full) {
      bwd.push_back(comm(gather, CommKind::allgather, bytes));
    } else {
      bwd.push_back(comm(alltoall, CommKind::alltoall, bytes / rows_));
    }
  }

  [[noreturn]] void refuse(const CnnLayer& l, const std::string& why) const {
    throw InputError(
        fmt::format("{}: layer {} ({}): {}", where_, l.name, to_string(split_of(l)), why));
  }
  // A split that does not fit, `why`; where the other does not fit either, the error says so.
  [[noreturn]] void refuse_split(const CnnLayer& l, LayerSplit split, const std::string& why,
                                 bool split_input, bool input_gradient) const {
    const bool by_model = split == LayerSplit::model;
    const std::string other = by_model ? domain_split_misfit(l, rows_, split_input, input_gradient)
                                       : model_split_misfit(l, rows_);
    if (other.empty())
      refuse(l, by_model || l.kind != CnnKind::fc ? why : why + "; split it by model");
    throw InputError(
        fmt::format("{}: layer {}: no split over {} rows fits: by model, {}; by "
                    "domain, {}",
                    where_, l.name, rows_, by_model ? why : other, by_model ? other : why));
  }
  LayerSplit split_of(const CnnLayer& l) const {
    const size_t i = static_cast<size_t>(&l - m_.cnn.data());
    return i < splits_.size() ? splits_[i] : LayerSplit::batch;
  }

  // The activations that follow a layer's main kernel: batch norm (its statistics all-reduced
  // over the column when the layer is split by image columns, as a synchronised batch norm
  // must), the residual sum, ReLU, dropout; `n` local output elements.
  void epilogue(const CnnLayer& l, double n, bool spatial, std::vector<Step>& fwd,
                std::vector<Step>& bwd) {
    const double bytes = e_ * n;
    // Kept for the backward: the batch norm's input, the ReLU's output, the dropout mask.
    stored_ += (l.batchnorm ? bytes : 0) + (l.relu ? bytes : 0) + (l.dropout > 0 ? n : 0);
    std::vector<Step> back;  // in forward order, reversed into bwd at the end
    if (l.batchnorm) {
      memory(fwd, l.name + ".norm.bn", 3 * bytes);
      if (spatial) {
        fwd.push_back(comm(l.name + ".bn.stats", CommKind::allreduce, 4.0 * 2 * l.out_c));
        back.push_back(comm(l.name + ".bn.stats.bwd", CommKind::allreduce, 4.0 * 2 * l.out_c));
      }
      memory(back, l.name + ".norm.bn.bwd", 5 * bytes);
    }
    if (l.residual_from != CnnLayer::kNoResidual) {
      memory(fwd, l.name + ".residual_add", 3 * bytes);
      memory(back, l.name + ".residual_add.bwd", 3 * bytes);
    }
    if (l.relu) {
      memory(fwd, l.name + ".relu", 2 * bytes);
      memory(back, l.name + ".relu.bwd", 3 * bytes);
    }
    if (l.dropout > 0) {
      memory(fwd, l.name + ".dropout", 2 * bytes + n);
      memory(back, l.name + ".dropout.bwd", 2 * bytes + n);
    }
    for (auto it = back.rbegin(); it != back.rend(); ++it) bwd.push_back(*it);
  }

  // A residual sum in this layer's layout of a shortcut held in another: converted forward
  // unless a whole copy is at hand, and the sum's gradient converted back whatever the forward
  // did.
  void shortcut(const CnnLayer& l, Layout mine, std::vector<Step>& fwd, std::vector<Step>& bwd) {
    if (l.residual_from == CnnLayer::kNoResidual) return;
    const int src = l.residual_from;
    const double bytes = e_ * elems(l.out_elems());
    to_layout(src, mine, l.name + ".shortcut", bytes, fwd);
    gradient_to(src, mine, l.name + ".shortcut.bwd", l.name + ".shortcut.bwd", bytes, bwd);
  }

  // A layer's steps as its split builds them, before they are put in order.
  struct LayerParts {
    std::vector<Step> fwd, bwd_main, bwd_epi, bwd_in;
    Layout out = Layout::full;       // where the output is left
    Layout gradient = Layout::full;  // where the input's gradient is left
  };

  // How layer `l` is split: its own split, or a pool's that follows its input's layout.
  LayerSplit choose_split(const CnnLayer& l, int src, bool split_input, bool dx) {
    LayerSplit split = rows_ == 1 ? LayerSplit::batch : split_of(l);
    if (l.kind == CnnKind::pool) {
      // A pooling layer keeps its input's layout; split by image columns where the split does
      // not fit it, it gathers its input and pools it whole.
      const Layout in = layout_of(src);
      const bool fits = domain_split_misfit(l, rows_, split_input, dx).empty();
      split = rows_ == 1                              ? LayerSplit::batch
              : in == Layout::spatial && fits         ? LayerSplit::domain
              : in == Layout::channels && split_input ? LayerSplit::model
                                                      : LayerSplit::batch;
    } else if (rows_ > 1 && split == LayerSplit::batch) {
      refuse(l, fmt::format("every layer of a grid with {} rows is split over them; give it model "
                            "or domain (batch is the grid with rows: 1)",
                            rows_));
    }
    return split;
  }

  // Split by output channels over the grid's rows (Gholami's model parallelism).
  void model_split(const CnnLayer& l, int src, bool dx, bool split_input, double in_bytes,
                   CnnLayerProgram& prog, LayerParts& parts) {
    if (const std::string why = model_split_misfit(l, rows_); !why.empty())
      refuse_split(l, LayerSplit::model, why, split_input, dx);
    const int64_t local = ceil_div(l.out_c, rows_);
    if (l.kind == CnnKind::pool) {
      // Its input's channels, pooled on their rank; the gradient stays by channels.
      kernels(l, local, l.in_w, l.out_w, l.pad, parts.fwd, parts.bwd_main, dx);
      stored_ += in_bytes / rows_;
      parts.gradient = Layout::channels;
    } else {
      // The input whole on every rank: gathered from the ranks' channels or image columns.
      to_layout(src, Layout::full, l.name + ".gather", in_bytes, parts.fwd);
      kernels(l, local, l.in_w, l.out_w, l.pad, parts.fwd, parts.bwd_main, dx);
      stored_ += in_bytes;
      // The input gradient: each rank's filters' share of every input element, summed.
      if (dx) parts.bwd_in.push_back(comm(l.name + ".dgrad.sum", CommKind::allreduce, in_bytes));
    }
    epilogue(l, elems(local * l.out_h * l.out_w), false, parts.fwd, parts.bwd_epi);
    parts.out = Layout::channels;
    prog.params = l.kind == CnnKind::pool
                      ? 0.0
                      : static_cast<double>(l.params()) / rows_;  // rows of W (and b)
  }

  // Split by image columns over the grid's rows, with halos (Gholami's domain parallelism).
  void domain_split(const CnnLayer& l, int src, bool dx, bool split_input, double in_bytes,
                    CnnLayerProgram& prog, LayerParts& parts) {
    if (const std::string why = domain_split_misfit(l, rows_, split_input, dx); !why.empty())
      refuse_split(l, LayerSplit::domain, why, split_input, dx);
    // A global pool reduces each rank's columns to partial sums.
    const bool global = global_pool(l);
    const Halo hf = global ? Halo{} : halo_forward(l);
    const Halo hb = global ? Halo{} : halo_backward(l);
    // Channels to image columns: every rank's channels of its columns (an all-to-all); from
    // a whole input each rank takes its columns.
    to_layout(src, Layout::spatial, l.name + ".scatter", in_bytes, parts.fwd);
    // The halo from the neighbours, where they hold it: each side's columns (the exchange
    // carries their mean to each neighbour: an inner rank sends both sides' in all).
    if (split_input && hf.total() > 0) {
      parts.fwd.push_back(comm(l.name + ".halo", CommKind::halo,
                               e_ * elems(l.in_c * l.in_h) * static_cast<double>(hf.total()) / 2));
    }
    const int64_t cols = global ? 1 : ceil_div(l.out_w, rows_);
    // The rank's output columns from its input columns and the halo: no padding across the
    // cut (the outer ranks' padding is within the kernel's reach of the halo).
    const int64_t in_cols = global ? ceil_div(l.in_w, rows_) : (cols - 1) * l.stride + l.kernel;
    if (dx && hb.total() > 0) {
      parts.bwd_main.push_back(
          comm(l.name + ".halo.bwd", CommKind::halo,
               e_ * elems(l.out_c * l.out_h) * static_cast<double>(hb.total()) / 2));
    }
    kernels(l, l.out_c, in_cols, cols, 0, parts.fwd, parts.bwd_main, dx);
    stored_ += e_ * elems(l.in_c * l.in_h * in_cols);
    if (global) {
      // A global pool of image columns: each rank's partial sums, summed.
      parts.fwd.push_back(comm(l.name + ".sum", CommKind::allreduce, e_ * elems(l.out_c)));
      parts.out = Layout::full;
    } else {
      parts.out = Layout::spatial;
    }
    parts.gradient = Layout::spatial;
    epilogue(l, elems(l.out_c * l.out_h * cols), true, parts.fwd, parts.bwd_epi);
    prog.params = static_cast<double>(l.params());
    prog.grid_gradients = l.kind != CnnKind::pool;
  }

  CnnLayerProgram layer(int i) {
    const CnnLayer& l = m_.cnn[static_cast<size_t>(i)];
    CnnLayerProgram prog;
    const int src = cnn_source(m_, i);
    // Whether the backward computes the input's gradient: never for the images, nor where
    // nothing before this layer trains (a pool reading the images, the layer after it).
    const bool dx = input_gradient_[static_cast<size_t>(i)];
    // Whether the input is split over the ranks as this layer reads it (else each rank holds
    // it whole: the images, a whole layout, a copy gathered for an earlier consumer).
    const bool split_input = !whole(src);
    LayerParts parts;
    const LayerSplit split = choose_split(l, src, split_input, dx);
    prog.split = split;
    stored_ = 0;
    const double in_bytes = e_ * elems(l.in_elems());
    switch (split) {
      case LayerSplit::batch:
        // On a grid (a pool that cannot follow its input's split): the input gathered whole,
        // pooled on every rank, its gradient whole.
        to_layout(src, Layout::full, l.name + ".gather", in_bytes, parts.fwd);
        kernels(l, l.out_c, l.in_w, l.out_w, l.pad, parts.fwd, parts.bwd_main, dx);
        epilogue(l, elems(l.out_elems()), false, parts.fwd, parts.bwd_epi);
        stored_ += in_bytes;
        prog.params = static_cast<double>(l.params());
        break;
      case LayerSplit::model:
        model_split(l, src, dx, split_input, in_bytes, prog, parts);
        break;
      case LayerSplit::domain:
        domain_split(l, src, dx, split_input, in_bytes, prog, parts);
        break;
    }
    if (dx)
      gradient_to(src, parts.gradient, l.name + ".dgrad.gather", l.name + ".scatter.bwd", in_bytes,
                  parts.bwd_in);
    layout_[static_cast<size_t>(i)] = parts.out;
    prog.activations = stored_;
    shortcut(l, parts.out, parts.fwd, parts.bwd_epi);
    prog.forward = std::move(parts.fwd);
    // Backward: the epilogue's gradients, the kernels' (halo first), the input's collective.
    for (auto* part : {&parts.bwd_epi, &parts.bwd_main, &parts.bwd_in})
      prog.backward.insert(prog.backward.end(), part->begin(), part->end());
    return prog;
  }

  // The layer's kernels on this rank: `k` output channels (filters, outputs) over `out_w`
  // output columns from `in_w` input columns; the input's gradient only where `dx`.
  void kernels(const CnnLayer& l, int64_t k, int64_t in_w, int64_t out_w, int pad_w,
               std::vector<Step>& fwd, std::vector<Step>& bwd, bool dx) const {
    switch (l.kind) {
      case CnnKind::conv: {
        ConvShape c;
        c.n = b_, c.c = l.in_c, c.h = l.in_h, c.w = in_w;
        c.k = k, c.r = c.s = l.kernel;
        c.stride = l.stride, c.pad_h = l.pad, c.pad_w = pad_w;
        fwd.push_back(Step{conv_op(l.name, c, e_)});
        c.pass = ConvPass::weight_grad;
        bwd.push_back(Step{conv_op(l.name + ".wgrad", c, e_)});
        if (dx) {
          c.pass = ConvPass::data_grad;
          bwd.push_back(Step{conv_op(l.name + ".dgrad", c, e_)});
        }
        break;
      }
      case CnnKind::fc:
        gemm(fwd, l.name, b_, k, l.in_elems());
        gemm(bwd, l.name + ".wgrad", l.in_elems(), k, b_);
        if (dx) gemm(bwd, l.name + ".dgrad", b_, l.in_elems(), k);
        break;
      case CnnKind::pool: {
        // A channel split pools its own channels; an image-column split its columns. Its
        // backward is its input's gradient only (no weights).
        const double in = elems(l.in_h * in_w) * k;  // a pool keeps its channels
        const double o = elems(l.out_h * out_w) * k;
        memory(fwd, l.name, e_ * (in + o) + (l.pool == PoolKind::max ? o : 0));
        if (dx) memory(bwd, l.name + ".bwd", e_ * (in + o) + (l.pool == PoolKind::max ? o : 0));
        break;
      }
    }
  }

  // Softmax cross-entropy over the classifier's outputs, gathered whole first when they are
  // split (their gradient is then every rank's own share: nothing to send back).
  CnnLayerProgram loss() {
    CnnLayerProgram prog;
    const int last = static_cast<int>(m_.cnn.size()) - 1;
    const double classes = elems(m_.cnn.back().out_c);
    if (!whole(last))
      prog.forward.push_back(comm("logits.gather", CommKind::allgather, e_ * classes));
    memory(prog.forward, "cross_entropy", 4.0 * classes * 2);
    memory(prog.backward, "cross_entropy.bwd", 4.0 * classes * 2);
    return prog;
  }

  const ModelConfig& m_;
  const std::vector<LayerSplit>& splits_;
  int rows_;
  int64_t b_;
  int e_;
  const std::string& where_;
  std::vector<Layout> layout_;
  std::vector<bool> gathered_;
  std::vector<bool> wanted_;          // per layer: its output's gradient is wanted
  std::vector<bool> input_gradient_;  // per layer: it computes its input's gradient
  double stored_ = 0;                 // the layer being built keeps this much for its backward
};

}  // namespace

std::vector<CnnLayerProgram> cnn_programs(const ModelConfig& model,
                                          const std::vector<LayerSplit>& splits, int rows,
                                          int64_t batch, Precision precision,
                                          const std::string& where) {
  return ProgramBuilder(model, splits, rows, batch, precision, where).build();
}

}  // namespace hetsim::workload
