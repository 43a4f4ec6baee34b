// The study runner across MPI ranks; see mpi_runner.h.
#include "sim/study/mpi_runner.h"

#include <mpi.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "calibrate/cost_models.h"
#include "sim/core/error.h"

namespace hetsim::study {

namespace {

constexpr int kResultTag = 1;  // worker -> rank 0: a record ("" for the first request)
constexpr int kWorkTag = 2;    // rank 0 -> worker: the index of a run, or -1: stop

void send_text(const std::string& s, int to, int tag) {
  MPI_Send(s.data(), static_cast<int>(s.size()), MPI_CHAR, to, tag, MPI_COMM_WORLD);
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var); v && std::atoi(v) > 1) return true;
  }
  return false;
}

std::string encode_record(const RunRecord& r) {
  nlohmann::json j;
  j["key"] = r.key;
  j["model"] = r.model;
  j["cluster"] = r.cluster;
  j["plan"] = r.plan;
  j["framework"] = r.framework;
  j["perturbation"] = r.perturbation;
  j["inputs"] = r.inputs;
  j["ok"] = r.ok;
  j["error"] = r.error;
  j["gpus"] = r.gpus;
  j["iteration_time_s"] = r.iteration_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["samples_per_s"] = r.samples_per_s;
  j["mfu"] = r.mfu;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["oom"] = r.oom;
  j["compute_s"] = r.compute_s;
  j["communication_exposed_s"] = r.communication_exposed_s;
  j["bubble_s"] = r.bubble_s;
  if (r.cost_per_iteration_usd) j["cost_per_iteration_usd"] = *r.cost_per_iteration_usd;
  if (r.cost_per_million_tokens_usd)
    j["cost_per_million_tokens_usd"] = *r.cost_per_million_tokens_usd;
  j["report_json"] = r.report_json;
  return j.dump();
}

RunRecord decode_record(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  RunRecord r;
  r.key = j.at("key");
  r.model = j.at("model");
  r.cluster = j.at("cluster");
  r.plan = j.at("plan");
  r.framework = j.at("framework");
  r.perturbation = j.at("perturbation");
  r.inputs = j.at("inputs");
  r.ok = j.at("ok");
  r.error = j.at("error");
  r.gpus = j.at("gpus");
  r.iteration_time_s = j.at("iteration_time_s");
  r.tokens_per_s = j.at("tokens_per_s");
  r.samples_per_s = j.at("samples_per_s");
  r.mfu = j.at("mfu");
  r.peak_memory_bytes = j.at("peak_memory_bytes");
  r.oom = j.at("oom");
  r.compute_s = j.at("compute_s");
  r.communication_exposed_s = j.at("communication_exposed_s");
  r.bubble_s = j.at("bubble_s");
  if (j.contains("cost_per_iteration_usd"))
    r.cost_per_iteration_usd = j["cost_per_iteration_usd"].get<double>();
  if (j.contains("cost_per_million_tokens_usd"))
    r.cost_per_million_tokens_usd = j["cost_per_million_tokens_usd"].get<double>();
  r.report_json = j.at("report_json");
  return r;
}

RunnerSummary run_study_mpi(const Study& study, Store* store, const RunnerOptions& options) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  RunnerSummary sum;
  sum.total = study.runs.size();
  if (rank != 0) {
    // A worker: ask, simulate, send back, until told to stop.
    const calibrate::CostModels costs(study.efficiency, study.calibration);
    std::string result;
    while (true) {
      send_text(result, 0, kResultTag);
      int index = -1;
      MPI_Recv(&index, 1, MPI_INT, 0, kWorkTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (index < 0) break;
      result = encode_record(simulate_run(study.runs.at(index), costs.get(), costs.warnings()));
      ++sum.ran;
    }
    return sum;
  }
  if (!store) throw RunError("sweep: rank 0 needs the store");
  const std::set<std::string> stored = store->keys();
  std::vector<int> todo;
  std::set<std::string> queued;
  for (size_t i = 0; i < study.runs.size(); ++i) {
    const StudyRun& r = study.runs[i];
    if (stored.count(r.key) || !queued.insert(r.key).second) continue;
    todo.push_back(static_cast<int>(i));
  }
  sum.stored_before = sum.total - todo.size();
  if (options.progress) options.progress(sum.stored_before, sum.total, sum.stored_before);
  size_t next = 0;
  int working = size - 1;
  while (working > 0) {
    MPI_Status st;
    MPI_Probe(MPI_ANY_SOURCE, kResultTag, MPI_COMM_WORLD, &st);
    int length = 0;
    MPI_Get_count(&st, MPI_CHAR, &length);
    std::string text(static_cast<size_t>(length), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, st.MPI_SOURCE, kResultTag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (!text.empty()) {
      const RunRecord rec = decode_record(text);
      store->put(rec);
      ++sum.ran;
      if (!rec.ok) ++sum.failed;
      if (options.progress)
        options.progress(sum.stored_before + sum.ran, sum.total, sum.stored_before);
    }
    int index = next < todo.size() ? todo[next++] : -1;
    if (index < 0) --working;
    MPI_Send(&index, 1, MPI_INT, st.MPI_SOURCE, kWorkTag, MPI_COMM_WORLD);
  }
  return sum;
}

}  // namespace hetsim::study
