"""hetsim.sweep and simulate's trace (issue 41): a study's runs are `hetsim sweep --json`'s, a
rerun into the same store runs nothing new, and the trace is simulate --trace's file."""
import json
import os
import subprocess

import hetsim

HETSIM = os.environ.get("HETSIM_BINARY", "build/hetsim")
STUDY = "experiments/sweep-example/study.yaml"
DEFAULT = ("llama2-13b", "mixed-h100-a100", "experiments/default/llama2-13b-mixed.yaml")


def test_a_sweep_is_the_command_lines(tmp_path):
    found = hetsim.sweep(STUDY, store=tmp_path / "py.db", jobs=2)
    cli = json.loads(subprocess.run(
        [HETSIM, "sweep", STUDY, "--store", str(tmp_path / "cli.db"), "--jobs", "2", "--json",
         "--no-report", "--csv", str(tmp_path / "cli.csv")],
        check=True, stdout=subprocess.PIPE).stdout)
    ours, theirs = found.to_dict()["runs"], cli["runs"]
    assert len(ours) == len(theirs) == 18
    for a, b in zip(ours, theirs):
        assert a["report"] == b["report"]
    runs = found.runs
    assert len(runs) == 18 and "report" not in runs.columns
    # Run again into the same store: every run is already there, the same.
    again = hetsim.sweep(STUDY, store=tmp_path / "py.db", jobs=1)
    assert [r["report"] for r in again.to_dict()["runs"]] == [r["report"] for r in ours]


def test_the_trace_is_simulate_traces(tmp_path):
    model, cluster, plan = DEFAULT
    hetsim.simulate(model, cluster, plan, trace=tmp_path / "py.json")
    subprocess.run([HETSIM, "simulate", "--model", model, "--cluster", cluster, "--plan", plan,
                    "--trace", str(tmp_path / "cli.json"), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert json.loads((tmp_path / "py.json").read_text())["traceEvents"]
    # A result writes its own iteration's trace afterwards: the same file.
    hetsim.simulate(model, cluster, plan).trace(tmp_path / "later.json")
    assert (tmp_path / "later.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
