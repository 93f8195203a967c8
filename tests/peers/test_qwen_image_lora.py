#!/usr/bin/env python3
"""diffusers reads our Qwen-Image LoRA files (make test-torch2; the pinned diffusers and peft of
tests/peers/requirements.txt).

A LoRA run on the committed tiny Qwen-Image folder (tests/fixtures/qwen-image-tiny/, gen/qwen_pipeline.py)
with the seed's twelve targets trains two steps under ZeRO-3 and exports its adapters in the three layouts
(`--format lora-diffusers`, `lora-diffsynth`, `lora-musubi`) and merged into a diffusers folder (`--format
diffusers --merge`). QwenImagePipeline.from_pretrained on the fixture with load_lora_weights(our file)
(diffusers' loaders/lora_pipeline.py QwenImageLoraLoaderMixin, which reads DiffSynth-Studio's and
musubi-tuner's layouts through loaders/lora_conversion_utils.py _convert_non_diffusers_qwen_lora_to_diffusers)
must give the transformer output the merged folder's transformer gives, for the same inputs.

Usage: test_qwen_image_lora.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import os
import sys
import tempfile
import unittest

import torch
from diffusers import QwenImagePipeline, QwenImageTransformer2DModel

from lora_exports import train_and_export

CLI, ROOT = None, None
FORMATS = ["lora-diffusers", "lora-diffsynth", "lora-musubi"]


class DiffusersReadsOurQwenImageLora(unittest.TestCase):
    def test_every_layout_loads_to_the_merged_model(self):
        torch.manual_seed(0)
        fixture = os.path.join(ROOT, "tests", "fixtures", "qwen-image-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            files, merges = train_and_export(self, CLI, ROOT, "quickstart-qwen-image.yaml", fixture, tmp, FORMATS,
                                             sets=["data.resolution=32"])
            merged = merges["diffusers"]
            reference = QwenImageTransformer2DModel.from_pretrained(os.path.join(merged, "transformer"))
            base = QwenImageTransformer2DModel.from_pretrained(os.path.join(fixture, "transformer"))
            c = base.config
            kwargs = dict(hidden_states=torch.randn(2, 4, c.in_channels),
                          encoder_hidden_states=torch.randn(2, 5, c.joint_attention_dim),
                          encoder_hidden_states_mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
                          timestep=torch.tensor([0.3, 0.7]), img_shapes=[[(1, 2, 2)]] * 2, return_dict=False)
            with torch.no_grad():
                want = reference(**kwargs)[0]
                without = base(**kwargs)[0]
            scale = want.abs().max().item()
            self.assertGreater((want - without).abs().max().item(), 1e-4 * scale, "the adapters changed nothing")
            for name, path in files.items():
                pipe = QwenImagePipeline.from_pretrained(fixture)
                pipe.load_lora_weights(path)
                with torch.no_grad():
                    with_lora = pipe.transformer(**kwargs)[0]
                diff = (with_lora - want).abs().max().item()
                self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"{name}: load_lora_weights gives {diff} off the merged export")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
