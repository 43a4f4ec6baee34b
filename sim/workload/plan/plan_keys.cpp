// The plan keys' table and what is generated from it; see plan_keys.h.
#include "sim/workload/plan/plan_keys.h"

#include <charconv>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "sim/config/limits.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::workload {

namespace {
namespace limits = config::limits;
using T = PlanKeyType;
constexpr double kGpus = static_cast<double>(limits::kGpus);
constexpr double kBatch = static_cast<double>(limits::kBatch);
constexpr double kLayers = static_cast<double>(limits::kLayers);

// The parallel degrees, the batch and the schedule.
void add_degree_and_batch_keys(std::vector<PlanKeyRow>& keys) {
  const std::vector<PlanKeyRow> rows = {
      {{"tensor_parallel",
        T::integer,
        {},
        1,
        kGpus,
        "1",
        "Tensor-parallel degree (Megatron's order: tensor fastest, then context, data, pipeline)",
        "plan, memory, job, estimate, search, export, execute"}},
      {{"pipeline_parallel",
        T::integer,
        {},
        1,
        kGpus,
        "1",
        "Pipeline stages",
        "plan, memory, job, estimate, search, export, execute"}},
      {{"data_parallel",
        T::integer,
        {},
        1,
        kGpus,
        "devices / (tp x cp x pp)",
        "Data-parallel replicas",
        "plan, job, estimate, export, execute"}},
      {{"micro_batch_size",
        T::integer,
        {},
        1,
        kBatch,
        "1",
        "Sequences in one micro-batch",
        "plan, memory, job, estimate, search, export, execute"}},
      {{"global_batch_size",
        T::integer,
        {},
        1,
        kBatch,
        "required (replicas: their sum)",
        "Sequences in one iteration, over every replica",
        "plan, job, estimate, export, execute"}},
      {{"sequence_length",
        T::integer,
        {},
        1,
        static_cast<double>(limits::kSequence),
        "the model's",
        "Tokens in one sequence",
        "plan, memory, job, estimate, export, execute"}},
      {{"schedule",
        T::choice,
        {"gpipe", "1f1b", "interleaved"},
        0,
        0,
        "1f1b",
        "Pipeline schedule",
        "plan, memory, job, estimate, search, export"},
       {.choice = [](Plan& p, size_t i) { p.schedule = static_cast<Schedule>(i); }}},
      {{"interleave",
        T::integer,
        {},
        1,
        kLayers,
        "1",
        "schedule: interleaved: model chunks per stage",
        "plan, memory, job, estimate, export"},
       {.integer = &Plan::interleave},
       {},
       {},
       {"schedule", "interleaved"}},
      {{"microbatch_group",
        T::integer,
        {},
        1,
        kBatch,
        "pipeline_parallel",
        "schedule: interleaved: micro-batches that run one chunk before the next",
        "plan, memory, job"},
       {.integer = &Plan::microbatch_group},
       {},
       {},
       {"schedule", "interleaved"}},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// Recomputation, sequence parallelism, ZeRO, precision, the optimizer and its gradients.
void add_memory_and_precision_keys(std::vector<PlanKeyRow>& keys) {
  const std::vector<PlanKeyRow> rows = {
      {{"recompute",
        T::choice,
        {"none", "selective", "full", "selective_op"},
        0,
        0,
        "none",
        "Activation recomputation: the attention core, whole layers, or torchtitan's op-level",
        "plan, memory, job, estimate, search, export"},
       {.choice = [](Plan& p, size_t i) { p.recompute = static_cast<Recompute>(i); }}},
      {{"recompute_layers",
        T::integer,
        {},
        1,
        kLayers,
        "every layer",
        "recompute: full: only the first N layers of each stage's chunk recompute",
        "plan, memory, job, estimate, search, export"},
       {.integer = &Plan::recompute_layers},
       {},
       {},
       {"recompute", "full", "it says how many layers of each stage recompute in full"}},
      {{"sequence_parallel",
        T::flag,
        {},
        0,
        0,
        "false",
        "All-gather / reduce-scatter instead of all-reduce around tensor-parallel regions",
        "plan, memory, job, estimate, export"},
       {.flag = &Plan::sequence_parallel},
       {.on = "--sequence-parallel"},
       {.on = "--sequence-parallel"}},
      {{"tp_comm_overlap",
        T::flag,
        {},
        0,
        0,
        "false",
        "Megatron-LM's --tp-comm-overlap: sequence-parallel collectives beside their GEMMs "
        "(needs sequence_parallel)",
        "plan, job, estimate, export"},
       {.kernel_flag = &KernelChoices::tp_comm_overlap},
       {.on = "--tp-comm-overlap", .needs = "sequence_parallel"},
       {.needs = "sequence_parallel",
        .lacks_on = "tp_comm_overlap: Megatron-DeepSpeed has no --tp-comm-overlap (Transformer "
                    "Engine's userbuffers); exported without it"}},
      {{"bias_dropout_fusion",
        T::flag,
        {},
        0,
        0,
        "true",
        "false: a fused framework's bias-dropout-add as separate kernels (Megatron-LM's "
        "--no-bias-dropout-fusion)",
        "plan, job, estimate, export"},
       {.kernel_flag = &KernelChoices::bias_dropout_fusion},
       {.off = "--no-bias-dropout-fusion"},
       {.off = "--no-bias-dropout-fusion"}},
      {{"zero_stage",
        T::integer,
        {},
        0,
        3,
        "the framework's (0)",
        "ZeRO stage: optimizer state (1), gradients (2), parameters (3, FSDP-style) sharded",
        "plan, memory, job, estimate, search, export"}},
      {{"precision",
        T::choice,
        {"fp32", "fp16", "bf16", "fp8"},
        0,
        0,
        "bf16 where every GPU has it, else fp16",
        "Training precision of the matmuls",
        "plan, memory, job, estimate, export, execute"}},
      {{"attention",
        T::choice,
        {"flash", "standard"},
        0,
        0,
        "flash",
        "Fused (flash) or unfused attention",
        "plan, memory, job, estimate, execute"}},
      {{"main_grads",
        T::choice,
        {"fp32", "same"},
        0,
        0,
        "fp32",
        "Gradients accumulated in fp32 or in the training precision",
        "plan, memory, job"}},
      {{"optimizer",
        T::choice,
        {"adam", "sgd", "sgd_momentum"},
        0,
        0,
        "adam",
        "The optimizer's state and step",
        "plan, memory, job, estimate"}},
      {{"bucket_size",
        T::size,
        {},
        0,
        0,
        "the framework's (160MB)",
        "Gradient bucket of the data-parallel reduction",
        "plan, job, estimate, export"}},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// Where the plan runs and how its stages are laid out, and its framework.
void add_layout_keys(std::vector<PlanKeyRow>& keys) {
  const std::vector<PlanKeyRow> rows = {
      {{"devices",
        T::devices,
        {},
        0,
        0,
        "every GPU",
        "The GPUs the plan uses, e.g. \"0-7\"",
        "plan"}},
      {{"replicas",
        T::list,
        {},
        0,
        0,
        "",
        "Heterogeneous plans: each replica's micro_batches, state_share and stages (layers, "
        "tensor_parallel, devices)",
        "plan, memory, job, estimate"}},
      {{"stages",
        T::list,
        {},
        0,
        0,
        "",
        "Staged plans: each stage's layers and data-parallel groups of their own degrees",
        "plan, memory, job"}},
      {{"stage_layers",
        T::list,
        {},
        0,
        0,
        "even",
        "Layers of each pipeline stage, e.g. [23, 25, 25, 23]",
        "plan, memory, job, estimate"}},
      {{"framework",
        T::text,
        {},
        0,
        0,
        "megatron",
        "The framework the plan runs on: a frameworks/*.yaml name or a framework file",
        "plan, job, export"}},
      {{"gradient_reduction",
        T::choice,
        {"overlapped", "after_backward"},
        0,
        0,
        "the framework's",
        "Gradient buckets reduced during the backward pass or after it",
        "plan, job, estimate"}},
      {{"gradient_accumulation",
        T::choice,
        {"micro_batch", "layered"},
        0,
        0,
        "micro_batch",
        "Cephalo's layered gradient accumulation (every micro-batch through a layer first)",
        "plan, memory, job"},
       {.choice = [](Plan& p, size_t i) { p.layered = i == 1; }}},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// Experts, context parallelism, and the what-ifs a plan carries.
void add_moe_and_context_keys(std::vector<PlanKeyRow>& keys) {
  const std::vector<PlanKeyRow> rows = {
      {{"expert_parallel",
        T::integer,
        {},
        1,
        static_cast<double>(limits::kExperts / 2),
        "1",
        "A MoE model's experts split over this many consecutive data-parallel replicas",
        "plan, memory, job, estimate, search, export"}},
      {{"expert_tensor_parallel",
        T::integer,
        {},
        1,
        kGpus,
        "tensor_parallel",
        "Uniform MoE plans: the experts' own tensor-parallel degree, 1 or tensor_parallel",
        "plan, memory, job, estimate, export"}},
      {{"context_parallel",
        T::integer,
        {},
        1,
        kGpus,
        "1",
        "Uniform plans: each sequence split over this many consecutive replicas (ring attention)",
        "plan, memory, job, estimate, export"}},
      {{"capacity_factor",
        T::number,
        {},
        0,
        static_cast<double>(limits::kExperts),
        "dropless",
        "MoE: each expert's tokens capped at this multiple of an even share",
        "plan, job"}},
      {{"routing",
        T::any,
        {},
        0,
        0,
        "uniform",
        "MoE: uniform, or {zipf: EXPONENT, seed: N}: skewed expert popularity",
        "plan, job"}},
      {{"perturbations",
        T::map,
        {},
        0,
        0,
        "",
        "What-ifs the plan carries (slow, link, stragglers, lost), as simulate --perturb takes",
        "plan, job"}},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

bool is_flag(const PlanField& f) { return f.flag != nullptr || f.kernel_flag != nullptr; }

// A flag key's field in `p` (a Plan or a const Plan).
template <class P>
auto& flag_of(const PlanField& f, P& p) {
  return f.flag != nullptr ? p.*f.flag : p.kernels.*f.kernel_flag;
}

const PlanKeyRow& find_row(const std::vector<PlanKeyRow>& rows, std::string_view name) {
  const auto it = std::find_if(rows.begin(), rows.end(),
                               [&](const PlanKeyRow& r) { return r.key.name == name; });
  if (it == rows.end()) throw std::logic_error(fmt::format("plan key {}: no such row", name));
  return *it;
}

// The rows' bindings agree with their types (a programming error otherwise): a launcher flag only
// on a flag key bound to its field, needing a flag key.
void check_rows(const std::vector<PlanKeyRow>& rows) {
  for (const PlanKeyRow& row : rows) {
    const PlanField& f = row.field;
    const int bound = (f.flag != nullptr) + (f.kernel_flag != nullptr) + (f.integer != nullptr) +
                      (f.choice != nullptr);
    const bool typed = bound == 0 || (is_flag(f) && row.key.type == PlanKeyType::flag) ||
                       (f.integer != nullptr && row.key.type == PlanKeyType::integer) ||
                       (f.choice != nullptr && row.key.type == PlanKeyType::choice);
    for (const LaunchFlag& m : {row.megatron, row.deepspeed}) {
      const bool no_flag = m.on.empty() && m.off.empty() && m.needs.empty() && m.lacks_on.empty();
      if (bound > 1 || !typed || (!no_flag && !is_flag(f)) ||
          (!m.needs.empty() && !is_flag(find_row(rows, m.needs).field)) ||
          (!m.on.empty() && !m.lacks_on.empty())) {
        throw std::logic_error(fmt::format(
            "plan key {}: its field or a launcher's flag does not fit its type", row.key.name));
      }
    }
  }
}

std::vector<PlanKeyRow> make_table() {
  // Readers: plan (workload/plan/plan.cpp), memory (workload/job/memory.cpp), job
  // (workload/job/training_job.cpp), estimate (policy/estimate.cpp), search
  // (policy/neighbours.cpp), export (launch/), execute (execute/).
  std::vector<PlanKeyRow> keys;
  add_degree_and_batch_keys(keys);
  add_memory_and_precision_keys(keys);
  add_layout_keys(keys);
  add_moe_and_context_keys(keys);
  check_rows(keys);
  return keys;
}

}  // namespace

const std::vector<PlanKeyRow>& plan_key_rows() {
  static const std::vector<PlanKeyRow> table = make_table();
  return table;
}

const std::vector<PlanKey>& plan_keys() {
  static const std::vector<PlanKey> table = [] {
    std::vector<PlanKey> keys;
    for (const PlanKeyRow& row : plan_key_rows()) keys.push_back(row.key);
    return keys;
  }();
  return table;
}

void read_bound_plan_keys(const YAML::Node& root, const std::string& file, Plan& p) {
  for (const PlanKeyRow& row : plan_key_rows()) {
    const PlanField& f = row.field;
    if (!is_flag(f) && f.integer == nullptr && f.choice == nullptr) continue;  // read by hand
    const std::string name(row.key.name);
    const YAML::Node n = root[name];
    if (!n) continue;
    if (is_flag(f)) {
      bool value = false;
      try {
        value = n.as<bool>();
      } catch (const YAML::Exception&) {
        throw InputError(config::where(file, n) + ": " + name + ": expected true or false");
      }
      flag_of(f, p) = value;
    } else if (f.integer != nullptr) {
      p.*f.integer = static_cast<int>(config::get_int(
          file, root, "", name, static_cast<long>(row.key.min), static_cast<long>(row.key.max)));
    } else if (f.choice != nullptr) {
      f.choice(p, config::get_choice(file, root, "", name, config::choices_of(row.key)));
    }
  }
}

namespace {
// A bound integer key's default where it is a number ("1"; not "pipeline_parallel").
std::optional<long> integer_default(const PlanKeyRow& row) {
  const std::string_view d = row.key.default_value;
  long v = 0;
  if (row.field.integer == nullptr ||
      std::from_chars(d.data(), d.data() + d.size(), v).ec != std::errc{})
    return std::nullopt;
  return v;
}
}  // namespace

void check_key_needs(const YAML::Node& root, const std::string& file, const Plan& p) {
  for (const PlanKeyRow& row : plan_key_rows()) {
    const KeyNeeds& n = row.needs;
    const std::string name(row.key.name);
    if (n.key.empty() || !root[name]) continue;
    // An integer key at its default needs nothing (interleave: 1 under any schedule).
    if (const auto d = integer_default(row); d && p.*row.field.integer == *d) continue;
    const YAML::Node other = root[std::string(n.key)];
    const std::string value = other && other.IsScalar()
                                  ? other.as<std::string>()
                                  : std::string(find_row(plan_key_rows(), n.key).key.default_value);
    if (value == n.value) continue;
    throw InputError(config::where(file, root[name]) + ": " + name + ": needs " +
                     std::string(n.key) + ": " + std::string(n.value) +
                     (n.why.empty() ? "" : " (" + std::string(n.why) + ")"));
  }
}

std::vector<std::string> launch_flags(const Plan& p, FlagLauncher launcher,
                                      std::vector<std::string>* unsupported) {
  std::vector<std::string> out;
  for (const PlanKeyRow& row : plan_key_rows()) {
    const LaunchFlag& m = launcher == FlagLauncher::megatron ? row.megatron : row.deepspeed;
    if (m.on.empty() && m.off.empty() && m.lacks_on.empty()) continue;
    if (!m.needs.empty() && !flag_of(find_row(plan_key_rows(), m.needs).field, p)) continue;
    const bool value = flag_of(row.field, p);
    const std::string_view flag = value ? m.on : m.off;
    if (!flag.empty()) out.emplace_back(flag);
    if (value && !m.lacks_on.empty() && unsupported != nullptr)
      unsupported->emplace_back(m.lacks_on);
  }
  return out;
}

const PlanKey& plan_key(std::string_view name) {
  return config::find_key(plan_keys(), name, "workload::plan_keys()");
}

std::vector<std::string> plan_choices(std::string_view name) {
  return config::choices_of(plan_key(name));
}

std::vector<std::string> plan_key_names() { return config::key_names(plan_keys()); }

namespace {
// What a launcher passes for a flag key, as the reference page says it.
std::string flag_text(const LaunchFlag& f) {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (!f.on.empty()) add(fmt::format("true: `{}`", f.on));
  if (!f.off.empty()) add(fmt::format("false: `{}`", f.off));
  if (!f.lacks_on.empty()) add("true: none (exported without it)");
  if (!f.needs.empty() && !out.empty()) add(fmt::format("with `{}` only", f.needs));
  return out.empty() ? "none" : out;
}

// The flag keys' launcher flags: what `hetsim export` passes for them.
std::string launch_flags_markdown() {
  std::string out =
      "\n## Launcher flags\n\nWhat `hetsim export` passes for a flag key (a key's default passes "
      "nothing).\n\n| key | Megatron-LM | Megatron-DeepSpeed |\n| --- | --- | --- |\n";
  for (const PlanKeyRow& row : plan_key_rows()) {
    if (row.key.type != PlanKeyType::flag) continue;
    out += fmt::format("| `{}` | {} | {} |\n", row.key.name, flag_text(row.megatron),
                       flag_text(row.deepspeed));
  }
  return out;
}
}  // namespace

std::string plan_keys_markdown() {
  return "# Plan keys\n\n"
         "<!-- Generated by `hetsim reference plan-keys` from sim/workload/plan/plan_keys.cpp; do "
         "not edit. -->\n\n"
         "The keys of a transformer plan file. What each does, with examples: "
         "[models, clusters and plans](../models-clusters-plans.md#plans). Editors check plans "
         "against [the JSON Schema](../schemas/plan.schema.json).\n\n" +
         config::keys_markdown(plan_keys(), true) + launch_flags_markdown();
}

nlohmann::ordered_json plan_json_schema() {
  nlohmann::ordered_json schema =
      config::keys_json_schema(plan_keys(), "hetsim plan (transformer models)",
                               "Generated by `hetsim reference plan-schema` from "
                               "sim/workload/plan/plan_keys.cpp; do not edit.");
  // Each key that needs another's value (KeyNeeds): if given (an integer key: not at its
  // default), the other must be given with that value.
  nlohmann::ordered_json needs = nlohmann::ordered_json::array();
  for (const PlanKeyRow& row : plan_key_rows()) {
    const KeyNeeds& n = row.needs;
    if (n.key.empty()) continue;
    const std::string name(row.key.name), other(n.key);
    nlohmann::ordered_json given = {{"required", {name}}};
    if (const auto d = integer_default(row)) given["properties"][name] = {{"not", {{"const", *d}}}};
    nlohmann::ordered_json then = {{"required", {other}}};
    then["properties"][other] = {{"const", std::string(n.value)}};
    needs.push_back({{"if", given}, {"then", then}});
  }
  if (!needs.empty()) schema["allOf"] = needs;
  return schema;
}

}  // namespace hetsim::workload
