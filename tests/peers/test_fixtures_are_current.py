#!/usr/bin/env python3
"""The committed golden files are what the pinned peers make today (make test-torch2).

Runs every generator tests/fixtures/gen/*.py (not the helpers, whose names start with "_") into a
temporary folder with this environment's pinned packages (tests/peers/requirements.txt) and
compares each file it writes with the file of the same name committed in tests/fixtures/ (which
`make test` reads without Python). A generator that is not deterministic, a peer version bump that
changes a value, or a golden file edited by hand fails here, naming the file and what differs. A
generator may write a folder (a whole model folder): its files are compared one by one, and the
committed folder must hold no others. Each golden file must stay under 2 MB.

How files are compared. Float outputs are the same only on the CPU that computed them: another
CPU's kernels (SIMD width, reduction order) move their last bits (an AMD EPYC host made 7 files
differ by up to 3.8e-6 from what an Intel host had committed). So:
- safetensors files: the same tensor names, dtypes and shapes; integer and bool tensors equal;
  float tensors within the file's TOLERANCE below, relative to the tensor's size:
  max|generated - committed| <= tolerance * max(1, max|committed|), the form the C++ tests use
  with 1e-5 (1e-4 on gradients) against the same files; the metadata equal once the CPU that made
  the file (gen/_provenance.py: "cpu [MODEL] ATen LEVEL") is masked.
- JSON files: the same structure, keys, strings (CPU masked), integers and booleans; floats within
  the file's tolerance times max(1, the largest float in the file).
- anything else (SentencePiece models, merges.txt): byte for byte.

Usage: test_fixtures_are_current.py REPOSITORY_ROOT
"""
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = None
MAX_BYTES = 2 * 1024 * 1024

# What _provenance.cpu() writes (kept in step with gen/_provenance.py's CPU_PATTERN).
CPU_PATTERN = re.compile(r"cpu \[[^\]]*\] ATen \w+")

# Float tolerance per golden file, in the C++ tests' form: max|generated - committed| <= tolerance *
# max(1, max|committed|) per tensor; 0: equal. Each is at most half of what the C++ test reading
# the file allows (1e-5 on outputs, 1e-4 on gradients), and above what two CPUs were seen to give:
# an AMD EPYC (ATen AVX2) against the Intel host that committed the files before ("seen" below).
TOLERANCE = {
    "adafactor.safetensors": 0,            # float64, elementwise: equal on both
    "adamw8bit.safetensors": 0,
    "base_quant.safetensors": 0,           # casts, elementwise products, bitsandbytes' CPU 4-bit
    "fp8_weights.safetensors": 0,          # every fp8 code
    "bnb_blockwise.safetensors": 0,
    "ddim_scheduler.json": 0,
    "deepspeed_estimator.json": 0,         # integers
    "flow_match_scheduler.json": 0,
    "flux_bfl.safetensors": 0,             # a re-arrangement of seeded weights
    "flux_t5_tokens.json": 0,              # token ids
    "flux_t5.safetensors": 2.5e-6,         # seen: equal; tst_flux 1e-5
    "flux_transformer.safetensors": 2.5e-6,  # seen 7.3e-7 (a gradient); tst_flux 1e-5 outputs, 1e-4 gradients
    "flux_vae.safetensors": 5e-6,          # seen 1.6e-6 (decoded); tst_flux 1e-5 x 2..4
    "flux_pipeline.safetensors": 2.5e-6,   # seen 6.5e-7 (decoded); tst_flux 1e-5
    "qwen_transformer.safetensors": 2.5e-6,  # seen 8.9e-7 (a gradient); tst_qwen_transformer 1e-5 / 1e-4
    "qwen_vae.safetensors": 5e-6,          # seen 3.3e-6 (decoded); tst_qwen_vae 1e-5
    "qwen_text.safetensors": 2.5e-6,       # seen 7.1e-7; tst_qwen_text 1e-5
    "qwen_text_tokens.json": 0,
    "qwen_image_pipeline.safetensors": 2.5e-6,  # seen 8.8e-7; tst_qwen_image 1e-5
    "qwen_lora_alpha.safetensors": 0,      # seeded adapters
    "qwen_lora_alpha_deltas.safetensors": 2.5e-6,  # rank-4 products; tst_qwen_image 1e-5
    "flux2_transformer.safetensors": 2.5e-6,  # made on the AMD EPYC; tst_flux2 1e-5 / 1e-4
    "flux2_vae.safetensors": 2.5e-6,       # made on the AMD EPYC; tst_flux2 1e-5
    "flux2_vae_config": 0,
    "flux2_text.safetensors": 2.5e-6,      # made on the AMD EPYC; tst_flux2 1e-5
    "flux2_text.json": 0,                  # chat texts and token ids
    "flux2_text_encoder": 0,
    "mistral_text.safetensors": 2.5e-6,    # made on the AMD EPYC; tst_flux2 1e-5
    "mistral_text_encoder": 0,
    "z_image_transformer.safetensors": 2.5e-6,  # made on the AMD EPYC; tst_z_image_transformer 1e-5 / 1e-4
    "z_image_text.safetensors": 2.5e-6,    # made on the AMD EPYC; tst_z_image_text 1e-5
    "z_image_text.json": 0,                # chat texts and token ids
    "z_image_pipeline.safetensors": 2.5e-6,  # made on the AMD EPYC; tst_z_image_e2e 1e-5
    "flux2_pipeline.safetensors": 2.5e-6,  # made on the AMD EPYC; tst_flux2_e2e 1e-5
    # Model folders: seeded weights as save_pretrained writes them, configs and tokenizers.
    "flux-tiny": 0,
    "qwen-image-tiny": 0,
    "qwen_text_encoder": 0,
    "qwen_text_tokenizer": 0,
    "z_image_text_encoder": 0,
    "z_image_text_tokenizer": 0,
    "z-image-tiny": 0,
    "flux2-klein-tiny": 0,
}


def tolerance_of(name):
    """The tolerance of a file, or of the folder (its first path part) it lies in."""
    key = name if name in TOLERANCE else name.split(os.sep)[0]
    if key not in TOLERANCE:
        raise AssertionError(f"tests/fixtures/{name}: no float tolerance stated in TOLERANCE "
                             f"(tests/peers/test_fixtures_are_current.py); add one")
    return TOLERANCE[key]


def mask_cpu(text):
    return CPU_PATTERN.sub("cpu [*]", text)


def compare_safetensors(fresh, committed, tol):
    """'' when the files agree as the module docstring says, else what differs."""
    import torch
    from safetensors import safe_open

    with safe_open(fresh, "pt") as a, safe_open(committed, "pt") as b:
        meta_a = {k: mask_cpu(v) for k, v in (a.metadata() or {}).items()}
        meta_b = {k: mask_cpu(v) for k, v in (b.metadata() or {}).items()}
        if meta_a != meta_b:
            return f"metadata differs (CPU masked):\n  committed {meta_b}\n  generated {meta_a}"
        names_a, names_b = sorted(a.keys()), sorted(b.keys())
        if names_a != names_b:
            return (f"tensor names differ: only committed {sorted(set(names_b) - set(names_a))[:5]}, "
                    f"only generated {sorted(set(names_a) - set(names_b))[:5]}")
        worst = (0.0, "")
        for name in names_a:
            x, y = a.get_tensor(name), b.get_tensor(name)
            if x.dtype != y.dtype or x.shape != y.shape:
                return f"{name}: {y.dtype} {list(y.shape)} committed, {x.dtype} {list(x.shape)} generated"
            if not x.is_floating_point():
                if not torch.equal(x, y):
                    return f"{name}: integer values differ"
                continue
            x, y = x.double(), y.double()
            if not torch.equal(torch.isnan(x), torch.isnan(y)):
                return f"{name}: NaN at other places"
            finite = ~torch.isnan(y)
            if x.numel() == 0 or torch.equal(x[finite], y[finite]):
                continue
            scale = max(y[finite].abs().max().item(), 1.0)
            diff = (x[finite] - y[finite]).abs().max().item()
            worst = max(worst, (diff / scale, name))
            if not diff <= tol * scale:
                return (f"{name}: differs by {diff:.3g} ({diff / scale:.3g} of max(1, its largest value {scale:.3g})); "
                        f"this file's tolerance is {tol:g}")
        if worst[1]:
            print(f"  {os.path.basename(committed)}: floats within tolerance, largest {worst[0]:.3g} of the scale "
                  f"({worst[1]})", file=sys.stderr)
    return ""


def json_floats(v, out):
    if isinstance(v, float):
        out.append(abs(v))
    elif isinstance(v, dict):
        for x in v.values():
            json_floats(x, out)
    elif isinstance(v, list):
        for x in v:
            json_floats(x, out)
    return out


def compare_json_values(a, b, atol, path="$"):
    """'' or the first place where `a` (generated) and `b` (committed) differ."""
    if isinstance(b, float) and isinstance(a, float):
        if math.isnan(a) and math.isnan(b):
            return ""
        return "" if abs(a - b) <= atol else f"{path}: {b!r} committed, {a!r} generated (tolerance {atol:.3g})"
    if type(a) is not type(b):
        return f"{path}: a {type(b).__name__} committed, a {type(a).__name__} generated"
    if isinstance(b, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(b.keys())[:8]} committed, {list(a.keys())[:8]} generated"
        for k in b:
            d = compare_json_values(a[k], b[k], atol, f"{path}.{k}")
            if d:
                return d
        return ""
    if isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(b)} items committed, {len(a)} generated"
        for i, (x, y) in enumerate(zip(a, b)):
            d = compare_json_values(x, y, atol, f"{path}[{i}]")
            if d:
                return d
        return ""
    if isinstance(b, str):
        return "" if mask_cpu(a) == mask_cpu(b) else f"{path}: {b!r} committed, {a!r} generated"
    return "" if a == b else f"{path}: {b!r} committed, {a!r} generated"


def compare_json(fresh, committed, tol):
    with open(fresh, encoding="utf-8") as f:
        a = json.load(f)
    with open(committed, encoding="utf-8") as f:
        b = json.load(f)
    return compare_json_values(a, b, tol * max(json_floats(b, []) + [1.0]))


def compare(fresh, committed, name):
    """'' when a fresh file agrees with the committed one, else what differs."""
    with open(fresh, "rb") as f, open(committed, "rb") as g:
        if f.read() == g.read():
            return ""
    tol = tolerance_of(name)
    if name.endswith(".safetensors"):
        return compare_safetensors(fresh, committed, tol)
    if name.endswith(".json"):
        return compare_json(fresh, committed, tol)
    return f"bytes differ ({os.path.getsize(committed)} committed, {os.path.getsize(fresh)} generated)"


class ComparisonRules(unittest.TestCase):
    """The rules above on made-up files: what another CPU may change passes, anything else fails."""

    def write(self, folder, name, tensors, about):
        from safetensors.torch import save_file
        path = os.path.join(folder, name)
        save_file(tensors, path, metadata={"about": about})
        return path

    def test_safetensors(self):
        import torch
        with tempfile.TemporaryDirectory() as d:
            base = {"out": torch.linspace(-2, 2, 64), "ids": torch.arange(5)}
            about = "gen/x.py, torch 2.11.0 on cpu [Intel(R) Xeon(R) CPU @ 2.20GHz] ATen AVX512"
            committed = self.write(d, "c.safetensors", base, about)
            other_cpu = dict(base, out=base["out"] + 3e-6)  # 1.5e-6 of the scale 2
            fresh = self.write(d, "a.safetensors", other_cpu, "gen/x.py, torch 2.11.0 on cpu [AMD EPYC] ATen AVX2")
            self.assertEqual(compare_safetensors(fresh, committed, 2e-6), "")
            self.assertIn("differs by", compare_safetensors(fresh, committed, 1e-6))
            too_far = self.write(d, "b.safetensors", dict(base, out=base["out"] + 1e-5), about)
            self.assertIn("out: differs by 1e-05", compare_safetensors(too_far, committed, 2e-6))
            ids = self.write(d, "i.safetensors", dict(base, ids=torch.arange(5) + 1), about)
            self.assertIn("ids: integer values differ", compare_safetensors(ids, committed, 1.0))
            version = self.write(d, "v.safetensors", base, about.replace("2.11.0", "2.12.0"))
            self.assertIn("metadata differs", compare_safetensors(version, committed, 1.0))
            shape = self.write(d, "s.safetensors", dict(base, out=base["out"][:63]), about)
            self.assertIn("out: torch.float32 [64] committed", compare_safetensors(shape, committed, 1.0))

    def test_json(self):
        b = {"source": "torch 2.11.0 on cpu [Intel] ATen AVX512", "steps": [1, 2], "x": [0.5, -2.0]}
        a = {"source": "torch 2.11.0 on cpu [AMD EPYC] ATen AVX2", "steps": [1, 2], "x": [0.5 + 1e-7, -2.0]}
        self.assertEqual(compare_json_values(a, b, 2e-6 * 2.0), "")
        self.assertIn("$.x[0]", compare_json_values(dict(a, x=[0.6, -2.0]), b, 4e-6))
        self.assertIn("$.steps[1]", compare_json_values(dict(a, steps=[1, 3]), b, 1.0))
        self.assertIn("$.steps: a list committed, a float generated", compare_json_values(dict(a, steps=1.0), b, 1.0))
        self.assertIn("$.source", compare_json_values(dict(a, source="torch 2.12.0 on cpu [AMD] ATen AVX2"), b, 1.0))
        self.assertIn("keys", compare_json_values({"x": b["x"], "source": b["source"], "steps": b["steps"]}, b, 1.0))


class FixturesAreCurrent(unittest.TestCase):
    def test_every_generator(self):
        gens = sorted(g for g in glob.glob(os.path.join(ROOT, "tests", "fixtures", "gen", "*.py"))
                      if not os.path.basename(g).startswith("_"))
        self.assertTrue(gens, "no generators in tests/fixtures/gen")
        committed_dir = os.path.join(ROOT, "tests", "fixtures")
        for gen in gens:
            with self.subTest(os.path.basename(gen)), tempfile.TemporaryDirectory() as out:
                p = subprocess.run([sys.executable, gen, "--out", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stdout)
                # Files, and the files of folders (a whole model folder such as flux-tiny/), by relative path.
                written = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, files in os.walk(out) for f in files)
                self.assertTrue(written, f"{gen} wrote nothing")
                for top in sorted(os.listdir(out)):
                    if os.path.isdir(os.path.join(out, top)):
                        # Nothing committed beside what the generator writes now (a stale shard would be read).
                        committed_files = sorted(os.path.relpath(os.path.join(d, f), committed_dir)
                                                 for d, _, files in os.walk(os.path.join(committed_dir, top)) for f in files)
                        self.assertEqual(committed_files, [w for w in written if w.startswith(top + os.sep)],
                                         f"tests/fixtures/{top}/ holds other files than {os.path.relpath(gen, ROOT)} writes")
                for name in written:
                    fresh = os.path.join(out, name)
                    committed = os.path.join(committed_dir, name)
                    self.assertTrue(os.path.exists(committed), f"{name} is not committed in tests/fixtures; "
                                    f"run {os.path.relpath(gen, ROOT)} and commit it")
                    self.assertLessEqual(os.path.getsize(committed), MAX_BYTES, f"{name} is over 2 MB")
                    difference = compare(fresh, committed, name)
                    if difference:
                        self.fail(f"tests/fixtures/{name} differs from what {os.path.relpath(gen, ROOT)} writes now: "
                                  f"{difference}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ROOT = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
