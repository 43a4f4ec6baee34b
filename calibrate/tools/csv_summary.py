#!/usr/bin/env python3
"""Summarises a calibration CSV: the best GEMM throughput per type against the datasheet peak of
the device's GPU profile (topologies/gpus/<device_type>.yaml), sanity figures (memory bandwidth at
1 GiB, fused attention at long sequences; any figure above the datasheet is flagged as a timing
error), what the run could not measure (attention points that fell back to unfused, no cuDNN, no
NCCL), the gap to a reference measured through PyTorch (torch_reference.py's output), and the
spread of the repetitions per kind (median over points of (p90 - p10) / median). Standard library
only.

usage: csv_summary.py IN.csv [--profiles DIR] [--reference FILE]
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


def datasheet_bandwidth_Bps(profiles_dir, device_type):
    """The profile's `memory_bandwidth:` in bytes per second, or None."""
    try:
        with open(os.path.join(profiles_dir, f"{device_type}.yaml"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^memory_bandwidth:\s*([0-9.]+)\s*([KMGT]i?B)/s", text, re.M)
    if not m:
        return None
    unit = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
            "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}[m.group(2)]
    return float(m.group(1)) * unit


def read_reference(path):
    """torch_reference.py's `key=value` lines as a dict, and its other lines (the reason when
    there is no reference)."""
    values, notes = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            key, sep, value = line.partition("=")
            if sep and key.startswith("reference_"):
                values[key] = value
            elif line:
                notes.append(line)
    return values, notes


def attention_tflops(row):
    """FLOPs of the attention pass (4 b h s^2 d forward, halved when causal; backward 2.5 times
    that) over its median time."""
    flops = 4.0 * row["batch"] * row["heads"] * row["seq"] ** 2 * row["head_dim"]
    flops *= (0.5 if row["causal"] else 1.0) * (2.5 if row["backward"] else 1.0)
    return flops / row["median_s"] / 1e12


def above(value, limit):
    return "  *** ABOVE THE DATASHEET: a timing error ***" if limit and value > limit else ""


def sanity(cal, profiles, device_type, reference_path):
    """The lines that say whether the figures can be believed and what is missing."""
    rows = [r for r in cal.rows if r["median_s"] > 0]
    bf16_peak = datasheet_tflops(profiles, device_type, "bf16")
    lines = []
    copies = [r for r in rows if r["kind"] == "memory" and r["name"] == "copy"]
    bandwidth = datasheet_bandwidth_Bps(profiles, device_type)
    if copies:
        r = min(copies, key=lambda r: abs(r["bytes"] - 2 ** 30))
        measured = r["bytes"] / r["median_s"]
        against = f" = {100 * measured / bandwidth:.1f}% of the datasheet {bandwidth / 1e9:g} GB/s" \
            if bandwidth else ""
        lines.append(f"  memory copy at {r['bytes'] / 2 ** 30:.2f} GiB: {measured / 1e9:8.1f} GB/s "
                     f"(read + written){against}{above(measured, bandwidth)}")
    else:
        lines.append("  memory copy: no measurements")
    fused = [r for r in rows if r["kind"] == "attention" and r["name"] == "cudnn"]
    if fused:
        longest = max(r["seq"] for r in fused)
        for backward in (0, 1):
            at = [r for r in fused if r["seq"] == longest and r["backward"] == backward]
            if at:
                best = max(at, key=attention_tflops)
                lines.append(
                    f"  attention fused {'backward' if backward else 'forward '} at seq {longest}: "
                    f"{attention_tflops(best):6.1f} TFLOP/s (b {best['batch']} h {best['heads']} "
                    f"d {best['head_dim']}{' causal' if best['causal'] else ''})"
                    f"{above(attention_tflops(best), bf16_peak)}")
    attention = [r for r in cal.rows if r["kind"] == "attention"]
    unfused = [r for r in attention if r["name"] == "unfused"]
    if "cudnn_version" in cal.provenance and not cal.provenance["cudnn_version"]:
        lines.append("  *** built WITHOUT cuDNN: attention measured UNFUSED only ***")
    elif unfused:
        labels = ", ".join(f"s{r['seq']} d{r['head_dim']} h{r['heads']}"
                           f"{' causal' if r['causal'] else ''}{' bwd' if r['backward'] else ''}"
                           for r in unfused[:4])
        lines.append(f"  *** {len(unfused)} of {len(attention)} attention points fell back to "
                     f"UNFUSED ({labels}{', ...' if len(unfused) > 4 else ''}) ***")
    elif attention:
        lines.append(f"  attention: all {len(attention)} points fused (cuDNN "
                     f"{cal.provenance.get('cudnn_version', '?')})")
    if "nccl_version" in cal.provenance and not cal.provenance["nccl_version"]:
        lines.append("  *** built WITHOUT NCCL: no collectives measured ***")
    elif not any(r["kind"] == "collective" for r in rows):
        lines.append(f"  collectives: none measured ({cal.provenance.get('gpus_in_node', '?')} "
                     "GPU(s) in the node; NCCL needs 2 or more)")

    if reference_path:
        try:
            ref, notes = read_reference(reference_path)
        except OSError as e:
            ref, notes = {}, [f"no reference ({e})"]
        for note in notes:
            lines.append(f"  reference: {note}")
        gemm = [r for r in rows if r["kind"] == "gemm" and r["dtype"] == "bf16" and
                (r["m"], r["n"], r["k"], r["batch"]) == (8192, 8192, 8192, 1)]
        if "reference_gemm_bf16_8192_tflops" in ref:
            torch_tflops = float(ref["reference_gemm_bf16_8192_tflops"])
            text = f"  reference: PyTorch bf16 8192^3 matmul {torch_tflops:.1f} TFLOP/s"
            if "reference_gemm_bf16_8192_cold_tflops" in ref:
                cold = float(ref["reference_gemm_bf16_8192_cold_tflops"])
                text += f" at the power limit ({cold:.1f} on a cool GPU)"
            if gemm:
                ours = gemm_tflops(gemm[0])
                text += f"; ours {ours:.1f} TFLOP/s, {100 * (ours / torch_tflops - 1):+.1f}%"
            else:
                text += "; ours: not measured"
            lines.append(text + above(torch_tflops, bf16_peak))
        if "reference_copy_2gib_GBps" in ref:
            torch_GBps = float(ref["reference_copy_2gib_GBps"])
            text = f"  reference: PyTorch 2 GiB device copy {torch_GBps:.1f} GB/s (read + written)"
            if copies:
                r = max(copies, key=lambda r: r["bytes"])
                ours = r["bytes"] / r["median_s"] / 1e9
                text += f"; ours at {r['bytes'] / 2 ** 30:.2f} GiB {ours:.1f} GB/s, " \
                        f"{100 * (ours / torch_GBps - 1):+.1f}%"
            lines.append(text + above(torch_GBps * 1e9, bandwidth))
    return lines


def gemm_tflops(row):
    return 2.0 * row["m"] * row["n"] * row["k"] * max(row["batch"], 1) / row["median_s"] / 1e12


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--profiles", default=os.path.join(REPO, "topologies", "gpus"))
    parser.add_argument("--reference", help="torch_reference.py's output")
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
              f"{best['m']}x{best['n']}x{best['k']} batch {best['batch']}{against}"
              f"{above(gemm_tflops(best), peak)}")
    for dtype in ("bf16", "fp8"):  # fp8 only where the GPU has it (a datasheet figure)
        wanted = dtype == "bf16" or datasheet_tflops(args.profiles, device_type, dtype)
        if wanted and not any(r["dtype"] == dtype for r in gemms):
            print(f"  gemm {dtype}: no measurements")
    for line in sanity(cal, args.profiles, device_type, args.reference):
        print(line)
    for kind in calibration_csv.KINDS:
        spreads = [(r["p90_s"] - r["p10_s"]) / r["median_s"]
                   for r in cal.rows if r["kind"] == kind and r["median_s"] > 0]
        if spreads:
            print(f"  spread {kind:10s} median (p90-p10)/median = {100 * statistics.median(spreads):5.1f}% "
                  f"over {len(spreads)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
