// nccl-tests results into the calibration database; see nccl_tests.h.
#include "calibrate/nccl_tests.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::calibrate {

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  if (sep == ' ') {
    std::istringstream in(line);
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
  }
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  return out;
}

bool number(const std::string& s, double* v) {
  const std::optional<double> parsed = config::parse_whole<double>(s);
  if (parsed) *v = *parsed;
  return parsed.has_value();
}

}  // namespace

NcclTestsFile parse_nccl_tests_argument(const std::string& argument) {
  NcclTestsFile f;
  f.path = argument;
  const size_t colon = argument.rfind(':');
  if (colon != std::string::npos && colon + 1 < argument.size()) {
    double r = 0;
    if (number(argument.substr(colon + 1), &r)) {
      if (r < 2 || r != static_cast<double>(static_cast<int64_t>(r))) {
        throw InputError(argument +
                         ": expected FILE:RANKS with RANKS a whole number of at least 2");
      }
      f.path = argument.substr(0, colon);
      f.ranks = static_cast<int64_t>(r);
    }
  }
  return f;
}

void import_nccl_tests(const NcclTestsFile& file, const std::string& op, Database& db) {
  std::ifstream in(file.path);
  if (!in) throw InputError(file.path + ": cannot open the nccl-tests file");
  std::string line;
  int lineno = 0;
  bool csv = false, first = true;
  std::set<int64_t> rank_ids;
  std::set<std::string> hosts;
  std::vector<SizePoint> rows;
  const double time_unit_csv = 1e-9, time_unit_text = 1e-6;  // ns in vTrain's CSV, us in text
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = file.path + ":" + std::to_string(lineno) + ": ";
    std::string lower = line.substr(0, 8);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (first && lower == "size(b),") {
      csv = true;
      first = false;
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    first = false;
    if (!csv && line[0] == '#') {
      // "#  Rank  0 Group  0 Pid  1234 on  host-1 device  0 [0x07] NVIDIA A100-SXM4-80GB"
      const auto w = split(line.substr(1), ' ');
      if (w.size() >= 8 && w[0] == "Rank" && w[6] == "on") {
        double r = 0;
        if (number(w[1], &r)) rank_ids.insert(static_cast<int64_t>(r)), hosts.insert(w[7]);
      }
      continue;
    }
    const auto f = csv ? split(line, ',') : split(line, ' ');
    double bytes = 0, oop = 0, ip = 0;
    // Text: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
    // (all-gather and others print "none" for redop); CSV: size count type time busbw time busbw.
    const size_t t_oop = csv ? 3 : 5, t_ip = csv ? 5 : 9;
    if (f.size() <= t_ip || !number(f[0], &bytes) || !number(f[t_oop], &oop) ||
        !number(f[t_ip], &ip)) {
      if (!csv && !f.empty() && !number(f[0], &bytes)) continue;  // nccl-tests' other lines
      throw InputError(
          where + "expected a result row (size, count, type, " +
          (csv ? std::string("time(ns), busbw, time(ns), busbw")
               : std::string("redop, root, time(us), algbw, busbw, #wrong, time(us)")) +
          ")");
    }
    if (bytes == 0) continue;  // a zero-byte row (-b 0) times only the launch
    if (bytes < 0 || oop <= 0 || ip <= 0) {
      throw InputError(where + "expected positive size and times");
    }
    const double unit = csv ? time_unit_csv : time_unit_text;
    const double a = oop * unit, b = ip * unit;
    rows.push_back(SizePoint{bytes, 0, Timing{(a + b) / 2, std::min(a, b), std::max(a, b), 2}, 0});
  }
  if (rows.empty()) {
    throw InputError(file.path +
                     ": no nccl-tests result rows (expected nccl-tests' text output, or a CSV "
                     "whose header starts \"size(B),count,type,time(ns)\")");
  }
  int64_t ranks = file.ranks;
  if (ranks == 0) ranks = static_cast<int64_t>(rank_ids.size());
  if (ranks < 2) {
    throw InputError(file.path + ": cannot tell how many ranks took part (" +
                     (csv ? std::string("a CSV has no \"# Rank\" lines")
                          : std::string("no \"#  Rank N ... on HOST\" lines")) +
                     "): give it as " + file.path + ":RANKS");
  }
  const int64_t nodes =
      file.nodes > 0 ? file.nodes : std::max<int64_t>(1, static_cast<int64_t>(hosts.size()));
  auto& out = db.collective[op];
  for (SizePoint& p : rows) {
    p.ranks = ranks;
    p.nodes = nodes;
    out.push_back(p);
  }
}

}  // namespace hetsim::calibrate
