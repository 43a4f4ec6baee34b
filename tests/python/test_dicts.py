"""Models and clusters as Python dicts (issue 41): the same keys as their YAML files, the same
result as the files, and errors that name the dict and the field."""
import json

import pytest

import hetsim

# models/gpt3-1.3b.yaml's keys.
MODEL = {"name": "gpt3-1.3b", "family": "gpt", "layers": 24, "hidden": 2048, "heads": 16,
         "kv_heads": 16, "head_dim": 128, "ffn_hidden": 8192, "vocab": 50257, "sequence": 2048,
         "activation": "gelu", "norm": "layernorm", "position": "learned",
         "tied_embeddings": True, "causal": True, "bias": True}
# Two nodes of 8 A100 on NVSwitch, a NIC per GPU on one switch.
CLUSTER = {"name": "two-a100-nodes",
           "node_types": [{"name": "a100-node", "gpu": "a100-sxm4-80gb", "gpus": 8,
                           "intra": {"kind": "nvswitch", "link_class": "nvlink3",
                                     "bandwidth": "300GB/s"},
                           "nics": {"count": 8, "link_class": "ib_hdr",
                                    "bandwidth": "200Gbps"}}],
           "groups": [{"node_type": "a100-node", "count": 2}],
           "fabric": {"kind": "single_switch", "latency": "100ns"}}
PLAN = {"tensor_parallel": 8, "global_batch_size": 16, "sequence_length": 2048}


def test_a_dict_model_is_the_built_in_one():
    a = hetsim.simulate(MODEL, "dgx-a100", PLAN, nodes=2)
    b = hetsim.simulate("gpt3-1.3b", "dgx-a100", PLAN, nodes=2)
    assert a.to_dict() == b.to_dict()


def test_a_dict_cluster_is_its_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(CLUSTER))  # JSON is YAML
    a = hetsim.simulate("gpt3-1.3b", CLUSTER, PLAN)
    b = hetsim.simulate("gpt3-1.3b", str(path), PLAN)
    assert a.gpus == 16
    assert a.iteration_time_s == b.iteration_time_s
    assert hetsim.collective(CLUSTER, "allreduce", "256MiB")["time_s"] == \
        hetsim.collective(str(path), "allreduce", "256MiB")["time_s"]
    assert hetsim.plan("gpt3-1.3b", CLUSTER, 16, search=False).best.iteration_time_s > 0


def test_a_bad_field_in_a_dict_is_named():
    with pytest.raises(ValueError, match=r"<dict model>.*hiden: unknown key"):
        hetsim.simulate(dict(MODEL, hiden=1), "dgx-a100", PLAN, nodes=2)
    broken = json.loads(json.dumps(CLUSTER))
    broken["groups"][0]["count"] = "two"
    with pytest.raises(ValueError, match=r"<dict cluster>.*count"):
        hetsim.simulate("gpt3-1.3b", broken, PLAN)
    with pytest.raises(TypeError):
        hetsim.simulate(42, "dgx-a100", PLAN)
