#!/usr/bin/env bash
# Full CUDA calibration of this GPU node in one command, within a wall-time deadline (7 minutes
# by default, the build included): build calibrate/cuda, measure into DIR/calibration.csv (written
# as it measures), convert it to DIR/<device_type>.h5, time a PyTorch reference, and summarise.
# Everything lands in the one folder DIR: calibration.csv, <device_type>.h5, build.log, run.log,
# summary.txt (the only folder that comes back from a lent GPU machine).
#
# Usage: calibrate/run_gpu.sh [--out DIR] [--resume CSV] [--deadline-s S] [--budget-s S] [--dry-run]
#                             [other hetsim-calibrate-cuda options, e.g. --quick or --ops gemm]
#   --out DIR      where everything goes (default out/gpu-calibration)
#   --resume CSV   continue a run cut short (its CSV is copied to DIR/calibration.csv unless it
#                  is that file; a DIR/calibration.csv left there is resumed anyway)
#   --deadline-s   the whole script's wall time (default 420); the measurement gets what the
#                  build leaves, less a reserve for the reference, conversion and summary
#   --budget-s     the most the measurement may take (default: 240, 90 with --quick)
#   --dry-run      build and write the plan of an assumed 8 x H200 node; needs no GPU
# Environment: HETSIM_CUDA_BUILD (build folder, default build-cuda), HETSIM_CUDA_ARCHITECTURES
# (default: the GPU's own from nvidia-smi, else 80;90), HETSIM_CUDA_CMAKE_ARGS (more configure
# options), plus CMake's own (NCCL_HOME, CUDNN_HOME).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start_s=$SECONDS

out="" resume="" deadline_s=420 budget_s="" dry_run=0
extra=()
while (($#)); do
  case "$1" in
    --out | --resume | --deadline-s | --budget-s)
      (($# >= 2)) || { echo "run_gpu.sh: $1: missing value" >&2; exit 2; }
      case "$1" in
        --out) out="$2" ;;
        --resume) resume="$2" ;;
        --deadline-s) deadline_s="$2" ;;
        --budget-s) budget_s="$2" ;;
      esac
      shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[[ -n "$out" ]] || out="$repo/out/gpu-calibration"
[[ "$deadline_s" =~ ^[0-9]+$ ]] || { echo "run_gpu.sh: --deadline-s: not a whole number: $deadline_s" >&2; exit 2; }
[[ -z "$budget_s" || "$budget_s" =~ ^[0-9]+$ ]] || { echo "run_gpu.sh: --budget-s: not a whole number: $budget_s" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
csv="$out/calibration.csv"
build_log="$out/build.log" run_log="$out/run.log" summary="$out/summary.txt"
: >"$run_log"

# Messages go to stderr and run.log alike.
say() { printf '%s\n' "$*" | tee -a "$run_log" >&2; }
step() { say ""; say "== $* ($((SECONDS - start_s)) s)"; }
fail() { say "run_gpu.sh: $*"; exit 1; }
elapsed() { echo $((SECONDS - start_s)); }

cd "$repo"
build="${HETSIM_CUDA_BUILD:-$repo/build-cuda}"

# ---- build ---------------------------------------------------------------------------------
step "build calibrate/cuda into $build (log: $build_log)"
# nvcc where CUDA installs it, when it is not on the PATH.
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
configure=(cmake -S calibrate/cuda -B "$build" -DCMAKE_BUILD_TYPE=Release)
# Ninja where there is one (a GPU machine may have no make), unless the folder has another.
if command -v ninja >/dev/null && { [[ ! -f "$build/CMakeCache.txt" ]] ||
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt"; }; then
  configure+=(-G Ninja)
fi
arch="${HETSIM_CUDA_ARCHITECTURES:-}"
if [[ -z "$arch" ]] && command -v nvidia-smi >/dev/null; then
  # "9.0" -> "90": code for this GPU alone builds in half the time of 80;90.
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')" || arch=""
  [[ "$arch" =~ ^[0-9]+$ ]] || arch=""
fi
[[ -n "$arch" ]] && configure+=("-DCMAKE_CUDA_ARCHITECTURES=$arch")
# Further configure options, split on spaces (the rehearsal test: -DHETSIM_NVIDIA_PIP_ONLY=ON).
read -r -a more <<<"${HETSIM_CUDA_CMAKE_ARGS:-}"
configure+=("${more[@]}")
{
  echo "\$ ${configure[*]}"
  "${configure[@]}" 2>&1
} >"$build_log" || { tail -n 30 "$build_log" >&2; fail "cmake configure failed (all of it in $build_log)"; }
# What the build found, and what it lacks, loudly.
grep -E 'hetsim-calibrate-cuda:|\*\*\*' "$build_log" | tee -a "$run_log" >&2 || true
{
  echo "\$ cmake --build $build -j $(nproc)"
  timeout 600 cmake --build "$build" -j "$(nproc)" 2>&1
} >>"$build_log" || { tail -n 30 "$build_log" >&2; fail "build failed (all of it in $build_log)"; }
program="$build/hetsim-calibrate-cuda"
say "built $program in $(elapsed) s"

# ---- measure -------------------------------------------------------------------------------
if [[ -n "$resume" ]]; then
  [[ -f "$resume" ]] || fail "--resume $resume: no such file"
  if [[ "$(cd "$(dirname "$resume")" && pwd)/$(basename "$resume")" != "$csv" ]]; then
    [[ -e "$csv" ]] && fail "--resume $resume: $csv exists already; resume that one, or use another --out"
    cp "$resume" "$csv"
  fi
fi

status=0
if ((dry_run)); then
  step "dry run: the plan for an assumed 8 x H200 node into $csv"
  "$program" --dry-run --shapes calibrate/model_shapes.csv --out "$csv" \
    ${budget_s:+--budget-s "$budget_s"} "${extra[@]}" 2>&1 | tee -a "$run_log" >&2 || status=${PIPESTATUS[0]}
  ((status == 0)) || fail "the dry run failed (exit $status)"
  device_type=h200-sxm-141gb
else
  step "device"
  device_type="$("$program" --print-device-type 2>>"$run_log")" ||
    fail "no usable CUDA device: $(tail -n 1 "$run_log")"
  [[ -n "$device_type" ]] || fail "empty device type"
  say "device type: $device_type"
  nvidia-smi --query-gpu=index,name,compute_cap,clocks.sm,clocks.mem,temperature.gpu,driver_version \
    --format=csv 2>&1 | tee -a "$run_log" >&2 || true
  [[ -f "$csv" ]] && say "resuming $csv ($(grep -vc '^#' "$csv") lines with the header)"

  # The measurement's budget: what the deadline leaves after a reserve for the timeout's slack
  # (30 s), the reference (up to 60 s) and the conversion and summary.
  reserve_s=100
  quick=0
  for a in "${extra[@]}"; do [[ "$a" == --quick ]] && quick=1; done
  cap_s=$((quick ? 90 : 240))
  [[ -n "$budget_s" ]] && cap_s=$budget_s
  left_s=$((deadline_s - $(elapsed) - reserve_s))
  measure_s=$((left_s < cap_s ? left_s : cap_s))
  ((measure_s >= 20)) || fail "only $left_s s left of the $deadline_s s deadline after the build: raise --deadline-s"

  # One pass, and once more where it crashed (a fault in cuDNN is sticky: the rerun resumes the
  # CSV with attention unfused, so the points after the crash are still measured).
  for attempt in 1 2; do
    step "calibrate into $csv (budget $measure_s s, limit $((measure_s + 30)) s)"
    args=(--out "$csv" --shapes calibrate/model_shapes.csv --budget-s "$measure_s")
    ((attempt == 2)) && args+=(--no-cudnn)
    status=0
    timeout $((measure_s + 30)) "$program" "${args[@]}" "${extra[@]}" 2>&1 | tee -a "$run_log" >&2 ||
      status=${PIPESTATUS[0]}
    ((status == 0 || status == 124)) && break
    left_s=$((deadline_s - $(elapsed) - reserve_s))
    measure_s=$((left_s < cap_s ? left_s : cap_s))
    if ((attempt == 2 || measure_s < 20)); then
      say "*** calibration failed (exit $status); $csv keeps what was measured ***"
      break
    fi
    say "*** calibration failed (exit $status): resuming once with --no-cudnn (attention unfused) ***"
  done
  if ((status == 124)); then
    say "*** calibration cut at its limit; $csv keeps what was measured: rerun with --resume $csv ***"
  fi
fi

# ---- reference, conversion, summary ----------------------------------------------------------
step "reference: the same GPU through PyTorch"
reference="$(mktemp)"
trap 'rm -f "$reference"' EXIT
timeout 60 python3 calibrate/tools/torch_reference.py >"$reference" 2>&1 ||
  echo "PyTorch reference failed (exit $?): no reference" >>"$reference"
tee -a "$run_log" <"$reference" >&2

convert_status=0
h5="$out/$device_type.h5"
if ((dry_run)); then
  say "dry run: no database (hetsim refuses a plan as measurements)"
elif [[ -f "$csv" ]]; then
  step "convert to $h5"
  python3 calibrate/tools/csv_to_hdf5.py "$csv" "$h5" --force 2>&1 | tee -a "$run_log" >&2 ||
    convert_status=${PIPESTATUS[0]}
fi

step "summary ($summary)"
python3 calibrate/tools/csv_summary.py "$csv" --reference "$reference" >"$summary" 2>&1 ||
  say "*** summary failed: see $summary ***"
tee -a "$run_log" <"$summary"
say "done in $(elapsed) s; results in $out: $(cd "$out" && ls | tr '\n' ' ')"

((status == 0)) || exit "$status"
((convert_status == 0)) || fail "conversion to $h5 failed (exit $convert_status)"
