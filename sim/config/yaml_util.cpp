// Strict YAML field readers with file:line errors, key checking with "did you mean", and
// --set overrides.
#include "sim/config/yaml_util.h"

#include <sstream>

#include <filesystem>
#include <fstream>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "sim/core/error.h"

namespace hetsim::config {
namespace {

// "file:line: path: " (no "path: " for the document root).
std::string prefix(const std::string& file, const YAML::Node& node, std::string_view path) {
  return where(file, node) + ": " + (path.empty() ? "" : std::string(path) + ": ");
}

std::string kind_of(const YAML::Node& n) {
  return n.IsMap() ? "a map" : n.IsSequence() ? "a list" : n.IsNull() ? "null" : "a scalar";
}

// node[key], or nullopt when the key is absent or null. Throws unless node is a map.
std::optional<YAML::Node> lookup(const std::string& file, const YAML::Node& node,
                                 std::string_view path, std::string_view key) {
  if (!node.IsMap()) throw InputError(prefix(file, node, path) + "expected a map");
  YAML::Node value = node[std::string(key)];
  if (!value.IsDefined() || value.IsNull()) return std::nullopt;
  return value;
}

// The scalar text of a present value; `expected` names what a non-scalar should have been.
std::string scalar_of(const std::string& file, const YAML::Node& value, const std::string& field,
                      std::string_view expected) {
  if (!value.IsScalar()) {
    throw InputError(where(file, value) + ": " + field + ": expected " + std::string(expected) +
                     ", got " + kind_of(value));
  }
  return value.Scalar();
}

// A required field that is absent, or present with no value ("key:" alone, or null).
std::string missing(const std::string& file, const YAML::Node& node, const std::string& field,
                    std::string_view key, std::string_view expected) {
  if (node.IsMap()) {
    // The key's own line: yaml-cpp marks an empty value at the start of the next line.
    const auto entry = std::find_if(node.begin(), node.end(), [&](const auto& kv) {
      return kv.first.IsScalar() && kv.first.Scalar() == key;
    });
    if (entry != node.end()) {
      return where(file, entry->first) + ": " + field + ": no value given" +
             (expected.empty() ? "" : " (expected " + std::string(expected) + ")");
    }
  }
  return where(file, node) + ": " + field + ": missing required field" +
         (expected.empty() ? "" : " (" + std::string(expected) + ")");
}

// A deep copy built in code: its nodes carry no file position (a --set value is not on any line
// of the file, and Clone() would stamp line 1 on it).
YAML::Node unmarked(const YAML::Node& n) {
  YAML::Node out;
  if (n.IsScalar()) {
    out = YAML::Node(n.Scalar());
  } else if (n.IsSequence()) {
    out = YAML::Node(YAML::NodeType::Sequence);
    for (const YAML::Node& e : n) out.push_back(unmarked(e));
  } else if (n.IsMap()) {
    out = YAML::Node(YAML::NodeType::Map);
    for (const auto& kv : n) out[unmarked(kv.first)] = unmarked(kv.second);
  } else {
    out = YAML::Node(YAML::NodeType::Null);
  }
  out.SetStyle(n.Style());
  return out;
}

// One step of a --set path: a map key, or a list index when `key` is empty.
struct Step {
  std::string key;
  size_t index = 0;
};

// keys separated by dots, each followed by any number of [i]: "node_types[0].nics.bandwidth".
std::optional<std::vector<Step>> parse_path(std::string_view path) {
  std::vector<Step> steps;
  size_t i = 0;
  while (true) {
    const size_t end = path.find_first_of(".[]", i);
    const std::string_view key = path.substr(i, end - i);
    if (key.empty()) return std::nullopt;
    steps.push_back({std::string(key), 0});
    i = end;
    while (i < path.size() && path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string_view::npos) return std::nullopt;
      const auto index = parse_whole<size_t>(std::string(path.substr(i + 1, close - i - 1)));
      if (!index) return std::nullopt;
      steps.push_back({"", *index});
      i = close + 1;
    }
    if (i == path.size() || i == std::string_view::npos) return steps;
    if (path[i] != '.') return std::nullopt;
    ++i;
  }
}

}  // namespace

template <typename T>
std::optional<T> parse_whole(const std::string& s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}
template std::optional<long> parse_whole<long>(const std::string&);
template std::optional<long long> parse_whole<long long>(const std::string&);
template std::optional<unsigned long> parse_whole<unsigned long>(const std::string&);
template std::optional<double> parse_whole<double>(const std::string&);

std::string where(const std::string& file, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return file;
  return file + ":" + std::to_string(mark.line + 1);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);  // row[j]: distance between a[0..i) and b[0..j)
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view key, const std::vector<std::string>& valid) {
  const std::string* best = nullptr;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (const std::string& v : valid) {
    const size_t d = edit_distance(key, v);
    if (d < best_distance) {
      best = &v;
      best_distance = d;
    }
  }
  return best ? " (did you mean \"" + *best + "\"?)" : "";
}

void check_keys(const std::string& file, const YAML::Node& map, std::string_view path,
                const std::vector<std::string>& allowed) {
  if (!map.IsMap()) throw InputError(prefix(file, map, path) + "expected a map");
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      throw InputError(where(file, kv.first) + ": " + join_path(path, key) + ": unknown key" +
                       did_you_mean(key, allowed));
    }
  }
}

std::string read_text_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": is a directory, expected a " + std::string(what));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open " + std::string(what));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

YAML::Node load_yaml(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(file + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

size_t get_choice(const std::string& file, const YAML::Node& node, std::string_view path,
                  std::string_view key, const std::vector<std::string>& choices,
                  std::optional<std::string> default_value) {
  const std::string v = get_string(file, node, path, key, default_value);
  const auto it = std::find(choices.begin(), choices.end(), v);
  if (it == choices.end()) {
    throw InputError(where(file, node[std::string(key)]) + ": " + join_path(path, key) +
                     ": unknown value \"" + v + "\" (expected one of " + join_names(choices) + ")" +
                     did_you_mean(v, choices));
  }
  return static_cast<size_t>(it - choices.begin());
}

std::string join_path(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

YAML::Node require(const std::string& file, const YAML::Node& node, std::string_view path,
                   std::string_view key) {
  std::optional<YAML::Node> value = lookup(file, node, path, key);
  if (!value) throw InputError(missing(file, node, join_path(path, key), key, ""));
  return *value;
}

double get_quantity(const std::string& file, const YAML::Node& node, std::string_view path,
                    std::string_view key, Dimension dim, std::optional<double> default_value) {
  const std::string field = join_path(path, key);
  const std::optional<YAML::Node> value = lookup(file, node, path, key);
  if (!value) {
    if (default_value) return *default_value;
    throw InputError(missing(file, node, field, key, "a " + dimension_name(dim)));
  }
  const std::string text = scalar_of(file, *value, field, "a " + dimension_name(dim));
  try {
    return parse_quantity(text, dim);
  } catch (const InputError& e) {
    throw InputError(where(file, *value) + ": " + field + ": " + e.what());
  }
}

std::string get_string(const std::string& file, const YAML::Node& node, std::string_view path,
                       std::string_view key, std::optional<std::string> default_value) {
  const std::string field = join_path(path, key);
  const std::optional<YAML::Node> value = lookup(file, node, path, key);
  if (!value) {
    if (default_value) return *default_value;
    throw InputError(missing(file, node, field, key, "a string"));
  }
  return scalar_of(file, *value, field, "a string");
}

long get_int(const std::string& file, const YAML::Node& node, std::string_view path,
             std::string_view key, long min, long max, std::optional<long> default_value) {
  const std::string field = join_path(path, key);
  const std::optional<YAML::Node> value = lookup(file, node, path, key);
  const std::string expected =
      "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!value) {
    if (default_value) return *default_value;
    throw InputError(missing(file, node, field, key, expected));
  }
  return int_value(file, *value, field, min, max);
}

long int_value(const std::string& file, const YAML::Node& value, const std::string& field, long min,
               long max) {
  const std::string expected =
      "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  const std::string text = scalar_of(file, value, field, expected);
  const std::optional<long> v = parse_whole<long>(text);
  if (!v || *v < min || *v > max) {
    throw InputError(where(file, value) + ": " + field + ": expected " + expected + ", got \"" +
                     text + "\"");
  }
  return *v;
}

double get_number(const std::string& file, const YAML::Node& node, std::string_view path,
                  std::string_view key, std::optional<double> default_value) {
  const std::string field = join_path(path, key);
  const std::optional<YAML::Node> value = lookup(file, node, path, key);
  if (!value) {
    if (default_value) return *default_value;
    throw InputError(missing(file, node, field, key, "a number"));
  }
  const std::string text = scalar_of(file, *value, field, "a number");
  const std::optional<double> v = parse_whole<double>(text);
  if (!v || !std::isfinite(*v)) {
    throw InputError(where(file, *value) + ": " + field + ": expected a number, got \"" + text +
                     "\"");
  }
  return *v;
}

bool get_bool(const std::string& file, const YAML::Node& node, std::string_view path,
              std::string_view key, std::optional<bool> default_value) {
  const std::string field = join_path(path, key);
  const std::optional<YAML::Node> value = lookup(file, node, path, key);
  if (!value) {
    if (default_value) return *default_value;
    throw InputError(missing(file, node, field, key, "true or false"));
  }
  const std::string text = scalar_of(file, *value, field, "true or false");
  if (text == "true") return true;
  if (text == "false") return false;
  throw InputError(where(file, *value) + ": " + field + ": expected true or false, got \"" + text +
                   "\"");
}

void apply_override(YAML::Node& root, std::string_view assignment) {
  const std::string flag = "--set " + std::string(assignment) + ": ";
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) throw InputError(flag + "expected PATH=VALUE");
  const std::optional<std::vector<Step>> steps = parse_path(assignment.substr(0, eq));
  if (!steps) {
    throw InputError(flag +
                     "malformed path (expected keys separated by dots, with [i] list indices, "
                     "e.g. groups[0].count)");
  }
  YAML::Node value;
  try {
    value = unmarked(YAML::Load(std::string(assignment.substr(eq + 1))));
  } catch (const YAML::Exception& e) {
    throw InputError(flag + "bad YAML value: " + e.msg);
  }

  // yaml-cpp pitfall: `node = other` on a bound handle overwrites the node it refers to (inside
  // root), so the cursor moves with reset() and values go in through parent[key] = value.
  YAML::Node cursor;
  cursor.reset(root);
  std::string here;  // the path walked so far, for messages
  for (size_t i = 0; i < steps->size(); ++i) {
    const Step& step = (*steps)[i];
    const bool last = i + 1 == steps->size();
    const std::string name = here.empty() ? "the document" : here;
    if (step.key.empty()) {
      if (!cursor.IsSequence()) throw InputError(flag + name + " is not a list");
      const size_t n = cursor.size();
      if (step.index >= n) {
        throw InputError(flag + name + " has " + std::to_string(n) +
                         (n == 1 ? " entry" : " entries"));
      }
      if (last) {
        cursor[step.index] = value;
        return;
      }
      cursor.reset(cursor[step.index]);
      here += "[" + std::to_string(step.index) + "]";
    } else {
      if (!cursor.IsMap()) throw InputError(flag + name + " is not a map");
      if (last) {
        cursor[step.key] = value;
        return;
      }
      // Read through a const handle: a non-const operator[] would insert the missing key.
      if (!std::as_const(cursor)[step.key].IsDefined()) {
        std::vector<std::string> keys;
        for (const auto& kv : cursor) keys.push_back(kv.first.Scalar());
        throw InputError(flag + name + " has no key \"" + step.key + "\"" +
                         did_you_mean(step.key, keys));
      }
      cursor.reset(cursor[step.key]);
      here = join_path(here, step.key);
    }
  }
}

}  // namespace hetsim::config
