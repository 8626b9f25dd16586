"""A fake file system behind the package's OS seam (tierfs._os.SYS): directories, files, mount
points, a tierfs daemon's xattrs on its mounts, and a list prefetch job that advances a step on
every read of its status."""
import errno
import os


class FakeFS:
    def __init__(self):
        self.dirs = {"/"}
        self.files = {}             # path -> size
        self.mounts = {"/": None}   # mount point -> FakeDaemon, or None for another file system
        self.symlinks = {}          # directory path -> target
        self.calls = []             # (op, path, name, value)
        self.clock = 0.0

    # building the tree
    def mkdir(self, d):
        while d not in self.dirs:
            self.dirs.add(d)
            d = os.path.dirname(d)

    def add_file(self, path, size=100):
        self.mkdir(os.path.dirname(path))
        self.files[path] = size

    def mount(self, root, daemon=None):
        self.mkdir(root)
        self.mounts[root] = daemon
        return daemon

    # the seam
    def _daemon_root(self, path):
        d = path
        while d not in self.mounts:
            d = os.path.dirname(d)
        return d, self.mounts[d]

    def realpath(self, path):
        p = os.path.normpath(path)
        for link, target in self.symlinks.items():
            if p == link or p.startswith(link + "/"):
                return target + p[len(link):]
        return p

    def ismount(self, path):
        self.calls.append(("ismount", path, None, None))
        return path in self.mounts

    def exists(self, path):
        return path in self.dirs or path in self.files

    def isdir(self, path):
        return path in self.dirs

    def monotonic(self):
        return self.clock

    def sleep(self, s):
        self.clock += s

    def getxattr(self, path, name):
        self.calls.append(("get", path, name, None))
        if not self.exists(path):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        root, daemon = self._daemon_root(path)
        if daemon is None:
            raise OSError(errno.ENODATA, os.strerror(errno.ENODATA))
        return daemon.get(path, root, name)

    def setxattr(self, path, name, value):
        self.calls.append(("set", path, name, value))
        if not self.exists(path):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        root, daemon = self._daemon_root(path)
        if daemon is None:
            raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))
        daemon.set(path, root, name, value)

    def sets(self, name):
        return [(p, v) for op, p, n, v in self.calls if op == "set" and n == name]


class FakeDaemon:
    def __init__(self, stats="l1.hits=3 l2.hits=0 origin.bytes=1048576 ttfb_p95_us=1.5 version=0.1.0"):
        self.stats = stats
        self.residency = {}          # path -> text
        self.list = []               # (tier, rel) in the order received
        self.list_done = 0
        self.list_step = 2           # files completed per status read
        self.list_fail = None        # error text: the job fails when it gets there
        self.refuse_list = None      # errno for every set of prefetch_list
        self.before_list_set = None  # called at the start of every set of prefetch_list
        self.dir_jobs = {}           # path -> [tier, reads left until done]
        self.errno_get = {}          # xattr name -> errno

    def get(self, path, root, name):
        if name in self.errno_get:
            e = self.errno_get[name]
            raise OSError(e, os.strerror(e))
        if name == "user.tierfs.daemon":
            if path != root:
                raise OSError(errno.ENODATA, os.strerror(errno.ENODATA))
            return b"pid=42 version=0.1.0 log_level=info"
        if name == "user.tierfs.stats":
            return self.stats.encode()
        if name == "user.tierfs.residency":
            if path not in self.residency:
                raise OSError(errno.ENODATA, os.strerror(errno.ENODATA))
            return self.residency[path].encode()
        if name == "user.tierfs.prefetch_list":
            total = len(self.list)
            if not total:
                return b"state=none tier=- files=0/0 bytes=0/0"
            if self.list_fail is not None and self.list_done + self.list_step >= total:
                return ("state=failed tier=l2 files=%d/%d bytes=%d/%d error=%s" % (
                    self.list_done, total, self.list_done * 10, total * 10, self.list_fail)).encode()
            self.list_done = min(total, self.list_done + self.list_step)
            state = "done" if self.list_done == total else "running"
            return ("state=%s tier=%s files=%d/%d bytes=%d/%d" % (
                state, self.list[-1][0], self.list_done, total, self.list_done * 10,
                total * 10)).encode()
        if name == "user.tierfs.prefetch":
            job = self.dir_jobs.get(path)
            if job is None:
                return b"state=none tier=- files=0/0 bytes=0/0"
            job[1] -= 1
            state = "done" if job[1] <= 0 else "running"
            return ("state=%s tier=%s files=5/5 bytes=50/50" % (state, job[0])).encode()
        raise OSError(errno.ENODATA, os.strerror(errno.ENODATA))

    def set(self, path, root, name, value):
        if name == "user.tierfs.prefetch_list":
            if self.before_list_set is not None:
                self.before_list_set()
            if self.refuse_list is not None:
                raise OSError(self.refuse_list, os.strerror(self.refuse_list))
            if path != root:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            assert isinstance(value, bytes) and len(value) < 64 * 1024, len(value)
            lines = value.decode().split("\n")
            tier = "l2"
            if lines[0].startswith("tier="):
                tier = lines.pop(0)[5:]
            if lines == ["cancel"]:
                self.list = self.list[:self.list_done]
                return
            self.list.extend((tier, rel) for rel in lines)
            return
        if name == "user.tierfs.prefetch":
            self.dir_jobs[path] = [value.decode(), 3]
            return
        raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))
