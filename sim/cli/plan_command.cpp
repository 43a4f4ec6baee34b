// `hetsim plan`: search for the best plan of a model on a cluster (sim/policy/planner.h).
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/policy/planner.h"
#include "sim/report/progress.h"
#include "sim/workload/model/model.h"

namespace hetsim::cli {

namespace {

std::string figures(const policy::Candidate& c) {
  if (!c.report) {  // estimated only (--replay-limit)
    return fmt::format("{:>9}  (estimate)  peak {} of {}", config::format_time(c.iteration_s),
                       config::format_bytes(c.peak_bytes), config::format_bytes(c.capacity_bytes));
  }
  return fmt::format("{:>9}  MFU {:5.1f}%  peak {} of {}", config::format_time(c.iteration_s),
                     100 * c.report->mfu, config::format_bytes(c.peak_bytes),
                     config::format_bytes(c.capacity_bytes));
}

struct PlanOpts {
  ClusterFlags cluster;
  std::string model, policy = "all", framework, out, calibration, efficiency;
  int64_t global_batch = 0, sequence = 0;
  int top = 5;
  long replay_limit = 0;
  std::vector<std::string> plan_sets;
  bool no_search = false, json = false, quiet = false, replay_all = false;
  double progress_after_s = 2;
};

// The best plan as a plan file, headed by the command that found it.
void write_best_plan(const PlanOpts& o, const policy::Request& req, const policy::Search& s) {
  const policy::Candidate& best = s.ranked.front();
  std::ofstream f(o.out, std::ios::binary);
  if (!f) throw InputError("--out " + o.out + ": cannot write the file");
  // The command that made it, so the file says where it came from.
  std::string cmdline = "hetsim plan --model " + o.model + " --cluster " + o.cluster.cluster;
  if (o.cluster.nodes_option && o.cluster.nodes_option->count() > 0)
    cmdline += " --nodes " + std::to_string(o.cluster.nodes);
  for (const std::string& set : o.cluster.sets) cmdline += " --set " + set;
  cmdline += " --global-batch-size " + std::to_string(o.global_batch) + " --sequence-length " +
             std::to_string(req.sequence) + " --policy " + o.policy;
  if (!o.framework.empty()) cmdline += " --framework " + o.framework;
  for (const std::string& set : o.plan_sets) cmdline += " --plan-set " + set;
  f << fmt::format("# {}\n# the fastest of {} plans: {} predicted per iteration\n", cmdline,
                   s.proposed, config::format_time(best.iteration_s))
    << best.proposal.plan;
  if (!f) throw RunError("--out " + o.out + ": write failed");
}

// The search's summary for the terminal: what was searched, the best plan, each policy's best,
// the top candidates.
std::string text_report(const PlanOpts& o, const workload::ModelConfig& model,
                        const platform::Cluster& cluster, const policy::Request& req,
                        const policy::Search& s, const std::vector<const policy::Policy*>& chosen,
                        size_t estimated, size_t oom, size_t invalid, size_t pruned, double wall) {
  const policy::Candidate& best = s.ranked.front();
  std::string t =
      fmt::format("{} on {} ({} GPUs), global batch {} x {} tokens\n", model.name,
                  cluster.config().name, cluster.gpu_count(), o.global_batch, req.sequence);
  t += fmt::format(
      "  searched       {} plans from {}{}: {} replayed, {} out of memory, {} invalid, {} "
      "not replayed (their compute alone is slower than the top {} and their policy's "
      "best){} ({:.1f} s)\n",
      s.proposed, o.policy == "all" ? "every policy" : "policy " + o.policy,
      s.explored > 0 ? fmt::format(", and {} more estimated by the search around them, {} kept",
                                   s.explored, s.reached)
                     : "",
      s.ranked.size() - estimated, oom, invalid, pruned, o.top,
      estimated > 0 ? fmt::format(", {} estimated only (--replay-limit)", estimated) : "", wall);
  t += fmt::format("  best           {}: {}\n                 {}\n", best.proposal.policy,
                   best.proposal.label, figures(best));
  if (best.report) t += fmt::format("  framework      {}\n", best.report->framework);
  t += "  best per policy\n";
  std::vector<std::string> names;
  for (const policy::Policy* p : chosen) names.emplace_back(p->name());
  if (s.reached > 0) names.emplace_back("search");
  for (const std::string& name : names) {
    const auto it = std::find_if(s.ranked.begin(), s.ranked.end(),
                                 [&](const auto& c) { return c.proposal.policy == name; });
    if (it == s.ranked.end()) {
      t += fmt::format("    {:<12} no plan that fits\n", name);
    } else {
      t += fmt::format("    {:<12} {}  {}  ({:.2f}x the best)\n", name, figures(*it),
                       it->proposal.label, it->iteration_s / best.iteration_s);
    }
  }
  t += fmt::format("  top {}\n", std::min<size_t>(o.top, s.ranked.size()));
  for (size_t i = 0; i < s.ranked.size() && i < static_cast<size_t>(o.top); ++i) {
    const policy::Candidate& c = s.ranked[i];
    if (!c.report) {
      t += fmt::format("    {:>2}. {}  {}: {}\n", i + 1, figures(c), c.proposal.policy,
                       c.proposal.label);
      continue;
    }
    const report::TrainingReport& r = *c.report;
    t += fmt::format(
        "    {:>2}. {}  {}: {}\n        compute {}, exposed communication {}, "
        "bubble {}\n",
        i + 1, figures(c), c.proposal.policy, c.proposal.label, config::format_time(r.compute_s),
        config::format_time(r.communication_exposed_s), config::format_time(r.bubble_s));
  }
  if (!o.out.empty()) t += "  written        " + o.out + "\n";
  return t;
}

int run_plan(const PlanOpts& o) {
  const std::vector<const policy::Policy*> chosen = policy::select_policies(o.policy);
  const workload::ModelConfig model = workload::load_model(o.model);
  const platform::Cluster cluster(config::load_cluster(o.cluster.cluster, o.cluster.options()));
  if (!o.framework.empty()) workload::load_framework(o.framework);  // fails early if bad
  const CostModels costs(o.efficiency, o.calibration);
  print_warnings(costs);
  const workload::CostModel& cost = costs.get();
  policy::Request req;
  req.model = &model;
  req.cluster = &cluster;
  req.global_batch = o.global_batch;
  req.sequence = o.sequence > 0 ? o.sequence : model.sequence;
  req.framework = o.framework;
  req.plan_sets = o.plan_sets;
  policy::check_plan_sets(req.plan_sets);
  report::ProgressMeter meter(std::cerr, "plan", o.progress_after_s, 1.0,
                              report::stderr_is_terminal());
  const auto t0 = std::chrono::steady_clock::now();
  policy::SearchOptions sopt;
  sopt.prune = !o.replay_all;
  sopt.keep = static_cast<size_t>(o.top);
  sopt.replay_limit = static_cast<size_t>(o.replay_limit);
  sopt.explore = !o.no_search;
  const policy::Search s =
      policy::search(req, chosen, cost, sopt, [&](const policy::SearchProgress& p) {
        if (!o.quiet && !o.json) meter.update_count(p.done, p.total, "plans");
      });
  meter.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.out.empty()) write_best_plan(o, req, s);
  size_t oom = 0, invalid = 0, pruned = 0, estimated = 0;
  for (const policy::Candidate& c : s.ranked)
    estimated += c.outcome == policy::Candidate::Outcome::estimated;
  for (const policy::Candidate& c : s.rejected) {
    if (c.outcome == policy::Candidate::Outcome::out_of_memory) ++oom;
    if (c.outcome == policy::Candidate::Outcome::invalid) ++invalid;
    if (c.outcome == policy::Candidate::Outcome::pruned) ++pruned;
  }
  if (o.json) {
    std::cout << policy::to_json(s, req).dump(2) << "\n";
    return 0;
  }
  std::cout << text_report(o, model, cluster, req, s, chosen, estimated, oom, invalid, pruned,
                           wall);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<PlanOpts>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Search for the fastest plan that fits: every policy proposes plans, the memory model drops "
      "those that cannot fit, the replay ranks the rest");
  cmd->add_option("--model", o->model, "Model file or built-in name")->required();
  o->cluster.add_to(*cmd, "dgx-a100");
  cmd->add_option("--global-batch-size", o->global_batch, "Sequences per iteration")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--sequence-length", o->sequence, "Tokens per sequence (default: the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  std::string names;
  for (const policy::Policy* p : policy::policies()) {
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", p->name(), p->summary());
  }
  cmd->add_option("--policy", o->policy, "all, or one of: " + names)->capture_default_str();
  cmd->add_option("--framework", o->framework,
                  "Framework of every proposal (default: each policy's own)");
  cmd->add_option("--top", o->top, "Candidates to list")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--out", o->out, "Write the best plan to this file (simulate --plan reads it)");
  cmd->add_option("--calibration", o->calibration, "Calibration database (as simulate)");
  cmd->add_option("--efficiency", o->efficiency, "Datasheet efficiency constants (as simulate)");
  cmd->add_flag("--replay-all", o->replay_all,
                "Replay every plan that fits (default: skip those whose busiest GPU's kernels "
                "alone take longer than the --top best; the top list is the same)");
  cmd->add_option("--plan-set", o->plan_sets,
                  "A plan key no policy chooses, for every proposal: KEY=VALUE (attention, "
                  "precision, main_grads, bucket_size, gradient_reduction; repeatable)");
  cmd->add_option("--replay-limit", o->replay_limit,
                  "Replay at most N plans, the best by the analytic estimate; list the rest by "
                  "their estimate (default 0: no limit)")
      ->check(CLI::Range(0L, 1L << 30));
  cmd->add_flag(
      "--no-search", o->no_search,
      "Only the policies' proposals (default: also the plans a search reaches from the "
      "best of them by one-step changes while the estimate improves: micro-batch, "
      "recompute and its layer count, ZeRO stage, schedule, a layer across a stage boundary, a "
      "batch share between GPU types)");
  cmd->add_flag("--json", o->json, "Print JSON: the candidates best first, then the rejected");
  cmd->add_flag("--quiet", o->quiet, "No progress lines on standard error");
  cmd->add_option("--progress-after", o->progress_after_s,
                  "Seconds of wall time before progress lines start")
      ->group("");
  cmd->callback([o, &action] { action = [o] { return run_plan(*o); }; });
}

}  // namespace hetsim::cli
