#!/usr/bin/python3
"""Baseline for bench_gpu_step: the same UNet2DConditionModel architecture (ddp_baseline.UNet,
859.5 M parameters at SD 1.5's size) trained the way a plain PyTorch script would on one GPU:
fp32 weights, bf16 autocast, fused AdamW, and the same fused attention as ZeroStudio's CUDA path
(torch.nn.functional.scaled_dot_product_attention).

    gpu_baseline.py --model sd15 --batch 8 --res 64 --steps 10 --warmup 3 [--ckpt 0]

Prints one line: "torch psi P s_it T images_s I peak_alloc B peak_reserved R"."""
import argparse
import time

import torch
import torch.nn.functional as F

import ddp_baseline


def sdpa_forward(self, x, ctx=None):
    ctx = x if ctx is None else ctx
    b, n, c = x.shape
    split = lambda t: t.reshape(b, -1, self.heads, c // self.heads).transpose(1, 2)
    out = F.scaled_dot_product_attention(split(self.to_q(x)), split(self.to_k(ctx)), split(self.to_v(ctx)))
    return self.to_out[0](out.transpose(1, 2).reshape(b, n, c))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="sd15", choices=["sd15"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--res", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ckpt", type=int, default=0)
    a = p.parse_args()
    if a.ckpt:
        raise SystemExit("gpu_baseline.py: --ckpt is not implemented")
    ddp_baseline.Attention.forward = sdpa_forward
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = ddp_baseline.UNet(4, [320, 640, 1280, 1280], 768, [8, 8, 8, 8], 32, 2, [True, True, True, False]).to(dev)
    psi = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    x = torch.randn(a.batch, 4, a.res, a.res, device=dev)
    target = torch.randn_like(x)
    t = torch.randint(0, 1000, (a.batch,), device=dev)
    ctx = torch.randn(a.batch, 77, 768, device=dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    total = 0.0
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x, t, ctx)
        F.mse_loss(out.float(), target).backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= a.warmup:
            total += time.perf_counter() - t0
    s_it = total / a.steps
    print(f"torch psi {psi} s_it {s_it:.4f} images_s {a.batch / s_it:.3f} "
          f"peak_alloc {torch.cuda.max_memory_allocated()} peak_reserved {torch.cuda.memory_reserved()}", flush=True)


if __name__ == "__main__":
    main()
