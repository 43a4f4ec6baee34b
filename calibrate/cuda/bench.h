// The extension point of the program: one Bench per kind. A Bench is made for the plan points
// it will measure (so it can size its buffers once) and measures one point at a time.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <cuda_runtime.h>

#include "measurement.h"
#include "timer.h"

namespace hetsim::calibrate::cuda {

struct BenchContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  Timer* timer = nullptr;
  bool cudnn = true;  // attention may try cuDNN's fused kernels (false: --no-cudnn, unfused only)
};

class Bench {
 public:
  virtual ~Bench() = default;
  // The timing of one point; nullopt when the library cannot run it (reported, then skipped).
  virtual std::optional<Stats> measure(const Key& key) = 0;
};

using BenchFactory = std::unique_ptr<Bench> (*)(const BenchContext&, const std::vector<PlanItem>&);

std::unique_ptr<Bench> make_gemm_bench(const BenchContext&, const std::vector<PlanItem>&);
std::unique_ptr<Bench> make_attention_bench(const BenchContext&, const std::vector<PlanItem>&);
// conv_bench.cu, built with cuDNN only.
std::unique_ptr<Bench> make_conv_bench(const BenchContext&, const std::vector<PlanItem>&);
std::unique_ptr<Bench> make_memory_bench(const BenchContext&, const std::vector<PlanItem>&);
std::unique_ptr<Bench> make_collective_bench(const BenchContext&, const std::vector<PlanItem>&);
std::unique_ptr<Bench> make_copy_bench(const BenchContext&, const std::vector<PlanItem>&);

}  // namespace hetsim::calibrate::cuda
