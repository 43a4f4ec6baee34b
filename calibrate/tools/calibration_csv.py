"""Reads the calibration CSV of calibrate/README.md ("CSV interchange") with the standard library only.

parse(path) -> Calibration(provenance: dict, rows: list of dict). Malformed lines raise CsvError
naming the file and line; a truncated last line (a run killed mid-write) is dropped with a warning;
a repeated key keeps the last measurement.
"""
import sys

COLUMNS = ["kind", "dtype", "name", "m", "n", "k", "batch", "heads", "seq", "head_dim",
           "causal", "backward", "bytes", "ranks", "nodes", "median_s", "p10_s", "p90_s", "repetitions"]
# The header before the `nodes` column (every collective inside one node): still read, nodes = 1.
COLUMNS_WITHOUT_NODES = [c for c in COLUMNS if c != "nodes"]
KEY_COLUMNS = COLUMNS[:15]
INT_COLUMNS = {"m", "n", "k", "batch", "heads", "seq", "head_dim", "causal", "backward", "ranks",
               "nodes", "repetitions"}
FLOAT_COLUMNS = {"bytes", "median_s", "p10_s", "p90_s"}
KINDS = ("gemm", "attention", "memory", "collective", "copy")


class CsvError(Exception):
    pass


class Calibration:
    def __init__(self, provenance, rows):
        self.provenance = provenance
        self.rows = rows


def _convert(path, line_no, column, text):
    try:
        if column in INT_COLUMNS:
            return int(text)
        if column in FLOAT_COLUMNS:
            return float(text)
    except ValueError:
        raise CsvError(f"{path}:{line_no}: {column}: not a number: {text!r}") from None
    return text


def parse(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    truncated = None
    if lines and lines[-1] != "":
        truncated = len(lines)
    else:
        lines = lines[:-1]  # the empty string after the final newline
    provenance, by_key, header_seen, columns = {}, {}, False, COLUMNS
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            body = line[1:].strip()
            if "=" not in body:
                raise CsvError(f"{path}:{line_no}: provenance line without '=': {line!r}")
            key, value = body.split("=", 1)
            provenance[key.strip()] = value
            continue
        if not header_seen:
            if line.split(",") not in (COLUMNS, COLUMNS_WITHOUT_NODES):
                raise CsvError(f"{path}:{line_no}: expected the header {','.join(COLUMNS)}")
            columns = line.split(",")
            header_seen = True
            continue
        fields = line.split(",")
        if len(fields) != len(columns):
            if line_no == truncated:
                print(f"{path}:{line_no}: warning: dropping a truncated last line", file=sys.stderr)
                continue
            raise CsvError(f"{path}:{line_no}: expected {len(columns)} columns, found {len(fields)}")
        row = {c: _convert(path, line_no, c, v) for c, v in zip(columns, fields)}
        row.setdefault("nodes", 1 if row["kind"] == "collective" else 0)
        if row["kind"] not in KINDS:
            raise CsvError(f"{path}:{line_no}: kind: unknown \"{row['kind']}\" (expected one of {', '.join(KINDS)})")
        key = tuple(row[c] for c in KEY_COLUMNS)
        if key in by_key:
            print(f"{path}:{line_no}: warning: repeated measurement, keeping this one", file=sys.stderr)
        by_key[key] = row
    if not header_seen:
        raise CsvError(f"{path}: no header line (is it a hetsim calibration CSV?)")
    return Calibration(provenance, list(by_key.values()))


def group_name(row):
    """The HDF5 group of a row: /gemm/<dtype>, /attention/<dtype>, /<kind>/<name> otherwise."""
    kind = row["kind"]
    sub = row["dtype"] if kind in ("gemm", "attention") else row["name"]
    return f"/{kind}/{sub}"
