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

It also writes the figures of docs/validation.md (issue 40: no hand-copied figures): the table
of every set's figures as its test prints them, and the table of each fit left out, between the
page's "generated" markers.

usage: scripts/leave_one_set_out.py [--build build] [--check] [--write-page | --check-page]
  --check       exit 1 unless every set printed its figure and each fit, left out, moves the set
                it was fitted on (the overrides reached the tests); CTest runs it so
  --write-page  rewrite the generated tables of docs/validation.md
  --check-page  exit 1, naming the table, when docs/validation.md's generated tables are not what
                the tests print now (CTest runs it so: a change that moves a figure updates the
                page with --write-page)
"""
import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each set's headline figure, as its test prints it.
SETS = [
    ("Korthikanti (Selene A100)", r"Korthikanti: MAPE over 8 cases = ([0-9.]+)%"),
    ("Megatron-LM v1.0 (DGX-2H V100)",
     r"Megatron-LM v1.0 \(DGX-2H V100\): mean \|error\| over \d+ cases = ([0-9.]+)%"),
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


# Each set's other figures, where its test prints them: (rank correlation, worst row) patterns,
# each with one group (the worst row's pattern: the figure and the row).
DETAILS = {
    "vTrain (DGX A100)": (r"mean Spearman rho within a model config = ([0-9.]+)", None),
    "AMP T4 (4 x g4dn.12xlarge)": (r"Spearman rank correlation, predicted against measured: "
                                   r"([0-9.]+)", r"(data parallel) +\d+ trials: MAPE ([0-9.]+)%"),
    "DT-FM, 1 x p3.16xlarge": (r"1 x p3.16xlarge +\d+ +[0-9.]+% +[0-9.]+% +([0-9.]+) +[0-9.]+% +"
                               r"\S.*\(\?\? rows set aside\)",
                               r"1 x p3.16xlarge +\d+ +[0-9.]+% +[0-9.]+% +[0-9.]+ +([0-9.]+)% +"
                               r"(\S.*\S) +\(\?\? rows set aside\)"),
    "DT-FM, 6 x p3.16xlarge": (r"6 x p3.16xlarge, 25 Gb/s +\d+ +[0-9.]+% +[0-9.]+% +([0-9.]+) +"
                               r"[0-9.]+% +\S.*\(\?\? rows set aside\)",
                               r"6 x p3.16xlarge, 25 Gb/s +\d+ +[0-9.]+% +[0-9.]+% +[0-9.]+ +"
                               r"([0-9.]+)% +(\S.*\S) +\(\?\? rows set aside\)"),
    "DT-FM, 48 x p3.2xlarge": (r"48 x p3.2xlarge +\d+ +[0-9.]+% +[0-9.]+% +([0-9.]+) +[0-9.]+% +"
                               r"\S.*\(\?\? rows set aside\)",
                               r"48 x p3.2xlarge +\d+ +[0-9.]+% +[0-9.]+% +[0-9.]+ +([0-9.]+)% +"
                               r"(\S.*\S) +\(\?\? rows set aside\)"),
    "DT-FM, 48 x p3.2xlarge, tc": (r"48 x p3.2xlarge under tc +\d+ +[0-9.]+% +[0-9.]+% +([0-9.]+)"
                                   r" +[0-9.]+% +\S.*\(\?\? rows set aside\)",
                                   r"48 x p3.2xlarge under tc +\d+ +[0-9.]+% +[0-9.]+% +[0-9.]+ "
                                   r"+([0-9.]+)% +(\S.*\S) +\(\?\? rows set aside\)"),
}
# Korthikanti's cases: "22b    selective      8         1.10         1.01      -8.0".
KORTHIKANTI_ROW = re.compile(r"^(\d+[bt]) +(full|selective) +\d+ +[0-9.]+ +[0-9.]+ +([+-][0-9.]+)$",
                             re.M)


def run(binary, env_extra, text=False):
    env = dict(os.environ)
    env.update(env_extra)
    out = subprocess.run([binary, "--gtest_filter=TrainingValidation.*"], env=env,
                         capture_output=True, text=True, cwd=ROOT).stdout
    figures = {}
    for name, pattern in SETS:
        m = re.search(pattern, out)
        figures[name] = float(m.group(1)) if m else None
    return (figures, out) if text else figures


# README.md's table: each set's row (the set, its cluster, rows, what was fitted on it), the
# figure after them is the test's.
README_ROWS = {
    "vTrain (DGX A100)": ("vTrain, Megatron-DeepSpeed", "one DGX A100", "1,440",
                          "datasheet efficiencies, even rows"),
    "Korthikanti (Selene A100)": ("Korthikanti et al., Megatron-LM v3", "Selene, 8-512 A100", "8",
                                  "held out"),
    "Megatron-LM v1.0 (DGX-2H V100)": ("Megatron-LM v1.0, GPT-2 1.2B and 4.2B",
                                       "one DGX-2H (V100, NVSwitch)", "2", "held out"),
    "AMP T4 (4 x g4dn.12xlarge)": ("AMP, DeepSpeed GPT-2", "4 x g4dn.12xlarge (16 T4), 50 Gb/s TCP",
                                   "47", "ten constants, even rows"),
    "H200, eager PyTorch": ("one H200, eager PyTorch", "one H200", "24",
                            "host time per kernel, even rows"),
    "NVIDIA DGX H100": ("NVIDIA DGX H100, FP8, NeMo / Megatron-Bridge", "8-1,024 H100", "10",
                        "held out"),
    "torchtitan FSDP2 (64 A100)": ("torchtitan, FSDP2", "64 A100", "7", "held out"),
    "DT-FM, 1 x p3.16xlarge": ("DT-FM, Megatron-LM 2022, GPT-3 XL", "one p3.16xlarge", "35",
                               "held out"),
    "DT-FM, 6 x p3.16xlarge": ("", "six p3.16xlarge, 25 Gb/s", "30", "held out"),
    "DT-FM, 48 x p3.2xlarge": ("", "48 p3.2xlarge, up to 10 Gb/s", "3", "held out"),
    "DT-FM, 48 x p3.2xlarge, tc": ("", "48 p3.2xlarge under tc netem (1-10 ms, 1-5 Gb/s)", "3",
                                   "held out"),
}


def readme_table(figures):
    rows = ["| set | cluster | rows | fitted on it? | mean error |",
            "| --- | --- | --- | --- | --- |"]
    for name, _ in SETS:
        label, cluster, n, fitted = README_ROWS[name]
        v = figures[name]
        figure = "-" if v is None else f"{'median ' if name.startswith('DT-FM') else ''}{v:.1f}%"
        rows.append(f"| {label} | {cluster} | {n} | {fitted} | {figure} |")
    return "\n".join(rows)


def printed_line(pattern, out):
    """The whole line the headline pattern matched, less its wall time."""
    m = re.search(pattern, out)
    if not m:
        return ""
    start = out.rfind("\n", 0, m.start()) + 1
    end = out.find("\n", m.end())
    line = out[start:end if end >= 0 else len(out)].strip()
    line = re.sub(r";? *\(?simulated in [0-9.]+ s\)?", "", line)
    return re.sub(" +", " ", line).replace("|", "\\|")


def figures_table(figures, out):
    """Markdown: every set's headline error, rank correlation and worst row, as printed."""
    rows = ["| set | error | rank correlation | worst row | the test's line |",
            "| --- | --- | --- | --- | --- |"]
    for name, pattern in SETS:
        rho, worst = "", ""
        spec = DETAILS.get(name)
        if spec:
            m = re.search(spec[0], out) if spec[0] else None
            rho = m.group(1) if m else ""
            m = re.search(spec[1], out) if spec[1] else None
            if m:
                figure, row = (m.group(2), m.group(1)) if "data parallel" in m.group(0) else \
                    (m.group(1), m.group(2))
                worst = f"{figure}% ({re.sub(' +', ' ', row)})"
        if name.startswith("Korthikanti"):
            cases = [(abs(float(e)), e, f"{model} {rc}") for model, rc, e in
                     KORTHIKANTI_ROW.findall(out)]
            if cases:
                _, e, what = max(cases)
                worst = f"{e}% ({what})"
        v = figures[name]
        rows.append(f"| {name} | {'-' if v is None else f'{v:.1f}%'} | {rho} | {worst} | "
                    f"{printed_line(pattern, out)} |")
    return "\n".join(rows)


def left_out_table(columns, results, fitted_on):
    rows = ["| set | fitted on it | " + " | ".join(t for t, _ in columns) + " |",
            "| --- | --- | " + " | ".join("---" for _ in columns) + " |"]
    for name, _ in SETS:
        cells = " | ".join("-" if r[name] is None else f"{r[name]:.1f}%" for r in results)
        rows.append(f"| {name} | {fitted_on.get(name, 'held out')} | {cells} |")
    return "\n".join(rows)


PAGE = os.path.join(ROOT, "docs", "validation.md")
README = os.path.join(ROOT, "README.md")


def marker(name, end=False):
    return (f"<!-- {'end' if end else 'begin'} {name}: generated by scripts/leave_one_set_out.py "
            f"--write-page{'' if end else '; do not edit'} -->")


def page_with(text, name, table, path=PAGE):
    begin, end = marker(name), marker(name, end=True)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"leave_one_set_out.py: {path} has no {name} markers ({begin})")
    return text[:i + len(begin)] + "\n" + table + "\n" + text[j:]


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
    ap.add_argument("--write-page", action="store_true")
    ap.add_argument("--check-page", action="store_true")
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
        shipped_output = ""
        for title, env in columns:
            print(f"leave_one_set_out: running the validation sets ({title})", file=sys.stderr)
            figures, out = run(binary, env, text=True)
            results.append(figures)
            shipped_output = shipped_output or out
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
    if args.write_page or args.check_page:
        tables = {
            PAGE: [("figures", figures_table(results[0], shipped_output)),
                   ("left-out", left_out_table(columns, results, fitted_on))],
            README: [("validation", readme_table(results[0]))],
        }
        for path, blocks in tables.items():
            with open(path) as f:
                text = f.read()
            new = text
            for name, table in blocks:
                new = page_with(new, name, table, path)
            rel = os.path.relpath(path, ROOT)
            if args.write_page:
                with open(path, "w") as f:
                    f.write(new)
                print(f"leave_one_set_out: wrote {rel}'s generated tables", file=sys.stderr)
            elif new != text:
                diff = "\n".join(difflib.unified_diff(text.splitlines(), new.splitlines(), rel,
                                                       "what the tests print", lineterm="", n=0))
                raise SystemExit(f"leave_one_set_out.py: {rel}'s generated tables are stale "
                                 f"(run scripts/leave_one_set_out.py --write-page):\n{diff}")
    if args.check:
        missing = [n for n, _ in SETS if any(r[n] is None for r in results)]
        if missing:
            raise SystemExit(f"leave_one_set_out.py: no figure for {', '.join(missing)}")
        if results[1]["vTrain (DGX A100)"] == results[0]["vTrain (DGX A100)"]:
            raise SystemExit("leave_one_set_out.py: the datasheet fit left out did not move vTrain "
                             "(HETSIM_EFFICIENCY not read?)")


if __name__ == "__main__":
    main()
