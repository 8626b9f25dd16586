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

When the paths are on no tierfs mount, or the daemon refuses the list (no prefetch_list support,
EPERM for a user that is neither root nor the mounting user), the wrapper warns once and passes
the order through unchanged: it never stops an epoch.
"""
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
        told = 0  # order[:told] has been handed to the daemon
        low = max(1, self.ahead // 2)
        for i, item in enumerate(order):
            if told < n and told - i < low and self._disabled is None:
                end = min(n, i + self.ahead)
                self._send(order[told:end])
                told = end
            yield item

    def __repr__(self):
        return "PrefetchSampler(%r, ahead=%d, tier=%r%s)" % (
            self.sampler, self.ahead, self.tier, "" if self.active else ", passing through")


__all__ = ["PrefetchSampler"]
