// The planner: every selected policy proposes plans; each proposal is validated as a plan file
// would be, its memory checked before anything runs (plans that cannot fit are dropped with the
// reason), and the rest replayed (identical replicas folded, so a replay of a 1024-GPU job takes a
// fraction of a second). Candidates come back best first.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/policy/policy.h"
#include "sim/report/training_report.h"
#include "sim/workload/cost_model.h"

namespace hetsim::policy {

struct Candidate {
  Proposal proposal;
  enum class Outcome { replayed, invalid, out_of_memory } outcome = Outcome::invalid;
  std::string reason;         // invalid or out of memory: why
  double iteration_s = 0;     // replayed
  double peak_bytes = 0;      // the fullest GPU's peak (replayed or out of memory)
  double capacity_bytes = 0;  // that GPU's memory
  std::optional<report::TrainingReport> report;  // replayed
};

struct SearchProgress {
  size_t done = 0, total = 0;
};

struct Search {
  std::vector<Candidate> ranked;    // replayed, fastest first (ties: proposal order)
  std::vector<Candidate> rejected;  // invalid and out of memory, in proposal order
  size_t proposed = 0;
};

// Throws InputError when nothing can run: no proposal is a valid plan (with the first reason), or
// none fits in memory (with how much the closest one lacks).
Search search(const Request& r, const std::vector<const Policy*>& policies,
              const workload::CostModel& cost,
              const std::function<void(const SearchProgress&)>& progress = {});

}  // namespace hetsim::policy
