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
  std::string shapes;     // --shapes FILE: the models' exact shapes (hetsim calibrate shapes)
  bool no_cudnn = false;  // --no-cudnn: attention on the unfused path only (a rerun after a crash)
};

// The kinds in the order they run, the most valuable data first: the short copy and memory
// kinds, then the GEMMs (what the cost model needs most), then attention (cuDNN, the likeliest
// to fail on a new machine), convolutions (cuDNN), then collectives. Each kind runs until its
// share of the budget.
inline const std::vector<std::string> kKinds = {"copy",      "memory", "gemm",
                                                "attention", "conv",   "collective"};

// Throws std::invalid_argument with a message for the user; `help` is set for -h/--help.
Options parse_options(int argc, char** argv, bool* help);
const char* usage();

}  // namespace hetsim::calibrate::cuda
