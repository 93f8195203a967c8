#!/usr/bin/env python3
"""diffusers reads our Flux.1 LoRA files (make test-torch2; the pinned diffusers and peft of
tests/peers/requirements.txt).

A LoRA run on the committed tiny Flux folder (tests/fixtures/flux-tiny/, gen/flux_pipeline.py) trains
two steps under ZeRO-3 and exports its adapters as a diffusers/PEFT file (`--format lora-diffusers`)
and merged into a diffusers folder (`--format diffusers --merge`). FluxPipeline.from_pretrained on the
fixture with load_lora_weights(our file) (diffusers' loaders/lora_pipeline.py FluxLoraLoaderMixin) must
give the transformer output the merged folder's transformer gives, for the same inputs: every adapter
name diffusers maps, at the scale we folded into lora_B.

Usage: test_flux_lora.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import os
import subprocess
import sys
import tempfile
import unittest

import torch
from diffusers import FluxPipeline, FluxTransformer2DModel
from safetensors.torch import load_file

CLI, ROOT = None, None


class DiffusersReadsOurFluxLora(unittest.TestCase):
    def test_peft_file_equals_merged_export(self):
        torch.manual_seed(0)
        fixture = os.path.join(ROOT, "tests", "fixtures", "flux-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run")
            args = [CLI, "train", os.path.join(ROOT, "configs", "quickstart-flux.yaml"), "--run-dir", run,
                    "--set", "model.path=" + fixture, "--set", "model.max_sequence_length=16",
                    "--set", "training.method=lora", "--set", "lora.rank=4", "--set", "lora.alpha=2",
                    "--set", "zero.stage=3", "--set", "optimizer.lr=0.01", "--set", "data.generate_count=16",
                    "--set", "training.batch_size=4", "--set", "training.max_steps=2",
                    "--set", "sampling.every_n_steps=0", "--set", "checkpointing.every_n_steps=2"]
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout)
            ckpt = os.path.join(run, "checkpoints", "step_2")
            lora = os.path.join(tmp, "lora.safetensors")
            merged = os.path.join(tmp, "merged")
            for extra, out in ((["--format", "lora-diffusers", "--dtype", "fp32"], lora),
                               (["--format", "diffusers", "--merge"], merged)):
                p = subprocess.run([CLI, "export", ckpt, "-o", out] + extra, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stdout)
            names = load_file(lora).keys()
            self.assertTrue(any(".single_transformer_blocks.0." in n for n in names), sorted(names)[:5])

            pipe = FluxPipeline.from_pretrained(fixture)
            pipe.load_lora_weights(lora)
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
                with_lora = pipe.transformer(**kwargs)[0]
                want = reference(**kwargs)[0]
                without = base(**kwargs)[0]
            scale = want.abs().max().item()
            self.assertGreater((want - without).abs().max().item(), 1e-4 * scale, "the adapters changed nothing")
            diff = (with_lora - want).abs().max().item()
            self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"load_lora_weights gives {diff} off the merged export")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
