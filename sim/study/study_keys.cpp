// The keys of a study file, declared once (config/key_table.h): study.cpp checks a file's keys
// from this table, and `hetsim reference study-keys | study-schema` writes
// docs/reference/study-keys.md and docs/schemas/study.schema.json from it.
#include <string>

#include "sim/config/limits.h"
#include "sim/study/study.h"

namespace hetsim::study {

namespace {

using config::Key;
using T = config::KeyType;

// The keys of a model, cluster or plan entry, under `prefix` (`models[]` in the lists to cross,
// `cases[].model` in a case).
void add_model_keys(std::vector<Key>& keys, const std::string& prefix) {
  keys.push_back({config::keep_name(prefix),
                  T::any,
                  {},
                  0,
                  0,
                  "",
                  "A built-in model's name or a model file, or a map {model, name}",
                  ""});
  keys.push_back(
      {config::keep_name(prefix + ".model"), T::text, {}, 0, 0, "", "The name or file", ""});
  keys.push_back({config::keep_name(prefix + ".name"),
                  T::text,
                  {},
                  0,
                  0,
                  "the model",
                  "Its label in the results",
                  ""});
}

void add_cluster_keys(std::vector<Key>& keys, const std::string& prefix) {
  keys.push_back({config::keep_name(prefix),
                  T::any,
                  {},
                  0,
                  0,
                  "",
                  "A built-in cluster's name or a cluster file, or a map {cluster, nodes, set, "
                  "name}",
                  ""});
  keys.push_back(
      {config::keep_name(prefix + ".cluster"), T::text, {}, 0, 0, "", "The name or file", ""});
  keys.push_back({config::keep_name(prefix + ".nodes"),
                  T::integer,
                  {},
                  1,
                  static_cast<double>(config::limits::kNodes),
                  "the file's",
                  "Nodes of a one-group cluster (simulate --nodes)",
                  ""});
  keys.push_back({config::keep_name(prefix + ".set"),
                  T::list,
                  {},
                  0,
                  0,
                  "none",
                  "PATH=VALUE overrides of the cluster file (simulate --set)",
                  ""});
  keys.push_back({config::keep_name(prefix + ".name"),
                  T::text,
                  {},
                  0,
                  0,
                  "the cluster and its overrides",
                  "Its label in the results",
                  ""});
}

void add_plan_keys(std::vector<Key>& keys, const std::string& prefix) {
  keys.push_back({config::keep_name(prefix),
                  T::any,
                  {},
                  0,
                  0,
                  "",
                  "A plan file, a map {file, set, name}, or a planner policy's best plan {policy, "
                  "global_batch_size, sequence_length, replan, name}",
                  ""});
  keys.push_back(
      {config::keep_name(prefix + ".file"), T::text, {}, 0, 0, "", "A plan file", "", "no policy"});
  keys.push_back({config::keep_name(prefix + ".set"),
                  T::list,
                  {},
                  0,
                  0,
                  "none",
                  "KEY=VALUE overrides of the plan file (simulate --set)",
                  "",
                  "no policy"});
  keys.push_back({config::keep_name(prefix + ".policy"),
                  T::text,
                  {},
                  0,
                  0,
                  "",
                  "A planner policy (`hetsim plan --policy`), or all: the planner's best plan",
                  ""});
  keys.push_back({config::keep_name(prefix + ".global_batch_size"),
                  T::integer,
                  {},
                  1,
                  static_cast<double>(config::limits::kBatch),
                  "",
                  "Sequences per iteration",
                  "",
                  "policy"});
  keys.push_back({config::keep_name(prefix + ".sequence_length"),
                  T::integer,
                  {},
                  1,
                  static_cast<double>(config::limits::kSequence),
                  "the model's",
                  "Tokens per sequence",
                  "",
                  "policy"});
  keys.push_back({config::keep_name(prefix + ".replan"),
                  T::flag,
                  {},
                  0,
                  0,
                  "false",
                  "Re-plan around the run's slow GPUs (the static plan's batch shares moved off "
                  "them)",
                  "",
                  "policy"});
  keys.push_back({config::keep_name(prefix + ".name"),
                  T::text,
                  {},
                  0,
                  0,
                  "the file or the policy",
                  "Its label in the results",
                  ""});
}

// A case's reference figure, and the frameworks to cross.
void add_reference_and_framework_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"cases[].reference",
       T::map,
       {},
       0,
       0,
       "none",
       "A published or measured iteration time to compare with",
       ""},
      {"cases[].reference.iteration_time_s", T::number, {}, 0, 1e9, "", "Seconds", ""},
      {"cases[].reference.source", T::text, {}, 0, 0, "", "Where the figure is from", ""},
      {"frameworks",
       T::list,
       {},
       0,
       0,
       "each plan's own",
       "Frameworks to cross (built-in names or files)",
       ""},
      {"frameworks[]", T::text, {}, 0, 0, "", "A framework's name or file", ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// The what-ifs to cross, and what every run shares: the tokens to price, the calibration.
void add_perturbation_and_run_keys(std::vector<Key>& keys) {
  const std::vector<Key> rows = {
      {"perturbations", T::list, {}, 0, 0, "none", "What-ifs to cross: `none`, or a map each", ""},
      {"perturbations[]",
       T::any,
       {},
       0,
       0,
       "",
       "none, or a map of what-ifs as simulate --perturb takes them",
       ""},
      {"perturbations[].name", T::text, {}, 0, 0, "the what-ifs", "Its label in the results", ""},
      {"perturbations[].slow", T::entries, {}, 0, 0, "", "Slow GPUs: {gpu, factor, after}", ""},
      {"perturbations[].link", T::entries, {}, 0, 0, "", "Slow links: {link, factor}", ""},
      {"perturbations[].stragglers",
       T::map,
       {},
       0,
       0,
       "",
       "Seeded random stragglers: {seed, probability, min, max}",
       ""},
      {"perturbations[].lost",
       T::map,
       {},
       0,
       0,
       "",
       "A node lost mid-step: {node, at, detect, restart, replace}",
       ""},
      {"tokens",
       T::number,
       {},
       0,
       1e30,
       "none",
       "Tokens of a whole training run, to price it (300e9)",
       ""},
      {"calibration", T::text, {}, 0, 0, "none", "A calibration database for every run", ""},
      {"efficiency",
       T::text,
       {},
       0,
       0,
       "the built-in",
       "An efficiency file for the datasheet model",
       ""},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

std::vector<Key> make_study_keys() {
  std::vector<Key> keys = {
      {"description", T::text, {}, 0, 0, "", "One line on what the study asks", ""},
      {"models", T::list, {}, 0, 0, "", "The models to cross (or cases)", ""},
  };
  add_model_keys(keys, "models[]");
  keys.push_back({"clusters", T::list, {}, 0, 0, "", "The clusters to cross (or cases)", ""});
  add_cluster_keys(keys, "clusters[]");
  keys.push_back({"plans", T::list, {}, 0, 0, "", "The plans to cross (or cases)", ""});
  add_plan_keys(keys, "plans[]");
  keys.push_back({"cases",
                  T::list,
                  {},
                  0,
                  0,
                  "",
                  "Runs that each give their model, cluster and plan together, instead of the "
                  "three lists",
                  ""});
  keys.push_back({"cases[]", T::map, {}, 0, 0, "", "One run", ""});
  add_model_keys(keys, "cases[].model");
  add_cluster_keys(keys, "cases[].cluster");
  add_plan_keys(keys, "cases[].plan");
  add_reference_and_framework_keys(keys);
  add_perturbation_and_run_keys(keys);
  return keys;
}

}  // namespace

const std::vector<Key>& study_keys() {
  static const std::vector<Key> table = make_study_keys();
  return table;
}

std::string study_keys_markdown() {
  return "# Study keys\n\n"
         "<!-- Generated by `hetsim reference study-keys` from sim/study/study_keys.cpp; do not "
         "edit. -->\n\n"
         "The keys of a study file, which `hetsim sweep` runs: the cross product of `models`, "
         "`clusters` and `plans` (or the runs of `cases`), with `frameworks` and "
         "`perturbations`. `models[]` is one entry of the list `models`; an entry is a name or a "
         "file, or a map with the keys below. A key marked \"only with `policy`\" belongs to a "
         "plan entry that asks the planner. How to write one: [a capacity "
         "study](../guides/capacity-study.md). Editors check study files against [the JSON "
         "Schema](../schemas/study.schema.json).\n\n" +
         config::keys_markdown(study_keys(), false);
}

nlohmann::ordered_json study_json_schema() {
  return config::keys_json_schema(study_keys(), "hetsim study",
                                  "Generated by `hetsim reference study-schema` from "
                                  "sim/study/study_keys.cpp; do not edit.");
}

}  // namespace hetsim::study
