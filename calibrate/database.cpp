// HDF5 and CSV storage of calibration data; see database.h. Uses HDF5's C API with its error
// printing off: every failure becomes an InputError or RunError naming the file.
#include "calibrate/database.h"

#include <hdf5.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "sim/core/error.h"

namespace hetsim::calibrate {

std::string Database::device_type() const {
  auto it = attrs.find("device_type");
  return it == attrs.end() ? "" : it->second;
}

size_t Database::size() const {
  size_t n = 0;
  for (const auto& [_, v] : gemm) n += v.size();
  for (const auto& [_, v] : attention) n += v.size();
  for (const auto& [_, v] : memory) n += v.size();
  for (const auto& [_, v] : collective) n += v.size();
  for (const auto& [_, v] : copy) n += v.size();
  for (const auto& [_, v] : conv) n += v.size();
  return n;
}

const char* conv_pass_name(workload::ConvPass p) {
  switch (p) {
    case workload::ConvPass::forward:
      return "forward";
    case workload::ConvPass::data_grad:
      return "data_grad";
    case workload::ConvPass::weight_grad:
      return "weight_grad";
  }
  return "forward";
}

std::optional<workload::ConvPass> conv_pass_from_name(const std::string& name) {
  for (auto p : {workload::ConvPass::forward, workload::ConvPass::data_grad,
                 workload::ConvPass::weight_grad})
    if (name == conv_pass_name(p)) return p;
  return std::nullopt;
}

namespace {

template <typename Point>
void add_spread(std::vector<TableSpread>& out, const std::string& table,
                const std::vector<Point>& points) {
  std::vector<double> spreads;
  for (const Point& p : points) {
    if (p.t.median_s > 0) spreads.push_back((p.t.p90_s - p.t.p10_s) / p.t.median_s);
  }
  if (spreads.empty()) return;
  const size_t mid = spreads.size() / 2;
  std::nth_element(spreads.begin(), spreads.begin() + mid, spreads.end());
  double median = spreads[mid];
  if (spreads.size() % 2 == 0) {
    median = (median + *std::max_element(spreads.begin(), spreads.begin() + mid)) / 2;
  }
  out.push_back(TableSpread{table, spreads.size(), median});
}

}  // namespace

std::vector<TableSpread> table_spreads(const Database& db) {
  std::vector<TableSpread> out;
  for (const auto& [dtype, pts] : db.gemm) add_spread(out, "gemm/" + dtype, pts);
  for (const auto& [dtype, pts] : db.attention) add_spread(out, "attention/" + dtype, pts);
  for (const auto& [name, pts] : db.memory) add_spread(out, "memory/" + name, pts);
  for (const auto& [name, pts] : db.collective) add_spread(out, "collective/" + name, pts);
  for (const auto& [name, pts] : db.copy) add_spread(out, "copy/" + name, pts);
  for (const auto& [dtype, pts] : db.conv) add_spread(out, "conv/" + dtype, pts);
  return out;
}

std::vector<std::string> spread_warnings(const Database& db) {
  std::vector<std::string> out;
  // A profiler trace's runs of one shape differ by where they ran in the iteration (a dropout's
  // forward and backward, a micro-batch's first buffers), not by noise: their spread says
  // nothing of the machine (calibrate/trace_import.h).
  if (db.attrs.count("backend") && db.attrs.at("backend") == "torch-profiler-trace") return out;
  for (const TableSpread& t : table_spreads(db)) {
    if (t.median_spread <= kMaxMedianSpread) continue;
    out.push_back(fmt::format(
        "calibration {} table {}: median spread {:.0f}% over {} points exceeds {:.0f}% (spread: "
        "(p90 - p10) / median of repeated runs); measured on a loaded machine? Its times are not "
        "to be trusted: re-measure on a quiet one (hetsim calibrate check shows the held-out "
        "error)",
        db.source, t.table, 100 * t.median_spread, t.points, 100 * kMaxMedianSpread));
  }
  return out;
}

namespace {

// RAII for HDF5 identifiers.
struct Id {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id >= 0 && close) close(id);
  }
  bool ok() const { return id >= 0; }
};

struct Quiet {  // HDF5 prints its error stack by default; we report our own errors.
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  Quiet() {
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Quiet() { H5Eset_auto2(H5E_DEFAULT, func, data); }
};

void write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, std::max<size_t>(1, value.size()));
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id attr(H5Acreate2(obj, name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr.id, type.id, value.empty() ? " " : value.data()) < 0) {
    throw RunError("cannot write attribute " + name);
  }
}

void write_int_attr(hid_t obj, const std::string& name, int64_t value) {
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id attr(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.id, H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose);
  if (!attr.ok() || H5Awrite(attr.id, H5T_NATIVE_INT64, &value) < 0) {
    throw RunError("cannot write attribute " + name);
  }
}

template <typename T>
void write_dataset(hid_t group, const std::string& name, const std::vector<T>& v) {
  const hsize_t n = v.size();
  Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  const hid_t file_type = std::is_same_v<T, double> ? H5T_IEEE_F64LE : H5T_STD_I64LE;
  const hid_t mem_type = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  Id ds(H5Dcreate2(group, name.c_str(), file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
  if (!ds.ok() ||
      (n > 0 && H5Dwrite(ds.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)) {
    throw RunError("cannot write dataset " + name);
  }
}

hid_t make_group(hid_t parent, const std::string& path) {
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id, 1);
  return H5Gcreate2(parent, path.c_str(), lcpl.id, H5P_DEFAULT, H5P_DEFAULT);
}

void write_timings(hid_t g, const std::vector<Timing>& t) {
  std::vector<double> med, p10, p90;
  std::vector<int64_t> reps;
  for (const Timing& x : t) {
    med.push_back(x.median_s);
    p10.push_back(x.p10_s);
    p90.push_back(x.p90_s);
    reps.push_back(x.repetitions);
  }
  write_dataset(g, "median_s", med);
  write_dataset(g, "p10_s", p10);
  write_dataset(g, "p90_s", p90);
  write_dataset(g, "repetitions", reps);
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw InputError(path_ + ": " + where + ": " + why);
  }

  template <typename T>
  std::vector<T> dataset(hid_t group, const std::string& gpath, const std::string& name) const {
    Id ds(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) fail(gpath, "missing dataset \"" + name + "\"");
    Id space(H5Dget_space(ds.id), H5Sclose);
    if (H5Sget_simple_extent_ndims(space.id) != 1) fail(gpath + "/" + name, "expected 1 dimension");
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.id, &n, nullptr);
    std::vector<T> v(n);
    const hid_t mem = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
    if (n > 0 && H5Dread(ds.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
      fail(gpath + "/" + name, "unreadable (truncated or corrupt)");
    }
    return v;
  }

  // A dataset added to the schema after files were written: `fallback` everywhere when absent.
  std::vector<int64_t> optional_dataset(hid_t group, const std::string& gpath,
                                        const std::string& name, size_t n, int64_t fallback) const {
    if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) return std::vector<int64_t>(n, fallback);
    auto v = dataset<int64_t>(group, gpath, name);
    if (v.size() != n) fail(gpath, "datasets of different lengths");
    return v;
  }

  std::vector<Timing> timings(hid_t g, const std::string& gpath, size_t n) const {
    const auto med = dataset<double>(g, gpath, "median_s");
    const auto p10 = dataset<double>(g, gpath, "p10_s");
    const auto p90 = dataset<double>(g, gpath, "p90_s");
    const auto reps = dataset<int64_t>(g, gpath, "repetitions");
    if (med.size() != n || p10.size() != n || p90.size() != n || reps.size() != n) {
      fail(gpath, "datasets of different lengths");
    }
    std::vector<Timing> t(n);
    for (size_t i = 0; i < n; ++i) {
      if (!(med[i] > 0)) fail(gpath + "/median_s", "expected positive times");
      t[i] = Timing{med[i], p10[i], p90[i], reps[i]};
    }
    return t;
  }

  // Calls f(name, group id, group path) for each subgroup of `path`, if it exists.
  void each_subgroup(
      hid_t file, const std::string& path,
      const std::function<void(const std::string&, hid_t, const std::string&)>& f) const {
    if (H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) return;
    Id g(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.ok()) fail(path, "not a group");
    H5G_info_t info;
    H5Gget_info(g.id, &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char name[256] = {};
      H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
      Id sub(H5Gopen2(g.id, name, H5P_DEFAULT), H5Gclose);
      if (!sub.ok()) fail(path + "/" + name, "not a group");
      f(name, sub.id, path + "/" + name);
    }
  }

 private:
  std::string path_;
};

std::string read_string_attr(hid_t obj, const char* name) {
  Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) return "";
  Id type(H5Aget_type(attr.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_STRING) return "";
  // Match the file's character set (h5py writes UTF-8) and padding; read one byte more than a
  // fixed-length string holds so a string without a terminator keeps its last character.
  if (H5Tis_variable_str(type.id) > 0) {
    char* s = nullptr;
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    if (H5Aread(attr.id, mem.id, &s) < 0 || !s) return "";
    std::string out(s);
    H5free_memory(s);
    return out;
  }
  const size_t n = H5Tget_size(type.id);
  std::string out(n + 1, '\0');
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.id, n + 1);
  H5Tset_cset(mem.id, H5Tget_cset(type.id));
  H5Tset_strpad(mem.id, H5T_STR_NULLTERM);
  if (H5Aread(attr.id, mem.id, out.data()) < 0) return "";
  while (!out.empty() && (out.back() == '\0' || out.back() == ' ')) out.pop_back();
  return out;
}

// The datasets of a /conv/<dtype> group besides the timings, in ConvShape's order.
constexpr const char* kConvColumns[11] = {"n", "c",      "h",     "w",     "k",   "r",
                                          "s", "stride", "pad_h", "pad_w", "pass"};

// A convolution point from its 11 columns into `out`; returns what is wrong with them, or "".
std::string conv_point(const int64_t v[11], const Timing& t, ConvPoint& out) {
  workload::ConvShape c;
  c.n = v[0], c.c = v[1], c.h = v[2], c.w = v[3], c.k = v[4], c.r = v[5], c.s = v[6];
  c.stride = v[7], c.pad_h = v[8], c.pad_w = v[9];
  for (int j = 0; j < 8; ++j)
    if (v[j] < 1) return fmt::format("{}: expected at least 1, got {}", kConvColumns[j], v[j]);
  if (c.pad_h < 0 || c.pad_w < 0) return "pad_h, pad_w: expected 0 or more";
  if (v[10] < 0 || v[10] > 2)
    return fmt::format("pass: expected 0 (forward), 1 (data_grad) or 2 (weight_grad), got {}",
                       v[10]);
  c.pass = static_cast<workload::ConvPass>(v[10]);
  if (c.p() < 1 || c.q() < 1)
    return fmt::format("a {}x{} filter does not fit the padded {}x{} input", c.r, c.s,
                       c.h + 2 * c.pad_h, c.w + 2 * c.pad_w);
  out = ConvPoint{c, t};
  return "";
}

// The root group's schema version (an integer attribute; this hetsim reads one version only) and
// string attributes; a database names its device type.
void read_root(const Reader& r, hid_t file, Database& db) {
  {
    Id attr(H5Aopen(file, "schema_version", H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) {
      r.fail("/", "no schema_version attribute: not a hetsim calibration database");
    }
    int64_t version = 0;
    if (H5Aread(attr.id, H5T_NATIVE_INT64, &version) < 0) r.fail("/", "unreadable schema_version");
    if (version != kSchemaVersion) {
      r.fail("/", "schema version " + std::to_string(version) + " (this hetsim reads version " +
                      std::to_string(kSchemaVersion) + ")");
    }
  }
  for (const char* a : {"backend", "device_type", "device_name", "host", "date", "hetsim_version",
                        "hetsim_commit", "driver", "cuda_version", "cublas_version",
                        "cudnn_version", "nccl_version", "blas", "mpi", "clocks"}) {
    const std::string v = read_string_attr(file, a);
    if (!v.empty()) db.attrs[a] = v;
  }
  if (db.device_type().empty()) r.fail("/", "missing device_type attribute");
}

void read_gemm(const Reader& r, hid_t file, Database& db) {
  r.each_subgroup(file, "/gemm", [&](const std::string& dtype, hid_t g, const std::string& gp) {
    const auto m = r.dataset<int64_t>(g, gp, "m"), n = r.dataset<int64_t>(g, gp, "n"),
               k = r.dataset<int64_t>(g, gp, "k"), b = r.dataset<int64_t>(g, gp, "batch");
    if (n.size() != m.size() || k.size() != m.size() || b.size() != m.size()) {
      r.fail(gp, "datasets of different lengths");
    }
    const auto t = r.timings(g, gp, m.size());
    auto& out = db.gemm[dtype];
    for (size_t i = 0; i < m.size(); ++i) out.push_back(GemmPoint{m[i], n[i], k[i], b[i], t[i]});
  });
}

void read_attention(const Reader& r, hid_t file, Database& db) {
  r.each_subgroup(
      file, "/attention", [&](const std::string& dtype, hid_t g, const std::string& gp) {
        const auto b = r.dataset<int64_t>(g, gp, "batch"), h = r.dataset<int64_t>(g, gp, "heads"),
                   s = r.dataset<int64_t>(g, gp, "seq"), d = r.dataset<int64_t>(g, gp, "head_dim"),
                   c = r.dataset<int64_t>(g, gp, "causal"),
                   bw = r.dataset<int64_t>(g, gp, "backward");
        const size_t n = b.size();
        if (h.size() != n || s.size() != n || d.size() != n || c.size() != n || bw.size() != n) {
          r.fail(gp, "datasets of different lengths");
        }
        // `fused` came with the cuDNN path; files without it measured the unfused one.
        const auto fu = r.optional_dataset(g, gp, "fused", n, 0);
        const auto t = r.timings(g, gp, n);
        auto& out = db.attention[dtype];
        for (size_t i = 0; i < n; ++i) {
          out.push_back(
              AttentionPoint{b[i], h[i], s[i], d[i], c[i] != 0, bw[i] != 0, t[i], fu[i] != 0});
        }
      });
}

// A group of points by message or buffer size (memory, collective, copy) under `root`; `ranks`:
// with their ranks and nodes (collectives).
void read_sizes(const Reader& r, hid_t file, const char* root,
                std::map<std::string, std::vector<SizePoint>>& into, bool ranks) {
  r.each_subgroup(file, root, [&](const std::string& name, hid_t g, const std::string& gp) {
    const auto bytes = r.dataset<double>(g, gp, "bytes");
    std::vector<int64_t> rk(bytes.size(), 1), nodes(bytes.size(), 1);
    if (ranks) {
      rk = r.dataset<int64_t>(g, gp, "ranks");
      nodes = r.optional_dataset(g, gp, "nodes", bytes.size(), 1);  // absent: one node
    }
    if (rk.size() != bytes.size()) r.fail(gp, "datasets of different lengths");
    const auto t = r.timings(g, gp, bytes.size());
    auto& out = into[name];
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (rk[i] < 1 || nodes[i] < 1 || nodes[i] > rk[i]) {
        r.fail(gp, fmt::format("entry {}: expected 1 <= nodes <= ranks, got ranks {} nodes {}", i,
                               rk[i], nodes[i]));
      }
      out.push_back(SizePoint{bytes[i], rk[i], t[i], nodes[i]});
    }
  });
}

void read_conv(const Reader& r, hid_t file, Database& db) {
  r.each_subgroup(file, "/conv", [&](const std::string& dtype, hid_t g, const std::string& gp) {
    std::vector<std::vector<int64_t>> cols;
    for (const char* name : kConvColumns) cols.push_back(r.dataset<int64_t>(g, gp, name));
    const size_t n = cols[0].size();
    for (const auto& c : cols)
      if (c.size() != n) r.fail(gp, "datasets of different lengths");
    const auto t = r.timings(g, gp, n);
    auto& out = db.conv[dtype];
    for (size_t i = 0; i < n; ++i) {
      int64_t v[11];
      for (size_t j = 0; j < 11; ++j) v[j] = cols[j][i];
      ConvPoint point;
      if (const std::string e = conv_point(v, t[i], point); !e.empty())
        r.fail(gp, fmt::format("entry {}: {}", i, e));
      out.push_back(point);
    }
  });
}

}  // namespace

Database read_database(const std::string& path) {
  Quiet quiet;
  if (!std::filesystem::is_regular_file(path)) {
    throw InputError(path + ": no such calibration file");
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw InputError(path + ": not an HDF5 file (corrupt, truncated or another format)");
  }
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw InputError(path + ": cannot open as HDF5 (corrupt or truncated)");
  Reader r(path);
  Database db;
  db.source = path;
  read_root(r, file.id, db);
  read_gemm(r, file.id, db);
  read_attention(r, file.id, db);
  read_sizes(r, file.id, "/memory", db.memory, false);
  read_sizes(r, file.id, "/collective", db.collective, true);
  read_sizes(r, file.id, "/copy", db.copy, false);
  read_conv(r, file.id, db);
  if (db.size() == 0)
    r.fail("/", "no measurements (no gemm, attention, memory, collective, copy or conv group)");
  return db;
}

void write_database(const std::string& path, const Database& db) {
  Quiet quiet;
  const std::string tmp = path + ".tmp";
  {
    Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) throw RunError(path + ": cannot create the calibration file");
    write_int_attr(file.id, "schema_version", kSchemaVersion);
    for (const auto& [k, v] : db.attrs) write_string_attr(file.id, k, v);
    for (const auto& [dtype, pts] : db.gemm) {
      Id g(make_group(file.id, "gemm/" + dtype), H5Gclose);
      std::vector<int64_t> m, n, k, b;
      std::vector<Timing> t;
      for (const GemmPoint& p : pts) {
        m.push_back(p.m), n.push_back(p.n), k.push_back(p.k), b.push_back(p.batch),
            t.push_back(p.t);
      }
      write_dataset(g.id, "m", m), write_dataset(g.id, "n", n), write_dataset(g.id, "k", k);
      write_dataset(g.id, "batch", b);
      write_timings(g.id, t);
    }
    for (const auto& [dtype, pts] : db.attention) {
      Id g(make_group(file.id, "attention/" + dtype), H5Gclose);
      std::vector<int64_t> b, h, s, d, c, bw, fu;
      std::vector<Timing> t;
      for (const AttentionPoint& p : pts) {
        b.push_back(p.batch), h.push_back(p.heads), s.push_back(p.seq), d.push_back(p.head_dim);
        c.push_back(p.causal), bw.push_back(p.backward), fu.push_back(p.fused), t.push_back(p.t);
      }
      write_dataset(g.id, "batch", b), write_dataset(g.id, "heads", h),
          write_dataset(g.id, "seq", s);
      write_dataset(g.id, "head_dim", d), write_dataset(g.id, "causal", c);
      write_dataset(g.id, "backward", bw), write_dataset(g.id, "fused", fu);
      write_timings(g.id, t);
    }
    auto sizes = [&](const char* root, const std::map<std::string, std::vector<SizePoint>>& from,
                     bool ranks) {
      for (const auto& [name, pts] : from) {
        Id g(make_group(file.id, std::string(root) + "/" + name), H5Gclose);
        std::vector<double> bytes;
        std::vector<int64_t> rk, nodes;
        std::vector<Timing> t;
        for (const SizePoint& p : pts)
          bytes.push_back(p.bytes), rk.push_back(p.ranks), nodes.push_back(p.nodes),
              t.push_back(p.t);
        write_dataset(g.id, "bytes", bytes);
        if (ranks) write_dataset(g.id, "ranks", rk), write_dataset(g.id, "nodes", nodes);
        write_timings(g.id, t);
      }
    };
    sizes("memory", db.memory, false);
    sizes("collective", db.collective, true);
    sizes("copy", db.copy, false);
    for (const auto& [dtype, pts] : db.conv) {
      Id g(make_group(file.id, "conv/" + dtype), H5Gclose);
      std::vector<std::vector<int64_t>> cols(11);
      std::vector<Timing> t;
      for (const ConvPoint& p : pts) {
        const workload::ConvShape& c = p.shape;
        const int64_t v[11] = {c.n,
                               c.c,
                               c.h,
                               c.w,
                               c.k,
                               c.r,
                               c.s,
                               c.stride,
                               c.pad_h,
                               c.pad_w,
                               static_cast<int64_t>(c.pass)};
        for (size_t j = 0; j < 11; ++j) cols[j].push_back(v[j]);
        t.push_back(p.t);
      }
      for (size_t j = 0; j < 11; ++j) write_dataset(g.id, kConvColumns[j], cols[j]);
      write_timings(g.id, t);
    }
  }
  std::filesystem::rename(tmp, path);
}

std::string csv_header() {
  return "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,nodes,"
         "conv_n,conv_c,conv_h,conv_w,conv_k,conv_r,conv_s,conv_stride,conv_pad_h,conv_pad_w,"
         "median_s,p10_s,p90_s,repetitions";
}

namespace {
// The header before the conv_* columns (no convolutions), and the one before `nodes` (every
// collective inside one node): still read.
const char* const kCsvHeaderWithoutConv =
    "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,nodes,median_s,"
    "p10_s,p90_s,repetitions";
const char* const kCsvHeaderWithoutNodes =
    "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,median_s,p10_s,"
    "p90_s,repetitions";
}  // namespace

std::string csv_line(const std::string& kind, const std::string& name, const GemmPoint* g,
                     const AttentionPoint* a, const SizePoint* s, const ConvPoint* c) {
  const Timing& t = g ? g->t : a ? a->t : s ? s->t : c->t;
  const bool typed = kind == "gemm" || kind == "attention" || kind == "conv";
  // Attention rows name their implementation, convolution rows their pass.
  const std::string label = a       ? (a->fused ? "cudnn" : "unfused")
                            : c     ? conv_pass_name(c->shape.pass)
                            : typed ? ""
                                    : name;
  const workload::ConvShape none{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, workload::ConvPass::forward};
  const workload::ConvShape& v = c ? c->shape : none;
  return fmt::format(
      "{},{},{},{},{},{},{},{},{},{},{},{},{:.0f},{},{},{},{},{},{},{},{},{},{},{},{},{:.9g},{:.9g}"
      ","
      "{:.9g},{}",
      kind, typed ? name : "", label, g ? g->m : 0, g ? g->n : 0, g ? g->k : 0,
      g   ? g->batch
      : a ? a->batch
          : 0,
      a ? a->heads : 0, a ? a->seq : 0, a ? a->head_dim : 0, a ? int(a->causal) : 0,
      a ? int(a->backward) : 0, s ? s->bytes : 0, s ? s->ranks : 0, s ? s->nodes : 0, v.n, v.c, v.h,
      v.w, v.k, v.r, v.s, v.stride, v.pad_h, v.pad_w, t.median_s, t.p10_s, t.p90_s, t.repetitions);
}

Database read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the CSV file");
  Database db;
  db.source = path;
  std::string line;
  int lineno = 0;
  bool header = false;
  size_t fields = 29;  // 19 before the conv_* columns, 18 before `nodes`
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line[0] == '#') {
      const size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(1, eq - 1);
      key.erase(0, key.find_first_not_of(' '));
      db.attrs[key] = line.substr(eq + 1);
      continue;
    }
    if (!header) {
      if (line != csv_header() && line != kCsvHeaderWithoutConv && line != kCsvHeaderWithoutNodes) {
        throw InputError(path + ":" + std::to_string(lineno) + ": expected the header \"" +
                         csv_header() + "\"");
      }
      fields = line == csv_header() ? 29 : line == kCsvHeaderWithoutConv ? 19 : 18;
      header = true;
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    // Under the current header a row of another kind may still be in the 19 fields before the
    // conv_* columns (written by hand or by an older tool): read as such.
    const bool short_row = fields == 29 && f.size() == 19 && f[0] != "conv";
    if (f.size() != fields && !short_row) {
      // A line cut short by an interrupted run: everything before it is kept.
      if (in.peek() == EOF) break;
      throw InputError(path + ":" + std::to_string(lineno) + ": expected " +
                       std::to_string(fields) + " fields, got " + std::to_string(f.size()));
    }
    if (fields == 18) f.insert(f.begin() + 14, "1");                   // one node
    if (fields <= 19 || short_row) f.insert(f.begin() + 15, 10, "0");  // no convolution
    try {
      auto i64 = [&](int i) { return static_cast<int64_t>(std::stoll(f[i])); };
      auto dbl = [&](int i) { return std::stod(f[i]); };
      const Timing t{dbl(25), dbl(26), dbl(27), i64(28)};
      if (!(t.median_s > 0)) throw std::invalid_argument("median");
      if (f[0] == "gemm") {
        db.gemm[f[1]].push_back(GemmPoint{i64(3), i64(4), i64(5), std::max<int64_t>(1, i64(6)), t});
      } else if (f[0] == "attention") {
        if (f[2] != "" && f[2] != "cudnn" && f[2] != "unfused") {
          throw InputError(path + ":" + std::to_string(lineno) + ": name: expected cudnn or " +
                           "unfused for an attention row, got \"" + f[2] + "\"");
        }
        db.attention[f[1]].push_back(AttentionPoint{i64(6), i64(7), i64(8), i64(9), i64(10) != 0,
                                                    i64(11) != 0, t, f[2] == "cudnn"});
      } else if (f[0] == "memory") {
        db.memory[f[2]].push_back(SizePoint{dbl(12), 1, t});
      } else if (f[0] == "collective") {
        const int64_t ranks = i64(13), nodes = i64(14);
        if (ranks < 2 || nodes < 1 || nodes > ranks) {
          throw InputError(path + ":" + std::to_string(lineno) +
                           ": expected ranks >= 2 and 1 <= nodes <= ranks for a collective");
        }
        db.collective[f[2]].push_back(SizePoint{dbl(12), ranks, t, nodes});
      } else if (f[0] == "copy") {
        db.copy[f[2]].push_back(SizePoint{dbl(12), 1, t});
      } else if (f[0] == "conv") {
        const auto pass = conv_pass_from_name(f[2]);
        if (!pass) {
          throw InputError(path + ":" + std::to_string(lineno) +
                           ": name: expected forward, data_grad or weight_grad for a conv row, "
                           "got \"" +
                           f[2] + "\"");
        }
        int64_t v[11];
        for (int j = 0; j < 10; ++j) v[j] = i64(15 + j);
        v[10] = static_cast<int64_t>(*pass);
        ConvPoint point;
        if (const std::string e = conv_point(v, t, point); !e.empty())
          throw InputError(path + ":" + std::to_string(lineno) + ": " + e);
        db.conv[f[1]].push_back(point);
      } else {
        throw InputError(path + ":" + std::to_string(lineno) + ": unknown kind \"" + f[0] + "\"");
      }
    } catch (const std::logic_error&) {
      if (in.peek() == EOF) break;
      throw InputError(path + ":" + std::to_string(lineno) + ": expected numbers");
    }
  }
  if (!header) throw InputError(path + ": empty, or no CSV header");
  return db;
}

}  // namespace hetsim::calibrate
