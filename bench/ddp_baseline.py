#!/usr/bin/python3
"""Baseline for bench_zero_step: the same UNet2DConditionModel architecture in plain PyTorch
(Debian's python3-torch, the same LibTorch), trained with DistributedDataParallel on Gloo.

    ddp_baseline.py --world N --channels 32,64,96 --cross 64 --heads 2,4,4 --groups 8
                    --down D,C,C --res 16 --batch 8 --steps 5

Prints one line: "ddp world N params P step_ms T" (mean over the timed steps, rank 0)."""
import argparse, math, os, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Resnet(nn.Module):
    def __init__(self, cin, cout, temb, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-5)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.conv_shortcut(x) if self.conv_shortcut is not None else x) + h


class Attention(nn.Module):
    def __init__(self, dim, ctx, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(ctx, dim, bias=False)
        self.to_v = nn.Linear(ctx, dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def forward(self, x, ctx=None):
        ctx = x if ctx is None else ctx
        b, n, c = x.shape
        q, k, v = self.to_q(x), self.to_k(ctx), self.to_v(ctx)
        split = lambda t: t.reshape(b, -1, self.heads, c // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c // self.heads), -1)
        return self.to_out[0]((w @ v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, ctx, heads):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim, dim, heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, ctx, heads)
        self.norm3 = nn.LayerNorm(dim)
        self.proj, self.out = nn.Linear(dim, dim * 8), nn.Linear(dim * 4, dim)

    def forward(self, x, ctx):
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), ctx) + x
        a, g = self.proj(self.norm3(x)).chunk(2, -1)
        return self.out(a * F.gelu(g)) + x


class Transformer(nn.Module):
    def __init__(self, ch, ctx, heads, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, ch, eps=1e-6)
        self.proj_in = nn.Conv2d(ch, ch, 1)
        self.block = Block(ch, ctx, heads)
        self.proj_out = nn.Conv2d(ch, ch, 1)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).permute(0, 2, 3, 1).reshape(b, h * w, c)
        t = self.block(t, ctx).reshape(b, h, w, c).permute(0, 3, 1, 2)
        return self.proj_out(t) + x


class UNet(nn.Module):
    """UNet2DConditionModel's structure (layers_per_block L, mid block with cross-attention)."""

    def __init__(self, cin, chans, cross, heads, groups, layers, attn):
        super().__init__()
        c0, temb = chans[0], chans[0] * 4
        self.c0 = c0
        self.conv_in = nn.Conv2d(cin, c0, 3, padding=1)
        self.lin1, self.lin2 = nn.Linear(c0, temb), nn.Linear(temb, temb)
        self.down, skips, out = nn.ModuleList(), [c0], c0
        for i, ch in enumerate(chans):
            for j in range(layers):
                self.down.append(Resnet(out, ch, temb, groups)); out = ch
                self.down.append(Transformer(ch, cross, heads[i], groups) if attn[i] else nn.Identity())
                skips.append(ch)
            if i + 1 < len(chans):
                self.down.append(nn.Conv2d(ch, ch, 3, stride=2, padding=1)); skips.append(ch)
        self.mid = nn.ModuleList([Resnet(out, out, temb, groups), Transformer(out, cross, heads[-1], groups),
                                  Resnet(out, out, temb, groups)])
        self.up = nn.ModuleList()
        rev = list(reversed(chans)); rattn = list(reversed(attn)); rheads = list(reversed(heads))
        for i, ch in enumerate(rev):
            for j in range(layers + 1):
                self.up.append(Resnet(out + skips.pop(), ch, temb, groups)); out = ch
                self.up.append(Transformer(ch, cross, rheads[i], groups) if rattn[i] else nn.Identity())
            if i + 1 < len(rev):
                self.up.append(nn.Conv2d(ch, ch, 3, padding=1))
        self.norm_out, self.conv_out = nn.GroupNorm(groups, c0), nn.Conv2d(c0, cin, 3, padding=1)
        self.layers, self.n = layers, len(chans)

    def forward(self, x, t, ctx):
        half = self.c0 // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t.float()[:, None] * freqs[None]
        temb = self.lin2(F.silu(self.lin1(torch.cat([args.cos(), args.sin()], -1))))
        h = self.conv_in(x); skips = [h]; k = 0
        for i in range(self.n):
            for j in range(self.layers):
                h = self.down[k](h, temb); k += 1
                h = self.down[k](h, ctx) if isinstance(self.down[k], Transformer) else h; k += 1
                skips.append(h)
            if i + 1 < self.n:
                h = self.down[k](h); k += 1; skips.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, temb), ctx), temb)
        k = 0
        for i in range(self.n):
            for j in range(self.layers + 1):
                h = self.up[k](torch.cat([h, skips.pop()], 1), temb); k += 1
                h = self.up[k](h, ctx) if isinstance(self.up[k], Transformer) else h; k += 1
            if i + 1 < self.n:
                h = self.up[k](F.interpolate(h, scale_factor=2.0, mode="nearest")); k += 1
        return self.conv_out(F.silu(self.norm_out(h)))


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // a.world))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(0)
    chans = [int(c) for c in a.channels.split(",")]
    heads = [int(h) for h in a.heads.split(",")]
    attn = [d == "C" for d in a.down.split(",")]
    model = UNet(a.cin, chans, a.cross, heads, a.groups, a.layers, attn)
    params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.cin, a.res, a.res)
    t = torch.randint(0, 1000, (a.batch,))
    ctx = torch.randn(a.batch, 8, a.cross)
    times = []
    for step in range(a.steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(ddp(x, t, ctx), x).backward()
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        print(f"ddp world {a.world} params {params} step_ms {1000 * sum(times) / len(times):.1f} torch {torch.__version__}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--cin", type=int, default=3)
    p.add_argument("--channels", default="32,64,96")
    p.add_argument("--heads", default="2,4,4")
    p.add_argument("--down", default="D,C,C")
    p.add_argument("--cross", type=int, default=64)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--res", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--port", type=int, default=29871)
    a = p.parse_args()
    mp.spawn(worker, args=(a, a.port), nprocs=a.world, join=True)
