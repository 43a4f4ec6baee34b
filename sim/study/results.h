// A study's runs as a table: CSV (one row per run, a fixed column order) and JSON, in the
// study's order.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sim/study/store.h"
#include "sim/study/study.h"

namespace hetsim::study {

// The study's runs as the store holds them, in study order (a run the store lacks is skipped).
std::vector<RunRecord> study_records(const Study& study, const Store& store);

// Whether each record is on the Pareto front of throughput (tokens/s, more is better) against
// cost (dollars per million tokens, less is better) among the runs of the same model and
// perturbation that succeeded, fit in memory and have a price: no such run is at least as fast
// and at least as cheap, and strictly one of the two. False for every other record.
std::vector<bool> pareto_front(const std::vector<RunRecord>& records);

// Columns: index, key, model, cluster, plan, framework, perturbation, status, error, gpus,
// iteration_time_s, tokens_per_s, samples_per_s, mfu, peak_memory_bytes, oom, compute_s,
// communication_exposed_s, bubble_s, cost_per_iteration_usd, cost_per_million_tokens_usd,
// cost_per_run_usd (for a run of `tokens` tokens; empty when 0), pareto,
// reference_iteration_time_s and error_pct (a case's reference and the predicted time's signed
// error against it, in percent; empty without one). Numbers print in the
// shortest form that reads back to the same double; a figure a run lacks is empty.
void write_csv(std::ostream& out, const std::vector<RunRecord>& records, double tokens = 0);
// RFC 4180: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s);

// {"study", "store", "tokens", "runs": [ the CSV's fields, "inputs" and "report" (the simulate
// JSON, null for a failed run) ]}.
nlohmann::ordered_json to_json(const Study& study, const std::string& store_path,
                               const std::vector<RunRecord>& records);

}  // namespace hetsim::study
