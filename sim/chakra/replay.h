// Replays a directory of Chakra traces over a hetsim cluster: rank i on GPU i, compute nodes for
// their duration (or their roofline) on one compute stream per rank, CPU operators on one host
// thread beside it, tensors loaded and stored on a copy engine, collectives as hetsim's collectives
// (flows) among the ranks of their process group once every member has reached them, sends and
// receives as flows over the route between the two GPUs. Communication runs beside compute, as
// on NCCL's streams; a node starts when every node it depends on is done.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/chakra/trace.h"
#include "sim/core/time.h"
#include "sim/platform/cluster.h"

namespace hetsim::chakra {

struct RankTimes {
  Time compute;  // busy on the GPU's compute stream
  Time cpu;      // busy running CPU operators (is_cpu_op)
  Time copy;     // busy loading and storing tensors over PCIe (MEM_LOAD_NODE, MEM_STORE_NODE)
  Time finish;   // the last node done
};

struct ReplayResult {
  Time iteration;  // the last node of any rank done
  std::vector<RankTimes> ranks;
  uint64_t nodes = 0, collectives = 0, transfers = 0;
  uint64_t events = 0, flows = 0;
};

// Throws InputError (naming the file) for more ranks than GPUs, collectives whose members
// disagree on type or size, and a replay that stalls: a collective some member never reaches,
// a receive without its send, a dependency cycle.
ReplayResult replay(const TraceSet& traces, const platform::Cluster& cluster);

}  // namespace hetsim::chakra
