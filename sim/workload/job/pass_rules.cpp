#include "sim/workload/job/pass_rules.h"

#include <algorithm>

namespace hetsim::workload {

std::vector<StepCut> cut_steps(const std::vector<Step>& steps) {
  std::vector<StepCut> cuts;
  bool open = false;             // the last cut is a segment still taking kernels
  bool wait_after_next = false;  // an overlapping collective waits for the next kernel
  for (uint32_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    if (st.comm != CommKind::none) {
      open = false;
      const bool overlaps = st.async && !st.expert;
      cuts.push_back(StepCut{StepCut::Kind::collective, overlaps, i, 1});
      wait_after_next = overlaps;
      continue;
    }
    if (open) {
      ++cuts.back().count;
    } else {
      cuts.push_back(StepCut{StepCut::Kind::kernels, false, i, 1});
      open = true;
    }
    if (wait_after_next) {
      cuts.push_back(StepCut{StepCut::Kind::wait, false, i, 0});
      open = wait_after_next = false;
    }
  }
  if (wait_after_next)
    cuts.push_back(StepCut{StepCut::Kind::wait, false, static_cast<uint32_t>(steps.size()), 0});
  return cuts;
}

double OuterParams::on(bool first, bool last, double e, double h) const {
  if (head_ranks == t) return ((first ? e : 0.0) + (last ? h : 0.0)) / t;
  return (first ? e / t : 0.0) + (last ? h / head_ranks : 0.0);
}

OuterParams outer_params(const ModelConfig& m, int stages, int t, bool word_apart) {
  OuterParams o;
  o.embedding = static_cast<double>(m.embedding_params());
  o.embedding_grads = o.embedding - (word_apart ? static_cast<double>(m.vocab) * m.hidden : 0.0);
  o.head = m.head_params(stages);
  o.head_grads = static_cast<double>(m.output_params());
  o.t = t;
  o.head_ranks = m.output_ranks(t);
  return o;
}

PassEnds pass_ends(const Plan& plan, int tensor_parallel, int vs, int V, bool forward) {
  PassEnds e;
  const bool first = vs == 0, last = vs == V - 1;
  e.receive = forward ? !first : !last;
  e.embedding = first;
  e.head = last;
  e.send = forward ? !last : !first;
  if (e.receive && gathers_pipeline_slices(plan, tensor_parallel))
    e.gathers = forward ? plan.framework.pipeline_gathers_forward
                        : plan.framework.pipeline_gathers_backward;
  return e;
}

LayerRerun layer_rerun(const Plan& plan, int index) {
  switch (plan.layer_recompute(index)) {
    case Recompute::full:
      return LayerRerun::forward;
    case Recompute::selective:
      return LayerRerun::attention_core;
    case Recompute::selective_op:
      return LayerRerun::selected_ops;
    case Recompute::none:
      break;
  }
  return LayerRerun::nothing;
}

int rerun_layers(const Plan& plan, int layers) {
  if (plan.recompute == Recompute::none) return 0;
  return plan.recompute_layers == 0 ? layers : std::min(plan.recompute_layers, layers);
}

}  // namespace hetsim::workload
