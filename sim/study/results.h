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

// Columns: index, key, model, cluster, plan, framework, status, error, gpus, iteration_time_s,
// tokens_per_s, samples_per_s, mfu, peak_memory_bytes, oom, compute_s, communication_exposed_s,
// bubble_s. Numbers print in the shortest form that reads back to the same double.
void write_csv(std::ostream& out, const std::vector<RunRecord>& records);
// RFC 4180: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s);

// {"study", "store", "runs": [ the CSV's fields, "inputs" and "report" (the simulate JSON, null
// for a failed run) ]}.
nlohmann::ordered_json to_json(const Study& study, const std::string& store_path,
                               const std::vector<RunRecord>& records);

}  // namespace hetsim::study
