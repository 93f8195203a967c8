#!/usr/bin/env python3
"""The training step of quickstart-z-image's architecture in the pinned PyTorch 2.x + diffusers + transformers
(tests/peers/requirements.txt), on the CPU: the baseline bench_quickstart_quality --peer compares
ZeroStudio's step time with for configs/quickstart-z-image.yaml.

The same model as ZeroStudio's z-image-tiny preset (models/z_image/z_image_model.cpp build_tiny):
diffusers' ZImageTransformer2DModel (a noise and a context refiner block, 4 main blocks, 64 wide, 4
heads, RoPE axes [4, 6, 6] over [1024, 512, 512], 3 pixel channels in 2×2 patches) and transformers'
CLIPTextModel (2 layers, 64 wide, 4 heads, 128 inner, its vocabulary's size) trained together in full;
the same step: a batch of 32 16-px images (8 × 8 tokens), 12 caption tokens, σ per sample, x_σ = (1 −
σ)·x0 + σ·ε, the velocity −transformer(x_σ, 1 − σ) (ZImagePipeline's arrangement) against ε − x0 (mean
squared error), backward, AdamW (torch.optim). Prints one line: `peer_step_s S` (the median of the timed
steps).

Usage: z_image_step_peer.py [--steps N] [--warmup N] [--threads N] [--vocab N]
"""
import torch
from diffusers import ZImageTransformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel

from step_peer import options, time_steps


def main():
    args = options(__doc__)
    transformer = ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=3, dim=64, n_layers=4,
                                           n_refiner_layers=1, n_heads=4, n_kv_heads=4, cap_feat_dim=64,
                                           axes_dims=[4, 6, 6], axes_lens=[1024, 512, 512])
    text = CLIPTextModel(CLIPTextConfig(vocab_size=args.vocab, hidden_size=64, intermediate_size=128,
                                        num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=12,
                                        eos_token_id=1))
    b, length = 32, 12

    def batch():
        x0 = torch.rand(b, 3, 16, 16) * 2 - 1
        return x0, torch.randint(0, args.vocab, (b, length)), torch.randn_like(x0), torch.sigmoid(torch.randn(b))

    def loss_of(x0, ids, noise, sigma):
        caps = text(ids).last_hidden_state
        x = (1 - sigma[:, None, None, None]) * x0 + sigma[:, None, None, None] * noise
        out = transformer(list(x.unsqueeze(2)), 1 - sigma, list(caps), return_dict=False)[0]
        v = -torch.stack(out).squeeze(2)
        return torch.nn.functional.mse_loss(v.float(), (noise - x0).float())

    time_steps(args, list(transformer.parameters()) + list(text.parameters()), batch, loss_of)


if __name__ == "__main__":
    main()
