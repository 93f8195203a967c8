#!/usr/bin/env python3
"""Issue 58: does PyTorch's cuDNN attention fail at Flux.1's joint-attention shapes with no
ZeroStudio code involved? One forward and backward of torch.nn.functional.scaled_dot_product_attention
on bf16 [B, H, S, D] inputs laid out as diffusers (and ZeroStudio) make them — projections of
[B, S, H·D] viewed as heads and transposed — or contiguous, with one backend forced. A fault
poisons the CUDA context, so run each variant in a process of its own:

    sdpa_cudnn_repro.py BACKEND LAYOUT [S] [H] [D] [B]   BACKEND: cudnn | flash | efficient
                                                         LAYOUT: transposed | contiguous
Prints "sdpa BACKEND LAYOUT ok|failed: ..." (exit 0 either way unless the setup itself fails)."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    backend, layout = sys.argv[1], sys.argv[2]
    s, h, d, b = (int(x) for x in (sys.argv[3:] + ["4608", "24", "128", "1"][len(sys.argv) - 3:])[:4])
    torch.manual_seed(0)
    dev = torch.device("cuda")
    which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def heads(t):
        t = t.view(b, s, h, d).transpose(1, 2)
        return t.contiguous() if layout == "contiguous" else t

    x = torch.randn(b, s, h * d, device=dev, dtype=torch.bfloat16)
    w = [torch.randn(h * d, h * d, device=dev, dtype=torch.bfloat16, requires_grad=True) / (h * d) ** 0.5
         for _ in range(3)]
    try:
        with sdpa_kernel(which):
            q, k, v = (heads(x @ wi) for wi in w)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            merged = out.transpose(1, 2).reshape(b, s, h * d)
            loss = (merged.float() ** 2).mean()
            loss.backward()
        torch.cuda.synchronize()
        print(f"sdpa {backend} {layout} S={s} H={h} D={d} B={b} ok (loss {loss.item():.5f})", flush=True)
    except Exception as e:  # noqa: BLE001 — the failure is the finding
        print(f"sdpa {backend} {layout} S={s} H={h} D={d} B={b} failed: {str(e).splitlines()[0]}", flush=True)


if __name__ == "__main__":
    main()
