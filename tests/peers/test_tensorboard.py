#!/usr/bin/env python3
"""TensorBoard reads our event files (make test-torch2; the pinned tensorboard of
tests/peers/requirements.txt, no TensorFlow).

A short quickstart run writes tensorboard/ live; TensorBoard's own EventAccumulator
(tensorboard/backend/event_processing/event_accumulator.py) loads it and must find every scalar
the trainer logs, at the logged steps with the events' values, the sample grid as an image whose
PNG decodes to the size the summary states, and the resolved config as text; and TensorBoard's
reader must log no truncated record, CRC failure or out-of-order step on the way (its loader
swallows a bad record at DEBUG level and stops reading, so every level is captured).

Usage: test_tensorboard.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import unittest

from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

CLI, ROOT = None, None


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


class TensorBoardReadsOurEvents(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.run_dir = os.path.join(cls.tmp.name, "run")
        args = [CLI, "train", os.path.join(ROOT, "configs", "quickstart.yaml"), "--run-dir", cls.run_dir,
                "--set", "data.generate_count=32", "--set", "training.batch_size=4", "--set", "training.max_steps=4",
                "--set", "logging.every_n_steps=2", "--set", "sampling.every_n_steps=2", "--set", "sampling.steps=2",
                "--set", "checkpointing.every_n_steps=0"]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if p.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout}")
        tb = os.path.join(cls.run_dir, "tensorboard")
        files = [f for f in os.listdir(tb) if ".tfevents." in f]
        if len(files) != 1:
            raise AssertionError(f"{tb}: expected one event file, found {files}")
        cls.event_file = os.path.join(tb, files[0])
        cls.log = Captured()
        logger = logging.getLogger("tensorboard")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(cls.log)
        try:
            cls.acc = EventAccumulator(tb, size_guidance={"scalars": 0, "images": 0, "tensors": 0})
            cls.acc.Reload()
            cls.records = list(EventFileLoader(cls.event_file).Load())
        finally:
            logger.removeHandler(cls.log)
        with open(os.path.join(cls.run_dir, "events.jsonl")) as f:
            cls.events = [json.loads(line) for line in f if line.strip()]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_no_data_loss(self):
        bad = [m for m in self.log.records
               if any(w in m.lower() for w in ("truncated", "crc", "data loss", "out of order", "purg", "corrupt"))]
        self.assertEqual(bad, [], "TensorBoard's reader complained")
        # Every record was read: the file version, the config text, 2 logging steps, 2 sample grids at least.
        self.assertGreaterEqual(len(self.records), 6)
        self.assertEqual(self.records[0].file_version, "brain.Event:2")

    def test_scalars_are_the_events_values(self):
        tags = set(self.acc.Tags()["scalars"])
        for tag in ("train/loss", "train/loss_smoothed", "train/lr", "train/grad_norm", "train/samples_per_s",
                    "train/s_per_step", "memory/rank0/rss_bytes"):
            self.assertIn(tag, tags)
            self.assertEqual([s.step for s in self.acc.Scalars(tag)], [2, 4], tag)
        metrics = [e for e in self.events if e["type"] == "metrics"]
        self.assertEqual([e["step"] for e in metrics], [2, 4])
        for name in ("loss", "loss_smoothed", "lr", "grad_norm"):
            got = [s.value for s in self.acc.Scalars("train/" + name)]
            want = [float(e[name]) for e in metrics]
            for g, w in zip(got, want):  # stored as float32
                self.assertAlmostEqual(g, w, delta=abs(w) * 1e-6 + 1e-12, msg=name)
        self.assertNotIn("train/loss_scale", tags)  # fp32: no loss scaling

    def test_sample_grid_is_an_image(self):
        self.assertIn("samples", self.acc.Tags()["images"])
        images = self.acc.Images("samples")
        self.assertEqual([i.step for i in images], [2, 4])
        for i in images:
            png = Image.open(io.BytesIO(i.encoded_image_string))
            png.load()  # decodes every row
            self.assertEqual(png.format, "PNG")
            self.assertEqual(png.size, (i.width, i.height))
            with open(os.path.join(self.run_dir, "samples", f"step_{i.step}", "grid.png"), "rb") as f:
                self.assertEqual(f.read(), i.encoded_image_string)

    def test_config_is_text(self):
        self.assertIn("config", self.acc.Tags()["tensors"])
        (event,) = self.acc.Tensors("config")
        text = event.tensor_proto.string_val[0].decode()
        self.assertIn("max_steps: 4", text)
        meta = self.acc.SummaryMetadata("config")
        self.assertEqual(meta.plugin_data.plugin_name, "text")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
