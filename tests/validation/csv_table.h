// The ground-truth tables' CSV, as the validation tests read it: blank lines and lines starting
// with '#' skipped, the first other line the header, each later line a row of comma-separated
// fields; a field in double quotes may hold the separator ("" inside it is one quote).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetsim::validation {

inline std::vector<std::string> split_fields(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::string item;
  bool quoted = false, any = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < s.size() && s[i + 1] == '"') {
        item += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        item += c;
      }
    } else if (c == '"' && item.empty()) {
      quoted = true;
    } else if (c == sep) {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  // As std::getline splits: a trailing separator ends the last field without starting another.
  if (any && !(s.back() == sep && !quoted)) out.push_back(item);
  return out;
}

// Every data row of `file`, each with at least `fields` fields (exactly, where `exact`); a file
// that cannot be read or a row that is short (or long) throws, naming the file and the row.
inline std::vector<std::vector<std::string>> read_csv_rows(const std::filesystem::path& file,
                                                           size_t fields, bool exact = true) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read");
  std::vector<std::vector<std::string>> rows;
  bool header = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      header = true;
      continue;
    }
    std::vector<std::string> f = split_fields(line);
    if (f.size() < fields || (exact && f.size() != fields))
      throw std::runtime_error(file.string() + ": expected " + std::to_string(fields) +
                               " fields: " + line);
    rows.push_back(std::move(f));
  }
  return rows;
}

}  // namespace hetsim::validation
