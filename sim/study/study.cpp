// Reading a study file and expanding its cross product; see study.h.
#include "sim/study/study.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "sim/config/embedded_data.h"
#include "sim/config/limits.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/policy/policy.h"
#include "sim/workload/cost/framework.h"

namespace hetsim::study {

namespace fs = std::filesystem;
using config::where;

namespace {

// `given`: the value as the study file writes it, for the key (the same study run from another
// folder resolves paths differently, but is the same study); `source`: resolved for the loader.
struct ModelEntry {
  std::string label, given, source, text;
};
struct ClusterEntry {
  std::string label, given, source, text;
  config::ClusterOptions options;
};
struct PlanEntry {
  std::string label, given, file, text;  // a plan file: its resolved path and text
  std::vector<std::string> sets;
  std::optional<PolicyPlan> policy;
};
struct FrameworkEntry {
  std::string label, source, text;  // "" label: each plan's own
};
struct PerturbationEntry {
  std::string label;  // "" for none
  workload::Perturbations perturbations;
};

// A path relative to the study's folder where a file or folder of that name is there; else the
// value as `simulate` takes it (the current folder, or a built-in name).
std::string resolve(const std::string& folder, const std::string& value) {
  const fs::path p(value);
  if (value.empty() || p.is_absolute()) return value;
  std::error_code ec;
  const fs::path q = fs::path(folder.empty() ? "." : folder) / p;
  if (fs::exists(q, ec)) return q.lexically_normal().string();
  return value;
}

// The text a loader reads for `name`, for the key: a file, a Hugging Face folder's config.json,
// or the built-in file of that name under `builtin_folder` (matched as the loaders match).
std::string source_text(const std::string& name, const std::string& builtin_folder) {
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return config::read_text_file(name);
  if (fs::is_directory(name, ec)) {
    const fs::path c = fs::path(name) / "config.json";
    return fs::is_regular_file(c, ec) ? config::read_text_file(c.string()) : "";
  }
  for (const config::EmbeddedFile& f : config::embedded_files()) {
    const fs::path p(f.path);
    if (p.parent_path() != builtin_folder) continue;
    if (name == f.path || name == p.stem().string() || builtin_folder + "/" + name == f.path ||
        builtin_folder + "/" + name + ".yaml" == f.path) {
      return f.text;
    }
  }
  return "";
}

// Runs `check` and prefixes an input error with where the study names the input.
template <typename F>
void checked(const std::string& file, const YAML::Node& node, const std::string& path, F check) {
  try {
    check();
  } catch (const InputError& e) {
    throw InputError(where(file, node) + ": " + path + ": " + e.what());
  } catch (const YAML::Exception& e) {
    throw InputError(where(file, node) + ": " + path + ": " + e.what());
  }
}

YAML::Node list(const std::string& file, const YAML::Node& root, const std::string& key) {
  const YAML::Node n = root[key];
  if (!n || n.IsNull()) return YAML::Node(YAML::NodeType::Sequence);
  if (!n.IsSequence()) {
    throw InputError(where(file, n) + ": " + key + ": expected a list");
  }
  return n;
}

std::vector<std::string> strings(const std::string& file, const YAML::Node& map,
                                 const std::string& path, const std::string& key) {
  std::vector<std::string> out;
  const YAML::Node n = map[key];
  if (!n) return out;
  if (!n.IsSequence()) {
    throw InputError(where(file, n) + ": " + config::join_path(path, key) +
                     ": expected a list of PATH=VALUE strings");
  }
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      throw InputError(where(file, n[i]) + ": " + config::join_path(path, key) + "[" +
                       std::to_string(i) + "]: expected a PATH=VALUE string");
    }
    out.push_back(n[i].Scalar());
  }
  return out;
}

std::string scalar(const std::string& file, const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar() || n.Scalar().empty()) {
    throw InputError(where(file, n) + ": " + path + ": expected a name or a file");
  }
  return n.Scalar();
}

ModelEntry read_model(const std::string& file, const std::string& folder, const YAML::Node& e,
                      const std::string& path) {
  ModelEntry m;
  if (e.IsMap()) {
    config::check_keys(file, e, path, config::key_names(study_keys(), "models[]"));
    m.label = config::get_string(file, e, path, "model");
    m.label = config::get_string(file, e, path, "name", m.label);
  } else {
    m.label = scalar(file, e, path);
  }
  m.given = e.IsMap() ? e["model"].Scalar() : e.Scalar();
  m.source = resolve(folder, m.given);
  checked(file, e, path, [&] { workload::load_model(m.source); });
  m.text = source_text(m.source, "models");
  return m;
}

std::vector<ModelEntry> read_models(const std::string& file, const std::string& folder,
                                    const YAML::Node& root) {
  std::vector<ModelEntry> out;
  const YAML::Node l = list(file, root, "models");
  for (size_t i = 0; i < l.size(); ++i)
    out.push_back(read_model(file, folder, l[i], fmt::format("models[{}]", i)));
  return out;
}

ClusterEntry read_cluster(const std::string& file, const std::string& folder, const YAML::Node& e,
                          const std::string& path) {
  ClusterEntry c;
  std::string given;
  if (e.IsMap()) {
    config::check_keys(file, e, path, config::key_names(study_keys(), "clusters[]"));
    given = config::get_string(file, e, path, "cluster");
    if (e["nodes"]) {
      c.options.nodes = config::get_int(file, e, path, "nodes", 1, config::limits::kNodes);
    }
    c.options.sets = strings(file, e, path, "set");
    std::string label = given;
    if (c.options.nodes) label += fmt::format(" nodes={}", *c.options.nodes);
    for (const std::string& s : c.options.sets) label += " set " + s;
    c.label = config::get_string(file, e, path, "name", label);
  } else {
    given = c.label = scalar(file, e, path);
  }
  c.given = given;
  c.source = resolve(folder, given);
  checked(file, e, path, [&] { config::load_cluster(c.source, c.options); });
  c.text = source_text(c.source, "topologies");
  return c;
}

std::vector<ClusterEntry> read_clusters(const std::string& file, const std::string& folder,
                                        const YAML::Node& root) {
  std::vector<ClusterEntry> out;
  const YAML::Node l = list(file, root, "clusters");
  for (size_t i = 0; i < l.size(); ++i)
    out.push_back(read_cluster(file, folder, l[i], fmt::format("clusters[{}]", i)));
  return out;
}

PlanEntry read_plan(const std::string& file, const std::string& folder, const YAML::Node& e,
                    const std::string& path) {
  std::vector<std::string> policies = {"all"};
  for (const policy::Policy* p : policy::policies()) policies.push_back(p->name());
  PlanEntry p;
  std::string given;
  if (e.IsMap() && e["policy"]) {
    const std::string policy_name = e["policy"].Scalar();
    config::check_keys(file, e, path,
                       config::key_names(study_keys(), "plans[]", "policy", &policy_name));
    PolicyPlan pp;
    pp.replan = config::get_choice(file, e, path, "replan", {"false", "true"}, "false") == 1;
    pp.policy = policies[config::get_choice(file, e, path, "policy", policies)];
    pp.global_batch =
        config::get_int(file, e, path, "global_batch_size", 1, config::limits::kBatch);
    pp.sequence =
        config::get_int(file, e, path, "sequence_length", 1, config::limits::kSequence, 0);
    std::string label = fmt::format("policy {} global_batch_size={}", pp.policy, pp.global_batch);
    if (pp.sequence > 0) label += fmt::format(" sequence_length={}", pp.sequence);
    if (pp.replan) label += " replanned";
    p.label = config::get_string(file, e, path, "name", label);
    p.policy = pp;
    return p;
  }
  if (e.IsMap()) {
    config::check_keys(file, e, path,
                       config::key_names(study_keys(), "plans[]", "policy", nullptr));
    given = config::get_string(file, e, path, "file");
    p.sets = strings(file, e, path, "set");
    std::string label = given;
    for (const std::string& s : p.sets) label += " set " + s;
    p.label = config::get_string(file, e, path, "name", label);
  } else {
    given = p.label = scalar(file, e, path);
  }
  p.given = given;
  p.file = resolve(folder, given);
  checked(file, e, path, [&] { p.text = config::read_text_file(p.file, "plan file"); });
  return p;
}

std::vector<PlanEntry> read_plans(const std::string& file, const std::string& folder,
                                  const YAML::Node& root) {
  std::vector<PlanEntry> out;
  const YAML::Node l = list(file, root, "plans");
  for (size_t i = 0; i < l.size(); ++i)
    out.push_back(read_plan(file, folder, l[i], fmt::format("plans[{}]", i)));
  return out;
}

// One run's model, cluster and plan, given together (a study's `cases`), with the iteration
// time a paper or a measurement reports for it.
struct CaseEntry {
  ModelEntry model;
  ClusterEntry cluster;
  PlanEntry plan;
  std::optional<double> reference_s;
  std::string reference_source;
};

std::vector<CaseEntry> read_cases(const std::string& file, const std::string& folder,
                                  const YAML::Node& root) {
  std::vector<CaseEntry> out;
  const YAML::Node l = list(file, root, "cases");
  for (size_t i = 0; i < l.size(); ++i) {
    const std::string path = fmt::format("cases[{}]", i);
    const YAML::Node e = l[i];
    if (!e.IsMap()) {
      throw InputError(where(file, e) + ": " + path +
                       ": expected a map with model, cluster, plan and optionally reference");
    }
    config::check_keys(file, e, path, config::key_names(study_keys(), "cases[]"));
    for (const char* k : {"model", "cluster", "plan"}) {
      if (!e[k]) throw InputError(where(file, e) + ": " + path + ": missing " + k);
    }
    CaseEntry c;
    c.model = read_model(file, folder, e["model"], path + ".model");
    c.cluster = read_cluster(file, folder, e["cluster"], path + ".cluster");
    c.plan = read_plan(file, folder, e["plan"], path + ".plan");
    if (const YAML::Node r = e["reference"]) {
      const std::string rp = path + ".reference";
      if (!r.IsMap()) {
        throw InputError(where(file, r) + ": " + rp +
                         ": expected a map {iteration_time_s: SECONDS, source: TEXT}");
      }
      config::check_keys(file, r, rp, config::key_names(study_keys(), "cases[].reference"));
      const double t = config::get_number(file, r, rp, "iteration_time_s");
      if (!(t > 0) || !std::isfinite(t)) {
        throw InputError(fmt::format("{}: {}.iteration_time_s: expected seconds > 0, got {}",
                                     where(file, r), rp, t));
      }
      c.reference_s = t;
      c.reference_source = config::get_string(file, r, rp, "source", "");
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<FrameworkEntry> read_frameworks(const std::string& file, const std::string& folder,
                                            const YAML::Node& root) {
  if (!root["frameworks"]) return {FrameworkEntry{}};  // each plan's own
  std::vector<FrameworkEntry> out;
  const YAML::Node l = list(file, root, "frameworks");
  for (size_t i = 0; i < l.size(); ++i) {
    const std::string path = fmt::format("frameworks[{}]", i);
    FrameworkEntry f;
    f.label = scalar(file, l[i], path);
    f.source = resolve(folder, f.label);
    checked(file, l[i], path, [&] { workload::load_framework(f.source); });
    f.text = source_text(f.source, "frameworks");
    out.push_back(std::move(f));
  }
  return out;
}

// Each entry a map of what-ifs (`slow`, `link`, `stragglers`, and a `name` for the table), or
// `none`; without the list, every run unperturbed.
std::vector<PerturbationEntry> read_perturbation_entries(const std::string& file,
                                                         const YAML::Node& root) {
  if (!root["perturbations"]) return {PerturbationEntry{}};
  std::vector<PerturbationEntry> out;
  const YAML::Node l = list(file, root, "perturbations");
  for (size_t i = 0; i < l.size(); ++i) {
    const std::string path = fmt::format("perturbations[{}]", i);
    const YAML::Node e = l[i];
    PerturbationEntry p;
    if (e.IsScalar() && e.Scalar() == "none") {
      p.label = "none";
    } else if (e.IsMap()) {
      workload::read_perturbations(file, e, path, {"name"}, p.perturbations);
      p.label = p.perturbations.empty() ? "none" : p.perturbations.canonical();
      p.label = config::get_string(file, e, path, "name", p.label);
    } else {
      throw InputError(where(file, e) + ": " + path +
                       ": expected none or a map of what-ifs (slow, link, stragglers, name)");
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Length-prefixed, so no two different input lists give the same bytes.
void add(std::string& key, const std::string& field, const std::string& value) {
  key += fmt::format("{} {}\n", field, value.size());
  key += value;
  key += '\n';
}

}  // namespace

std::string hash_hex(const std::string& bytes) {
  // FNV-1a 64 (prime 2^40 + 2^8 + 0xb3); the second lane starts from a different offset.
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : bytes) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x100000001b3ULL;
  }
  return fmt::format("{:016x}{:016x}", a, b);
}

Study load_study(const std::string& path) {
  const std::string text = config::read_text_file(path, "study file");
  return load_study_text(text, path, fs::path(path).parent_path().string());
}

namespace {

// (model, cluster, plan, case) of each run in the study's order, before frameworks and
// perturbations are crossed in.
using Triple =
    std::tuple<const ModelEntry*, const ClusterEntry*, const PlanEntry*, const CaseEntry*>;

// An empty cross product is an error that says which lists are empty.
void check_not_empty(const std::string& file, const YAML::Node& root, size_t models,
                     size_t clusters, size_t plans, size_t frameworks, size_t perturbations) {
  if (models && clusters && plans && frameworks && perturbations) return;
  std::vector<std::string> empty;
  for (const auto& [name, n] : {std::pair<std::string, size_t>{"models", models},
                                {"clusters", clusters},
                                {"plans", plans},
                                {"frameworks", root["frameworks"] ? frameworks : 1},
                                {"perturbations", perturbations}}) {
    if (n == 0) empty.push_back(name);
  }
  throw InputError(fmt::format(
      "{}: no runs: the cross product of {} models, {} clusters, {} plans, {} frameworks and {} "
      "perturbations is empty ({} {} missing or empty)",
      file, models, clusters, plans, frameworks, perturbations, config::join_names(empty),
      empty.size() == 1 ? "is" : "are"));
}

// What every run's key shares: the version (a new hetsim may compute differently), the record's
// layout and the costs (the efficiency file's text, the calibration database's hash).
std::string common_key(const std::string& file, const YAML::Node& root, const Study& s) {
  std::string common;
  add(common, "hetsim", HETSIM_VERSION);
  // What a record holds: 2 added perturbations and costs, so older records are not reused.
  add(common, "record", "2");
  std::string efficiency, calibration;
  if (!s.efficiency.empty()) {
    checked(file, root["efficiency"], "efficiency", [&] {
      efficiency = config::read_text_file(s.efficiency, "efficiency file");
      workload::load_datasheet_efficiency(s.efficiency);
    });
  }
  if (!s.calibration.empty()) {
    checked(file, root["calibration"], "calibration", [&] {
      calibration = hash_hex(config::read_text_file(s.calibration, "calibration database"));
    });
  }
  add(common, "efficiency", efficiency);
  add(common, "calibration", calibration);
  return common;
}

// One run: its labels, its spec, the JSON of its inputs and the key that hashes their contents.
StudyRun make_run(const std::string& common, const Triple& t, const FrameworkEntry& f,
                  const PerturbationEntry& x, size_t index) {
  const auto& [mp, cp, pp, casep] = t;
  const ModelEntry& m = *mp;
  const ClusterEntry& c = *cp;
  const PlanEntry& p = *pp;
  StudyRun r;
  if (casep) {
    r.reference_s = casep->reference_s;
    r.reference_source = casep->reference_source;
  }
  r.index = index;
  r.model = m.label, r.cluster = c.label, r.plan = p.label, r.framework = f.label;
  r.spec.model = m.source;
  r.spec.cluster = c.source;
  r.spec.cluster_options = c.options;
  std::string key = common;
  add(key, "model", m.given);
  add(key, "model text", m.text);
  add(key, "cluster", c.given);
  add(key, "cluster text", c.text);
  add(key, "nodes", c.options.nodes ? std::to_string(*c.options.nodes) : "");
  for (const std::string& set : c.options.sets) add(key, "set", set);
  nlohmann::ordered_json in;
  in["model"] = m.source;
  in["cluster"] = c.source;
  in["nodes"] = c.options.nodes ? nlohmann::ordered_json(*c.options.nodes) : nullptr;
  in["set"] = c.options.sets;
  if (p.policy) {
    r.policy = *p.policy;
    r.policy->framework = f.source;
    r.spec.plan = "policy " + p.policy->policy;
    add(key, "policy", p.policy->policy);
    add(key, "global_batch_size", std::to_string(p.policy->global_batch));
    add(key, "sequence_length", std::to_string(p.policy->sequence));
    in["policy"] = p.policy->policy;
    in["global_batch_size"] = p.policy->global_batch;
    in["sequence_length"] = p.policy->sequence;
    if (p.policy->replan) {
      add(key, "replan", "true");
      in["replan"] = true;
    }
  } else {
    r.spec.plan = p.file;
    r.spec.plan_text = p.text;
    r.spec.plan_sets = p.sets;
    if (!f.source.empty()) r.spec.plan_sets.push_back("framework=" + f.source);
    add(key, "plan", p.given);
    add(key, "plan text", p.text);
    in["plan"] = p.file;
    in["plan_set"] = p.sets;
  }
  for (const std::string& set : p.sets) add(key, "plan set", set);
  add(key, "framework", f.label);
  add(key, "framework text", f.text);
  in["framework"] = f.source;
  r.perturbation = x.label;
  r.spec.perturbations = x.perturbations;
  if (!x.perturbations.empty()) {
    add(key, "perturbation", x.perturbations.canonical());
    in["perturbation"] = x.perturbations.canonical();
  }
  r.inputs_json = in.dump();
  r.key = hash_hex(key);
  return r;
}

}  // namespace

Study load_study_text(const std::string& text, const std::string& file, const std::string& folder) {
  const YAML::Node root = config::load_yaml(text, file);
  if (!root.IsMap()) throw InputError(file + ": expected a map (models, clusters, plans, ...)");
  config::check_keys(file, root, "", config::key_names(study_keys()));
  Study s;
  s.file = file;
  s.efficiency = resolve(folder, config::get_string(file, root, "", "efficiency", ""));
  s.calibration = resolve(folder, config::get_string(file, root, "", "calibration", ""));
  // Either the cross product of models, clusters and plans, or `cases` that give each together.
  if (root["cases"]) {
    for (const char* k : {"models", "clusters", "plans"}) {
      if (root[k]) {
        throw InputError(where(file, root[k]) + ": " + k +
                         ": a study gives either cases (each its model, cluster and plan) or the "
                         "lists of models, clusters and plans to cross, not both");
      }
    }
  }
  const std::vector<CaseEntry> cases = read_cases(file, folder, root);
  std::vector<ModelEntry> models = read_models(file, folder, root);
  std::vector<ClusterEntry> clusters = read_clusters(file, folder, root);
  std::vector<PlanEntry> plans = read_plans(file, folder, root);
  std::vector<Triple> triples;
  if (root["cases"]) {
    if (cases.empty())
      throw InputError(where(file, root["cases"]) + ": cases: no runs: the list is empty");
    for (const CaseEntry& c : cases) triples.emplace_back(&c.model, &c.cluster, &c.plan, &c);
    models.resize(1), clusters.resize(1), plans.resize(1);  // for the emptiness check below
  } else {
    for (const ModelEntry& m : models)
      for (const ClusterEntry& c : clusters)
        for (const PlanEntry& p : plans) triples.emplace_back(&m, &c, &p, nullptr);
  }
  const std::vector<FrameworkEntry> frameworks = read_frameworks(file, folder, root);
  const std::vector<PerturbationEntry> perturbations = read_perturbation_entries(file, root);
  if (root["tokens"]) {
    s.tokens = config::get_number(file, root, "", "tokens");
    if (!(s.tokens > 0)) {
      throw InputError(
          fmt::format("{}: tokens: expected a number > 0 (the tokens of a whole "
                      "training run, e.g. 300e9), got {}",
                      where(file, root["tokens"]), s.tokens));
    }
  }
  check_not_empty(file, root, models.size(), clusters.size(), plans.size(), frameworks.size(),
                  perturbations.size());
  const std::string common = common_key(file, root, s);
  for (const Triple& t : triples) {
    for (const FrameworkEntry& f : frameworks) {
      for (const PerturbationEntry& x : perturbations)
        s.runs.push_back(make_run(common, t, f, x, s.runs.size()));
    }
  }
  return s;
}

}  // namespace hetsim::study
