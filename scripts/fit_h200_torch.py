#!/usr/bin/env python3
"""Fits eager PyTorch's host time per kernel (frameworks/pytorch-ddp.yaml, host.per_kernel) on the
even rows of the H200 PyTorch set (tests/data/ground_truth/h200_torch: CSV data rows 0, 2, 4, ...)
and reports the error on both halves, for the datasheet model and the H200 calibration.

The host time is a property of the host that issues kernels, not of the GPU's cost model, so one
value serves both; it is chosen on the datasheet model's error (the calibration's elementwise
kernels are scalar bf16 loops that reach 1.8-2.5 TB/s where PyTorch's vectorised ones stream at
near the 3.9 TB/s of a copy: experiments/h200-calibration/README.md). Each evaluation replays the
24 rows in-process through the validation test binary (TrainingValidation.H200SingleGpuPyTorch-
Iterations), which reads the candidate framework file from HETSIM_H200_FRAMEWORK and prints one
`fit_row` line per row. The error is piecewise in the host time (a segment of kernels takes the
longer of its GPU and host time), so the search is a grid, 0.5 us apart, from 0 to 100 us.

usage: scripts/fit_h200_torch.py [--build build] [--write]
  --write   put the fitted value into frameworks/pytorch-ddp.yaml (comments kept)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAMEWORK = os.path.join(ROOT, "frameworks", "pytorch-ddp.yaml")
PER_KERNEL = r"(per_kernel: )([0-9.e+-]+)us"


def with_value(text, us):
    new, n = re.subn(PER_KERNEL, lambda m: m.group(1) + f"{us:.4g}" + "us", text, count=1)
    if n != 1:
        raise SystemExit(f"fit_h200_torch.py: no host.per_kernel in {FRAMEWORK}")
    return new


def evaluate(binary, text, us, tmp):
    path = os.path.join(tmp, "pytorch-ddp.yaml")
    with open(path, "w") as f:
        f.write(with_value(text, us))
    env = dict(os.environ, HETSIM_H200_FRAMEWORK=path, HETSIM_H200_FIT="1")
    out = subprocess.run([binary, "--gtest_filter=TrainingValidation.H200SingleGpuPyTorchIterations"],
                         env=env, capture_output=True, text=True).stdout
    rows = [tuple(float(x) for x in m.groups()) for m in
            re.finditer(r"fit_row (\d+) ([0-9.]+) ([0-9.]+) ([0-9.]+)", out)]
    if len(rows) != 24:
        raise SystemExit("fit_h200_torch.py: the test printed too few rows:\n" + out[-2000:])
    return rows


def mape(rows, column):
    return 100 * sum(abs(r[column] - r[1]) / r[1] for r in rows) / len(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    binary = os.path.join(args.build, "tests", "hetsim_e2e_tests")
    text = open(FRAMEWORK).read()
    best = None
    with tempfile.TemporaryDirectory() as tmp:
        for step in range(0, 201):
            us = step * 0.5
            rows = evaluate(binary, text, us, tmp)
            even = [r for r in rows if int(r[0]) % 2 == 0]
            score = mape(even, 3)
            if best is None or score < best[0] - 1e-9:
                best = (score, us, rows)
    score, us, rows = best
    even = [r for r in rows if int(r[0]) % 2 == 0]
    odd = [r for r in rows if int(r[0]) % 2 == 1]
    print(f"host.per_kernel {us:g} us")
    for name, col in (("datasheet", 3), ("H200 calibration", 2)):
        print(f"  {name}: fitted half (even rows) {mape(even, col):.2f}%, held-out half (odd rows) "
              f"{mape(odd, col):.2f}%, all {mape(rows, col):.2f}%")
    if args.write:
        with open(FRAMEWORK, "w") as f:
            f.write(with_value(text, us))
        print("wrote", FRAMEWORK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
