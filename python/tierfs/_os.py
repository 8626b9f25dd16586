"""The package's only contact with the operating system (the seam the unit tests replace).

Every extended-attribute call and every file-system probe the package makes goes through the
object in `tierfs._os.SYS`; the unit tests swap it for a fake file system
(`python/tests/fakefs.py`) so they run without a mount.
"""
import os


class RealOS:
    """The real calls (Linux: os.getxattr / os.setxattr)."""

    def getxattr(self, path, name):
        return os.getxattr(path, name)

    def setxattr(self, path, name, value):
        os.setxattr(path, name, value)

    def ismount(self, path):
        return os.path.ismount(path)

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def realpath(self, path):
        return os.path.realpath(path)

    def monotonic(self):
        import time
        return time.monotonic()

    def sleep(self, seconds):
        import time
        time.sleep(seconds)


SYS = RealOS()
