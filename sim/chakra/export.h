// A hetsim training job as Chakra execution traces: one trace per GPU (every tensor-parallel
// rank of every group), its program as nodes whose dependencies say what the replay's program
// order and streams say.
#pragma once

#include <vector>

#include "sim/chakra/trace.h"
#include "sim/workload/job/training_job.h"

namespace hetsim::chakra {

struct Exported {
  TraceSet traces;
  std::vector<platform::GpuId> gpu_of_rank;  // rank -> the GPU it ran on (ascending)
};

// Kernel segments become COMP_NODEs; tensor-parallel, data-parallel and tied-embedding
// collectives COMM_COLL_NODEs in a process group of their ranks; pipeline transfers
// COMM_SEND_NODE / COMM_RECV_NODE pairs, one per tensor-parallel slice; a convolutional
// network's halo exchanges (domain parallelism on a grid plan) a send and a receive with each
// neighbour, and a domain-parallel layer's gradients one collective over every rank of the grid.
// A node depends on the
// last blocking node before it and on the asynchronous ones a wait in between waited for; a
// data-parallel collective also on the one issued before it (one data-parallel stream).
// Calibrated collective times (CommTemplate::measured) are not carried: the traces' collectives
// are sized, and replay-chakra runs them over the network.
Exported export_job(const workload::TrainingJob& job);

}  // namespace hetsim::chakra
