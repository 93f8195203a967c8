#!/usr/bin/env python3
"""The training step of quickstart-flux2's architecture in the pinned PyTorch 2.x + diffusers + transformers
(tests/peers/requirements.txt), on the CPU: the baseline bench_quickstart_quality --peer compares
ZeroStudio's step time with for configs/quickstart-flux2.yaml.

The same model as ZeroStudio's flux2-tiny preset (models/flux2/flux2_model.cpp build_tiny): diffusers'
Flux2Transformer2DModel (2 double-stream and 4 single-stream blocks, 4 heads of 16, mlp ratio 3, RoPE
axes (4, 4, 4, 4) at θ 2000, 64 timestep channels, no guidance embedding; 12 input channels: 3 pixel
channels 2×2-patchified) and transformers' CLIPTextModel (2 layers, 64 wide, 4 heads, 128 inner, its
vocabulary's size) trained together in full; the same step: a batch of 32 16-px images (8 × 8 tokens),
12 caption tokens, σ per sample, x_σ = (1 − σ)·x0 + σ·ε, the transformer's velocity at σ with
Flux2Pipeline's ids against ε − x0 (mean squared error), backward, AdamW (torch.optim). Prints one line:
`peer_step_s S` (the median of the timed steps).

Usage: flux2_step_peer.py [--steps N] [--warmup N] [--threads N] [--vocab N]
"""
import torch
from diffusers import Flux2Pipeline, Flux2Transformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel

from step_peer import options, time_steps


def main():
    args = options(__doc__)
    transformer = Flux2Transformer2DModel(patch_size=1, in_channels=12, out_channels=12, num_layers=2, num_single_layers=4,
                                          attention_head_dim=16, num_attention_heads=4, joint_attention_dim=64,
                                          timestep_guidance_channels=64, mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4),
                                          rope_theta=2000, eps=1e-6, guidance_embeds=False)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=args.vocab, hidden_size=64, intermediate_size=128,
                                        num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=12,
                                        eos_token_id=1))
    b, length = 32, 12
    img_ids = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, 12, 8, 8))
    txt_ids = Flux2Pipeline._prepare_text_ids(torch.zeros(1, length, 64))

    def batch():
        x0 = Flux2Pipeline._patchify_latents(torch.rand(b, 3, 16, 16) * 2 - 1)
        return x0, torch.randint(0, args.vocab, (b, length)), torch.randn_like(x0), torch.sigmoid(torch.randn(b))

    def loss_of(x0, ids, noise, sigma):
        caps = text(ids).last_hidden_state
        x = (1 - sigma[:, None, None, None]) * x0 + sigma[:, None, None, None] * noise
        out = transformer(hidden_states=Flux2Pipeline._pack_latents(x), encoder_hidden_states=caps, timestep=sigma,
                          img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
        v = out.permute(0, 2, 1).reshape(x.shape)
        return torch.nn.functional.mse_loss(v.float(), (noise - x0).float())

    time_steps(args, list(transformer.parameters()) + list(text.parameters()), batch, loss_of)


if __name__ == "__main__":
    main()
