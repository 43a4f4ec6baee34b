#!/usr/bin/env bash
# Installs every build and test dependency of hetsim from Debian's packages.
# Idempotent: when everything is present it prints nothing and exits 0.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libyaml-cpp-dev libhdf5-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  libsqlite3-dev sqlite3
  zlib1g-dev                          # gzip-compressed PyTorch profiler traces
  libprotobuf-dev protobuf-compiler   # Chakra execution traces (sim/chakra/)
  clang-format python3
  python3-matplotlib chromium   # hetsim sweep's plots and HTML report; the test that loads it
  pybind11-dev python3-dev python3-pytest python3-pandas   # the Python module (import hetsim), its tests
  python3-yaml python3-jsonschema   # docs.schemas: the shipped YAML against docs/schemas/
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
