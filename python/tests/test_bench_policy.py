"""bench/policy.py (the cache-policy workloads' readers) and the report's policy section built from
their results. The benchmark itself never runs in the test suite."""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(HERE, "..", "bench")
sys.path.insert(0, BENCH)

import policy  # noqa: E402
import report_jobs  # noqa: E402


class RangesTest(unittest.TestCase):
    def test_ranges_cover_the_fraction_without_overlap_inside_the_file(self):
        size = 64 << 20
        for fraction in (0.25, 0.9):
            rs = policy.ranges_of(size, fraction, 16 << 10, 64 << 10, random.Random(3))
            total = sum(n for _, n in rs)
            self.assertGreaterEqual(total, int(size * fraction) - (64 << 10))
            self.assertLessEqual(total, int(size * fraction))
            last = -1
            for off, n in sorted(rs):
                self.assertGreater(off, last)
                self.assertGreater(n, 0)
                self.assertLessEqual(n, 64 << 10)
                self.assertLessEqual(off + n, size)
                last = off + n - 1


class ReaderTest(unittest.TestCase):
    def run_policy(self, *args):
        return subprocess.run([sys.executable, os.path.join(BENCH, "policy.py")] + list(args),
                              capture_output=True, text=True, timeout=60)

    def test_equal_bytes_are_exact_and_a_changed_byte_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            mnt, local = os.path.join(d, "mnt"), os.path.join(d, "local")
            for root in (mnt, local):
                os.makedirs(os.path.join(root, "proj"))
            data = random.Random(1).randbytes(3 << 20)
            for root in (mnt, local):
                with open(os.path.join(root, "proj", "f.bin"), "wb") as f:
                    f.write(data)
            out = os.path.join(d, "r.json")
            r = self.run_policy("read", out, mnt, local, "proj/f.bin")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.load(open(out))
            self.assertEqual((j["status"], j["bytes"], j["exact"]), ("ok", 3 << 20, True))
            with open(os.path.join(mnt, "proj", "f.bin"), "r+b") as f:
                f.seek((2 << 20) + 5)
                f.write(bytes([data[(2 << 20) + 5] ^ 1]))
            r = self.run_policy("ranges", out, mnt, local, "proj/f.bin", "--fraction", "1.0")
            self.assertEqual(r.returncode, 1)
            j = json.load(open(out))
            self.assertEqual((j["status"], j["exact"]), ("wrong bytes", False))
            self.assertTrue(j["mismatches"][0].startswith("proj/f.bin@"))


class PolicySectionTest(unittest.TestCase):
    def write(self, path, obj):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(obj, f)

    def test_targets_are_pass_or_fail_text_from_the_proxy_counts(self):
        with tempfile.TemporaryDirectory() as run:
            d = os.path.join(run, "raw", "policy")
            # the second read asked the origin twice: FAIL against 0
            self.write(os.path.join(d, "once-l2-run", "second.json"), {"status": "ok", "bytes": 100, "exact": True})
            self.write(os.path.join(d, "once-l2-run", "second.origin0.json"), {"once": {"requests": 1, "bytes": 10}})
            self.write(os.path.join(d, "once-l2-run", "second.origin1.json"), {"once": {"requests": 3, "bytes": 30}})
            # the projection fetched 120 bytes for 100 read: pass against 1.3
            self.write(os.path.join(d, "proj-one-25", "read.json"),
                       {"status": "ok", "bytes": 100, "exact": True, "iops": 50.0})
            self.write(os.path.join(d, "proj-one-25", "read.origin0.json"), {})
            self.write(os.path.join(d, "proj-one-25", "read.origin1.json"),
                       {"proj": {"requests": 4, "bytes": 120}, "hot": {"requests": 9, "bytes": 999}})
            md, rows = report_jobs.policy_section(run)
        by = {r["case"]: r for r in rows}
        self.assertEqual((by["once-l2-run"]["value"], by["once-l2-run"]["verdict"]), (2, "FAIL"))
        self.assertAlmostEqual(by["proj-one-25"]["value"], 1.2)
        self.assertEqual(by["proj-one-25"]["verdict"], "pass")
        self.assertEqual(by["proj-one-25"]["origin_gets"], 4)
        self.assertIn("| once-l2-run | second read: origin GETs | 2 | <= 0 | FAIL |", md)


if __name__ == "__main__":
    unittest.main()
