// Strict YAML helpers: file:line error text, "did you mean" hints, field readers, --set overrides.
#include "sim/config/yaml_util.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "sim/core/error.h"

namespace hetsim::config {
namespace {

const std::string kFile = "topologies/x.yaml";

// The InputError message `f` throws, or "" when it does not throw.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Line 1..8 of a small cluster file.
const char* const kCluster =
    "name: c\n"                          // 1
    "node_types:\n"                      // 2
    "  - name: dgx\n"                    // 3
    "    intra:\n"                       // 4
    "      kind: nvswitch\n"             // 5
    "      bandwith: 300GB/s\n"          // 6
    "groups:\n"                          // 7
    "  - {node_type: dgx, count: 4}\n";  // 8

TEST(Where, IsFileColonOneBasedLine) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_EQ(where(kFile, root), kFile + ":1");
  EXPECT_EQ(where(kFile, root["node_types"][0]["intra"]["kind"]), kFile + ":5");
  EXPECT_EQ(where(kFile, root["groups"][0]["count"]), kFile + ":8");
}

TEST(Where, IsJustTheFileForANodeBuiltInCode) {
  EXPECT_EQ(where(kFile, YAML::Node(5)), kFile);
  EXPECT_EQ(where(kFile, YAML::Node(YAML::NodeType::Map)), kFile);
}

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("bandwith", "bandwidth"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ab", "ba"), 2u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
}

TEST(DidYouMean, SuggestsTheClosestKeyWithinMaxOfTwoAndAThird) {
  const std::vector<std::string> valid = {"kind", "link_class", "bandwidth"};
  EXPECT_EQ(did_you_mean("bandwith", valid), " (did you mean \"bandwidth\"?)");
  EXPECT_EQ(did_you_mean("knd", valid), " (did you mean \"kind\"?)");
  EXPECT_EQ(did_you_mean("kindxx", valid), " (did you mean \"kind\"?)");  // 2 edits: max(2, 2)
  EXPECT_EQ(did_you_mean("kindxxx", valid), "");                          // 3 edits > max(2, 2)
  EXPECT_EQ(did_you_mean("linkclass", valid), " (did you mean \"link_class\"?)");
  EXPECT_EQ(did_you_mean("colour", valid), "");
  EXPECT_EQ(did_you_mean("bandwidth", {}), "");
}

TEST(DidYouMean, AllowsAThirdOfTheKeyForLongKeys) {
  const std::vector<std::string> valid = {"oversubscription"};
  // 16 letters: up to 5 edits.
  EXPECT_EQ(did_you_mean("oversubscrXXXXXn", valid), " (did you mean \"oversubscription\"?)");
  EXPECT_EQ(did_you_mean("overXXXXXXXXXion", valid), "");
}

TEST(DidYouMean, PrefersTheFirstListedOnATie) {
  EXPECT_EQ(did_you_mean("ab", {"aa", "bb"}), " (did you mean \"aa\"?)");
  EXPECT_EQ(did_you_mean("ab", {"bb", "aa"}), " (did you mean \"bb\"?)");
}

TEST(CheckKeys, UnknownKeyNamesFileLinePathAndHint) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_EQ(error_of([&] {
              check_keys(kFile, root["node_types"][0]["intra"], "node_types[0].intra",
                         {"kind", "link_class", "bandwidth"});
            }),
            "topologies/x.yaml:6: node_types[0].intra.bandwith: unknown key (did you mean "
            "\"bandwidth\"?)");
}

TEST(CheckKeys, UnknownKeyWithoutANearMatchHasNoHint) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_EQ(error_of([&] {
              check_keys(kFile, root, "", {"name", "node_types", "fabric"});
            }),
            "topologies/x.yaml:7: groups: unknown key");
}

TEST(CheckKeys, AllowedKeysPass) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_NO_THROW(check_keys(kFile, root, "", {"name", "node_types", "groups"}));
  EXPECT_NO_THROW(check_keys(kFile, root["groups"][0], "groups[0]", {"node_type", "count"}));
}

TEST(CheckKeys, NonMapIsAnError) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_EQ(error_of([&] { check_keys(kFile, root["groups"], "groups", {"count"}); }),
            "topologies/x.yaml:8: groups: expected a map");
  EXPECT_EQ(error_of([&] { check_keys(kFile, YAML::Load("[1]"), "", {}); }),
            "topologies/x.yaml:1: expected a map");
}

TEST(Require, MissingFieldNamesTheLineOfTheMap) {
  const YAML::Node root = YAML::Load(kCluster);
  EXPECT_EQ(error_of([&] { require(kFile, root["node_types"][0], "node_types[0]", "gpu"); }),
            "topologies/x.yaml:3: node_types[0].gpu: missing required field");
  EXPECT_EQ(error_of([&] { require(kFile, root, "", "fabric"); }),
            "topologies/x.yaml:1: fabric: missing required field");
  EXPECT_EQ(require(kFile, root, "", "name").Scalar(), "c");
}

TEST(Require, NullValueIsNamedAsGivenWithoutAValue) {
  const YAML::Node root = YAML::Load("a: 1\nfabric:\n");
  EXPECT_EQ(error_of([&] { require(kFile, root, "", "fabric"); }),
            "topologies/x.yaml:2: fabric: no value given");
}

TEST(GetQuantity, ParsesTheValueInBaseUnits) {
  const YAML::Node n = YAML::Load("bandwidth: 200Gbps\nlatency: 1.5us\nmemory: 80GiB\n");
  EXPECT_DOUBLE_EQ(get_quantity(kFile, n, "x", "bandwidth", Dimension::bandwidth), 25e9);
  EXPECT_DOUBLE_EQ(get_quantity(kFile, n, "x", "latency", Dimension::time), 1.5e-6);
  EXPECT_DOUBLE_EQ(get_quantity(kFile, n, "x", "memory", Dimension::bytes), 80 * 0x1p30);
}

TEST(GetQuantity, UnitErrorCarriesTheLineOfTheValue) {
  const YAML::Node root = YAML::Load("links:\n  - a: n0\n\n    bandwidth: 100Gbs\n");
  EXPECT_EQ(error_of([&] {
              get_quantity(kFile, root["links"][0], "links[0]", "bandwidth", Dimension::bandwidth);
            }),
            "topologies/x.yaml:4: links[0].bandwidth: unknown unit \"Gbs\" (expected one of bps, "
            "Kbps, Mbps, Gbps, Tbps, B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, Bps, "
            "KBps, MBps, GBps, TBps)");
}

TEST(GetQuantity, DefaultAppliesOnlyWhenTheKeyIsAbsent) {
  const YAML::Node n = YAML::Load("kind: single_switch\nlatency: 50ns\n");
  EXPECT_DOUBLE_EQ(get_quantity(kFile, n, "fabric", "latency", Dimension::time, 100e-9), 50e-9);
  EXPECT_DOUBLE_EQ(get_quantity(kFile, n, "fabric", "other", Dimension::time, 100e-9), 100e-9);
  EXPECT_EQ(error_of([&] { get_quantity(kFile, n, "fabric", "other", Dimension::time); }),
            "topologies/x.yaml:1: fabric.other: missing required field (a time)");
}

TEST(GetQuantity, NonScalarIsAnError) {
  const YAML::Node n = YAML::Load("latency: [1us]\n");
  EXPECT_EQ(error_of([&] { get_quantity(kFile, n, "fabric", "latency", Dimension::time); }),
            "topologies/x.yaml:1: fabric.latency: expected a time, got a list");
}

TEST(GetQuantity, ReadingFromANonMapIsAnError) {
  const YAML::Node root = YAML::Load("fabric: 5\n");
  EXPECT_EQ(
      error_of([&] { get_quantity(kFile, root["fabric"], "fabric", "latency", Dimension::time); }),
      "topologies/x.yaml:1: fabric: expected a map");
}

TEST(GetInt, AcceptsIntegersFromTheMinimumToTheMaximum) {
  const YAML::Node n = YAML::Load("count: 1\nzero: 0\nbig: 16\n");
  EXPECT_EQ(get_int(kFile, n, "groups[0]", "count", 1, 1), 1);
  EXPECT_EQ(get_int(kFile, n, "groups[0]", "big", 1, 16), 16);
  EXPECT_EQ(get_int(kFile, n, "groups[0]", "zero", 0, 10), 0);
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "groups[0]", "zero", 1, 10); }),
            "topologies/x.yaml:2: groups[0].zero: expected an integer from 1 to 10, got \"0\"");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "groups[0]", "big", 1, 15); }),
            "topologies/x.yaml:3: groups[0].big: expected an integer from 1 to 15, got \"16\"");
  EXPECT_EQ(get_int(kFile, n, "groups[0]", "absent", 1, 10, 8), 8);
}

TEST(GetInt, RejectsNonIntegersAndNumbersBeyondLong) {
  const YAML::Node n =
      YAML::Load("a: x\nb: 1.5\nc: 4 nodes\nd: -2\nf: 10000000000000000000000\ng:\nh: [1]\n");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "a", 1, 9); }),
            "topologies/x.yaml:1: g.a: expected an integer from 1 to 9, got \"x\"");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "b", 1, 9); }),
            "topologies/x.yaml:2: g.b: expected an integer from 1 to 9, got \"1.5\"");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "c", 1, 9); }),
            "topologies/x.yaml:3: g.c: expected an integer from 1 to 9, got \"4 nodes\"");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "d", 0, 9); }),
            "topologies/x.yaml:4: g.d: expected an integer from 0 to 9, got \"-2\"");
  EXPECT_EQ(get_int(kFile, n, "g", "d", -5, 9), -2);
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "f", 1, 9); }),
            "topologies/x.yaml:5: g.f: expected an integer from 1 to 9, got "
            "\"10000000000000000000000\"");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "e", 1, 9); }),
            "topologies/x.yaml:1: g.e: missing required field (an integer from 1 to 9)");
  // "g:" alone is present but empty; a list is the wrong kind.
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "g", 1, 9); }),
            "topologies/x.yaml:6: g.g: no value given (expected an integer from 1 to 9)");
  EXPECT_EQ(error_of([&] { get_int(kFile, n, "g", "h", 1, 9); }),
            "topologies/x.yaml:7: g.h: expected an integer from 1 to 9, got a list");
}

TEST(ReadTextFile, ADirectoryIsNamedAsSuch) {
  EXPECT_EQ(error_of([&] { read_text_file(HETSIM_SOURCE_DIR, "plan file"); }),
            std::string(HETSIM_SOURCE_DIR) + ": is a directory, expected a plan file");
  EXPECT_EQ(error_of([&] { read_text_file("/nonexistent/x.yaml", "plan file"); }),
            "/nonexistent/x.yaml: cannot open plan file");
}

TEST(GetNumber, ReadsPlainNumbersOnly) {
  const YAML::Node n = YAML::Load("efficiency: 0.77\nprice: 5\nexp: 1e-3\nbad: 77%\n");
  EXPECT_DOUBLE_EQ(get_number(kFile, n, "c", "efficiency"), 0.77);
  EXPECT_DOUBLE_EQ(get_number(kFile, n, "c", "price"), 5);
  EXPECT_DOUBLE_EQ(get_number(kFile, n, "c", "exp"), 1e-3);
  EXPECT_DOUBLE_EQ(get_number(kFile, n, "c", "absent", 1.0), 1.0);
  EXPECT_EQ(error_of([&] { get_number(kFile, n, "c", "bad"); }),
            "topologies/x.yaml:4: c.bad: expected a number, got \"77%\"");
}

TEST(GetString, ReadsScalarsAndRejectsMaps) {
  const YAML::Node n = YAML::Load("kind: nvswitch\nsub: {a: 1}\n");
  EXPECT_EQ(get_string(kFile, n, "intra", "kind"), "nvswitch");
  EXPECT_EQ(get_string(kFile, n, "intra", "absent", "dflt"), "dflt");
  EXPECT_EQ(error_of([&] { get_string(kFile, n, "intra", "sub"); }),
            "topologies/x.yaml:2: intra.sub: expected a string, got a map");
}

TEST(JoinPath, OmitsTheDotAtTheRoot) {
  EXPECT_EQ(join_path("", "name"), "name");
  EXPECT_EQ(join_path("node_types[0]", "intra"), "node_types[0].intra");
}

// --set overrides

const char* const kOverridable =
    "name: c\n"
    "node_types:\n"
    "  - name: dgx\n"
    "    nics: {count: 8, link_class: ib_hdr, bandwidth: 200Gbps}\n"
    "groups:\n"
    "  - {node_type: dgx, count: 4}\n"
    "fabric:\n"
    "  kind: fat_tree\n"
    "  oversubscription: 1\n";

TEST(ApplyOverride, ReplacesAFieldInANestedMap) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "node_types[0].nics.bandwidth=100Gbps");
  EXPECT_EQ(root["node_types"][0]["nics"]["bandwidth"].Scalar(), "100Gbps");
  // Siblings and the rest of the document are untouched (no handle was rebound onto root).
  EXPECT_EQ(root["node_types"][0]["nics"]["count"].Scalar(), "8");
  EXPECT_EQ(root["node_types"][0]["name"].Scalar(), "dgx");
  EXPECT_EQ(root["name"].Scalar(), "c");
  EXPECT_EQ(root["fabric"]["kind"].Scalar(), "fat_tree");
  EXPECT_EQ(root.size(), 4u);
}

TEST(ApplyOverride, ReplacesAFieldInsideAListEntry) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "groups[0].count=16");
  EXPECT_EQ(root["groups"][0]["count"].as<int>(), 16);
  EXPECT_EQ(root["groups"][0]["node_type"].Scalar(), "dgx");
  EXPECT_EQ(root["groups"].size(), 1u);
}

TEST(ApplyOverride, ReplacesAWholeListEntry) {
  YAML::Node root = YAML::Load("links: [[0, 1, 1], [0, 3, 2]]\n");
  apply_override(root, "links[1]=[2, 3, 4]");
  EXPECT_EQ(root["links"][1][2].as<int>(), 4);
  EXPECT_EQ(root["links"][0][1].as<int>(), 1);
  apply_override(root, "links[0][2]=9");
  EXPECT_EQ(root["links"][0][2].as<int>(), 9);
  EXPECT_EQ(root["links"][1][0].as<int>(), 2);
}

TEST(ApplyOverride, ValueIsReadAsYaml) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "node_types[0].nics={count: 4, link_class: roce, bandwidth: 400Gbps}");
  EXPECT_EQ(root["node_types"][0]["nics"]["link_class"].Scalar(), "roce");
  EXPECT_EQ(root["node_types"][0]["nics"].size(), 3u);
  apply_override(root, "fabric.spines=[1,2]");
  ASSERT_TRUE(root["fabric"]["spines"].IsSequence());
  EXPECT_EQ(root["fabric"]["spines"][1].as<int>(), 2);
}

TEST(ApplyOverride, ValueMayContainAnEqualsSign) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "name=a=b");
  EXPECT_EQ(root["name"].Scalar(), "a=b");
}

TEST(ApplyOverride, AddsANewKeyToAnExistingMap) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "fabric.oversubscription=2");
  apply_override(root, "fabric.latency=50ns");
  EXPECT_EQ(root["fabric"]["oversubscription"].as<int>(), 2);
  EXPECT_EQ(root["fabric"]["latency"].Scalar(), "50ns");
  EXPECT_EQ(root["fabric"].size(), 3u);
  apply_override(root, "seed=7");
  EXPECT_EQ(root["seed"].as<int>(), 7);
}

TEST(ApplyOverride, OverriddenValueHasNoFilePosition) {
  YAML::Node root = YAML::Load(kOverridable);
  apply_override(root, "groups[0].count=x");
  EXPECT_EQ(error_of([&] { get_int(kFile, root["groups"][0], "groups[0]", "count", 1, 9); }),
            "topologies/x.yaml: groups[0].count: expected an integer from 1 to 9, got \"x\"");
  EXPECT_EQ(where(kFile, root["groups"][0]["node_type"]), kFile + ":6");
}

TEST(ApplyOverride, IndexOutOfRangeNamesTheListSize) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "groups[3].count=2"); }),
            "--set groups[3].count=2: groups has 1 entry");
  EXPECT_EQ(error_of([&] { apply_override(root, "groups[1]={count: 2}"); }),
            "--set groups[1]={count: 2}: groups has 1 entry");
  root = YAML::Load("links: [[0, 1, 1], [0, 3, 2]]\n");
  EXPECT_EQ(error_of([&] { apply_override(root, "links[2]=[]"); }),
            "--set links[2]=[]: links has 2 entries");
  EXPECT_EQ(error_of([&] { apply_override(root, "links[0][3]=1"); }),
            "--set links[0][3]=1: links[0] has 3 entries");
}

TEST(ApplyOverride, IndexingANonListIsAnError) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "fabric[0]=1"); }),
            "--set fabric[0]=1: fabric is not a list");
}

TEST(ApplyOverride, KeyIntoANonMapIsAnError) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "groups.count=1"); }),
            "--set groups.count=1: groups is not a map");
  EXPECT_EQ(error_of([&] { apply_override(root, "name.first=1"); }),
            "--set name.first=1: name is not a map");
  YAML::Node list = YAML::Load("[1, 2]");
  EXPECT_EQ(error_of([&] { apply_override(list, "a=1"); }), "--set a=1: the document is not a map");
}

TEST(ApplyOverride, MissingIntermediateKeyIsAnErrorWithAHint) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "fabrik.kind=single_switch"); }),
            "--set fabrik.kind=single_switch: the document has no key \"fabrik\" (did you mean "
            "\"fabric\"?)");
  EXPECT_EQ(error_of([&] { apply_override(root, "node_types[0].pcie.bandwidth=1GB/s"); }),
            "--set node_types[0].pcie.bandwidth=1GB/s: node_types[0] has no key \"pcie\"");
  // The failed lookup did not insert the key.
  EXPECT_FALSE(root["node_types"][0]["pcie"].IsDefined());
  EXPECT_EQ(root["node_types"][0].size(), 2u);
}

TEST(ApplyOverride, MissingEqualsIsAnError) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "groups[0].count"); }),
            "--set groups[0].count: expected PATH=VALUE");
}

TEST(ApplyOverride, MalformedPathIsAnError) {
  YAML::Node root = YAML::Load(kOverridable);
  const std::string hint =
      ": malformed path (expected keys separated by dots, with [i] list indices, e.g. "
      "groups[0].count)";
  for (const std::string bad :
       {"=1", "a..b=1", "a.=1", ".a=1", "a[=1", "a[x]=1", "a[-1]=1", "a[0]b=1", "a]=1", "[0]=1"}) {
    EXPECT_EQ(error_of([&] { apply_override(root, bad); }), "--set " + bad + hint) << bad;
  }
}

TEST(ApplyOverride, BadYamlValueIsAnError) {
  YAML::Node root = YAML::Load(kOverridable);
  EXPECT_EQ(error_of([&] { apply_override(root, "fabric.spines=[1, 2"); }),
            "--set fabric.spines=[1, 2: bad YAML value: end of sequence flow not found");
}

}  // namespace
}  // namespace hetsim::config
