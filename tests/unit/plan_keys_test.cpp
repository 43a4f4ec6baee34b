// The plan keys' table (workload/plan/plan_keys.h) is what the loader reads: every key in it is
// known to the loader, a key not in it is refused, each choice key takes exactly its listed
// choices, and the generated reference and schema list every key.
#include "sim/workload/plan/plan_keys.h"

#include <gtest/gtest.h>

#include <set>

#include "sim/config/cluster_config.h"
#include "sim/core/error.h"
#include "sim/workload/cost/framework.h"
#include "sim/workload/plan/plan.h"

#include "tests/unit/fixtures.h"

namespace hetsim::workload {
namespace {

TEST(PlanKeys, EveryKeyInTheTableIsOneTheLoaderKnows) {
  const platform::Cluster c = test::cluster("dgx-a100");
  const ModelConfig m = test::small_gpt();
  std::set<std::string_view> names;
  for (const PlanKey& k : plan_keys()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " twice";
    EXPECT_FALSE(k.help.empty()) << k.name;
    // A value of the wrong shape: the loader names the key and refuses the value, and does not
    // call the key unknown.
    const std::string batch = k.name == "global_batch_size" ? "" : "global_batch_size: 8\n";
    const std::string error = test::plan_error(batch + std::string(k.name) + ": [[oops]]\n", m, c);
    EXPECT_EQ(error.rfind("p.yaml:", 0), 0u) << k.name << ": " << error;  // names the file
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << k.name << ": " << error;
    EXPECT_NE(error, "no error") << k.name;
  }
  EXPECT_NE(test::plan_error("global_batch_size: 8\ntensor_paralel: 2\n", m, c)
                .find("tensor_paralel: unknown key (did you mean \"tensor_parallel\"?)"),
            std::string::npos);
}

TEST(PlanKeys, AChoiceKeyTakesItsChoicesAndNothingElse) {
  const platform::Cluster c = test::cluster("dgx-a100");
  const ModelConfig m = test::small_gpt();
  for (const char* key : {"recompute", "attention", "main_grads", "optimizer", "gradient_reduction",
                          "gradient_accumulation"}) {
    for (const std::string& choice : plan_choices(key)) {
      const std::string text = std::string("global_batch_size: 8\n") + key + ": " + choice + "\n";
      // Accepted as a value (selective_op then refuses the small GPT's GeLU MLP, by name).
      const std::string error = test::plan_error(text, m, c);
      EXPECT_EQ(error.find("unknown value"), std::string::npos) << key << ": " << error;
      if (choice != "selective_op") {
        EXPECT_EQ(error, "no error") << key << ": " << choice;
      }
    }
    const std::string bad = std::string("global_batch_size: 8\n") + key + ": nonsense\n";
    EXPECT_NE(test::plan_error(bad, m, c).find(std::string(key) + ": unknown value \"nonsense\""),
              std::string::npos)
        << key;
  }
}

TEST(PlanKeys, ABoundRowIsReadIntoItsFieldAndGivesItsMegatronFlag) {
  const platform::Cluster c = test::cluster("dgx-a100");
  const ModelConfig m = test::small_gpt();
  const Plan p = load_plan_text(
      "global_batch_size: 8\ntensor_parallel: 2\nsequence_parallel: true\ntp_comm_overlap: true\n"
      "bias_dropout_fusion: false\nrecompute: full\nrecompute_layers: 1\n",
      "p.yaml", m, c);
  EXPECT_TRUE(p.sequence_parallel);
  EXPECT_TRUE(p.kernels.tp_comm_overlap);
  EXPECT_FALSE(p.kernels.bias_dropout_fusion);
  EXPECT_EQ(p.recompute, Recompute::full);
  EXPECT_EQ(p.recompute_layers, 1);
  EXPECT_EQ(megatron_flags(p), (std::vector<std::string>{"--sequence-parallel", "--tp-comm-overlap",
                                                         "--no-bias-dropout-fusion"}));
  // Defaults give no flag; --tp-comm-overlap needs sequence parallelism (without tensor
  // parallelism the loader lets tp_comm_overlap stand alone, and Megatron-LM would refuse it).
  EXPECT_TRUE(megatron_flags(load_plan_text("global_batch_size: 8\n", "p.yaml", m, c)).empty());
  EXPECT_TRUE(megatron_flags(
                  load_plan_text("global_batch_size: 8\ntp_comm_overlap: true\n", "p.yaml", m, c))
                  .empty());
  // Every flag key is read by its row, none by hand.
  for (const PlanKeyRow& row : plan_key_rows()) {
    if (row.key.type == PlanKeyType::flag) {
      EXPECT_TRUE(row.field.flag != nullptr || row.field.kernel_flag != nullptr) << row.key.name;
    }
  }
}

TEST(PlanKeys, TheReferenceAndTheSchemaListEveryKey) {
  const std::string page = plan_keys_markdown();
  const nlohmann::ordered_json schema = plan_json_schema();
  ASSERT_EQ(schema["properties"].size(), plan_keys().size());
  for (const PlanKey& k : plan_keys()) {
    EXPECT_NE(page.find("| `" + std::string(k.name) + "` |"), std::string::npos) << k.name;
    EXPECT_TRUE(schema["properties"].contains(std::string(k.name))) << k.name;
  }
  EXPECT_EQ(schema["properties"]["schedule"]["enum"],
            nlohmann::ordered_json({"gpipe", "1f1b", "interleaved"}));
  EXPECT_FALSE(schema["additionalProperties"].get<bool>());
}

TEST(PlanKeys, AKeyGivenWithoutTheValueItNeedsIsRefusedByItsRow) {
  const platform::Cluster c = test::cluster("dgx-a100");
  const ModelConfig m = test::small_gpt();
  const std::string base = "pipeline_parallel: 2\nglobal_batch_size: 8\n";
  auto error = [&](const std::string& keys) { return test::plan_error(base + keys, m, c); };
  EXPECT_EQ(error("interleave: 2\n"), "p.yaml:3: interleave: needs schedule: interleaved");
  EXPECT_EQ(error("schedule: 1f1b\ninterleave: 2\n"),
            "p.yaml:4: interleave: needs schedule: interleaved");
  EXPECT_EQ(error("interleave: 1\n"), "no error");  // at its default it asks nothing
  EXPECT_EQ(error("schedule: interleaved\ninterleave: 2\n"), "no error");
  EXPECT_EQ(error("microbatch_group: 2\n"),
            "p.yaml:3: microbatch_group: needs schedule: interleaved");
  EXPECT_EQ(error("recompute: selective\nrecompute_layers: 1\n"),
            "p.yaml:4: recompute_layers: needs recompute: full (it says how many layers of each "
            "stage recompute in full)");
  EXPECT_EQ(error("recompute: full\nrecompute_layers: 1\n"), "no error");
  // The schema says the same: if the key is given (not at its default), the other must be.
  const nlohmann::ordered_json all = plan_json_schema()["allOf"];
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]["if"]["required"], nlohmann::ordered_json({"interleave"}));
  EXPECT_EQ(all[0]["if"]["properties"]["interleave"]["not"]["const"], 1);
  EXPECT_EQ(all[0]["then"]["properties"]["schedule"]["const"], "interleaved");
  EXPECT_FALSE(all[1]["if"].contains("properties"));  // microbatch_group: any value
  EXPECT_EQ(all[2]["then"]["properties"]["recompute"]["const"], "full");
}

// A file with `key: [[oops]]` (at its path: `host.per_kernel` inside `host:`) on top of `base`,
// a valid file whose maps are written in flow style on one line each.
std::string with_bad_value(std::string base, std::string_view key) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) {
    // replace the key's own line where base has it
    const std::string k = std::string(key) + ":";
    const size_t at = base.find("\n" + k);
    if (at != std::string::npos) base.erase(at + 1, base.find('\n', at + 1) - at);
    return base + std::string(key) + ": [[oops]]\n";
  }
  const std::string map = std::string(key.substr(0, dot)) + ": {";
  const std::string sub = std::string(key.substr(dot + 1)) + ": ";
  const size_t at = base.find(map);
  if (at == std::string::npos) return base + map + sub + "[[oops]]}\n";
  const size_t close = base.find('}', at);
  const size_t own = base.find(sub, at);
  if (own != std::string::npos && own < close) {  // the map has the key: its value replaced
    const size_t end = std::min(base.find(',', own), close);
    return base.replace(own + sub.size(), end - own - sub.size(), "[[oops]]");
  }
  return base.insert(at + map.size(), sub + "[[oops]], ");
}

// The framework file's keys (workload::framework_keys) are what its loader reads: a value of the
// wrong shape for any key is refused naming the key, never as an unknown key, and the schema
// and the reference list every key.
TEST(FrameworkKeys, EveryKeyInTheTableIsOneTheLoaderKnows) {
  const std::string base =
      "name: f\ngradient_reduction: overlapped\npipeline_p2p: async\n"
      "host: {per_pass: 0s, per_step: 0s}\n";
  ASSERT_NO_THROW(load_framework_text(base, "f.yaml"));
  for (const config::Key& k : framework_keys()) {
    if (k.type == config::KeyType::map || k.name == "name" || k.name == "description") continue;
    const std::string text = with_bad_value(base, k.name);
    std::string error = "no error";
    try {
      load_framework_text(text, "f.yaml");
    } catch (const InputError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.rfind("f.yaml:", 0), 0u) << k.name << ": " << error << "\n" << text;
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << k.name << ": " << error;
  }
  try {
    load_framework_text(base + "kernel: eager\n", "f.yaml");
    FAIL() << "an unknown key was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel: unknown key (did you mean \"kernels\"?)"),
              std::string::npos)
        << e.what();
  }
  const nlohmann::ordered_json schema = framework_json_schema();
  const std::string page = framework_keys_markdown();
  for (const config::Key& k : framework_keys())
    EXPECT_NE(page.find("| `" + std::string(k.name) + "` |"), std::string::npos) << k.name;
  EXPECT_EQ(schema["properties"]["host"]["properties"].size(), 3u);
  EXPECT_FALSE(schema["properties"]["host"]["additionalProperties"].get<bool>());
  EXPECT_EQ(schema["properties"]["gather_copy_out"]["type"], "boolean");
}

TEST(GpuKeys, EveryKeyInTheTableIsOneTheLoaderKnows) {
  const std::string cluster =
      "name: c\ngpu_types:\n  - {NAME}\nnode_types:\n"
      "  - {name: n, gpu: g, gpus: 1, intra: {kind: pcie}, pcie: {link_class: pcie4, bandwidth: "
      "32GB/s, switches: [[0]]}}\n"
      "groups:\n  - {node_type: n, count: 1}\n";
  const std::string base =
      "name: g\nsms: 10\nmemory: 8GiB\nmemory_bandwidth: 100GB/s\n"
      "peak: {fp16: 10TFLOPS, fp32: 5TFLOPS}\n";
  auto load = [&](const std::string& gpu) {
    std::string flow = "{";
    for (size_t start = 0; start < gpu.size();) {
      const size_t end = gpu.find('\n', start);
      flow += (flow.size() > 1 ? ", " : "") + gpu.substr(start, end - start);
      start = end + 1;
    }
    std::string text = cluster;
    text.replace(text.find("{NAME}"), 6, flow + "}");
    std::string error = "no error";
    try {
      config::load_cluster_text(text, "c.yaml");
    } catch (const InputError& e) {
      error = e.what();
    }
    return error;
  };
  ASSERT_EQ(load(base), "no error");
  for (const config::Key& k : config::gpu_profile_keys()) {
    if (k.type == config::KeyType::map || k.name == "name" || k.name == "description" ||
        k.name == "architecture")
      continue;
    const std::string error = load(with_bad_value(base, k.name));
    EXPECT_EQ(error.rfind("c.yaml:", 0), 0u) << k.name << ": " << error;
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << k.name << ": " << error;
  }
  EXPECT_NE(load(base + "tdps: 700W\n").find("tdps: unknown key"), std::string::npos);
  const nlohmann::ordered_json schema = config::gpu_json_schema();
  EXPECT_EQ(schema["properties"]["peak"]["properties"].size(), 7u);
  EXPECT_EQ(schema["required"],
            nlohmann::ordered_json({"name", "sms", "memory", "memory_bandwidth", "peak"}));
}

}  // namespace
}  // namespace hetsim::workload
