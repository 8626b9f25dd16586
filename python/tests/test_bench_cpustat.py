"""bench/cpustat.py (CPU accounting of the benchmark's origin, proxy and daemon) and the report's
CPU-per-object rows built from it. The benchmark itself never runs in the test suite."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(HERE, "..", "bench")
sys.path.insert(0, BENCH)

import cpustat  # noqa: E402
import report  # noqa: E402


class ParseTest(unittest.TestCase):
    def test_machine_ticks_leave_out_idle_and_iowait(self):
        busy, total = cpustat.machine_ticks("cpu  100 5 50 1000 200 3 7 2 0 0\ncpu0 1 2 3 4\n")
        self.assertEqual(total, 100 + 5 + 50 + 1000 + 200 + 3 + 7 + 2)
        self.assertEqual(busy, 100 + 5 + 50 + 3 + 7 + 2)

    def test_process_ticks_survive_a_command_name_with_spaces_and_parentheses(self):
        fields = ["S"] + [str(i) for i in range(4, 14)] + ["70", "30"] + ["0"] * 30
        text = "4242 (node (s3rver) x) " + " ".join(fields)
        self.assertEqual(cpustat.process_ticks(text), 100)

    def test_not_a_proc_stat_text_is_an_error(self):
        with self.assertRaises(ValueError):
            cpustat.machine_ticks("intr 1 2 3\n")


class SnapshotTest(unittest.TestCase):
    def test_a_busy_process_is_charged_its_cpu_and_a_gone_one_nothing(self):
        # The child burns a fixed amount of CPU time (not of wall time) between the two snapshots,
        # so a loaded machine only makes the test slower, never wrong.
        child = subprocess.Popen([sys.executable, "-c",
                                  "import sys, time\nsys.stdin.readline()\n"
                                  "while time.process_time() < 0.5: pass\n"
                                  "print('done', flush=True)\ntime.sleep(60)"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            a = cpustat.snapshot({"busy": child.pid, "none": None, "gone": 2 ** 22 + 7})
            child.stdin.write("go\n")
            child.stdin.flush()
            self.assertEqual(child.stdout.readline().strip(), "done")
            b = cpustat.snapshot({"busy": child.pid, "none": None, "gone": 2 ** 22 + 7})
        finally:
            child.kill()
            child.wait()
        d = cpustat.delta(a, b)
        self.assertGreater(d["busy_cpu_s"], 0.4)
        self.assertLess(d["busy_cpu_s"], d["seconds"] + 0.1)
        self.assertEqual(d["none_cpu_s"], 0)
        self.assertEqual(d["gone_cpu_s"], 0)
        self.assertGreaterEqual(d["machine_cpu_s"], d["busy_cpu_s"] - 0.05)
        self.assertTrue(0 < d["machine_busy"] <= 1)

    def test_command_line_attach_adds_the_figures_to_a_result(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(BENCH, "cpustat.py")
            paths = [os.path.join(tmp, n) for n in ("a.json", "b.json", "r.json")]
            for p in paths[:2]:
                with open(p, "w") as f:
                    subprocess.run([sys.executable, script, "snap", "me=%d" % os.getpid()],
                                   stdout=f, check=True)
            with open(paths[2], "w") as f:
                json.dump({"iops": 5}, f)
            subprocess.run([sys.executable, script, "attach"] + [paths[2]] + paths[:2], check=True)
            with open(paths[2]) as f:
                r = json.load(f)
            self.assertEqual(r["iops"], 5)
            self.assertIn("me_cpu_s", r["cpu"])
            bad = subprocess.run([sys.executable, script, "snap", "nopid"], capture_output=True, text=True)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("NAME=PID", bad.stdout + bad.stderr)


class ReportTest(unittest.TestCase):
    def test_cpu_rows_and_the_bound_they_give(self):
        with tempfile.TemporaryDirectory() as run:
            os.makedirs(os.path.join(run, "raw", "raw"))
            os.makedirs(os.path.join(run, "raw", "tierfs"))
            os.makedirs(os.path.join(run, "raw", "local"))
            with open(os.path.join(run, "meta.json"), "w") as f:
                json.dump({"tools": ["tierfs", "local", "raw"]}, f)
            # the loader on local disk: 0.25 ms per object of its own
            with open(os.path.join(run, "raw", "local", "loader.json"), "w") as f:
                json.dump({"status": "ok", "epochs": [
                    {"epoch": 1, "samples": 1000, "seconds": 0.5, "samples_per_s": 2000.0,
                     "cpu": {"seconds": 0.5, "machine_busy": 0.5, "machine_cpu_s": 0.25, "cores": 2,
                             "origin_cpu_s": 0, "proxy_cpu_s": 0, "daemon_cpu_s": 0}}]}, f)
            # the ceiling run: 1,000 objects/s for 4 s, origin 6 CPU-s + proxy 1, machine 7.6
            with open(os.path.join(run, "raw", "raw", "small-par128.json"), "w") as f:
                json.dump({"status": "ok", "seconds": 4.0, "requests": 4000, "iops": 1000.0,
                           "cpu": {"seconds": 4.0, "machine_busy": 0.95, "machine_cpu_s": 7.6,
                                   "cores": 2, "origin_cpu_s": 6.0, "proxy_cpu_s": 1.0,
                                   "daemon_cpu_s": 0}}, f)
            # the loader: 500 samples/s; 2 ms/object on the origin side, 2 on the rest
            with open(os.path.join(run, "raw", "tierfs", "loader.json"), "w") as f:
                json.dump({"status": "ok", "epochs": [
                    {"epoch": 1, "samples": 1000, "seconds": 2.0, "samples_per_s": 500.0,
                     "cpu": {"seconds": 2.0, "machine_busy": 1.0, "machine_cpu_s": 4.0, "cores": 2,
                             "origin_cpu_s": 1.5, "proxy_cpu_s": 0.5, "daemon_cpu_s": 1.0}}]}, f)
            meta, tools, res, notes = report.collect(run)
        self.assertAlmostEqual(res["cpu.origin_ms"]["raw"]["value"], 1.75)
        self.assertAlmostEqual(res["cpu.rest_ms"]["raw"]["value"], 0.15)
        self.assertAlmostEqual(res["cpu.origin_ms"]["tierfs"]["value"], 2.0)
        self.assertAlmostEqual(res["cpu.rest_ms"]["tierfs"]["value"], 2.0)
        self.assertAlmostEqual(res["cpu.busy"]["tierfs"]["value"], 100.0)
        md = report.markdown(meta, tools, res, notes)
        # 2 cores * 1000 / (2 + 2) ms = 500 objects/s = 0.5 of the 1,000 ceiling
        self.assertIn("allows at most 500 objects/s (0.50× the ceiling)", md)
        self.assertIn("CPU per object on the origin side", md)
        # a free file system: 2 * 1000 / (1.75 + 0.25) = 1,000 objects/s, the ceiling itself
        self.assertIn("could read at most 1,000 objects/s: 1.00× the ceiling", md)


if __name__ == "__main__":
    unittest.main()
