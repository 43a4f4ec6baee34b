#!/usr/bin/env python3
"""Times the same GPU by another path than hetsim-calibrate-cuda, as a check on its figures:
PyTorch's bf16 8192-cube matmul and a 2 GiB device-to-device copy, each timed with CUDA events
(3 warm-ups, then 10 repetitions, the median kept). The matmul is timed twice: first on the GPU
as it is (`reference_gemm_bf16_8192_cold_*`), then after --sustain-s seconds of back-to-back
matmuls, when the board has reached its power limit as it does in training and in the
calibration's minutes of GEMMs (the figure compared with ours). On the first H200 (700 W) the
cold matmul ran at 774 TFLOP/s at 1980 MHz and the sustained one at 659 at about 1450 MHz
(experiments/h200-calibration/gemm_gap.txt). Prints `key=value` lines that csv_summary.py
--reference reads, or one line "PyTorch not available: no reference (...)" where torch cannot be
imported or sees no GPU (exit 0 either way: the calibration does not depend on it).

usage: torch_reference.py [--reps N] [--sustain-s S]
"""
import argparse
import statistics
import sys
import time

MATMUL_N = 8192
COPY_BYTES = 2 << 30


def event_times(torch, fn, warmups, reps, before=None):
    """`reps` CUDA-event timings of fn(), in seconds, after `warmups` calls; before(r), when
    given, runs ahead of repetition r outside the timed span (an L2 flush, say). The other GPU
    tools here (gemm_gap.py, torch_train_iterations.py) time with it too."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for r in range(reps):
        if before:
            before(r)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return times


def timed(torch, fn, warmups, reps):
    """The median of `reps` CUDA-event timings of fn(), in seconds, after `warmups` calls."""
    return statistics.median(event_times(torch, fn, warmups, reps))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--sustain-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"PyTorch not available: no reference (import torch: {e})")
        return 0
    if not torch.cuda.is_available():
        print(f"PyTorch not available: no reference (torch {torch.__version__} sees no CUDA GPU)")
        return 0
    device = torch.device("cuda", 0)
    print(f"reference_device={torch.cuda.get_device_name(device)}")
    print(f"reference_torch={torch.__version__}")

    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    c = torch.empty(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    matmul = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    t = timed(torch, matmul, 3, args.reps)
    print(f"reference_gemm_bf16_8192_cold_s={t:.6e}")
    print(f"reference_gemm_bf16_8192_cold_tflops={2.0 * MATMUL_N ** 3 / t / 1e12:.1f}")
    start = time.monotonic()
    while time.monotonic() - start < args.sustain_s:
        for _ in range(20):
            matmul()
        torch.cuda.synchronize()
    t = timed(torch, matmul, 0, args.reps)
    print(f"reference_gemm_bf16_8192_s={t:.6e}")
    print(f"reference_gemm_bf16_8192_tflops={2.0 * MATMUL_N ** 3 / t / 1e12:.1f}")
    del a, b, c

    src = torch.empty(COPY_BYTES, device=device, dtype=torch.uint8)
    src.fill_(1)
    dst = torch.empty_like(src)
    t = timed(torch, lambda: dst.copy_(src), 3, args.reps)
    # Bytes read plus bytes written, as the CSV's memory kernels count them.
    print(f"reference_copy_2gib_s={t:.6e}")
    print(f"reference_copy_2gib_GBps={2.0 * COPY_BYTES / t / 1e9:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
