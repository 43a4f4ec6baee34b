// GEMM points: cuBLASLt, TN layout, FP32 accumulation, strided-batched when batch > 1. Inputs are
// refilled with random values of the point's type when the type changes.
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench.h"
#include "check.h"
#include "device_buffer.h"
#include "fill.h"
#include "lt_matmul.h"

namespace hetsim::calibrate::cuda {

namespace {
class GemmBench final : public Bench {
 public:
  GemmBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    std::size_t a = 0, b = 0, c = 0;
    for (const PlanItem& item : items) {
      const Key& k = item.key;
      const GemmType type = gemm_type_from_name(k.dtype);
      const auto in = input_element_bytes(type), out = output_element_bytes(type);
      a = std::max(a, static_cast<std::size_t>(k.m * k.k * k.batch) * in);
      b = std::max(b, static_cast<std::size_t>(k.k * k.n * k.batch) * in);
      c = std::max(c, static_cast<std::size_t>(k.m * k.n * k.batch) * out);
    }
    a_ = DeviceBuffer(a);
    b_ = DeviceBuffer(b);
    c_ = DeviceBuffer(c);
    workspace_ = DeviceBuffer(LtMatmul::kWorkspaceBytes);
    CHECK_CUBLAS(cublasLtCreate(&handle_));
  }
  ~GemmBench() override { cublasLtDestroy(handle_); }

  std::optional<Stats> measure(const Key& key) override {
    const GemmType type = gemm_type_from_name(key.dtype);
    if (key.dtype != filled_) {
      const std::size_t in = input_element_bytes(type);
      fill_random(type, a_.get(), a_.bytes() / in, 1u, context_.stream);
      fill_random(type, b_.get(), b_.bytes() / in, 2u, context_.stream);
      CHECK_CUDA(cudaStreamSynchronize(context_.stream));
      filled_ = key.dtype;
    }
    const LtMatmul matmul(handle_, type, GemmShape::tn(key.m, key.n, key.k, key.batch));
    if (!matmul.supported()) return std::nullopt;
    return context_.timer->measure([&] {
      matmul.run(a_.get(), b_.get(), c_.get(), workspace_.get(), context_.stream);
    });
  }

 private:
  BenchContext context_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer a_, b_, c_, workspace_;
  std::string filled_;
};
}  // namespace

std::unique_ptr<Bench> make_gemm_bench(const BenchContext& context, const std::vector<PlanItem>& items) {
  return std::make_unique<GemmBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
