// A study across processes: under `mpirun -np N hetsim sweep STUDY.yaml`, rank 0 hands out the
// runs its store lacks, one at a time to whichever rank asks, and commits each record as it comes
// back (the store, the CSV and the report stay rank 0's alone); ranks 1..N-1 simulate. The same
// study file runs the same way on one process (sim/study/runner.h) and gives the same store.
#pragma once

#include <string>

#include "sim/study/runner.h"

namespace hetsim::study {

// Whether this process was started by mpirun with other ranks (Open MPI's or a PMI launcher's
// environment); MPI is initialised only then.
bool launched_by_mpirun();

// A record as a string and back, for sending between ranks (JSON; doubles round-trip exactly).
std::string encode_record(const RunRecord& r);
RunRecord decode_record(const std::string& text);

// Rank 0: the runs the store does not hold, handed out to the other ranks; returns when every
// rank has stopped. Other ranks: `store` is null; they simulate what they are given. Every rank
// must have loaded the same study. Needs at least two ranks.
RunnerSummary run_study_mpi(const Study& study, Store* store, const RunnerOptions& options);

}  // namespace hetsim::study
