// Command-line options of hetsim-calibrate-cuda.
#pragma once

#include <string>
#include <vector>

namespace hetsim::calibrate::cuda {

struct Options {
  std::string out;                 // --out FILE.csv (required unless --dry-run/--print-device-type)
  bool quick = false;              // --quick: a few hundred GEMM points, smaller sweeps
  std::vector<std::string> ops;    // --ops: kinds to run, in the order given by kKinds
  int device = 0;                  // --device N
  double budget_s = 0;             // --budget-s: measurement time limit (0: 240 full, 90 quick)
  bool dry_run = false;            // --dry-run: print the plan for an assumed 8 x H200 node
  bool print_device_type = false;  // --print-device-type: print the profile name and exit
  std::string shapes;  // --shapes FILE: the models' exact shapes (hetsim calibrate shapes)
};

// The kinds in the order they run: short ones first, the GEMM sweep (the one that absorbs a
// budget overrun) last.
inline const std::vector<std::string> kKinds = {"copy", "memory", "collective", "attention",
                                                "gemm"};

// Throws std::invalid_argument with a message for the user; `help` is set for -h/--help.
Options parse_options(int argc, char** argv, bool* help);
const char* usage();

}  // namespace hetsim::calibrate::cuda
