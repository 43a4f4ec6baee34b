// A Chakra execution trace in memory: one rank's nodes (the subset of Chakra's schema hetsim
// writes and replays) and a directory of them with its process groups. Free of protobuf, so the
// exporter, the replay and the tests build traces as plain values; et_io.h reads and writes them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hetsim::chakra {

// Chakra's NodeType values (et_def.proto).
enum class NodeType : int32_t {
  invalid = 0,
  metadata = 1,
  mem_load = 2,
  mem_store = 3,
  compute = 4,
  send = 5,
  recv = 6,
  collective = 7,
  storage = 8,
  batch = 9,
  checkpoint = 10,
};

// Chakra's CollectiveCommType values.
enum class CommType : int32_t {
  all_reduce = 0,
  reduce = 1,
  all_gather = 2,
  gather = 3,
  scatter = 4,
  broadcast = 5,
  all_to_all = 6,
  reduce_scatter = 7,
  reduce_scatter_block = 8,
  barrier = 9,
};

std::string to_string(NodeType t);  // Chakra's enum name, e.g. "COMP_NODE"
std::string to_string(CommType t);  // e.g. "ALL_REDUCE"

// One node with the attributes hetsim gives meaning to; a file's other attributes are ignored.
struct Node {
  uint64_t id = 0;
  std::string name;
  NodeType type = NodeType::compute;
  std::vector<uint64_t> data_deps, ctrl_deps;  // both must be done before the node starts
  uint64_t duration_micros = 0;                // compute: Chakra's (whole microseconds)
  // Compute: hetsim's own duration, exact (attribute "hetsim_duration_ps"); the replay prefers it
  // to duration_micros, so a hetsim trace replays without rounding each kernel segment.
  std::optional<uint64_t> duration_ps;
  std::optional<uint64_t> num_ops;      // compute: floating-point operations
  std::optional<uint64_t> tensor_size;  // compute: bytes moved to and from device memory
  bool is_cpu_op = false;
  std::optional<CommType> comm_type;  // collective
  // Collective: nccl-tests' size (one rank's buffer for all-reduce, broadcast and all-to-all;
  // the whole buffer for all-gather and reduce-scatter); send / recv: bytes moved.
  std::optional<uint64_t> comm_size;
  std::optional<std::string> pg_name;  // collective: its process group; none: every rank
  std::optional<int64_t> comm_src, comm_dst, comm_tag;  // send / recv

  bool operator==(const Node&) const = default;
};

// One rank's file: GlobalMetadata, then its nodes in the order they were written.
struct Trace {
  std::string version = "0.0.4";
  std::vector<Node> nodes;
  bool operator==(const Trace&) const = default;
};

// A directory of traces: rank i in <prefix>.<i>.et, and the process groups (comm_group.json,
// ASTRA-sim's layout: {"name": [ranks]}).
struct TraceSet {
  std::vector<Trace> ranks;
  std::map<std::string, std::vector<uint32_t>> groups;
  // Where each rank's trace was read from, for messages (read_traces fills it; empty when the
  // traces were made in memory).
  std::vector<std::string> sources;
  bool operator==(const TraceSet&) const = default;
};

}  // namespace hetsim::chakra
