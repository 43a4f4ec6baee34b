// Convolution points through cuDNN's convolution API: bf16 tensors in NHWC (the layout its
// tensor-core kernels take without a transpose), FP32 accumulation, tensor-op math. Per point
// cudnnFind*AlgorithmEx tries every algorithm on the point's own buffers within the workspace
// (as a framework's benchmark mode does), and the fastest that ran is timed by the harness:
// forward (cudnnConvolutionForward), data gradient (cudnnConvolutionBackwardData) or weight
// gradient (cudnnConvolutionBackwardFilter). A point where no algorithm runs is skipped, said.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <cudnn.h>

#include "bench.h"
#include "check.h"
#include "device_buffer.h"
#include "fill.h"

namespace hetsim::calibrate::cuda {

namespace {

// The most workspace an algorithm may use: cuDNN's FFT and Winograd variants ask for hundreds of
// MiB at ResNet's batch sizes; beyond this they are left out, as a framework under a memory cap
// leaves them.
constexpr std::size_t kConvWorkspaceBytes = std::size_t{1} << 30;
constexpr int kMaxAlgorithms = 16;  // more than any pass has (cuDNN 9: 8 forward, 6 / 7 backward)

// The descriptors of one point, destroyed with it.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  explicit Descriptors(const Key& k) {
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&x));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&y));
    CHECK_CUDNN(cudnnCreateFilterDescriptor(&w));
    CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16,
                                           static_cast<int>(k.conv_n), static_cast<int>(k.conv_c),
                                           static_cast<int>(k.conv_h),
                                           static_cast<int>(k.conv_w)));
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC,
                                           static_cast<int>(k.conv_k), static_cast<int>(k.conv_c),
                                           static_cast<int>(k.conv_r),
                                           static_cast<int>(k.conv_s)));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
        conv, static_cast<int>(k.conv_pad_h), static_cast<int>(k.conv_pad_w),
        static_cast<int>(k.conv_stride), static_cast<int>(k.conv_stride), 1, 1,
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK_CUDNN(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH));
    int n = 0, c = 0, h = 0, wd = 0;
    CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, c, h, wd));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// The first (fastest: cudnnFind sorts by time) result that ran, if any.
template <typename Perf>
const Perf* fastest(const Perf* results, int count) {
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS) return &results[i];
  return nullptr;
}

std::size_t output_elements(const Key& k) {
  const std::int64_t p = (k.conv_h + 2 * k.conv_pad_h - k.conv_r) / k.conv_stride + 1;
  const std::int64_t q = (k.conv_w + 2 * k.conv_pad_w - k.conv_s) / k.conv_stride + 1;
  return static_cast<std::size_t>(k.conv_n * k.conv_k * p * q);
}

class ConvBench final : public Bench {
 public:
  ConvBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    std::size_t x = 0, w = 0, y = 0;
    for (const PlanItem& item : items) {
      const Key& k = item.key;
      x = std::max(x, static_cast<std::size_t>(k.conv_n * k.conv_c * k.conv_h * k.conv_w));
      w = std::max(w, static_cast<std::size_t>(k.conv_k * k.conv_c * k.conv_r * k.conv_s));
      y = std::max(y, output_elements(k));
    }
    // Each tensor is an input of one pass and the output of another: all hold random data.
    x_ = DeviceBuffer(x * 2);
    w_ = DeviceBuffer(w * 2);
    y_ = DeviceBuffer(y * 2);
    fill_random(GemmType::bf16, x_.get(), x, 11u, context_.stream);
    fill_random(GemmType::bf16, w_.get(), w, 12u, context_.stream);
    fill_random(GemmType::bf16, y_.get(), y, 13u, context_.stream);
    workspace_ = DeviceBuffer(kConvWorkspaceBytes);
    CHECK_CUDA(cudaStreamSynchronize(context_.stream));
    CHECK_CUDNN(cudnnCreate(&handle_));
    CHECK_CUDNN(cudnnSetStream(handle_, context_.stream));
  }
  ~ConvBench() override { cudnnDestroy(handle_); }

  std::optional<Stats> measure(const Key& key) override {
    const Descriptors d(key);
    const float one = 1.0f, zero = 0.0f;
    void* ws = workspace_.get();
    const std::size_t ws_bytes = workspace_.bytes();
    int count = 0;
    if (key.name == "forward") {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgorithms];
      CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
          handle_, d.x, x_.get(), d.w, w_.get(), d.conv, d.y, y_.get(), kMaxAlgorithms, &count,
          perf, ws, ws_bytes));
      const cudnnConvolutionFwdAlgoPerf_t* best = fastest(perf, count);
      if (best == nullptr) return std::nullopt;
      const cudnnConvolutionFwdAlgo_t algo = best->algo;
      const std::size_t bytes = best->memory;
      return context_.timer->measure([&] {
        CHECK_CUDNN(cudnnConvolutionForward(handle_, &one, d.x, x_.get(), d.w, w_.get(), d.conv,
                                            algo, ws, bytes, &zero, d.y, y_.get()));
      });
    }
    if (key.name == "data_grad") {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgorithms];
      CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
          handle_, d.w, w_.get(), d.y, y_.get(), d.conv, d.x, x_.get(), kMaxAlgorithms, &count,
          perf, ws, ws_bytes));
      const cudnnConvolutionBwdDataAlgoPerf_t* best = fastest(perf, count);
      if (best == nullptr) return std::nullopt;
      const cudnnConvolutionBwdDataAlgo_t algo = best->algo;
      const std::size_t bytes = best->memory;
      return context_.timer->measure([&] {
        CHECK_CUDNN(cudnnConvolutionBackwardData(handle_, &one, d.w, w_.get(), d.y, y_.get(),
                                                 d.conv, algo, ws, bytes, &zero, d.x, x_.get()));
      });
    }
    if (key.name == "weight_grad") {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgorithms];
      CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          handle_, d.x, x_.get(), d.y, y_.get(), d.conv, d.w, w_.get(), kMaxAlgorithms, &count,
          perf, ws, ws_bytes));
      const cudnnConvolutionBwdFilterAlgoPerf_t* best = fastest(perf, count);
      if (best == nullptr) return std::nullopt;
      const cudnnConvolutionBwdFilterAlgo_t algo = best->algo;
      const std::size_t bytes = best->memory;
      return context_.timer->measure([&] {
        CHECK_CUDNN(cudnnConvolutionBackwardFilter(handle_, &one, d.x, x_.get(), d.y, y_.get(),
                                                   d.conv, algo, ws, bytes, &zero, d.w,
                                                   w_.get()));
      });
    }
    std::fprintf(stderr, "conv: unknown pass \"%s\"\n", key.name.c_str());
    return std::nullopt;
  }

 private:
  BenchContext context_;
  cudnnHandle_t handle_ = nullptr;
  DeviceBuffer x_, w_, y_, workspace_;
};

}  // namespace

std::unique_ptr<Bench> make_conv_bench(const BenchContext& context,
                                       const std::vector<PlanItem>& items) {
  return std::make_unique<ConvBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
