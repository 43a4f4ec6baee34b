// Runs a study's runs that its store does not hold yet, on local threads, recording each as it
// finishes (sim/study/store.h). A run that fails is recorded with its error; the rest go on.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "sim/study/store.h"
#include "sim/study/study.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::study {

// One run from its inputs to a record: the planner first for a policy's plan, then the run
// API. Never throws for the run's own failure: that is the record's error.
RunRecord simulate_run(const StudyRun& item, const workload::CostModel& cost,
                       const std::vector<std::string>& cost_warnings);

struct RunnerOptions {
  unsigned jobs = 1;  // threads
  // Called on the calling thread after each record is committed, and about once a second.
  std::function<void(size_t done, size_t total, size_t stored_before)> progress;
};

struct RunnerSummary {
  size_t total = 0;
  size_t stored_before = 0;  // skipped: the store had them
  size_t ran = 0;
  size_t failed = 0;  // of those run now
};

// Each thread reads the study's --efficiency and --calibration into cost models of its own
// (a measured cost model fills caches as it is used); only the calling thread writes the store.
RunnerSummary run_study(const Study& study, Store& store, const RunnerOptions& options);

}  // namespace hetsim::study
