#!/usr/bin/env python3
"""The generated reference pages and schemas are current (issue 40).

    check_generated.py HETSIM SOURCE_DIR

Each file below is what a `hetsim reference` command prints; the check fails, naming the
command that rewrites the file, when the file differs from what the code generates now. It also
fails when docs/design.md, the code map, leaves out a folder of sim/ or of the repository root.
Python 3's standard library only.
"""
import subprocess
import sys
from pathlib import Path

GENERATED = {
    "docs/reference/plan-keys.md": ["reference", "plan-keys"],
    "docs/schemas/plan.schema.json": ["reference", "plan-schema"],
    "docs/reference/commands.md": ["reference", "commands"],
}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    hetsim, root = sys.argv[1], Path(sys.argv[2])
    stale = []
    for path, args in GENERATED.items():
        now = subprocess.run([hetsim] + args, check=True, stdout=subprocess.PIPE).stdout
        kept = (root / path).read_bytes() if (root / path).exists() else b""
        if now != kept:
            stale.append("%s is stale: run `build/hetsim %s > %s`" % (path, " ".join(args), path))
        else:
            print("ok   %s" % path)
    # The code map names every folder of sim/ and of the root (docs/design.md says so).
    design = (root / "docs/design.md").read_text()
    folders = ["sim/%s/" % p.name for p in sorted((root / "sim").iterdir()) if p.is_dir()]
    folders += ["%s/" % p.name for p in sorted(root.iterdir())
                if p.is_dir() and not p.name.startswith(".") and not p.name.startswith("build")
                and p.name != "out"]
    missing = [f for f in folders if "`%s" % f not in design]
    if missing:
        stale.append("docs/design.md does not name %s" % ", ".join(missing))
    else:
        print("ok   docs/design.md names every folder")
    for s in stale:
        print("FAIL " + s)
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
