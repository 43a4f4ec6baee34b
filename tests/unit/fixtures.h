// What many unit tests build: a built-in cluster at a node count, and a small GPT.
#pragma once

#include <string>

#include "sim/core/error.h"
#include "sim/platform/cluster.h"
#include "sim/workload/model/model.h"
#include "sim/workload/plan/plan.h"

namespace hetsim::test {

inline platform::Cluster cluster(const std::string& name, int nodes = 1) {
  config::ClusterOptions o;
  o.nodes = nodes;
  return platform::Cluster(config::load_cluster(name, o));
}

// GPT-style, hidden 1024, 16 heads, sequence 1024, tied embeddings.
inline workload::ModelConfig small_gpt(int layers = 8) {
  return workload::load_model_yaml_text(
      "name: small\nfamily: gpt\nlayers: " + std::to_string(layers) +
          "\nhidden: 1024\nheads: 16\nvocab: 50304\nsequence: 1024\nactivation: gelu\n"
          "norm: layernorm\nposition: learned\ntied_embeddings: true\ncausal: true\nbias: true\n",
      "small.yaml");
}

// What loading a plan's text (as "p.yaml") says: its InputError's message, or "no error".
inline std::string plan_error(const std::string& text, const workload::ModelConfig& m,
                              const platform::Cluster& c) {
  try {
    workload::load_plan_text(text, "p.yaml", m, c);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace hetsim::test
