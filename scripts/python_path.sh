#!/usr/bin/env bash
# Puts the build's Python package (build/python/hetsim, the module `import hetsim`) on the path
# of every interpreter of this user: a .pth file in each one's user site-packages, naming the
# folder. Idempotent; quiet when there is no interpreter. See docs/python.md.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build/python/hetsim ] || exit 0
for py in python3 /usr/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  site=$("$py" -m site --user-site 2>/dev/null) || continue
  mkdir -p "$site"
  echo "$PWD/build/python" > "$site/hetsim-build.pth"
done
