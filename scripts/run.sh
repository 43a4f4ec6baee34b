#!/usr/bin/env bash
# Installs the dependencies, builds hetsim and runs the default study: an nccl-tests-style
# all-reduce sweep (1 MiB to 1 GiB) on a mixed cluster of DGX H100 and DGX A100 nodes.
# Extra arguments go to `hetsim collective` (e.g. --cluster dgx1-v100 --op allgather --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target hetsim
./build/hetsim collective --cluster mixed-h100-a100 --op allreduce --bytes 1MiB:1GiB "$@"
