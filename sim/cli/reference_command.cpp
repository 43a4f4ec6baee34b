// `hetsim reference`: the reference pages and JSON Schemas generated from the code's own tables
// (docs/reference/, docs/schemas/; the test docs.generated fails when the files are stale).
#include <iostream>

#include "sim/cli/commands.h"
#include "sim/workload/plan_keys.h"

namespace hetsim::cli {

void add_reference_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "reference",
      "Print a reference generated from the code: plan-keys (Markdown, "
      "docs/reference/plan-keys.md) or plan-schema (JSON Schema, docs/schemas/plan.schema.json)");
  auto what = std::make_shared<std::string>();
  cmd->add_option("what", *what, "plan-keys or plan-schema")
      ->required()
      ->check(CLI::IsMember({"plan-keys", "plan-schema"}));
  cmd->callback([&action, what] {
    action = [what] {
      if (*what == "plan-keys") {
        std::cout << workload::plan_keys_markdown();
      } else {
        std::cout << workload::plan_json_schema().dump(2) << "\n";
      }
      return 0;
    };
  });
}

}  // namespace hetsim::cli
