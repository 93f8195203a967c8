#!/usr/bin/env python3
"""The committed golden files are what the pinned peers make today (make test-torch2).

Runs every generator tests/fixtures/gen/*.py into a temporary folder with this environment's
pinned packages (tests/peers/requirements.txt) and compares each file it writes, byte for byte,
with the file of the same name committed in tests/fixtures/ (which `make test` reads without
Python). A generator that is not deterministic, a peer version bump that changes a value, or a
golden file edited by hand fails here, naming the file and the first differing line. A generator may
write a folder (a whole model folder): its files are compared one by one, and the committed folder
must hold no others. Each golden file must stay under 2 MB.

Usage: test_fixtures_are_current.py REPOSITORY_ROOT
"""
import difflib
import glob
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = None
MAX_BYTES = 2 * 1024 * 1024


class FixturesAreCurrent(unittest.TestCase):
    def test_every_generator(self):
        gens = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "gen", "*.py")))
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
                    with open(fresh, "rb") as a, open(committed, "rb") as b:
                        new, old = a.read(), b.read()
                    if new != old:
                        diff = ""
                        try:
                            diff = "".join(list(difflib.unified_diff(old.decode().splitlines(True), new.decode().splitlines(True),
                                                                     "committed", "generated now", n=1))[:20])
                        except UnicodeDecodeError:
                            diff = f"binary: {len(old)} bytes committed, {len(new)} generated"
                        self.fail(f"tests/fixtures/{name} differs from what {os.path.relpath(gen, ROOT)} writes now:\n{diff}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ROOT = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
