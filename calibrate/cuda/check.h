// Return-code checks for the CUDA runtime, cuBLASLt, NCCL and cuDNN (hardware.md §5: check
// every call). A failed call prints the file, the line, the call and the library's message, then
// exits 1: this is a standalone measurement program, and a half-measured device is worth nothing.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef HETSIM_CALIBRATE_CUDNN
#include <cudnn_graph.h>
#endif
#ifdef HETSIM_CALIBRATE_NCCL
#include <nccl.h>
#endif

namespace hetsim::calibrate::cuda {

// Called before exiting on a failed call: the MPI run sets it to abort every rank, so that no
// rank waits forever for one that has gone.
inline void (*fail_hook)() = nullptr;

[[noreturn]] inline void fail_call(const char* file, int line, const char* call,
                                   const char* library, const char* message) {
  std::fprintf(stderr, "%s:%d: %s failed: %s: %s\n", file, line, call, library, message);
  std::fflush(stderr);
  if (fail_hook != nullptr) fail_hook();
  std::exit(1);
}

}  // namespace hetsim::calibrate::cuda

#define CHECK_CUDA(call)                                                       \
  do {                                                                         \
    const cudaError_t check_status_ = (call);                                  \
    if (check_status_ != cudaSuccess)                                          \
      ::hetsim::calibrate::cuda::fail_call(__FILE__, __LINE__, #call, "CUDA",  \
                                           cudaGetErrorString(check_status_)); \
  } while (0)

#define CHECK_CUBLAS(call)                                                          \
  do {                                                                              \
    const cublasStatus_t check_status_ = (call);                                    \
    if (check_status_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::hetsim::calibrate::cuda::fail_call(__FILE__, __LINE__, #call, "cuBLAS",     \
                                           cublasLtGetStatusString(check_status_)); \
  } while (0)

#ifdef HETSIM_CALIBRATE_NCCL
#define CHECK_NCCL(call)                                                       \
  do {                                                                         \
    const ncclResult_t check_status_ = (call);                                 \
    if (check_status_ != ncclSuccess)                                          \
      ::hetsim::calibrate::cuda::fail_call(__FILE__, __LINE__, #call, "NCCL",  \
                                           ncclGetErrorString(check_status_)); \
  } while (0)
#endif

#ifdef HETSIM_CALIBRATE_CUDNN
#define CHECK_CUDNN(call)                                                       \
  do {                                                                          \
    const cudnnStatus_t check_status_ = (call);                                 \
    if (check_status_ != CUDNN_STATUS_SUCCESS)                                  \
      ::hetsim::calibrate::cuda::fail_call(__FILE__, __LINE__, #call, "cuDNN",  \
                                           cudnnGetErrorString(check_status_)); \
  } while (0)
#endif

// After a kernel launch: a bad configuration shows up here, a fault at the next synchronisation.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())
