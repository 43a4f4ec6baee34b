#!/usr/bin/env bash
# Installs the dependencies, checks formatting, builds everything with warnings as errors and
# runs every test; then builds again with AddressSanitizer and UndefinedBehaviorSanitizer and
# runs the tests under them. HETSIM_SKIP_SANITIZE=1 skips the second build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
# Open MPI's mpirun refuses to run as root without these (CI containers run as root).
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# CTest lists skipped tests without their reason; GoogleTest logs it on the line after
# "FILE:LINE: Skipped", so print it with the test's name.
skip_reasons() {
  awk '/^\[ RUN      \]/ { test = $4 } reason { print "  skipped: " test ": " $0; reason = 0 }
       /: Skipped$/ { reason = 1 }' "$1"/Testing/Temporary/LastTest.log 2>/dev/null || true
}

echo "== format check (clang-format)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run -Werror

echo "== build (Release, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHETSIM_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
scripts/python_path.sh   # import hetsim from any shell (docs/python.md)
# The build as people type it (issue 37): CMake's default generator (Unix Makefiles), whose
# rules do not create their output folders as Ninja's do, in a Debug build (assertions on,
# unoptimised), installed with `cmake --install` and run from where it was installed.
echo "== plain cmake (default generator, Debug): build, install, run"
cmake -S . -B build-make -DCMAKE_BUILD_TYPE=Debug -DHETSIM_CUDA=OFF -DHETSIM_BUILD_BENCH=OFF \
  -DHETSIM_BUILD_TESTS=OFF -DHETSIM_PYTHON=OFF -DCMAKE_INSTALL_PREFIX="$PWD/build-make/prefix" >/dev/null
cmake --build build-make --target hetsim -j "$jobs" >/dev/null
cmake --install build-make >/dev/null
build-make/prefix/bin/hetsim simulate --model gpt3-125m --cluster dgx-a100 --nodes 1 \
  --plan tests/data/plans/chakra_tp2_pp2_dp2.yaml >/dev/null
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"
skip_reasons build

if [ "${HETSIM_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETSIM_WERROR=ON \
    -DHETSIM_SANITIZE=ON -DHETSIM_BUILD_BENCH=OFF -DHETSIM_CUDA=OFF -DHETSIM_PYTHON=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "== tests under ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs"
  skip_reasons build-asan
fi
