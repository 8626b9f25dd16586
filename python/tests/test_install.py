"""The package installs offline with Debian's pip and setuptools (no PyPI) and imports from there."""
import importlib.metadata
import os
import re
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
            self.check_metadata(target)

    def check_metadata(self, target):
        """The installed metadata: the license (SPDX Apache-2.0) and the maintainer and homepage
        of the Debian package (packaging/CMakeLists.txt)."""
        dists = list(importlib.metadata.distributions(path=[target]))
        self.assertEqual([d.metadata["Name"] for d in dists], ["tierfs"])
        meta = dists[0].metadata
        self.assertEqual(meta["License"], "Apache-2.0")
        self.assertIn("License :: OSI Approved :: Apache Software License",
                      meta.get_all("Classifier"))
        with open(os.path.join(HERE, "..", "packaging", "CMakeLists.txt")) as f:
            cmake = f.read()
        maintainer = re.search(r'set\(TIERFS_PACKAGE_MAINTAINER "[^"<]*<([^>]+)>"', cmake).group(1)
        homepage = re.search(r'set\(TIERFS_HOMEPAGE "([^"]+)"', cmake).group(1)
        self.assertNotIn("example", maintainer)
        self.assertIn(maintainer, meta["Maintainer-email"])
        self.assertIn(maintainer, meta["Author-email"])
        self.assertIn("Homepage, " + homepage, meta.get_all("Project-URL"))
        self.assertTrue(meta.get_payload() or meta["Description"], "no long description (readme)")


if __name__ == "__main__":
    unittest.main()
