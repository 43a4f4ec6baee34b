#!/usr/bin/env python3
"""Converts a hetsim-calibrate-cuda CSV into the HDF5 calibration database, schema version 1
(calibrate/README.md). Needs h5py and numpy (the GPU machine has them).

usage: csv_to_hdf5.py IN.csv OUT.h5 [--force]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration_csv  # noqa: E402

SCHEMA_VERSION = 1
HETSIM_VERSION = "0.1.0"
ROOT_STRING_ATTRIBUTES = ["backend", "device_type", "device_name", "host", "date", "hetsim_version",
                          "hetsim_commit", "driver", "cuda_version", "cublas_version", "cudnn_version",
                          "nccl_version", "blas", "mpi", "clocks"]
TIMINGS = [("median_s", "float64"), ("p10_s", "float64"), ("p90_s", "float64"), ("repetitions", "int64")]
# Per kind: the datasets besides the timings, with their types (calibrate/README.md).
DATASETS = {
    "gemm": [("m", "int64"), ("n", "int64"), ("k", "int64"), ("batch", "int64")],
    "attention": [("batch", "int64"), ("heads", "int64"), ("seq", "int64"), ("head_dim", "int64"),
                  ("causal", "int8"), ("backward", "int8"), ("fused", "int8")],
    "memory": [("bytes", "float64")],
    "collective": [("bytes", "float64"), ("ranks", "int64"), ("nodes", "int64")],
    "copy": [("bytes", "float64")],
    # The CSV's conv_* columns under the names of calibrate/README.md's /conv group; `pass` from
    # the name column (calibration_csv.CONV_PASSES).
    "conv": [("n", "int64"), ("c", "int64"), ("h", "int64"), ("w", "int64"), ("k", "int64"),
             ("r", "int64"), ("s", "int64"), ("stride", "int64"), ("pad_h", "int64"),
             ("pad_w", "int64"), ("pass", "int64")],
}


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def sort_key(row):
    return tuple(row[c] for c in calibration_csv.KEY_COLUMNS)


def write_hdf5(calibration, out_path):
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        raise SystemExit(f"csv_to_hdf5.py: writing HDF5 needs h5py and numpy ({e}); "
                         "install them (pip install h5py numpy) or run this on the GPU machine")
    groups = {}
    for row in calibration.rows:
        groups.setdefault(calibration_csv.group_name(row), []).append(row)
    attributes = dict(calibration.provenance)
    attributes["hetsim_version"] = HETSIM_VERSION
    attributes["hetsim_commit"] = git_commit()
    def put_string(obj, name, value):
        # Fixed-length ASCII, as calibrate/database.cpp writes them (an empty string is one space,
        # which its reader strips): its reader cannot convert h5py's variable-length UTF-8 strings.
        # One byte more than the text: the padding NUL survives HDF5's conversion to a
        # NUL-terminated type, which would otherwise overwrite the last character.
        data = str(value).encode("ascii", "replace") or b" "
        obj.attrs.create(name, np.bytes_(data), dtype=h5py.string_dtype("ascii", len(data) + 1))

    tmp_path = out_path + ".tmp"
    with h5py.File(tmp_path, "w") as f:
        f.attrs["schema_version"] = np.int64(SCHEMA_VERSION)
        for name in ROOT_STRING_ATTRIBUTES:
            put_string(f, name, attributes.get(name, ""))
        for name, value in attributes.items():  # extra provenance (attention_impl, gpus_in_node)
            if name not in ROOT_STRING_ATTRIBUTES and name != "schema_version":
                put_string(f, name, value)
        for path in sorted(groups):
            rows = sorted(groups[path], key=sort_key)
            kind = rows[0]["kind"]
            group = f.require_group(path)
            for row in rows:  # attention rows name their implementation: cudnn (fused) or unfused
                row["fused"] = 1 if row["name"] == "cudnn" else 0
            def value(row, column):
                if kind != "conv" or column in dict(TIMINGS):
                    return row[column]
                if column == "pass":
                    return calibration_csv.CONV_PASSES[row["name"]]
                return row["conv_" + column]
            for column, dtype in DATASETS[kind] + TIMINGS:
                group.create_dataset(column, data=np.array([value(r, column) for r in rows], dtype=dtype))
    os.replace(tmp_path, out_path)
    return groups


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("h5")
    parser.add_argument("--force", action="store_true", help="overwrite an existing OUT.h5")
    args = parser.parse_args(argv)
    if os.path.exists(args.h5) and not args.force:
        print(f"csv_to_hdf5.py: {args.h5} exists (use --force to overwrite)", file=sys.stderr)
        return 1
    try:
        calibration = calibration_csv.parse(args.csv)
    except (OSError, calibration_csv.CsvError) as e:
        print(f"csv_to_hdf5.py: {e}", file=sys.stderr)
        return 1
    if calibration.provenance.get("backend") not in ("cuda", "cpu"):
        print(f"csv_to_hdf5.py: {args.csv}: provenance line '# backend=' missing or not cuda/cpu",
              file=sys.stderr)
        return 1
    groups = write_hdf5(calibration, args.h5)
    summary = ", ".join(f"{p} {len(r)}" for p, r in sorted(groups.items()))
    print(f"wrote {args.h5}: {len(calibration.rows)} measurements ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
