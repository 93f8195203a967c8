#!/usr/bin/env python3
"""Baseline for bench_gpu_step's transformer families: the same diffusers architecture (FluxTransformer2DModel
at FLUX.1-dev's config.json, QwenImageTransformer2DModel at Qwen/Qwen-Image's), random weights, trained the
way a plain PyTorch script would on one GPU with everything resident: bf16 weights, gradient checkpointing
(diffusers' enable_gradient_checkpointing) where the config asks for it, diffusers' default attention processor
(torch.nn.functional.scaled_dot_product_attention, the kernel ZeroStudio's CUDA path calls), on the step
bench_gpu_step's child runs: random latents at data.resolution packed 2×2, σ ~ U(0, 1), x_σ = (1 − σ)·x0 + σ·ε,
the velocity against ε − x0, backward, optimizer step.

The config's method decides the optimizer: training.method lora — PEFT adapters of lora.rank on lora.targets
(or the family's default targets) kept in float32 (diffusers' train_dreambooth_lora_flux.py casts them so),
the base frozen in bf16, torch.optim.AdamW (fused); full with optimizer.type Adafactor — transformers'
Adafactor with scale_parameter, relative_step and warmup_init off at optimizer.lr on the bf16 weights (as
kohya's and OneTrainer's bf16 Adafactor fine-tunes; no fp32 masters). Full AdamW is not run (fp32 states for
12–20 B parameters do not fit one GPU beside the weights). Not matched: ZeroStudio's fused backward step and
CPU offload — this is the everything-on-the-card loop the offloaded run is compared with.

    gpu_transformer_baseline.py --model flux-dev|flux-schnell|qwen-image --config FILE.yaml [--steps 3] [--warmup 1]

Prints one line: "torch psi P s_it T peak_alloc B peak_reserved R host_peak H"."""
import argparse
import os
import resource
import time

import torch
import yaml

FLUX_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"]
QWEN_TARGETS = ["to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out",
                "img_mlp.net.2", "img_mod.1", "txt_mlp.net.2", "txt_mod.1"]


def get(cfg, path, default):
    node = cfg
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node or node[key] is None:
            return default
        node = node[key]
    return node


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=["flux-dev", "flux-schnell", "qwen-image"])
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cuda", help="cpu with --tiny: a smoke test of this script")
    p.add_argument("--tiny", type=int, default=0, help="1: a two-block model at 64 px")
    p.add_argument("--layers", type=int, default=-1, help="blocks (Flux: double-stream) instead of the config's")
    p.add_argument("--single-layers", type=int, default=-1, help="Flux's single-stream blocks instead of 38")
    a = p.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    lora = get(cfg, "training.method", "full") == "lora"
    opt_type = get(cfg, "optimizer.type", "AdamW")
    if not lora and opt_type != "Adafactor":
        raise SystemExit(f"gpu_transformer_baseline.py: full fine-tuning with {opt_type} does not fit one GPU here")
    res = 64 if a.tiny else int(get(cfg, "data.resolution", 1024))
    b = int(get(cfg, "training.batch_size", 1))
    lr = float(get(cfg, "optimizer.lr", 1e-5))
    qwen = a.model == "qwen-image"
    length = int(get(cfg, "model.max_sequence_length", 512 if a.model != "flux-schnell" else 256))
    if a.tiny:
        length = 16
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and os.environ.get("ZEROSTUDIO_CUDNN_ATTENTION") != "1":
        # As ZeroStudio's CUDA attention (core/torch_compat.h, avoid_cudnn_attention): flash or
        # memory-efficient SDPA, not cuDNN's (its backward failed at Flux.1's shapes on an H200).
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the GPU: no fp32 copy, no CPU init
    with torch.device(dev):
        if qwen:
            from diffusers import QwenImageTransformer2DModel
            model = QwenImageTransformer2DModel(num_layers=2, attention_head_dim=16, num_attention_heads=4,
                                                joint_attention_dim=64, axes_dims_rope=(4, 6, 6)) if a.tiny \
                else QwenImageTransformer2DModel(num_layers=a.layers if a.layers >= 0 else 60)
        else:
            from diffusers import FluxTransformer2DModel
            dims = dict(num_layers=1, num_single_layers=2, attention_head_dim=16, num_attention_heads=4,
                        joint_attention_dim=64, pooled_projection_dim=32, axes_dims_rope=[4, 6, 6]) if a.tiny else \
                dict(num_layers=a.layers if a.layers >= 0 else 19,
                     num_single_layers=a.single_layers if a.single_layers >= 0 else 38, attention_head_dim=128,
                     num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
                     axes_dims_rope=[16, 56, 56])
            model = FluxTransformer2DModel(patch_size=1, in_channels=64, guidance_embeds=a.model == "flux-dev", **dims)
    torch.set_default_dtype(torch.float32)
    psi = sum(q.numel() for q in model.parameters())
    if get(cfg, "training.gradient_checkpointing", False):
        model.enable_gradient_checkpointing()
    model.train()
    if lora:
        from peft import LoraConfig
        rank = int(get(cfg, "lora.rank", 16))
        targets = get(cfg, "lora.targets", QWEN_TARGETS if qwen else FLUX_TARGETS)
        model.requires_grad_(False)
        model.add_adapter(LoraConfig(r=rank, lora_alpha=float(get(cfg, "lora.alpha", rank)), init_lora_weights="gaussian",
                                     target_modules=targets))
        params = [q for q in model.parameters() if q.requires_grad]
        for q in params:
            q.data = q.data.float()
        opt = torch.optim.AdamW(params, lr=lr, fused=cuda)
    else:
        from transformers.optimization import Adafactor
        params = list(model.parameters())
        opt = Adafactor(params, lr=lr, scale_parameter=False, relative_step=False, warmup_init=False,
                        weight_decay=float(get(cfg, "optimizer.weight_decay", 0.0)))
    clip = float(get(cfg, "training.gradient_clipping", 0.0))
    side = res // 16  # 8× VAE down-sampling, 2×2 packing
    tokens, channels = side * side, 64
    x0 = torch.randn(b, tokens, channels, device=dev)
    noise = torch.randn_like(x0)
    sigma = torch.rand(b, device=dev)
    x = ((1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise).to(torch.bfloat16)
    target = noise - x0
    ctx_dim = 64 if a.tiny else 3584 if qwen else 4096
    ctx = torch.randn(b, length, ctx_dim, device=dev, dtype=torch.bfloat16)
    if qwen:
        kwargs = dict(encoder_hidden_states=ctx, encoder_hidden_states_mask=torch.ones(b, length, device=dev),
                      timestep=sigma.to(torch.bfloat16), img_shapes=[[(1, side, side)]] * b)
    else:
        ids = torch.zeros(side, side, 3, device=dev)
        ids[..., 1] += torch.arange(side, device=dev)[:, None]
        ids[..., 2] += torch.arange(side, device=dev)[None, :]
        kwargs = dict(encoder_hidden_states=ctx, pooled_projections=torch.randn(b, 32 if a.tiny else 768, device=dev,
                                                                                dtype=torch.bfloat16),
                      timestep=sigma.to(torch.bfloat16), img_ids=ids.reshape(tokens, 3),
                      txt_ids=torch.zeros(length, 3, device=dev))
        if a.model == "flux-dev":
            kwargs["guidance"] = torch.full((b,), 1.0, device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    total = 0.0
    for step in range(a.warmup + a.steps):
        if step == a.warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=lora):
            out = model(hidden_states=x, return_dict=False, **kwargs)[0]
        loss = (out.float() - target).pow(2).mean()
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        sync()
        if step >= a.warmup:
            total += time.perf_counter() - t0
    s_it = total / a.steps
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak, reserved = (torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()) if cuda else (0, 0)
    print(f"torch psi {psi} s_it {s_it:.4f} images_s {b / s_it:.4f} peak_alloc {peak} peak_reserved {reserved} "
          f"host_peak {host}")


if __name__ == "__main__":
    main()
