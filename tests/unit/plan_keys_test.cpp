// The plan keys' table (workload/plan_keys.h) is what the loader reads: every key in it is known
// to the loader, a key not in it is refused, each choice key takes exactly its listed choices,
// and the generated reference and schema list every key.
#include "sim/workload/plan_keys.h"

#include <gtest/gtest.h>

#include <set>

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

}  // namespace
}  // namespace hetsim::workload
