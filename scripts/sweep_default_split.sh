#!/usr/bin/env bash
# Simulates the default study (experiments/default/llama2-13b-mixed.yaml) under every split of
# Llama 2 13B's 40 layers between its two pipeline stages (H100 node first, A100 node second) and
# prints the iteration time of each (and "oom" where a device runs out of memory), fastest first:
# how the shipped split was chosen.
# Usage: scripts/sweep_default_split.sh [HETSIM_BINARY]  (default build/hetsim)
set -euo pipefail
cd "$(dirname "$0")/.."
hetsim=${1:-build/hetsim}
layers=40
for first in $(seq 1 $((layers - 1))); do
  second=$((layers - first))
  t=$("$hetsim" simulate --model llama2-13b --cluster mixed-h100-a100 \
        --plan experiments/default/llama2-13b-mixed.yaml \
        --plan-set "replicas[0].stages[0].layers=$first" --plan-set "replicas[0].stages[1].layers=$second" \
        --plan-set "replicas[1].stages[0].layers=$first" --plan-set "replicas[1].stages[1].layers=$second" \
        --json | python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["iteration_time_s"], "oom" if r["oom"] else "")')
  echo "$first/$second $t"
done | sort -g -k2
