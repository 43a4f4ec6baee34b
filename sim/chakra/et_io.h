// Chakra execution trace files: each one a GlobalMetadata message then Node messages, every
// message preceded by its size as a varint (the framing of Chakra's protolib encodeMessage).
// Reading checks everything the replay relies on and throws InputError naming the file, the
// node and the field.
#pragma once

#include <iosfwd>
#include <string>

#include "sim/chakra/trace.h"

namespace hetsim::chakra {

// The file of rank `rank` in `dir`: dir/et.<rank>.et (the name Chakra's tools and ASTRA-sim's
// workload prefix "dir/et" give).
std::string trace_path(const std::string& dir, uint32_t rank);
// The process groups file: dir/comm_group.json.
std::string groups_path(const std::string& dir);

// Writes one trace; `where` names the stream in errors.
void write_trace(std::ostream& out, const Trace& t, const std::string& where);
// Reads one trace; `where` names the file in errors.
Trace read_trace(std::istream& in, const std::string& where);

// Creates `dir` if needed and writes every rank's file and, when there are groups, comm_group.json.
// A folder that holds a trace of a rank past the last (another job's) is refused: a later read
// would take it for part of this job.
void write_traces(const std::string& dir, const TraceSet& set);
// Reads dir/<prefix>.<i>.et for i = 0, 1, ... (one prefix, no rank missing) and comm_group.json
// when present; checks them with validate().
TraceSet read_traces(const std::string& dir);

// What the replay relies on: unique node ids and dependencies within each file, node types it
// runs with their attributes, peers that are ranks, process groups that exist and hold the rank.
// Throws InputError naming the file (TraceSet::sources) and the node.
void validate(const TraceSet& set);

}  // namespace hetsim::chakra
