// The study's table as CSV and JSON; see results.h.
#include "sim/study/results.h"

#include <fmt/format.h>

namespace hetsim::study {

std::vector<RunRecord> study_records(const Study& study, const Store& store) {
  std::vector<RunRecord> out;
  for (const StudyRun& r : study.runs) {
    if (auto rec = store.find(r.key)) {
      // The labels of this study file (another study may have stored the same run).
      rec->model = r.model, rec->cluster = r.cluster, rec->plan = r.plan;
      rec->framework = r.framework;
      rec->perturbation = r.perturbation;
      rec->reference_s = r.reference_s;
      out.push_back(std::move(*rec));
    }
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

namespace {

bool priced_fit(const RunRecord& r) { return r.ok && !r.oom && r.cost_per_million_tokens_usd; }

std::string optional_number(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : std::string();
}

// (predicted - reference) / reference, in percent, for a run with a reference.
std::optional<double> error_pct(const RunRecord& r) {
  if (!r.ok || !r.reference_s) return std::nullopt;
  return 100 * (r.iteration_time_s - *r.reference_s) / *r.reference_s;
}

std::optional<double> run_cost(const RunRecord& r, double tokens) {
  if (!r.ok || tokens <= 0 || !r.cost_per_million_tokens_usd) return std::nullopt;
  return *r.cost_per_million_tokens_usd * (tokens / 1e6);
}

}  // namespace

std::vector<bool> pareto_front(const std::vector<RunRecord>& records) {
  std::vector<bool> on(records.size(), false);
  for (size_t a = 0; a < records.size(); ++a) {
    const RunRecord& x = records[a];
    if (!priced_fit(x)) continue;
    bool dominated = false;
    for (size_t b = 0; b < records.size() && !dominated; ++b) {
      const RunRecord& y = records[b];
      if (b == a || !priced_fit(y) || y.model != x.model || y.perturbation != x.perturbation) {
        continue;
      }
      const double xc = *x.cost_per_million_tokens_usd, yc = *y.cost_per_million_tokens_usd;
      dominated = y.tokens_per_s >= x.tokens_per_s && yc <= xc &&
                  (y.tokens_per_s > x.tokens_per_s || yc < xc);
    }
    on[a] = !dominated;
  }
  return on;
}

void write_csv(std::ostream& out, const std::vector<RunRecord>& records, double tokens) {
  out << "index,key,model,cluster,plan,framework,perturbation,status,error,gpus,iteration_time_s,"
         "tokens_per_s,samples_per_s,mfu,peak_memory_bytes,oom,compute_s,communication_exposed_s,"
         "bubble_s,cost_per_iteration_usd,cost_per_million_tokens_usd,cost_per_run_usd,pareto,"
         "reference_iteration_time_s,error_pct\n";
  const std::vector<bool> front = pareto_front(records);
  size_t i = 0;
  for (const RunRecord& r : records) {
    out << i << ',' << r.key << ',' << csv_field(r.model) << ',' << csv_field(r.cluster) << ','
        << csv_field(r.plan) << ',' << csv_field(r.framework) << ',' << csv_field(r.perturbation)
        << ',' << (r.ok ? "ok" : "failed") << ',' << csv_field(r.error) << ',';
    if (r.ok) {
      out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}", r.gpus, r.iteration_time_s,
                         r.tokens_per_s, r.samples_per_s, r.mfu, r.peak_memory_bytes,
                         r.oom ? "true" : "false", r.compute_s, r.communication_exposed_s,
                         r.bubble_s, optional_number(r.cost_per_iteration_usd),
                         optional_number(r.cost_per_million_tokens_usd),
                         optional_number(run_cost(r, tokens)), front[i] ? "true" : "false");
    } else {
      out << ",,,,,,,,,,,,,";
    }
    out << ',' << optional_number(r.reference_s) << ',' << optional_number(error_pct(r)) << '\n';
    ++i;
  }
}

nlohmann::ordered_json to_json(const Study& study, const std::string& store_path,
                               const std::vector<RunRecord>& records) {
  nlohmann::ordered_json j;
  j["study"] = study.file;
  j["store"] = store_path;
  j["tokens"] = study.tokens > 0 ? nlohmann::ordered_json(study.tokens) : nullptr;
  const std::vector<bool> front = pareto_front(records);
  auto& runs = j["runs"] = nlohmann::ordered_json::array();
  size_t i = 0;
  for (const RunRecord& r : records) {
    nlohmann::ordered_json x;
    x["key"] = r.key;
    x["model"] = r.model;
    x["cluster"] = r.cluster;
    x["plan"] = r.plan;
    x["framework"] = r.framework;
    x["perturbation"] = r.perturbation;
    x["inputs"] = nlohmann::ordered_json::parse(r.inputs);
    x["status"] = r.ok ? "ok" : "failed";
    x["error"] = r.error;
    if (r.ok) {
      x["gpus"] = r.gpus;
      x["iteration_time_s"] = r.iteration_time_s;
      x["throughput_tokens_per_s"] = r.tokens_per_s;
      x["throughput_samples_per_s"] = r.samples_per_s;
      x["mfu"] = r.mfu;
      x["peak_memory_bytes"] = r.peak_memory_bytes;
      x["oom"] = r.oom;
      x["breakdown_s"] = {{"compute", r.compute_s},
                          {"communication_exposed", r.communication_exposed_s},
                          {"bubble", r.bubble_s}};
      auto number = [](const std::optional<double>& v) {
        return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
      };
      x["cost_per_iteration_usd"] = number(r.cost_per_iteration_usd);
      x["cost_per_million_tokens_usd"] = number(r.cost_per_million_tokens_usd);
      x["cost_per_run_usd"] = number(run_cost(r, study.tokens));
      x["pareto"] = static_cast<bool>(front[i]);
      x["report"] = nlohmann::ordered_json::parse(r.report_json);
      if (r.reference_s) {
        x["reference_iteration_time_s"] = *r.reference_s;
        x["error_pct"] = *error_pct(r);
      }
    } else {
      x["report"] = nullptr;
    }
    runs.push_back(std::move(x));
    ++i;
  }
  return j;
}

}  // namespace hetsim::study
