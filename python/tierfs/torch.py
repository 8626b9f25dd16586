"""PyTorch integration: PrefetchSampler tells the tierfs daemon the order a DataLoader will read.

    from torch.utils.data import DataLoader, RandomSampler
    from tierfs.torch import PrefetchSampler

    sampler = PrefetchSampler(RandomSampler(ds), [p for p, _ in ds.samples], ahead=1024)
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=4)

At the start of each epoch the wrapper draws the wrapped sampler's whole order (so the shuffle is
exactly the one the wrapped sampler would have produced), hands the daemon the paths of the first
`ahead` samples through the mount's list prefetch job (user.tierfs.prefetch_list), and then
yields the indices one by one, topping the list up as the loader advances so the daemon always
knows the next `ahead` samples, in the order they will be read. The DataLoader draws indices
from its sampler in the main process, also with num_workers > 0, so the workers need nothing.
The top-ups (ahead/2 samples each) are resolved and handed over by a helper thread, so the
training loop does not wait for them (each costs a few milliseconds: a path lookup per sample
and a setxattr per 64 KiB of paths); the sampler waits for that thread only in the rare case
that the loader would otherwise reach a sample the daemon has not been told yet. The thread
lives for one epoch.

When the paths are on no tierfs mount, or the daemon refuses the list (no prefetch_list support;
EPERM or EACCES for a user that is neither root, the mounting user nor a member of the mount's
control group, `tierfs mount --control-group`), the wrapper warns once, saying why and who may,
and passes the order through unchanged: it never stops an epoch.
"""
import threading
import warnings

from torch.utils.data import Sampler

from . import _core


class PrefetchSampler(Sampler):
    """Wraps any sampler (or batch sampler) and hands tierfs its upcoming order.

    sampler: the sampler to wrap (RandomSampler, DistributedSampler, a batch sampler, ...); its
        order is materialized once per epoch.
    dataset_paths: the file of each dataset index: a sequence (dataset_paths[i]) or a callable
        (dataset_paths(i)). Paths may be absolute or relative to the working directory.
    ahead: how many samples beyond the current position the daemon knows at any time (refilled
        in steps of ahead/2).
    tier: where the daemon puts the files: 'l1', 'l2' (default) or 'l3'.
    """

    def __init__(self, sampler, dataset_paths, ahead=1024, tier="l2"):
        super().__init__(None)
        if int(ahead) < 1:
            raise ValueError("ahead must be at least 1, not %r" % (ahead,))
        _core._check_tier(tier)
        self.sampler = sampler
        self.dataset_paths = dataset_paths
        self.ahead = int(ahead)
        self.tier = tier
        self._resolver = _core._Resolver()
        self._disabled = None  # why the wrapper passes through, once it does
        self._seen_tierfs = False
        # of the current (or last) epoch: samples handed to the daemon, setxattr calls, and the
        # samples of each hand-over (the first is the initial `ahead`, then the refills)
        self.sent = 0
        self.sets = 0
        self.handovers = []

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        """Forwards to the wrapped sampler (DistributedSampler needs it every epoch)."""
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    @property
    def active(self):
        """False once the wrapper has fallen back to passing the order through."""
        return self._disabled is None

    def _path(self, index):
        if callable(self.dataset_paths):
            return self.dataset_paths(index)
        return self.dataset_paths[index]

    def _disable(self, why):
        self._disabled = why
        warnings.warn("tierfs.torch.PrefetchSampler: %s; passing the sampler's order through "
                      "without telling tierfs" % why, RuntimeWarning, stacklevel=3)

    def _send(self, items):
        """Hands the daemon the paths of items (indices, or lists of them from a batch sampler)."""
        if self._disabled is not None:
            return
        per_root = {}
        n = 0
        for item in items:
            for index in (item if isinstance(item, (list, tuple)) else (item,)):
                try:
                    r = self._resolver.resolve(self._path(index), probe_self=False)
                except OSError:
                    r = None
                if r is None or "\n" in r[1]:
                    continue
                per_root.setdefault(r[0], []).append(r[1])
                n += 1
        if not per_root:
            if not self._seen_tierfs:
                self._disable("the dataset's paths are not on a tierfs mount")
            return
        self._seen_tierfs = True
        for root, rels in per_root.items():
            try:
                self.sets += _core.send_list(root, rels, self.tier)
            except OSError as e:
                self._disable("the daemon refused the prefetch list (%s)" % e)
                return
        self.sent += n
        self.handovers.append(n)

    def __iter__(self):
        order = list(iter(self.sampler))
        self.sent = 0
        self.sets = 0
        self.handovers = []
        if self._disabled is not None:
            yield from order
            return
        n = len(order)
        told = 0  # order[:told] has been handed to the daemon, or queued for the helper
        low = max(1, self.ahead // 2)
        helper = None
        try:
            for i, item in enumerate(order):
                if told < n and told - i < low and self._disabled is None:
                    end = min(n, i + self.ahead)
                    if told == 0:
                        self._send(order[:end])  # the first `ahead`, before the first sample
                    else:
                        if helper is None:
                            helper = _Helper(self._send, told)
                        helper.put(told, order[told:end])
                    told = end
                if helper is not None:
                    helper.wait_past(i)
                yield item
        finally:
            if helper is not None:
                helper.close()

    def __repr__(self):
        return "PrefetchSampler(%r, ahead=%d, tier=%r%s)" % (
            self.sampler, self.ahead, self.tier, "" if self.active else ", passing through")


class _Helper:
    """The thread that hands a PrefetchSampler's top-ups to the daemon in order, off the training
    loop. put(first, items) queues items order[first:first + len(items)]; wait_past(i) returns
    once the daemon was told order[i] (or nothing more will be told: the sampler passes through,
    or the helper stopped); close() waits for what is queued and ends the thread."""

    def __init__(self, send, told):
        self._send = send
        self._cv = threading.Condition()
        self._queue = []  # (first, items), in order
        self._told = told  # order[:_told] has been handed over (or given up on)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="tierfs-sampler", daemon=True)
        self._thread.start()

    def put(self, first, items):
        with self._cv:
            self._queue.append((first, items))
            self._cv.notify_all()

    def wait_past(self, i):
        with self._cv:
            while self._queue and self._told <= i and self._thread.is_alive():
                self._cv.wait(0.1)

    def close(self):
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join()

    def _run(self):
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                first, items = self._queue[0]
            try:
                self._send(items)
            except Exception as e:  # a bug must not hang the loader: stop telling, say why
                warnings.warn("tierfs.torch.PrefetchSampler: handing over the order failed: %r"
                              % (e,), RuntimeWarning)
                with self._cv:
                    self._queue.clear()
                    self._told = float("inf")
                    self._cv.notify_all()
                return
            with self._cv:
                self._queue.pop(0)
                self._told = first + len(items)
                self._cv.notify_all()


__all__ = ["PrefetchSampler"]
