#!/usr/bin/env python3
"""The JSON Schemas in docs/schemas/ accept the files they describe (issue 40).

    check_schemas.py SOURCE_DIR

Every shipped framework file and GPU profile, and every YAML file that names a schema on its
first line (`# yaml-language-server: $schema=...`), is validated against its schema with the
jsonschema library (Draft 2020-12), as an editor would; a schema that refuses a file hetsim
reads is wrong, and the check fails naming the file, the path in it and what was expected. It
also checks that each schema refuses a file with an unknown key. Needs python3-yaml and
python3-jsonschema (scripts/setup.sh installs them).
"""
import re
import sys
from pathlib import Path

import jsonschema
import yaml

SCHEMA_LINE = "# yaml-language-server: $schema="


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where 300e9 (no dot) is a string; yaml-cpp, hetsim's reader, and
    the YAML language server read YAML 1.2, where it is a float."""


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = Path(sys.argv[1])
    files = {}
    for pattern, schema in (("frameworks/*.yaml", "framework.schema.json"),
                            ("topologies/gpus/*.yaml", "gpu.schema.json")):
        for f in sorted(root.glob(pattern)):
            files[f] = root / "docs" / "schemas" / schema
    for f in sorted(root.glob("**/*.yaml")):
        if any(p.startswith("build") or p in ("out", ".git") for p in f.relative_to(root).parts):
            continue
        first = f.read_text(errors="replace").split("\n", 1)[0]
        if first.startswith(SCHEMA_LINE):
            files[f] = (f.parent / first[len(SCHEMA_LINE):]).resolve()
    failures = []
    schemas = {}
    for f, schema_path in files.items():
        if schema_path not in schemas:
            schemas[schema_path] = jsonschema.Draft202012Validator(
                __import__("json").loads(schema_path.read_text()))
        validator = schemas[schema_path]
        doc = yaml.load(f.read_text(), Loader=Yaml12Loader)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors:
            where = ".".join(str(p) for p in e.path) or "(top level)"
            failures.append("%s: %s: %s (schema %s)" % (f.relative_to(root), where, e.message,
                                                        schema_path.name))
        if not errors:
            print("ok   %s (%s)" % (f.relative_to(root), schema_path.name))
    for schema_path, validator in schemas.items():
        if validator.is_valid({"no_such_key": 1}):
            failures.append("%s accepts an unknown key" % schema_path.name)
    for s in failures:
        print("FAIL " + s)
    print("%d files checked against %d schemas" % (len(files), len(schemas)))
    sys.exit(1 if failures or not files else 0)


if __name__ == "__main__":
    main()
