// Reading what-ifs; see what_if.h (replay/perturbation.h resolves and applies them).
#include "sim/workload/plan/what_if.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>

#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

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

}  // namespace hetsim::workload
