"""What the peer LoRA tests (test_*_lora.py) share: ZeroStudio's CLI run, two LoRA steps under ZeRO-3 on a
committed tiny pipeline with a quickstart config, and that checkpoint exported in LoRA layouts (fp32) and
merged into full weights — what each test then loads with the pinned diffusers."""
import os
import subprocess


def run(args):
    """(exit code, stdout and stderr together) of one CLI command."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def train_and_export(test, cli, root, quickstart, fixture, tmp, formats, merged=(("diffusers", "merged"),), sets=()):
    """Trains 2 LoRA steps (rank 4, alpha 2, stage 3) of configs/`quickstart` on `fixture`, with the
    extra `sets`, and exports the step-2 checkpoint: each of `formats` to `tmp`/<format>.safetensors,
    each (format, name) of `merged` with --merge to `tmp`/name. Returns ({format: file}, {format: path});
    a failing command fails `test` with its output."""
    out = os.path.join(tmp, "run")
    args = [cli, "train", os.path.join(root, "configs", quickstart), "--run-dir", out, "--set", "model.path=" + fixture,
            "--set", "training.method=lora", "--set", "lora.rank=4", "--set", "lora.alpha=2", "--set", "zero.stage=3",
            "--set", "optimizer.lr=0.01", "--set", "data.generate_count=16", "--set", "training.batch_size=4",
            "--set", "training.max_steps=2", "--set", "sampling.every_n_steps=0", "--set", "checkpointing.every_n_steps=2"]
    for s in sets:
        args += ["--set", s]
    rc, log = run(args)
    test.assertEqual(rc, 0, log)
    ckpt = os.path.join(out, "checkpoints", "step_2")
    files = {f: os.path.join(tmp, f + ".safetensors") for f in formats}
    merges = {f: os.path.join(tmp, name) for f, name in merged}
    for extra, dest in [(["--format", f, "--dtype", "fp32"], path) for f, path in files.items()] + \
                       [(["--format", f, "--merge"], path) for f, path in merges.items()]:
        rc, log = run([cli, "export", ckpt, "-o", dest] + extra)
        test.assertEqual(rc, 0, log)
    return files, merges
