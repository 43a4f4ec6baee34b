// Convolutions in the calibration: the CPU backend's im2col convolution against a direct one in
// all three passes, the conv table through HDF5 and CSV, and the measured cost model over it
// (exact where measured, the nearest point datasheet-scaled elsewhere, derived GPU types).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "calibrate/cpu/cpu_backend.h"
#include "calibrate/cpu/kernels.h"
#include "calibrate/database.h"
#include "calibrate/measured_cost_model.h"
#include "sim/core/error.h"

namespace hetsim::calibrate {
namespace {

using workload::ConvPass;
using workload::ConvShape;

std::string tmp(const std::string& name) { return ::testing::TempDir() + name; }

ConvShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
                int64_t stride, int64_t pad_h, int64_t pad_w, ConvPass pass = ConvPass::forward) {
  return ConvShape{n, c, h, w, k, r, s, stride, pad_h, pad_w, pass};
}

// Deterministic values in [-1, 1).
std::vector<float> filled(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>((seed >> 8) % 2000) / 1000.0f - 1.0f;
  }
  return v;
}

// The input element a given output position and filter tap read, or -1 in the padding.
int64_t input_index(const ConvShape& c, int64_t img, int64_t ch, int64_t oh, int64_t ow, int64_t fy,
                    int64_t fx) {
  const int64_t ih = oh * c.stride - c.pad_h + fy, iw = ow * c.stride - c.pad_w + fx;
  if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) return -1;
  return ((img * c.c + ch) * c.h + ih) * c.w + iw;
}

// Direct convolution, in double, by the definition (six nested loops per pass).
struct Naive {
  const ConvShape& c;
  template <typename F>
  void each(F f) const {  // f(output index, input index or -1, filter index)
    const int64_t p = c.p(), q = c.q();
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t k = 0; k < c.k; ++k)
        for (int64_t oh = 0; oh < p; ++oh)
          for (int64_t ow = 0; ow < q; ++ow)
            for (int64_t ch = 0; ch < c.c; ++ch)
              for (int64_t fy = 0; fy < c.r; ++fy)
                for (int64_t fx = 0; fx < c.s; ++fx)
                  f(((i * c.k + k) * p + oh) * q + ow, input_index(c, i, ch, oh, ow, fy, fx),
                    ((k * c.c + ch) * c.r + fy) * c.s + fx);
  }
  std::vector<double> forward(const std::vector<float>& x, const std::vector<float>& w) const {
    std::vector<double> y(static_cast<size_t>(c.n * c.k * c.p() * c.q()), 0.0);
    each([&](int64_t o, int64_t in, int64_t f) {
      if (in >= 0) y[o] += double(x[in]) * w[f];
    });
    return y;
  }
  std::vector<double> data_grad(const std::vector<float>& dy, const std::vector<float>& w) const {
    std::vector<double> dx(static_cast<size_t>(c.n * c.c * c.h * c.w), 0.0);
    each([&](int64_t o, int64_t in, int64_t f) {
      if (in >= 0) dx[in] += double(dy[o]) * w[f];
    });
    return dx;
  }
  std::vector<double> weight_grad(const std::vector<float>& x, const std::vector<float>& dy) const {
    std::vector<double> dw(static_cast<size_t>(c.k * c.c * c.r * c.s), 0.0);
    each([&](int64_t o, int64_t in, int64_t f) {
      if (in >= 0) dw[f] += double(x[in]) * dy[o];
    });
    return dw;
  }
};

// Largest difference relative to the largest reference magnitude.
double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

TEST(ConvCpu, Im2colAgreesWithTheDirectConvolutionInEveryPassWithStrideAndPadding) {
  const std::vector<ConvShape> shapes = {
      shape(2, 3, 7, 6, 4, 3, 3, 2, 1, 1),   // strided 3x3, padded
      shape(1, 5, 5, 5, 3, 1, 1, 1, 0, 0),   // pointwise: no im2col
      shape(2, 2, 9, 8, 3, 5, 3, 3, 2, 1),   // r != s, stride 3, padding differing per axis
      shape(3, 4, 6, 6, 2, 1, 1, 2, 0, 0),   // a strided 1x1 (a ResNet projection)
      shape(1, 3, 11, 11, 2, 7, 7, 2, 3, 3)  // a 7x7/2 first layer in small
  };
  for (const ConvShape& c : shapes) {
    SCOPED_TRACE(fmt::format("n={} c={} {}x{} k={} {}x{}/{} pad {}x{}", c.n, c.c, c.h, c.w, c.k,
                             c.r, c.s, c.stride, c.pad_h, c.pad_w));
    const Naive naive{c};
    const auto x = filled(static_cast<size_t>(c.n * c.c * c.h * c.w), 1);
    const auto w = filled(static_cast<size_t>(c.k * c.c * c.r * c.s), 2);
    const auto dy = filled(static_cast<size_t>(c.n * c.k * c.p() * c.q()), 3);
    std::vector<float> col(cpu::conv_col_elements(c), 7.0f);  // stale contents must not matter
    std::vector<float> y(dy.size(), 9.0f), dx(x.size(), 9.0f), dw(w.size(), 9.0f);
    cpu::conv_forward(c, x.data(), w.data(), y.data(), col.data());
    EXPECT_LT(max_error(y, naive.forward(x, w)), 1e-5);
    cpu::conv_data_grad(c, dy.data(), w.data(), dx.data(), col.data());
    EXPECT_LT(max_error(dx, naive.data_grad(dy, w)), 1e-5);
    cpu::conv_weight_grad(c, x.data(), dy.data(), dw.data(), col.data());
    EXPECT_LT(max_error(dw, naive.weight_grad(x, dy)), 1e-5);
  }
}

TEST(ConvCpu, TheGridCoversEachLayerInAllThreePassesAndQuickIsASubset) {
  const auto full = cpu::conv_grid(false), quick = cpu::conv_grid(true);
  EXPECT_EQ(full.size(), 13u * 2 * 3);  // 13 layers, batches 1 and 4, three passes
  EXPECT_EQ(quick.size(), 3u * 3);
  for (const ConvShape& q : quick) {
    EXPECT_TRUE(std::any_of(full.begin(), full.end(), [&](const ConvShape& f) {
      return f.n == q.n && f.c == q.c && f.h == q.h && f.k == q.k && f.r == q.r &&
             f.stride == q.stride && f.pad_h == q.pad_h && f.pass == q.pass;
    }));
  }
  for (const ConvShape& c : full) {
    EXPECT_GE(c.p(), 1);
    EXPECT_GE(c.q(), 1);
  }
  // The large-kernel first layers: 7x7/2 (224 -> 112) and 11x11/4 (224 -> 55).
  auto has = [&](int64_t r, int64_t stride, int64_t p) {
    return std::any_of(full.begin(), full.end(), [&](const ConvShape& c) {
      return c.r == r && c.stride == stride && c.p() == p;
    });
  };
  EXPECT_TRUE(has(7, 2, 112));
  EXPECT_TRUE(has(11, 4, 55));
}

Database conv_db(const std::string& device_type, const std::string& dtype) {
  Database db;
  db.attrs = {{"backend", "cuda"}, {"device_type", device_type}, {"host", "test"}};
  db.conv[dtype] = {
      ConvPoint{shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1), Timing{2e-4, 1.9e-4, 2.2e-4, 20}},
      ConvPoint{shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1, ConvPass::data_grad),
                Timing{2.5e-4, 2.4e-4, 2.7e-4, 20}},
      ConvPoint{shape(4, 256, 56, 56, 64, 1, 1, 1, 0, 0), Timing{1e-4, 0.9e-4, 1.1e-4, 30}},
      ConvPoint{shape(1, 3, 224, 224, 64, 7, 7, 2, 3, 3), Timing{5e-5, 4.5e-5, 6e-5, 40}},
      ConvPoint{shape(1, 3, 224, 224, 64, 11, 11, 4, 2, 2, ConvPass::weight_grad),
                Timing{7e-5, 6e-5, 8e-5, 40}},
  };
  return db;
}

void expect_same(const std::vector<ConvPoint>& got, const std::vector<ConvPoint>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const ConvShape &a = got[i].shape, &b = want[i].shape;
    EXPECT_EQ(point_label(got[i]), point_label(want[i]));
    EXPECT_TRUE(a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r &&
                a.s == b.s && a.stride == b.stride && a.pad_h == b.pad_h && a.pad_w == b.pad_w &&
                a.pass == b.pass)
        << i;
    EXPECT_DOUBLE_EQ(got[i].t.median_s, want[i].t.median_s);
    EXPECT_DOUBLE_EQ(got[i].t.p10_s, want[i].t.p10_s);
    EXPECT_DOUBLE_EQ(got[i].t.p90_s, want[i].t.p90_s);
    EXPECT_EQ(got[i].t.repetitions, want[i].t.repetitions);
  }
}

TEST(ConvDatabase, TheConvTableRoundTripsThroughHdf5WithEveryField) {
  const Database db = conv_db("h200-sxm-141gb", "bf16");
  const std::string path = tmp("conv-roundtrip.h5");
  write_database(path, db);
  const Database back = read_database(path);
  EXPECT_EQ(back.size(), 5u);
  ASSERT_EQ(back.conv.count("bf16"), 1u);
  expect_same(back.conv.at("bf16"), db.conv.at("bf16"));
  // Listed with the other tables (calibrate check's sanity lines).
  const auto spreads = table_spreads(back);
  ASSERT_EQ(spreads.size(), 1u);
  EXPECT_EQ(spreads[0].table, "conv/bf16");
  EXPECT_EQ(spreads[0].points, 5u);
}

TEST(ConvDatabase, TheConvTableRoundTripsThroughTheCsvAndOldHeadersStillRead) {
  const Database db = conv_db("cpu", "fp32");
  const std::string path = tmp("conv-roundtrip.csv");
  {
    std::ofstream out(path);
    out << "# backend=cpu\n# device_type=cpu\n" << csv_header() << "\n";
    for (const ConvPoint& p : db.conv.at("fp32"))
      out << csv_line("conv", "fp32", nullptr, nullptr, nullptr, &p) << "\n";
  }
  const Database back = read_csv(path);
  expect_same(back.conv.at("fp32"), db.conv.at("fp32"));
  EXPECT_EQ(csv_line("conv", "fp32", nullptr, nullptr, nullptr, &db.conv.at("fp32")[1]),
            "conv,fp32,data_grad,0,0,0,0,0,0,0,0,0,0,0,0,4,64,56,56,64,3,3,1,1,1,0.00025,0.00024,"
            "0.00027,20");
  // The key: every column before the timings.
  const std::string header = csv_header();
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), 28);
  EXPECT_EQ(std::count(header.begin(), header.begin() + header.find("median_s"), ','),
            static_cast<long>(kCsvKeyColumns));
  // A file from before the conv columns.
  const std::string old = tmp("conv-old-header.csv");
  std::ofstream(old) << "# device_type=cpu\n"
                     << "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,"
                        "ranks,nodes,median_s,p10_s,p90_s,repetitions\n"
                     << "gemm,fp32,,64,64,64,1,0,0,0,0,0,0,0,0,1e-05,1e-05,1.1e-05,5\n";
  const Database o = read_csv(old);
  ASSERT_EQ(o.gemm.at("fp32").size(), 1u);
  EXPECT_EQ(o.gemm.at("fp32")[0].k, 64);
  EXPECT_DOUBLE_EQ(o.gemm.at("fp32")[0].t.p90_s, 1.1e-5);
  EXPECT_TRUE(o.conv.empty());
}

TEST(ConvDatabase, ABadConvRowOrEntryIsAnErrorSayingWhatIsWrong) {
  const std::string path = tmp("conv-bad.csv");
  auto read_row = [&](const std::string& row) -> std::string {
    std::ofstream(path) << "# device_type=cpu\n" << csv_header() << "\n" << row << "\n";
    try {
      read_csv(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(read_row("conv,fp32,backward,0,0,0,0,0,0,0,0,0,0,0,0,1,3,8,8,4,3,3,1,1,1,1e-5,1e-5,"
                     "1e-5,5"),
            path +
                ":3: name: expected forward, data_grad or weight_grad for a conv row, got "
                "\"backward\"");
  EXPECT_EQ(read_row("conv,fp32,forward,0,0,0,0,0,0,0,0,0,0,0,0,1,3,2,2,4,5,5,1,1,1,1e-5,1e-5,"
                     "1e-5,5"),
            path + ":3: a 5x5 filter does not fit the padded 4x4 input");
  EXPECT_EQ(read_row("conv,fp32,forward,0,0,0,0,0,0,0,0,0,0,0,0,1,0,8,8,4,3,3,1,1,1,1e-5,1e-5,"
                     "1e-5,5"),
            path + ":3: c: expected at least 1, got 0");
  // In HDF5: a pass code outside 0..2 names the group and the entry.
  Database db = conv_db("cpu", "fp32");
  db.conv["fp32"][2].shape.pass = static_cast<ConvPass>(3);
  const std::string h5 = tmp("conv-bad.h5");
  write_database(h5, db);
  try {
    read_database(h5);
    ADD_FAILURE() << "a pass code of 3 was read";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              h5 + ": /conv/fp32: entry 2: pass: expected 0 (forward), 1 (data_grad) or 2 "
                   "(weight_grad), got 3");
  }
}

const config::GpuProfile& gpu(const char* name) { return config::builtin_gpus().at(name); }

// The datasheet kernel time of a shape without the launch gap (what a measured point is scaled by).
double kernel_s(const workload::DatasheetCostModel& ds, const ConvShape& c,
                const config::GpuProfile& g) {
  return ds.duration(workload::conv_op("", c, 2), g, workload::Precision::bf16).seconds() -
         ds.efficiency().kernel_overhead.seconds();
}

TEST(ConvMeasuredModel, AMeasuredShapeTakesItsTimeAnotherTheNearestPointScaledByTheDatasheet) {
  const workload::DatasheetCostModel ds;
  const config::GpuProfile& h200 = gpu("h200-sxm-141gb");
  const MeasuredCostModel m(conv_db("h200-sxm-141gb", "bf16"), ds);
  const auto p = workload::Precision::bf16;
  // Measured: the point's median (no launch gap: an event-timed kernel runs as long in a stream).
  const ConvShape measured = shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1);
  const workload::Op op = workload::conv_op("layer1.conv2", measured, 2);
  EXPECT_EQ(m.duration(op, h200, p), Time::from_seconds_ceil(2e-4));
  EXPECT_EQ(m.coverage(op, h200, p), "measured");
  // Batch 32 of the same layer: the batch-4 point scaled by the datasheet ratio.
  const ConvShape big = shape(32, 64, 56, 56, 64, 3, 3, 1, 1, 1);
  const double expected = 2e-4 * kernel_s(ds, big, h200) / kernel_s(ds, measured, h200);
  const auto predicted = m.predict_conv("bf16", big, h200);
  ASSERT_TRUE(predicted);
  EXPECT_NEAR(*predicted, expected, 1e-12) << "expected " << expected << " got " << *predicted;
  EXPECT_GT(*predicted, 2e-4 * 4);  // 8x the work, at a rate no lower than the batch-4 point's
  const workload::Op big_op = workload::conv_op("layer1.conv2", big, 2);
  EXPECT_EQ(m.duration(big_op, h200, p), Time::from_seconds_ceil(expected));
  EXPECT_NE(m.duration(big_op, h200, p), ds.duration(big_op, h200, p));
  EXPECT_EQ(m.coverage(big_op, h200, p), "beyond the table (datasheet-scaled from it)");
  // A 3x3 of 256 channels at 14x14: scaled from the 3x3 point, though a 1x1 one is nearer in
  // channels.
  const ConvShape stage3 = shape(4, 256, 14, 14, 256, 3, 3, 1, 1, 1);
  EXPECT_NEAR(*m.predict_conv("bf16", stage3, h200),
              2e-4 * kernel_s(ds, stage3, h200) / kernel_s(ds, measured, h200), 1e-12);
  // A filter size the table lacks: the nearest point of the pass whatever its filter.
  const ConvShape five = shape(1, 3, 224, 224, 64, 5, 5, 2, 2, 2);
  const ConvShape seven = shape(1, 3, 224, 224, 64, 7, 7, 2, 3, 3);
  EXPECT_NEAR(*m.predict_conv("bf16", five, h200),
              5e-5 * kernel_s(ds, five, h200) / kernel_s(ds, seven, h200), 1e-12);
  // The passes do not stand in for each other.
  const ConvShape wgrad = shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1, ConvPass::weight_grad);
  EXPECT_NEAR(
      *m.predict_conv("bf16", wgrad, h200),
      7e-5 * kernel_s(ds, wgrad, h200) /
          kernel_s(ds, shape(1, 3, 224, 224, 64, 11, 11, 4, 2, 2, ConvPass::weight_grad), h200),
      1e-12);
  EXPECT_EQ(m.coverage(workload::conv_op("x", wgrad, 2), h200, p),
            "beyond the table (datasheet-scaled from it)");
  EXPECT_FALSE(m.predict_conv("fp16", measured, h200));
}

TEST(ConvMeasuredModel, CoverageSaysWhenThereIsNoTableForThePrecisionOrThePass) {
  const workload::DatasheetCostModel ds;
  const config::GpuProfile& h200 = gpu("h200-sxm-141gb");
  Database db = conv_db("h200-sxm-141gb", "bf16");
  std::erase_if(db.conv["bf16"],
                [](const ConvPoint& c) { return c.shape.pass == ConvPass::weight_grad; });
  const MeasuredCostModel m(db, ds);
  const auto wgrad =
      workload::conv_op("x", shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1, ConvPass::weight_grad), 2);
  EXPECT_EQ(m.coverage(wgrad, h200, workload::Precision::bf16),
            "datasheet (no bf16 weight_grad convolution table)");
  EXPECT_EQ(m.duration(wgrad, h200, workload::Precision::bf16),
            ds.duration(wgrad, h200, workload::Precision::bf16));
  // fp16 falls back to the bf16 table; fp32 has none.
  const auto fwd = workload::conv_op("x", shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1), 2);
  EXPECT_EQ(m.coverage(fwd, h200, workload::Precision::fp16), "measured");
  EXPECT_EQ(m.coverage(fwd, h200, workload::Precision::fp32),
            "datasheet (no tf32 convolution table)");
  EXPECT_EQ(m.duration(fwd, h200, workload::Precision::fp32),
            ds.duration(fwd, h200, workload::Precision::fp32));
}

TEST(ConvMeasuredModel, AnotherGpuTypeIsDerivedFromTheMeasuredOneByTheDatasheetRatio) {
  const workload::DatasheetCostModel ds;
  const config::GpuProfile &h200 = gpu("h200-sxm-141gb"), &a100 = gpu("a100-sxm4-80gb");
  const MeasuredCostModel m(conv_db("h200-sxm-141gb", "bf16"), ds);
  const auto p = workload::Precision::bf16;
  const auto op = workload::conv_op("x", shape(4, 64, 56, 56, 64, 3, 3, 1, 1, 1), 2);
  const double measured = m.duration(op, h200, p).seconds();
  const double expected =
      measured * ds.duration(op, a100, p).seconds() / ds.duration(op, h200, p).seconds();
  EXPECT_NEAR(m.duration(op, a100, p).seconds(), expected, 1e-11);
  EXPECT_NE(m.duration(op, a100, p), ds.duration(op, a100, p));
  EXPECT_EQ(m.coverage(op, a100, p),
            "derived from h200-sxm-141gb measurements and datasheet ratios");
}

TEST(ConvMeasuredModel, OnACpuAPointScalesByFlopsWithNoLaunchGap) {
  const workload::DatasheetCostModel ds;
  const config::GpuProfile& cpu = gpu("cpu");
  const MeasuredCostModel m(conv_db("cpu", "fp32"), ds);
  const ConvShape measured = shape(4, 256, 56, 56, 64, 1, 1, 1, 0, 0);
  const ConvShape half = shape(2, 256, 56, 56, 64, 1, 1, 1, 0, 0);
  const auto op = workload::conv_op("x", measured, 4);
  EXPECT_EQ(m.duration(op, cpu, workload::Precision::fp32), Time::from_seconds_ceil(1e-4));
  EXPECT_NEAR(*m.predict_conv("fp32", half, cpu), 0.5e-4, 1e-15);
}

TEST(ConvMeasuredModel, CalibrateCheckAndCompareListTheConvTable) {
  const workload::DatasheetCostModel ds;
  // Ten points of one layer, a constant rate: every held-out point is predicted exactly.
  Database db;
  db.attrs = {{"device_type", "cpu"}};
  for (int64_t n = 1; n <= 10; ++n) {
    const double t = 1e-3 * n;
    db.conv["fp32"].push_back(
        ConvPoint{shape(n, 64, 28, 28, 64, 3, 3, 1, 1, 1), Timing{t, t, t, 5}});
  }
  const auto rows = check_database(db, gpu("cpu"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].table, "conv/fp32");
  EXPECT_EQ(rows[0].held_out, 2u);  // every fifth from the third
  EXPECT_LT(rows[0].max_error, 1e-9);
  EXPECT_EQ(rows[0].points[0].label, "n=3 c=64 h=28 w=28 k=64 r=3 s=3 stride=1 pad=1x1 forward");
  const MeasuredCostModel m(db, ds);
  const auto compared = m.compare_datasheet(gpu("cpu"));
  ASSERT_EQ(compared.size(), 1u);
  EXPECT_EQ(compared[0].table, "conv/fp32");
  EXPECT_EQ(compared[0].held_out, 10u);
}

}  // namespace
}  // namespace hetsim::calibrate
