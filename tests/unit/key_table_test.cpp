// Key tables with lists, named entries and variants (config/key_table.h), and the cluster and
// study loaders that read their keys from such tables: a key of another form of its map is
// refused by name, every key a table lists is one the loader takes, and the JSON Schema nests
// lists' entries and named entries as an editor expects.
#include "sim/config/key_table.h"

#include <gtest/gtest.h>

#include <string>

#include "sim/config/cluster_config.h"
#include "sim/core/error.h"
#include "sim/study/study.h"
#include "sim/workload/model/model.h"

namespace hetsim::config {
namespace {

using T = KeyType;

std::vector<Key> small_table() {
  return {
      {"name", T::text, {}, 0, 0, "", "A name", ""},
      {"items", T::list, {}, 0, 0, "", "Entries", ""},
      {"items[]", T::map, {}, 0, 0, "", "One entry", ""},
      {"items[].kind", T::choice, {"a", "b"}, 0, 0, "", "Its form", ""},
      {"items[].size", T::integer, {}, 1, 9, "", "Only a's", "", "kind: a"},
      {"items[].width", T::integer, {}, 1, 9, "", "Only b's", "", "kind: b"},
      {"items[].common", T::text, {}, 0, 0, "", "Both", ""},
      {"items[].extra", T::text, {}, 0, 0, "", "Without kind", "", "no kind"},
      {"items[].more", T::text, {}, 0, 0, "", "With kind", "", "kind"},
      {"named", T::map, {}, 0, 0, "", "By name", ""},
      {"named.*", T::map, {}, 0, 0, "", "One", ""},
      {"named.*.rate", T::bandwidth, {}, 0, 0, "", "Its rate", ""},
  };
}

TEST(KeyTable, ListEntriesAndNamedEntriesAreNotKeysOfTheirParent) {
  const std::vector<Key> t = small_table();
  EXPECT_EQ(key_names(t), (std::vector<std::string>{"name", "items", "named"}));
  EXPECT_EQ(key_names(t, "items[]"),
            (std::vector<std::string>{"kind", "size", "width", "common", "extra", "more"}));
  EXPECT_EQ(key_names(t, "named"), std::vector<std::string>{});
  EXPECT_EQ(key_names(t, "named.*"), std::vector<std::string>{"rate"});
}

TEST(KeyTable, AVariantTakesItsOwnKeysAndTheCommonOnes) {
  const std::vector<Key> t = small_table();
  const std::string a = "a", b = "b";
  EXPECT_EQ(key_names(t, "items[]", "kind", &a),
            (std::vector<std::string>{"kind", "size", "common", "more"}));
  EXPECT_EQ(key_names(t, "items[]", "kind", &b),
            (std::vector<std::string>{"kind", "width", "common", "more"}));
  EXPECT_EQ(key_names(t, "items[]", "kind", nullptr),
            (std::vector<std::string>{"kind", "common", "extra"}));
  const std::string md = keys_markdown(t, false);
  EXPECT_NE(md.find("| Only a's (only with `kind: a`) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Without kind (only without `kind`) |"), std::string::npos) << md;
}

TEST(KeyTable, TheSchemaNestsEntriesUnderItemsAndAdditionalProperties) {
  const nlohmann::ordered_json s = keys_json_schema(small_table(), "t", "d");
  const auto& items = s["properties"]["items"];
  EXPECT_EQ(items["type"], "array");
  EXPECT_EQ(items["items"]["type"], "object");
  EXPECT_EQ(items["items"]["additionalProperties"], false);
  EXPECT_EQ(items["items"]["properties"].size(), 6u);
  EXPECT_EQ(items["items"]["properties"]["kind"]["enum"], nlohmann::ordered_json({"a", "b"}));
  const auto& named = s["properties"]["named"];
  EXPECT_EQ(named["type"], "object");
  EXPECT_FALSE(named.contains("properties"));
  EXPECT_EQ(named["additionalProperties"]["additionalProperties"], false);
  EXPECT_TRUE(named["additionalProperties"]["properties"].contains("rate"));
  EXPECT_EQ(s["additionalProperties"], false);
}

std::string cluster_error(const std::string& text) {
  try {
    load_cluster_text(text, "c.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

const std::string kNode =
    "name: c\n"
    "node_types:\n"
    "  - name: n\n"
    "    gpu: a100-sxm4-80gb\n"
    "    gpus: 8\n"
    "    intra: {kind: nvswitch, link_class: nvlink3, bandwidth: 300GB/s{INTRA}}\n"
    "    nics: {count: 8, link_class: ib_hdr, bandwidth: 200Gbps}\n"
    "groups:\n"
    "  - {node_type: n, count: 2}\n"
    "fabric: {kind: {FABRIC}}\n";

std::string node(const std::string& intra, const std::string& fabric) {
  std::string s = kNode;
  s.replace(s.find("{INTRA}"), 7, intra);
  s.replace(s.find("{FABRIC}"), 8, fabric);
  return s;
}

TEST(ClusterKeys, AKeyOfAnotherFormOfItsMapIsRefusedByName) {
  ASSERT_EQ(cluster_error(node("", "single_switch")), "no error");
  ASSERT_EQ(cluster_error(node("", "fat_tree, nics_per_leaf: 8, spines: 2")), "no error");
  // `links` belongs to an nvlink_mesh, `spines` to a fat tree or rail-optimized fabric.
  EXPECT_NE(cluster_error(node(", links: [[0, 1, 1]]", "single_switch"))
                .find("c.yaml:6: node_types[0].intra.links: unknown key"),
            std::string::npos);
  EXPECT_NE(cluster_error(node("", "single_switch, spines: 2")).find("fabric.spines: unknown key"),
            std::string::npos);
  EXPECT_NE(cluster_error(node("", "rail_optimized, nodes_per_unit: 1, nics_per_leaf: 8"))
                .find("fabric.nics_per_leaf: unknown key"),
            std::string::npos);
  // A node type taken from an instance takes its name and shaping, not its own GPUs.
  const std::string inst =
      "node_types:\n  - {instance: p3.2xlarge, gpus: 4}\ngroups:\n  - {node_type: p3.2xlarge, "
      "count: 1}\n";
  EXPECT_NE(cluster_error(inst).find("node_types[0].gpus: unknown key"), std::string::npos)
      << cluster_error(inst);
}

TEST(ClusterKeys, EveryChoiceOfTheTableIsOneTheLoaderTakes) {
  for (const std::string fabric :
       {"single_switch", "fat_tree, nics_per_leaf: 8", "rail_optimized, nodes_per_unit: 1"}) {
    EXPECT_EQ(cluster_error(node("", fabric)), "no error") << fabric;
  }
  const Key& kind = find_key(cluster_keys(), "fabric.kind", "cluster keys");
  EXPECT_EQ(choices_of(kind),
            (std::vector<std::string>{"single_switch", "fat_tree", "rail_optimized", "explicit"}));
  EXPECT_NE(cluster_error(node("", "torus")).find("fabric.kind"), std::string::npos);
  // The cluster's own GPU profiles and link classes take their own files' keys.
  EXPECT_EQ(key_names(cluster_keys(), "gpu_types[]"), key_names(gpu_profile_keys()));
  EXPECT_EQ(key_names(cluster_keys(), "link_classes.*"), key_names(link_class_keys(), "classes.*"));
}

TEST(StudyKeys, APlanEntryOfThePlannerTakesNoFile) {
  const std::string base =
      "models: [gpt3-1.3b]\nclusters: [dgx-a100]\nplans:\n"
      "  - {policy: megatron, global_batch_size: 8{MORE}}\n";
  auto error = [&](const std::string& more) {
    std::string s = base;
    s.replace(s.find("{MORE}"), 6, more);
    try {
      study::load_study_text(s, "s.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ASSERT_EQ(error(""), "no error");
  EXPECT_EQ(error(", replan: true, name: best"), "no error");
  EXPECT_NE(error(", file: p.yaml").find("s.yaml:4: plans[0].file: unknown key"), std::string::npos)
      << error(", file: p.yaml");
  EXPECT_EQ(
      key_names(study::study_keys()),
      (std::vector<std::string>{"description", "models", "clusters", "plans", "cases", "frameworks",
                                "perturbations", "tokens", "calibration", "efficiency"}));
}

std::string model_error(const std::string& text) {
  try {
    workload::load_model_yaml_text(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ModelKeys, ATransformerTakesNoLayersOfANetworkAndANetworkNoTransformerKeys) {
  const std::string gpt =
      "name: g\nfamily: gpt\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nsequence: 32\n"
      "activation: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\n"
      "causal: true\nbias: true\n";
  ASSERT_EQ(model_error(gpt), "no error");
  EXPECT_NE(model_error(gpt + "input: {channels: 3, height: 8, width: 8}\n")
                .find("m.yaml:14: input: unknown key"),
            std::string::npos);
  const std::string cnn =
      "name: c\nfamily: cnn\ninput: {channels: 3, height: 8, width: 8}\nnetwork:\n"
      "  - {conv: 4, kernel: 3, pad: 1, batchnorm: true}\n  - {pool: max, kernel: 2{POOL}}\n"
      "  - {fc: 10, relu: false}\n";
  auto with = [&](const std::string& more) {
    std::string s = cnn;
    s.replace(s.find("{POOL}"), 6, more);
    return s;
  };
  ASSERT_EQ(model_error(with("")), "no error");
  // batchnorm belongs to a convolution, not to a pool.
  EXPECT_NE(
      model_error(with(", batchnorm: true")).find("m.yaml:6: network[1].batchnorm: unknown key"),
      std::string::npos)
      << model_error(with(", batchnorm: true"));
  EXPECT_NE(model_error(with("") + "layers: 4\n").find("layers: unknown key"), std::string::npos);
  // Each transformer key of the table is one the loader reads (a value of the wrong shape is
  // refused naming the key, never as unknown).
  for (const Key& k : workload::model_keys()) {
    if (k.when != "family: gpt, llama, bert, gptneox") continue;
    const std::string error = model_error(gpt + std::string(k.name) + ": [[oops]]\n");
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << k.name << ": " << error;
  }
}

}  // namespace
}  // namespace hetsim::config
