// Bad input end to end: each broken cluster file in tests/data/bad/ and each bad flag must stop
// hetsim with exit code 2 and one exact message that names the file, the field and what was
// expected.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "tests/e2e/run_command.h"

namespace hetsim::e2e {
namespace {

std::string bad_file(const std::string& name) {
  return std::string(HETSIM_SOURCE_DIR) + "/tests/data/bad/" + name;
}

// ---- Broken cluster files ----------------------------------------------------------------

struct BadFileCase {
  const char* rule;  // the test name
  const char* file;  // under tests/data/bad/
  // The message after "hetsim: error: <path>" (so it starts with ":<line>: " or ": ").
  const char* message;
};

const BadFileCase kBadFiles[] = {
    {"UnknownKeyGivesDidYouMeanHint", "unknown_key.yaml",
     ":10: node_types[0].intra.bandwith: unknown key (did you mean \"bandwidth\"?)"},
    {"UnknownUnitListsValidUnits", "bad_unit.yaml",
     ":11: node_types[0].nics.bandwidth: unknown unit \"Gbs\" (expected one of bps, Kbps, Mbps, "
     "Gbps, Tbps, B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, Bps, KBps, MBps, GBps, "
     "TBps)"},
    {"ZeroBandwidthIsRejected", "zero_bandwidth.yaml",
     ":10: node_types[0].intra.bandwidth: expected a positive bandwidth, got \"0GB/s\""},
    {"GpuTypeWithoutProfileIsRejected", "gpu_without_profile.yaml",
     ":5: node_types[0].gpu: unknown GPU type \"a100-sxm5-80gb\" (no profile; add one under "
     "gpu_types or use a built-in one) (did you mean \"a100-sxm4-80gb\"?)"},
    {"UnknownNodeTypeInGroupsIsRejected", "unknown_node_type.yaml",
     ":13: groups[0].node_type: unknown node type \"a100-nodes\" (did you mean \"a100-node\"?)"},
    {"UnknownLinkClassIsRejected", "unknown_link_class.yaml",
     ":9: node_types[0].intra.link_class: unknown link class \"nvlink9\" (expected one of "
     "ena_tcp, ena_tcp_container, ethernet, ib_edr, ib_hdr, ib_ndr, ib_xdr, nvlink1, nvlink2, "
     "nvlink3, nvlink4, nvlink5, "
     "pcie3, "
     "pcie4, pcie5, roce, upi, wan) (did you mean \"nvlink1\"?)"},
    {"UnknownFabricKindListsValidKinds", "unknown_fabric_kind.yaml",
     ":15: fabric.kind: unknown value \"single-switch\" (expected one of single_switch, fat_tree, "
     "rail_optimized, explicit) (did you mean \"single_switch\"?)"},
    {"GpuInTwoPcieSwitchesIsRejected", "gpu_in_two_pcie_switches.yaml",
     ":19: node_types[0].pcie.switches: GPU 1 is in more than one entry (each must be in exactly "
     "one)"},
    {"GpuInNoPcieSwitchIsRejected", "gpu_in_no_pcie_switch.yaml",
     ":19: node_types[0].pcie.switches: GPU 3 is in no entry (each must be in exactly one)"},
    {"MeshLinkToGpuOutOfRangeIsRejected", "mesh_gpu_out_of_range.yaml",
     ":15: node_types[0].intra.links[3]: expected [gpu a, gpu b, number of links] with two "
     "different GPUs in [0, 4) and at least one link"},
    {"PcieIntraWithoutPcieTreeIsRejected", "pcie_intra_without_tree.yaml",
     ":4: node_types[0].pcie: missing required field (intra kind pcie needs the PCIe tree)"},
    {"SustainedAbovePeakIsRejected", "sustained_above_peak.yaml",
     ":9: gpu_types[0].sustained.fp16: 70TFLOPS exceeds peak.fp16 (65TFLOPS); a board cannot "
     "sustain more than its peak"},
    {"MoreNicsThanGpusIsRejected", "nics_more_than_gpus.yaml",
     ":11: node_types[0].nics.count: more NICs than GPUs; list them with their GPUs instead"},
    {"InvalidYamlSyntaxIsRejected", "invalid_yaml.yaml",
     ":20: invalid YAML: end of sequence flow not found"},
    {"SeveralNodesWithoutFabricAreRejected", "fabric_missing.yaml",
     ": fabric: missing required field (a cluster of 2 nodes needs a scale-out fabric)"},
    {"SeveralNodesWithoutNicsAreRejected", "no_nics_multi_node.yaml",
     ":4: node_types[0].nics: a cluster of several nodes needs NICs on every node type"},
    {"ExplicitLinkToMissingSwitchIsDangling", "dangling_link.yaml",
     ":20: fabric.links[1]: dangling link: \"s1\" is neither a switch of fabric.switches nor an "
     "existing nodeN.nicK"},
    {"ExplicitLinkFromMissingNicIsDangling", "dangling_nic.yaml",
     ":20: fabric.links[1]: dangling link: \"node1.nic1\" is neither a switch of fabric.switches "
     "nor an existing nodeN.nicK"},
    {"ExplicitFabricNicWithoutLinkIsRejected", "nic_without_link.yaml",
     ": fabric.links: node1.nic0 has no link (every NIC needs exactly one link, to a switch)"},
    {"ExplicitFabricNicWithTwoLinksIsRejected", "nic_two_links.yaml",
     ":20: fabric.links[1]: NIC node0.nic0 has more than one link; each NIC connects to exactly "
     "one switch"},
    {"ExplicitLinkBetweenTwoNicsIsRejected", "link_between_nics.yaml",
     ":20: fabric.links[1]: a link joins two NICs; NICs connect to switches"},
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const BadFileCase& c, std::ostream* os) { *os << c.rule; }

class BadClusterFile : public testing::TestWithParam<BadFileCase> {};

TEST_P(BadClusterFile, ExitsWithCode2AndExactMessage) {
  const BadFileCase& c = GetParam();
  const std::string path = bad_file(c.file);
  const std::vector<std::string> args = {"collective", "--cluster", path, "--bytes", "1MiB"};
  const CommandResult r = run_hetsim(args);
  EXPECT_EQ(r.exit_code, 2) << command_line(args) << "\n" << r.output;
  EXPECT_EQ(r.output, "hetsim: error: " + path + c.message + "\n") << command_line(args);
}

INSTANTIATE_TEST_SUITE_P(Files, BadClusterFile, testing::ValuesIn(kBadFiles),
                         [](const testing::TestParamInfo<BadFileCase>& info) {
                           return std::string(info.param.rule);
                         });

// ---- Bad flags ---------------------------------------------------------------------------

struct BadFlagCase {
  const char* rule;
  std::vector<std::string> args;
  std::string output;  // the whole expected output, stdout and stderr together
};

const std::string kBuiltins =
    "aws-g4dn-12xlarge, aws-p3-g4dn, aws-p3.16xlarge, aws-p3.2xlarge, aws-p3.8xlarge, "
    "aws-p3dn.24xlarge, aws-p4d.24xlarge, aws-p4de-24xlarge, aws-p5.48xlarge, cpu-host, dgx-a100, "
    "dgx-h100, dgx1-v100, "
    "mixed-4090-a100, mixed-a100-v100, mixed-explicit, mixed-h100-a100, pcie-a100, pcie-v100";

// dgx-a100 (the default cluster) has 4 nodes of 8 GPUs.
const BadFlagCase kBadFlags[] = {
    {"UnknownOpListsValidOps",
     {"collective", "--op", "allreduc", "--bytes", "1MiB"},
     "hetsim: error: --op: unknown collective \"allreduc\" (expected allreduce, allgather, "
     "reducescatter, alltoall, broadcast or sendrecv)\n"},
    {"UnknownBytesUnitListsValidUnits",
     {"collective", "--bytes", "1MBs"},
     "hetsim: error: --bytes: unknown unit \"MBs\" (expected one of B, KB, MB, GB, TB, PB, KiB, "
     "MiB, GiB, TiB, PiB)\n"},
    {"NegativeBytesIsRejected",
     {"collective", "--bytes", "-1MiB"},
     "hetsim: error: --bytes: expected a non-negative quantity, got \"-1MiB\"\n"},
    {"RankCountAboveGpuCountIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "64"},
     "hetsim: error: --ranks 64: count out of range (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankCountZeroIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "0"},
     "hetsim: error: --ranks 0: count out of range (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankListedTwiceIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "0,1,1"},
     "hetsim: error: --ranks 0,1,1: GPU 1 is listed twice (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankOverlappingRangesAreRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "0-3,2"},
     "hetsim: error: --ranks 0-3,2: GPU 2 is listed twice (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankBeyondLastGpuIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "0,32"},
     "hetsim: error: --ranks 0,32: GPU 32 does not exist (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankRangeRunningBackwardsIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "3-1"},
     "hetsim: error: --ranks 3-1: range 3-1 runs backwards (the cluster has 32 GPUs, 0 to 31)\n"},
    {"RankListMalformedIsRejected",
     {"collective", "--cluster", "dgx-a100", "--bytes", "1MiB", "--ranks", "0-"},
     "hetsim: error: --ranks 0-: expected a count or a list such as 0,1,8-15 (the cluster has 32 "
     "GPUs, 0 to 31)\n"},
    {"SendrecvNeedsTwoRanks",
     {"collective", "--op", "sendrecv", "--bytes", "1MiB", "--ranks", "1"},
     "hetsim: error: --ranks: sendrecv needs at least two ranks\n"},
    {"NodesOnMultiGroupClusterIsRejected",
     {"collective", "--cluster", "mixed-explicit", "--nodes", "2", "--bytes", "1MiB"},
     "hetsim: error: topologies/mixed-explicit.yaml: --nodes needs a cluster with exactly one "
     "group; use --set groups[i].count=N instead\n"},
    {"NegativeNodesIsRejected",
     {"collective", "--nodes", "-1", "--bytes", "1MiB"},
     "hetsim: error: --nodes: expected an integer from 1 to 262144, got -1\n"},
    {"SetThroughMissingKeyGivesDidYouMeanHint",
     {"collective", "--bytes", "1MiB", "--set", "fabric.nodes_per_unt.x=2"},
     "hetsim: error: topologies/dgx-a100.yaml: --set fabric.nodes_per_unt.x=2: fabric has no key "
     "\"nodes_per_unt\" (did you mean \"nodes_per_unit\"?)\n"},
    {"SetOfUnknownLeafKeyIsAnUnknownKey",
     {"collective", "--bytes", "1MiB", "--set", "groups[0].cnt=2"},
     "hetsim: error: topologies/dgx-a100.yaml: groups[0].cnt: unknown key (did you mean "
     "\"count\"?)\n"},
    {"SetIndexBeyondListIsRejected",
     {"collective", "--bytes", "1MiB", "--set", "groups[3].count=2"},
     "hetsim: error: topologies/dgx-a100.yaml: --set groups[3].count=2: groups has 1 entry\n"},
    {"SetWithoutEqualsIsRejected",
     {"collective", "--bytes", "1MiB", "--set", "groups"},
     "hetsim: error: topologies/dgx-a100.yaml: --set groups: expected PATH=VALUE\n"},
    {"SetMalformedPathIsRejected",
     {"collective", "--bytes", "1MiB", "--set", "groups[x].count=2"},
     "hetsim: error: topologies/dgx-a100.yaml: --set groups[x].count=2: malformed path (expected "
     "keys separated by dots, with [i] list indices, e.g. groups[0].count)\n"},
    {"SetValueThatIsNotYamlIsRejected",
     {"collective", "--bytes", "1MiB", "--set", "groups[0].count=[1"},
     "hetsim: error: topologies/dgx-a100.yaml: --set groups[0].count=[1: bad YAML value: end of "
     "sequence flow not found\n"},
    {"SetValueIsValidatedLikeTheFile",
     {"collective", "--bytes", "1MiB", "--set", "groups[0].count=0"},
     "hetsim: error: topologies/dgx-a100.yaml: groups[0].count: expected an integer from 1 to "
     "262144, got \"0\"\n"},
    {"UnknownBuiltinClusterListsBuiltins",
     {"collective", "--cluster", "dgx-a10", "--bytes", "1MiB"},
     "hetsim: error: dgx-a10: no such cluster file, nor a built-in cluster (built-in: " +
         kBuiltins + ") (did you mean \"dgx-a100\"?)\n"},
    {"MissingClusterFileIsRejected",
     {"collective", "--cluster", "/nonexistent/cluster.yaml", "--bytes", "1MiB"},
     "hetsim: error: /nonexistent/cluster.yaml: no such cluster file, nor a built-in cluster "
     "(built-in: " +
         kBuiltins + ")\n"},
    {"UnknownAlgorithmListsValidAlgorithms",
     {"collective", "--bytes", "1MiB", "--algorithm", "rng"},
     "hetsim: error: --algorithm: unknown algorithm \"rng\" (expected auto, ring, tree, "
     "hierarchical or direct)\n"},
    {"AlgorithmThatDoesNotApplyToOpIsRejected",
     {"collective", "--op", "allgather", "--algorithm", "tree", "--bytes", "1MiB"},
     "hetsim: error: --algorithm tree applies to allreduce only\n"},
    {"UnknownProtocolListsValidProtocols",
     {"collective", "--bytes", "1MiB", "--protocol", "LL256"},
     "hetsim: error: --protocol: unknown protocol \"LL256\" (expected auto, LL, LL128 or "
     "Simple)\n"},
    {"UnknownExpansionIsRejected",
     {"collective", "--bytes", "1MiB", "--expansion", "x"},
     "hetsim: error: --expansion: expected steady or stepwise, got \"x\"\n"},
    {"UnknownSubcommandFlagIsRejected",
     {"collective", "--bytes", "1MiB", "--frobnicate"},
     "hetsim: error: The following argument was not expected: --frobnicate (see hetsim --help)\n"},
    {"UnknownSubcommandIsRejected",
     {"frobnicate"},
     "hetsim: error: unknown command \"frobnicate\" (expected simulate, plan, sweep, collective, "
     "bench, calibrate, export, execute, compare, export-chakra, replay-chakra or reference; see "
     "hetsim --help)\n"},
    {"MissingSubcommandIsRejected",
     {},
     "hetsim: error: A subcommand is required (see hetsim --help)\n"},
};

void PrintTo(const BadFlagCase& c, std::ostream* os) { *os << c.rule; }

class BadFlag : public testing::TestWithParam<BadFlagCase> {};

TEST_P(BadFlag, ExitsWithCode2AndExactMessage) {
  const BadFlagCase& c = GetParam();
  const CommandResult r = run_hetsim(c.args);
  EXPECT_EQ(r.exit_code, 2) << command_line(c.args) << "\n" << r.output;
  EXPECT_EQ(r.output, c.output) << command_line(c.args);
}

INSTANTIATE_TEST_SUITE_P(Flags, BadFlag, testing::ValuesIn(kBadFlags),
                         [](const testing::TestParamInfo<BadFlagCase>& info) {
                           return std::string(info.param.rule);
                         });

// The flow count depends on the planner's channel count, so only its frame is fixed here.
TEST(BadFlagSize, StepwiseExpansionTooLargeIsRejected) {
  const CommandResult r =
      run_hetsim({"collective", "--nodes", "1000", "--expansion", "stepwise", "--bytes", "1MiB"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string head = "hetsim: error: stepwise expansion would need ";
  const std::string tail = " flows; use the steady expansion at this scale\n";
  EXPECT_EQ(r.output.rfind(head, 0), 0u) << r.output;
  ASSERT_GE(r.output.size(), head.size() + tail.size()) << r.output;
  EXPECT_EQ(r.output.substr(r.output.size() - tail.size()), tail) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "more than one line:\n" << r.output;
}

TEST(BadBenchFlag, GpuCountNotMultipleOf8ExitsWithCode2) {
  const CommandResult r = run_hetsim({"bench", "network", "--gpus", "12"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "hetsim: error: --gpus: expected multiples of 8\n");
}

TEST(BadFlagNodes, NodesZeroIsRejected) {
  const CommandResult r = run_hetsim({"collective", "--nodes", "0", "--bytes", "1MiB"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "hetsim: error: --nodes: expected an integer from 1 to 262144, got 0\n");
}

}  // namespace
}  // namespace hetsim::e2e
