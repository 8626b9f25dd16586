"""tierfs from Python: the control plane of a tierfs mount (its user.tierfs.* extended
attributes) and, in tierfs.torch, a PyTorch sampler that tells the daemon what the loader reads
next.

    import tierfs
    tierfs.stats("/mnt/datasets")                     # every counter of the daemon, as a dict
    tierfs.residency("/mnt/datasets/train/0001.jpg")  # {'l1': (0, 1), 'l2': (1, 1)}
    h = tierfs.prefetch(["/mnt/datasets/train"], tier="l2")
    h.wait(progress=print)

Pure Python, standard library only; tierfs.torch imports torch.
"""
from ._core import (MAX_LIST_VALUE, TIERS, NotTierfsError, PrefetchError, PrefetchHandle,
                    cancel_list, list_status, mount_root, parse_kv, prefetch, residency, stats)

__version__ = "0.1.0"

__all__ = ["stats", "residency", "prefetch", "PrefetchHandle", "list_status", "cancel_list",
           "mount_root", "parse_kv", "NotTierfsError", "PrefetchError", "TIERS", "MAX_LIST_VALUE"]
