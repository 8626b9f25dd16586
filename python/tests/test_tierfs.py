"""Unit tests of the tierfs package against a fake file system behind its OS seam.

    cd python && /usr/bin/python3 -m unittest discover -s tests -t .
"""
import errno
import os
import sys
import threading
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tierfs  # noqa: E402
from tierfs import _core, _os  # noqa: E402
from tests.fakefs import FakeDaemon, FakeFS  # noqa: E402

try:
    import torch  # noqa: F401
    from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler
    import tierfs.torch as tt
except ImportError:  # the sampler tests need PyTorch (python3-torch)
    tt = None


class FakeFSTest(unittest.TestCase):
    def setUp(self):
        self.fs = FakeFS()
        self.saved = _os.SYS
        _os.SYS = self.fs
        self.d = self.fs.mount("/mnt/data", FakeDaemon())
        self.fs.mount("/mnt/other", None)  # another file system
        for i in range(10):
            self.fs.add_file("/mnt/data/train/%02d/s%03d.bin" % (i % 3, i))
        self.fs.add_file("/home/u/local.bin")
        self.fs.add_file("/mnt/other/x.bin")

    def tearDown(self):
        _os.SYS = self.saved


class ParseTest(unittest.TestCase):
    def test_stats_values_become_numbers(self):
        s = tierfs.parse_kv(b"l1.hits=3 origin.bytes=1048576 ttfb_p95_us=1.5 version=0.1.0 \n")
        self.assertEqual(s, {"l1.hits": 3, "origin.bytes": 1048576, "ttfb_p95_us": 1.5,
                             "version": "0.1.0"})

    def test_pairs_become_tuples(self):
        self.assertEqual(tierfs.parse_kv("l1=3/25 l2=25/25"), {"l1": (3, 25), "l2": (25, 25)})

    def test_error_text_keeps_its_spaces_only_when_asked(self):
        text = "state=failed tier=l2 files=1/4 bytes=10/40 error=origin: 503 Slow Down"
        s = tierfs.parse_kv(text, free_text_error=True)
        self.assertEqual(s["error"], "origin: 503 Slow Down")
        self.assertEqual(s["files"], (1, 4))
        self.assertEqual(s["state"], "failed")
        # a stats counter whose name ends in "error" is not free text
        self.assertEqual(tierfs.parse_kv("l2.error=2 x=1", free_text_error=True),
                         {"l2.error": 2, "x": 1})


class MountRootTest(FakeFSTest):
    def test_walks_up_to_the_tierfs_root(self):
        self.assertEqual(tierfs.mount_root("/mnt/data/train/01/s001.bin"), "/mnt/data")
        self.assertEqual(tierfs.mount_root("/mnt/data"), "/mnt/data")
        self.assertEqual(tierfs.mount_root("/mnt/data/train"), "/mnt/data")

    def test_follows_a_symlinked_directory(self):
        self.fs.symlinks["/home/u/ds"] = "/mnt/data/train"
        self.fs.mkdir("/home/u/ds")
        self.assertEqual(tierfs.mount_root("/home/u/ds/00/s000.bin"), "/mnt/data")

    def test_other_file_systems_are_a_clear_error(self):
        for p in ("/home/u/local.bin", "/mnt/other/x.bin", "/"):
            with self.assertRaises(tierfs.NotTierfsError) as cm:
                tierfs.mount_root(p)
            self.assertEqual(cm.exception.filename, p)
            self.assertEqual(cm.exception.errno, errno.ENOTSUP)
            self.assertIn("not on a tierfs mount", str(cm.exception))
            self.assertIsInstance(cm.exception, OSError)

    def test_a_refused_probe_names_the_path(self):
        self.d.errno_get["user.tierfs.daemon"] = errno.EACCES
        with self.assertRaises(PermissionError) as cm:
            tierfs.mount_root("/mnt/data/train/00/s000.bin")
        self.assertEqual(cm.exception.filename, "/mnt/data")


class StatsResidencyTest(FakeFSTest):
    def test_stats_reads_the_root_of_the_mount(self):
        s = tierfs.stats("/mnt/data/train/01/s001.bin")
        self.assertEqual(s["l1.hits"], 3)
        self.assertEqual(s["origin.bytes"], 1048576)
        self.assertIn(("get", "/mnt/data", "user.tierfs.stats", None), self.fs.calls)

    def test_stats_error_names_the_root(self):
        self.d.errno_get["user.tierfs.stats"] = errno.EIO
        with self.assertRaises(OSError) as cm:
            tierfs.stats("/mnt/data/train")
        self.assertEqual((cm.exception.errno, cm.exception.filename), (errno.EIO, "/mnt/data"))
        self.assertIn("user.tierfs.stats", str(cm.exception))

    def test_residency(self):
        p = "/mnt/data/train/00/s000.bin"
        self.d.residency[p] = "l1=0/2 l2=2/2"
        self.assertEqual(tierfs.residency(p), {"l1": (0, 2), "l2": (2, 2)})

    def test_residency_errors(self):
        with self.assertRaises(tierfs.NotTierfsError):
            tierfs.residency("/home/u/local.bin")
        with self.assertRaises(OSError) as cm:
            tierfs.residency("/mnt/data/train")  # a directory has no residency
        self.assertEqual((cm.exception.errno, cm.exception.filename), (errno.ENODATA, "/mnt/data/train"))


class ListValuesTest(unittest.TestCase):
    def test_long_lists_are_split_in_order_below_64k(self):
        rels = ["d%04d/%s.jpg" % (i, "n" * (i % 200)) for i in range(5000)]
        values = _core.list_values(rels, "l1")
        self.assertGreater(len(values), 3)
        back = []
        for v in values:
            self.assertLessEqual(len(v), tierfs.MAX_LIST_VALUE)
            lines = v.decode().split("\n")
            self.assertEqual(lines[0], "tier=l1")
            back.extend(lines[1:])
        self.assertEqual(back, rels)

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            _core.list_values(["a\nb"], "l2")
        with self.assertRaises(ValueError):
            _core.list_values(["a"], "l4")
        self.assertEqual(_core.list_values([], "l2"), [])

    def test_non_utf8_names_go_as_their_bytes(self):
        name = os.fsdecode(b"caf\xe9.bin")
        self.assertEqual(_core.list_values([name], "l2"), [b"tier=l2\ncaf\xe9.bin"])


class PrefetchTest(FakeFSTest):
    def test_files_go_to_the_list_in_order_dirs_get_a_job(self):
        files = ["/mnt/data/train/02/s005.bin", "/mnt/data/train/00/s000.bin"]
        h = tierfs.prefetch(files + ["/mnt/data/train/01"], tier="l1")
        self.assertEqual(self.d.list, [("l1", "train/02/s005.bin"), ("l1", "train/00/s000.bin")])
        self.assertEqual(self.d.dir_jobs["/mnt/data/train/01"][0], "l1")
        seen = []
        s = h.wait(progress=seen.append)
        self.assertEqual(s["state"], "done")
        self.assertEqual(s["files"], (2 + 5, 2 + 5))
        self.assertEqual(seen[-1]["state"], "done")
        self.assertTrue(h.done())

    def test_wait_true_reports_progress(self):
        files = ["/mnt/data/train/%02d/s%03d.bin" % (i % 3, i) for i in range(10)]
        seen = []
        self.d.list_step = 3
        h = tierfs.prefetch(files, wait=True, progress=seen.append)
        self.assertEqual([x["files"] for x in seen], [(3, 10), (6, 10), (9, 10), (10, 10)])
        self.assertEqual(h.status()["bytes"], (100, 100))

    def test_one_path_string(self):
        tierfs.prefetch("/mnt/data/train/00/s000.bin")
        self.assertEqual(self.d.list, [("l2", "train/00/s000.bin")])

    def test_a_failed_job_raises_with_its_error(self):
        self.d.list_fail = "origin: 403 AccessDenied on train/00/s009.bin"
        h = tierfs.prefetch(["/mnt/data/train/00/s000.bin", "/mnt/data/train/00/s009.bin"])
        with self.assertRaises(tierfs.PrefetchError) as cm:
            h.wait()
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertEqual(cm.exception.filename, "/mnt/data")
        self.assertIn("403 AccessDenied on train/00/s009.bin", str(cm.exception))

    def test_wait_times_out(self):
        self.d.list_step = 0
        h = tierfs.prefetch(["/mnt/data/train/00/s000.bin"])
        with self.assertRaises(TimeoutError):
            h.wait(timeout=5)
        self.assertGreaterEqual(self.fs.clock, 5)

    def test_bad_paths_and_tiers(self):
        with self.assertRaises(FileNotFoundError) as cm:
            tierfs.prefetch(["/mnt/data/train/nope.bin"])
        self.assertEqual(cm.exception.filename, "/mnt/data/train/nope.bin")
        with self.assertRaises(tierfs.NotTierfsError) as cm:
            tierfs.prefetch(["/mnt/data/train/00/s000.bin", "/home/u/local.bin"])
        self.assertEqual(cm.exception.filename, "/home/u/local.bin")
        with self.assertRaises(ValueError):
            tierfs.prefetch(["/mnt/data/train/00/s000.bin"], tier="L2")
        self.assertEqual(self.d.list, [])  # nothing sent when any path is bad

    def test_a_refusal_names_the_root(self):
        self.d.refuse_list = errno.EPERM
        with self.assertRaises(PermissionError) as cm:
            tierfs.prefetch(["/mnt/data/train/00/s000.bin"])
        self.assertEqual(cm.exception.filename, "/mnt/data")
        self.assertIn("user.tierfs.prefetch_list", str(cm.exception))
        self.assertIn("uid %d may not start prefetches" % os.getuid(), str(cm.exception))
        self.assertIn("--control-group", str(cm.exception))

    def test_a_user_at_the_job_cap_is_told(self):
        self.d.refuse_list = errno.ENOSPC
        with self.assertRaises(OSError) as cm:
            tierfs.prefetch(["/mnt/data/train/00/s000.bin"])
        self.assertEqual(cm.exception.errno, errno.ENOSPC)
        self.assertIn("files in the list job, queued as one user may", str(cm.exception))

    def test_an_invalid_list_says_why(self):
        self.d.refuse_list = errno.EINVAL
        with self.assertRaises(OSError) as cm:
            tierfs.prefetch(["/mnt/data/train/00/s000.bin"], tier="l1")
        self.assertEqual((cm.exception.errno, cm.exception.filename), (errno.EINVAL, "/mnt/data"))
        self.assertIn("running into another tier than l1", str(cm.exception))

    def test_two_mounts_two_lists(self):
        d2 = self.fs.mount("/mnt/b", FakeDaemon())
        self.fs.add_file("/mnt/b/k.bin")
        h = tierfs.prefetch(["/mnt/b/k.bin", "/mnt/data/train/00/s000.bin"], wait=True)
        self.assertEqual(d2.list, [("l2", "k.bin")])
        self.assertEqual(self.d.list, [("l2", "train/00/s000.bin")])
        self.assertEqual(len(h.jobs), 2)

    def test_cancel_and_status(self):
        self.assertEqual(tierfs.list_status("/mnt/data")["state"], "none")
        tierfs.prefetch(["/mnt/data/train/00/s000.bin", "/mnt/data/train/01/s001.bin",
                         "/mnt/data/train/02/s002.bin"])
        self.d.list_step = 1
        self.assertEqual(tierfs.list_status("/mnt/data/train")["files"], (1, 3))
        tierfs.cancel_list("/mnt/data/train")
        self.assertEqual(self.d.list, [("l2", "train/00/s000.bin")])


@unittest.skipIf(tt is None, "needs PyTorch")
class PrefetchSamplerTest(FakeFSTest):
    N = 1000

    def setUp(self):
        super().setUp()
        self.paths = ["/mnt/data/ds/%d/%05d.bin" % (i % 7, i) for i in range(self.N)]
        for p in self.paths:
            self.fs.add_file(p)

    def rels(self, indices):
        return [os.path.relpath(self.paths[i], "/mnt/data") for i in indices]

    def test_hands_over_the_exact_order_ahead_of_the_reader(self):
        g = torch.Generator().manual_seed(5)
        s = tt.PrefetchSampler(RandomSampler(range(self.N), generator=g), self.paths, ahead=100)
        want = list(RandomSampler(range(self.N), generator=torch.Generator().manual_seed(5)))
        got = []
        for i, idx in enumerate(s):
            told = len(self.d.list)  # the top-ups go out on the sampler's helper thread
            self.assertGreater(told, i, "position %d: the daemon does not know it" % i)
            self.assertLessEqual(told, i + 100)
            got.append(idx)
        self.assertEqual(got, want)  # the shuffle is the wrapped sampler's
        self.assertEqual([r for _, r in self.d.list], self.rels(want))
        self.assertEqual(s.sent, self.N)
        self.assertEqual(s.handovers[0], 100)
        self.assertEqual(sum(s.handovers), self.N)
        self.assertTrue(all(40 <= h <= 100 for h in s.handovers[:-1]), s.handovers)
        self.assertEqual(s.sets, len(s.handovers))
        self.assertEqual(len(s), self.N)
        # the next epoch: a new order, appended after the first
        second = list(s)
        self.assertNotEqual(second, want)
        self.assertEqual([r for _, r in self.d.list[self.N:]], self.rels(second))

    def test_top_ups_do_not_hold_up_the_loop(self):
        # Every set after the first blocks until released: the loop still gets every sample the
        # daemon knows already, and waits only at the first one it does not.
        gate = threading.Event()
        first = []

        def before_set():
            if first:
                gate.wait(10)
            first.append(1)

        self.d.before_list_set = before_set
        s = tt.PrefetchSampler(SequentialSampler(range(self.N)), self.paths, ahead=100)
        it = iter(s)
        head = [next(it) for _ in range(100)]  # the top-up went out at sample 50: still blocked
        self.assertEqual(head, list(range(100)))
        self.assertEqual(len(self.d.list), 100, "the loop waited for a top-up")
        gate.set()
        self.assertEqual(head + list(it), list(range(self.N)))
        self.assertEqual([r for _, r in self.d.list], self.rels(range(self.N)))
        self.assertEqual(s.sent, self.N)
        self.assertEqual(threading.active_count(), 1, threading.enumerate())

    def test_directory_probes_are_cached(self):
        s = tt.PrefetchSampler(SequentialSampler(range(self.N)), self.paths, ahead=64)
        list(s)
        list(s)
        probes = [c for c in self.fs.calls if c[0] == "ismount"]
        self.assertLess(len(probes), 40)

    def test_paths_relative_to_the_root_through_symlinks_and_at_the_root(self):
        # the per-directory memo (one relpath per directory) gives what relpath gave per path
        self.fs.add_file("/mnt/data/top.bin")
        self.fs.symlinks["/home/u/ds"] = "/mnt/data/ds/3"
        self.fs.mkdir("/home/u/ds")
        paths = ["/mnt/data/top.bin", "/home/u/ds/00003.bin", "/mnt/data/ds/3/../4/00004.bin",
                 "/mnt/data/top.bin", "/home/u/ds/00010.bin"]
        list(tt.PrefetchSampler(SequentialSampler(range(len(paths))), paths, ahead=10))
        self.assertEqual([r for _, r in self.d.list],
                         ["top.bin", "ds/3/00003.bin", "ds/4/00004.bin", "top.bin",
                          "ds/3/00010.bin"])

    def test_dataloader_with_workers_reads_in_the_told_order(self):
        class Idx(Dataset):
            def __len__(self):
                return 300

            def __getitem__(self, i):
                return i

        g = torch.Generator().manual_seed(1)
        s = tt.PrefetchSampler(RandomSampler(range(300), generator=g), self.paths, ahead=64)
        loader = DataLoader(Idx(), batch_size=8, sampler=s, num_workers=2)
        read = [int(i) for batch in loader for i in batch]
        self.assertEqual(sorted(read), list(range(300)))
        self.assertEqual([r for _, r in self.d.list], self.rels(read))

    def test_batch_sampler_and_callable_paths(self):
        bs = BatchSampler(SequentialSampler(range(20)), batch_size=6, drop_last=False)
        s = tt.PrefetchSampler(bs, lambda i: self.paths[i], ahead=2, tier="l1")
        batches = list(s)
        self.assertEqual(batches[0], [0, 1, 2, 3, 4, 5])
        self.assertEqual(self.d.list, [("l1", r) for r in self.rels(range(20))])

    def test_not_on_tierfs_passes_through_with_one_warning(self):
        paths = ["/home/u/local.bin"] * 50
        s = tt.PrefetchSampler(SequentialSampler(range(50)), paths, ahead=8)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(list(s), list(range(50)))
            self.assertEqual(list(s), list(range(50)))
        self.assertEqual(len(w), 1)
        self.assertIn("not on a tierfs mount", str(w[0].message))
        self.assertFalse(s.active)
        self.assertEqual(self.fs.sets("user.tierfs.prefetch_list"), [])

    def test_a_refusing_daemon_passes_through_with_one_warning(self):
        self.d.refuse_list = errno.ENOTSUP
        s = tt.PrefetchSampler(SequentialSampler(range(self.N)), self.paths, ahead=8)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(list(s), list(range(self.N)))
        self.assertEqual(len(w), 1)
        self.assertIn("refused", str(w[0].message))
        self.assertEqual(len(self.fs.sets("user.tierfs.prefetch_list")), 1)

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            tt.PrefetchSampler(SequentialSampler(range(3)), self.paths, ahead=0)
        with self.assertRaises(ValueError):
            tt.PrefetchSampler(SequentialSampler(range(3)), self.paths, tier="ssd")


if __name__ == "__main__":
    unittest.main()
