// The keys of a transformer plan file, declared once (issue 39): the loader checks a plan's keys
// and reads its choices from this table, and `hetsim reference` writes the plan reference
// (docs/reference/plan-keys.md) and the JSON Schema editors check plans with
// (docs/schemas/plan.schema.json) from it. A new key is a row here plus its mechanism.
// Convolutional networks' grid plans (workload/cnn.h) have keys of their own.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hetsim::workload {

enum class PlanKeyType {
  integer,  // a whole number in [min, max]
  number,   // a real number in (min, max]
  flag,     // true or false
  choice,   // one of `choices`
  size,     // a byte quantity such as 160MB
  text,     // a name or a file path
  list,     // a YAML list
  map,      // a YAML map
  devices,  // a GPU set: "0-7,16" or a list of ids
  any,      // a scalar or a map (see help)
};

struct PlanKey {
  std::string_view name;
  PlanKeyType type;
  // For choice keys, in the order of the enum they read into (the loader casts the position).
  std::vector<std::string_view> choices;
  double min = 0, max = 0;         // integer and number keys
  std::string_view default_value;  // as the reader sees it ("1", "the framework's")
  std::string_view help;           // one line
  std::string_view read_by;        // the components that read it
};

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
