// The policy table and the helpers the policies share; see policy.h.
#include "sim/policy/policy.h"

#include <algorithm>
#include <map>

#include "sim/core/error.h"

namespace hetsim::policy {

const std::vector<const Policy*>& policies() {
  static const std::vector<const Policy*> table = {&megatron_policy(), &zero_policy(), &whale_policy()};
  return table;
}

std::vector<const Policy*> select_policies(const std::string& name) {
  if (name == "all") return policies();
  std::string names;
  for (const Policy* p : policies()) {
    if (p->name() == name) return {p};
    names += std::string(names.empty() ? "" : ", ") + p->name();
  }
  throw InputError("--policy: unknown policy \"" + name + "\" (expected all or one of " + names +
                   ")");
}

int min_gpus_per_node(const platform::Cluster& c) {
  std::map<uint32_t, int> per_node;
  for (platform::GpuId g = 0; g < c.gpu_count(); ++g) ++per_node[c.gpu(g).node];
  int least = 0;
  for (const auto& [node, n] : per_node) least = least == 0 ? n : std::min(least, n);
  return least;
}

std::vector<int> tensor_parallel_degrees(const workload::ModelConfig& m, int limit) {
  std::vector<int> out;
  for (int t = 1; t <= limit; t *= 2) {
    if (m.heads % t != 0 || m.ffn_hidden % t != 0) continue;
    if (m.kv_heads % t != 0 && t % m.kv_heads != 0) continue;
    out.push_back(t);
  }
  return out;
}

std::vector<int64_t> micro_batch_sizes(int64_t per_replica) {
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= std::min<int64_t>(per_replica, 16); b *= 2) {
    if (per_replica % b == 0) out.push_back(b);
  }
  return out;
}

}  // namespace hetsim::policy
