#!/usr/bin/env python3
"""Explains a gap between hetsim-calibrate-cuda's bf16 GEMM figures and PyTorch's on the same GPU.

The first H200 calibration (2026-11-30) measured the 8192-cube bf16 GEMM at 672 TFLOP/s where
PyTorch's matmul gave 776. The two differ in four ways, each tested here on its own with PyTorch
(CUDA events, median of N repetitions):
  layout     a @ b (cuBLAS "NN") against F.linear(x, w) = x @ w^T ("TN", the calibration's layout);
  data       torch.randn against uniform values in [-1, 1] (the calibration's fill);
  L2 flush   a 256 MiB memset before each timed repetition (the calibration does this);
  sustained  throughput and SM clock, power and temperature (NVML) second by second over a long
             run of back-to-back GEMMs, as the calibration's 80 s of GEMMs and as training run.
Prints one `key=value` line per figure; needs torch and a CUDA GPU (nvidia-ml-py for clocks).

usage: gemm_gap.py [--n 8192] [--reps 20] [--sustain-s 45]
"""
import argparse
import statistics
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--sustain-s", type=float, default=45.0)
    args = parser.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch_reference import event_times

    n = args.n
    flops = 2.0 * n ** 3
    dev = torch.device("cuda", 0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as e:  # noqa: BLE001 - clocks are optional
        print(f"nvml_unavailable={e}")
        handle = None

    def nvml():
        if handle is None:
            return ""
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return f" sm_mhz={sm} power_w={power:.0f} temp_c={temp} throttle=0x{reasons:x}"

    def timed(fn, flush_l2):
        before = (lambda r: flush.fill_(r & 0xFF)) if flush_l2 else None
        times = event_times(torch, fn, 3, args.reps, before)
        return flops / statistics.median(times) / 1e12

    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ua = (torch.rand(n, n, device=dev) * 2 - 1).to(torch.bfloat16)
    ub = (torch.rand(n, n, device=dev) * 2 - 1).to(torch.bfloat16)
    out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    cases = [
        ("nn_randn", lambda: torch.matmul(a, b, out=out)),
        ("tn_randn", lambda: torch.matmul(a, b.t(), out=out)),
        ("linear_randn", lambda: F.linear(a, b)),
        ("nn_uniform", lambda: torch.matmul(ua, ub, out=out)),
        ("tn_uniform", lambda: torch.matmul(ua, ub.t(), out=out)),
    ]
    print(f"device={torch.cuda.get_device_name(dev)} torch={torch.__version__} n={n}{nvml()}")
    for name, fn in cases:
        for flush_l2 in (False, True):
            t = timed(fn, flush_l2)
            print(f"gemm_{name}{'_flush' if flush_l2 else ''}_tflops={t:.1f}{nvml()}", flush=True)

    # Sustained: back-to-back TN uniform GEMMs, one figure per second.
    fn = cases[4][1]
    start = time.monotonic()
    second = 0
    while time.monotonic() - start < args.sustain_s:
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        count = 0
        s.record()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            for _ in range(50):
                fn()
            count += 50
            e.record()
            e.synchronize()
        second += 1
        print(f"sustained_s={second} tflops={flops * count / (s.elapsed_time(e) * 1e-3) / 1e12:.1f}{nvml()}",
              flush=True)
    for name, fn in cases[:2] + cases[4:]:
        print(f"after_sustained_gemm_{name}_tflops={timed(fn, False):.1f}{nvml()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
