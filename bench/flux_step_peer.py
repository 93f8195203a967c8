#!/usr/bin/env python3
"""The training step of quickstart-flux's architecture in the pinned PyTorch 2.x + diffusers + transformers
(tests/peers/requirements.txt), on the CPU: the baseline bench_quickstart_quality --peer compares
ZeroStudio's step time with.

The same model as ZeroStudio's flux-tiny preset (models/flux/flux_model.cpp build_tiny): diffusers'
FluxTransformer2DModel (2 double- and 4 single-stream blocks, 4 heads × 16, RoPE axes [4, 6, 6], 12
input channels: 3 pixel channels packed 2×2, no guidance embedding) and transformers' CLIPTextModel (2
layers, 64 wide, 4 heads, 128 inner, its vocabulary's size) trained together in full; the same step: a
batch of 32 16-px images packed into 8 × 8 tokens, σ per sample, x_σ = (1 − σ)·x0 + σ·ε, the
transformer's velocity against ε − x0 (mean squared error), backward, AdamW (torch.optim, fused
where PyTorch offers it on the CPU). Prints one line: `peer_step_s S` (the median of the timed steps).

Usage: flux_step_peer.py [--steps N] [--warmup N] [--threads N] [--vocab N]
"""
import torch
from diffusers import FluxTransformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel

from step_peer import options, time_steps


def main():
    args = options(__doc__)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=12, out_channels=12, num_layers=2, num_single_layers=4,
                                         attention_head_dim=16, num_attention_heads=4, joint_attention_dim=64,
                                         pooled_projection_dim=64, guidance_embeds=False, axes_dims_rope=[4, 6, 6])
    text = CLIPTextModel(CLIPTextConfig(vocab_size=args.vocab, hidden_size=64, intermediate_size=128,
                                        num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=12,
                                        eos_token_id=1))
    b, tokens, length = 32, 8 * 8, 12
    img_ids = torch.zeros(8, 8, 3)
    img_ids[..., 1] += torch.arange(8)[:, None]
    img_ids[..., 2] += torch.arange(8)[None, :]
    img_ids = img_ids.reshape(tokens, 3)
    txt_ids = torch.zeros(length, 3)

    def batch():
        x0 = torch.rand(b, tokens, 12) * 2 - 1
        return x0, torch.randint(0, args.vocab, (b, length)), torch.randn_like(x0), torch.sigmoid(torch.randn(b))

    def loss_of(x0, ids, noise, sigma):
        out = text(ids)
        x = (1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise
        v = transformer(hidden_states=x, encoder_hidden_states=out.last_hidden_state, pooled_projections=out.pooler_output,
                        timestep=sigma, img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
        return torch.nn.functional.mse_loss(v.float(), (noise - x0).float())

    time_steps(args, list(transformer.parameters()) + list(text.parameters()), batch, loss_of)


if __name__ == "__main__":
    main()
