// Reading, resolving and applying what-ifs; see perturbation.h.
#include "sim/workload/perturbation.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "sim/config/yaml_util.h"
#include "sim/core/error.h"
#include "sim/core/hash.h"

namespace hetsim::workload {

using config::join_path;
using config::where;

namespace {

// A number read by `config::get_number`, then held to a range the message states.
double get_factor(const std::string& file, const YAML::Node& map, const std::string& path,
                  const std::string& key, double min, bool min_inclusive, const std::string& what,
                  std::optional<double> default_value = std::nullopt) {
  const double v = config::get_number(file, map, path, key, default_value);
  if (v < min || (!min_inclusive && v == min)) {
    throw InputError(fmt::format("{}: {}: expected {} {} {} ({}), got {}",
                                 where(file, map[key] ? map[key] : map), join_path(path, key),
                                 key == "probability" ? "a probability" : "a factor",
                                 min_inclusive ? ">=" : ">", min, what, v));
  }
  return v;
}

// A map, or a list of maps, under `key`: each handed to `read` with its path.
template <typename F>
void each_entry(const std::string& file, const YAML::Node& map, const std::string& path,
                const std::string& key, F read) {
  const YAML::Node n = map[key];
  if (!n) return;
  const std::string field = join_path(path, key);
  if (n.IsMap()) return read(n, field);
  if (!n.IsSequence()) {
    throw InputError(where(file, n) + ": " + field + ": expected a map or a list of maps");
  }
  for (size_t i = 0; i < n.size(); ++i) read(n[i], fmt::format("{}[{}]", field, i));
}

// [0, 1) from the top 53 bits: exact on every platform.
double unit(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

std::string Perturbations::canonical() const {
  std::vector<std::string> parts;
  for (const SlowDevice& s : slow) {
    parts.push_back("slow " + s.gpu + " x" + number(s.factor) +
                    (s.after_s ? " after " + number(*s.after_s) + " s" : ""));
  }
  for (const SlowLink& l : links) parts.push_back("link " + l.link + " x" + number(l.factor));
  if (stragglers) {
    const Stragglers& s = *stragglers;
    parts.push_back(fmt::format("stragglers seed={} probability={} factor={}..{}", s.seed,
                                number(s.probability), number(s.min), number(s.max)));
  }
  if (lost) {
    parts.push_back(fmt::format("lost node {} at {} s detect {} s restart {} s {}", lost->node,
                                number(lost->at_s), number(lost->detect_s), number(lost->restart_s),
                                lost->spare ? "spare" : "shrink"));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

void Perturbations::merge(const Perturbations& o) {
  slow.insert(slow.end(), o.slow.begin(), o.slow.end());
  links.insert(links.end(), o.links.begin(), o.links.end());
  if (o.stragglers) stragglers = o.stragglers;
  if (o.lost) lost = o.lost;
}

void read_perturbations(const std::string& file, const YAML::Node& map, const std::string& path,
                        const std::vector<std::string>& extra, Perturbations& out) {
  std::vector<std::string> keys = {"slow", "link", "stragglers", "lost"};
  keys.insert(keys.end(), extra.begin(), extra.end());
  config::check_keys(file, map, path, keys);
  each_entry(file, map, path, "slow", [&](const YAML::Node& e, const std::string& p) {
    config::check_keys(file, e, p, {"gpu", "factor", "after"});
    SlowDevice s;
    s.gpu = config::get_string(file, e, p, "gpu");
    s.factor = get_factor(file, e, p, "factor", 1, true, "how many times longer its kernels take");
    if (e["after"]) {
      const double a = config::get_number(file, e, p, "after");
      if (!(a >= 0) || !std::isfinite(a) || a > 1e6) {
        throw InputError(fmt::format(
            "{}: {}.after: expected the seconds into the iteration when it starts, 0 to 1e6, "
            "got {}",
            config::where(file, e["after"]), p, a));
      }
      s.after_s = a;
    }
    out.slow.push_back(std::move(s));
  });
  each_entry(file, map, path, "link", [&](const YAML::Node& e, const std::string& p) {
    config::check_keys(file, e, p, {"link", "factor"});
    SlowLink l;
    l.link = config::get_string(file, e, p, "link");
    l.factor = get_factor(file, e, p, "factor", 0, true,
                          "the share of its capacity the link keeps; 0: the link is down and "
                          "routes go around it");
    out.links.push_back(std::move(l));
  });
  if (map["stragglers"]) {
    const YAML::Node e = map["stragglers"];
    const std::string p = join_path(path, "stragglers");
    config::check_keys(file, e, p, {"seed", "probability", "min", "max"});
    Stragglers s;
    s.seed = static_cast<uint64_t>(config::get_int(file, e, p, "seed", 0, LONG_MAX));
    s.probability = get_factor(file, e, p, "probability", 0, true, "from 0 to 1", 1.0);
    if (s.probability > 1) {
      throw InputError(fmt::format("{}: {}: expected a probability from 0 to 1, got {}",
                                   where(file, e["probability"]), join_path(p, "probability"),
                                   s.probability));
    }
    s.min = get_factor(file, e, p, "min", 1, true, "the smallest slowdown drawn", 1.0);
    s.max = get_factor(file, e, p, "max", 1, true, "the largest slowdown drawn");
    if (s.max < s.min) {
      throw InputError(fmt::format("{}: {}: expected a factor >= min ({}), got {}",
                                   where(file, e["max"]), join_path(p, "max"), s.min, s.max));
    }
    out.stragglers = s;
  }
  if (map["lost"]) {
    const YAML::Node e = map["lost"];
    const std::string p = join_path(path, "lost");
    if (!e.IsMap()) {
      throw InputError(where(file, e) + ": " + p +
                       ": expected a map such as {node: 3, at: 0.5, detect: 600, restart: 120, "
                       "replace: shrink}");
    }
    config::check_keys(file, e, p, {"node", "at", "detect", "restart", "replace"});
    LostNode l;
    l.node = config::get_string(file, e, p, "node");
    auto seconds = [&](const std::string& key, std::optional<double> dflt, const char* what) {
      const double v = config::get_number(file, e, p, key, dflt);
      if (!(v >= 0) || !std::isfinite(v) || v > 1e7) {
        throw InputError(fmt::format("{}: {}: expected {}, 0 to 1e7 seconds, got {}",
                                     where(file, e[key] ? e[key] : e), join_path(p, key), what, v));
      }
      return v;
    };
    l.at_s = seconds("at", std::nullopt, "the seconds into the iteration when the node is lost");
    l.detect_s = seconds("detect", 600.0, "how long the others wait before the failure is seen");
    l.restart_s = seconds("restart", 0.0, "the seconds a relaunch takes");
    l.spare = config::get_choice(file, e, p, "replace", {"shrink", "spare"}, "shrink") == 1;
    out.lost = l;
  }
}

Perturbations parse_perturbation(const std::string& text) {
  const std::string file = "--perturb";
  const YAML::Node root = config::load_yaml(text, file);
  if (!root.IsMap()) {
    throw InputError(file + " \"" + text +
                     "\": expected a map such as \"slow: {gpu: 3, factor: 2}\", \"link: {link: "
                     "node0.nic8->leaf0, factor: 0.5}\" or \"stragglers: {seed: 1, max: 2}\"");
  }
  Perturbations p;
  read_perturbations(file, root, "", {}, p);
  return p;
}

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
  if (p.stragglers) {
    const Stragglers& s = *p.stragglers;
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
  if (std::any_of(factor.begin(), factor.end(), [](double f) { return f != 1; })) {
    r.compute_factor = std::move(factor);
  }
  if (p.lost) {
    const LostNode& l = *p.lost;
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
    r.description.push_back(
        fmt::format("node{} lost {} s into the iteration: seen after {} s, relaunched in {} s {}",
                    *id, l.at_s, l.detect_s, l.restart_s,
                    l.spare ? "on a spare node"
                            : "on the survivors (replicas with a GPU of the node dropped)"));
  }
  if (!p.links.empty()) {
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
          throw InputError(fmt::format(
              "perturbation link: no link \"{}\" in {} (expected FROM->TO or A<->B; {})", name,
              where_c, hint));
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
  for (Group& g : job.groups) {
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
  for (Group& g : job.groups) {
    for (const auto& [gpu, from, factor] : r.timed) {
      if (std::find(g.devices.begin(), g.devices.end(), gpu) != g.devices.end())
        g.slow_from.emplace_back(from, factor);
    }
    std::sort(g.slow_from.begin(), g.slow_from.end());
  }
}

}  // namespace hetsim::workload
