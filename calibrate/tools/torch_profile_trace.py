#!/usr/bin/env python3
"""Trains a GPT-style decoder in PyTorch under torch.profiler and writes the profiler's trace of a
few iterations (Kineto's Chrome-trace JSON), for `hetsim calibrate import-trace` and
`hetsim compare --trace` (tests/data/traces/, docs/guides/check-against-your-run.md).

The model is torch_train_iterations.py's (learned positions, pre-LayerNorm, GELU MLP, biases, tied
embeddings, hidden dropout), its attention core written out inside a `record_function("attention")`
range where PyTorch has no scaled_dot_product_attention (before 2.0) or `--unfused` asks for it. Each iteration is `--accum` micro-batches and an AdamW
step; the profiler skips one iteration, warms up on one and records `--iters`.

Where PyTorch was built with Kineto, the trace is the profiler's own export_chrome_trace. Debian's
python3-torch (1.13) is built without it: its legacy export has neither shapes nor categories, so
the profiler's own events (name, start, duration, thread, input shapes, autograd sequence number,
every one as the profiler measured it) are written in Kineto's layout ("cat": "cpu_op",
"args": {"Input Dims", "Sequence number", "Fwd thread id"}) instead; nothing is added or timed
apart from the profiler.

usage: torch_profile_trace.py --out TRACE.json [--device cpu|cuda] [--layers 4 --hidden 256
       --heads 4 --vocab 2048 --seq 128 --micro-batch 2 --accum 1 --iters 3] [--threads N]
"""
import argparse
import json
import sys

from torch_train_iterations import build


def kineto_layout(torch, prof, note):
    """The legacy profiler's events in Kineto's Chrome-trace layout (see the module's doc)."""
    events = []
    step = 0
    for e in sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end)):
        name = e.name
        cat = "cpu_op"
        if name.startswith("ProfilerStep"):
            name, cat = f"ProfilerStep#{step}", "user_annotation"
            step += 1
        elif e.input_shapes == [] and not name.startswith(("aten::", "autograd::")):
            cat = "user_annotation"  # record_function ranges: no inputs
        args = {"Input Dims": e.input_shapes}
        if e.sequence_nr >= 0:
            args["Sequence number"] = e.sequence_nr
            args["Fwd thread id"] = e.fwd_thread
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": e.thread,
                       "ts": e.time_range.start, "dur": e.time_range.elapsed_us(), "args": args})
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": events,
            "hetsim_writer": note}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's)")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) (GPU)")
    ap.add_argument("--unfused", action="store_true", help="the attention core written out")
    a = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    model = build(torch, a.hidden, a.layers, a.heads, a.seq, a.vocab, a.unfused).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)

    def iteration():
        for _ in range(a.accum):
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
                loss = model(idx, tgt) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    kineto = torch.autograd.kineto_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    done = []

    def ready(p):
        if kineto:
            p.export_chrome_trace(a.out)
        else:
            note = (f"calibrate/tools/torch_profile_trace.py: torch {torch.__version__} without "
                    f"Kineto; the profiler's events in Kineto's layout; " + " ".join(sys.argv[1:]))
            with open(a.out, "w") as f:
                json.dump(kineto_layout(torch, p, note), f, separators=(",", ":"))
        done.append(a.out)

    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=a.iters), on_trace_ready=ready) as p:
        for _ in range(2 + a.iters):
            iteration()
            if a.device == "cuda":
                torch.cuda.synchronize()
            p.step()
    print(f"{done[0] if done else a.out}: {a.iters} iterations of a {a.layers}-layer GPT "
          f"(hidden {a.hidden}, micro-batch {a.micro_batch} x {a.accum}) on {a.device}, torch "
          f"{torch.__version__}{'' if kineto else ' (no Kineto: written in its layout)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
