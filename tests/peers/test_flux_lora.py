#!/usr/bin/env python3
"""diffusers reads our Flux.1 LoRA files (make test-torch2; the pinned diffusers and peft of
tests/peers/requirements.txt).

A LoRA run on the committed tiny Flux folder (tests/fixtures/flux-tiny/, gen/flux_pipeline.py) trains
two steps under ZeRO-3 and exports its adapters as a diffusers/PEFT file (`--format lora-diffusers`)
and merged into a diffusers folder (`--format diffusers --merge`). FluxPipeline.from_pretrained on the
fixture with load_lora_weights(our file) (diffusers' loaders/lora_pipeline.py FluxLoraLoaderMixin) must
give the transformer output the merged folder's transformer gives, for the same inputs: every adapter
name diffusers maps, at the scale we folded into lora_B. The same for the kohya file (`--format
lora-kohya`, sd-scripts' names on BFL's fused layers), read through diffusers' kohya converter
(loaders/lora_conversion_utils.py _convert_kohya_flux_lora_to_diffusers).

Usage: test_flux_lora.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import os
import sys
import tempfile
import unittest

import torch
from diffusers import FluxPipeline, FluxTransformer2DModel
from safetensors.torch import load_file

from lora_exports import train_and_export

CLI, ROOT = None, None


class DiffusersReadsOurFluxLora(unittest.TestCase):
    def check(self, targets, formats):
        """Trains LoRA on `targets` (None: the family's default), exports `formats` and the merged
        folder, and compares each file through load_lora_weights with the merged transformer."""
        torch.manual_seed(0)
        fixture = os.path.join(ROOT, "tests", "fixtures", "flux-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            sets = ["model.max_sequence_length=16"] + (["lora.targets=[" + ",".join(targets) + "]"] if targets else [])
            files, merges = train_and_export(self, CLI, ROOT, "quickstart-flux.yaml", fixture, tmp, formats, sets=sets)
            merged = merges["diffusers"]
            reference = FluxTransformer2DModel.from_pretrained(os.path.join(merged, "transformer"))
            base = FluxTransformer2DModel.from_pretrained(os.path.join(fixture, "transformer"))
            hidden = torch.randn(2, 16, 64)
            context = torch.randn(2, 16, 32)
            pooled = torch.randn(2, 16)
            img_ids = FluxPipeline._prepare_latent_image_ids(2, 4, 4, "cpu", torch.float32)
            txt_ids = torch.zeros(16, 3)
            kwargs = dict(hidden_states=hidden, encoder_hidden_states=context, pooled_projections=pooled,
                          timestep=torch.tensor([0.3, 0.7]), guidance=torch.tensor([1.0, 3.5]), img_ids=img_ids,
                          txt_ids=txt_ids, return_dict=False)
            with torch.no_grad():
                want = reference(**kwargs)[0]
                without = base(**kwargs)[0]
            scale = want.abs().max().item()
            self.assertGreater((want - without).abs().max().item(), 1e-4 * scale, "the adapters changed nothing")
            for name, path in files.items():
                pipe = FluxPipeline.from_pretrained(fixture)
                pipe.load_lora_weights(path)
                with torch.no_grad():
                    with_lora = pipe.transformer(**kwargs)[0]
                diff = (with_lora - want).abs().max().item()
                self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"{name}: load_lora_weights gives {diff} off the merged export")

    def test_peft_file_on_the_default_targets(self):
        self.check(None, ["lora-diffusers"])

    def test_kohya_and_peft_files_on_double_blocks(self):
        # diffusers' kohya converter splits a single block's linear1 at Flux.1's full-size widths
        # ([3072] * 3 + [12288], hard-coded), which the tiny fixture does not have: the kohya file is
        # checked on the double blocks' layers (the fused txt qkv included), which it splits by thirds.
        self.check(["add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "to_out.0", "ff.net.0.proj", "ff.net.2",
                    "ff_context.net.0.proj", "ff_context.net.2"], ["lora-kohya", "lora-diffusers"])

if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
