#!/usr/bin/env bash
# Rehearses calibrate/run_gpu.sh on a bare GPU machine, without a GPU: NCCL and cuDNN only as
# PyTorch's pip wheels lay them out (<site-packages>/nvidia/{nccl,cudnn}/{include,lib}, versioned
# library names only), the toolkit's own NCCL and cuDNN hidden (HETSIM_NVIDIA_PIP_ONLY), a python3
# that reports that site-packages. It builds the standalone program once, runs the dry run with
# --out, and checks what lands there, the RPATH, and which libraries the loader picks.
# Usage: calibrate_gpu_rehearsal.sh WORK_DIR (kept between runs: the build is incremental).
# Exit 77 (ctest: skipped) with the reason where there is no nvcc, NCCL or cuDNN to rehearse with.
set -euo pipefail

work="${1:?usage: calibrate_gpu_rehearsal.sh WORK_DIR}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
skip() { echo "SKIPPED: $*"; exit 77; }
failures=0
check() {  # check DESCRIPTION COMMAND...: prints ok/FAIL, counts failures
  local what="$1"; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

nvcc="${CUDACXX:-$(command -v nvcc || true)}"
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc" && -x "$nvcc" ]] || skip "no nvcc (CUDA toolkit) on this machine: nothing to build"
export CUDACXX="$nvcc"
toolkit="$(dirname "$(dirname "$(readlink -f "$nvcc")")")"  # where NCCL and cuDNN are looked for
real_python="$(command -v python3)" || skip "no python3"

# The real NCCL and cuDNN of this machine, to lay out as the wheels do.
search=("$toolkit" /usr/lib /usr/include /usr/local/lib /usr/local/include)
[[ -n "${NCCL_HOME:-}" ]] && search+=("$NCCL_HOME")
[[ -n "${CUDNN_HOME:-}" ]] && search+=("$CUDNN_HOME")
first() { find "${search[@]}" -name "$1" 2>/dev/null | head -n1; }
nccl_lib="$(first 'libnccl.so.2')" nccl_h="$(first nccl.h)"
cudnn_lib="$(first 'libcudnn.so.9')" cudnn_h="$(first cudnn_graph.h)"
[[ -n "$nccl_lib" && -n "$nccl_h" ]] || skip "no NCCL (libnccl.so.2, nccl.h) here to lay out as pip's"
[[ -n "$cudnn_lib" && -n "$cudnn_h" ]] || skip "no cuDNN 9 (libcudnn.so.9, cudnn_graph.h) here to lay out as pip's"

mkdir -p "$work"
work="$(cd "$work" && pwd)"
site="$work/site-packages"
rm -rf "${site:?}" "${work:?}/bin" "$work/out" "$work/no-nccl" "$work/build/CMakeCache.txt"
mkdir -p "$site/nvidia/nccl/include" "$site/nvidia/nccl/lib" "$site/nvidia/cudnn/include" \
  "$site/nvidia/cudnn/lib" "$work/bin"
ln -s "$nccl_h" "$site/nvidia/nccl/include/nccl.h"
ln -s "$(readlink -f "$nccl_lib")" "$site/nvidia/nccl/lib/libnccl.so.2"
for h in "$(dirname "$cudnn_h")"/cudnn*.h; do ln -s "$h" "$site/nvidia/cudnn/include/"; done
# libcudnn.so.9 and the sub-libraries it loads beside itself, versioned names only.
for l in "$(dirname "$cudnn_lib")"/libcudnn*.so.9; do
  ln -s "$(readlink -f "$l")" "$site/nvidia/cudnn/lib/$(basename "$l")"
done

# python3 as on the GPU machine: the site query answers the pip layout; all else is the real one.
make_python() {  # make_python DIR SITE
  cat >"$1/python3" <<EOF
#!/usr/bin/env bash
if [[ "\${1:-}" == -c && "\${2:-}" == *getsitepackages* ]]; then echo "$2"; exit 0; fi
exec "$real_python" "\$@"
EOF
  chmod +x "$1/python3"
}
make_python "$work/bin" "$site"
unset NCCL_HOME CUDNN_HOME LD_LIBRARY_PATH

# 1. The pip-only search really hides the toolkit's NCCL: a layout with cuDNN alone configures
#    without NCCL (loudly), although the toolkit has one.
mkdir -p "$work/no-nccl/bin" "$work/no-nccl/site-packages/nvidia"
ln -s "$site/nvidia/cudnn" "$work/no-nccl/site-packages/nvidia/cudnn"
make_python "$work/no-nccl/bin" "$work/no-nccl/site-packages"
echo "== configure with cuDNN alone in the pip layout"
PATH="$work/no-nccl/bin:$PATH" cmake -S "$repo/calibrate/cuda" -B "$work/no-nccl/build" \
  -DHETSIM_NVIDIA_PIP_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$work/no-nccl/configure.log" 2>&1 ||
  { cat "$work/no-nccl/configure.log"; echo "FAIL configure without NCCL"; exit 1; }
check "without NCCL in the pip layout, the toolkit's is not taken: NCCL NOT FOUND" \
  grep -q 'NCCL NOT FOUND' "$work/no-nccl/configure.log"
check "... and cuDNN is the pip layout's" \
  grep -q "cuDNN ON ($work/no-nccl/site-packages/nvidia/cudnn/lib/libcudnn.so.9)" "$work/no-nccl/configure.log"

# 2. The whole script's build and dry run on the pip layout.
echo "== calibrate/run_gpu.sh --out $work/out --dry-run (NCCL and cuDNN from the pip layout)"
t0=$SECONDS
status=0
PATH="$work/bin:$PATH" HETSIM_CUDA_BUILD="$work/build" HETSIM_CUDA_ARCHITECTURES=90 \
  HETSIM_CUDA_CMAKE_ARGS="-DHETSIM_NVIDIA_PIP_ONLY=ON" \
  "$repo/calibrate/run_gpu.sh" --out "$work/out" --dry-run >"$work/run_gpu.stdout" 2>&1 || status=$?
wall=$((SECONDS - t0))
echo "run_gpu.sh --dry-run: exit $status, ${wall} s wall (configure, build, dry run, summary)"
if ((status != 0)); then
  cat "$work/run_gpu.stdout"
  [[ -f "$work/out/build.log" ]] && tail -n 40 "$work/out/build.log"
  echo "FAIL run_gpu.sh --dry-run"
  exit 1
fi
out="$work/out" program="$work/build/hetsim-calibrate-cuda"

# What comes back from a lent machine: at most 8 plain files, 16 MiB each, plain names.
files=$(find "$out" -mindepth 1 | sed "s|^$out/||" | sort | tr '\n' ' ')
echo "files in --out: $files"
check "--out holds calibration.csv, build.log, run.log, summary.txt and nothing else" \
  test "$files" = "build.log calibration.csv run.log summary.txt "
check "every file in --out is under 16 MiB" \
  test -z "$(find "$out" -type f -size +16M)"
check "the configure output is kept in build.log" grep -q 'Build files have been written' "$out/build.log"
check "Ninja generated the build (a GPU machine may have no make)" \
  grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$work/build/CMakeCache.txt"
check "NCCL found in the pip layout under its versioned name" \
  grep -q "NCCL ON ($site/nvidia/nccl/lib/libnccl.so.2)" "$out/build.log"
check "cuDNN found in the pip layout under its versioned name" \
  grep -q "cuDNN ON ($site/nvidia/cudnn/lib/libcudnn.so.9)" "$out/build.log"

# The program starts there: an RPATH (not RUNPATH) names the pip folders and the toolkit's, and
# the loader takes NCCL and cuDNN from the pip folders, not from its cache of the toolkit's.
rpath="$(readelf -d "$program" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')"
echo "RPATH: $rpath"
check "RPATH names the pip NCCL folder" grep -q "$site/nvidia/nccl/lib" <<<"$rpath"
check "RPATH names the pip cuDNN folder" grep -q "$site/nvidia/cudnn/lib" <<<"$rpath"
has_cudart() {  # an RPATH folder holds the toolkit's libcudart (the path may go through a link)
  local dir
  IFS=: read -r -a dirs <<<"$rpath"
  for dir in "${dirs[@]}"; do compgen -G "$dir/libcudart.so*" >/dev/null && return 0; done
  return 1
}
check "RPATH names the toolkit's library folder (libcudart)" has_cudart
loaded="$(ldd "$program")"
check "the loader takes libnccl.so.2 from the pip folder" \
  grep -q "libnccl.so.2 => $site/nvidia/nccl/lib/libnccl.so.2" <<<"$loaded"
check "the loader takes libcudnn.so.9 from the pip folder" \
  grep -q "libcudnn.so.9 => $site/nvidia/cudnn/lib/libcudnn.so.9" <<<"$loaded"
none_missing() { ! grep -q "not found" <<<"$loaded"; }
check "every library the program needs is found" none_missing

# The dry run's CSV, log and summary.
csv="$out/calibration.csv"
rows=$(grep -vc '^#' "$csv")
echo "dry-run CSV: $((rows - 1)) planned points"
check "the CSV is marked a dry run" grep -q '^# dry_run=' "$csv"
check "the CSV records the NCCL the build loaded" grep -qE '^# nccl_version=[0-9]+\.' "$csv"
check "the CSV records the cuDNN the build loaded" grep -qE '^# cudnn_version=9\.' "$csv"
check "the plan holds thousands of points" test "$rows" -gt 1000
check "the plan measures collectives (NCCL built in)" grep -q '^collective,' "$csv"
check "the plan's attention is cuDNN's fused path" grep -q '^attention,bf16,cudnn,' "$csv"
plan_line="$(grep -E '^  total +~' "$out/run.log" || true)"
echo "plan: ${plan_line# }"
planned="$(sed -E 's/.*~([0-9.]+) s against a budget of ([0-9.]+) s.*/\1 \2/' <<<"$plan_line")"
check "the plan fits its budget" awk -v p="${planned% *}" -v b="${planned#* }" 'BEGIN { exit !(p > 0 && p < b) }'
check "run.log has the build's findings" grep -q 'hetsim-calibrate-cuda: NCCL ON' "$out/run.log"
if ! "$real_python" -c 'import torch' 2>/dev/null; then
  check "no PyTorch here: the reference says so" \
    grep -q 'reference: PyTorch not available: no reference' "$out/summary.txt"
fi
check "the summary flags the dry run" grep -q 'DRY RUN' "$out/summary.txt"
check "the summary has the bf16 peak" grep -q 'gemm bf16 peak measured' "$out/summary.txt"

echo "run_gpu.sh wall time ${wall} s; ${failures} check(s) failed"
((failures == 0))
