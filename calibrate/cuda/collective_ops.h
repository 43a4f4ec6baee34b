// One rank's part of an NCCL collective as nccl-tests sizes it (collective_bench.cu): `elements`
// bf16 values in the whole buffer (all-reduce, broadcast, send/receive), the gathered output
// (all-gather), the input (reduce-scatter) or each rank's send buffer (all-to-all). Shared by
// the single-process bench (every GPU of the node) and the MPI one (one rank per GPU).
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime.h>
#include <nccl.h>

namespace hetsim::calibrate::cuda {

// Throws std::invalid_argument for an unknown op; exits on an NCCL error (check.h).
void enqueue_collective(const std::string& op, void* send, void* recv, std::size_t elements,
                        int ranks, int rank, ncclComm_t comm, cudaStream_t stream);

}  // namespace hetsim::calibrate::cuda
