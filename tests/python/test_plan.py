"""hetsim.plan (issue 41): the planner's candidates are `hetsim plan --json`'s, and the best plan
runs in hetsim.simulate as the plan file it writes."""
import json
import os
import subprocess

import pytest

import hetsim

HETSIM = os.environ.get("HETSIM_BINARY", "build/hetsim")
ARGS = dict(model="gpt3-1.3b", cluster="dgx-a100", nodes=1, global_batch_size=16,
            sequence_length=2048)


def cli_plan(*extra):
    out = subprocess.run(
        [HETSIM, "plan", "--json", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes",
         "1", "--global-batch-size", "16", "--sequence-length", "2048", *extra],
        check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def test_the_candidates_are_the_command_lines():
    found = hetsim.plan(**ARGS, policies="megatron", search=False)
    cli = cli_plan("--policy", "megatron", "--no-search")
    assert found.to_dict() == cli
    frame = found.candidates
    assert list(frame["label"]) == [c["label"] for c in cli["candidates"]]
    assert list(frame["mfu"]) == [c["report"]["mfu"] for c in cli["candidates"]]
    times = list(frame["iteration_time_s"])
    assert times == sorted(times)
    assert found.proposed == cli["proposed"] and found.proposed >= len(found.candidates)


def test_the_best_plan_simulates_to_its_ranked_time(tmp_path):
    found = hetsim.plan(**ARGS, policies="megatron", search=False, attention="standard")
    best = found.best
    assert 'attention: "standard"' in best.yaml
    r = hetsim.simulate("gpt3-1.3b", "dgx-a100", best, nodes=1)
    assert r.iteration_time_s == pytest.approx(best.iteration_time_s, rel=1e-12)
    best.save(tmp_path / "best.yaml")
    again = hetsim.simulate("gpt3-1.3b", "dgx-a100", str(tmp_path / "best.yaml"), nodes=1)
    assert again.iteration_time_s == r.iteration_time_s


def test_a_bad_policy_is_a_value_error():
    with pytest.raises(ValueError, match="no-such-policy"):
        hetsim.plan(**ARGS, policies="no-such-policy")
