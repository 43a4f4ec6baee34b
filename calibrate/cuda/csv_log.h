// The CSV the program writes (calibrate/README.md "CSV interchange"): provenance lines, the
// header, then one line per measurement, flushed as it is taken so an interrupted run keeps its
// data. Opening an existing file resumes it: its measured keys are skipped (an attention key
// whatever its name column, the implementation that measured it). A file of an earlier run,
// before the conv_* columns, is first rewritten in the current layout.
#pragma once

#include <cstdio>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "measurement.h"

namespace hetsim::calibrate::cuda {

class CsvLog {
 public:
  // Opens `path`. A new (or empty) file gets the `# key=value` lines and the header. An existing
  // file must carry the same header and the same device_name (else std::runtime_error); a
  // partial last line (a run killed mid-write) is cut off.
  CsvLog(const std::string& path,
         const std::vector<std::pair<std::string, std::string>>& provenance);
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;

  bool has(const Key& key) const;
  std::size_t resumed_count() const { return resumed_; }
  void append(const Key& key, const Stats& stats);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::unordered_set<std::string> done_;  // resume keys (see resume_key in csv_log.cu)
  std::size_t resumed_ = 0;
};

}  // namespace hetsim::calibrate::cuda
