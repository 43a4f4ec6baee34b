#!/usr/bin/env bash
# Runs single-GPU plans for real on this GPU node: builds hetsim-execute-cuda (calibrate/cuda/,
# CUDA's own libraries only) and runs every program file made in advance by hetsim (hetsim
# cannot be built here: `hetsim execute --backend cuda --program-out FILE`, committed under
# experiments/h200-execute/programs/), each W warm-up and K measured iterations and one timed op
# by op. Everything lands in one folder DIR: build.log, run.log, measured/<program>.csv and
# summary.txt (predicted against the measured median per program). Compare a CSV back where
# hetsim is built with `hetsim execute --backend cuda ... --measured DIR/measured/<program>.csv`
# (experiments/h200-execute/README.md gives each program's command).
#
# Usage: calibrate/run_execute_gpu.sh [--out DIR] [--programs DIR] [--iterations K] [--warmup W]
#                                     [--deadline-s S] [--dry-run]
#   --out DIR        where everything goes (default out/gpu-execute)
#   --programs DIR   the program files (default experiments/h200-execute/programs)
#   --iterations K   measured iterations per program (default 10); --warmup W (default 3)
#   --deadline-s S   the whole script's wall time (default 420): programs not started by then are
#                    skipped, and said
#   --dry-run        build and check every program with the program's --dry-run; needs no GPU
# Environment: HETSIM_CUDA_BUILD (build folder, default build-cuda), HETSIM_CUDA_ARCHITECTURES
# (default: the GPU's own from nvidia-smi, else 80;90), plus CMake's own (CUDNN_HOME).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start_s=$SECONDS
out="" programs="$repo/experiments/h200-execute/programs" iterations=10 warmup=3 deadline_s=420
dry_run=0
while (($#)); do
  case "$1" in
    --out | --programs | --iterations | --warmup | --deadline-s)
      (($# >= 2)) || { echo "run_execute_gpu.sh: $1: missing value" >&2; exit 2; }
      case "$1" in
        --out) out="$2" ;;
        --programs) programs="$2" ;;
        --iterations) iterations="$2" ;;
        --warmup) warmup="$2" ;;
        --deadline-s) deadline_s="$2" ;;
      esac
      shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_execute_gpu.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
for n in "$iterations" "$warmup" "$deadline_s"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "run_execute_gpu.sh: not a whole number: $n" >&2; exit 2; }
done
[[ -n "$out" ]] || out="$repo/out/gpu-execute"
mkdir -p "$out/measured"
out="$(cd "$out" && pwd)"
build_log="$out/build.log" run_log="$out/run.log" summary="$out/summary.txt"
: >"$run_log"
say() { printf '%s\n' "$*" | tee -a "$run_log" >&2; }
fail() { say "run_execute_gpu.sh: $*"; exit 1; }
elapsed() { echo $((SECONDS - start_s)); }

shopt -s nullglob
files=("$programs"/*.csv)
((${#files[@]})) || fail "no program files (*.csv) in $programs"

# ---- build ---------------------------------------------------------------------------------
cd "$repo"
build="${HETSIM_CUDA_BUILD:-$repo/build-cuda}"
say "== build hetsim-execute-cuda into $build (log: $build_log)"
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
configure=(cmake -S calibrate/cuda -B "$build" -DCMAKE_BUILD_TYPE=Release)
if command -v ninja >/dev/null && { [[ ! -f "$build/CMakeCache.txt" ]] ||
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt"; }; then
  configure+=(-G Ninja)
fi
arch="${HETSIM_CUDA_ARCHITECTURES:-}"
if [[ -z "$arch" ]] && command -v nvidia-smi >/dev/null; then
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')" || arch=""
  [[ "$arch" =~ ^[0-9]+$ ]] || arch=""
fi
[[ -n "$arch" ]] && configure+=("-DCMAKE_CUDA_ARCHITECTURES=$arch")
{
  echo "\$ ${configure[*]}"
  "${configure[@]}" 2>&1
  echo "\$ cmake --build $build --target hetsim-execute-cuda -j $(nproc)"
  timeout 600 cmake --build "$build" --target hetsim-execute-cuda -j "$(nproc)" 2>&1
} >"$build_log" || { tail -n 30 "$build_log" >&2; fail "build failed (all of it in $build_log)"; }
grep -E 'hetsim-calibrate-cuda:|\*\*\*' "$build_log" | tee -a "$run_log" >&2 || true
program="$build/hetsim-execute-cuda"
say "built $program in $(elapsed) s"
if ! ((dry_run)); then
  nvidia-smi --query-gpu=index,name,compute_cap,clocks.sm,clocks.mem,temperature.gpu,power.limit,driver_version \
    --format=csv 2>&1 | tee -a "$run_log" >&2 || true
fi

# ---- run -----------------------------------------------------------------------------------
# The predicted iteration of a program file, and the median of a measured CSV's iterations.
predicted_of() { awk -F, '$1 == "predicted_iteration_s" { print $2; exit }' "$1"; }
median_of() {
  awk -F, '$1 == "iteration" { print $6 }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
{
  printf '# hetsim execute on one GPU: predicted (hetsim, when the program was written) against measured\n'
  printf '# %s, %d warm-up and %d measured iterations per program\n' "$(date -u +%FT%TZ)" "$warmup" "$iterations"
  printf '%-40s %12s %12s %8s  %s\n' program predicted_s measured_s error attention
} >"$summary"
failed=0
for f in "${files[@]}"; do
  name="$(basename "$f" .csv)"
  csv="$out/measured/$name.csv"
  if (($(elapsed) > deadline_s)); then
    say "== $name: SKIPPED (the $deadline_s s deadline has passed)"
    printf '%-40s %12s %12s %8s  %s\n' "$name" "$(predicted_of "$f")" - - "skipped: deadline" >>"$summary"
    continue
  fi
  say "== $name ($(elapsed) s)"
  if ((dry_run)); then
    "$program" --program "$f" --dry-run 2>&1 | tee -a "$run_log" >&2 || { failed=$((failed + 1)); say "$name: dry run FAILED"; }
    continue
  fi
  status=0
  # A fault inside cuDNN is sticky (the process ends): once more with attention unfused.
  for attempt in 1 2; do
    args=(--program "$f" --out "$csv" --iterations "$iterations" --warmup "$warmup")
    ((attempt == 2)) && args+=(--no-cudnn)
    status=0
    timeout 300 "$program" "${args[@]}" 2>&1 | tee -a "$run_log" >&2 || status=${PIPESTATUS[0]}
    ((status == 0 || status == 2 || status == 3)) && break
    say "$name: exit $status; again with --no-cudnn"
  done
  if ((status != 0)); then
    failed=$((failed + 1))
    printf '%-40s %12s %12s %8s  %s\n' "$name" "$(predicted_of "$f")" - - "FAILED (exit $status)" >>"$summary"
    ((status == 3)) && fail "no usable GPU (see $run_log)"
    continue
  fi
  p="$(predicted_of "$f")" m="$(median_of "$csv")"
  impl="$(awk -F, '$1 == "op" && ($5 == "cudnn" || $5 == "unfused") { n[$5]++ } END { for (k in n) printf "%s %d ", k, n[k] }' "$csv")"
  awk -v n="$name" -v p="$p" -v m="$m" -v a="$impl" \
    'BEGIN { printf "%-40s %12.6f %12.6f %+7.1f%%  %s\n", n, p, m, 100 * (p - m) / m, a }' >>"$summary"
done
say ""
cat "$summary" | tee -a "$run_log" >&2
say "done in $(elapsed) s; $failed program(s) failed; everything in $out"
((failed == 0))
