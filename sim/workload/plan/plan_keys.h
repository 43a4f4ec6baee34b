// The keys of a transformer plan file, declared once (issue 39): the loader checks a plan's keys
// and reads its choices from this table, and `hetsim reference` writes the plan reference
// (docs/reference/plan-keys.md) and the JSON Schema editors check plans with
// (docs/schemas/plan.schema.json) from it. A new key is a row here plus its mechanism.
// Convolutional networks' grid plans (workload/model/cnn.h) have keys of their own.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sim/config/key_table.h"

namespace hetsim::workload {

// A plan key's row (config/key_table.h).
using PlanKeyType = config::KeyType;
using PlanKey = config::Key;

// Every key of a transformer plan (the loader's "did you mean" looks in this order).
const std::vector<PlanKey>& plan_keys();
// The row of `name`; throws std::logic_error for a name the table lacks (a programming error).
const PlanKey& plan_key(std::string_view name);
// Its choices as strings (config::get_choice's form).
std::vector<std::string> plan_choices(std::string_view name);
// Its name and every other key's, as config::check_keys takes them.
std::vector<std::string> plan_key_names();

// The plan reference page (Markdown) and the JSON Schema of a plan file, generated from the
// table: what docs/reference/plan-keys.md and docs/schemas/plan.schema.json hold.
std::string plan_keys_markdown();
nlohmann::ordered_json plan_json_schema();

}  // namespace hetsim::workload
