#!/usr/bin/env python3
"""Leave each fit out and print how much every validation set moves (issue 36, item 5).

Each fitted constant in hetsim was fitted on one measured set; the other sets judge it. This
runs the validation tests (build/tests/hetsim_e2e_tests --gtest_filter='TrainingValidation.*')
once as shipped and once per fit with that fit's constants replaced by what they were before it
(or by the default they override), and prints each set's headline error under each. A set that
moves a lot when a fit it was not fitted on is left out depends on constants from elsewhere; a
fit that moves nothing but its own set is untested beyond it.

The fits (docs/validation.md lists them):
  datasheet  calibrate/datasheet_efficiency.yaml, fitted on vTrain's DGX A100 rows: replaced by
             the hand-set values before the fit (scripts/data/datasheet_efficiency_unfitted.yaml),
             through HETSIM_EFFICIENCY.
  h200-host  eager PyTorch's host time per kernel (31 us), fitted on the H200 set: left out of
             pytorch-fsdp2 (torchtitan's framework), which then takes the cost model's, through
             HETSIM_FRAMEWORK_PYTORCH_FSDP2.
  amp-t4     the AMP T4 fit (aws-g4dn-12xlarge's link classes, DeepSpeed's host time, the T4's
             memory efficiencies): no other set in the tree runs on a T4, on that cluster or on
             DeepSpeed, so leaving it out moves only its own set; printed as such.

usage: scripts/leave_one_set_out.py [--build build] [--check]
  --check   exit 1 unless every set printed its figure and each fit, left out, moves the set it
            was fitted on (the overrides reached the tests); CTest runs it so
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each set's headline figure, as its test prints it.
SETS = [
    ("Korthikanti (Selene A100)", r"Korthikanti: MAPE over 8 cases = ([0-9.]+)%"),
    ("vTrain (DGX A100)", r"vTrain: MAPE over \d+ of \d+ rows \(stride \d+\) = ([0-9.]+)%"),
    ("AMP T4 (4 x g4dn.12xlarge)", r"MAPE over \d+ measured trials: hetsim ([0-9.]+)%"),
    ("H200, eager PyTorch", r"datasheet model ([0-9.]+)%"),
    ("NVIDIA DGX H100", r"mean \|error\| over \d+ rows: ([0-9.]+)% with tp_comm_overlap"),
    ("torchtitan FSDP2 (64 A100)", r"mean \|error\| over the \d+ compute-bound rows: ([0-9.]+)%"),
    ("DT-FM, 1 x p3.16xlarge", r"1 x p3.16xlarge +median ([0-9.]+)%"),
    ("DT-FM, 6 x p3.16xlarge", r"6 x p3.16xlarge, 25 Gb/s +median ([0-9.]+)%"),
    ("DT-FM, 48 x p3.2xlarge", r"48 x p3.2xlarge +median ([0-9.]+)%"),
    ("DT-FM, 48 x p3.2xlarge, tc", r"48 x p3.2xlarge under tc +median ([0-9.]+)%"),
]


def run(binary, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    out = subprocess.run([binary, "--gtest_filter=TrainingValidation.*"], env=env,
                         capture_output=True, text=True, cwd=ROOT).stdout
    figures = {}
    for name, pattern in SETS:
        m = re.search(pattern, out)
        figures[name] = float(m.group(1)) if m else None
    return figures


def fsdp2_without_host(tmp):
    with open(os.path.join(ROOT, "frameworks", "pytorch-fsdp2.yaml")) as f:
        text = f.read()
    new, n = re.subn(r"\n[ \t]*per_kernel:[^\n]*", "", text, count=1)
    if n != 1:
        raise SystemExit("leave_one_set_out.py: no host.per_kernel in frameworks/pytorch-fsdp2.yaml")
    path = os.path.join(tmp, "pytorch-fsdp2.yaml")
    with open(path, "w") as f:
        f.write(new)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    binary = os.path.join(build, "tests", "hetsim_e2e_tests")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"leave_one_set_out.py: {binary} not built (scripts/test.sh builds it)")
    with tempfile.TemporaryDirectory() as tmp:
        columns = [
            ("as shipped", {}),
            ("datasheet fit out", {"HETSIM_EFFICIENCY": os.path.join(
                ROOT, "scripts", "data", "datasheet_efficiency_unfitted.yaml")}),
            ("h200-host fit out", {"HETSIM_FRAMEWORK_PYTORCH_FSDP2": fsdp2_without_host(tmp)}),
        ]
        results = []
        for title, env in columns:
            print(f"leave_one_set_out: running the validation sets ({title})", file=sys.stderr)
            results.append(run(binary, env))
    fitted_on = {"vTrain (DGX A100)": "datasheet", "H200, eager PyTorch": "h200-host",
                 "AMP T4 (4 x g4dn.12xlarge)": "amp-t4"}
    head = f"{'set':<30} {'fitted on it':<14}" + "".join(f"{t:>20}" for t, _ in columns)
    print(head)
    print("-" * len(head))
    for name, _ in SETS:
        cells = ""
        for r in results:
            v = r[name]
            cells += f"{'-' if v is None else f'{v:.1f}%':>20}"
        print(f"{name:<30} {fitted_on.get(name, 'held out'):<14}{cells}")
    print("amp-t4: no other set in the tree runs on a T4, aws-g4dn-12xlarge or DeepSpeed; leaving "
          "it out moves only its own set.")
    if args.check:
        missing = [n for n, _ in SETS if any(r[n] is None for r in results)]
        if missing:
            raise SystemExit(f"leave_one_set_out.py: no figure for {', '.join(missing)}")
        if results[1]["vTrain (DGX A100)"] == results[0]["vTrain (DGX A100)"]:
            raise SystemExit("leave_one_set_out.py: the datasheet fit left out did not move vTrain "
                             "(HETSIM_EFFICIENCY not read?)")


if __name__ == "__main__":
    main()
