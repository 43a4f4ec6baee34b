// Command-line parsing.
#include "options.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace hetsim::calibrate::cuda {

const char* usage() {
  return "usage: hetsim-calibrate-cuda --out FILE.csv [--quick] [--ops "
         "gemm,attention,conv,memory,collective,copy]\n"
         "                             [--shapes FILE.csv] [--device N] [--budget-s SECONDS] "
         "[--dry-run]\n"
         "                             [--no-cudnn] [--print-device-type]\n"
         "Measures GEMMs (cuBLASLt), attention, convolutions (cuDNN), memory-bound kernels, NCCL "
         "collectives and host-device\n"
         "copies on this node and appends one CSV line per measurement to FILE.csv (resuming it if "
         "it\n"
         "exists). --shapes adds the exact GEMM and attention shapes of models "
         "(calibrate/model_shapes.csv,\n"
         "written by `hetsim calibrate shapes`). --dry-run prints the plan for an assumed node of "
         "8 H200\n"
         "without touching a GPU; with --out it also writes the planned points, times being the\n"
         "planner's estimates (marked \"# dry_run=\": hetsim refuses to import them). --no-cudnn\n"
         "measures attention on the unfused path only and no convolutions (run_gpu.sh's rerun "
         "after a crash in cuDNN).\n";
}

namespace {
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) parts.push_back(part);
  return parts;
}
// The whole of `text` read by `parse` (std::stoi, std::stod), or nullopt.
template <typename T, typename Parse>
std::optional<T> parse_all(const std::string& text, Parse parse) {
  std::size_t used = 0;
  try {
    const T v = parse(text, &used);
    if (used == text.size()) return v;
  } catch (const std::logic_error&) {
  }
  return std::nullopt;
}
}  // namespace

Options parse_options(int argc, char** argv, bool* help) {
  Options o;
  *help = false;
  std::vector<std::string> ops = kKinds;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": missing value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      *help = true;
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--ops") {
      ops = split_commas(value());
      for (const std::string& op : ops)
        if (std::find(kKinds.begin(), kKinds.end(), op) == kKinds.end())
          throw std::invalid_argument("--ops: unknown kind \"" + op +
                                      "\" (expected copy, memory, gemm, attention, conv, "
                                      "collective)");
    } else if (arg == "--device") {
      const std::string v = value();
      const auto d =
          parse_all<int>(v, [](const std::string& t, std::size_t* u) { return std::stoi(t, u); });
      if (!d || *d < 0) throw std::invalid_argument("--device: not a device index: " + v);
      o.device = *d;
    } else if (arg == "--budget-s") {
      const std::string v = value();
      const auto b = parse_all<double>(
          v, [](const std::string& t, std::size_t* u) { return std::stod(t, u); });
      if (!b || !(*b > 0)) throw std::invalid_argument("--budget-s: not a positive number: " + v);
      o.budget_s = *b;
    } else if (arg == "--shapes") {
      o.shapes = value();
    } else if (arg == "--dry-run") {
      o.dry_run = true;
    } else if (arg == "--no-cudnn") {
      o.no_cudnn = true;
    } else if (arg == "--print-device-type") {
      o.print_device_type = true;
    } else {
      throw std::invalid_argument("unknown option \"" + arg + "\"");
    }
  }
  for (const std::string& kind : kKinds)  // run order is kKinds', whatever order --ops gave
    if (std::find(ops.begin(), ops.end(), kind) != ops.end()) o.ops.push_back(kind);
  if (o.budget_s == 0) o.budget_s = o.quick ? 90 : 240;
  if (o.out.empty() && !o.dry_run && !o.print_device_type && !*help)
    throw std::invalid_argument("--out FILE.csv is required");
  return o;
}

}  // namespace hetsim::calibrate::cuda
