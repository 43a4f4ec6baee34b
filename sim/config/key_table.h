// The keys of an input file declared once, as a table (issues 39 and 40): a loader checks a file's
// keys and reads its choices from the table, and the reference page (Markdown) and the JSON
// Schema editors check the file with are generated from it. Plans (workload/plan/plan_keys.h),
// frameworks (workload/cost/framework.h) and GPU profiles (config/cluster_config.h) have one.
//
// A key of a nested map is written with its path: `host.per_kernel` is `per_kernel` in the map
// `host`, which is a row of its own (type map). A list's items are `name[]` (`node_types[]` is
// one entry of the list `node_types`, `node_types[].gpu` a key of each entry), and the entries of
// a map of user-chosen names `name.*` (`link_classes.*.kind`).
//
// A map whose keys depend on one of its keys (a cluster's `intra` by its `kind`, a node type by
// whether it names an `instance`) gives each key that belongs to one variant a `when`:
// "kind: nvswitch, pcie" (only when `kind` is one of these), "instance" (only when `instance`
// is given), "conv | pool" (only when one of these is given) or "no instance" (only when it is
// not).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hetsim::config {

enum class KeyType {
  integer,    // a whole number in [min, max]
  number,     // a real number in (min, max]
  flag,       // true or false
  choice,     // one of `choices`
  size,       // a byte quantity such as 160MB
  text,       // a name or a file path
  list,       // a YAML list
  map,        // a YAML map
  devices,    // a GPU set: "0-7,16" or a list of ids
  any,        // a scalar or a map (see help)
  time,       // a duration such as 31us
  bandwidth,  // a rate such as 600GB/s
  flop_rate,  // a compute rate such as 989TFLOPS
  power,      // a power such as 700W
  entries,    // a map, or a list of such maps
  fraction,   // a number in [0, 1): a probability such as dropout's
};

struct Key {
  std::string_view name;  // `map.key` for a key of a nested map
  KeyType type;
  // For choice keys, in the order of the enum they read into (a loader casts the position).
  std::vector<std::string_view> choices;
  double min = 0, max = 0;         // integer and number keys
  std::string_view default_value;  // as the reader sees it ("1", "the framework's")
  std::string_view help;           // one line
  std::string_view read_by;        // the components that read it
  std::string_view when = {};      // the variant it belongs to ("" for all; see above)
};

// A name made at run time (a table's rows for a nested file's keys under a path) kept for the
// program's life, as a Key's string_view fields need.
std::string_view keep_name(std::string name);

// The row of `name` in `table`; throws std::logic_error for a name the table lacks (a
// programming error), naming `what` (the table).
const Key& find_key(const std::vector<Key>& table, std::string_view name, std::string_view what);
// Its choices as strings (config::get_choice's form).
std::vector<std::string> choices_of(const Key& k);
// The keys of the map at `path` ("" for the top level, "node_types[]" for a list's entries), as
// config::check_keys takes them.
std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path = "");
// The same, for the variant in which the map's key `field` has `value` (nullptr: not given).
std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path,
                                   std::string_view field, const std::string* value);
// The same, for the variant `value_of` describes: the value of each key a `when` names (nullptr:
// not given; a key given as a list or a map reads as "").
using ValueOf = std::function<const std::string*(std::string_view key)>;
std::vector<std::string> key_names(const std::vector<Key>& table, std::string_view path,
                                   const ValueOf& value_of);

// The table as Markdown rows under a header (| key | type | values | default | meaning |, and
// | read by | where `read_by`).
std::string keys_markdown(const std::vector<Key>& table, bool read_by);
// A JSON Schema (draft 2020-12) of a file with these keys: nested maps as nested objects, a
// list's entries as its `items`, a map of named entries as its `additionalProperties`, unknown
// keys refused, `required` the keys listed. Variants are not told apart: a map accepts the keys
// of all its variants (the loader refuses a key of another variant, naming it).
nlohmann::ordered_json keys_json_schema(const std::vector<Key>& table, const std::string& title,
                                        const std::string& description,
                                        const std::vector<std::string>& required = {});

}  // namespace hetsim::config
