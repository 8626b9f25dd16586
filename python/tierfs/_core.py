"""The control plane of a tierfs mount, through its user.tierfs.* extended attributes.

See docs/xattrs.md and docs/python.md for the values.
"""
import errno
import os
import re

from . import _os

XATTR_STATS = "user.tierfs.stats"
XATTR_RESIDENCY = "user.tierfs.residency"
XATTR_DAEMON = "user.tierfs.daemon"
XATTR_PREFETCH = "user.tierfs.prefetch"
XATTR_PREFETCH_LIST = "user.tierfs.prefetch_list"
TIERS = ("l1", "l2", "l3")
# One user.tierfs.prefetch_list value stays below this many bytes (the kernel's xattr values end at
# 64 KiB); a longer list goes out in several sets, in order.
MAX_LIST_VALUE = 60 * 1024

# errnos that mean "this file system has no such attribute": the path is not on a tierfs mount
_NO_ATTR = {errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}
_FINAL = ("done", "failed", "cancelled")


class NotTierfsError(OSError):
    """The path is not on a tierfs mount (errno ENOTSUP; .filename is the path)."""


class PrefetchError(OSError):
    """A prefetch job failed or was cancelled (errno EIO or ECANCELED; .filename is the path the
    job was started on: the mount root for a list job, the directory or file otherwise)."""


def _fspath(path):
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _error(e, path, what):
    """OSError e from a call on path, as an OSError naming path and what was being done."""
    code = e.errno if e.errno is not None else errno.EIO
    return OSError(code, "%s: %s" % (what, e.strerror or os.strerror(code)), path)


def _getxattr(path, name):
    """The value of xattr name on path; an OSError names path and the attribute."""
    try:
        return _os.SYS.getxattr(path, name)
    except OSError as e:
        raise _error(e, path, "reading %s" % name) from None


# Why the daemon (EPERM) or the kernel (EACCES, under default_permissions) refuses a control set.
_REFUSED_HINT = ("uid %d may not start prefetches on this mount: root, the user who mounted it "
                 "and members of its control group (tierfs mount --control-group, "
                 "fuse.control_group) may")
_CAP_HINT = ("uid %d has as many prefetch jobs, or files in the list job, queued as one user "
             "may; wait for them or cancel one")


def _setxattr(path, name, value, einval_hint=None):
    """Sets xattr name on path; an OSError names path and the attribute (and, for EINVAL,
    einval_hint: what the daemon refuses). A refused control is a PermissionError saying who
    may set it."""
    try:
        _os.SYS.setxattr(path, name, value)
    except OSError as e:
        what = "setting %s" % name
        if einval_hint and e.errno == errno.EINVAL:
            what += " (%s)" % einval_hint
        elif e.errno in (errno.EPERM, errno.EACCES):
            what += " refused (%s)" % (_REFUSED_HINT % os.getuid())
        elif e.errno == errno.ENOSPC and name in (XATTR_PREFETCH, XATTR_PREFETCH_LIST):
            what += " refused (%s)" % (_CAP_HINT % os.getuid())
        raise _error(e, path, what) from None


def _is_tierfs_root(d):
    try:
        _os.SYS.getxattr(d, XATTR_DAEMON)
        return True
    except OSError as e:
        if e.errno in _NO_ATTR:
            return False
        raise _error(e, d, "reading %s" % XATTR_DAEMON)


class _Resolver:
    """Maps paths to (mount root, path relative to it), remembering every directory it has
    resolved, so a dataset of N files in D directories costs about D probes, not N."""

    def __init__(self):
        self._dirs = {}  # real directory -> mount root, or None when not on tierfs

    def root_of_dir(self, d):
        """The tierfs mount root holding the (real, absolute) directory d, or None."""
        walked = []
        root = None
        while True:
            if d in self._dirs:
                root = self._dirs[d]
                break
            walked.append(d)
            if _os.SYS.ismount(d):
                root = d if _is_tierfs_root(d) else None
                break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        for w in walked:
            self._dirs[w] = root
        return root

    def resolve(self, path, probe_self=True):
        """(root, relative path) of a file or directory on a tierfs mount, or None. Symlinks in
        the directories are followed; the last component is taken as named. Without probe_self,
        path is taken to be a file (no probe of path itself: the sampler's many paths)."""
        p = os.path.abspath(_fspath(path))
        if probe_self and _os.SYS.ismount(p):  # the mount root itself, or another file system's
            real = _os.SYS.realpath(p)
            root = self.root_of_dir(real)
            return (root, ".") if root is not None else None
        head, name = os.path.split(p)
        d = self._dir(head)
        if d is None:
            return None
        root, rel = d
        if not name:  # p is "/"
            return root, os.path.relpath(head, root)
        return root, name if rel == "." else rel + os.sep + name

    def _dir(self, head):
        """(root, directory relative to it) of the directory head (as named: symlinks followed),
        or None when it is on no tierfs mount; remembered, so that a sampler's path costs two
        string operations, not a relpath (which took about 9 us a path, a tenth of a second of
        the training loop's time per 10,000 samples)."""
        key = ("dir", head)
        try:
            return self._dirs[key]
        except KeyError:
            pass
        real_head = _os.SYS.realpath(head)
        root = self.root_of_dir(real_head)
        d = None if root is None else (root, os.path.relpath(real_head, root))
        self._dirs[key] = d
        return d


def mount_root(path):
    """The root directory of the tierfs mount holding path. Raises NotTierfsError when path is on
    no tierfs mount."""
    p = _fspath(path)
    r = _Resolver().resolve(p)
    if r is None:
        raise NotTierfsError(errno.ENOTSUP, "not on a tierfs mount", p)
    return r[0]


def _parse_number(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def _parse_value(v):
    if "/" in v:
        a, _, b = v.partition("/")
        try:
            return int(a), int(b)
        except ValueError:
            return v
    return _parse_number(v)


_ERROR_FIELD = re.compile(r"(?:^|\s)error=")


def parse_kv(text, free_text_error=False):
    """Parses a space-separated `key=value` answer of the daemon into a dict: integers and floats
    become numbers, `done/total` pairs become (done, total) tuples, anything else stays a string.
    With free_text_error, a trailing ` error=<text>` keeps its spaces."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.strip()
    out = {}
    err = None
    if free_text_error:
        m = _ERROR_FIELD.search(text)
        if m:
            err = text[m.end():]
            text = text[:m.start()]
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if sep:
            out[k] = _parse_value(v)
    if err is not None:
        out["error"] = err
    return out


def stats(path):
    """Every counter of the daemon serving the mount that holds path (user.tierfs.stats on its
    root), as a dict: {'l1.hits': 12, 'origin.bytes': 1048576, ...}."""
    return parse_kv(_getxattr(mount_root(path), XATTR_STATS))


def residency(path):
    """How much of a file each tier holds (user.tierfs.residency): {'l1': (held, blocks),
    'l2': (held, blocks)}, in blocks."""
    p = _fspath(path)
    mount_root(p)
    return parse_kv(_getxattr(p, XATTR_RESIDENCY))


def _check_tier(tier):
    if tier not in TIERS:
        raise ValueError("tier must be one of %s, not %r" % ("/".join(TIERS), tier))


def list_values(rels, tier):
    """The user.tierfs.prefetch_list values that hand the daemon rels (paths relative to the
    mount root) in order: each `tier=T` then one path per line, each under MAX_LIST_VALUE bytes."""
    _check_tier(tier)
    head = ("tier=%s\n" % tier).encode()
    values, cur = [], []
    size = len(head)
    for rel in rels:
        b = os.fsencode(rel)
        if b"\n" in b:
            raise ValueError("a path holding a newline cannot be listed: %r" % rel)
        if cur and size + len(b) + 1 > MAX_LIST_VALUE:
            values.append(head + b"\n".join(cur))
            cur, size = [], len(head)
        cur.append(b)
        size += len(b) + 1
    if cur:
        values.append(head + b"\n".join(cur))
    return values


def send_list(root, rels, tier="l2"):
    """Appends rels (relative to the mount root, in order) to the mount's list prefetch job.
    Returns the number of setxattr calls made."""
    values = list_values(rels, tier)
    # the daemon refuses a whole set for these (its log names the path)
    hint = ("a listed path is missing or a directory, or the mount's list job is running into "
            "another tier than %s; see the daemon's log" % tier)
    for v in values:
        _setxattr(root, XATTR_PREFETCH_LIST, v, hint)
    return len(values)


def cancel_list(path):
    """Drops the queue of the list prefetch job of the mount holding path."""
    _setxattr(mount_root(path), XATTR_PREFETCH_LIST, b"cancel")


def list_status(path):
    """The state of the list prefetch job of the mount holding path: {'state': 'running',
    'tier': 'l2', 'files': (done, total), 'bytes': (done, total)} (and 'error' when failed)."""
    root = mount_root(path)
    return _Job(root, XATTR_PREFETCH_LIST).status()


class _Job:
    """One job the daemon runs: the mount's list job (xattr on the root) or a directory/file job."""

    def __init__(self, path, xattr):
        self.path = path
        self.xattr = xattr

    def status(self):
        s = parse_kv(_getxattr(self.path, self.xattr), free_text_error=True)
        s.setdefault("state", "none")
        s["path"] = self.path
        return s


def _pair(s, key):
    v = s.get(key)
    return v if isinstance(v, tuple) else (0, 0)


class PrefetchHandle:
    """What tierfs.prefetch returns: status() reads the jobs' progress, wait() blocks until they
    end. Jobs on a mount's list are shared with every other client of that mount, so their
    counts are the list job's, not only this call's."""

    def __init__(self, jobs, progress=None):
        self.jobs = jobs
        self.progress = progress

    def status(self):
        """{'state': ..., 'files': (done, total), 'bytes': (done, total), 'jobs': [...]}: the
        state is 'failed' or 'cancelled' if any job is, 'done' when all are (a job the daemon no
        longer reports, state 'none', counts as done), else 'running' or 'queued'."""
        js = [j.status() for j in self.jobs]
        states = [("done" if s["state"] == "none" else s["state"]) for s in js]
        if "failed" in states:
            state = "failed"
        elif "cancelled" in states:
            state = "cancelled"
        elif all(s == "done" for s in states):
            state = "done"
        elif "running" in states:
            state = "running"
        else:
            state = "queued"
        files = [sum(x) for x in zip((0, 0), *[_pair(s, "files") for s in js])]
        nbytes = [sum(x) for x in zip((0, 0), *[_pair(s, "bytes") for s in js])]
        return {"state": state, "files": tuple(files), "bytes": tuple(nbytes), "jobs": js}

    def done(self):
        return self.status()["state"] in _FINAL

    def wait(self, timeout=None, poll=0.1, progress=None):
        """Blocks until every job ended; calls progress(status) (the argument, else the one given
        to prefetch) at every change. Returns the last status; raises PrefetchError when a job failed or was cancelled, TimeoutError after
        timeout seconds."""
        progress = progress or self.progress
        start = _os.SYS.monotonic()
        last = None
        while True:
            s = self.status()
            key = (s["state"], s["files"], s["bytes"])
            if progress is not None and key != last:
                progress(s)
            last = key
            if s["state"] == "done":
                return s
            if s["state"] in ("failed", "cancelled"):
                bad = next(j for j in s["jobs"] if j["state"] == s["state"])
                why = bad.get("error") or s["state"]
                code = errno.EIO if s["state"] == "failed" else errno.ECANCELED
                raise PrefetchError(code, "prefetch %s: %s" % (s["state"], why), bad["path"])
            if timeout is not None and _os.SYS.monotonic() - start >= timeout:
                raise TimeoutError(errno.ETIMEDOUT, "prefetch still %s after %gs" % (s["state"], timeout),
                                   self.jobs[0].path if self.jobs else None)
            _os.SYS.sleep(poll)

    def __repr__(self):
        return "<tierfs.PrefetchHandle %s>" % ", ".join(j.path for j in self.jobs)


def prefetch(paths, tier="l2", wait=False, progress=None, timeout=None):
    """Hydrates files and directories into a tier ('l1', 'l2' or 'l3') in the background.

    paths: one path or an iterable of them, on one or more tierfs mounts. Files go to their
    mount's list job (user.tierfs.prefetch_list) in the order given; each directory starts a deep
    prefetch job of its own (user.tierfs.prefetch, recursive). Returns a PrefetchHandle; with
    wait=True, waits for the jobs first (progress(status) is called at every change). Raises
    NotTierfsError for a path on no tierfs mount, FileNotFoundError for a missing one, ValueError
    for a bad tier, OSError (naming the path) when the daemon refuses.
    """
    _check_tier(tier)
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    resolver = _Resolver()
    lists = {}  # root -> [rel]
    dirs = []
    for path in paths:
        p = _fspath(path)
        if not _os.SYS.exists(p):
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", p)
        r = resolver.resolve(p)
        if r is None:
            raise NotTierfsError(errno.ENOTSUP, "not on a tierfs mount", p)
        if _os.SYS.isdir(p):
            dirs.append(p)
        else:
            lists.setdefault(r[0], []).append(r[1])
    jobs = []
    for root, rels in lists.items():
        send_list(root, rels, tier)
        jobs.append(_Job(root, XATTR_PREFETCH_LIST))
    for d in dirs:
        _setxattr(d, XATTR_PREFETCH, tier.encode())
        jobs.append(_Job(d, XATTR_PREFETCH))
    handle = PrefetchHandle(jobs, progress)
    if wait:
        handle.wait(timeout=timeout)
    return handle
