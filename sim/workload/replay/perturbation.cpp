// Resolving and applying what-ifs; see perturbation.h (what_if.cpp reads them).
#include "sim/workload/replay/perturbation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/core/hash.h"

namespace hetsim::workload {

namespace {

// [0, 1) from the top 53 bits: exact on every platform.
double unit(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

// The GPUs `slow` names, their factors multiplied into `factor` (or, from a time on, kept as
// timed slowdowns).
void resolve_slow(const Perturbations& p, const platform::Cluster& cluster,
                  const std::string& where_c, std::vector<double>& factor,
                  ResolvedPerturbations& r) {
  const size_t n = cluster.gpu_count();
  for (const SlowDevice& s : p.slow) {
    std::optional<platform::GpuId> id;
    if (const auto i = config::parse_whole<long>(s.gpu)) {
      if (*i >= 0 && static_cast<size_t>(*i) < n) id = static_cast<platform::GpuId>(*i);
    } else {
      for (platform::GpuId g = 0; g < n && !id; ++g) {
        if (cluster.gpu_name(g) == s.gpu) id = g;
      }
    }
    if (!id) {
      throw InputError(fmt::format(
          "perturbation slow.gpu: no GPU \"{}\" in {} ({} GPUs: an index from 0 to {}, or a name "
          "from {} to {})",
          s.gpu, where_c, n, n - 1, cluster.gpu_name(0),
          cluster.gpu_name(static_cast<platform::GpuId>(n - 1))));
    }
    if (s.after_s) {
      r.timed.emplace_back(*id, Time::from_seconds(*s.after_s), s.factor);
      r.description.push_back(fmt::format("{} (GPU {}) computes {}x slower from {} s on",
                                          cluster.gpu_name(*id), *id, s.factor, *s.after_s));
      continue;
    }
    factor[*id] *= s.factor;
    r.description.push_back(
        fmt::format("{} (GPU {}) computes {}x slower", cluster.gpu_name(*id), *id, s.factor));
  }
}

// Seeded stragglers: each GPU's factor multiplied into `factor`, the first few listed.
void resolve_stragglers(const Stragglers& s, const platform::Cluster& cluster,
                        std::vector<double>& factor, ResolvedPerturbations& r) {
  const size_t n = cluster.gpu_count();
  std::string list;
  size_t count = 0;
  constexpr size_t kListed = 8;
  for (platform::GpuId g = 0; g < n; ++g) {
    const double f = straggler_factor(s, g);
    if (f == 1) continue;
    factor[g] *= f;
    if (count++ < kListed) list += fmt::format(", {} x{:.3f}", cluster.gpu_name(g), f);
  }
  if (count > kListed) list += fmt::format(", ... ({} more)", count - kListed);
  r.description.push_back(
      fmt::format("stragglers (seed {}, probability {}, factor {} to {}): {} of {} GPUs slower{}",
                  s.seed, s.probability, s.min, s.max, count, n, list));
}

// The lost node, by index or by name.
void resolve_lost(const LostNode& l, const platform::Cluster& cluster, const std::string& where_c,
                  ResolvedPerturbations& r) {
  const size_t nodes = cluster.node_count();
  // An index, or the name Cluster::gpu_name gives the node ("node3").
  const std::string index = l.node.rfind("node", 0) == 0 ? l.node.substr(4) : l.node;
  std::optional<uint32_t> id;
  if (const auto i = config::parse_whole<long>(index)) {
    if (*i >= 0 && static_cast<size_t>(*i) < nodes) id = static_cast<uint32_t>(*i);
  }
  if (!id) {
    throw InputError(fmt::format(
        "perturbation lost.node: no node \"{}\" in {} ({} nodes: an index from 0 to {}, or a "
        "name from node0 to node{})",
        l.node, where_c, nodes, nodes - 1, nodes - 1));
  }
  r.lost = ResolvedPerturbations::Loss{*id, l.at_s, l.detect_s, l.restart_s, l.spare};
  r.description.push_back(fmt::format(
      "node{} lost {} s into the iteration: seen after {} s, relaunched in {} s {}", *id, l.at_s,
      l.detect_s, l.restart_s,
      l.spare ? "on a spare node" : "on the survivors (replicas with a GPU of the node dropped)"));
}

// The slowed or failed links by name (FROM->TO, or A<->B for both directions).
void resolve_links(const Perturbations& p, const platform::Cluster& cluster,
                   const std::string& where_c, ResolvedPerturbations& r) {
  std::map<std::string, std::vector<platform::LinkId>> by_name;
  for (platform::LinkId l = 0; l < cluster.links().size(); ++l) {
    by_name[cluster.link_name(l)].push_back(l);
  }
  for (const SlowLink& s : p.links) {
    std::vector<std::string> names;
    const size_t both = s.link.find("<->");
    if (both != std::string::npos) {
      const std::string a = s.link.substr(0, both), b = s.link.substr(both + 3);
      names = {a + "->" + b, b + "->" + a};
    } else {
      names = {s.link};
    }
    for (const std::string& name : names) {
      const auto it = by_name.find(name);
      if (it == by_name.end()) {
        // The links that leave the same vertex, so that the user sees how names are spelt.
        const std::string from = name.substr(0, name.find("->"));
        std::vector<std::string> near;
        for (const auto& [k, ids] : by_name) {
          if (k.rfind(from + "->", 0) == 0 && near.size() < 12) near.push_back(k);
        }
        if (near.empty()) {
          for (const auto& [k, ids] : by_name) {
            if (near.size() < 6) near.push_back(k);
          }
        }
        std::string hint = "it has no links";
        if (!near.empty()) {
          hint = (near.front().rfind(from + "->", 0) == 0 ? "links from " + from : "e.g.") +
                 std::string(": ") + config::join_names(near);
        }
        throw InputError(
            fmt::format("perturbation link: no link \"{}\" in {} (expected FROM->TO or A<->B; {})",
                        name, where_c, hint));
      }
      for (platform::LinkId l : it->second) r.links.emplace_back(l, s.factor);
      const std::string count =
          it->second.size() > 1 ? fmt::format(" ({} links)", it->second.size()) : std::string();
      r.description.push_back(
          s.factor == 0
              ? fmt::format("link {} is down, routes go around it{}", name, count)
              : fmt::format("link {} carries {} of its capacity{}", name, s.factor, count));
    }
  }
}

}  // namespace

double straggler_factor(const Stragglers& s, uint64_t gpu) {
  const uint64_t base = splitmix64(s.seed);
  if (!(unit(splitmix64(base ^ (2 * gpu))) < s.probability)) return 1;
  return s.min + (s.max - s.min) * unit(splitmix64(base ^ (2 * gpu + 1)));
}

ResolvedPerturbations resolve_perturbations(const Perturbations& p,
                                            const platform::Cluster& cluster) {
  ResolvedPerturbations r;
  const size_t n = cluster.gpu_count();
  const std::string where_c = "cluster " + cluster.config().name;
  std::vector<double> factor(n, 1.0);
  resolve_slow(p, cluster, where_c, factor, r);
  if (p.stragglers) resolve_stragglers(*p.stragglers, cluster, factor, r);
  if (std::any_of(factor.begin(), factor.end(), [](double f) { return f != 1; })) {
    r.compute_factor = std::move(factor);
  }
  if (p.lost) resolve_lost(*p.lost, cluster, where_c, r);
  if (!p.links.empty()) resolve_links(p, cluster, where_c, r);
  return r;
}

void scale_links(const ResolvedPerturbations& r, platform::Cluster& cluster) {
  for (const auto& [link, factor] : r.links) {
    if (factor == 0) {
      cluster.fail_link(link);
    } else {
      cluster.scale_link_capacity(link, factor);
    }
  }
}

void slow_down(TrainingJob& job, const std::vector<double>& compute_factor) {
  if (compute_factor.empty()) return;
  for (StageCopy& g : job.copies) {
    double f = 1;
    for (platform::GpuId d : g.devices) f = std::max(f, compute_factor.at(d));
    if (f == 1) continue;
    for (Segment& seg : g.segments.write()) {
      if (seg.ops.empty()) continue;  // framework host time
      Time kernels, scaled;
      for (auto& [op, d] : seg.ops) {
        kernels += d;
        d = Time::from_seconds(d.seconds() * f);
        scaled += d;
      }
      // A segment longer than its kernels was bound by host issue time, which stays.
      const Time host = seg.duration > kernels ? seg.duration : Time();
      seg.duration = std::max(scaled, host);
    }
  }
}

void slow_down_from(TrainingJob& job, const ResolvedPerturbations& r) {
  for (StageCopy& g : job.copies) {
    for (const auto& [gpu, from, factor] : r.timed) {
      if (std::find(g.devices.begin(), g.devices.end(), gpu) != g.devices.end())
        g.slow_from.emplace_back(from, factor);
    }
    std::sort(g.slow_from.begin(), g.slow_from.end());
  }
}

}  // namespace hetsim::workload
