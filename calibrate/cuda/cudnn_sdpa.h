// cuDNN's fused scaled-dot-product attention (its flash-attention engines) through the backend
// graph API, without the C++ frontend: bf16 Q, K, V in BHSD layout, FP32 softmax statistics,
// scale 1/sqrt(head_dim), causal (top-left) or not, forward or backward. Where cuDNN cannot build
// a plan, supported() is false and reason() says which step failed and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn_graph.h>

namespace hetsim::calibrate::cuda {

struct SdpaShape {
  std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool causal = false;
  bool backward = false;  // false: O and stats from Q, K, V; true: dQ, dK, dV
};

// Device pointers, each tensor packed BHSD. q, k, v, o, dout, dq, dk, dv: bf16 [B, H, S, D];
// stats: FP32 [B, H, S, 1], the log-sum-exp of each row of the scaled (masked) scores, written by
// the forward pass and read by the backward pass. A pass ignores the pointers it does not use.
struct SdpaBuffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *stats = nullptr;
  void *dout = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// One backend descriptor, destroyed with its owner.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnStatus_t create(cudnnBackendDescriptorType_t type);  // replaces any descriptor held
  cudnnBackendDescriptor_t get() const { return descriptor_; }

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

class CudnnSdpa {
 public:
  // Builds the operation graph, asks cuDNN's heuristics (mode A) for engine configurations and
  // keeps the first one whose execution plan finalises. Never throws for a shape or a cuDNN that
  // cannot run it: supported() is then false.
  CudnnSdpa(cudnnHandle_t handle, const SdpaShape& shape);
  ~CudnnSdpa();  // destroys every descriptor it made, newest first
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  bool supported() const { return plan_ != nullptr; }
  // Empty when supported; else "<step>: <cudnnGetErrorString>" and cuDNN's own last message.
  const std::string& reason() const { return reason_; }

  // Device bytes run() needs at `workspace`: the plan's workspace and, backward, the FP32 dQ
  // accumulator and the row sums of dO * O that the graph keeps in global memory.
  std::size_t workspace_bytes() const;

  // Enqueues the pass on `stream` (cudnnBackendExecute with a variant pack, built on the first
  // call and reused while the buffers and workspace stay the same, so a timed repetition pays no
  // descriptor work on the host; backward on cuDNN before 9.6 first zeroes the dQ accumulator,
  // as the cuDNN frontend does); a failing call ends the program through check.h. Requires
  // supported().
  void run(const SdpaBuffers& buffers, void* workspace, cudaStream_t stream) const;
  // The same, returning cuDNN's status instead of ending the program: a plan that finalised can
  // still fail at execution (CUDNN_STATUS_EXECUTION_FAILED, NOT_SUPPORTED), and the caller then
  // measures the unfused path. A CUDA failure (the accumulator's memset) still ends the program.
  cudnnStatus_t try_run(const SdpaBuffers& buffers, void* workspace, cudaStream_t stream) const;

 private:
  void build();

  cudnnHandle_t handle_;
  SdpaShape shape_;
  std::vector<BackendDescriptor> owned_;  // in creation order
  cudnnBackendDescriptor_t plan_ = nullptr;
  std::string reason_;
  std::size_t plan_workspace_bytes_ = 0;
  bool zero_dq_accumulator_ = false;  // cuDNN before 9.6 leaves that to the caller
  // By-value scalars of the graph; the variant pack points at them.
  float scale_ = 1.0f, mask_value_ = 0.0f, one_ = 1.0f;
  // The variant pack of the last run() and the pointers it binds.
  mutable BackendDescriptor pack_;
  mutable std::vector<const void*> pack_pointers_;
};

// "<cudnnGetErrorString>: <cuDNN's last message, first line>" for a failed call.
std::string cudnn_status_text(cudnnStatus_t status);

// The cuDNN library loaded at run time, e.g. "9.13.0" (from cudnnGetVersion()).
std::string cudnn_version_string();

}  // namespace hetsim::calibrate::cuda
