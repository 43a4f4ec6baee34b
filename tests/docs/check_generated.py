#!/usr/bin/env python3
"""The generated reference pages and schemas are current (issue 40).

    check_generated.py HETSIM SOURCE_DIR

Each file below is what a `hetsim reference` command prints; the check fails, naming the
command that rewrites the file, when the file differs from what the code generates now. It also
fails when docs/design.md, the code map, leaves out a folder of sim/ or of the repository root,
when a shipped framework file, GPU profile, cluster, link classes file, study or model does not
name its schema on its first line, or when a YAML file names a schema that does not exist.
Python 3's standard library only.
"""
import subprocess
import sys
from pathlib import Path

GENERATED = {
    "docs/reference/plan-keys.md": ["reference", "plan-keys"],
    "docs/schemas/plan.schema.json": ["reference", "plan-schema"],
    "docs/reference/commands.md": ["reference", "commands"],
    "docs/reference/framework-keys.md": ["reference", "framework-keys"],
    "docs/schemas/framework.schema.json": ["reference", "framework-schema"],
    "docs/reference/gpu-keys.md": ["reference", "gpu-keys"],
    "docs/schemas/gpu.schema.json": ["reference", "gpu-schema"],
    "docs/reference/cluster-keys.md": ["reference", "cluster-keys"],
    "docs/schemas/cluster.schema.json": ["reference", "cluster-schema"],
    "docs/reference/link-class-keys.md": ["reference", "link-class-keys"],
    "docs/schemas/link-classes.schema.json": ["reference", "link-class-schema"],
    "docs/reference/study-keys.md": ["reference", "study-keys"],
    "docs/schemas/study.schema.json": ["reference", "study-schema"],
    "docs/reference/model-keys.md": ["reference", "model-keys"],
    "docs/schemas/model.schema.json": ["reference", "model-schema"],
}

# Shipped YAML that names its schema on its first line (for editors: the YAML language server).
SCHEMA_LINE = "# yaml-language-server: $schema="
MUST_NAME = {"frameworks/*.yaml": "framework.schema.json",
             "topologies/gpus/*.yaml": "gpu.schema.json",
             "topologies/aws-*.yaml": "cluster.schema.json",
             "topologies/dgx*.yaml": "cluster.schema.json",
             "topologies/mixed-*.yaml": "cluster.schema.json",
             "topologies/pcie-*.yaml": "cluster.schema.json",
             "topologies/cpu-host.yaml": "cluster.schema.json",
             "topologies/link_classes.yaml": "link-classes.schema.json",
             "experiments/*/study.yaml": "study.schema.json",
             "models/*.yaml": "model.schema.json"}


def schema_lines(root):
    """Problems with the files' schema lines: missing where required, or naming no schema."""
    problems = []
    for pattern, schema in MUST_NAME.items():
        for f in sorted(root.glob(pattern)):
            first = f.read_text().split("\n", 1)[0]
            if not first.startswith(SCHEMA_LINE) or not first.endswith("/" + schema):
                problems.append("%s: its first line is not `%s.../docs/schemas/%s`"
                                % (f.relative_to(root), SCHEMA_LINE, schema))
    for f in sorted(root.glob("**/*.yaml")):
        if any(part.startswith("build") or part in ("out", ".git") for part in f.parts):
            continue
        first = f.read_text(errors="replace").split("\n", 1)[0]
        if first.startswith(SCHEMA_LINE):
            target = (f.parent / first[len(SCHEMA_LINE):]).resolve()
            if not target.exists():
                problems.append("%s names %s, which does not exist" % (f.relative_to(root), target))
    return problems


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
    lines = schema_lines(root)
    stale += lines
    if not lines:
        print("ok   shipped YAML names its schema")
    for s in stale:
        print("FAIL " + s)
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
