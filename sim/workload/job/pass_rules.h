// The rules of how a pass of a training step runs that both evaluators of a step take it by, the
// replay's tasks (build_training_job) and the estimator's closed forms (policy/estimate.cpp), so
// that each rule is written once:
// - how a run of steps (a layer's forward or backward pass, ops.h) executes on a device: its
//   segments of kernels and its collectives (cut_steps);
// - what a pass through a virtual pipeline stage runs besides its layers: receives, the
//   framework's gathers of a received slice, the embedding, the head, sends (pass_ends);
// - what each layer runs again before its backward pass (layer_rerun, rerun_layers).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/workload/model/ops.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::workload {

// One piece of a run of steps, in order.
struct StepCut {
  enum class Kind : uint8_t {
    kernels,     // steps [first, first + count): consecutive kernels, run as one segment
    collective,  // step `first`: a collective (tensor-, context- or expert-parallel)
    wait,        // the device waits for the overlapping collective before it goes on
  };
  Kind kind = Kind::kernels;
  // A collective that runs beside the next segment (one kernel) and is waited for at its end.
  bool overlaps = false;
  uint32_t first = 0, count = 0;
};

// The rule:
// - consecutive kernels are one segment, which takes the longer of its kernels' GPU time and the
//   host's time to issue them (a host-bound run of small kernels);
// - a collective ends the segment before it, and the device waits for it where it is not
//   asynchronous;
// - an asynchronous collective (tensor- or context-parallel: an expert all-to-all always blocks)
//   runs beside the one kernel after it, which is a segment of its own, and is waited for at that
//   kernel's end; where no kernel comes before the next collective, the next one queues behind it
//   on the same stream, and at the end of the run the device waits for it.
std::vector<StepCut> cut_steps(const std::vector<Step>& steps);

// What one pass of one micro-batch through virtual stage `vs` of `V` runs besides its layers:
// - forward: an activation received from the stage before (not on the first virtual stage),
//   all-gathered `gathers` times over the stage's tensor-parallel ranks where the framework
//   sends it in slices (Framework::pipeline_gathers_forward, gathers_pipeline_slices); the
//   embedding on the first virtual stage; the layers; the head on the last, else a send to the
//   next stage;
// - backward: a gradient received from the stage after (not on the last), gathered likewise
//   (pipeline_gathers_backward); the head's backward on the last; the layers; the embedding's on
//   the first, else a send to the stage before.
struct PassEnds {
  bool receive = false, embedding = false, head = false, send = false;
  int gathers = 0;  // the received slice's all-gathers (0 without a receive)
};
PassEnds pass_ends(const Plan& plan, int tensor_parallel, int vs, int V, bool forward);

// What lies outside the layers, as one tensor-parallel rank of a `t`-way stage holds it: the
// embedding on the first stage (split over the `t` ranks), the final norm and the head on the
// last (split over ModelConfig::output_ranks: a language-model head over all `t`, a classifier
// whole on each). ZeRO-3 gathers the weights as a pass starts; ZeRO-2 and 3 reduce-scatter the
// gradients after the backward pass, and the head's close the last gradient bucket. The word
// embedding's gradients leave the embedding's where a staged plan reduces its tied copies on
// their own (`word_apart`).
struct OuterParams {
  double embedding = 0, embedding_grads = 0;  // parameters, all ranks together
  double head = 0, head_grads = 0;            // ModelConfig::head_params, output_params
  int t = 1, head_ranks = 1;
  // One rank's share of a stage that holds the first stage's part, the last's, or both: summed
  // over the parts before it is split where both are split alike.
  double weights_on(bool first, bool last) const { return on(first, last, embedding, head); }
  double grads_on(bool first, bool last) const {
    return on(first, last, embedding_grads, head_grads);
  }

 private:
  double on(bool first, bool last, double e, double h) const;
};
OuterParams outer_params(const ModelConfig& m, int stages, int t, bool word_apart = false);

// What a layer runs again before its backward pass (Plan::recompute): its whole forward pass
// (full), the attention core (selective: Megatron-LM's), or the share of the forward pass that
// torchtitan's op-level policy does not keep (selective_op); nothing without recomputation, or
// under full recomputation of only the first Plan::recompute_layers layers of each model chunk
// past those. `index`: the layer's place in its model chunk.
enum class LayerRerun : uint8_t { nothing, forward, attention_core, selected_ops };
LayerRerun layer_rerun(const Plan& plan, int index);
// How many of a model chunk's `layers` run something again: every one, or the first
// Plan::recompute_layers.
int rerun_layers(const Plan& plan, int layers);

// Gradient buckets as a backward pass fills them (PyTorch DDP's, DeepSpeed's and Megatron-LM's):
// gradients join the open bucket in the order they are produced, and it goes out once it holds
// the bucket size; what is held at the end, with the gradients that come last (the embedding's,
// the head's), goes out as the last bucket. A bucket of a tensor-parallel rank's shares that is
// cut by the bytes per rank of a narrower holder compares `scale` (the rank's degree) times what
// it holds with the size times the holder's degree.
class GradBuckets {
 public:
  // Adds `bytes`; where the open bucket now holds `size` (held x scale >= size), returns what it
  // holds and opens the next, else 0.
  double add(double bytes, double size, double scale = 1) {
    held_ += bytes;
    if (!(held_ * scale >= size)) return 0;
    return close();
  }
  // The open bucket with `bytes` more, closed: what it holds (0 where nothing).
  double close(double bytes = 0) {
    held_ += bytes;
    const double out = held_;
    held_ = 0;
    return out;
  }
  double held() const { return held_; }

 private:
  double held_ = 0;
};

}  // namespace hetsim::workload
