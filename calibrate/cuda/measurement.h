// One point of the calibration plan (the CSV key columns) and its timing summary (the CSV
// timing columns); calibrate/README.md "CSV interchange" defines both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetsim::calibrate::cuda {

// The key columns: kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,
// nodes.
// Unused fields stay 0 (or "" for text).
struct Key {
  std::string kind;   // gemm, attention, memory, collective, copy
  std::string dtype;  // fp32, tf32, fp16, bf16, fp8 (memory kernels: the element type)
  std::string name;   // memory kernel, collective op or copy direction
  std::int64_t m = 0, n = 0, k = 0, batch = 0;
  std::int64_t heads = 0, seq = 0, head_dim = 0;
  int causal = 0, backward = 0;
  std::int64_t bytes = 0;  // bytes moved (memory, copy) or the nccl-tests size (collective)
  std::int64_t ranks = 0;
  std::int64_t nodes = 0;  // collective: the nodes the ranks span (1 inside a node)

  // The 15 key columns, comma-separated, exactly as written to the CSV (the resume key).
  std::string csv() const;
  // A short human label for progress lines.
  std::string label() const;
};

struct Stats {
  double median_s = 0, p10_s = 0, p90_s = 0;
  int repetitions = 0;
  // The implementation measured, for a kind that has several (attention: "cudnn" or "unfused");
  // it becomes the key's name column. Empty for the others.
  std::string impl;
};

// A planned measurement with the planner's guess of one kernel's duration, used only to budget
// the run and to print an ETA.
struct PlanItem {
  Key key;
  double estimate_s = 0;
  double setup_s = 0;  // one-off work before the point is timed (a cuDNN plan to build)
};

inline constexpr const char* kCsvHeader =
    "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,nodes,"
    "median_s,p10_s,p90_s,repetitions";

// Linear-interpolation percentiles (numpy's default) of the samples; samples is reordered.
Stats summarize(std::vector<double>& samples_s);

}  // namespace hetsim::calibrate::cuda
