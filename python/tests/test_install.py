"""The package installs offline with Debian's pip and setuptools (no PyPI) and imports from there."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class InstallTest(unittest.TestCase):
    def test_pip_install_offline(self):
        with tempfile.TemporaryDirectory() as tmp:
            # build from a copy: an in-tree build leaves build/ and *.egg-info behind
            src = os.path.join(tmp, "src")
            shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build",
                                                                      "*.egg-info"))
            target = os.path.join(tmp, "site")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                "--no-build-isolation", "--target", target, src],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run([sys.executable, "-c",
                                "import tierfs, tierfs._core, tierfs.torch; print(tierfs.__file__, tierfs.__version__)"],
                               capture_output=True, text=True, timeout=60, cwd=tmp,
                               env=dict(os.environ, PYTHONPATH=target))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(os.path.join(target, "tierfs")), r.stdout)
            version = r.stdout.split()[1]
            with open(os.path.join(HERE, "..", "CMakeLists.txt")) as f:
                self.assertIn("project(tierfs VERSION %s " % version, f.read())


if __name__ == "__main__":
    unittest.main()
