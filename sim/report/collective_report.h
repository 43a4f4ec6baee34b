// The result of one simulated collective, in nccl-tests' terms (time, algbw, busbw), as text
// or JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/network/collective_runner.h"

namespace hetsim::report {

struct CollectiveReport {
  std::string cluster;
  std::string op;
  double bytes = 0;
  size_t ranks = 0;
  size_t nodes = 0;
  std::string algorithm, protocol, expansion;
  int channels = 0;
  double time_s = 0;
  double algbw_Bps = 0;
  double busbw_Bps = 0;
  uint64_t events = 0;
  uint64_t rate_recomputations = 0;
};

CollectiveReport make_collective_report(const platform::Cluster& c,
                                        const network::CollectiveRequest& r,
                                        const network::CollectiveResult& result);
nlohmann::ordered_json to_json(const CollectiveReport& r);
std::string to_text(const CollectiveReport& r);
// An nccl-tests-like table for a sweep of sizes: the header names the run, then a row per size.
std::string sweep_header(const CollectiveReport& first);
std::string sweep_row(const CollectiveReport& r);

}  // namespace hetsim::report
