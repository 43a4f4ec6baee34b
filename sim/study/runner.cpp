// The study runner; see runner.h.
#include "sim/study/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "calibrate/cost_models.h"
#include "sim/policy/planner.h"
#include "sim/policy/replan.h"

namespace hetsim::study {

namespace {

// The record of a run before its figures: its key and inputs.
RunRecord record_of(const StudyRun& item) {
  RunRecord r;
  r.key = item.key;
  r.model = item.model, r.cluster = item.cluster, r.plan = item.plan, r.framework = item.framework;
  r.perturbation = item.perturbation;
  r.inputs = item.inputs_json;
  return r;
}

}  // namespace

RunRecord simulate_run(const StudyRun& item, const workload::CostModel& cost,
                       const std::vector<std::string>& cost_warnings) {
  RunRecord r = record_of(item);
  try {
    RunSpec spec = item.spec;
    if (item.policy) {
      // The planner's best plan of the policy, then replayed as `simulate` would replay the file
      // `hetsim plan --out` writes.
      const workload::ModelConfig model = workload::load_model(spec.model);
      const platform::Cluster cluster(config::load_cluster(spec.cluster, spec.cluster_options));
      policy::Request req;
      req.model = &model;
      req.cluster = &cluster;
      req.global_batch = item.policy->global_batch;
      req.sequence = item.policy->sequence > 0 ? item.policy->sequence : model.sequence;
      req.framework = item.policy->framework;
      policy::SearchOptions sopt;
      sopt.keep = 1;
      const policy::Search s =
          policy::search(req, policy::select_policies(item.policy->policy), cost, sopt);
      spec.plan_text = s.ranked.front().proposal.plan;
    }
    RunInputs inputs(spec);
    if (item.policy && item.policy->replan)
      policy::rebalance_batch(inputs.plan, inputs.perturbed.compute_factor);
    RunOutput out = run(inputs, cost);
    out.report.warnings = cost_warnings;
    const report::TrainingReport& rep = out.report;
    r.ok = true;
    r.gpus = static_cast<int64_t>(rep.gpus);
    r.iteration_time_s = rep.iteration_time_s;
    r.tokens_per_s = rep.tokens_per_s;
    r.samples_per_s = rep.samples_per_s;
    r.mfu = rep.mfu;
    for (const report::DeviceReport& d : rep.devices) {
      // As the JSON report writes it.
      r.peak_memory_bytes = std::max(r.peak_memory_bytes, static_cast<int64_t>(d.memory.peak));
    }
    r.oom = rep.oom;
    r.compute_s = rep.compute_s;
    r.communication_exposed_s = rep.communication_exposed_s;
    r.bubble_s = rep.bubble_s;
    if (rep.cost_per_iteration_usd >= 0) {
      r.cost_per_iteration_usd = rep.cost_per_iteration_usd;
      r.cost_per_million_tokens_usd = rep.cost_per_million_tokens_usd;
    }
    r.report_json = report::to_json(rep).dump(2) + "\n";
  } catch (const std::exception& e) {
    r = record_of(item);
    r.error = e.what();
  }
  return r;
}

RunnerSummary run_study(const Study& study, Store& store, const RunnerOptions& options) {
  RunnerSummary sum;
  sum.total = study.runs.size();
  const std::set<std::string> stored = store.keys();
  std::vector<const StudyRun*> todo;
  std::set<std::string> queued;  // two entries of the study may be the same run
  for (const StudyRun& r : study.runs) {
    if (stored.count(r.key) || !queued.insert(r.key).second) continue;
    todo.push_back(&r);
  }
  sum.stored_before = sum.total - todo.size();
  if (options.progress) options.progress(sum.stored_before, sum.total, sum.stored_before);
  if (todo.empty()) return sum;

  // Workers take runs in study order and hand records to this thread, which commits them.
  std::mutex m;
  std::condition_variable cv;
  std::deque<RunRecord> finished;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  size_t workers_left = std::clamp<size_t>(options.jobs, 1, todo.size());
  std::exception_ptr worker_error;
  auto worker = [&] {
    try {
      const calibrate::CostModels costs(study.efficiency, study.calibration);
      for (size_t i = next++; i < todo.size() && !stop; i = next++) {
        RunRecord rec = simulate_run(*todo[i], costs.get(), costs.warnings());
        std::lock_guard lock(m);
        finished.push_back(std::move(rec));
        cv.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(m);
      if (!worker_error) worker_error = std::current_exception();
    }
    std::lock_guard lock(m);
    --workers_left;
    cv.notify_one();
  };
  std::vector<std::thread> threads;
  const size_t n_threads = workers_left;
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  std::exception_ptr error;
  try {
    std::unique_lock lock(m);
    while (true) {
      cv.wait_for(lock, std::chrono::seconds(1),
                  [&] { return !finished.empty() || workers_left == 0; });
      while (!finished.empty()) {
        const RunRecord rec = std::move(finished.front());
        finished.pop_front();
        lock.unlock();
        store.put(rec);
        ++sum.ran;
        if (!rec.ok) ++sum.failed;
        if (options.progress)
          options.progress(sum.stored_before + sum.ran, sum.total, sum.stored_before);
        lock.lock();
      }
      if (workers_left == 0) break;
      if (options.progress) {
        lock.unlock();
        options.progress(sum.stored_before + sum.ran, sum.total, sum.stored_before);
        lock.lock();
      }
    }
  } catch (...) {
    error = std::current_exception();
    stop = true;
  }
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  if (worker_error) std::rethrow_exception(worker_error);
  return sum;
}

}  // namespace hetsim::study
