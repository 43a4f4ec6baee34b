// CSV writer with resume.
#include "csv_log.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hetsim::calibrate::cuda {

namespace {
constexpr int kKeyColumns = 25;
constexpr int kColumns = 29;
constexpr int kColumnsWithoutConv = 19;  // kCsvHeaderWithoutConv's

std::string key_prefix(const std::string& line) {
  std::size_t pos = 0;
  for (int commas = 0; commas < kKeyColumns; ++commas) {
    pos = line.find(',', pos);
    if (pos == std::string::npos) return {};
    ++pos;
  }
  return line.substr(0, pos - 1);
}

// The key columns as has() matches them: an attention row's name column holds the implementation
// that measured it (cudnn or unfused), not part of what was measured, so it is blanked.
std::string resume_key(std::string key) {
  if (key.rfind("attention,", 0) != 0) return key;
  const std::size_t name = key.find(',', key.find(',') + 1) + 1;  // after kind and dtype
  const std::size_t end = key.find(',', name);
  if (end != std::string::npos) key.erase(name, end - name);
  return key;
}

int column_count(const std::string& line) {
  int count = 1;
  for (char c : line) count += c == ',';
  return count;
}

// A CSV of an earlier run under kCsvHeaderWithoutConv in the current layout: its header
// replaced, ten zero conv_* columns after each row's 15th. Other lines as they are.
std::string upgrade_without_conv(const std::string& path, const std::string& text) {
  std::istringstream lines(text);
  std::string line, out;
  bool header_seen = false;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line[0] != '#') {
      if (!header_seen) {
        header_seen = true;
        line = kCsvHeader;
      } else {
        if (column_count(line) != kColumnsWithoutConv)
          throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected " +
                                   std::to_string(kColumnsWithoutConv) + " columns");
        std::size_t pos = 0;
        for (int commas = 0; commas < 15; ++commas) pos = line.find(',', pos) + 1;
        line.insert(pos, "0,0,0,0,0,0,0,0,0,0,");
      }
    }
    out += line + "\n";
  }
  return out;
}
}  // namespace

CsvLog::CsvLog(const std::string& path,
               const std::vector<std::pair<std::string, std::string>>& provenance)
    : path_(path) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream all;
      all << in.rdbuf();
      text = all.str();
    }
  }
  if (!text.empty() && text.back() != '\n') {  // cut a half-written last line
    const std::size_t last = text.rfind('\n');
    text = last == std::string::npos ? std::string() : text.substr(0, last + 1);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error(path + ": cannot rewrite after cutting a partial line");
  }

  std::string device_name;
  for (const auto& [key, value] : provenance)
    if (key == "device_name") device_name = value;

  // An earlier run's file, before the conv_* columns: rewritten in the current layout.
  if (text.find(std::string("\n") + kCsvHeaderWithoutConv + "\n") != std::string::npos ||
      text.rfind(std::string(kCsvHeaderWithoutConv) + "\n", 0) == 0) {
    text = upgrade_without_conv(path, text);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error(path + ": cannot rewrite in the current CSV layout");
  }

  if (!text.empty()) {
    std::istringstream lines(text);
    std::string line;
    int line_no = 0;
    bool header_seen = false;
    while (std::getline(lines, line)) {
      ++line_no;
      if (line.empty()) continue;
      if (line[0] == '#') {
        const std::string tag = "# device_name=";
        if (line.rfind(tag, 0) == 0 && line.substr(tag.size()) != device_name)
          throw std::runtime_error(path + ":" + std::to_string(line_no) + ": written on \"" +
                                   line.substr(tag.size()) + "\", this device is \"" +
                                   device_name + "\"; use another --out file");
        continue;
      }
      if (!header_seen) {
        if (line != kCsvHeader)
          throw std::runtime_error(path + ":" + std::to_string(line_no) +
                                   ": not a hetsim calibration CSV (expected the header " +
                                   kCsvHeader + ")");
        header_seen = true;
        continue;
      }
      if (column_count(line) != kColumns)
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected " +
                                 std::to_string(kColumns) + " columns");
      done_.insert(resume_key(key_prefix(line)));
    }
    resumed_ = done_.size();
  }

  file_ = std::fopen(path.c_str(), "ab");
  if (file_ == nullptr) throw std::runtime_error(path + ": cannot open for appending");
  if (text.empty()) {
    for (const auto& [key, value] : provenance)
      std::fprintf(file_, "# %s=%s\n", key.c_str(), value.c_str());
    std::fprintf(file_, "%s\n", kCsvHeader);
    std::fflush(file_);
  }
}

bool CsvLog::has(const Key& key) const { return done_.count(resume_key(key.csv())) > 0; }

CsvLog::~CsvLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void CsvLog::append(const Key& key, const Stats& stats) {
  const std::string prefix = key.csv();
  char timings[160];
  std::snprintf(timings, sizeof timings, ",%.6e,%.6e,%.6e,%d\n", stats.median_s, stats.p10_s,
                stats.p90_s, stats.repetitions);
  const std::string line = prefix + timings;
  // One write per line, then flush: a kill leaves at worst one partial line, cut on resume.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(path_ + ": write failed");
  done_.insert(resume_key(prefix));
}

}  // namespace hetsim::calibrate::cuda
