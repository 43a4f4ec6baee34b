// What the validation tests take from the environment, for the scripts that refit a constant or
// leave a fit out (scripts/fit_*.py, scripts/leave_one_set_out.py): the datasheet efficiency
// file (HETSIM_EFFICIENCY) and a framework file in place of a built-in framework
// (HETSIM_FRAMEWORK_<NAME>, the name upper-cased with '-' as '_': HETSIM_FRAMEWORK_PYTORCH_FSDP2).
// Unset, the tests run on what ships.
#pragma once

#include <cctype>
#include <cstdlib>
#include <string>

#include "sim/workload/cost/cost_model.h"

namespace hetsim::validation {

inline std::string env_or(const char* key, const std::string& fallback) {
  const char* v = std::getenv(key);
  return v && *v ? std::string(v) : fallback;
}

// The datasheet cost model with the efficiencies of HETSIM_EFFICIENCY, or the shipped ones.
inline workload::DatasheetCostModel datasheet_cost() {
  return workload::DatasheetCostModel(
      workload::load_datasheet_efficiency(env_or("HETSIM_EFFICIENCY", "")));
}

// The framework a plan names: the built-in `name`, or the file HETSIM_FRAMEWORK_<NAME> names.
inline std::string framework(const std::string& name) {
  std::string key = "HETSIM_FRAMEWORK_";
  for (char c : name)
    key += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env_or(key.c_str(), name);
}

}  // namespace hetsim::validation
