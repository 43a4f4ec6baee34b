#!/usr/bin/env python3
"""The heterogeneous study's table: per cluster, each policy's best replayed plan and its speed-up
over the best uniform Megatron-LM plan, from the `hetsim plan --json` files run.sh writes."""
import json
import os
import sys

CASES = [
    ("a100-v100", "A100 + V100"),
    ("v100-t4", "V100 + T4 (AMP's cluster)"),
    ("h100-a100", "H100 + A100"),
    ("4090-a100", "RTX 4090 + A100"),
    ("4090-a100-70b", "RTX 4090 + A100, memory-bound"),
]
POLICIES = ["megatron", "zero", "whale", "cannikin", "amp", "metis", "hetpipe", "flashflex", "cephalo",
            "search"]


def main(folder):
    print("| cluster | model, batch | GPUs | " + " | ".join(POLICIES) + " | planner's best |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in POLICIES) + " | --- |")
    for key, title in CASES:
        path = os.path.join(folder, key + ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            j = json.load(f)
        best = {}
        for c in j["candidates"]:
            if c.get("outcome", "replayed") != "replayed":
                continue
            p = c["policy"]
            if p not in best or c["iteration_time_s"] < best[p]["iteration_time_s"]:
                best[p] = c
        base = best.get("megatron")
        cells = []
        for p in POLICIES:
            if p not in best:
                cells.append("no plan fits")
                continue
            t = best[p]["iteration_time_s"]
            speed = f" ({base['iteration_time_s'] / t:.2f}x)" if base else ""
            cells.append(f"{t * 1e3:.0f} ms{speed}")
        top = j["candidates"][0]
        print(f"| {title} | {j['model']}, {j['global_batch_size']} | {j['gpus']} | "
              + " | ".join(cells)
              + f" | {top['policy']}: {top['label']} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results")
