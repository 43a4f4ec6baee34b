#include "sim/workload/job/step_cuts.h"

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

}  // namespace hetsim::workload
