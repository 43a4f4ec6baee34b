#!/usr/bin/env bash
# On a GPU machine with PyTorch: PyTorch profiler traces of real training iterations of GPT-3
# 350M and 1.3B shapes (bf16 autocast, fused attention, AdamW), for `hetsim calibrate
# import-trace` and `hetsim calibrate diff` against the GPU's calibration database
# (docs/guides/check-against-your-run.md). Each trace is written and gzipped as soon as it is
# recorded, so a run cut short keeps what it finished.
#
# usage: calibrate/run_trace_gpu.sh --out DIR [--device cuda|cpu] [--quick]
#   --device cpu: the same on this machine's CPU (fp32, small shapes), to rehearse the script.
set -euo pipefail
out="" device=cuda quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "run_trace_gpu.sh: unknown argument $1 (expected --out DIR [--device cuda|cpu] [--quick])" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "run_trace_gpu.sh: --out DIR is required" >&2; exit 2; }
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
"$py" -c "import torch" 2>/dev/null || { echo "run_trace_gpu.sh: $py has no torch" >&2; exit 1; }

# name layers hidden heads seq micro-batch accum
if [ "$device" = cuda ]; then
  configs=("gpt-350m 24 1024 16 2048 4 2" "gpt-1.3b 24 2048 16 2048 2 2")
  [ "$quick" = 1 ] && configs=("gpt-350m 24 1024 16 2048 4 2")
  extra=(--device cuda --bf16 --vocab 50304)
else
  configs=("tiny-gpt 4 256 4 128 2 1")
  extra=(--device cpu --threads 1 --vocab 2048)
fi
for c in "${configs[@]}"; do
  read -r name layers hidden heads seq mb accum <<<"$c"
  file="$out/$name-mb$mb-x$accum.json"
  echo "== $name: $layers layers, hidden $hidden, seq $seq, micro-batch $mb x $accum" | tee -a "$out/run.log"
  if "$py" "$here/tools/torch_profile_trace.py" --out "$file" --layers "$layers" --hidden "$hidden" \
      --heads "$heads" --seq "$seq" --micro-batch "$mb" --accum "$accum" --iters 3 "${extra[@]}" \
      >>"$out/run.log" 2>&1; then
    gzip -f "$file"
    echo "   $file.gz" | tee -a "$out/run.log"
  else
    echo "   failed (see $out/run.log)" | tee -a "$out/run.log"
  fi
done
