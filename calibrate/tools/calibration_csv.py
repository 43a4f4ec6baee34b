"""Reads the calibration CSV of calibrate/README.md ("CSV interchange") with the standard library only.

parse(path) -> Calibration(provenance: dict, rows: list of dict). Malformed lines raise CsvError
naming the file and line; a truncated last line (a run killed mid-write) is dropped with a warning;
a repeated key keeps the last measurement.
"""
import sys

CONV_COLUMNS = ["conv_n", "conv_c", "conv_h", "conv_w", "conv_k", "conv_r", "conv_s", "conv_stride",
                "conv_pad_h", "conv_pad_w"]
COLUMNS = ["kind", "dtype", "name", "m", "n", "k", "batch", "heads", "seq", "head_dim",
           "causal", "backward", "bytes", "ranks", "nodes"] + CONV_COLUMNS + [
           "median_s", "p10_s", "p90_s", "repetitions"]
# The header before the conv_* columns (no convolutions): still read, conv_* = 0.
COLUMNS_WITHOUT_CONV = [c for c in COLUMNS if c not in CONV_COLUMNS]
# The header before the `nodes` column (every collective inside one node): still read, nodes = 1.
COLUMNS_WITHOUT_NODES = [c for c in COLUMNS_WITHOUT_CONV if c != "nodes"]
KEY_COLUMNS = COLUMNS[:25]
INT_COLUMNS = {"m", "n", "k", "batch", "heads", "seq", "head_dim", "causal", "backward", "ranks",
               "nodes", "repetitions"} | set(CONV_COLUMNS)
FLOAT_COLUMNS = {"bytes", "median_s", "p10_s", "p90_s"}
KINDS = ("gemm", "attention", "memory", "collective", "copy", "conv")
# A conv row's name column: its pass, stored in HDF5 as this code.
CONV_PASSES = {"forward": 0, "data_grad": 1, "weight_grad": 2}


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
            if line.split(",") not in (COLUMNS, COLUMNS_WITHOUT_CONV, COLUMNS_WITHOUT_NODES):
                raise CsvError(f"{path}:{line_no}: expected the header {','.join(COLUMNS)}")
            columns = line.split(",")
            header_seen = True
            continue
        fields = line.split(",")
        row_columns = columns
        # Under the current header a row of another kind may still have the 19 fields before the
        # conv_* columns (as calibrate/database.cpp reads it).
        if columns == COLUMNS and len(fields) == len(COLUMNS_WITHOUT_CONV) and fields[0] != "conv":
            row_columns = COLUMNS_WITHOUT_CONV
        if len(fields) != len(row_columns):
            if line_no == truncated:
                print(f"{path}:{line_no}: warning: dropping a truncated last line", file=sys.stderr)
                continue
            raise CsvError(f"{path}:{line_no}: expected {len(columns)} columns, found {len(fields)}")
        row = {c: _convert(path, line_no, c, v) for c, v in zip(row_columns, fields)}
        row.setdefault("nodes", 1 if row["kind"] == "collective" else 0)
        for c in CONV_COLUMNS:
            row.setdefault(c, 0)
        if row["kind"] not in KINDS:
            raise CsvError(f"{path}:{line_no}: kind: unknown \"{row['kind']}\" (expected one of {', '.join(KINDS)})")
        if row["kind"] == "conv" and row["name"] not in CONV_PASSES:
            raise CsvError(f"{path}:{line_no}: name: expected forward, data_grad or weight_grad for a conv row, "
                           f"got \"{row['name']}\"")
        key = tuple(row[c] for c in KEY_COLUMNS)
        if key in by_key:
            print(f"{path}:{line_no}: warning: repeated measurement, keeping this one", file=sys.stderr)
        by_key[key] = row
    if not header_seen:
        raise CsvError(f"{path}: no header line (is it a hetsim calibration CSV?)")
    return Calibration(provenance, list(by_key.values()))


def group_name(row):
    """The HDF5 group of a row: /gemm/<dtype>, /attention/<dtype>, /conv/<dtype>, /<kind>/<name>
    otherwise."""
    kind = row["kind"]
    sub = row["dtype"] if kind in ("gemm", "attention", "conv") else row["name"]
    return f"/{kind}/{sub}"
