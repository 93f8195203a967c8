#!/usr/bin/env python3
"""`zerostudio estimate --json`'s DeepSpeed figures are DeepSpeed's own (make test-torch2).

For ready configs and presets under stages 2 and 3, several process counts, offload settings and
zero3_init_flag, the figures the CLI prints as `deepspeed_estimator` must equal what the pinned
DeepSpeed's estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/stage_1_and_2.py) and
estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py) return for the
parameter counts the CLI states, to the byte. (tst_estimate checks the same function against
tests/fixtures/deepspeed_estimator.json in `make test`, where no Python runs.)

Usage: test_deepspeed_estimator.py ZEROSTUDIO_CLI REPOSITORY_ROOT
"""
import json
import logging
import os
import subprocess
import sys
import unittest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
logging.disable(logging.WARNING)
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs  # noqa: E402
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs  # noqa: E402

CLI, ROOT = None, None

CASES = [
    # (config, preset or None, processes, stage, optimizer offload, parameter offload, zero3_init_flag);
    # a ready config (preset None) keeps its own stage, offload and zero3_init_flag (None)
    ("quickstart.yaml", "sd15", 8, 2, "none", "none", False),
    ("quickstart.yaml", "sd15", 8, 2, "cpu", "none", False),
    ("quickstart.yaml", "sd15", 1, 2, "cpu", "none", False),
    ("quickstart.yaml", "sdxl", 2, 3, "none", "none", False),
    ("quickstart.yaml", "sdxl", 2, 3, "none", "none", True),
    ("quickstart.yaml", "sdxl", 4, 3, "cpu", "none", True),
    ("quickstart.yaml", "sdxl", 4, 3, "cpu", "cpu", False),
    ("quickstart.yaml", "sd15", 8, 3, "cpu", "cpu", True),
    ("sdxl-finetune-zero2-offload.yaml", None, 1, None, None, None, None),
    ("sdxl-zero3-nvme.yaml", None, 2, None, None, None, None),
    ("sd15-finetune-zero2-offload.yaml", None, 4, None, None, None, None),
    ("quickstart.yaml", "tiny", 2, 3, "none", "none", True),
]


class DeepSpeedFiguresAreDeepSpeeds(unittest.TestCase):
    def test_cases(self):
        for config, preset, n, stage, opt, param, init in CASES:
            sets = ["launch.use_cpu=false"]
            if preset:
                sets += ["precision=bf16", f"model.preset={preset}", f"zero.stage={stage}",
                         f"zero.offload_optimizer.device={opt}", f"zero.offload_param.device={param}",
                         f"zero.zero3_init_flag={'true' if init else 'false'}"]
            args = [CLI, "estimate", os.path.join(ROOT, "configs", config), "--num_processes", str(n), "--json"]
            for s in sets:
                args += ["--set", s]
            with self.subTest(" ".join(args[2:])):
                p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                e = json.loads(p.stdout)
                ours = e["deepspeed_estimator"]
                total, largest = ours["total_parameters"], ours["largest_layer_parameters"]
                self.assertEqual(total, e["parameters"])
                if not preset:  # the ready config's own setting
                    stage, opt, param = e["stage"], e["offload_optimizer"], e["offload_param"]
                    with open(os.path.join(ROOT, "configs", config)) as f:
                        init = "zero3_init_flag: true" in f.read()
                self.assertIn(stage, (2, 3))
                if stage == 2:
                    cpu, gpu = estimate_zero2_model_states_mem_needs(
                        total_params=total, num_gpus_per_node=n, num_nodes=1, cpu_offload=opt != "none")
                else:
                    cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
                        total_params=total, largest_layer_params=largest, num_gpus_per_node=n, num_nodes=1,
                        cpu_offload=opt != "none", cpu_offload_params=param != "none", zero_init=init)
                self.assertEqual((ours["gpu"], ours["cpu_per_machine"]), (gpu, cpu))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    CLI, ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
