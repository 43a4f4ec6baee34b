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

void write_csv(std::ostream& out, const std::vector<RunRecord>& records) {
  out << "index,key,model,cluster,plan,framework,status,error,gpus,iteration_time_s,tokens_per_s,"
         "samples_per_s,mfu,peak_memory_bytes,oom,compute_s,communication_exposed_s,bubble_s\n";
  size_t i = 0;
  for (const RunRecord& r : records) {
    out << i++ << ',' << r.key << ',' << csv_field(r.model) << ',' << csv_field(r.cluster) << ','
        << csv_field(r.plan) << ',' << csv_field(r.framework) << ',' << (r.ok ? "ok" : "failed")
        << ',' << csv_field(r.error) << ',';
    if (r.ok) {
      out << fmt::format("{},{},{},{},{},{},{},{},{},{}", r.gpus, r.iteration_time_s,
                         r.tokens_per_s, r.samples_per_s, r.mfu, r.peak_memory_bytes,
                         r.oom ? "true" : "false", r.compute_s, r.communication_exposed_s,
                         r.bubble_s);
    } else {
      out << ",,,,,,,,,";
    }
    out << '\n';
  }
}

nlohmann::ordered_json to_json(const Study& study, const std::string& store_path,
                               const std::vector<RunRecord>& records) {
  nlohmann::ordered_json j;
  j["study"] = study.file;
  j["store"] = store_path;
  auto& runs = j["runs"] = nlohmann::ordered_json::array();
  for (const RunRecord& r : records) {
    nlohmann::ordered_json x;
    x["key"] = r.key;
    x["model"] = r.model;
    x["cluster"] = r.cluster;
    x["plan"] = r.plan;
    x["framework"] = r.framework;
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
      x["report"] = nlohmann::ordered_json::parse(r.report_json);
    } else {
      x["report"] = nullptr;
    }
    runs.push_back(std::move(x));
  }
  return j;
}

}  // namespace hetsim::study
