// zero: data parallelism with the training state sharded over the data-parallel GPUs
// (Rajbhandari et al., SC'20: ZeRO stage 1 shards the optimizer state, 2 also the gradients,
// 3 also the parameters; PyTorch FSDP's full sharding is stage 3).
//
// Decides the ZeRO stage, the micro-batch size and activation recompute; every GPU runs the whole
// model on its share of the batch (no tensor or pipeline parallelism). The paper's guidance is to
// take the lowest stage whose memory fits, since each stage adds communication (stage 3 gathers
// every layer's parameters in the forward and the backward pass); hetsim proposes every stage and
// lets the memory model and the replay decide. Frameworks: DeepSpeed for stages 1 and 2, PyTorch
// FSDP for stage 3, unless the request names one.
#include <fmt/format.h>

#include "sim/policy/policy.h"

namespace hetsim::policy {

namespace {

class Zero final : public Policy {
 public:
  const char* name() const override { return "zero"; }
  const char* summary() const override {
    return "sharded data parallelism, ZeRO stages 1-3 (DeepSpeed, PyTorch FSDP)";
  }

  std::vector<Proposal> propose(const Request& r) const override {
    std::vector<Proposal> out;
    const int64_t gpus = static_cast<int64_t>(r.cluster->gpu_count());
    if (gpus < 2 || r.global_batch % gpus != 0) return out;
    for (int stage : {1, 2, 3}) {
      for (int64_t mb : micro_batch_sizes(r.global_batch / gpus)) {
        for (const char* recompute : {"none", "full"}) {
          const std::string framework =
              !r.framework.empty() ? r.framework : (stage == 3 ? "pytorch-fsdp" : "deepspeed");
          Proposal p;
          p.policy = name();
          p.label = fmt::format("zero {} dp {} mb {} recompute {} ({})", stage, gpus, mb, recompute,
                                framework);
          p.plan = fmt::format(
              "# {} policy: {}\ndata_parallel: {}\nmicro_batch_size: {}\nglobal_batch_size: {}\n"
              "sequence_length: {}\nrecompute: {}\nzero_stage: {}\nframework: {}\n",
              name(), p.label, gpus, mb, r.global_batch, r.sequence, recompute, stage, framework);
          out.push_back(std::move(p));
        }
      }
    }
    return out;
  }
};

}  // namespace

const Policy& zero_policy() {
  static const Zero p;
  return p;
}

}  // namespace hetsim::policy
