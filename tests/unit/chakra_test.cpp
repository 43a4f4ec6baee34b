// Chakra traces (sim/chakra/): a hand-written two-rank trace replays to the sum its dependencies
// and hetsim's collective and transfer models give; what is written reads back node for node
// (a hand trace with every attribute, and an exported training job); broken files and traces
// that cannot finish are InputErrors that name the file and what was expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate/cost_models.h"
#include "sim/chakra/et_def.pb.h"
#include "sim/chakra/et_io.h"
#include "sim/chakra/export.h"
#include "sim/chakra/replay.h"
#include "sim/core/error.h"
#include "sim/network/collective_runner.h"
#include "sim/network/protocol.h"
#include "sim/study/run.h"
#include "sim/workload/cost/cost_model.h"
#include "sim/workload/replay/replay.h"

namespace hetsim::chakra {
namespace {

namespace fs = std::filesystem;
const std::string kSource = HETSIM_SOURCE_DIR;

// One DGX A100 node: 8 GPUs on NVSwitch.
platform::Cluster dgx_a100() {
  config::ClusterOptions o;
  o.nodes = 1;
  return platform::Cluster(config::load_cluster("dgx-a100", o));
}

Node compute(uint64_t id, uint64_t micros, std::vector<uint64_t> deps = {}) {
  Node n;
  n.id = id;
  n.name = "compute" + std::to_string(id);
  n.type = NodeType::compute;
  n.duration_micros = micros;
  n.data_deps = std::move(deps);
  return n;
}

Node allreduce(uint64_t id, uint64_t bytes, std::vector<uint64_t> deps, std::string pg = "0") {
  Node n;
  n.id = id;
  n.name = "allreduce";
  n.type = NodeType::collective;
  n.comm_type = CommType::all_reduce;
  n.comm_size = bytes;
  n.pg_name = std::move(pg);
  n.data_deps = std::move(deps);
  return n;
}

Node p2p(uint64_t id, NodeType type, int64_t src, int64_t dst, uint64_t bytes, int64_t tag,
         std::vector<uint64_t> deps) {
  Node n;
  n.id = id;
  n.name = type == NodeType::send ? "send" : "recv";
  n.type = type;
  n.comm_src = src;
  n.comm_dst = dst;
  n.comm_size = bytes;
  n.comm_tag = tag;
  n.data_deps = std::move(deps);
  return n;
}

constexpr uint64_t kAllReduceBytes = 64ull << 20;  // 64 MiB
constexpr uint64_t kSendBytes = 16ull << 20;       // 16 MiB

// Rank 0: compute 100 us, all-reduce with rank 1, send to rank 1.
// Rank 1: compute 100 us, the same all-reduce, receive from rank 0, compute 50 us.
TraceSet two_ranks() {
  TraceSet t;
  t.ranks.resize(2);
  t.ranks[0].nodes = {compute(0, 100), allreduce(1, kAllReduceBytes, {0}),
                      p2p(2, NodeType::send, 0, 1, kSendBytes, 7, {1})};
  t.ranks[1].nodes = {compute(0, 100), allreduce(1, kAllReduceBytes, {0}),
                      p2p(2, NodeType::recv, 0, 1, kSendBytes, 7, {1}), compute(3, 50, {2})};
  t.groups["0"] = {0, 1};
  return t;
}

TEST(ChakraReplay, TwoRanksTakeComputePlusAllReducePlusTransferPlusCompute) {
  const platform::Cluster c = dgx_a100();
  // The all-reduce alone on the idle network, as the training replay asks for it (no host
  // launch: kernels queued ahead on the stream).
  network::CollectiveRequest req;
  req.op = network::Op::allreduce;
  req.bytes = static_cast<double>(kAllReduceBytes);
  req.ranks = {0, 1};
  req.host_launch = false;
  const Time allreduce_time = network::simulate_collective(c, req).time;
  // The transfer: one flow on the GPU 0 -> 1 route, after its latency, at the route's
  // bottleneck capacity (nothing else moves then).
  const auto route = c.route(0, 1);
  const double latency_s = (network::step_latency(network::Algorithm::direct,
                                                  network::Protocol::simple, c.route_kind(route)) +
                            c.route_latency(route))
                               .seconds();
  const double transfer_s = latency_s + static_cast<double>(kSendBytes) / c.route_capacity(route);
  const double expected_s = 100e-6 + allreduce_time.seconds() + transfer_s + 50e-6;

  const ReplayResult r = replay(two_ranks(), c);
  std::printf(
      "  compute 100 us + all-reduce %.3f us + transfer %.3f us (latency %.3f us, %.1f "
      "GB/s) + compute 50 us = %.3f us expected, %.3f us replayed\n",
      allreduce_time.seconds() * 1e6, transfer_s * 1e6, latency_s * 1e6,
      c.route_capacity(route) * 1e-9, expected_s * 1e6, r.iteration.seconds() * 1e6);
  EXPECT_NEAR(r.iteration.seconds(), expected_s, 1e-11);  // a few picoseconds of rounding
  // Rank 0 is done when its send has arrived, rank 1 after its last compute.
  EXPECT_NEAR(r.ranks[0].finish.seconds(), expected_s - 50e-6, 1e-11);
  EXPECT_EQ(r.ranks[0].compute, Time::us(100));
  EXPECT_EQ(r.ranks[1].compute, Time::us(150));
  EXPECT_EQ(r.collectives, 1u);
  EXPECT_EQ(r.transfers, 1u);
}

TEST(ChakraReplay, ComputeNodesShareOneStreamPerRankWhileCommunicationOverlaps) {
  // Two independent 100 us compute nodes run one after the other; an all-reduce with no
  // dependencies runs beside them.
  TraceSet t;
  t.ranks.resize(2);
  for (auto& r : t.ranks)
    r.nodes = {compute(0, 100), compute(1, 100), allreduce(2, 1 << 20, {}, "0")};
  t.groups["0"] = {0, 1};
  const ReplayResult r = replay(t, dgx_a100());
  EXPECT_EQ(r.ranks[0].compute, Time::us(200));
  EXPECT_EQ(r.iteration, Time::us(200));  // a 1 MiB all-reduce on NVLink is done well before
}

TEST(ChakraReplay, ExactPicosecondDurationsWinOverMicroseconds) {
  TraceSet t;
  t.ranks.resize(1);
  t.ranks[0].nodes = {compute(0, 2)};
  t.ranks[0].nodes[0].duration_ps = 1500000;  // 1.5 us; Chakra's field says 2
  EXPECT_EQ(replay(t, dgx_a100()).iteration, Time::ps(1500000));
}

TEST(ChakraReplay, ACollectiveAMemberNeverReachesStallsNamingTheFileAndTheMissingRank) {
  TraceSet t = two_ranks();
  t.sources = {"dir/et.0.et", "dir/et.1.et"};
  t.ranks[1].nodes = {compute(0, 100)};  // rank 1 never joins the all-reduce
  try {
    replay(t, dgx_a100());
    FAIL() << "expected a stall";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dir: replay stalled at 0.100000 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("dir/et.0.et: node 1 \"allreduce\" (COMM_COLL_NODE): collective #0 of group "
                     "\"0\" waits for ranks 1 (has no such collective) that never reach it"),
              std::string::npos)
        << m;
  }
}

TEST(ChakraReplay, ARecvWithoutItsSendStalls) {
  TraceSet t = two_ranks();
  t.sources = {"dir/et.0.et", "dir/et.1.et"};
  t.ranks[0].nodes.pop_back();  // no send
  try {
    replay(t, dgx_a100());
    FAIL() << "expected a stall";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dir/et.1.et: node 2 \"recv\" (COMM_RECV_NODE): no "
                                         "COMM_SEND_NODE in rank 0's trace matches it (comm_src "
                                         "0, comm_tag 7)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChakraReplay, MoreRanksThanGpusIsBadInput) {
  TraceSet t;
  t.ranks.resize(9);
  t.sources.assign(9, "dir/et.x.et");
  try {
    replay(t, dgx_a100());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "dir: 9 ranks but the cluster has 8 GPUs (rank i runs on GPU i; expected at "
                 "most 8 trace files)");
  }
}

TEST(ChakraReplay, MembersThatDisagreeOnTheCollectiveAreBadInput) {
  TraceSet t = two_ranks();
  t.ranks[1].nodes[1].comm_size = 1;
  EXPECT_THROW(replay(t, dgx_a100()), InputError);
}

// ---- files ----------------------------------------------------------------------------------
TEST(ChakraFiles, AHandTraceWithEveryAttributeReadsBackNodeForNode) {
  Trace t;
  t.nodes = {compute(0, 100), allreduce(1, 123456789, {0}),
             p2p(2, NodeType::send, 0, 1, 4096, 3, {1}), p2p(3, NodeType::recv, 1, 0, 8, 4, {})};
  t.nodes[0].duration_ps = 100000123;
  t.nodes[0].num_ops = 1ull << 40;
  t.nodes[0].tensor_size = 1ull << 33;
  t.nodes[0].ctrl_deps = {};
  t.nodes[3].ctrl_deps = {0, 2};
  t.nodes[3].is_cpu_op = true;
  Node meta;
  meta.id = 4;
  meta.type = NodeType::metadata;
  meta.name = "meta";
  t.nodes.push_back(meta);
  std::stringstream s;
  write_trace(s, t, "mem");
  EXPECT_EQ(read_trace(s, "mem"), t);
}

TEST(ChakraFiles, TheFramingIsAVarintSizeThenTheMessage) {
  Trace t;
  t.version = "0.0.4";
  std::stringstream s;
  write_trace(s, t, "mem");
  // GlobalMetadata{version = "0.0.4"}: field 1, wire type 2 (0x0a), length 5, the bytes; its
  // size, 7, first.
  EXPECT_EQ(s.str(), std::string("\x07\x0a\x05"
                                 "0.0.4"));
}

std::string read_error(const std::string& bytes) {
  std::stringstream s(bytes);
  try {
    read_trace(s, "x.0.et");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A message as Chakra frames it: its size as a varint, then its bytes.
std::string framed(const google::protobuf::Message& m) {
  const std::string body = m.SerializeAsString();
  std::string out;
  for (uint64_t n = body.size();; n >>= 7) {
    if (n < 0x80) {
      out += static_cast<char>(n);
      break;
    }
    out += static_cast<char>((n & 0x7f) | 0x80);
  }
  return out + body;
}

// symbolic_tensor_graph (ASTRA-sim's trace generator) writes is_cpu_op as an integer: 0 and 1
// read as false and true, anything else is refused naming the node and the value.
TEST(ChakraFiles, IsCpuOpAsTheIntegerZeroOrOneIsRead) {
  ChakraProtoMsg::GlobalMetadata meta;
  meta.set_version("0.0.4");
  auto node = [](uint64_t id, int64_t cpu) {
    ChakraProtoMsg::Node n;
    n.set_id(id);
    n.set_name("gemm" + std::to_string(id));
    n.set_type(ChakraProtoMsg::COMP_NODE);
    n.set_duration_micros(10);
    ChakraProtoMsg::AttributeProto* a = n.add_attr();
    a->set_name("is_cpu_op");
    a->set_int64_val(cpu);
    return n;
  };
  std::stringstream s(framed(meta) + framed(node(0, 0)) + framed(node(1, 1)));
  const Trace t = read_trace(s, "stg.0.et");
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_FALSE(t.nodes[0].is_cpu_op);
  EXPECT_TRUE(t.nodes[1].is_cpu_op);
  // And it replays: two such ranks, each its kernel and its CPU operator side by side.
  TraceSet set;
  set.ranks = {t, t};
  const ReplayResult r = replay(set, dgx_a100());
  EXPECT_EQ(r.iteration, Time::us(10));
  EXPECT_EQ(r.ranks[1].compute, Time::us(10));
  EXPECT_EQ(r.ranks[1].cpu, Time::us(10));
  EXPECT_EQ(read_error(framed(meta) + framed(node(7, 2))),
            "x.0.et: node 7 \"gemm7\": attribute is_cpu_op is 2 (expected a bool, or the integer "
            "0 or 1)");
}

// symbolic_tensor_graph's Chakra 0.0.4 backend: a GlobalMetadata naming its schema, compute
// nodes with their work (num_ops, tensor_size as uint64) and no duration, collectives with
// comm_size as uint64 and involved_dim as a bool list, no pg_name (every rank), tensors loaded
// from host memory (MEM_LOAD_NODE). The work takes its roofline on the GPU's datasheet (A100:
// 312 TFLOP/s at 16 bits, 2.04 TB/s), the load its bytes over PCIe.
TEST(ChakraFiles, SymbolicTensorGraphTracesReplayFromTheirWork) {
  using ChakraProtoMsg::AttributeProto;
  ChakraProtoMsg::GlobalMetadata meta;
  AttributeProto* schema = meta.add_attr();
  schema->set_name("schema");
  schema->set_string_val("symbolic_tensor_network");
  auto uint64_attr = [](ChakraProtoMsg::Node& n, const char* name, uint64_t v) {
    AttributeProto* a = n.add_attr();
    a->set_name(name);
    a->set_uint64_val(v);
  };
  auto node = [](uint64_t id, ChakraProtoMsg::NodeType type, std::vector<uint64_t> deps) {
    ChakraProtoMsg::Node n;
    n.set_id(id);
    n.set_name("n" + std::to_string(id));
    n.set_type(type);
    for (uint64_t d : deps) n.add_data_deps(d);
    return n;
  };
  const platform::Cluster c = dgx_a100();
  const config::GpuProfile& a100 = *c.gpu(0).profile;
  const double peak = workload::peak_flops(a100, workload::Precision::fp16);
  const double pcie = c.node_type(0).pcie.bandwidth_Bps;
  // A GEMM of 1 ms of FLOPs (its bytes take less), an elementwise op of 1 ms of bytes, a load of
  // 1 ms over PCIe beside them, then an all-reduce after all three.
  ChakraProtoMsg::Node gemm = node(0, ChakraProtoMsg::COMP_NODE, {});
  uint64_attr(gemm, "num_ops", static_cast<uint64_t>(peak * 1e-3));
  uint64_attr(gemm, "tensor_size", 1 << 20);
  ChakraProtoMsg::Node add = node(1, ChakraProtoMsg::COMP_NODE, {0});
  uint64_attr(add, "num_ops", 1000);
  uint64_attr(add, "tensor_size", static_cast<uint64_t>(a100.memory_bandwidth_Bps * 1e-3));
  ChakraProtoMsg::Node load = node(2, ChakraProtoMsg::MEM_LOAD_NODE, {});
  uint64_attr(load, "tensor_size", static_cast<uint64_t>(pcie * 1e-3));
  ChakraProtoMsg::Node ar = node(3, ChakraProtoMsg::COMM_COLL_NODE, {1, 2});
  uint64_attr(ar, "comm_size", 1 << 20);
  AttributeProto* type = ar.add_attr();
  type->set_name("comm_type");
  type->set_int64_val(ChakraProtoMsg::ALL_REDUCE);
  AttributeProto* dims = ar.add_attr();
  dims->set_name("involved_dim");
  for (int d = 0; d < 3; ++d) dims->mutable_bool_list()->add_values(true);
  std::stringstream s(framed(meta) + framed(gemm) + framed(add) + framed(load) + framed(ar));
  const Trace t = read_trace(s, "workload.0.et");
  TraceSet set;
  set.ranks = {t, t};
  const ReplayResult r = replay(set, c);
  const Time compute =
      Time::from_seconds_ceil(static_cast<double>(static_cast<uint64_t>(peak * 1e-3)) / peak) +
      Time::from_seconds_ceil(
          static_cast<double>(static_cast<uint64_t>(a100.memory_bandwidth_Bps * 1e-3)) /
          a100.memory_bandwidth_Bps);
  EXPECT_EQ(r.ranks[0].compute, compute);
  EXPECT_EQ(r.ranks[0].copy, Time::from_seconds_ceil(
                                 static_cast<double>(static_cast<uint64_t>(pcie * 1e-3)) / pcie));
  EXPECT_EQ(r.collectives, 1u);
  EXPECT_GT(r.iteration, compute);  // the all-reduce after the 2 ms of compute
  EXPECT_LT(r.iteration, compute + Time::us(100));
}

// The PyTorch converter's conventions: CPU operators (is_cpu_op true, aten ops with their host
// durations) beside the GPU kernels they launch, process groups named by string, and the
// attributes hetsim does not use (rf_id, op_schema, ...) passed over.
TEST(ChakraFiles, PyTorchConverterTracesRunTheirCpuOperatorsBesideTheKernels) {
  ChakraProtoMsg::GlobalMetadata meta;
  meta.set_version("0.0.4");
  auto node = [](uint64_t id, bool cpu, uint64_t micros, std::vector<uint64_t> deps) {
    ChakraProtoMsg::Node n;
    n.set_id(id);
    n.set_name(cpu ? "aten::linear" : "sm80_xmma_gemm");
    n.set_type(ChakraProtoMsg::COMP_NODE);
    n.set_duration_micros(micros);
    for (uint64_t d : deps) n.add_ctrl_deps(d);
    ChakraProtoMsg::AttributeProto* a = n.add_attr();
    a->set_name("is_cpu_op");
    a->set_bool_val(cpu);
    a = n.add_attr();
    a->set_name("rf_id");
    a->set_int64_val(static_cast<int64_t>(id) + 100);
    a = n.add_attr();
    a->set_name("op_schema");
    a->set_string_val("aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
    return n;
  };
  // Host op 0 (5 us) launches kernel 1 (20 us); host op 2 (5 us) runs while kernel 1 does and
  // launches kernel 3 (20 us): 5 + 20 + 20 us, the host's second op hidden.
  std::stringstream s(framed(meta) + framed(node(0, true, 5, {})) +
                      framed(node(1, false, 20, {0})) + framed(node(2, true, 5, {0})) +
                      framed(node(3, false, 20, {1, 2})));
  const Trace t = read_trace(s, "kineto.0.et");
  TraceSet set;
  set.ranks = {t};
  const ReplayResult r = replay(set, dgx_a100());
  EXPECT_EQ(r.iteration, Time::us(45));
  EXPECT_EQ(r.ranks[0].compute, Time::us(40));
  EXPECT_EQ(r.ranks[0].cpu, Time::us(10));
}

TEST(ChakraFiles, TruncatedEmptyAndForeignFilesAreBadInput) {
  Trace t;
  t.nodes = {compute(0, 100)};
  std::stringstream s;
  write_trace(s, t, "mem");
  const std::string whole = s.str();
  EXPECT_EQ(read_error(whole.substr(0, whole.size() - 2)),
            "x.0.et: truncated or not a Chakra trace: message 1 at byte 8 declares " +
                std::to_string(whole.size() - 9) + " bytes but " +
                std::to_string(whole.size() - 11) + " are left");
  EXPECT_EQ(read_error(""),
            "x.0.et: empty (expected a Chakra trace: a GlobalMetadata message, then Node "
            "messages)");
  EXPECT_EQ(read_error("hello, world\n").substr(0, 43),
            "x.0.et: truncated or not a Chakra trace: me");
}

TEST(ChakraFiles, ADependencyOnAMissingNodeIsBadInput) {
  Trace t;
  t.nodes = {compute(0, 100), compute(1, 100, {99})};
  std::stringstream s;
  write_trace(s, t, "mem");
  EXPECT_EQ(read_error(s.str()),
            "x.0.et: node 1 \"compute1\": data_deps names node 99, which is not in the file");
}

TEST(ChakraFiles, WritingOverAnotherJobsLargerTraceSetIsRefused) {
  const fs::path dir = fs::temp_directory_path() / "hetsim_chakra_unit_stale";
  fs::remove_all(dir);
  TraceSet three;
  three.ranks.resize(3);
  write_traces(dir.string(), three);
  TraceSet two;
  two.ranks.resize(2);
  try {
    write_traces(dir.string(), two);
    FAIL() << "expected the stale et.2.et to be refused";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": holds " + (dir / "et.2.et").string() +
                                         ", a trace of another job (2 ranks here; expected an "
                                         "empty folder or this job's)");
  }
  fs::remove_all(dir);
}

TEST(ChakraFiles, AnyOnePrefixIsRead) {
  // Chakra's tools and ASTRA-sim name a job's files <prefix>.<rank>.et for any prefix.
  const fs::path dir = fs::temp_directory_path() / "hetsim_chakra_unit_prefix";
  fs::remove_all(dir);
  TraceSet t = two_ranks();
  write_traces(dir.string(), t);
  for (int r = 0; r < 2; ++r) {
    fs::rename(dir / ("et." + std::to_string(r) + ".et"),
               dir / ("llama.v2." + std::to_string(r) + ".et"));
  }
  std::ofstream(dir / "notes.txt") << "not a trace\n";
  const TraceSet back = read_traces(dir.string());
  EXPECT_EQ(back.ranks, t.ranks);
  EXPECT_EQ(back.groups, t.groups);
  EXPECT_EQ(back.sources[1], (dir / "llama.v2.1.et").string());
  fs::remove_all(dir);
}

TEST(ChakraReplay, TracesMadeInMemoryAreCheckedAsFilesAre) {
  TraceSet t = two_ranks();
  t.ranks[0].nodes[1].comm_size.reset();
  try {
    replay(t, dgx_a100());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "rank 0: node 1 \"allreduce\": COMM_COLL_NODE without attribute comm_size");
  }
}

// ---- export -------------------------------------------------------------------------------
struct Job {
  study::RunInputs inputs;
  calibrate::CostModels costs{"", ""};
  workload::TrainingJob job;
  explicit Job(const study::RunSpec& spec)
      : inputs(spec),
        job(workload::build_training_job(inputs.model, inputs.plan, inputs.cluster, costs.get())) {}
};

study::RunSpec small_spec() {
  study::RunSpec spec;
  spec.model = "gpt3-125m";
  spec.cluster = "dgx-a100";
  spec.cluster_options.nodes = 1;
  spec.plan = kSource + "/tests/data/plans/chakra_tp2_pp2_dp2.yaml";
  return spec;
}

TEST(ChakraExport, EveryGpuGetsATraceAndTheFilesReadBackNodeForNode) {
  const Job j(small_spec());
  const Exported ex = export_job(j.job);
  ASSERT_EQ(ex.traces.ranks.size(), 8u);
  for (uint32_t r = 0; r < 8; ++r) EXPECT_EQ(ex.gpu_of_rank[r], r);
  const fs::path dir = fs::temp_directory_path() / "hetsim_chakra_unit_roundtrip";
  fs::remove_all(dir);
  write_traces(dir.string(), ex.traces);
  const TraceSet back = read_traces(dir.string());
  ASSERT_EQ(back.ranks.size(), ex.traces.ranks.size());
  for (size_t r = 0; r < back.ranks.size(); ++r) {
    ASSERT_EQ(back.ranks[r].nodes.size(), ex.traces.ranks[r].nodes.size());
    for (size_t i = 0; i < back.ranks[r].nodes.size(); ++i)
      EXPECT_EQ(back.ranks[r].nodes[i], ex.traces.ranks[r].nodes[i]) << "rank " << r << " " << i;
  }
  EXPECT_EQ(back.groups, ex.traces.groups);
  EXPECT_EQ(back.sources[3], (dir / "et.3.et").string());
  fs::remove_all(dir);
}

TEST(ChakraExport, TheTracesCarryEveryKernelSegmentAndEveryKindOfCommunication) {
  // DeepSpeed's profile: its pipeline all-reduces the tied embedding between the end stages.
  study::RunSpec spec = small_spec();
  spec.plan_sets = {"framework=deepspeed"};
  const Job j(spec);
  const Exported ex = export_job(j.job);
  // Rank 0 is tensor-parallel rank 0 of replica 0's first stage: group 0.
  const workload::StageCopy& g = j.job.copies[0];
  size_t computes = 0;
  Time exported, segments;
  std::map<NodeType, size_t> count;
  for (const Node& n : ex.traces.ranks[0].nodes) {
    ++count[n.type];
    if (n.type == NodeType::compute) exported += Time::ps(static_cast<int64_t>(*n.duration_ps));
  }
  for (const workload::Task& t : g.program) {
    if (t.kind == workload::TaskKind::compute) {
      ++computes;
      segments += g.segments[t.index].duration;
    }
  }
  EXPECT_EQ(count[NodeType::compute], computes);
  EXPECT_EQ(exported, segments);  // every segment's duration, exactly
  EXPECT_GT(count[NodeType::collective], 0u);
  EXPECT_GT(count[NodeType::send], 0u);
  EXPECT_GT(count[NodeType::recv], 0u);
  EXPECT_EQ(std::count_if(ex.traces.ranks[0].nodes.begin(), ex.traces.ranks[0].nodes.end(),
                          [](const Node& n) { return n.name == "tied.embedding.grads"; }),
            1);
  // The groups: 4 tensor-parallel pairs, 4 data-parallel pairs, 4 tied-embedding pairs.
  EXPECT_EQ(ex.traces.groups.size(), 12u);
  for (const auto& [name, members] : ex.traces.groups) EXPECT_EQ(members.size(), 2u) << name;
}

TEST(ChakraExport, TheTracesReplayToTheTrainingReplaysTimeAndWithinRoundingInMicroseconds) {
  const Job j(small_spec());
  workload::ReplayOptions every_replica;
  every_replica.exact = true;
  const Time training = workload::replay(j.job, nullptr, every_replica).iteration;
  Exported ex = export_job(j.job);
  const Time chakra = replay(ex.traces, j.inputs.cluster).iteration;
  // Chakra's own durations only: each kernel segment rounded to a whole microsecond.
  for (Trace& t : ex.traces.ranks)
    for (Node& n : t.nodes) n.duration_ps.reset();
  const Time micros = replay(ex.traces, j.inputs.cluster).iteration;
  std::printf(
      "  training replay %.6f ms, Chakra replay %.6f ms, with microsecond durations "
      "%.6f ms (%+.4f%%)\n",
      training.seconds() * 1e3, chakra.seconds() * 1e3, micros.seconds() * 1e3,
      100 * (micros.seconds() - training.seconds()) / training.seconds());
  EXPECT_EQ(chakra, training);
  EXPECT_NEAR(micros.seconds(), training.seconds(), 1e-3 * training.seconds());
}

TEST(ChakraExport, AsymmetricReplicasReplayToTheTrainingReplaysTime) {
  // Replicas of their own stages, one segment reduced in shards over mixed tensor-parallel
  // degrees: every shard is its own collective among the ranks that hold it.
  study::RunSpec spec = small_spec();
  spec.plan = kSource + "/tests/data/plans/chakra_asymmetric.yaml";
  const Job j(spec);
  ASSERT_TRUE(j.inputs.plan.asymmetric());
  const Time training = workload::replay(j.job).iteration;
  const Exported ex = export_job(j.job);
  ASSERT_EQ(ex.traces.ranks.size(), 4u);
  const Time chakra = replay(ex.traces, j.inputs.cluster).iteration;
  std::printf("  asymmetric: training replay %.6f ms, Chakra replay %.6f ms\n",
              training.seconds() * 1e3, chakra.seconds() * 1e3);
  EXPECT_EQ(chakra, training);
}

// A halo exchange is point-to-point sends timed as pipeline transfers: over three ranks it takes
// what its four sends take as Chakra nodes, at any size (no collective's base latency, and the
// simple protocol even where LL would win a collective's choice).
TEST(ChakraReplay, AHaloExchangeTakesWhatItsSendsAndReceivesTake) {
  for (const uint64_t bytes : {uint64_t{1} << 10, uint64_t{1} << 20, uint64_t{64} << 20}) {
    network::CollectiveRequest req;
    req.op = network::Op::halo;
    req.bytes = static_cast<double>(bytes);
    req.ranks = {0, 1, 2};
    req.host_launch = false;
    const network::CollectivePlan plan = network::plan_collective(dgx_a100(), req);
    EXPECT_EQ(plan.protocol, network::Protocol::simple);
    EXPECT_EQ(plan.start_delay, Time());
    TraceSet t;
    t.ranks.resize(3);
    uint64_t id = 0;
    for (int64_t r = 0; r < 3; ++r) {
      for (const int64_t peer : {r - 1, r + 1}) {
        if (peer < 0 || peer > 2) continue;
        t.ranks[r].nodes.push_back(p2p(id++, NodeType::send, r, peer, bytes, 0, {}));
        t.ranks[peer].nodes.push_back(p2p(id++, NodeType::recv, r, peer, bytes, 0, {}));
      }
    }
    EXPECT_EQ(replay(t, dgx_a100()).iteration, network::simulate_collective(dgx_a100(), req).time)
        << bytes << " bytes";
  }
}

// A convolutional network on a grid: AlexNet as 4 rows x 2 columns on one DGX A100, each
// layer split by model or by domain as the gholami policy chooses. A halo exchange is a send to
// and a receive from each neighbour in the column (1 each at the column's ends, 2 each inside);
// a domain-parallel layer's gradients one all-reduce over all 8 ranks.
study::RunSpec grid_spec(const std::string& cluster, int nodes, int rows, int columns,
                         const std::string& model = "alexnet") {
  study::RunSpec spec;
  spec.model = model;
  spec.cluster = cluster;
  if (nodes > 0) spec.cluster_options.nodes = nodes;
  spec.plan = "grid.yaml";
  spec.plan_text = "grid: {rows: " + std::to_string(rows) +
                   ", columns: " + std::to_string(columns) +
                   "}\nglobal_batch_size: 64\nsplit: gholami\n";
  return spec;
}

TEST(ChakraExport, AGridsHalosAreSendsToEachNeighbourAndReplayToTheTrainingReplaysTime) {
  const Job j(grid_spec("dgx-a100", 1, 4, 2));
  ASSERT_EQ(j.job.copies.size(), 2u);  // one group a column
  const Exported ex = export_job(j.job);
  ASSERT_EQ(ex.traces.ranks.size(), 8u);
  // The halo exchanges and the grid's gradient collectives of column 0, from its program.
  const workload::StageCopy& g = j.job.copies[0];
  size_t exchanges = 0, grid_collectives = 0;
  double halo_bytes = 0;  // what one rank sends one neighbour, over the iteration
  for (const workload::Task& t : g.program) {
    if (t.kind == workload::TaskKind::tp_comm &&
        g.comms[t.index].kind == workload::CommKind::halo) {
      ++exchanges;
      halo_bytes += std::round(g.comms[t.index].bytes);
    }
  }
  for (const workload::DpCollective& dc : g.dp) grid_collectives += dc.grid ? 1 : 0;
  ASSERT_GT(exchanges, 0u);
  ASSERT_GT(grid_collectives, 0u);
  std::vector<uint32_t> everyone(8);
  for (uint32_t r = 0; r < 8; ++r) everyone[r] = r;
  std::string grid_group;
  for (const auto& [name, members] : ex.traces.groups)
    if (members == everyone) grid_group = name;
  ASSERT_FALSE(grid_group.empty()) << "no process group of the whole grid";
  double sent = 0, received = 0;
  for (uint32_t r = 0; r < 8; ++r) {
    const uint32_t k =
        std::find(j.job.copies[r / 4].devices.begin(), j.job.copies[r / 4].devices.end(), r) -
        j.job.copies[r / 4].devices.begin();
    const size_t neighbours = (k == 0 || k == 3) ? 1 : 2;
    size_t sends = 0, recvs = 0, on_grid = 0;
    for (const Node& n : ex.traces.ranks[r].nodes) {
      if (n.type == NodeType::send) {
        ++sends;
        sent += static_cast<double>(*n.comm_size);
        // A neighbour in the same column, one place away.
        EXPECT_EQ(*n.comm_dst / 4, r / 4) << n.name;
        EXPECT_EQ(std::abs(static_cast<int64_t>(*n.comm_dst) - static_cast<int64_t>(r)), 1)
            << n.name;
      }
      if (n.type == NodeType::recv) {
        ++recvs;
        received += static_cast<double>(*n.comm_size);
      }
      if (n.type == NodeType::collective && n.pg_name == grid_group) ++on_grid;
    }
    EXPECT_EQ(sends, exchanges * neighbours) << "rank " << r;
    EXPECT_EQ(recvs, exchanges * neighbours) << "rank " << r;
    EXPECT_EQ(on_grid, grid_collectives) << "rank " << r;
  }
  // Bytes are conserved: each of a column's 3 neighbour pairs exchanges both ways.
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent, 2 * 2 * 3 * halo_bytes);
  workload::ReplayOptions every_replica;
  every_replica.exact = true;
  const Time training = workload::replay(j.job, nullptr, every_replica).iteration;
  const Time chakra = replay(ex.traces, j.inputs.cluster).iteration;
  std::printf("  alexnet 4 x 2: training replay %.6f ms, Chakra replay %.6f ms\n",
              training.seconds() * 1e3, chakra.seconds() * 1e3);
  EXPECT_EQ(chakra, training);
}

TEST(ChakraExport, AGridOnMixedGpusReplaysToTheTrainingReplaysTime) {
  // ResNet-50 on A100 + V100 (2 DGX A100, 4 PCIe V100 nodes of 4): 4 x 8, a column a node or
  // half of one, 3 layers by domain; the A100 and V100 columns are not in step, yet the
  // iteration agrees to the picosecond.
  {
    const Job j(grid_spec("mixed-a100-v100", 0, 4, 8, "resnet50"));
    ASSERT_EQ(j.inputs.plan.layer_splits.size(), j.inputs.model.cnn.size());
    const Time training = workload::replay(j.job).iteration;
    const Time chakra = replay(export_job(j.job).traces, j.inputs.cluster).iteration;
    std::printf("  resnet50 4 x 8 on A100 + V100: training replay %.9f ms, Chakra %.9f ms\n",
                training.seconds() * 1e3, chakra.seconds() * 1e3);
    EXPECT_EQ(chakra, training);
  }
  // 8 x 4: a V100 column spans two PCIe nodes over 25 Gb/s Ethernet, and its row ranks' shard
  // all-reduces among the columns take routes of different speeds. The training replay keeps a
  // column's data-parallel stream in step (each collective's shards start together); in the
  // traces each rank's stream goes on when its own shard is done. That is the one place the two
  // differ: here by 0.05%.
  const Job j(grid_spec("mixed-a100-v100", 0, 8, 4, "resnet50"));
  const Time training = workload::replay(j.job).iteration;
  const Time chakra = replay(export_job(j.job).traces, j.inputs.cluster).iteration;
  std::printf(
      "  resnet50 8 x 4 on A100 + V100: training replay %.9f ms, Chakra %.9f ms (%+.4f%%)\n",
      training.seconds() * 1e3, chakra.seconds() * 1e3,
      100 * (chakra.seconds() - training.seconds()) / training.seconds());
  EXPECT_NEAR(chakra.seconds(), training.seconds(), 1e-3 * training.seconds());
}

TEST(ChakraReplay, ACollectiveWithoutAProcessGroupSpansEveryRank) {
  TraceSet t;
  t.ranks.resize(4);
  for (auto& r : t.ranks) {
    r.nodes = {allreduce(0, 1 << 20, {})};
    r.nodes[0].pg_name.reset();
  }
  const ReplayResult r = replay(t, dgx_a100());
  EXPECT_EQ(r.collectives, 1u);
  network::CollectiveRequest req;
  req.bytes = 1 << 20;
  req.ranks = {0, 1, 2, 3};
  req.host_launch = false;
  EXPECT_EQ(r.iteration, network::simulate_collective(dgx_a100(), req).time);
}

}  // namespace
}  // namespace hetsim::chakra
