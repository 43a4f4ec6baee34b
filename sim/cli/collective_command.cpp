// `hetsim collective`: one collective, simulated as nccl-tests would measure it.
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/config/limits.h"
#include "sim/config/units.h"
#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/report/collective_report.h"
#include "sim/workload/replay/perturbation.h"

namespace hetsim::cli {

std::vector<uint32_t> parse_ranks(const std::string& text, size_t gpu_count) {
  auto bad = [&](const std::string& why) {
    return InputError("--ranks " + text + ": " + why + " (the cluster has " +
                      std::to_string(gpu_count) + " GPUs, 0 to " + std::to_string(gpu_count - 1) +
                      ")");
  };
  auto number = [&](const std::string& s) -> long {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(s, &used);
    } catch (const std::exception&) {
      throw bad("expected a count or a list such as 0,1,8-15");
    }
    if (used != s.size() || v < 0) throw bad("expected a count or a list such as 0,1,8-15");
    return v;
  };
  std::vector<uint32_t> out;
  if (text.find_first_of(",-") == std::string::npos) {
    const long n = number(text);
    if (n < 1 || static_cast<size_t>(n) > gpu_count) throw bad("count out of range");
    for (long i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(i));
    return out;
  }
  std::vector<bool> seen(gpu_count, false);
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    const long lo = number(item.substr(0, dash));
    const long hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw bad("range " + item + " runs backwards");
    for (long g = lo; g <= hi; ++g) {
      if (static_cast<size_t>(g) >= gpu_count)
        throw bad("GPU " + std::to_string(g) + " does not exist");
      if (seen[g]) throw bad("GPU " + std::to_string(g) + " is listed twice");
      seen[g] = true;
      out.push_back(static_cast<uint32_t>(g));
    }
    pos = comma + 1;
  }
  return out;
}

namespace {

// The sizes of a MIN:MAX sweep by FACTOR, as nccl-tests' -b/-e/-f: whole bytes, each distinct
// (a factor too small to move the rounded size skips the repeats), at most limits::kSweepSizes.
std::vector<double> sweep_sizes(double lo, double hi, double factor) {
  if (!(factor > 1)) throw InputError("--factor must be > 1 for a sweep");
  if (!(std::round(lo) >= 1)) throw InputError("a sweep starts at 1 byte or more");
  // Geometric steps from lo to hi; the count is known before anything is stored.
  const double steps = std::floor(std::log(hi / lo) / std::log(factor) + 1e-9) + 1;
  if (!(steps <= config::limits::kSweepSizes)) {
    throw InputError(fmt::format("the sweep takes {:.0f} steps of x{}; at most {} (raise --factor)",
                                 steps, factor, config::limits::kSweepSizes));
  }
  std::vector<double> sizes;
  for (double s = lo; s <= hi * (1 + 1e-12); s *= factor) {
    const double bytes = std::round(s);
    if (sizes.empty() || bytes > sizes.back()) sizes.push_back(bytes);
  }
  return sizes;
}

struct CollectiveOpts {
  ClusterFlags cluster;
  std::string op = "allreduce";
  std::string bytes = "1GiB";
  std::string ranks;
  std::string algorithm = "auto";
  std::string protocol = "auto";
  std::string expansion = "steady";
  double factor = 2;
  bool json = false;
  std::vector<std::string> perturb;
};

// The sizes --bytes gives: one, or a MIN:MAX sweep by --factor.
std::vector<double> parse_sizes(const CollectiveOpts& o) {
  std::vector<double> sizes;
  try {
    const size_t colon = o.bytes.find(':');
    const double lo = config::parse_quantity(o.bytes.substr(0, colon), config::Dimension::bytes);
    const double hi = colon == std::string::npos ? lo
                                                 : config::parse_quantity(o.bytes.substr(colon + 1),
                                                                          config::Dimension::bytes);
    if (hi < lo) throw InputError("the sweep's end is below its start");
    if (colon == std::string::npos) {
      sizes.push_back(std::round(lo));
    } else {
      sizes = sweep_sizes(lo, hi, o.factor);
    }
  } catch (const InputError& e) {
    throw InputError(std::string("--bytes: ") + e.what());
  }
  return sizes;
}

// --algorithm, --protocol and --expansion into the request.
void parse_choices(const CollectiveOpts& o, network::CollectiveRequest& req) {
  if (o.algorithm != "auto") {
    req.algorithm = network::parse_algorithm(o.algorithm);
    if (!req.algorithm) {
      throw InputError("--algorithm: unknown algorithm \"" + o.algorithm +
                       "\" (expected auto, ring, tree, hierarchical or direct)");
    }
  }
  if (o.protocol != "auto") {
    req.protocol = network::parse_protocol(o.protocol);
    if (!req.protocol) {
      throw InputError("--protocol: unknown protocol \"" + o.protocol +
                       "\" (expected auto, LL, LL128 or Simple)");
    }
  }
  if (o.expansion == "steady") {
    req.expansion = network::Expansion::steady;
  } else if (o.expansion == "stepwise") {
    req.expansion = network::Expansion::stepwise;
  } else {
    throw InputError("--expansion: expected steady or stepwise, got \"" + o.expansion + "\"");
  }
}

// The cluster with --perturb's link what-ifs applied (the only what-ifs a collective takes).
platform::Cluster perturbed_cluster(const CollectiveOpts& o) {
  platform::Cluster cluster(config::load_cluster(o.cluster.cluster, o.cluster.options()));
  workload::Perturbations what_if;
  for (const std::string& p : o.perturb) what_if.merge(workload::parse_perturbation(p));
  if (!what_if.slow.empty() || what_if.stragglers || what_if.lost) {
    throw InputError(
        "--perturb: a collective takes link what-ifs only (slow GPUs and stragglers change "
        "kernels, and a collective has none; a lost node ends a training step)");
  }
  const workload::ResolvedPerturbations resolved =
      workload::resolve_perturbations(what_if, cluster);
  workload::scale_links(resolved, cluster);
  for (const std::string& d : resolved.description) std::cerr << "what-if: " << d << "\n";
  return cluster;
}

// One collective, or a sweep of its sizes, as the options give it: a table or JSON.
int run_collective(const CollectiveOpts& o) {
  const auto op = network::parse_op(o.op);
  if (!op) {
    throw InputError("--op: unknown collective \"" + o.op +
                     "\" (expected allreduce, allgather, reducescatter, alltoall, broadcast "
                     "or sendrecv)");
  }
  network::CollectiveRequest req;
  req.op = *op;
  const std::vector<double> sizes = parse_sizes(o);
  parse_choices(o, req);
  platform::Cluster cluster = perturbed_cluster(o);
  if (o.ranks.empty()) {
    for (platform::GpuId g = 0; g < cluster.gpu_count(); ++g) req.ranks.push_back(g);
  } else {
    req.ranks = parse_ranks(o.ranks, cluster.gpu_count());
  }
  if (req.op == network::Op::sendrecv && req.ranks.size() < 2) {
    throw InputError("--ranks: sendrecv needs at least two ranks");
  }
  std::vector<report::CollectiveReport> reports;
  for (double s : sizes) {
    req.bytes = s;
    const network::CollectiveResult result = network::simulate_collective(cluster, req);
    reports.push_back(report::make_collective_report(cluster, req, result));
    if (!o.json && sizes.size() > 1) {
      if (reports.size() == 1) std::cout << report::sweep_header(reports.front());
      std::cout << report::sweep_row(reports.back()) << std::flush;
    }
  }
  if (o.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : reports) out.push_back(report::to_json(r));
    std::cout << (sizes.size() == 1 ? out[0] : out).dump(2) << "\n";
  } else if (sizes.size() == 1) {
    std::cout << report::to_text(reports.front());
  }
  return 0;
}

}  // namespace

void add_collective_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<CollectiveOpts>();
  CLI::App* cmd = app.add_subcommand(
      "collective",
      "Simulate one collective on a cluster; prints time, algbw and busbw as nccl-tests defines "
      "them");
  o->cluster.add_to(*cmd, "dgx-a100");
  cmd->add_option("--op", o->op,
                  "allreduce | allgather | reducescatter | alltoall | broadcast | sendrecv")
      ->capture_default_str();
  cmd->add_option("--bytes", o->bytes,
                  "Size as nccl-tests counts it (per rank; the total for allgather and "
                  "reducescatter), e.g. 1GiB, 64MB, 1048576; or a sweep MIN:MAX, as nccl-tests' "
                  "-b/-e, multiplied by --factor")
      ->capture_default_str();
  cmd->add_option("--factor", o->factor, "Size multiplier between the sizes of a MIN:MAX sweep")
      ->capture_default_str();
  cmd->add_option("--ranks", o->ranks,
                  "A GPU count N (the first N GPUs) or a list: 0,1,8-15; default all");
  cmd->add_option("--algorithm", o->algorithm, "auto | ring | tree | hierarchical | direct")
      ->capture_default_str();
  cmd->add_option("--protocol", o->protocol, "auto | LL | LL128 | Simple")->capture_default_str();
  cmd->add_option("--expansion", o->expansion,
                  "steady (one flow per ring; an all-to-all, one per class of alike rank pairs) "
                  "| stepwise (one flow per step and rank; per rank pair)")
      ->capture_default_str();
  cmd->add_option("--perturb", o->perturb,
                  "What-if on the links, as simulate's (repeatable): e.g. 'link: {link: "
                  "\"node0.nic15<->unit0.rail0\", factor: 0}' (a NIC cable down)");
  cmd->add_flag("--json", o->json, "Print JSON (keys time_s, algbw_Bps, busbw_Bps, ...)");
  cmd->callback([o, &action] { action = [o] { return run_collective(*o); }; });
}

}  // namespace hetsim::cli
