// The planner: every selected policy proposes plans; each proposal is validated as a plan file
// would be, its memory checked before anything runs (plans that cannot fit are dropped with the
// reason), and the rest replayed (identical replicas folded, so a replay of a 1024-GPU job takes a
// fraction of a second), fastest bound first, skipping those that cannot make the list
// (SearchOptions), in the order of the analytic estimate (estimate.h) so that the best are found
// early and the bound prunes more. Before the replays, a search walks from the best proposals by
// one-step changes while the estimate improves (SearchOptions::explore). Candidates come back best
// first.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/policy/policy.h"
#include "sim/report/training_report.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::policy {

struct Candidate {
  Proposal proposal;
  enum class Outcome {
    replayed,
    estimated,  // not replayed: beyond SearchOptions::replay_limit; iteration_s is the estimate
    invalid,
    out_of_memory,
    pruned
  } outcome = Outcome::invalid;
  std::string reason;         // not replayed: why
  double iteration_s = 0;     // replayed (or estimated)
  double estimate_s = 0;      // the analytic estimate (estimate.h), for every plan that fits
  double peak_bytes = 0;      // the fullest GPU's peak (replayed or out of memory)
  double capacity_bytes = 0;  // that GPU's memory
  std::optional<report::TrainingReport> report;  // replayed
  size_t index = 0;  // among the proposals, in the policies' order: breaks ties in the ranking
};

struct SearchProgress {
  size_t done = 0, total = 0;
};

struct SearchOptions {
  // Replay a plan only if its compute bound (the busiest GPU's kernels back to back, which no
  // replay can beat) is below the `keep`-th best time replayed so far or below its own policy's
  // best: the `keep` best, and each policy's best, come out exactly as without pruning.
  bool prune = true;
  size_t keep = 5;
  // Replay at most this many plans, the best by the analytic estimate (0: no limit). The others
  // come back as `estimated`, ranked by their estimate after the replayed ones.
  size_t replay_limit = 0;
  // The search around the proposals: from each policy's best estimate and the `explore_starts`
  // best overall, one-step changes (neighbours.h) taken while the estimate improves by at least
  // 0.5%, at most `explore_rounds` of them; each plan it reaches is a candidate of its own
  // (policy "search"), replayed like the others.
  bool explore = true;
  size_t explore_starts = 4;
  int explore_rounds = 8;
};

struct Search {
  std::vector<Candidate> ranked;    // replayed, fastest first (ties: proposal order), then
                                    // estimated (replay_limit), best estimate first
  std::vector<Candidate> rejected;  // invalid, out of memory (proposal order), then pruned
  size_t proposed = 0;
  size_t explored = 0;  // plans the search around the proposals estimated (SearchOptions::explore)
  size_t reached = 0;   // of which it kept as candidates (policy "search")
};

// Throws InputError when nothing can run: no proposal is a valid plan (with the first reason), or
// none fits in memory (with how much the closest one lacks).
Search search(const Request& r, const std::vector<const Policy*>& policies,
              const workload::CostModel& cost, const SearchOptions& options = {},
              const std::function<void(const SearchProgress&)>& progress = {});

// The search as `hetsim plan --json` prints it: the request, the candidates (each with its plan
// and, where replayed, its report) and the rejected proposals with their reasons.
nlohmann::ordered_json to_json(const Search& s, const Request& req);

}  // namespace hetsim::policy
