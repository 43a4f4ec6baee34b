// The CPU calibration backend: OpenBLAS GEMMs (fp32 and bf16), convolutions (im2col and
// OpenBLAS), the memory-bound kernels, and MPI collectives between the processes of an `mpirun`,
// measured with warm-up, a cache flush between repetitions and median / p10 / p90 over enough
// repetitions, into the HDF5 database. Every measurement is appended to a journal
// (DB.journal.csv) as it is taken, so an interrupted run keeps what it measured (the database is
// written from it) and the same command resumes.
#pragma once

#include <string>
#include <vector>

#include "sim/workload/model/ops.h"

namespace hetsim::calibrate::cpu {

struct Options {
  std::string out;               // database path
  bool quick = false;            // a small grid for tests
  std::vector<std::string> ops;  // gemm, attention, memory, collective, conv; empty: all
  // A shapes file (hetsim calibrate shapes): its GEMMs and attention calls measured besides the
  // grid, so that a job of those shapes is costed from its own kernels.
  std::string shapes;
};

// The convolution grid the backend measures (each shape in its three passes; --quick: 3 layers
// at batch 1).
std::vector<workload::ConvShape> conv_grid(bool quick);

// Returns 0 when complete, 1 when interrupted (the database then holds what was measured).
int run(const Options& o);

}  // namespace hetsim::calibrate::cpu
