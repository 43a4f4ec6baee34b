// Host-device copy points over pinned host memory (cudaMemcpyAsync on the timing stream). No L2
// flush: the copy engines do not go through a warm cache in a way that changes the result.
#include <algorithm>
#include <cstring>

#include "bench.h"
#include "check.h"
#include "device_buffer.h"

namespace hetsim::calibrate::cuda {

namespace {
class CopyBench final : public Bench {
 public:
  CopyBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    for (const PlanItem& item : items) bytes_ = std::max(bytes_, static_cast<std::size_t>(item.key.bytes));
    CHECK_CUDA(cudaHostAlloc(&host_, bytes_, cudaHostAllocDefault));
    std::memset(host_, 0x5a, bytes_);  // touch every page before timing
    device_ = DeviceBuffer(bytes_);
  }
  ~CopyBench() override { cudaFreeHost(host_); }

  std::optional<Stats> measure(const Key& key) override {
    const auto bytes = static_cast<std::size_t>(key.bytes);
    const bool to_device = key.name == "h2d";
    return context_.timer->measure(
        [&] {
          if (to_device)
            CHECK_CUDA(cudaMemcpyAsync(device_.get(), host_, bytes, cudaMemcpyHostToDevice, context_.stream));
          else
            CHECK_CUDA(cudaMemcpyAsync(host_, device_.get(), bytes, cudaMemcpyDeviceToHost, context_.stream));
        },
        /*flush_l2=*/false);
  }

 private:
  BenchContext context_;
  std::size_t bytes_ = 0;
  void* host_ = nullptr;
  DeviceBuffer device_;
};
}  // namespace

std::unique_ptr<Bench> make_copy_bench(const BenchContext& context, const std::vector<PlanItem>& items) {
  return std::make_unique<CopyBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
