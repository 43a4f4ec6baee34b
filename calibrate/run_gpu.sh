#!/usr/bin/env bash
# Full CUDA calibration of this GPU node in one go: build calibrate/cuda, measure into
# out/calibration-<device_type>.csv (resumed if present), convert to calibrate/data/<device_type>.h5,
# and print the bf16 GEMM peak against the datasheet and the spread per kind.
# Usage (from anywhere): calibrate/run_gpu.sh [extra hetsim-calibrate-cuda options, e.g. --quick]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HETSIM_CUDA_BUILD:-$repo/build-cuda}"
cd "$repo"

step() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'run_gpu.sh: %s\n' "$*" >&2; exit 1; }

step "build calibrate/cuda into $build"
cmake -S calibrate/cuda -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null || fail "cmake configure failed"
cmake --build "$build" -j "$(nproc)" || fail "build failed"
program="$build/hetsim-calibrate-cuda"

step "device"
device_type="$("$program" --print-device-type)" || fail "no usable CUDA device (see the message above)"
[[ -n "$device_type" ]] || fail "empty device type"
echo "device type: $device_type" >&2
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>/dev/null >&2 || true

mkdir -p out calibrate/data
csv="out/calibration-$device_type.csv"
h5="calibrate/data/$device_type.h5"

step "calibrate into $csv (limit 290 s)"
status=0
# The shipped models' exact GEMM and attention shapes (hetsim calibrate shapes) join the grids.
timeout 290 "$program" --out "$csv" --shapes calibrate/model_shapes.csv "$@" || status=$?
if [[ $status -eq 124 ]]; then
  fail "calibration ran past 290 s; $csv keeps what was measured; run again to resume"
elif [[ $status -ne 0 ]]; then
  fail "calibration failed (exit $status); $csv keeps what was measured"
fi

step "convert to $h5"
python3 calibrate/tools/csv_to_hdf5.py "$csv" "$h5" --force || fail "conversion failed"

step "summary"
python3 calibrate/tools/csv_summary.py "$csv" || fail "summary failed"
