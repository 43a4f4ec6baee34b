// Memory-bound kernel points: one arena large enough for the largest point, filled with random
// bf16 values (read as fp32 by adam and reduce: finite values in [-1, 1]).
#include <algorithm>

#include "bench.h"
#include "check.h"
#include "device_buffer.h"
#include "fill.h"
#include "memory_kernels.h"

namespace hetsim::calibrate::cuda {

namespace {
class MemoryBench final : public Bench {
 public:
  MemoryBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    std::size_t bytes = 0;
    for (const PlanItem& item : items) bytes = std::max(bytes, static_cast<std::size_t>(item.key.bytes));
    bytes += 8 * 256;  // alignment padding of up to seven carved arrays
    arena_ = DeviceBuffer(bytes);
    fill_random(GemmType::bf16, arena_.get(), bytes / 2, 7u, context_.stream);
    sum_ = DeviceBuffer(sizeof(float));
    CHECK_CUDA(cudaStreamSynchronize(context_.stream));
  }

  std::optional<Stats> measure(const Key& key) override {
    const MemoryKernelInfo& info = memory_kernel_info(key.name);
    const std::int64_t elements = key.bytes / info.bytes_per_element;
    return context_.timer->measure([&] {
      launch_memory_kernel(key.name, arena_.get(), elements, static_cast<float*>(sum_.get()),
                           context_.stream);
    });
  }

 private:
  BenchContext context_;
  DeviceBuffer arena_, sum_;
};
}  // namespace

std::unique_ptr<Bench> make_memory_bench(const BenchContext& context, const std::vector<PlanItem>& items) {
  return std::make_unique<MemoryBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
