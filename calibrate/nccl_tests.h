// Measured collectives from nccl-tests into the calibration database: nccl-tests' own text output
// (`all_reduce_perf -b 1M -e 1G -f 2 -g 8 > out.txt`) or the CSV form vTrain publishes
// (shared/reference/ground_truth/vtrain: "Size(B),count,type,time(ns),busbw(GB/s),time(ns),...").
// Each row gives the out-of-place and in-place times, each an average over nccl-tests'
// iterations: the median stored is their mean, p10 and p90 the smaller and the larger, and
// repetitions 2 (calibrate/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibrate/database.h"

namespace hetsim::calibrate {

struct NcclTestsFile {
  std::string path;
  int64_t ranks = 0;  // 0: from the file's "#  Rank" lines (text output); required for CSV
  int64_t nodes = 0;  // 0: the distinct hosts of those lines, else 1
};

// "FILE" or "FILE:RANKS" (a CSV has no rank lines), as the command line takes them.
NcclTestsFile parse_nccl_tests_argument(const std::string& argument);

// Adds every row of `file` to db.collective[op]. Throws InputError naming the file, the line and
// what was expected.
void import_nccl_tests(const NcclTestsFile& file, const std::string& op, Database& db);

}  // namespace hetsim::calibrate
