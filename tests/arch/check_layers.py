#!/usr/bin/env python3
"""The floors of docs/design.md hold: no file of sim/ or calibrate/ includes a folder on its own
floor or above it, other than its own folder (issue 39).

    check_layers.py SOURCE_DIR

Python 3's standard library only. A failure names the file, the line and the include.
"""
import re
import sys
from pathlib import Path

# Folder -> floor, as docs/design.md's table has them.
FLOORS = {
    "sim/core": 0, "sim/config": 1, "sim/platform": 2, "sim/network": 3, "sim/workload": 4,
    "sim/report": 5, "sim/policy": 6, "sim/study": 7, "sim/launch": 7, "sim/chakra": 7,
    "sim/execute": 7, "calibrate": 6, "sim/cli": 8, "python": 8,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:sim/[a-z_]+)|calibrate)/')


def folder_of(path, root):
    rel = path.relative_to(root).as_posix()
    for f in sorted(FLOORS, key=len, reverse=True):
        if rel.startswith(f + "/"):
            return f
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = Path(sys.argv[1])
    problems, files = [], 0
    for path in sorted(list(root.glob("sim/**/*")) + list(root.glob("calibrate/**/*")) +
                       list(root.glob("python/*"))):
        if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        own = folder_of(path, root)
        if own is None:
            continue
        files += 1
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1) == own:
                continue
            target = m.group(1)
            if target not in FLOORS:
                problems.append("%s:%d: includes %s, a folder docs/design.md does not place" % (
                    path.relative_to(root), n, target))
            elif FLOORS[target] >= FLOORS[own]:
                problems.append("%s:%d: %s (floor %d) includes %s (floor %d): only floors below "
                                "may be included" % (path.relative_to(root), n, own,
                                                     FLOORS[own], target, FLOORS[target]))
    for p in problems:
        print("FAIL " + p)
    print("%d files checked, %d includes run upward or sideways" % (files, len(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
