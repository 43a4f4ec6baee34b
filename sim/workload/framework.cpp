// Framework profiles; see framework.h.
#include "sim/workload/framework.h"

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

std::vector<std::string> framework_names() {
  std::vector<std::string> names;
  for (const auto& [name, f] : builtin_frameworks()) names.push_back(name);
  return names;  // sorted: map order
}

Framework load_framework_text(const std::string& text, const std::string& file) {
  using namespace config;
  const YAML::Node root = load_yaml(text, file);
  if (!root.IsMap()) throw InputError(file + ": expected a map at the top level");
  check_keys(file, root, "",
             {"name", "description", "gradient_reduction", "bucket_size", "zero_stage",
              "pipeline_p2p", "pipeline_gathers", "pipeline_zero_max", "kernels", "host",
              "tied_embedding_reduction", "reserved_memory", "gradient_accumulation",
              "pipeline_send_grad", "pipeline_p2p_buffer", "sequence_parallel", "gather_copy_out"});
  Framework f;
  f.source = file;
  f.name = get_string(file, root, "", "name");
  f.description = get_string(file, root, "", "description", "");
  f.gradient_reduction = static_cast<GradReduction>(
      get_choice(file, root, "", "gradient_reduction", {"overlapped", "after_backward"}));
  if (root["bucket_size"]) {
    f.bucket_bytes = get_quantity(file, root, "", "bucket_size", Dimension::bytes);
    if (!(*f.bucket_bytes > 0))
      throw InputError(where(file, root["bucket_size"]) + ": bucket_size: expected a size above 0");
  }
  if (root["zero_stage"])
    f.zero_stage = static_cast<int>(get_int(file, root, "", "zero_stage", 0, 3));
  f.pipeline_zero_max = static_cast<int>(get_int(file, root, "", "pipeline_zero_max", 0, 3, 3));
  f.blocking_p2p = get_choice(file, root, "", "pipeline_p2p", {"async", "blocking"}) == 1;
  f.sequence_parallel =
      get_choice(file, root, "", "sequence_parallel", {"false", "true"}, "true") == 1;
  f.gather_copy_out =
      get_choice(file, root, "", "gather_copy_out", {"false", "true"}, "false") == 1;
  f.send_grad_after_next_receive =
      get_choice(file, root, "", "pipeline_send_grad", {"after_backward", "after_next_receive"},
                 "after_backward") == 1;
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
    check_keys(file, gathers, "pipeline_gathers", {"forward", "backward"});
    f.pipeline_gathers_forward =
        static_cast<int>(get_int(file, gathers, "pipeline_gathers", "forward", 0, 4, 0));
    f.pipeline_gathers_backward =
        static_cast<int>(get_int(file, gathers, "pipeline_gathers", "backward", 0, 4, 0));
  }
  const size_t kernels =
      get_choice(file, root, "", "kernels", {"fused", "eager", "eager_autocast"}, "fused");
  f.eager_kernels = kernels >= 1;
  f.autocast = kernels == 2;
  f.separate_grad_accumulation =
      get_choice(file, root, "", "gradient_accumulation", {"fused", "add"}, "fused") == 1;
  f.tied_embedding_reduction = static_cast<TiedReduction>(get_choice(
      file, root, "", "tied_embedding_reduction", {"none", "model_grads", "main_grads"}, "none"));
  if (root["reserved_memory"]) {
    f.reserved_memory = get_quantity(file, root, "", "reserved_memory", Dimension::bytes);
    if (!(f.reserved_memory >= 0 && f.reserved_memory <= 64.0 * (1ull << 30)))
      throw InputError(where(file, root["reserved_memory"]) +
                       ": reserved_memory: expected a size from 0 to 64 GiB");
  }
  const YAML::Node host = require(file, root, "", "host");
  check_keys(file, host, "host", {"per_pass", "per_step", "per_kernel"});
  auto time_of = [&](const char* key) {
    const double s = get_quantity(file, host, "host", key, Dimension::time);
    if (!(s >= 0 && s <= 60))
      throw InputError(where(file, host[key]) + ": host." + key +
                       ": expected a time from 0 s to 60 s");
    return Time::from_seconds(s);
  };
  f.host_per_pass = time_of("per_pass");
  f.host_per_step = time_of("per_step");
  if (host["per_kernel"]) {
    const Time t = time_of("per_kernel");
    if (t > Time::from_seconds(0.01))
      throw InputError(where(file, host["per_kernel"]) +
                       ": host.per_kernel: expected a time from 0 s to 10 ms");
    f.host_per_kernel = t;
  }
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
