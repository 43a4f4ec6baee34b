// Reading and writing Chakra trace files; see et_io.h.
#include "sim/chakra/et_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <unordered_set>

#include "sim/chakra/et_def.pb.h"
#include "sim/core/error.h"

namespace hetsim::chakra {

namespace pb = ChakraProtoMsg;
namespace fs = std::filesystem;

std::string to_string(NodeType t) {
  if (pb::NodeType_IsValid(static_cast<int>(t)))
    return pb::NodeType_Name(static_cast<pb::NodeType>(t));
  return "node type " + std::to_string(static_cast<int>(t));
}

std::string to_string(CommType t) {
  if (pb::CollectiveCommType_IsValid(static_cast<int>(t)))
    return pb::CollectiveCommType_Name(static_cast<pb::CollectiveCommType>(t));
  return "comm_type " + std::to_string(static_cast<int>(t));
}

std::string trace_path(const std::string& dir, uint32_t rank) {
  return (fs::path(dir) / ("et." + std::to_string(rank) + ".et")).string();
}

std::string groups_path(const std::string& dir) {
  return (fs::path(dir) / "comm_group.json").string();
}

namespace {

// Attribute names, as Chakra's converters and ASTRA-sim's feeder spell them.
constexpr const char* kNumOps = "num_ops";
constexpr const char* kTensorSize = "tensor_size";
constexpr const char* kIsCpuOp = "is_cpu_op";
constexpr const char* kCommType = "comm_type";
constexpr const char* kCommSize = "comm_size";
constexpr const char* kPgName = "pg_name";
constexpr const char* kCommSrc = "comm_src";
constexpr const char* kCommDst = "comm_dst";
constexpr const char* kCommTag = "comm_tag";
constexpr const char* kDurationPs = "hetsim_duration_ps";  // hetsim's own: exact durations

// ---- framing ------------------------------------------------------------------------------
void put_message(std::ostream& out, const google::protobuf::MessageLite& m,
                 const std::string& where) {
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw RunError(where + ": cannot encode a message");
  uint64_t size = bytes.size();
  do {
    char b = static_cast<char>(size & 0x7f);
    size >>= 7;
    if (size != 0) b = static_cast<char>(b | 0x80);
    out.put(b);
  } while (size != 0);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The next message's bytes from `data` at `pos`; false at the end of the data.
bool next_message(const std::string& data, size_t& pos, std::string_view& msg,
                  const std::string& where, size_t index) {
  if (pos >= data.size()) return false;
  uint64_t size = 0;
  int shift = 0;
  const size_t start = pos;
  while (true) {
    if (pos >= data.size() || shift > 63) {
      throw InputError(where + ": truncated or not a Chakra trace: message " +
                       std::to_string(index) + " at byte " + std::to_string(start) +
                       " has no complete size prefix (expected a varint length, then the message)");
    }
    const auto b = static_cast<uint8_t>(data[pos++]);
    size |= static_cast<uint64_t>(b & 0x7f) << shift;
    shift += 7;
    if ((b & 0x80) == 0) break;
  }
  if (size > data.size() - pos) {
    throw InputError(where + ": truncated or not a Chakra trace: message " + std::to_string(index) +
                     " at byte " + std::to_string(start) + " declares " + std::to_string(size) +
                     " bytes but " + std::to_string(data.size() - pos) + " are left");
  }
  msg = std::string_view(data).substr(pos, size);
  pos += size;
  return true;
}

// ---- attributes ---------------------------------------------------------------------------
void add_uint(pb::Node& n, const char* name, uint64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_uint64_val(v);
}
void add_int64(pb::Node& n, const char* name, int64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}
void add_int32(pb::Node& n, const char* name, int64_t v) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  a->set_int32_val(static_cast<int32_t>(v));
}

// An integer attribute in any of protobuf's integer encodings (Chakra's converters differ:
// int64 for comm_type and comm_size, uint64 in the generator, int32 for peers).
std::optional<int64_t> as_integer(const pb::AttributeProto& a) {
  using V = pb::AttributeProto;
  switch (a.value_case()) {
    case V::kInt32Val:
      return a.int32_val();
    case V::kInt64Val:
      return a.int64_val();
    case V::kUint32Val:
      return a.uint32_val();
    case V::kUint64Val:
      return static_cast<int64_t>(a.uint64_val());
    case V::kSint32Val:
      return a.sint32_val();
    case V::kSint64Val:
      return a.sint64_val();
    case V::kFixed32Val:
      return a.fixed32_val();
    case V::kFixed64Val:
      return static_cast<int64_t>(a.fixed64_val());
    case V::kSfixed32Val:
      return a.sfixed32_val();
    case V::kSfixed64Val:
      return a.sfixed64_val();
    default:
      return std::nullopt;
  }
}

pb::Node to_proto(const Node& n) {
  pb::Node p;
  p.set_id(n.id);
  p.set_name(n.name);
  p.set_type(static_cast<pb::NodeType>(n.type));
  for (uint64_t d : n.ctrl_deps) p.add_ctrl_deps(d);
  for (uint64_t d : n.data_deps) p.add_data_deps(d);
  p.set_duration_micros(n.duration_micros);
  {
    pb::AttributeProto* a = p.add_attr();
    a->set_name(kIsCpuOp);
    a->set_bool_val(n.is_cpu_op);
  }
  if (n.duration_ps) add_uint(p, kDurationPs, *n.duration_ps);
  if (n.num_ops) add_uint(p, kNumOps, *n.num_ops);
  if (n.tensor_size) add_uint(p, kTensorSize, *n.tensor_size);
  if (n.comm_type) add_int64(p, kCommType, static_cast<int64_t>(*n.comm_type));
  if (n.comm_size) add_int64(p, kCommSize, static_cast<int64_t>(*n.comm_size));
  if (n.pg_name) {
    pb::AttributeProto* a = p.add_attr();
    a->set_name(kPgName);
    a->set_string_val(*n.pg_name);
  }
  if (n.comm_src) add_int32(p, kCommSrc, *n.comm_src);
  if (n.comm_dst) add_int32(p, kCommDst, *n.comm_dst);
  if (n.comm_tag) add_int32(p, kCommTag, *n.comm_tag);
  return p;
}

Node from_proto(const pb::Node& p, const std::string& where) {
  Node n;
  n.id = p.id();
  n.name = p.name();
  n.type = static_cast<NodeType>(p.type());
  n.ctrl_deps.assign(p.ctrl_deps().begin(), p.ctrl_deps().end());
  n.data_deps.assign(p.data_deps().begin(), p.data_deps().end());
  n.duration_micros = p.duration_micros();
  const std::string at = where + ": node " + std::to_string(n.id) + " \"" + n.name + "\"";
  auto integer = [&](const pb::AttributeProto& a) {
    const std::optional<int64_t> v = as_integer(a);
    if (!v) throw InputError(at + ": attribute " + a.name() + " is not an integer");
    return *v;
  };
  auto non_negative = [&](const pb::AttributeProto& a) {
    const int64_t v = integer(a);
    if (v < 0 && a.value_case() != pb::AttributeProto::kUint64Val &&
        a.value_case() != pb::AttributeProto::kFixed64Val) {
      throw InputError(at + ": attribute " + a.name() + " is " + std::to_string(v) +
                       " (expected a size, 0 or more)");
    }
    return static_cast<uint64_t>(v);
  };
  for (const pb::AttributeProto& a : p.attr()) {
    const std::string& name = a.name();
    if (name == kIsCpuOp) {
      // Chakra's converters write a bool; symbolic_tensor_graph (ASTRA-sim's generator) writes
      // an integer 0 or 1. Both are read.
      if (a.value_case() == pb::AttributeProto::kBoolVal) {
        n.is_cpu_op = a.bool_val();
      } else {
        const std::optional<int64_t> v = as_integer(a);
        if (!v || (*v != 0 && *v != 1)) {
          throw InputError(at + ": attribute is_cpu_op is " +
                           (v ? std::to_string(*v) : std::string("neither a bool nor an integer")) +
                           " (expected a bool, or the integer 0 or 1)");
        }
        n.is_cpu_op = *v == 1;
      }
    } else if (name == kDurationPs) {
      n.duration_ps = non_negative(a);
    } else if (name == kNumOps) {
      n.num_ops = non_negative(a);
    } else if (name == kTensorSize) {
      n.tensor_size = non_negative(a);
    } else if (name == kCommType) {
      const int64_t v = integer(a);
      if (!pb::CollectiveCommType_IsValid(static_cast<int>(v)) || v != static_cast<int>(v)) {
        throw InputError(at + ": comm_type " + std::to_string(v) +
                         " is not a Chakra CollectiveCommType (0 to 9)");
      }
      n.comm_type = static_cast<CommType>(v);
    } else if (name == kCommSize) {
      n.comm_size = non_negative(a);
    } else if (name == kPgName) {
      if (a.value_case() == pb::AttributeProto::kStringVal) {
        n.pg_name = a.string_val();
      } else {
        n.pg_name = std::to_string(integer(a));
      }
    } else if (name == kCommSrc) {
      n.comm_src = integer(a);
    } else if (name == kCommDst) {
      n.comm_dst = integer(a);
    } else if (name == kCommTag) {
      n.comm_tag = integer(a);
    }
  }
  return n;
}

// "<prefix>.<rank>.et" -> (prefix, rank); nullopt for any other name. (Not std::regex: GCC 12
// reports false maybe-uninitialized warnings inside it in the sanitizer build.)
std::optional<std::pair<std::string, uint64_t>> split_trace_name(const std::string& name) {
  constexpr std::string_view ext = ".et";
  if (name.size() <= ext.size() || !name.ends_with(ext)) return std::nullopt;
  const std::string stem = name.substr(0, name.size() - ext.size());
  const size_t dot = stem.rfind('.');
  if (dot == std::string::npos || dot == 0) return std::nullopt;
  const std::string digits = stem.substr(dot + 1);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::make_pair(stem.substr(0, dot), std::stoull(digits));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the file");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Ids unique within the file; every dependency names one of them.
void check_references(const Trace& t, const std::string& where) {
  std::unordered_set<uint64_t> ids;
  for (const Node& n : t.nodes) {
    if (!ids.insert(n.id).second) {
      throw InputError(where + ": node id " + std::to_string(n.id) + " (\"" + n.name +
                       "\") appears twice (expected unique ids)");
    }
  }
  for (const Node& n : t.nodes) {
    for (const auto* deps : {&n.data_deps, &n.ctrl_deps}) {
      for (uint64_t d : *deps) {
        if (ids.count(d) == 0) {
          throw InputError(where + ": node " + std::to_string(n.id) + " \"" + n.name +
                           "\": " + (deps == &n.data_deps ? "data_deps" : "ctrl_deps") +
                           " names node " + std::to_string(d) + ", which is not in the file");
        }
      }
    }
  }
}

std::map<std::string, std::vector<uint32_t>> read_groups(const std::string& path, uint32_t ranks) {
  std::map<std::string, std::vector<uint32_t>> groups;
  const nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw InputError(path + ": not a JSON object (expected {\"group name\": [ranks], ...})");
  }
  for (const auto& [name, members] : j.items()) {
    if (!members.is_array() || members.empty()) {
      throw InputError(path + ": group \"" + name + "\": expected a non-empty list of ranks");
    }
    std::set<uint32_t> seen;
    for (const auto& m : members) {
      if (!m.is_number_integer() || m.get<int64_t>() < 0 || m.get<int64_t>() >= ranks) {
        throw InputError(path + ": group \"" + name + "\": " + m.dump() +
                         " is not a rank (expected 0 to " + std::to_string(ranks - 1) + ")");
      }
      const auto r = m.get<uint32_t>();
      if (!seen.insert(r).second) {
        throw InputError(path + ": group \"" + name + "\": rank " + std::to_string(r) +
                         " appears twice");
      }
      groups[name].push_back(r);
    }
  }
  return groups;
}

// What the replay needs of every node: a type it runs, the attributes of that type, peers and
// process groups that exist.
void check_node(const Node& n, uint32_t rank, const TraceSet& set, const std::string& where) {
  const std::string at = where + ": node " + std::to_string(n.id) + " \"" + n.name + "\"";
  const auto nranks = static_cast<int64_t>(set.ranks.size());
  auto need = [&](bool has, const char* attr) {
    if (!has) throw InputError(at + ": " + to_string(n.type) + " without attribute " + attr);
  };
  auto peer = [&](const std::optional<int64_t>& r, const char* attr) {
    if (r && (*r < 0 || *r >= nranks)) {
      throw InputError(at + ": " + attr + " " + std::to_string(*r) +
                       " is not a rank (expected 0 to " + std::to_string(nranks - 1) + ")");
    }
  };
  switch (n.type) {
    case NodeType::compute:
    case NodeType::metadata:
      return;
    case NodeType::mem_load:
    case NodeType::mem_store:
      need(n.tensor_size.has_value() || n.duration_micros > 0 || n.duration_ps.has_value(),
           "tensor_size");
      return;
    case NodeType::collective: {
      need(n.comm_type.has_value(), "comm_type");
      need(n.comm_size.has_value(), "comm_size");
      switch (*n.comm_type) {
        case CommType::all_reduce:
        case CommType::all_gather:
        case CommType::reduce_scatter:
        case CommType::all_to_all:
        case CommType::broadcast:
          break;
        default:
          throw InputError(at + ": comm_type " + to_string(*n.comm_type) +
                           " is not replayed (expected ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, "
                           "ALL_TO_ALL or BROADCAST)");
      }
      if (!n.pg_name) return;
      const auto g = set.groups.find(*n.pg_name);
      if (g == set.groups.end()) {
        throw InputError(at + ": pg_name \"" + *n.pg_name + "\" is not a group of " +
                         (set.groups.empty() ? std::string("comm_group.json (no such file)")
                                             : std::string("comm_group.json")));
      }
      if (std::find(g->second.begin(), g->second.end(), rank) == g->second.end()) {
        throw InputError(at + ": rank " + std::to_string(rank) + " is not a member of group \"" +
                         *n.pg_name + "\"");
      }
      return;
    }
    case NodeType::send:
      need(n.comm_dst.has_value(), "comm_dst");
      need(n.comm_size.has_value(), "comm_size");
      peer(n.comm_dst, "comm_dst");
      if (n.comm_src && *n.comm_src != rank) {
        throw InputError(at + ": comm_src " + std::to_string(*n.comm_src) + " of a send in rank " +
                         std::to_string(rank) + "'s file");
      }
      return;
    case NodeType::recv:
      need(n.comm_src.has_value(), "comm_src");
      peer(n.comm_src, "comm_src");
      if (n.comm_dst && *n.comm_dst != rank) {
        throw InputError(at + ": comm_dst " + std::to_string(*n.comm_dst) +
                         " of a receive in rank " + std::to_string(rank) + "'s file");
      }
      return;
    default:
      throw InputError(at + ": type " + to_string(n.type) +
                       " is not replayed (expected COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, "
                       "COMM_RECV_NODE, MEM_LOAD_NODE, MEM_STORE_NODE or METADATA_NODE)");
  }
}

}  // namespace

void write_trace(std::ostream& out, const Trace& t, const std::string& where) {
  pb::GlobalMetadata meta;
  meta.set_version(t.version);
  put_message(out, meta, where);
  for (const Node& n : t.nodes) put_message(out, to_proto(n), where);
}

Trace read_trace(std::istream& in, const std::string& where) {
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.empty()) {
    throw InputError(where +
                     ": empty (expected a Chakra trace: a GlobalMetadata message, then "
                     "Node messages)");
  }
  Trace t;
  size_t pos = 0;
  std::string_view msg;
  next_message(data, pos, msg, where, 0);
  pb::GlobalMetadata meta;
  if (!meta.ParseFromArray(msg.data(), static_cast<int>(msg.size()))) {
    throw InputError(where + ": not a Chakra trace: the first message is not a GlobalMetadata");
  }
  t.version = meta.version();
  for (size_t index = 1; next_message(data, pos, msg, where, index); ++index) {
    pb::Node p;
    if (!p.ParseFromArray(msg.data(), static_cast<int>(msg.size()))) {
      throw InputError(where + ": not a Chakra trace: message " + std::to_string(index) +
                       " is not a Node");
    }
    if (p.type() == pb::INVALID_NODE || !pb::NodeType_IsValid(p.type())) {
      throw InputError(where + ": message " + std::to_string(index) + " (node id " +
                       std::to_string(p.id()) + "): type " + std::to_string(p.type()) +
                       " is not a Chakra NodeType (expected 1 to 10; not a Chakra trace?)");
    }
    t.nodes.push_back(from_proto(p, where));
  }
  check_references(t, where);
  return t;
}

void validate(const TraceSet& set) {
  for (uint32_t r = 0; r < set.ranks.size(); ++r) {
    const std::string where = r < set.sources.size() ? set.sources[r] : "rank " + std::to_string(r);
    check_references(set.ranks[r], where);
    for (const Node& n : set.ranks[r].nodes) check_node(n, r, set, where);
  }
}

void write_traces(const std::string& dir, const TraceSet& set) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw InputError(dir + ": cannot create the folder");
  for (uint32_t r = static_cast<uint32_t>(set.ranks.size());; ++r) {
    if (!fs::exists(trace_path(dir, r), ec)) break;
    throw InputError(dir + ": holds " + trace_path(dir, r) + ", a trace of another job (" +
                     std::to_string(set.ranks.size()) +
                     " ranks here; expected an empty folder or this job's)");
  }
  for (uint32_t r = 0; r < set.ranks.size(); ++r) {
    const std::string path = trace_path(dir, r);
    std::ofstream out(path, std::ios::binary);
    if (!out) throw InputError(path + ": cannot write the file");
    write_trace(out, set.ranks[r], path);
    if (!out) throw RunError(path + ": write failed");
  }
  if (set.groups.empty()) {
    fs::remove(groups_path(dir), ec);  // another job's groups would not be this one's
    return;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, members] : set.groups) j[name] = members;
  std::ofstream out(groups_path(dir), std::ios::binary);
  out << j.dump() << "\n";
  if (!out) throw RunError(groups_path(dir) + ": write failed");
}

TraceSet read_traces(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(dir + ": " + (fs::exists(dir, ec) ? "not a folder" : "no such folder") +
                     " (expected a folder of Chakra traces: " + trace_path(dir, 0) + ", " +
                     trace_path(dir, 1) + ", ...)");
  }
  // <prefix>.<rank>.et, one prefix.
  std::map<std::string, std::map<uint64_t, std::string>> by_prefix;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (const auto split = split_trace_name(e.path().filename().string()))
      by_prefix[split->first][split->second] = e.path().string();
  }
  if (by_prefix.empty()) {
    throw InputError(dir + ": no Chakra traces in the folder (expected " + trace_path(dir, 0) +
                     ", " + trace_path(dir, 1) + ", ...)");
  }
  if (by_prefix.size() > 1) {
    std::string names;
    for (const auto& [p, files] : by_prefix) names += (names.empty() ? "" : ", ") + p + ".*.et";
    throw InputError(dir + ": traces with different prefixes (" + names +
                     "; expected one job's files)");
  }
  const auto& [prefix, files] = *by_prefix.begin();
  const uint64_t count = files.rbegin()->first + 1;
  for (uint64_t r = 0; r < count; ++r) {
    if (files.count(r) == 0) {
      throw InputError((fs::path(dir) / (prefix + "." + std::to_string(r) + ".et")).string() +
                       ": missing (expected one file per rank, 0 to " + std::to_string(count - 1) +
                       ")");
    }
  }
  TraceSet set;
  for (const auto& [r, path] : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot open the file");
    set.ranks.push_back(read_trace(in, path));
    set.sources.push_back(path);
  }
  if (fs::exists(groups_path(dir), ec))
    set.groups = read_groups(groups_path(dir), static_cast<uint32_t>(count));
  validate(set);
  return set;
}

}  // namespace hetsim::chakra
