"""import hetsim (issue 41): the module's figures are the command line's to the bit, plan dicts
and keyword overrides are the plan file and --plan-set, bad input is a ValueError that names the
field, and the engine runs without the GIL."""
import json
import os
import subprocess
import threading

import pytest

import hetsim

HETSIM = os.environ.get("HETSIM_BINARY", "build/hetsim")
DEFAULT = ("llama2-13b", "mixed-h100-a100", "experiments/default/llama2-13b-mixed.yaml")


def cli_json(*args):
    out = subprocess.run([HETSIM, "simulate", "--json", *args], check=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out)


def test_the_default_study_is_the_command_lines_to_the_bit():
    model, cluster, plan = DEFAULT
    r = hetsim.simulate(model, cluster, plan)
    cli = cli_json("--model", model, "--cluster", cluster, "--plan", plan)
    assert r.to_dict() == cli
    assert r.iteration_time_s == cli["iteration_time_s"]
    assert r.tokens_per_s == cli["throughput_tokens_per_s"]
    assert r.gpus == 32 and len(r.devices) == 32
    devices = r.devices
    assert list(devices["id"]) == [d["id"] for d in cli["devices"]]
    assert list(devices["weights_bytes"]) == [d["memory_bytes"]["weights"] for d in cli["devices"]]
    # The kinds: alike devices (type, stage, busy time, memory) together, every device once.
    kinds = r.kinds
    assert kinds["devices"].sum() == 32
    assert len(kinds) == len(devices.drop(columns=["id", "replica"]).drop_duplicates())
    assert set(kinds["gpu"]) == {"h100-sxm5-80gb", "a100-sxm4-80gb"}
    assert {"compute", "bubble", "communication_exposed"} <= set(r.breakdown_s)
    assert "iteration" in repr(r)


def test_a_dict_plan_and_keyword_overrides_are_the_file_and_plan_set():
    plan = {"tensor_parallel": 2, "global_batch_size": 8, "sequence_length": 2048}
    r = hetsim.simulate("gpt3-1.3b", "dgx-a100", plan, nodes=1, micro_batch_size=2,
                        sequence_parallel=True)
    cli = cli_json("--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "1",
                   "--plan", "tests/data/plans/good.yaml", "--plan-set", "tensor_parallel=2",
                   "--plan-set", "micro_batch_size=2", "--plan-set", "sequence_parallel=true")
    assert r.iteration_time_s == cli["iteration_time_s"]
    assert r.mfu == cli["mfu"]
    # An override that changes the plan changes the result.
    slower = hetsim.simulate("gpt3-1.3b", "dgx-a100", plan, nodes=1, micro_batch_size=1,
                             recompute="full")
    assert slower.iteration_time_s > r.iteration_time_s


def test_bad_input_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match=r"tensor_paralel: unknown key \(did you mean "
                                         r"\"tensor_parallel\"\?\)"):
        hetsim.simulate("gpt3-1.3b", "dgx-a100", {"tensor_paralel": 2, "global_batch_size": 8},
                        nodes=1)
    with pytest.raises(ValueError, match="recompute: unknown value"):
        hetsim.simulate("gpt3-1.3b", "dgx-a100", {"global_batch_size": 8}, nodes=1,
                        recompute="sometimes")
    with pytest.raises(ValueError, match="no-such-model"):
        hetsim.simulate("no-such-model", "dgx-a100", {"global_batch_size": 8}, nodes=1)
    with pytest.raises(TypeError):
        hetsim.simulate("gpt3-1.3b", "dgx-a100", 42)


def test_the_engine_runs_without_the_gil():
    # Two threads replay at once and get the same figures as one alone.
    model, cluster, plan = DEFAULT
    alone = hetsim.simulate(model, cluster, plan).iteration_time_s
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        hetsim.simulate(model, cluster, plan).iteration_time_s)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [alone, alone]
