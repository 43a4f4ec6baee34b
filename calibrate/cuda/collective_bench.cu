// NCCL collective points across every GPU of the node from this one process (ncclCommInitAll,
// one stream per GPU, grouped launches). Sizes follow nccl-tests: `bytes` is the whole buffer
// (all-reduce, broadcast, send/receive: the buffer; all-gather: the gathered output;
// reduce-scatter: the input; all-to-all: each rank's send buffer). Data type bf16.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bench.h"
#include "check.h"
#include "collective_ops.h"
#include "device_buffer.h"

namespace hetsim::calibrate::cuda {

void enqueue_collective(const std::string& op, void* send_buffer, void* recv_buffer,
                        std::size_t elements, int ranks, int rank, ncclComm_t comm,
                        cudaStream_t s) {
  auto* send = static_cast<char*>(send_buffer);
  auto* recv = static_cast<char*>(recv_buffer);
  const std::size_t chunk = elements / ranks;
  if (op == "allreduce") {
    CHECK_NCCL(ncclAllReduce(send, recv, elements, ncclBfloat16, ncclSum, comm, s));
  } else if (op == "allgather") {
    CHECK_NCCL(ncclAllGather(send, recv, chunk, ncclBfloat16, comm, s));
  } else if (op == "reducescatter") {
    CHECK_NCCL(ncclReduceScatter(send, recv, chunk, ncclBfloat16, ncclSum, comm, s));
  } else if (op == "alltoall") {  // grouped send/receive, as nccl-tests does it
    CHECK_NCCL(ncclGroupStart());
    for (int peer = 0; peer < ranks; ++peer) {
      CHECK_NCCL(ncclSend(send + peer * chunk * 2, chunk, ncclBfloat16, peer, comm, s));
      CHECK_NCCL(ncclRecv(recv + peer * chunk * 2, chunk, ncclBfloat16, peer, comm, s));
    }
    CHECK_NCCL(ncclGroupEnd());
  } else if (op == "broadcast") {
    CHECK_NCCL(ncclBroadcast(send, recv, elements, ncclBfloat16, 0, comm, s));
  } else if (op == "sendrecv") {  // a ring: each rank sends to the next, receives from the previous
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclSend(send, elements, ncclBfloat16, (rank + 1) % ranks, comm, s));
    CHECK_NCCL(ncclRecv(recv, elements, ncclBfloat16, (rank + ranks - 1) % ranks, comm, s));
    CHECK_NCCL(ncclGroupEnd());
  } else {
    throw std::invalid_argument("unknown collective \"" + op + "\" (expected allreduce, "
                                "allgather, reducescatter, alltoall, broadcast, sendrecv)");
  }
}

namespace {
class CollectiveBench final : public Bench {
 public:
  CollectiveBench(const BenchContext& context, const std::vector<PlanItem>& items) : context_(context) {
    int count = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    std::size_t bytes = 0;
    for (const PlanItem& item : items) bytes = std::max(bytes, static_cast<std::size_t>(item.key.bytes));
    for (int d = 0; d < count; ++d) devices_.push_back(d);
    comms_.resize(devices_.size());
    CHECK_NCCL(ncclCommInitAll(comms_.data(), count, devices_.data()));
    for (int d : devices_) {
      CHECK_CUDA(cudaSetDevice(d));
      cudaStream_t stream = nullptr;
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams_.push_back(stream);
      send_.emplace_back(bytes);
      recv_.emplace_back(bytes);
      CHECK_CUDA(cudaMemset(send_.back().get(), 0, bytes));
      CHECK_CUDA(cudaMemset(recv_.back().get(), 0, bytes));
    }
    timer_ = std::make_unique<MultiDeviceTimer>(devices_, streams_);
    CHECK_CUDA(cudaSetDevice(context_.device));
  }

  ~CollectiveBench() override {
    timer_.reset();
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      cudaSetDevice(devices_[i]);
      ncclCommDestroy(comms_[i]);
      cudaStreamDestroy(streams_[i]);
    }
    send_.clear();
    recv_.clear();
    cudaSetDevice(context_.device);
  }

  std::optional<Stats> measure(const Key& key) override {
    const int n = static_cast<int>(devices_.size());
    const std::size_t elements = static_cast<std::size_t>(key.bytes) / 2;  // bf16
    const Stats stats = timer_->measure([&] {
      CHECK_NCCL(ncclGroupStart());
      for (int r = 0; r < n; ++r)
        enqueue_collective(key.name, send_[r].get(), recv_[r].get(), elements, n, r, comms_[r], streams_[r]);
      CHECK_NCCL(ncclGroupEnd());
    });
    CHECK_CUDA(cudaSetDevice(context_.device));
    return stats;
  }

 private:
  BenchContext context_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<DeviceBuffer> send_, recv_;
  std::unique_ptr<MultiDeviceTimer> timer_;
};
}  // namespace

std::unique_ptr<Bench> make_collective_bench(const BenchContext& context,
                                             const std::vector<PlanItem>& items) {
  return std::make_unique<CollectiveBench>(context, items);
}

}  // namespace hetsim::calibrate::cuda
