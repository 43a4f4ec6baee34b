#!/usr/bin/env python3
"""Compare the planner's policies on one cluster from Python: the best plan of each policy, and
where the time of the three fastest goes (compute, exposed communication, pipeline bubble).

    python3 examples/python/plan_comparison.py [--model llama2-13b] [--cluster mixed-h100-a100]

Run from the repository root after a build (scripts/run.sh puts `import hetsim` on the path).
"""
import argparse
import os

import pandas as pd

import hetsim


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama2-13b")
    ap.add_argument("--cluster", default="mixed-h100-a100")
    ap.add_argument("--global-batch-size", type=int, default=32)
    ap.add_argument("--sequence-length", type=int, default=4096)
    ap.add_argument("--out", help="also write the comparison as CSV files in this folder")
    args = ap.parse_args()
    found = hetsim.plan(args.model, args.cluster, args.global_batch_size,
                        sequence_length=args.sequence_length, top=50, search=False)
    frame = found.candidates
    # The best candidate of each policy (the frame is fastest first).
    per_policy = frame.drop_duplicates("policy")
    print("%d plans proposed, %d ranked, %d rejected" % (found.proposed, len(frame),
                                                          len(found.rejected)))
    with pd.option_context("display.width", 160, "display.max_colwidth", 60):
        print(per_policy[["policy", "iteration_time_s", "mfu", "label"]].to_string(index=False))
    rows = []
    for plan in found.plans[:3]:
        r = hetsim.simulate(args.model, args.cluster, plan)
        b = r.breakdown_s
        rows.append({"policy": plan.policy, "iteration_s": r.iteration_time_s,
                     "compute_s": b["compute"], "exposed_comm_s": b["communication_exposed"],
                     "bubble_s": b["bubble"], "peak_GiB": r.devices.peak_memory_bytes.max() / 2**30})
    print(pd.DataFrame(rows).to_string(index=False))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        per_policy.drop(columns=["plan"]).to_csv(os.path.join(args.out, "policies.csv"),
                                                 index=False)
        pd.DataFrame(rows).to_csv(os.path.join(args.out, "top3.csv"), index=False)


if __name__ == "__main__":
    main()
