// The planner; see planner.h.
#include "sim/policy/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/policy/estimate.h"
#include "sim/policy/neighbours.h"
#include "sim/workload/job/memory.h"
#include "sim/workload/job/training_job.h"
#include "sim/workload/plan/plan.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::policy {

namespace {

// The fullest GPU of a plan by the memory model (the groups alone, not their programs): the
// one furthest over (or least under) its capacity.
workload::DeviceMemory fullest_gpu(const Request& r, const workload::Plan& plan) {
  const workload::TrainingJob job = workload::skeleton_job(*r.model, plan, *r.cluster);
  const std::vector<workload::DeviceMemory> memory = workload::memory_per_copy(job);
  const workload::DeviceMemory* fullest = &memory.front();
  for (const workload::DeviceMemory& m : memory) {
    if (m.peak - m.capacity > fullest->peak - fullest->capacity) fullest = &m;
  }
  return *fullest;
}

// SearchOptions::explore: from each policy's best estimate and the best few overall, the best
// one-step change while it improves the estimate by 0.5% or more; each plan reached (that no
// proposal is) joins `fits` as a candidate of policy "search".
void explore(const Request& r, const SearchOptions& options, Estimator& estimator, size_t first,
             std::vector<Candidate>& fits, std::vector<workload::Plan>& plans,
             std::vector<double>& bounds, Search& out) {
  std::vector<size_t> by_estimate(fits.size());
  for (size_t i = 0; i < by_estimate.size(); ++i) by_estimate[i] = i;
  std::stable_sort(by_estimate.begin(), by_estimate.end(),
                   [&](size_t a, size_t b) { return fits[a].estimate_s < fits[b].estimate_s; });
  std::vector<size_t> starts;
  std::map<std::string, bool> policy_seen;
  for (size_t i : by_estimate) {
    const bool top = starts.size() < options.explore_starts;
    const bool first_of_policy = policy_seen.emplace(fits[i].proposal.policy, true).second;
    if (top || first_of_policy) starts.push_back(i);
  }
  std::set<std::string> seen;  // plan texts already estimated
  for (const Candidate& c : fits) seen.insert(c.proposal.plan);
  const size_t proposals = fits.size();
  for (size_t start : starts) {
    std::string text = fits[start].proposal.plan;
    workload::Plan plan = plans[start];
    double estimate = fits[start].estimate_s, bound = bounds[start];
    workload::DeviceMemory memory;
    std::vector<std::string> changes;
    for (int round = 0; round < options.explore_rounds; ++round) {
      std::optional<workload::Plan> best_plan;
      std::string best_text, best_change;
      double best = estimate * (1 - 0.005), best_bound = 0;
      workload::DeviceMemory best_memory;
      for (Neighbour& n : neighbours(text, plan, *r.cluster)) {
        if (!seen.insert(n.plan).second) continue;
        ++out.explored;
        try {
          workload::Plan p = workload::load_plan_text(n.plan, "search", *r.model, *r.cluster);
          const workload::DeviceMemory m = fullest_gpu(r, p);
          if (m.oom()) continue;
          const Estimate e = estimator.estimate(p);
          if (e.iteration_s < best) {
            best = e.iteration_s;
            best_bound = e.compute_s;
            best_plan = std::move(p);
            best_text = std::move(n.plan);
            best_change = std::move(n.change);
            best_memory = m;
          }
        } catch (const InputError&) {
          continue;  // a change the loader refuses
        }
      }
      if (!best_plan) break;
      text = std::move(best_text);
      plan = std::move(*best_plan);
      estimate = best;
      bound = best_bound;
      memory = best_memory;
      changes.push_back(std::move(best_change));
    }
    if (changes.empty()) continue;
    Candidate c;
    c.proposal.policy = "search";
    // The changes in the order first taken, each with how many times ("a layer from stage 2 to
    // 1 x3").
    std::vector<std::pair<std::string, int>> counted;
    for (const std::string& x : changes) {
      auto it =
          std::find_if(counted.begin(), counted.end(), [&](const auto& c) { return c.first == x; });
      if (it == counted.end()) {
        counted.emplace_back(x, 1);
      } else {
        ++it->second;
      }
    }
    std::string steps;
    for (const auto& [x, n] : counted)
      steps += (steps.empty() ? "" : ", ") + x + (n > 1 ? fmt::format(" x{}", n) : "");
    c.proposal.label = fmt::format("from {} ({}): {}", fits[start].proposal.policy,
                                   fits[start].proposal.label, steps);
    c.proposal.plan = "# search: " + c.proposal.label + "\n" + text;
    c.index = first + (fits.size() - proposals);
    c.estimate_s = estimate;
    c.peak_bytes = memory.peak;
    c.capacity_bytes = memory.capacity;
    fits.push_back(std::move(c));
    plans.push_back(std::move(plan));
    bounds.push_back(bound);
    ++out.reached;
  }
}

// The planner's policies split dense transformers: a convolutional network or a mixture of
// experts is refused, saying what to do instead.
void check_searchable(const Request& r) {
  if (r.model->convolutional()) {
    throw InputError(fmt::format(
        "{}: is a convolutional network; the planner's policies split transformers. Replay a "
        "grid plan (grid: {{rows: R, columns: C}}, split: gholami picks each layer's split as "
        "Gholami et al. do) with hetsim simulate",
        r.model->name));
  }
  if (r.model->moe()) {
    // The policies' cost models and the estimator know dense layers only; a plan they would
    // propose for a MoE model (no expert parallelism, experts costed as a dense FFN) would rank
    // wrongly. `hetsim simulate` replays MoE plans written by hand.
    throw InputError(fmt::format(
        "{}: is a mixture of experts ({} experts per MoE layer); the planner does not search "
        "expert parallelism yet: write the plan (expert_parallel: N) and replay it with hetsim "
        "simulate",
        r.model->name, r.model->experts));
  }
}

// What a search carries between its passes: the candidates that fit, their plans and compute
// bounds (index-aligned), and the progress reported.
struct Pass {
  Search out;
  std::vector<Candidate> fits;
  std::vector<workload::Plan> plans;
  std::vector<double> bounds;
  SearchProgress status;
  const std::function<void(const SearchProgress&)>& progress;
  void step() {
    ++status.done;
    if (progress) progress(status);
  }
};

// The first pass: every proposal validated and its memory checked (cheap); those that fit keep
// their estimate and their busiest group's compute, the others are rejected with the reason.
void screen(const Request& r, std::vector<Proposal>& proposals, Estimator& estimator, Pass& s) {
  for (size_t index = 0; index < proposals.size(); ++index) {
    Candidate c;
    c.proposal = std::move(proposals[index]);
    c.index = index;
    try {
      workload::Plan plan = workload::load_plan_text(
          c.proposal.plan, c.proposal.policy + " proposal", *r.model, *r.cluster);
      const workload::DeviceMemory fullest = fullest_gpu(r, plan);
      c.peak_bytes = fullest.peak;
      c.capacity_bytes = fullest.capacity;
      if (fullest.oom()) {
        c.outcome = Candidate::Outcome::out_of_memory;
        c.reason =
            fmt::format("needs {} per GPU where the GPU holds {}",
                        config::format_bytes(fullest.peak), config::format_bytes(fullest.capacity));
        s.out.rejected.push_back(std::move(c));
      } else {
        // The busiest group's kernels back to back: no replay of the plan can take less.
        const Estimate e = estimator.estimate(plan);
        s.bounds.push_back(e.compute_s);
        c.estimate_s = e.iteration_s;
        s.plans.push_back(std::move(plan));
        s.fits.push_back(std::move(c));
      }
    } catch (const InputError& e) {
      c.outcome = Candidate::Outcome::invalid;
      c.reason = e.what();
      s.out.rejected.push_back(std::move(c));
    }
    s.step();
  }
}

// The second pass: the candidates that fit, replayed in the order of their estimates, skipping
// those whose bound is already no better than the `keep`-th best replayed time (they cannot
// enter that list, which is therefore exact) nor than their policy's best.
void replay_in_order(const Request& r, const workload::CostModel& cost,
                     const SearchOptions& options, Pass& s) {
  std::vector<size_t> order(s.fits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Best estimate first: the `keep` best are then replayed early and the bound prunes the most.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return s.fits[a].estimate_s < s.fits[b].estimate_s; });
  s.status.total = s.status.done + order.size();
  std::vector<double> best;  // the `keep` fastest replayed times, ascending
  const size_t keep = std::max<size_t>(1, options.keep);
  std::map<std::string, double> policy_best;
  std::vector<Candidate> estimated;
  size_t replays = 0;
  for (size_t i : order) {
    Candidate& c = s.fits[i];
    if (options.replay_limit > 0 && replays >= options.replay_limit) {
      c.outcome = Candidate::Outcome::estimated;
      c.iteration_s = c.estimate_s;
      c.reason = fmt::format("estimated only (replays limited to {})", options.replay_limit);
      estimated.push_back(std::move(c));
      s.step();
      continue;
    }
    // A policy's own best is kept too, so that each policy's best comes out exact.
    const auto own = policy_best.find(c.proposal.policy);
    if (options.prune && best.size() >= keep && s.bounds[i] >= best.back() &&
        own != policy_best.end() && s.bounds[i] >= own->second) {
      c.outcome = Candidate::Outcome::pruned;
      c.reason = fmt::format("its busiest GPU computes for {}, no faster than the {} best",
                             config::format_time(s.bounds[i]), keep);
      s.out.rejected.push_back(std::move(c));
    } else {
      try {
        const workload::TrainingJob job =
            workload::build_training_job(*r.model, s.plans[i], *r.cluster, cost);
        ++replays;
        const workload::ReplayResult res = workload::replay(job);
        c.report = report::make_training_report(job, res, workload::memory_per_copy(job));
        c.iteration_s = c.report->iteration_time_s;
        c.outcome = Candidate::Outcome::replayed;
        best.insert(std::upper_bound(best.begin(), best.end(), c.iteration_s), c.iteration_s);
        auto [slot, fresh] = policy_best.try_emplace(c.proposal.policy, c.iteration_s);
        if (!fresh) slot->second = std::min(slot->second, c.iteration_s);
        if (best.size() > keep) best.pop_back();
        s.out.ranked.push_back(std::move(c));
      } catch (const RunError& e) {
        // One plan the replay cannot finish does not end the search.
        c.outcome = Candidate::Outcome::invalid;
        c.reason = std::string("replay failed: ") + e.what();
        s.out.rejected.push_back(std::move(c));
      }
    }
    s.step();
  }
  // Equal times (the same plan from two policies) in the policies' order, whatever order the
  // estimates replayed them in.
  std::sort(s.out.ranked.begin(), s.out.ranked.end(), [](const Candidate& a, const Candidate& b) {
    return a.iteration_s != b.iteration_s ? a.iteration_s < b.iteration_s : a.index < b.index;
  });
  for (Candidate& c : estimated) s.out.ranked.push_back(std::move(c));
}

// No plan came out: why, in the terms a user can act on (no proposal, none valid, or the one
// closest to fitting and what it misses).
[[noreturn]] void explain_no_plan(const Request& r, const std::vector<const Policy*>& policies,
                                  const Search& out) {
  std::string names;
  for (const Policy* p : policies) names += std::string(names.empty() ? "" : ", ") + p->name();
  if (out.rejected.empty()) {
    throw InputError(fmt::format(
        "no plan for a global batch of {} on {} GPUs: {} proposed none (the batch must divide "
        "into equal shares of whole micro-batches over the data-parallel replicas)",
        r.global_batch, r.cluster->gpu_count(), names));
  }
  const Candidate* closest = nullptr;
  for (const Candidate& c : out.rejected) {
    if (c.outcome != Candidate::Outcome::out_of_memory) continue;
    if (!closest || c.peak_bytes - c.capacity_bytes < closest->peak_bytes - closest->capacity_bytes)
      closest = &c;
  }
  if (!closest) {
    throw InputError(fmt::format("no valid plan among {} proposals ({}); the first: {}",
                                 out.rejected.size(), names, out.rejected.front().reason));
  }
  throw InputError(fmt::format(
      "no plan fits in memory: the closest ({}: {}) needs {} per GPU where the GPU holds {} "
      "({} missing); use more or larger GPUs, or a smaller model",
      closest->proposal.policy, closest->proposal.label, config::format_bytes(closest->peak_bytes),
      config::format_bytes(closest->capacity_bytes),
      config::format_bytes(closest->peak_bytes - closest->capacity_bytes)));
}

}  // namespace

Search search(const Request& r, const std::vector<const Policy*>& policies,
              const workload::CostModel& cost, const SearchOptions& options,
              const std::function<void(const SearchProgress&)>& progress) {
  check_searchable(r);
  std::vector<Proposal> proposals;
  Request req = r;
  if (!req.cost) req.cost = &cost;
  check_plan_sets(r.plan_sets);
  const std::string sets = plan_set_lines(r.plan_sets);
  for (const Policy* p : policies) {
    for (Proposal& x : p->propose(req)) {
      x.plan += sets;  // top-level keys after the policy's own (none of them the policy's)
      proposals.push_back(std::move(x));
    }
  }
  Pass s{{}, {}, {}, {}, SearchProgress{0, 2 * proposals.size()}, progress};
  s.out.proposed = proposals.size();
  Estimator estimator(*r.model, *r.cluster, cost);
  screen(r, proposals, estimator, s);
  if (options.explore && !s.fits.empty()) {
    explore(r, options, estimator, proposals.size(), s.fits, s.plans, s.bounds, s.out);
    s.status.total = s.status.done + s.fits.size();
  }
  replay_in_order(r, cost, options, s);
  if (s.out.ranked.empty()) explain_no_plan(r, policies, s.out);
  return std::move(s.out);
}

nlohmann::ordered_json to_json(const Search& s, const Request& req) {
  nlohmann::ordered_json j;
  j["model"] = req.model->name;
  j["cluster"] = req.cluster->config().name;
  j["gpus"] = req.cluster->gpu_count();
  j["global_batch_size"] = req.global_batch;
  j["sequence_length"] = req.sequence;
  j["proposed"] = s.proposed;
  j["search_explored"] = s.explored;
  j["search_reached"] = s.reached;
  auto& cands = j["candidates"] = nlohmann::ordered_json::array();
  for (const Candidate& c : s.ranked) {
    nlohmann::ordered_json x;
    x["policy"] = c.proposal.policy;
    x["label"] = c.proposal.label;
    x["iteration_time_s"] = c.iteration_s;
    x["estimate_s"] = c.estimate_s;
    x["outcome"] = c.report ? "replayed" : "estimated";
    x["oom"] = false;
    x["plan"] = c.proposal.plan;
    if (c.report) x["report"] = report::to_json(*c.report);
    cands.push_back(std::move(x));
  }
  auto& rej = j["rejected"] = nlohmann::ordered_json::array();
  for (const Candidate& c : s.rejected) {
    nlohmann::ordered_json x;
    x["policy"] = c.proposal.policy;
    x["label"] = c.proposal.label;
    x["oom"] = c.outcome == Candidate::Outcome::out_of_memory;
    x["outcome"] = c.outcome == Candidate::Outcome::out_of_memory ? "out_of_memory"
                   : c.outcome == Candidate::Outcome::pruned      ? "pruned"
                                                                  : "invalid";
    x["reason"] = c.reason;
    x["plan"] = c.proposal.plan;
    rej.push_back(std::move(x));
  }
  return j;
}

}  // namespace hetsim::policy
