#!/usr/bin/env python3
"""Summarises a calibration CSV: the best GEMM throughput per type against the datasheet peak of
the device's GPU profile (topologies/gpus/<device_type>.yaml), and the spread of the repetitions
per kind (median over points of (p90 - p10) / median). Standard library only.

usage: csv_summary.py IN.csv [--profiles DIR]
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration_csv  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def datasheet_tflops(profiles_dir, device_type, dtype):
    """The `peak: <dtype>: N TFLOPS` figure of the profile, or None."""
    path = os.path.join(profiles_dir, f"{device_type}.yaml")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^peak:\s*(?:#.*)?\n((?:[ \t]+.*\n?)*)", text, re.M)
    if not m:
        return None
    for line in m.group(1).splitlines():
        entry = re.match(r"\s+(\w+):\s*([0-9.]+)\s*TFLOPS", line)
        if entry and entry.group(1) == dtype:
            return float(entry.group(2))
    return None


def gemm_tflops(row):
    return 2.0 * row["m"] * row["n"] * row["k"] * max(row["batch"], 1) / row["median_s"] / 1e12


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--profiles", default=os.path.join(REPO, "topologies", "gpus"))
    args = parser.parse_args(argv)
    try:
        cal = calibration_csv.parse(args.csv)
    except (OSError, calibration_csv.CsvError) as e:
        print(f"csv_summary.py: {e}", file=sys.stderr)
        return 1
    device_type = cal.provenance.get("device_type", "")
    print(f"{args.csv}: {len(cal.rows)} measurements on {cal.provenance.get('device_name', '?')} "
          f"({device_type})")
    if "dry_run" in cal.provenance:
        print(f"  DRY RUN ({cal.provenance['dry_run']}): the figures below are the planner's")
    gemms = [r for r in cal.rows if r["kind"] == "gemm" and r["median_s"] > 0]
    for dtype in ("bf16", "fp16", "fp8", "tf32", "fp32"):
        rows = [r for r in gemms if r["dtype"] == dtype]
        if not rows:
            continue
        best = max(rows, key=gemm_tflops)
        peak = datasheet_tflops(args.profiles, device_type, dtype)
        against = f" = {100 * gemm_tflops(best) / peak:.1f}% of the datasheet {peak:g}" if peak else \
            " (no datasheet figure found)"
        print(f"  gemm {dtype:4s} peak measured {gemm_tflops(best):8.1f} TFLOP/s at "
              f"{best['m']}x{best['n']}x{best['k']} batch {best['batch']}{against}")
    if not any(r["dtype"] == "bf16" for r in gemms):
        print("  gemm bf16: no measurements")
    for kind in calibration_csv.KINDS:
        spreads = [(r["p90_s"] - r["p10_s"]) / r["median_s"]
                   for r in cal.rows if r["kind"] == kind and r["median_s"] > 0]
        if spreads:
            print(f"  spread {kind:10s} median (p90-p10)/median = {100 * statistics.median(spreads):5.1f}% "
                  f"over {len(spreads)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
