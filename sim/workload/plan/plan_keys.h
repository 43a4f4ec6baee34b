// The keys of a transformer plan file, declared once (issue 39): the loader checks a plan's keys
// and reads its choices from this table, and `hetsim reference` writes the plan reference
// (docs/reference/plan-keys.md) and the JSON Schema editors check plans with
// (docs/schemas/plan.schema.json) from it. A row may also bind the key to its Plan field, which
// the loader then reads by the row alone, and give Megatron-LM's flag for it, which the Megatron-LM
// launcher then writes, and the key's value it needs, if any (KeyNeeds), which the loader and the
// schema check: a new key is a row here plus its mechanism (a flag that chooses a layer's
// kernels: a row, a field of KernelChoices in ops.h, and the layer programs that read it).
// Convolutional networks' grid plans (workload/model/cnn.h) have keys of their own.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sim/config/key_table.h"
#include "sim/workload/model/ops.h"

namespace YAML {
class Node;
}

namespace hetsim::workload {

struct Plan;

// A plan key's row (config/key_table.h).
using PlanKeyType = config::KeyType;
using PlanKey = config::Key;

// Where a key's value lands in a Plan, for the keys the loader reads by their row alone
// (read_bound_plan_keys); a key with a default or a check of its own is read by hand in plan.cpp
// and binds nothing here. At most one is set.
struct PlanField {
  bool Plan::*flag = nullptr;                  // a flag key
  bool KernelChoices::*kernel_flag = nullptr;  // a flag key of Plan::kernels
  int Plan::*integer = nullptr;                // an integer key, in the row's range
  void (*choice)(Plan&, size_t) = nullptr;     // a choice key: the position of the value given
};

// A launcher's flag for a flag key: `on` where the key is true, `off` where it is false, and
// neither unless the flag key `needs` (if any) is true too. `lacks_on`: why the launcher cannot
// pass the key's true (it is exported without it, and the launch lists it as unsupported).
struct LaunchFlag {
  std::string_view on = {}, off = {}, needs = {}, lacks_on = {};
};

// The launchers whose flags the table gives: Megatron-LM's (launch/megatron.cpp) and
// Megatron-DeepSpeed's (launch/deepspeed.cpp: Megatron-LM's arguments of 2021-22 and its own).
enum class FlagLauncher : uint8_t { megatron, deepspeed };

// A key that means something only beside another key's value (interleave beside schedule:
// interleaved): given, and for an integer key with a number as its default other than that
// default, the plan must also say `key: value` (a key not given counts as its row's default). The
// refusal adds `why` in parentheses.
struct KeyNeeds {
  std::string_view key = {}, value = {}, why = {};
};

// A row of the table: the key as the loader checks it and the reference documents it, the field it
// reads into, each launcher's flag for it, and the key's value it needs.
struct PlanKeyRow {
  PlanKey key;
  PlanField field = {};
  LaunchFlag megatron = {};
  LaunchFlag deepspeed = {};
  KeyNeeds needs = {};
};

// The table's rows, in its order.
const std::vector<PlanKeyRow>& plan_key_rows();
// Every key of a transformer plan (the loader's "did you mean" looks in this order).
const std::vector<PlanKey>& plan_keys();
// The row of `name`; throws std::logic_error for a name the table lacks (a programming error).
const PlanKey& plan_key(std::string_view name);
// Its choices as strings (config::get_choice's form).
std::vector<std::string> plan_choices(std::string_view name);
// Its name and every other key's, as config::check_keys takes them.
std::vector<std::string> plan_key_names();

// Every key of `root` (a plan file's top level) whose row binds a field, read into it: a flag as
// true or false, an integer in the row's range, a choice by its position. A key not given keeps
// its field's value (the Plan's default). Throws InputError naming the file, line and key.
void read_bound_plan_keys(const YAML::Node& root, const std::string& file, Plan& p);
// Refuses a key given without the value of another key it needs (KeyNeeds), naming the file, its
// line and both keys. After read_bound_plan_keys (an integer key's value is the field's).
void check_key_needs(const YAML::Node& root, const std::string& file, const Plan& p);
// A launcher's flags for the plan's flag keys, in the table's order; what it cannot pass joins
// `unsupported` (where given), one line each.
std::vector<std::string> launch_flags(const Plan& p, FlagLauncher launcher,
                                      std::vector<std::string>* unsupported = nullptr);
inline std::vector<std::string> megatron_flags(const Plan& p) {
  return launch_flags(p, FlagLauncher::megatron);
}

// The plan reference page (Markdown) and the JSON Schema of a plan file, generated from the
// table: what docs/reference/plan-keys.md and docs/schemas/plan.schema.json hold.
std::string plan_keys_markdown();
nlohmann::ordered_json plan_json_schema();

}  // namespace hetsim::workload
