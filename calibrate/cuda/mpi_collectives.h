// NCCL collectives across nodes: hetsim-calibrate-cuda launched under MPI with one rank per GPU
// (`mpirun -np 16 --map-by ppr:8:node hetsim-calibrate-cuda --out coll.csv`). Each rank drives
// its node-local GPU; rank 0 writes the CSV, with `ranks` the world size and `nodes` the hosts
// the ranks span. Only collectives are measured this way: every other kind is a single GPU's,
// measured by the single-process run on each node type.
#pragma once

#include "options.h"

namespace hetsim::calibrate::cuda {

// The world size the launcher announces in the environment (Open MPI, MPICH/PMI, PMIx, Slurm);
// 1 when the program was not started by an MPI launcher.
int launcher_world_size();

// Whether this build can run under MPI (MPI was found when it was configured).
bool built_with_mpi();

// Runs the collective plan across every rank; returns the exit status. Only in an MPI build.
int run_mpi_collectives(const Options& options);

}  // namespace hetsim::calibrate::cuda
