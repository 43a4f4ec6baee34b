// The launcher table and the two ways a launch is printed (shell text, JSON).
#include "sim/launch/launcher.h"

#include "sim/core/error.h"

namespace hetsim::launch {

const std::vector<const Launcher*>& launchers() {
  static const std::vector<const Launcher*> table = {&megatron_launcher(), &deepspeed_launcher(),
                                                     &torchrun_launcher()};
  return table;
}

const Launcher& find_launcher(const std::string& name) {
  std::string names;
  for (const Launcher* l : launchers()) {
    if (l->name() == name) return *l;
    names += std::string(names.empty() ? "" : ", ") + l->name();
  }
  throw InputError("--framework: unknown framework \"" + name + "\" (expected one of " + names +
                   ")");
}

std::string to_text(const Launch& l) {
  std::string out;
  if (!l.hosts.empty()) {
    out +=
        "# rank order: node rank, node and its GPUs in local-rank order (CUDA_VISIBLE_DEVICES)\n";
    for (size_t i = 0; i < l.hosts.size(); ++i) {
      std::string gpus;
      for (size_t k = 0; k < l.hosts[i].local_gpus.size(); ++k) {
        gpus += (k ? "," : "") + std::to_string(l.hosts[i].local_gpus[k]);
      }
      out += "#   node rank " + std::to_string(i) + ": " + l.hosts[i].node + " GPUs " + gpus + "\n";
    }
  }
  for (const auto& [key, value] : l.env) out += "export " + key + "=" + value + "\n";
  // The launcher and its script on the first line, then one flag (with its values) a line.
  bool flags = false;
  for (size_t i = 0; i < l.command.size(); ++i) {
    const std::string& a = l.command[i];
    const bool script = a.size() > 3 && a.compare(a.size() - 3, 3, ".py") == 0;
    if (i > 0) out += flags && a.rfind("--", 0) == 0 ? " \\\n    " : " ";
    // A word the shell would expand or split ("[0,1,1]" is a glob) goes in single quotes.
    if (a.empty() || a.find_first_of(" \t\n[]*?{}()<>|&;$`'\"\\!#~") != std::string::npos) {
      std::string q = "'";
      for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      out += q + "'";
    } else {
      out += a;
    }
    flags = flags || script;
  }
  out += "\n";
  if (!l.config.empty()) {
    out +=
        "\n# " +
        (l.config_file.empty() ? std::string("settings for the training script") : l.config_file) +
        "\n" + l.config.dump(2) + "\n";
  }
  return out;
}

nlohmann::ordered_json to_json(const Launch& l) {
  nlohmann::ordered_json j;
  j["framework"] = l.framework;
  j["command"] = l.command;
  j["config"] = l.config;
  if (!l.config_file.empty()) j["config_file"] = l.config_file;
  j["env"] = nlohmann::ordered_json::object();
  for (const auto& [key, value] : l.env) j["env"][key] = value;
  j["hosts"] = nlohmann::ordered_json::array();
  for (const HostRanks& h : l.hosts) {
    j["hosts"].push_back({{"node", h.node}, {"gpus", h.local_gpus}});
  }
  j["unsupported"] = l.unsupported;
  if (!l.approximation.empty()) j["approximation"] = l.approximation;
  return j;
}

}  // namespace hetsim::launch
