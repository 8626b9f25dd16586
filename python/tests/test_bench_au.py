"""bench/au.py (the accelerator-utilization benchmark) still runs: its smoke mode builds a tiny
local dataset and runs every shape at R = 1 and 2 (ranks, barrier, DataLoader, report); a few
seconds. The benchmark itself (bench/run.sh --au) never runs in the test suite."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AU = os.path.join(HERE, "..", "bench", "au.py")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:  # like the sampler tests: needs PyTorch (python3-torch)
    HAVE_TORCH = False


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch (python3-torch)")
class BenchAuSmokeTest(unittest.TestCase):
    def test_smoke(self):
        r = subprocess.run([sys.executable, AU, "smoke"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("au smoke: ok", r.stdout)
        for shape in ("unet3d", "resnet50", "cosmoflow"):
            for ranks in (1, 2):
                self.assertRegex(r.stdout, r"au: %s local R=%d: AU \d+\.\d%%" % (shape, ranks))


if __name__ == "__main__":
    unittest.main()
