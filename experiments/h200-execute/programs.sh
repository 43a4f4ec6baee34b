#!/usr/bin/env bash
# The single-GPU programs of this experiment, and their comparison once measured.
#   experiments/h200-execute/programs.sh write           # here: programs/<model>-mb<B>.csv
#   experiments/h200-execute/programs.sh compare DIR     # here: DIR/measured/<model>-mb<B>.csv
#                                                          (from calibrate/run_execute_gpu.sh)
# GPT-3 125M to 2.7B on one H200 (dgx-h100 with the H200 profile), micro-batch 1, 2 and 4, 4
# micro-batches per iteration, bf16 and fp8, predicted with the shipped H200 calibration.
set -euo pipefail
dir="${2:+$(cd "$2" && pwd)}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"  # relative paths: the programs name their plan and calibration as in the repository
here=experiments/h200-execute
hetsim="${HETSIM:-build/hetsim}"
mode="${1:-}"
[[ "$mode" == write || ("$mode" == compare && $# -ge 2) ]] ||
  { sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
# Each program: model, micro-batch, precision (fp8: the GEMMs in fp8 as Transformer Engine runs
# them, attention and the memory-bound kernels in bf16).
programs=(
  "gpt3-125m 1 bf16" "gpt3-125m 2 bf16" "gpt3-125m 4 bf16"
  "gpt3-350m 1 bf16" "gpt3-350m 2 bf16" "gpt3-350m 4 bf16"
  "gpt3-1.3b 1 bf16" "gpt3-1.3b 2 bf16" "gpt3-1.3b 4 bf16"
  "gpt3-2.7b 1 bf16" "gpt3-2.7b 2 bf16" "gpt3-2.7b 4 bf16"
  "gpt3-1.3b 4 fp8" "gpt3-2.7b 2 fp8"
)
for program in "${programs[@]}"; do
  read -r model mb precision <<<"$program"
  {
    name="$model-mb$mb"
    [[ "$precision" == bf16 ]] || name="$model-$precision-mb$mb"
    args=(execute --backend cuda --model "$model" --cluster dgx-h100 --nodes 1
      --set 'node_types[0].gpu=h200-sxm-141gb' --plan "$here/plan.yaml"
      --plan-set "micro_batch_size=$mb" --plan-set "global_batch_size=$((4 * mb))"
      --plan-set "precision=$precision" --calibration calibrate/data/h200-sxm-141gb.h5)
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
  }
done
