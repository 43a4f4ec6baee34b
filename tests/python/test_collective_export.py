"""hetsim.collective and hetsim.export (issue 41): the command line's figures and launches."""
import json
import os
import subprocess

import pytest

import hetsim

HETSIM = os.environ.get("HETSIM_BINARY", "build/hetsim")


def cli(*args):
    return json.loads(subprocess.run([HETSIM, *args], check=True,
                                     stdout=subprocess.PIPE).stdout)


def test_a_collective_is_the_command_lines():
    r = hetsim.collective("dgx-h100", "allreduce", "1GiB", nodes=2)
    assert r == cli("collective", "--cluster", "dgx-h100", "--nodes", "2", "--op", "allreduce",
                    "--bytes", "1GiB", "--json")
    # The first 8 GPUs (one node's NVLink) are faster per byte than 16 over the network.
    one_node = hetsim.collective("dgx-h100", "allreduce", 2**30, ranks=8, nodes=2)
    assert one_node["busbw_Bps"] > r["busbw_Bps"]
    assert one_node == hetsim.collective("dgx-h100", "allreduce", "1GiB", ranks=list(range(8)),
                                         nodes=2)


def test_a_collective_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="op: unknown collective"):
        hetsim.collective("dgx-h100", "allsmash", "1GiB")
    with pytest.raises(ValueError, match="GPU 99 does not exist"):
        hetsim.collective("dgx-h100", "allreduce", "1GiB", ranks=[0, 99])
    with pytest.raises(ValueError, match="listed twice"):
        hetsim.collective("dgx-h100", "allreduce", "1GiB", ranks=[0, 0])


def test_export_is_the_command_lines_and_refuses_what_the_framework_cannot_run():
    plan = "experiments/default/llama2-13b-mixed.yaml"
    args = ("--model", "llama2-13b", "--cluster", "mixed-h100-a100", "--plan", plan)
    with pytest.raises(ValueError, match="deepspeed cannot express this plan"):
        hetsim.export("llama2-13b", "mixed-h100-a100", plan, "deepspeed")
    forced = hetsim.export("llama2-13b", "mixed-h100-a100", plan, "deepspeed", force=True)
    assert forced == cli("export", *args, "--framework", "deepspeed", "--force", "--json")
    assert forced["unsupported"] and "approximation" in forced
    uniform = hetsim.export("gpt3-1.3b", "dgx-a100", {"tensor_parallel": 2,
                                                     "global_batch_size": 8}, "megatron", nodes=1)
    assert uniform["unsupported"] == []
    assert "--tensor-model-parallel-size" in uniform["command"]
