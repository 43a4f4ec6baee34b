// Strict YAML reading: every error names the file, the line and the field path
// ("topologies/x.yaml:14: node_types[0].intra.bandwith: unknown key (did you mean ...)"),
// and --set PATH=VALUE overrides applied to a loaded document before it is parsed.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/config/units.h"

namespace hetsim::config {

// "file:LINE" (1-based) for a node read from a file; just "file" for a node without a position
// (one built in code, such as a --set value).
std::string where(const std::string& file, const YAML::Node& node);

// The whole of `s` as a number (no leading '+' or space, no trailing text), or nullopt. Defined
// for long, long long, unsigned long (size_t) and double.
template <typename T>
std::optional<T> parse_whole(const std::string& s);

// Levenshtein distance over bytes.
size_t edit_distance(std::string_view a, std::string_view b);

// ` (did you mean "bandwidth"?)` for the closest valid name within max(2, key.size() / 3) edits
// (the first one listed on a tie), "" when none is that close.
std::string did_you_mean(std::string_view key, const std::vector<std::string>& valid);

// Throws "file:line: path: expected a map" unless `map` is a map, and
// "file:line: path.key: unknown key (did you mean ...)" for the first key not in `allowed`.
void check_keys(const std::string& file, const YAML::Node& map, std::string_view path,
                const std::vector<std::string>& allowed);

// Field readers. `path` names `node` ("node_types[0].intra", "" for the document root); errors
// read "file:line: path.key: message", with the line of the value (of the map when the key is
// missing). Without a default, a missing key throws "missing required field (<what was
// expected>)", and a key with no value "no value given (expected ...)".
YAML::Node require(const std::string& file, const YAML::Node& node, std::string_view path,
                   std::string_view key);
double get_quantity(const std::string& file, const YAML::Node& node, std::string_view path,
                    std::string_view key, Dimension dim,
                    std::optional<double> default_value = std::nullopt);
std::string get_string(const std::string& file, const YAML::Node& node, std::string_view path,
                       std::string_view key,
                       std::optional<std::string> default_value = std::nullopt);
// An integer in [min, max] (max from sim/config/limits.h for counts, checked before the caller
// allocates anything). Error: `expected an integer from MIN to MAX, got "x"`.
long get_int(const std::string& file, const YAML::Node& node, std::string_view path,
             std::string_view key, long min, long max,
             std::optional<long> default_value = std::nullopt);
// The same of a value already found (a list's element); `field` names it ("stage_layers[2]").
long int_value(const std::string& file, const YAML::Node& value, const std::string& field, long min,
               long max);
// A plain number (no unit). Error: `expected a number, got "x"`.
double get_number(const std::string& file, const YAML::Node& node, std::string_view path,
                  std::string_view key, std::optional<double> default_value = std::nullopt);

// `true` or `false`; InputError naming the field otherwise.
bool get_bool(const std::string& file, const YAML::Node& node, std::string_view path,
              std::string_view key, std::optional<bool> default_value = std::nullopt);

// "path.key", or "key" when path is empty.
std::string join_path(std::string_view path, std::string_view key);

// The whole of a text file; InputError "path: cannot open <what>".
std::string read_text_file(const std::string& path, std::string_view what = "file");

// Parses YAML text; a syntax error becomes InputError "file:LINE: invalid YAML: ...".
YAML::Node load_yaml(const std::string& text, const std::string& file);

// "a, b, c".
std::string join_names(const std::vector<std::string>& names);

// The index of the value of `key` among `choices`; errors read
// `file:line: path.key: unknown value "x" (expected one of a, b) (did you mean "a"?)`.
size_t get_choice(const std::string& file, const YAML::Node& node, std::string_view path,
                  std::string_view key, const std::vector<std::string>& choices,
                  std::optional<std::string> default_value = std::nullopt);

// Applies one `--set PATH=VALUE`: PATH is dot-separated keys with [i] list indices
// ("groups[0].count"), VALUE is read as YAML. Every step but the last must exist; the last may
// add a key to an existing map (the schema check catches typos later). The new value carries no
// file position, so errors about it read "file: path: ...". Throws InputError.
void apply_override(YAML::Node& root, std::string_view assignment);

}  // namespace hetsim::config
