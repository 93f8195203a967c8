#!/usr/bin/env python3
"""diffusers reads our Z-Image LoRA files and single-file transformer (make test-torch2; the pinned
diffusers and peft of tests/peers/requirements.txt).

A LoRA run on the committed tiny Z-Image folder (tests/fixtures/z-image-tiny/, gen/z_image_pipeline.py)
trains two steps under ZeRO-3 and exports its adapters in the three layouts (`--format lora-diffusers`,
`lora-musubi`, `lora-aitoolkit`) and merged into a diffusers folder (`--format diffusers --merge`).
ZImagePipeline.from_pretrained on the fixture with load_lora_weights(our file) (diffusers'
loaders/lora_pipeline.py ZImageLoraLoaderMixin, which reads musubi-tuner's "lora_unet_" and ai-toolkit's
"diffusion_model." layouts through loaders/lora_conversion_utils.py
_convert_non_diffusers_z_image_lora_to_diffusers) must give the transformer output the merged folder's
transformer gives, for the same inputs. And `--format single-file` (ComfyUI's layout) read by
ZImageTransformer2DModel.from_single_file (loaders/single_file_utils.py
convert_z_image_transformer_checkpoint_to_diffusers) holds the merged folder's every tensor.

Usage: test_z_image_lora.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import os
import sys
import tempfile
import unittest

import torch
from diffusers import ZImagePipeline, ZImageTransformer2DModel

from lora_exports import train_and_export

CLI, ROOT = None, None
FORMATS = ["lora-diffusers", "lora-musubi", "lora-aitoolkit"]


class DiffusersReadsOurZImageLora(unittest.TestCase):
    def test_every_layout_loads_to_the_merged_model(self):
        torch.manual_seed(0)
        fixture = os.path.join(ROOT, "tests", "fixtures", "z-image-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            files, merges = train_and_export(self, CLI, ROOT, "quickstart-z-image.yaml", fixture, tmp, FORMATS,
                                             [("diffusers", "merged"), ("single-file", "z_image_tiny.safetensors")],
                                             ["data.resolution=32"])
            merged, single = merges["diffusers"], merges["single-file"]
            reference = ZImageTransformer2DModel.from_pretrained(os.path.join(merged, "transformer"))
            from_file = ZImageTransformer2DModel.from_single_file(single, config=fixture, subfolder="transformer",
                                                                  local_files_only=True)
            want_state, got_state = reference.state_dict(), from_file.state_dict()
            self.assertEqual(sorted(got_state), sorted(want_state))
            for name, t in want_state.items():
                self.assertTrue(torch.equal(got_state[name], t), f"single-file: {name} differs from the merged folder's")
            base = ZImageTransformer2DModel.from_pretrained(os.path.join(fixture, "transformer"))
            c = base.config
            # Two images of 4x4 latents and captions of 5 and 3 tokens (ZImageTransformer2DModel takes lists).
            x = [torch.randn(c.in_channels, 1, 4, 4) for _ in range(2)]
            caps = [torch.randn(5, c.cap_feat_dim), torch.randn(3, c.cap_feat_dim)]
            t = torch.tensor([0.3, 0.7])

            def forward(model):
                with torch.no_grad():
                    return torch.stack(model(x, t, caps, return_dict=False)[0])

            want, without = forward(reference), forward(base)
            scale = want.abs().max().item()
            self.assertGreater((want - without).abs().max().item(), 1e-4 * scale, "the adapters changed nothing")
            for name, path in files.items():
                pipe = ZImagePipeline.from_pretrained(fixture)
                pipe.load_lora_weights(path)
                diff = (forward(pipe.transformer) - want).abs().max().item()
                self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"{name}: load_lora_weights gives {diff} off the merged export")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
