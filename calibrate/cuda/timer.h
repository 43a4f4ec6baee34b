// The timing harness (calibrate/README.md "Method"): warm-up, CUDA events around each
// repetition, an L2 flush (a 256 MiB buffer written) before each repetition, and at least 5
// repetitions, continuing until 20 ms of samples or 100 repetitions.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "measurement.h"

namespace hetsim::calibrate::cuda {

// How many repetitions to take: the stopping rule shared by both timers.
struct RepetitionPolicy {
  int min_reps = 5;
  int max_reps = 100;
  double target_s = 0.020;
  // Repetitions to enqueue next, given those taken so far; 0 means stop.
  int next_batch(int done, double sum_s, double warmup_s) const;
};

// Times work enqueued on one stream of one device.
class Timer {
 public:
  static constexpr std::size_t kFlushBytes = std::size_t{256}
                                             << 20;  // larger than any L2 (B200: 126.5 MB)

  Timer(int device, cudaStream_t stream);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // `launch` enqueues the measured work on the stream (and checks its launches).
  Stats measure(const std::function<void()>& launch, bool flush_l2 = true);

  // Keeps the device busy (writing the flush buffer) for about `seconds`, so clocks ramp up.
  void warm_up(double seconds);

  cudaStream_t stream() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_;
  void* flush_buffer_ = nullptr;
  std::vector<cudaEvent_t> starts_, stops_;
  RepetitionPolicy policy_;
};

// Times work enqueued on one stream per device (collectives): each repetition's time is the
// longest of the per-device event intervals. No L2 flush: NCCL buffers are far larger than L2
// at the sizes where it matters, and nccl-tests does not flush either.
class MultiDeviceTimer {
 public:
  MultiDeviceTimer(std::vector<int> devices, std::vector<cudaStream_t> streams);
  ~MultiDeviceTimer();
  MultiDeviceTimer(const MultiDeviceTimer&) = delete;
  MultiDeviceTimer& operator=(const MultiDeviceTimer&) = delete;

  Stats measure(const std::function<void()>& launch);

 private:
  void synchronize_all() const;
  double batch(const std::function<void()>& launch, int reps, std::vector<double>* samples);

  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::vector<cudaEvent_t>> starts_, stops_;  // [device][repetition]
  RepetitionPolicy policy_;
};

}  // namespace hetsim::calibrate::cuda
