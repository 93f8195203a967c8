#!/usr/bin/env python3
"""diffusers reads our FLUX.2 LoRA files and single-file transformer (make test-torch2; the pinned
diffusers and peft of tests/peers/requirements.txt).

A LoRA run on the committed tiny FLUX.2 [klein] folder (tests/fixtures/flux2-klein-tiny/,
gen/flux2_pipeline.py) trains two steps under ZeRO-3 and exports its adapters in diffusers' layout
(`--format lora-diffusers`), in ai-toolkit's on BFL's module names (`--format lora-aitoolkit`: q/k/v
fused) and merged into a diffusers folder (`--format diffusers --merge`). Flux2KleinPipeline.from_pretrained
on the fixture with load_lora_weights(our file) (diffusers' loaders/lora_pipeline.py
Flux2LoraLoaderMixin, which reads the "diffusion_model." layout through lora_conversion_utils.py
_convert_non_diffusers_flux2_lora_to_diffusers) must give, for each file, the transformer output the merged folder's
transformer gives, for the same inputs — through the double blocks' attention and the single blocks'
fused projections alike. And `--format single-file --merge` (BFL's layout) read by
Flux2Transformer2DModel.from_single_file (loaders/single_file_utils.py
convert_flux2_transformer_checkpoint_to_diffusers) holds the merged folder's every tensor.

Usage: test_flux2_lora.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import os
import sys
import tempfile
import unittest

import torch
from diffusers import Flux2KleinPipeline, Flux2Pipeline, Flux2Transformer2DModel

from lora_exports import train_and_export

CLI, ROOT = None, None


class DiffusersReadsOurFlux2Lora(unittest.TestCase):
    def test_lora_loads_to_the_merged_model(self):
        torch.manual_seed(0)
        fixture = os.path.join(ROOT, "tests", "fixtures", "flux2-klein-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            files, merges = train_and_export(self, CLI, ROOT, "quickstart-flux2.yaml", fixture, tmp,
                                             ["lora-diffusers", "lora-aitoolkit"],
                                             [("diffusers", "merged"), ("single-file", "flux-2-klein-tiny.safetensors")],
                                             ["data.resolution=32", "model.max_sequence_length=24"])
            merged, single = merges["diffusers"], merges["single-file"]
            reference = Flux2Transformer2DModel.from_pretrained(os.path.join(merged, "transformer"))
            from_file = Flux2Transformer2DModel.from_single_file(single, config=fixture, subfolder="transformer",
                                                                 local_files_only=True)
            want_state, got_state = reference.state_dict(), from_file.state_dict()
            self.assertEqual(sorted(got_state), sorted(want_state))
            for name, t in want_state.items():
                self.assertTrue(torch.equal(got_state[name], t.to(got_state[name].dtype)),
                                f"single-file: {name} differs from the merged folder's")
            base = Flux2Transformer2DModel.from_pretrained(os.path.join(fixture, "transformer"))
            c = base.config
            # Two 4x4 grids of patchified latents and 6 text rows, as the pipeline arranges them.
            latents = torch.randn(2, c.in_channels, 4, 4)
            hidden = Flux2Pipeline._pack_latents(latents)
            img_ids = Flux2Pipeline._prepare_latent_ids(latents)
            context = torch.randn(2, 6, c.joint_attention_dim)
            txt_ids = Flux2Pipeline._prepare_text_ids(context)
            t = torch.tensor([0.3, 0.7])

            def forward(model):
                with torch.no_grad():
                    return model(hidden_states=hidden, encoder_hidden_states=context, timestep=t, img_ids=img_ids,
                                 txt_ids=txt_ids, return_dict=False)[0]

            want, without = forward(reference), forward(base)
            scale = want.abs().max().item()
            self.assertGreater((want - without).abs().max().item(), 1e-4 * scale, "the adapters changed nothing")
            for name, path in files.items():
                pipe = Flux2KleinPipeline.from_pretrained(fixture)
                pipe.load_lora_weights(path)
                diff = (forward(pipe.transformer) - want).abs().max().item()
                self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"{name}: load_lora_weights gives {diff} off the merged export")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
