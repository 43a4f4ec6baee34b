// nccl-tests figures for a simulated collective; see collective_report.h.
#include "sim/report/collective_report.h"

#include <fmt/format.h>

#include <set>

#include "sim/config/units.h"

namespace hetsim::report {

CollectiveReport make_collective_report(const platform::Cluster& c,
                                        const network::CollectiveRequest& r,
                                        const network::CollectiveResult& result) {
  CollectiveReport rep;
  rep.cluster = c.config().name;
  rep.op = network::to_string(r.op);
  rep.bytes = r.bytes;
  rep.ranks = r.ranks.size();
  std::set<uint32_t> nodes;
  for (platform::GpuId g : r.ranks) nodes.insert(c.gpu(g).node);
  rep.nodes = nodes.size();
  rep.algorithm = network::to_string(result.plan.algorithm);
  rep.protocol = network::to_string(result.plan.protocol);
  rep.expansion = r.expansion == network::Expansion::steady ? "steady" : "stepwise";
  rep.channels = result.plan.channels;
  rep.time_s = result.time.seconds();
  // nccl-tests: algbw = S / t, busbw = algbw * factor [nt-perf].
  rep.algbw_Bps = rep.time_s > 0 ? r.bytes / rep.time_s : 0;
  rep.busbw_Bps = rep.algbw_Bps * network::busbw_factor(r.op, r.ranks.size());
  rep.events = result.events;
  rep.rate_recomputations = result.rate_recomputations;
  return rep;
}

nlohmann::ordered_json to_json(const CollectiveReport& r) {
  nlohmann::ordered_json j;
  j["cluster"] = r.cluster;
  j["op"] = r.op;
  j["bytes"] = r.bytes;
  j["ranks"] = r.ranks;
  j["nodes"] = r.nodes;
  j["algorithm"] = r.algorithm;
  j["protocol"] = r.protocol;
  j["channels"] = r.channels;
  j["expansion"] = r.expansion;
  j["time_s"] = r.time_s;
  j["algbw_Bps"] = r.algbw_Bps;
  j["busbw_Bps"] = r.busbw_Bps;
  j["events"] = r.events;
  j["rate_recomputations"] = r.rate_recomputations;
  return j;
}

std::string to_text(const CollectiveReport& r) {
  return fmt::format(
      "{} of {} over {} GPUs on {} node(s) of {}\n"
      "  algorithm {} / {} protocol, {} channel(s), {} expansion\n"
      "  time   {}\n"
      "  algbw  {:.2f} GB/s\n"
      "  busbw  {:.2f} GB/s   (nccl-tests definitions, GB = 1e9 bytes)\n",
      r.op, config::format_bytes(r.bytes), r.ranks, r.nodes, r.cluster, r.algorithm, r.protocol,
      r.channels, r.expansion, config::format_time(r.time_s), r.algbw_Bps / 1e9, r.busbw_Bps / 1e9);
}

std::string sweep_header(const CollectiveReport& r) {
  return fmt::format(
      "# {} over {} GPUs on {} node(s) of {} ({} expansion)\n"
      "# {:>14} {:>12} {:>7} {:>4} {:>12} {:>10} {:>10}\n",
      r.op, r.ranks, r.nodes, r.cluster, r.expansion, "size(B)", "algorithm", "proto", "ch",
      "time(us)", "algbw", "busbw");
}

std::string sweep_row(const CollectiveReport& r) {
  return fmt::format("  {:>14.0f} {:>12} {:>7} {:>4} {:>12.2f} {:>10.2f} {:>10.2f}\n", r.bytes,
                     r.algorithm, r.protocol, r.channels, r.time_s * 1e6, r.algbw_Bps / 1e9,
                     r.busbw_Bps / 1e9);
}

}  // namespace hetsim::report
