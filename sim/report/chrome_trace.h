// A Chrome trace (JSON, opens in Perfetto) of a replayed iteration: a process per node, a
// thread per GPU stream (compute, tensor-parallel, data-parallel), slices named by op, layer and
// micro-batch, pipeline transfers as async slices joined by flow arrows. Filters keep traces of
// thousands of GPUs usable.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "sim/workload/replay/replay.h"

namespace hetsim::report {

struct TraceFilter {
  std::vector<bool> devices;        // by GPU id; empty: all
  std::vector<bool> micro_batches;  // by micro-batch; empty: all
};

// Devices "0-7,64" and micro-batches "0-3"; empty text: the defaults (all devices up to 64 GPUs,
// else node 0's; all micro-batches). A selection beyond the cluster's GPUs or beyond
// `micro_batch_count` (the most micro-batches of any replica) throws InputError naming the valid
// range: it would otherwise give an empty trace.
TraceFilter make_trace_filter(const platform::Cluster& c, const std::string& devices,
                              const std::string& micro_batches,
                              uint32_t micro_batch_count = 1 << 20);

// A trace's path must be a file in an existing folder: found before a long simulation, not
// after it. `option` names the flag or argument in the error (InputError).
void check_trace_path(const std::string& path, const std::string& option);
// The most micro-batches a replica of the plan runs (make_trace_filter's count).
uint32_t most_micro_batches(const workload::Plan& plan);

class ChromeTrace : public workload::ReplayObserver {
 public:
  explicit ChromeTrace(TraceFilter f) : filter_(std::move(f)) {}
  void on_compute(const workload::TrainingJob&, uint32_t copy, const workload::Task& t, Time start,
                  Time end) override;
  void on_collective(const workload::TrainingJob&, uint32_t copy, const char* stream,
                     const std::string& name, const workload::Task& t, Time start,
                     Time end) override;
  void on_transfer(const workload::TrainingJob&, uint32_t from, uint32_t to,
                   const workload::Task& t, Time start, Time end) override;
  void write(std::ostream& out, const workload::TrainingJob& job);
  size_t events() const { return written_; }

 private:
  struct Record {
    uint8_t kind;  // 0 compute, 1 tp, 2 dp, 3 transfer
    uint32_t copy, to;
    workload::Task task;
    Time start, end;
    std::string name;
  };
  bool keep_mb(uint32_t mb) const;
  TraceFilter filter_;
  std::vector<Record> records_;
  size_t written_ = 0;
};

}  // namespace hetsim::report
