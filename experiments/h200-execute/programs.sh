#!/usr/bin/env bash
# The single-GPU programs of this experiment, and their comparison once measured.
#   experiments/h200-execute/programs.sh write           # here: programs/<model>-mb<B>.csv
#   experiments/h200-execute/programs.sh compare DIR     # here: DIR/measured/<model>-mb<B>.csv
#                                                          (from calibrate/run_execute_gpu.sh)
# GPT-3 125M, 350M and 1.3B on one H200 (dgx-h100 with the H200 profile), micro-batch 1, 2 and 4,
# 4 micro-batches per iteration, predicted with the shipped H200 calibration.
set -euo pipefail
dir="${2:+$(cd "$2" && pwd)}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"  # relative paths: the programs name their plan and calibration as in the repository
here=experiments/h200-execute
hetsim="${HETSIM:-build/hetsim}"
mode="${1:-}"
[[ "$mode" == write || ("$mode" == compare && $# -ge 2) ]] ||
  { sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
for model in gpt3-125m gpt3-350m gpt3-1.3b; do
  for mb in 1 2 4; do
    name="$model-mb$mb"
    args=(execute --backend cuda --model "$model" --cluster dgx-h100 --nodes 1
      --set 'node_types[0].gpu=h200-sxm-141gb' --plan "$here/plan.yaml"
      --plan-set "micro_batch_size=$mb" --plan-set "global_batch_size=$((4 * mb))"
      --calibration calibrate/data/h200-sxm-141gb.h5)
    if [[ "$mode" == write ]]; then
      mkdir -p "$here/programs"
      "$hetsim" "${args[@]}" --program-out "$here/programs/$name.csv"
    else
      csv="$dir/measured/$name.csv"
      if [[ -f "$csv" ]]; then
        echo "== $name"
        "$hetsim" "${args[@]}" --measured "$csv"
      else
        echo "== $name: not measured ($csv missing)"
      fi
    fi
  done
done
