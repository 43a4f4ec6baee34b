#!/usr/bin/env python3
"""A what-if capacity study from Python: Llama 2 13B on mixes of DGX H100 and DGX A100 nodes.

For each mix, the planner picks the fastest plan that fits; its iteration is replayed for the
throughput and the cost per million tokens at on-demand prices. Writes a CSV and a plot of both
against the mix. The mixes are planned in parallel threads (hetsim releases the GIL).

    python3 examples/python/capacity_study.py [--out out/] [--h100 1 2] [--a100 1 2]

Run from the repository root after a build (scripts/run.sh puts `import hetsim` on the path).
"""
import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

import hetsim  # noqa: E402

MODEL, CLUSTER = "llama2-13b", "mixed-h100-a100"
BATCH, SEQUENCE = 64, 4096


def study(mix):
    h100, a100 = mix
    nodes = {"groups[0].count": h100, "groups[1].count": a100}
    found = hetsim.plan(MODEL, CLUSTER, BATCH, sequence_length=SEQUENCE, cluster_set=nodes,
                        search=False)
    best = found.best
    r = hetsim.simulate(MODEL, CLUSTER, best, cluster_set=nodes)
    return {"h100_nodes": h100, "a100_nodes": a100, "gpus": r.gpus, "policy": best.policy,
            "plan": best.label, "iteration_s": r.iteration_time_s,
            "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
            "usd_per_million_tokens": r.cost_per_million_tokens_usd}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out", help="folder for the CSV and the plot")
    ap.add_argument("--h100", type=int, nargs="+", default=[1, 2], help="H100 node counts")
    ap.add_argument("--a100", type=int, nargs="+", default=[1, 2], help="A100 node counts")
    args = ap.parse_args()
    mixes = [(h, a) for h in args.h100 for a in args.a100]
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        rows = list(pool.map(study, mixes))
    table = pd.DataFrame(rows)
    os.makedirs(args.out, exist_ok=True)
    csv = os.path.join(args.out, "capacity_study.csv")
    table.to_csv(csv, index=False)
    with pd.option_context("display.width", 160, "display.max_colwidth", 40):
        print(table.drop(columns=["plan"]).to_string(index=False))

    labels = ["%dH+%dA" % (h, a) for h, a in zip(table.h100_nodes, table.a100_nodes)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(labels, table.tokens_per_s / 1e3)
    left.set_ylabel("thousand tokens/s")
    left.set_title("%s, batch %d x %d" % (MODEL, BATCH, SEQUENCE))
    right.bar(labels, table.usd_per_million_tokens, color="tab:orange")
    right.set_ylabel("USD per million tokens")
    right.set_title("on-demand prices")
    for ax in (left, right):
        ax.set_xlabel("DGX H100 + DGX A100 nodes")
    fig.tight_layout()
    png = os.path.join(args.out, "capacity_study.png")
    fig.savefig(png, dpi=100)
    print("wrote %s and %s" % (csv, png))


if __name__ == "__main__":
    main()
