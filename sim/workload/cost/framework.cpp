// Framework profiles; see framework.h.
#include "sim/workload/cost/framework.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "sim/config/embedded_data.h"
#include "sim/config/yaml_util.h"
#include "sim/core/error.h"

namespace hetsim::workload {

std::string to_string(GradReduction g) {
  return g == GradReduction::overlapped ? "overlapped" : "after_backward";
}

namespace {
constexpr const char* kDir = "frameworks/";
constexpr const char* kExt = ".yaml";
}  // namespace

namespace {
// The built-in frameworks (frameworks/*.yaml), parsed once: every plan load names one.
const std::map<std::string, Framework>& builtin_frameworks() {
  static const std::map<std::string, Framework> all = [] {
    std::map<std::string, Framework> m;
    const std::string dir = kDir, ext = kExt;
    for (const config::EmbeddedFile& f : config::embedded_files()) {
      const std::string p = f.path;
      if (p.rfind(dir, 0) == 0 && p.size() > dir.size() + ext.size() &&
          p.compare(p.size() - ext.size(), ext.size(), ext) == 0 &&
          p.find('/', dir.size()) == std::string::npos)
        m.emplace(p.substr(dir.size(), p.size() - dir.size() - ext.size()),
                  load_framework_text(f.text, f.path));
    }
    return m;
  }();
  return all;
}
}  // namespace

namespace {
using T = config::KeyType;
constexpr std::string_view kAll = "";

// What the framework is, how it reduces gradients and how its pipeline moves activations.
void add_reduction_and_pipeline_keys(std::vector<config::Key>& keys) {
  const std::vector<config::Key> rows = {
      {"name",
       T::text,
       {},
       0,
       0,
       "",
       "The framework's name, as a plan's `framework:` names it",
       kAll},
      {"description", T::text, {}, 0, 0, "", "One line on it", kAll},
      {"gradient_reduction",
       T::choice,
       {"overlapped", "after_backward"},
       0,
       0,
       "",
       "`overlapped`: buckets all-reduced as the last backward pass fills them; `after_backward`: "
       "all of them once it ends. A plan's `gradient_reduction:` overrides it",
       kAll},
      {"bucket_size",
       T::size,
       {},
       0,
       0,
       "",
       "The gradient bucket: the plan's default `bucket_size`",
       kAll},
      {"zero_stage", T::integer, {}, 0, 3, "", "The plan's default ZeRO stage", kAll},
      {"pipeline_p2p",
       T::choice,
       {"async", "blocking"},
       0,
       0,
       "",
       "`async`: a send does not hold the stage; `blocking`: the sending stage waits until its "
       "transfer has arrived",
       kAll},
      {"pipeline_gathers",
       T::map,
       {},
       0,
       0,
       "",
       "A tensor-parallel stage's pipeline transfers move 1/t of the activation from each rank, "
       "and the framework all-gathers the whole activation over the stage's ranks N times per "
       "received activation and per received gradient (not with sequence parallelism). "
       "`deepspeed`: 1 and 2 (its pipeline engine's partitioned activations)",
       kAll},
      {"pipeline_gathers.forward",
       T::integer,
       {},
       0,
       4,
       "0",
       "Gathers before the forward pass of a received activation",
       kAll},
      {"pipeline_gathers.backward",
       T::integer,
       {},
       0,
       4,
       "0",
       "Gathers before the backward pass (its own output, the received gradient)",
       kAll},
      {"pipeline_zero_max",
       T::integer,
       {},
       0,
       3,
       "3",
       "The highest `zero_stage` the framework runs with more than one pipeline stage; a plan "
       "above it is refused. `deepspeed`: 1 (its PipelineEngine asserts ZeRO stage below 2)",
       kAll},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// How it runs kernels, its host's time, the tied embedding's reduction and its memory.
void add_host_and_memory_keys(std::vector<config::Key>& keys) {
  const std::vector<config::Key> rows = {
      {"kernels",
       T::choice,
       {"fused", "eager", "eager_autocast"},
       0,
       0,
       "fused",
       "`fused`: Megatron-LM's fused kernels, the residual stream in the plan's precision; "
       "`eager`: PyTorch modules op by op (dropout and residual add separate kernels, Llama-style "
       "layers as Meta's reference code writes them); `eager_autocast`: eager under "
       "torch.autocast over fp32 parameters (fp32 residual stream and norms, casts for each "
       "matmul's inputs and each weight gradient; none in an fp32 plan)",
       kAll},
      {"masked_softmax",
       T::map,
       {},
       0,
       0,
       "",
       "Standard attention's scale-mask-softmax: where the framework's fused kernel runs it, and "
       "how it runs otherwise (without this map, the fused kernel everywhere)",
       kAll},
      {"masked_softmax.fused_up_to",
       T::integer,
       {},
       17,
       1048576,
       "no limit",
       "The longest key length the fused kernel takes (Megatron-LM's FusedScaleMaskSoftmax: "
       "2048 before Megatron-Core); it also needs a 16-bit plan, more than 16 keys, queries and "
       "micro-batch x local heads in multiples of 4. Elsewhere the softmax runs as PyTorch's "
       "kernels. `megatron-lm-2021`: 2048",
       kAll},
      {"masked_softmax.unfused",
       T::choice,
       {"plan", "fp32"},
       0,
       0,
       "plan",
       "The unfused softmax: `plan`: mask and softmax in the plan's precision; `fp32`: cast up, "
       "scaled, masked, softmax, cast down (Megatron-LM with query-key layer scaling, its default "
       "before Megatron-Core). `megatron-lm-2021`: fp32",
       kAll},
      {"host", T::map, {}, 0, 0, "", "The engine's host time", kAll},
      {"host.per_pass",
       T::time,
       {},
       0,
       60,
       "",
       "Host time per forward or backward pass of a micro-batch on a stage (0 s to 60 s); the "
       "device waits",
       kAll},
      {"host.per_step",
       T::time,
       {},
       0,
       60,
       "",
       "Host time per iteration before the optimizer step (0 s to 60 s)",
       kAll},
      {"host.per_kernel",
       T::time,
       {},
       0,
       0.01,
       "the cost model's",
       "Host time to issue one kernel of hetsim's list (0 s to 10 ms); a run of kernels takes "
       "the longer of its GPU time and its host time. `pytorch-ddp`: 31 us, fitted on the H200 "
       "PyTorch set",
       kAll},
      {"tied_embedding_reduction",
       T::choice,
       {"none", "model_grads", "main_grads"},
       0,
       0,
       "none",
       "Whether the first and last pipeline stages all-reduce the tied embedding's gradients "
       "after the backward pass, and in which precision",
       kAll},
      {"reserved_memory",
       T::size,
       {},
       0,
       0,
       "0",
       "Device memory the process holds beyond what hetsim counts (CUDA context, workspaces, "
       "allocator slack), 0 to 64 GiB. `deepspeed`: 1.5 GiB",
       kAll},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

// Gradient accumulation, its pipeline transfers' order and buffer, sequence parallelism
// and ZeRO-3's copy out of the gather.
void add_accumulation_and_transfer_keys(std::vector<config::Key>& keys) {
  const std::vector<config::Key> rows = {
      {"gradient_accumulation",
       T::choice,
       {"fused", "add"},
       0,
       0,
       "fused",
       "`fused`: the weight-gradient GEMM accumulates into the gradient (Megatron-LM's gradient "
       "accumulation fusion); `add`: autograd adds each micro-batch's weight gradients into "
       ".grad with a kernel of its own",
       kAll},
      {"pipeline_send_grad",
       T::choice,
       {"after_backward", "after_next_receive"},
       0,
       0,
       "after_backward",
       "When a stage sends a backward pass's gradient: as soon as it is computed, or after the "
       "next forward pass has received its activation (DeepSpeed's TrainSchedule)",
       kAll},
      {"pipeline_p2p_buffer",
       T::size,
       {},
       0,
       0,
       "",
       "With `blocking` and `after_next_receive`: a send of more bytes than this moves only once "
       "its receiver has reached the receive (NCCL_BUFFSIZE, 4 MiB, in DeepSpeed's 2021 "
       "broadcast-based point-to-point)",
       kAll},
      {"sequence_parallel",
       T::flag,
       {},
       0,
       0,
       "true",
       "Whether the framework has Megatron-style sequence parallelism; a plan that asks for it "
       "where a stage is tensor-parallel is refused",
       kAll},
      {"gather_copy_out",
       T::flag,
       {},
       0,
       0,
       "false",
       "Under ZeRO-3, each gathered layer copied out of the all-gather's buffer into its "
       "parameters on the compute stream (PyTorch FSDP2)",
       kAll},
  };
  keys.insert(keys.end(), rows.begin(), rows.end());
}

std::vector<config::Key> make_framework_keys() {
  std::vector<config::Key> keys;
  add_reduction_and_pipeline_keys(keys);
  add_host_and_memory_keys(keys);
  add_accumulation_and_transfer_keys(keys);
  return keys;
}

// The key's row (`path.key` for a key of a nested map).
const config::Key& row_of(std::string_view key) {
  return config::find_key(framework_keys(), key, "workload::framework_keys()");
}

// The key's choices, for get_choice.
std::vector<std::string> choices(std::string_view key) { return config::choices_of(row_of(key)); }

// An integer key of the map at `path` ("" for the top level), in its row's range.
long table_int(const std::string& file, const YAML::Node& node, std::string_view path,
               std::string_view key, std::optional<long> default_value = std::nullopt) {
  const config::Key& row = row_of(config::join_path(path, key));
  return config::get_int(file, node, path, key, static_cast<long>(row.min),
                         static_cast<long>(row.max), default_value);
}
}  // namespace

const std::vector<config::Key>& framework_keys() {
  static const std::vector<config::Key> table = make_framework_keys();
  return table;
}

std::string framework_keys_markdown() {
  return "# Framework keys\n\n"
         "<!-- Generated by `hetsim reference framework-keys` from "
         "sim/workload/cost/framework.cpp; "
         "do not edit. -->\n\n"
         "The keys of a framework file (`frameworks/*.yaml`, or a plan's `framework: FILE`). What "
         "each framework models and why: [frameworks](../../frameworks/README.md). Editors check "
         "framework files against [the JSON Schema](../schemas/framework.schema.json).\n\n" +
         config::keys_markdown(framework_keys(), false);
}

nlohmann::ordered_json framework_json_schema() {
  return config::keys_json_schema(framework_keys(), "hetsim framework",
                                  "Generated by `hetsim reference framework-schema` from "
                                  "sim/workload/cost/framework.cpp; do not edit.",
                                  {"name", "gradient_reduction", "pipeline_p2p", "host"});
}

std::vector<std::string> framework_names() {
  std::vector<std::string> names;
  for (const auto& [name, f] : builtin_frameworks()) names.push_back(name);
  return names;  // sorted: map order
}

Framework load_framework_text(const std::string& text, const std::string& file) {
  using namespace config;
  const YAML::Node root = load_yaml(text, file);
  if (!root.IsMap()) throw InputError(file + ": expected a map at the top level");
  check_keys(file, root, "", config::key_names(framework_keys()));
  Framework f;
  f.source = file;
  f.name = get_string(file, root, "", "name");
  f.description = get_string(file, root, "", "description", "");
  f.gradient_reduction = static_cast<GradReduction>(
      get_choice(file, root, "", "gradient_reduction", choices("gradient_reduction")));
  if (root["bucket_size"]) {
    f.bucket_bytes = get_quantity(file, root, "", "bucket_size", Dimension::bytes);
    if (!(*f.bucket_bytes > 0))
      throw InputError(where(file, root["bucket_size"]) + ": bucket_size: expected a size above 0");
  }
  if (root["zero_stage"]) f.zero_stage = static_cast<int>(table_int(file, root, "", "zero_stage"));
  f.pipeline_zero_max = static_cast<int>(table_int(file, root, "", "pipeline_zero_max", 3));
  f.blocking_p2p = get_choice(file, root, "", "pipeline_p2p", choices("pipeline_p2p")) == 1;
  f.sequence_parallel =
      get_choice(file, root, "", "sequence_parallel", {"false", "true"}, "true") == 1;
  f.gather_copy_out =
      get_choice(file, root, "", "gather_copy_out", {"false", "true"}, "false") == 1;
  f.send_grad_after_next_receive = get_choice(file, root, "", "pipeline_send_grad",
                                              choices("pipeline_send_grad"), "after_backward") == 1;
  if (root["pipeline_p2p_buffer"]) {
    const double b = get_quantity(file, root, "", "pipeline_p2p_buffer", Dimension::bytes);
    if (!(b >= 0 && b <= 64.0 * (1ull << 30)))
      throw InputError(where(file, root["pipeline_p2p_buffer"]) +
                       ": pipeline_p2p_buffer: expected a size from 0 to 64 GiB");
    if (!f.blocking_p2p)
      throw InputError(where(file, root["pipeline_p2p_buffer"]) +
                       ": pipeline_p2p_buffer: needs pipeline_p2p: blocking (an asynchronous "
                       "send's receiver posts its receive ahead)");
    if (!f.send_grad_after_next_receive)
      throw InputError(where(file, root["pipeline_p2p_buffer"]) +
                       ": pipeline_p2p_buffer: needs pipeline_send_grad: after_next_receive (with "
                       "each gradient sent right after its backward pass, two stages that both "
                       "send first wait for each other)");
    f.p2p_buffer_bytes = b;
  }
  if (root["pipeline_gathers"]) {
    const YAML::Node gathers = root["pipeline_gathers"];
    if (!gathers.IsMap())
      throw InputError(where(file, gathers) +
                       ": pipeline_gathers: expected a map {forward: N, backward: N}");
    check_keys(file, gathers, "pipeline_gathers",
               config::key_names(framework_keys(), "pipeline_gathers"));
    f.pipeline_gathers_forward =
        static_cast<int>(table_int(file, gathers, "pipeline_gathers", "forward", 0));
    f.pipeline_gathers_backward =
        static_cast<int>(table_int(file, gathers, "pipeline_gathers", "backward", 0));
  }
  if (root["masked_softmax"]) {
    const YAML::Node sm = root["masked_softmax"];
    if (!sm.IsMap())
      throw InputError(where(file, sm) +
                       ": masked_softmax: expected a map {fused_up_to: N, unfused: plan|fp32}");
    check_keys(file, sm, "masked_softmax", config::key_names(framework_keys(), "masked_softmax"));
    f.masked_softmax.given = true;
    if (sm["fused_up_to"])
      f.masked_softmax.fused_up_to = table_int(file, sm, "masked_softmax", "fused_up_to", 0);
    f.masked_softmax.unfused_fp32 = get_choice(file, sm, "masked_softmax", "unfused",
                                               choices("masked_softmax.unfused"), "plan") == 1;
  }
  const size_t kernels = get_choice(file, root, "", "kernels", choices("kernels"), "fused");
  f.eager_kernels = kernels >= 1;
  f.autocast = kernels == 2;
  f.separate_grad_accumulation = get_choice(file, root, "", "gradient_accumulation",
                                            choices("gradient_accumulation"), "fused") == 1;
  f.tied_embedding_reduction = static_cast<TiedReduction>(get_choice(
      file, root, "", "tied_embedding_reduction", choices("tied_embedding_reduction"), "none"));
  if (root["reserved_memory"]) {
    f.reserved_memory = get_quantity(file, root, "", "reserved_memory", Dimension::bytes);
    if (!(f.reserved_memory >= 0 && f.reserved_memory <= 64.0 * (1ull << 30)))
      throw InputError(where(file, root["reserved_memory"]) +
                       ": reserved_memory: expected a size from 0 to 64 GiB");
  }
  const YAML::Node host = require(file, root, "", "host");
  check_keys(file, host, "host", config::key_names(framework_keys(), "host"));
  // A time in its row's range.
  auto time_of = [&](const char* key) {
    const config::Key& row = row_of(join_path("host", key));
    const double s = get_quantity(file, host, "host", key, Dimension::time);
    if (!(s >= row.min && s <= row.max)) {
      const std::string most =
          row.max >= 1 ? fmt::format("{:g} s", row.max) : fmt::format("{:g} ms", row.max * 1e3);
      throw InputError(where(file, host[key]) + ": host." + key + ": expected a time from " +
                       fmt::format("{:g}", row.min) + " s to " + most);
    }
    return Time::from_seconds(s);
  };
  f.host_per_pass = time_of("per_pass");
  f.host_per_step = time_of("per_step");
  if (host["per_kernel"]) f.host_per_kernel = time_of("per_kernel");
  return f;
}

Framework load_framework(const std::string& name_or_path) {
  const auto& builtin = builtin_frameworks();
  if (auto it = builtin.find(name_or_path); it != builtin.end()) return it->second;
  const bool looks_like_file = name_or_path.find('/') != std::string::npos ||
                               name_or_path.find(".yaml") != std::string::npos ||
                               name_or_path.find(".yml") != std::string::npos;
  if (!looks_like_file) {
    const std::vector<std::string> names = framework_names();
    throw InputError("unknown framework \"" + name_or_path + "\" (expected one of " +
                     config::join_names(names) + ", or a framework YAML file)" +
                     config::did_you_mean(name_or_path, names));
  }
  return load_framework_text(config::read_text_file(name_or_path, "framework file"), name_or_path);
}

}  // namespace hetsim::workload
