#!/usr/bin/env bash
# Installs the dependencies, checks formatting, builds everything with warnings as errors and
# runs every test; then builds again with AddressSanitizer and UndefinedBehaviorSanitizer and
# runs the tests under them. HETSIM_SKIP_SANITIZE=1 skips the second build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== format check (clang-format)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run -Werror

echo "== build (Release, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHETSIM_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"

if [ "${HETSIM_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETSIM_WERROR=ON \
    -DHETSIM_SANITIZE=ON -DHETSIM_BUILD_BENCH=OFF -DHETSIM_CUDA=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "== tests under ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs"
fi
