#!/usr/bin/env python3
"""Fits the constants that the AMP T4 set (tests/data/ground_truth/amp_t4) constrains, on its
even rows (CSV data rows 0, 2, 4, ... that ran), and reports the error on both halves.

Fitted, each inside physical bounds:
  pcie3_host_staged efficiency, latency and (topologies/aws-g4dn-12xlarge.yaml: NCCL's SHM
    collective_overhead                      transport through host memory, no GPU P2P)
  ethernet_tcp efficiency and latency        (the same file: NCCL's socket transport over TCP)
  deepspeed host per_pass, per_step and      (frameworks/deepspeed.yaml)
    per_kernel
  turing memory and streaming_memory         (calibrate/datasheet_efficiency.yaml: the share of
                                             the T4's bandwidth its layers' memory-bound kernels,
                                             and its kernels over parameter-sized buffers, reach)
Everything else is fixed: the T4's sustained matmul rate (topologies/gpus/t4.yaml, cited), the
datasheet efficiency constants (fitted on vTrain's A100 set), the NIC's plain PCIe Gen3 link
(pcie3, cited), the model and the plans. --write also copies the two link classes into
topologies/aws-p3-g4dn.yaml, whose T4 node is the same. Nelder-Mead finds a local minimum: start
it from the files' values (as it does), and a parameter at exactly 0 stays there.

Each evaluation replays the 52 trials in-process through the validation test binary
(TrainingValidation.AmpT4DeepSpeedTrials), which reads the candidate files from HETSIM_AMP_*
environment variables and prints one `fit_row` line per trial. The search is Nelder-Mead (a
few dozen lines, no SciPy on the build machines) over the bounds mapped to the real line.

usage: scripts/fit_amp_t4.py [--build build] [--evaluations 400] [--write]
  --write   put the fitted values into the three YAML files (comments kept)
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "topologies", "aws-g4dn-12xlarge.yaml")
FRAMEWORK = os.path.join(ROOT, "frameworks", "deepspeed.yaml")
# AMP's heterogeneous cluster holds the same g4dn node: its copies of the two link classes are
# kept equal to CLUSTER's on --write.
CLUSTER_COPIES = [os.path.join(ROOT, "topologies", "aws-p3-g4dn.yaml")]

# name, low, high, unit, (file, regex locating the value)
PARAMS = [
    ("pcie_efficiency", 0.1, 0.8, "", CLUSTER, r"(pcie3_host_staged:\s*\n\s*kind: pcie\s*\n\s*efficiency: )([0-9.e+-]+)"),
    ("pcie_latency_us", 0.5, 200.0, "us", CLUSTER, r"(pcie3_host_staged:\s*\n\s*kind: pcie\s*\n\s*efficiency: [^\n]*\n\s*latency: )([0-9.e+-]+)us"),
    ("tcp_efficiency", 0.3, 0.9, "", CLUSTER, r"(ethernet_tcp:\s*\n\s*kind: network\s*\n\s*efficiency: )([0-9.e+-]+)"),
    ("tcp_latency_us", 1.0, 100.0, "us", CLUSTER, r"(ethernet_tcp:\s*\n\s*kind: network\s*\n\s*efficiency: [^\n]*\n\s*latency: )([0-9.e+-]+)us"),
    ("per_pass_ms", 0.0, 20.0, "ms", FRAMEWORK, r"(per_pass: )([0-9.e+-]+)ms"),
    ("per_step_ms", 0.0, 1000.0, "ms", FRAMEWORK, r"(per_step: )([0-9.e+-]+)ms"),
    ("per_kernel_us", 0.0, 1000.0, "us", FRAMEWORK, r"(per_kernel: )([0-9.e+-]+)us"),
    ("collective_overhead_us", 0.0, 3000.0, "us", CLUSTER, r"(pcie3_host_staged:\s*\n\s*kind: pcie\s*\n\s*efficiency: [^\n]*\n\s*latency: [^\n]*\n\s*collective_overhead: )([0-9.e+-]+)us"),
]
# The T4's memory-bound efficiency (calibrate/datasheet_efficiency.yaml, architectures.turing).
EFFICIENCY = os.path.join(ROOT, "calibrate", "datasheet_efficiency.yaml")
PARAMS.append(("turing_memory", 0.2, 0.95, "", EFFICIENCY,
               r"(turing:\s*\n(?:\s*#[^\n]*\n)*\s*memory: )([0-9.e+-]+)"))
PARAMS.append(("turing_streaming_memory", 0.2, 0.9, "", EFFICIENCY,
               r"(turing:\s*\n(?:\s*#[^\n]*\n)*\s*memory: [^\n]*\n(?:\s*#[^\n]*\n)*\s*streaming_memory: )([0-9.e+-]+)"))


def substitute(text, regex, value, unit):
    new, n = re.subn(regex, lambda m: m.group(1) + f"{value:.4g}" + unit, text, count=1)
    if n != 1:
        raise SystemExit(f"fit_amp_t4.py: cannot find {regex!r}")
    return new


def current(text, regex):
    m = re.search(regex, text)
    if not m:
        raise SystemExit(f"fit_amp_t4.py: cannot find {regex!r}")
    return float(m.group(2))


def render(values, copies=()):
    """The files' texts with the values put in; a copy of CLUSTER's classes takes its values."""
    texts = {p: open(p).read() for p in {P[4] for P in PARAMS} | set(copies)}
    for (name, lo, hi, unit, path, regex), v in zip(PARAMS, values):
        # The search's map to the real line never reaches a bound: a value within 1e-5
        # of the range of a bound at 0 is that 0.
        if lo == 0 and v < 1e-5 * hi:
            v = 0.0
        for target in [path] + (list(copies) if path == CLUSTER else []):
            texts[target] = substitute(texts[target], regex, v, unit)
    return texts


def evaluate(binary, values, tmp):
    texts = render(values)
    cluster = os.path.join(tmp, "cluster.yaml")
    framework = os.path.join(tmp, "deepspeed.yaml")
    open(cluster, "w").write(texts[CLUSTER])
    open(framework, "w").write(texts[FRAMEWORK])
    env = dict(os.environ, HETSIM_AMP_CLUSTER=cluster, HETSIM_AMP_FRAMEWORK=framework,
               HETSIM_AMP_FIT="1")
    if True:
        efficiency = os.path.join(tmp, "efficiency.yaml")
        open(efficiency, "w").write(texts[EFFICIENCY])
        env["HETSIM_AMP_EFFICIENCY"] = efficiency
    out = subprocess.run([binary, "--gtest_filter=TrainingValidation.AmpT4DeepSpeedTrials"],
                         env=env, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r'fit_row (\d+) "([^"]*)" ([0-9.]+) ([0-9.]+) (\d) (\d)', line)
        if m and m.group(5) == "0":
            rows.append((int(m.group(1)), m.group(2), float(m.group(3)), float(m.group(4))))
    if len(rows) < 40:
        raise SystemExit("fit_amp_t4.py: the test printed too few rows:\n" + out[-2000:])
    return rows


def mape(rows):
    return 100 * sum(abs(p - m) / m for _, _, m, p in rows) / len(rows)


def halves(rows):
    even = [r for r in rows if r[0] % 2 == 0]
    odd = [r for r in rows if r[0] % 2 == 1]
    return even, odd


def to_unit(v, lo, hi):
    f = min(max((v - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(f / (1 - f))


def from_unit(z, lo, hi):
    return lo + (hi - lo) / (1 + math.exp(-z))


def nelder_mead(f, x0, step=0.5, evaluations=400):
    n = len(x0)
    simplex = [list(x0)] + [[x0[j] + (step if j == i else 0) for j in range(n)] for i in range(n)]
    scores = [f(x) for x in simplex]
    used = n + 1
    while used < evaluations:
        order = sorted(range(n + 1), key=lambda i: scores[i])
        simplex = [simplex[i] for i in order]
        scores = [scores[i] for i in order]
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflect = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(reflect)
        used += 1
        if fr < scores[0]:
            expand = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(expand)
            used += 1
            simplex[-1], scores[-1] = (expand, fe) if fe < fr else (reflect, fr)
        elif fr < scores[-2]:
            simplex[-1], scores[-1] = reflect, fr
        else:
            contract = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(contract)
            used += 1
            if fc < scores[-1]:
                simplex[-1], scores[-1] = contract, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, s)] for s in simplex[1:]]
                scores = [scores[0]] + [f(x) for x in simplex[1:]]
                used += n
        if max(scores) - min(scores) < 1e-4:
            break
    i = min(range(n + 1), key=lambda k: scores[k])
    return simplex[i], scores[i]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--evaluations", type=int, default=400)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    binary = os.path.join(args.build, "tests", "hetsim_e2e_tests")
    start = [current(open(p).read(), rx) for (_, _, _, _, p, rx) in PARAMS]
    with tempfile.TemporaryDirectory() as tmp:
        def objective(z):
            values = [from_unit(zi, lo, hi) for zi, (_, lo, hi, *_r) in zip(z, PARAMS)]
            even, _ = halves(evaluate(binary, values, tmp))
            return mape(even)

        z0 = [to_unit(v, lo, hi) for v, (_, lo, hi, *_r) in zip(start, PARAMS)]
        print(f"start: even-row MAPE {objective(z0):.2f}%", flush=True)
        z, best = nelder_mead(objective, z0, evaluations=args.evaluations)
        values = [from_unit(zi, lo, hi) for zi, (_, lo, hi, *_r) in zip(z, PARAMS)]
        rows = evaluate(binary, values, tmp)
    even, odd = halves(rows)
    for (name, lo, hi, unit, *_r), v in zip(PARAMS, values):
        print(f"  {name:16s} {v:10.4g}   (bounds {lo} to {hi})")
    print(f"MAPE: fitted half (even rows, {len(even)}) {mape(even):.2f}%, held-out half "
          f"(odd rows, {len(odd)}) {mape(odd):.2f}%, all {len(rows)} {mape(rows):.2f}%")
    if args.write:
        for path, text in render(values, CLUSTER_COPIES).items():
            open(path, "w").write(text)
        print("wrote", CLUSTER, FRAMEWORK, EFFICIENCY, "and", ", ".join(CLUSTER_COPIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
