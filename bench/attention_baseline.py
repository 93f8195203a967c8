#!/usr/bin/env python3
"""Python baseline of bench_attention: forward + backward of one multi-head attention on the CPU in
the PyTorch that runs this script, on the same shapes and thread count, median of --reps timed
runs after one untimed run: the plain path (q kᵀ, softmax and the probabilities kept for
backward, as our plain path) and, on PyTorch 2.x, torch.nn.functional.scaled_dot_product_attention.

Prints one line: plain_ms X sdpa_ms Y torch VERSION  (sdpa_ms -1 where PyTorch has none)
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


def plain(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


def timed(fn, q, k, v, g, reps):
    def once():
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        t0 = time.perf_counter()
        fn(qq, kk, vv).backward(g)
        return 1000 * (time.perf_counter() - t0)

    once()
    return statistics.median(once() for _ in range(reps))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--keys", type=int, default=0)
    p.add_argument("--heads", type=int, default=10)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    nk = a.keys or a.tokens
    q = torch.randn(a.batch, a.heads, a.tokens, a.head_dim)  # [B, H, N, d]
    k = torch.randn(a.batch, a.heads, nk, a.head_dim)
    v = torch.randn(a.batch, a.heads, nk, a.head_dim)
    g = torch.randn(a.batch, a.heads, a.tokens, a.head_dim)
    plain_ms = timed(plain, q, k, v, g, a.reps)
    sdpa_ms = timed(F.scaled_dot_product_attention, q, k, v, g, a.reps) if hasattr(F, "scaled_dot_product_attention") else -1
    print(f"plain_ms {plain_ms:.2f} sdpa_ms {sdpa_ms:.2f} torch {torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
