#!/usr/bin/python3
"""Baseline for bench_cpu_adam: torch.optim.AdamW(foreach=True) from Debian's python3-torch
(the same LibTorch) on N float32 parameters split into tensors of `--chunk` elements.

    adamw_baseline.py --params N [--chunk 1048576] [--steps 3] [--threads 2]

Prints one line: "adamw_foreach params N step_ms T" (median of the timed steps)."""
import argparse, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--params", type=int, required=True)
ap.add_argument("--chunk", type=int, default=1 << 20)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
torch.set_num_threads(a.threads)
sizes = [a.chunk] * (a.params // a.chunk) + ([a.params % a.chunk] if a.params % a.chunk else [])
params = [torch.randn(n, requires_grad=True) for n in sizes]
for p in params:
    p.grad = torch.randn(p.numel())
opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
# The first steps create the moments and warm the allocator (a first step of 256 M parameters
# takes seconds, and the next ones still speed up): two untimed steps.
opt.step()
opt.step()
times = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    opt.step()
    times.append((time.perf_counter() - t0) * 1000)
times.sort()
print(f"adamw_foreach params {a.params} step_ms {times[len(times) // 2]:.3f}")
