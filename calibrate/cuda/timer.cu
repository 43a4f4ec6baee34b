// Timing harness: repetition policy, the single-stream timer with L2 flush, the multi-device timer.
#include "timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "check.h"

namespace hetsim::calibrate::cuda {

int RepetitionPolicy::next_batch(int done, double sum_s, double warmup_s) const {
  if (done >= max_reps) return 0;
  if (done >= min_reps && sum_s >= target_s) return 0;
  const double per_rep = done > 0 ? sum_s / done : std::max(warmup_s, 1e-7);
  const double want = std::ceil((target_s - sum_s) / per_rep);
  int reps = static_cast<int>(std::clamp(want, 1.0, static_cast<double>(max_reps)));
  reps = std::max(reps, min_reps - done);
  return std::min(reps, max_reps - done);
}

namespace {
void create_events(std::vector<cudaEvent_t>& events, int count) {
  events.resize(count);
  for (auto& e : events) CHECK_CUDA(cudaEventCreate(&e));
}
void destroy_events(std::vector<cudaEvent_t>& events) {
  for (auto& e : events) cudaEventDestroy(e);  // teardown: nothing useful to do on failure
  events.clear();
}
double elapsed_s(cudaEvent_t start, cudaEvent_t stop) {
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  return static_cast<double>(ms) * 1e-3;
}
}  // namespace

Timer::Timer(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  CHECK_CUDA(cudaSetDevice(device_));
  CHECK_CUDA(cudaMalloc(&flush_buffer_, kFlushBytes));
  create_events(starts_, policy_.max_reps);
  create_events(stops_, policy_.max_reps);
}

Timer::~Timer() {
  destroy_events(starts_);
  destroy_events(stops_);
  cudaFree(flush_buffer_);
}

void Timer::warm_up(double seconds) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    for (int i = 0; i < 20; ++i) CHECK_CUDA(cudaMemsetAsync(flush_buffer_, i, kFlushBytes, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
  }
}

Stats Timer::measure(const std::function<void()>& launch, bool flush_l2) {
  // Warm-up: the first launch pays lazy module loading and algorithm set-up; the second is timed
  // to size the first batch.
  launch();
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  if (flush_l2) CHECK_CUDA(cudaMemsetAsync(flush_buffer_, 0, kFlushBytes, stream_));
  CHECK_CUDA(cudaEventRecord(starts_[0], stream_));
  launch();
  CHECK_CUDA(cudaEventRecord(stops_[0], stream_));
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  const double warmup_s = elapsed_s(starts_[0], stops_[0]);

  std::vector<double> samples;
  double sum_s = 0;
  while (true) {
    const int reps = policy_.next_batch(static_cast<int>(samples.size()), sum_s, warmup_s);
    if (reps == 0) break;
    for (int r = 0; r < reps; ++r) {
      if (flush_l2) CHECK_CUDA(cudaMemsetAsync(flush_buffer_, r & 0xff, kFlushBytes, stream_));
      CHECK_CUDA(cudaEventRecord(starts_[r], stream_));
      launch();
      CHECK_CUDA(cudaEventRecord(stops_[r], stream_));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    for (int r = 0; r < reps; ++r) {
      const double t = elapsed_s(starts_[r], stops_[r]);
      samples.push_back(t);
      sum_s += t;
    }
  }
  return summarize(samples);
}

MultiDeviceTimer::MultiDeviceTimer(std::vector<int> devices, std::vector<cudaStream_t> streams)
    : devices_(std::move(devices)), streams_(std::move(streams)) {
  starts_.resize(devices_.size());
  stops_.resize(devices_.size());
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    CHECK_CUDA(cudaSetDevice(devices_[d]));
    create_events(starts_[d], policy_.max_reps);
    create_events(stops_[d], policy_.max_reps);
  }
}

MultiDeviceTimer::~MultiDeviceTimer() {
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    cudaSetDevice(devices_[d]);
    destroy_events(starts_[d]);
    destroy_events(stops_[d]);
  }
}

void MultiDeviceTimer::synchronize_all() const {
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    CHECK_CUDA(cudaSetDevice(devices_[d]));
    CHECK_CUDA(cudaStreamSynchronize(streams_[d]));
  }
}

Stats MultiDeviceTimer::measure(const std::function<void()>& launch) {
  launch();  // warm-up: NCCL connects its channels lazily on first use of a pattern
  synchronize_all();
  std::vector<double> warm;
  batch(launch, 1, &warm);
  const double warmup_s = warm.front();

  std::vector<double> samples;
  double sum_s = 0;
  while (true) {
    const int reps = policy_.next_batch(static_cast<int>(samples.size()), sum_s, warmup_s);
    if (reps == 0) break;
    sum_s += batch(launch, reps, &samples);
  }
  return summarize(samples);
}

// Enqueues `reps` repetitions (each device's start events, the launch, each device's stops),
// waits, and appends each repetition's slowest device interval; returns their sum.
double MultiDeviceTimer::batch(const std::function<void()>& launch, int reps,
                               std::vector<double>* samples) {
  for (int r = 0; r < reps; ++r) {
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      CHECK_CUDA(cudaSetDevice(devices_[d]));
      CHECK_CUDA(cudaEventRecord(starts_[d][r], streams_[d]));
    }
    launch();
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      CHECK_CUDA(cudaSetDevice(devices_[d]));
      CHECK_CUDA(cudaEventRecord(stops_[d][r], streams_[d]));
    }
  }
  synchronize_all();
  double sum_s = 0;
  for (int r = 0; r < reps; ++r) {
    double slowest = 0;
    for (std::size_t d = 0; d < devices_.size(); ++d)
      slowest = std::max(slowest, elapsed_s(starts_[d][r], stops_[d][r]));
    samples->push_back(slowest);
    sum_s += slowest;
  }
  return sum_s;
}

}  // namespace hetsim::calibrate::cuda
