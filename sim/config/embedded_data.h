// The data files compiled into hetsim (topologies/**/*.yaml, models, frameworks, the study report
// script sim/study/study_report.py), by repository-relative path.
#pragma once

#include <string>
#include <vector>

namespace hetsim::config {

struct EmbeddedFile {
  const char* path;  // e.g. "topologies/gpus/a100-sxm4-80gb.yaml"
  const char* text;
};

const std::vector<EmbeddedFile>& embedded_files();

}  // namespace hetsim::config
