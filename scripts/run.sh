#!/usr/bin/env bash
# Installs the dependencies, builds hetsim and runs the default study: one training iteration of
# Llama 2 13B on a mixed cluster of DGX H100 and DGX A100 nodes under a heterogeneous plan
# (experiments/default/), printing the summary and writing a Chrome trace to out/.
# Extra arguments go to `hetsim simulate` (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target hetsim _hetsim
scripts/python_path.sh   # import hetsim from any shell (docs/python.md)
mkdir -p out
./build/hetsim simulate --model llama2-13b --cluster mixed-h100-a100 \
  --plan experiments/default/llama2-13b-mixed.yaml --trace out/default-trace.json "$@"
