#!/usr/bin/env bash
# The heterogeneous study: on four mixed clusters, every policy's best plan and the planner's own
# best, against the best uniform Megatron-LM plan. Writes results/*.json (hetsim plan --json) and
# results/table.md (summarise.py). Usage: experiments/heterogeneous/run.sh [HETSIM]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
hetsim="${1:-$here/../../build/hetsim}"
out="$here/results"
mkdir -p "$out"
# name | model | cluster | global batch | framework
cases=(
  "a100-v100|gpt3-1.3b|mixed-a100-v100|64|"
  "v100-t4|$here/gpt2-amp.yaml|aws-p3-g4dn|32|deepspeed"
  "h100-a100|gpt3-2.7b|mixed-h100-a100|128|"
  "4090-a100|gpt3-1.3b|mixed-4090-a100|64|"
  "4090-a100-70b|llama2-70b|mixed-4090-a100|64|"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name model cluster batch framework <<<"$c"
  echo "heterogeneous: $name ($model on $cluster, batch $batch)" >&2
  args=(plan --model "$model" --cluster "$cluster" --global-batch-size "$batch" --top 3 --json
        --quiet)
  [ -n "$framework" ] && args+=(--framework "$framework")
  "$hetsim" "${args[@]}" >"$out/$name.json.tmp"
  mv "$out/$name.json.tmp" "$out/$name.json"
done
python3 "$here/summarise.py" "$out" >"$out/table.md"
cat "$out/table.md"
