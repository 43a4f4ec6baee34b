// One point of the calibration plan (the CSV key columns) and its timing summary (the CSV
// timing columns); calibrate/README.md "CSV interchange" defines both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetsim::calibrate::cuda {

// The key columns: kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,
// nodes,conv_n,conv_c,conv_h,conv_w,conv_k,conv_r,conv_s,conv_stride,conv_pad_h,conv_pad_w.
// Unused fields stay 0 (or "" for text).
struct Key {
  std::string kind;   // gemm, attention, memory, collective, copy, conv
  std::string dtype;  // fp32, tf32, fp16, bf16, fp8 (memory kernels: the element type)
  std::string name;   // memory kernel, collective op, copy direction or conv pass
  std::int64_t m = 0, n = 0, k = 0, batch = 0;
  std::int64_t heads = 0, seq = 0, head_dim = 0;
  int causal = 0, backward = 0;
  std::int64_t bytes = 0;  // bytes moved (memory, copy) or the nccl-tests size (collective)
  std::int64_t ranks = 0;
  std::int64_t nodes = 0;  // collective: the nodes the ranks span (1 inside a node)
  // conv (NCHW sizes, whatever the layout measured): n images of c x h x w, k filters of r x s,
  // one stride and padding per axis; the pass (forward, data_grad, weight_grad) is the name.
  std::int64_t conv_n = 0, conv_c = 0, conv_h = 0, conv_w = 0, conv_k = 0, conv_r = 0, conv_s = 0,
               conv_stride = 0, conv_pad_h = 0, conv_pad_w = 0;

  // The 25 key columns, comma-separated, exactly as written to the CSV (the resume key).
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
    "conv_n,conv_c,conv_h,conv_w,conv_k,conv_r,conv_s,conv_stride,conv_pad_h,conv_pad_w,"
    "median_s,p10_s,p90_s,repetitions";
// The header before the conv_* columns: a CSV of an earlier run is rewritten to kCsvHeader
// (its rows with conv_* 0) when resumed.
inline constexpr const char* kCsvHeaderWithoutConv =
    "kind,dtype,name,m,n,k,batch,heads,seq,head_dim,causal,backward,bytes,ranks,nodes,"
    "median_s,p10_s,p90_s,repetitions";

// Linear-interpolation percentiles (numpy's default) of the samples; samples is reordered.
Stats summarize(std::vector<double>& samples_s);

}  // namespace hetsim::calibrate::cuda
