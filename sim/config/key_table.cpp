// Key tables and what is generated from them; see key_table.h.
#include "sim/config/key_table.h"

#include <fmt/format.h>

#include <deque>
#include <stdexcept>

namespace hetsim::config {

namespace {

using T = KeyType;

std::string_view type_name(KeyType t) {
  switch (t) {
    case T::integer:
      return "integer";
    case T::number:
      return "number";
    case T::flag:
      return "true / false";
    case T::choice:
      return "choice";
    case T::size:
      return "bytes (160MB)";
    case T::text:
      return "name or file";
    case T::list:
      return "list";
    case T::map:
      return "map";
    case T::devices:
      return "GPU set";
    case T::any:
      return "name or map";
    case T::time:
      return "time (31us)";
    case T::bandwidth:
      return "bandwidth (600GB/s)";
    case T::flop_rate:
      return "rate (989TFLOPS)";
    case T::power:
      return "power (700W)";
    case T::entries:
      return "map or list of maps";
    case T::fraction:
      return "number";
  }
  return "";
}

std::string values_of(const Key& k) {
  if (k.type == T::choice) {
    std::string s;
    for (std::string_view c : k.choices) s += fmt::format("{}`{}`", s.empty() ? "" : ", ", c);
    return s;
  }
  if (k.type == T::integer) {
    return fmt::format("{} to {}", static_cast<int64_t>(k.min), static_cast<int64_t>(k.max));
  }
  if (k.type == T::number) return fmt::format("above {}, at most {}", k.min, k.max);
  if (k.type == T::fraction) return "from 0, below 1";
  return "";
}

nlohmann::ordered_json property(const Key& k) {
  using J = nlohmann::ordered_json;
  J p;
  p["description"] =
      std::string(k.help) +
      (k.default_value.empty() ? "" : " (default: " + std::string(k.default_value) + ")");
  switch (k.type) {
    case T::integer:
      p["type"] = "integer";
      p["minimum"] = static_cast<int64_t>(k.min);
      p["maximum"] = static_cast<int64_t>(k.max);
      break;
    case T::number:
      p["type"] = "number";
      p["exclusiveMinimum"] = k.min;
      p["maximum"] = k.max;
      break;
    case T::flag:
      p["type"] = "boolean";
      break;
    case T::choice:
      p["enum"] = J::array();
      for (std::string_view c : k.choices) p["enum"].push_back(std::string(c));
      break;
    case T::size:
    case T::time:
    case T::bandwidth:
    case T::flop_rate:
    case T::power:
      p["type"] = J::array({"string", "number"});
      break;
    case T::text:
      p["type"] = "string";
      break;
    case T::list:
      p["type"] = "array";
      break;
    case T::map:
      p["type"] = "object";
      break;
    case T::devices:
      p["type"] = J::array({"string", "array", "integer"});
      break;
    case T::any:
      p["type"] = J::array({"string", "object"});
      break;
    case T::entries:
      p["type"] = J::array({"object", "array"});
      break;
    case T::fraction:
      p["type"] = "number";
      p["minimum"] = 0;
      p["exclusiveMaximum"] = 1;
      break;
  }
  return p;
}

// The key's map ("" at the top level) and its own name.
std::pair<std::string_view, std::string_view> split(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// A list's entries (`x[]`) or a map's named entries (`*`): rows that describe a value, not a key.
bool entry_row(std::string_view own) { return own == "*" || own.ends_with("[]"); }

// Whether a row with `when` belongs to the variant `value_of` describes.
bool in_variant(std::string_view when, const ValueOf& value_of) {
  if (when.empty()) return true;
  if (when.starts_with("no ")) return value_of(when.substr(3)) == nullptr;
  const size_t colon = when.find(':');
  // "a | b": one of these keys is given.
  auto each = [](std::string_view list, char sep, auto f) {
    while (!list.empty()) {
      const size_t end = std::min(list.find(sep), list.size());
      std::string_view v = list.substr(0, end);
      while (v.starts_with(' ')) v.remove_prefix(1);
      while (v.ends_with(' ')) v.remove_suffix(1);
      if (f(v)) return true;
      list = end < list.size() ? list.substr(end + 1) : std::string_view{};
    }
    return false;
  };
  if (colon == std::string_view::npos) {
    return each(when, '|', [&](std::string_view k) { return value_of(k) != nullptr; });
  }
  const std::string* value = value_of(when.substr(0, colon));
  if (value == nullptr) return false;
  return each(when.substr(colon + 1), ',', [&](std::string_view v) { return v == *value; });
}

// The variant as the reference page says it.
std::string when_text(std::string_view when) {
  if (when.empty()) return "";
  if (when.starts_with("no ")) return fmt::format(" (only without `{}`)", when.substr(3));
  if (when.find(':') == std::string_view::npos && when.find('|') != std::string_view::npos) {
    std::string keys;
    for (char c : when) {
      if (c == '|') {
        keys += "` or `";
      } else if (c != ' ') {
        keys += c;
      }
    }
    return fmt::format(" (only with `{}`)", keys);
  }
  return fmt::format(" (only with `{}`)", when);
}

}  // namespace

std::string_view keep_name(std::string name) {
  static std::deque<std::string> names;
  return names.emplace_back(std::move(name));
}

const Key& find_key(const std::vector<Key>& table, std::string_view name, std::string_view what) {
  for (const Key& k : table) {
    if (k.name == name) return k;
  }
  throw std::logic_error(fmt::format("key \"{}\" is not in {}", name, what));
}

std::vector<std::string> choices_of(const Key& k) { return {k.choices.begin(), k.choices.end()}; }

std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path) {
  std::vector<std::string> out;
  for (const Key& k : table) {
    const auto [map, name] = split(k.name);
    if (map == path && !entry_row(name)) out.emplace_back(name);
  }
  return out;
}

std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path,
                                   std::string_view field, const std::string* value) {
  return key_names(table, path,
                   [&](std::string_view key) { return key == field ? value : nullptr; });
}

std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path,
                                   const ValueOf& value_of) {
  std::vector<std::string> out;
  for (const Key& k : table) {
    const auto [map, name] = split(k.name);
    if (map == path && !entry_row(name) && in_variant(k.when, value_of)) out.emplace_back(name);
  }
  return out;
}

std::string keys_markdown(const std::vector<Key>& table, bool read_by) {
  std::string s = read_by ? "| key | type | values | default | meaning | read by |\n"
                            "| --- | --- | --- | --- | --- | --- |\n"
                          : "| key | type | values | default | meaning |\n"
                            "| --- | --- | --- | --- | --- |\n";
  for (const Key& k : table) {
    s += fmt::format("| `{}` | {} | {} | {} | {}{} |", k.name, type_name(k.type), values_of(k),
                     k.default_value, k.help, when_text(k.when));
    s += read_by ? fmt::format(" {} |\n", k.read_by) : "\n";
  }
  return s;
}

nlohmann::ordered_json keys_json_schema(const std::vector<Key>& table, const std::string& title,
                                        const std::string& description,
                                        const std::vector<std::string>& required) {
  using J = nlohmann::ordered_json;
  // The schema of the value at `path` ("" the file itself): a key's under its map's
  // `properties`, a list entry's under the list's `items`, a named entry's under the map's
  // `additionalProperties`.
  auto value_at = [](J& root, std::string_view path) -> J& {
    J* o = &root;
    size_t start = 0;
    while (start < path.size()) {
      const size_t dot = std::min(path.find('.', start), path.size());
      const std::string_view seg = path.substr(start, dot - start);
      if (seg == "*") {
        o = &(*o)["additionalProperties"];
      } else if (seg.ends_with("[]")) {
        o = &(*o)["properties"][std::string(seg.substr(0, seg.size() - 2))]["items"];
      } else {
        o = &(*o)["properties"][std::string(seg)];
      }
      start = dot + 1;
    }
    return *o;
  };
  J schema;
  schema["$schema"] = "https://json-schema.org/draft/2020-12/schema";
  schema["title"] = title;
  schema["description"] = description;
  schema["type"] = "object";
  schema["properties"] = J::object();
  for (const Key& k : table) {
    J& at = value_at(schema, k.name);
    const J p = property(k);
    for (auto it = p.begin(); it != p.end(); ++it) at[it.key()] = it.value();
  }
  // A value with keys refuses others; one with both keys and entries is a map or a list.
  auto close = [](auto& self, J& o) -> void {
    if (!o.is_object()) return;
    if (o.contains("properties")) {
      if (!o.contains("additionalProperties")) o["additionalProperties"] = false;
      if (o.contains("items")) o["type"] = J::array({"object", "array"});
      for (auto& [name, p] : o["properties"].items()) self(self, p);
    }
    if (o.contains("items")) self(self, o["items"]);
    if (o.contains("additionalProperties")) self(self, o["additionalProperties"]);
  };
  for (auto& [name, p] : schema["properties"].items()) close(close, p);
  schema["additionalProperties"] = false;
  if (!required.empty()) schema["required"] = required;
  return schema;
}

}  // namespace hetsim::config
