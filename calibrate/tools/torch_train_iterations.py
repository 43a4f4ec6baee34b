#!/usr/bin/env python3
"""Measures real single-GPU training iterations of GPT-style models in PyTorch, as ground truth for
hetsim's replay on the same GPU (tests/data/ground_truth/h200_torch/).

Each configuration trains a GPT-style decoder (learned positions, pre-LayerNorm, GELU MLP of 4 x
hidden, biases, tied embeddings, hidden dropout 0.1, causal flash attention through
scaled_dot_product_attention without attention dropout) under torch.autocast(bfloat16) with fp32
parameters, a fused AdamW step, and `--accum` micro-batches of gradient accumulation per
iteration. An iteration is timed with CUDA events around its micro-batches and optimizer step;
2 warm-up iterations, then the median of `--iters`. Rows are appended to OUT as each configuration
finishes, so a run cut short keeps what it measured; a configuration that fails (out of memory)
is written with its error.

usage: torch_train_iterations.py --out OUT.csv [--iters 5] [--accum 4] [--deadline-s 300]
"""
import argparse
import csv
import os
import statistics
import sys
import time

from torch_reference import event_times

# (name, hidden, layers, heads): GPT-3 350M, 1.3B, 2.7B shapes (Brown et al. 2020, Table 2.1).
MODELS = [("gpt-350m", 1024, 24, 16), ("gpt-1.3b", 2048, 24, 16), ("gpt-2.7b", 2560, 32, 32)]
SEQUENCES = [2048, 1024]
MICRO_BATCHES = [1, 2, 4, 8]
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128, as Megatron pads it

FIELDS = ["model", "hidden", "layers", "heads", "ffn_hidden", "vocab", "sequence", "micro_batch",
          "accum", "iteration_s", "iteration_min_s", "iteration_max_s", "tokens_per_s", "error"]


def build(torch, hidden, layers, heads, seq, vocab=VOCAB, unfused=False):
    """The GPT of the module's doc. `unfused`, or a PyTorch without scaled_dot_product_attention
    (before 2.0): the attention core written out (Q K^T, the causal mask, softmax, dropout 0.1 on
    the probabilities as Megatron-LM's unfused path has it, P V) inside a
    record_function("attention") range, which hetsim's trace importer reads as one unfused
    attention kernel."""
    nn = torch.nn
    F = torch.nn.functional
    fused = hasattr(F, "scaled_dot_product_attention") and not unfused

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)
            self.drop = nn.Dropout(0.1)
            if not fused:
                self.attn_drop = nn.Dropout(0.1)
                self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))

        def attention(self, q, k, v):
            if fused:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            with torch.profiler.record_function("attention"):
                s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
                p = self.attn_drop(F.softmax(s.masked_fill(self.mask, float("-inf")), dim=-1))
                return p @ v

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q = q.view(b, s, heads, h // heads).transpose(1, 2)
            k = k.view(b, s, heads, h // heads).transpose(1, 2)
            v = v.view(b, s, heads, h // heads).transpose(1, 2)
            a = self.attention(q, k, v)
            x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, h)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)
            self.drop = nn.Dropout(0.1)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.drop(self.tok(idx) + self.pos(pos))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.tok.weight.t()  # tied output embedding
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    return GPT()


def measure(torch, hidden, layers, heads, seq, mb, accum, iters):
    dev = torch.device("cuda", 0)
    model = build(torch, hidden, layers, heads, seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, VOCAB, (mb, seq), device=dev)
    tgt = torch.randint(0, VOCAB, (mb, seq), device=dev)

    def iteration():
        for _ in range(accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, tgt) / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = event_times(torch, iteration, 2, iters)  # 2 warm-up iterations, then `iters`
    del model, opt
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--deadline-s", type=float, default=300)
    args = ap.parse_args(argv)
    import torch
    start = time.monotonic()
    new = not os.path.exists(args.out)
    with open(args.out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            f.write(f"# device={torch.cuda.get_device_name(0)} torch={torch.__version__}\n")
            w.writeheader()
        for seq in SEQUENCES:
            for name, hidden, layers, heads in MODELS:
                for mb in MICRO_BATCHES:
                    if time.monotonic() - start > args.deadline_s:
                        print("deadline reached; stopping", flush=True)
                        return 0
                    row = dict(model=name, hidden=hidden, layers=layers, heads=heads,
                               ffn_hidden=4 * hidden, vocab=VOCAB, sequence=seq, micro_batch=mb,
                               accum=args.accum, error="")
                    t0 = time.monotonic()
                    try:
                        times = measure(torch, hidden, layers, heads, seq, mb, args.accum,
                                        args.iters)
                        med = statistics.median(times)
                        row.update(iteration_s=f"{med:.6e}", iteration_min_s=f"{min(times):.6e}",
                                   iteration_max_s=f"{max(times):.6e}",
                                   tokens_per_s=f"{mb * seq * args.accum / med:.1f}")
                    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    torch.cuda.empty_cache()
                    w.writerow(row)
                    f.flush()
                    print(f"{name} seq {seq} mb {mb}: {row.get('iteration_s', '')} "
                          f"{row['error']} ({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
