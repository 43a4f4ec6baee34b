// A study file: the cross product of models, clusters (with node counts and --set overrides),
// plans (files, or a policy's best plan from the planner), or instead `cases` that each give a
// model, a cluster and a plan together (with a reference iteration time to compare with), crossed
// with frameworks and perturbations
// (what-ifs, sim/workload/replay/perturbation.h), each combination one
// run with a key that hashes its inputs' contents. Read strictly: an unknown key names the file,
// the line and the key; an empty cross product is an error that says which list is empty.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/key_table.h"
#include "sim/study/run.h"

namespace hetsim::study {

// "the planner's best plan from that policy" (sim/policy/planner.h).
struct PolicyPlan {
  std::string policy;  // a policy name, or "all"
  int64_t global_batch = 0, sequence = 0;
  std::string framework;  // for every proposal; empty: the policy's own
  // Re-planned around the run's slow devices (sim/policy/replan.h): the static plan's batch
  // shares moved off them. Without it, the plan is the static one, chosen on a healthy cluster.
  bool replan = false;
};

struct StudyRun {
  size_t index = 0;  // in the cross product: models, clusters, plans, frameworks, perturbations
  // Labels as the study file writes them, for the store and the CSV.
  std::string model, cluster, plan, framework, perturbation;
  RunSpec spec;  // paths resolved; a plan file's text read (it is part of the key)
  std::optional<PolicyPlan> policy;  // set: the plan comes from the planner
  std::string inputs_json;           // the labels and overrides, one JSON object
  std::string key;  // 32 hex digits: a hash of the inputs' contents and the hetsim version
  // A case's published or measured iteration time (not part of the key), and where it is from.
  std::optional<double> reference_s;
  std::string reference_source;
};

struct Study {
  std::string file;
  std::string efficiency, calibration;  // resolved paths, "" for the defaults
  double tokens = 0;                    // of a whole training run, for its cost; 0: not given
  std::vector<StudyRun> runs;
};

// Reads a study; paths in it are relative to its folder (where such a file exists; else as
// `simulate` takes them: the current folder, or a built-in name). Every model, cluster, plan
// file, policy and framework is checked before any run starts. Throws InputError.
Study load_study(const std::string& path);
Study load_study_text(const std::string& text, const std::string& file, const std::string& folder);

// The keys of a study file, declared once (config/key_table.h; study_keys.cpp): the loader
// checks a file's keys from this table; `hetsim reference study-keys` and `study-schema` write
// docs/reference/study-keys.md and docs/schemas/study.schema.json from it.
const std::vector<config::Key>& study_keys();
std::string study_keys_markdown();
nlohmann::ordered_json study_json_schema();

// 128 bits of FNV-1a (two 64-bit lanes with different offsets) as 32 hex digits. Not
// cryptographic: it tells apart inputs, it does not defend against forged ones.
std::string hash_hex(const std::string& bytes);

}  // namespace hetsim::study
