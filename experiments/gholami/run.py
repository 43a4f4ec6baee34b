#!/usr/bin/env python3
"""Gholami et al.'s comparison, replayed: pure batch, pure model and the integrated grid.

For AlexNet and ResNet-50 at a fixed mini-batch, over process counts on DGX A100 nodes: the bytes
each GPU sends per iteration (the paper's bandwidth terms) and the replayed iteration, for pure
batch parallelism (grid rows 1), pure model parallelism (one column, every layer split by model)
and the best grid (rows x columns, each layer's split chosen by `split: gholami`).
Usage: experiments/gholami/run.py [--hetsim build/hetsim] > table.md
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def simulate(hetsim, model, gpus, rows, batch, split):
    nodes = max(1, gpus // 8)
    plan = f"grid: {{rows: {rows}, columns: {gpus // rows}}}\nglobal_batch_size: {batch}\n"
    if rows > 1:
        plan += f"split: {split}\n"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(plan)
        path = f.name
    try:
        r = subprocess.run([hetsim, "simulate", "--model", model, "--cluster", "dgx-a100",
                            "--nodes", str(nodes), "--plan", path, "--json"],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        return None  # a split that does not fit (said on standard error)
    j = json.loads(r.stdout)
    return {"sent": j["sent_bytes_per_device"]["total"], "time": j["iteration_time_s"],
            "exposed": j["breakdown_s"]["communication_exposed"], "rows": rows,
            "splits": j.get("grid", {}).get("splits", {})}


def fmt(x):
    if x is None:
        return "does not fit"
    return f"{x['sent'] / 2**20:.1f} MiB, {x['time'] * 1e3:.1f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetsim", default="build/hetsim")
    a = ap.parse_args()
    print("| model | batch | GPUs | pure batch | pure model | best grid (rows x columns) | grid / best pure (bytes) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model, batch in (("alexnet", 512), ("resnet50", 512)):
        for gpus in (8, 16, 32, 64, 128, 256, 512):
            batch_only = simulate(a.hetsim, model, gpus, 1, batch, "")
            model_only = simulate(a.hetsim, model, gpus, gpus, batch, "model")
            grids = [simulate(a.hetsim, model, gpus, rows, batch, "gholami")
                     for rows in (2, 4, 8, 16, 32, 64) if rows < gpus]
            grids = [g for g in grids if g]
            best = min(grids, key=lambda g: g["sent"]) if grids else None
            pure = [x for x in (batch_only, model_only) if x]
            ratio = f"{best['sent'] / min(x['sent'] for x in pure):.2f}" if best and pure else "-"
            cell = (f"{fmt(best)} ({best['rows']} x {gpus // best['rows']})" if best else "-")
            print(f"| {model} | {batch} | {gpus} | {fmt(batch_only)} | {fmt(model_only)} | {cell} | {ratio} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
