"""`redist mirror` on the shared transfer code (sources.hpp, the run budget),
against tests/fixtures/fault_server.py: a dropped connection is resumed with a
Range request, a killed run is resumed by the next run, Retry-After is
honoured, and --jobs N keeps N artifacts in flight. Every test checks the
mirrored bytes and the server's own byte counts."""

import os
import time
import unittest

import support

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None,
             "REDIST_DEBUG_PAUSE": None}


def selected(cuda=None, components=None):
    """[(relative_path, size, sha256)] of LABEL on PLATFORM, in manifest order."""
    out = []
    for comp, platform, variant, rec in support.iter_artifacts(support.load_manifest("cudnn", LABEL)):
        if platform != PLATFORM or (components and comp not in components):
            continue
        if cuda and variant and variant != "cuda" + cuda:
            continue
        if rec["relative_path"] not in [o[0] for o in out]:
            out.append((rec["relative_path"], int(rec["size"]), rec["sha256"]))
    return out


class MirrorOverFaultServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.root = os.path.join(cls.dir, "root")
        support.copy_mirror(os.path.join(cls.root, "base"), products=["cudnn"])
        cls.server = support.FaultServer(cls.root, os.path.join(cls.dir, "server"))
        cls.base = cls.server.url("/base")
        cls.one = selected(cuda="12", components=["cudnn"])
        assert len(cls.one) == 1, cls.one
        cls.rel, cls.size, cls.sha = cls.one[0]
        cls.path = "/base/cudnn/redist/" + cls.rel

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.dest = os.path.join(self.scratch, "mirror")
        self.redist = os.path.join(self.dest, "cudnn", "redist")
        self.server.set_faults({})
        self.server.reset()

    def args(self, *extra, cuda="12", component="cudnn"):
        out = ["mirror", "cudnn", LABEL, "--dest", self.dest, "--base-url", self.base, "--platform", PLATFORM]
        if cuda:
            out += ["--cuda", cuda]
        if component:
            out += ["--component", component]
        return out + list(extra)

    def mirror(self, *extra, check=0, **kw):
        return support.run_tool("redist", *self.args(*extra, **kw), env=CLEAN_ENV, check=check, timeout=120)

    def assert_mirrored(self):
        path = os.path.join(self.redist, self.rel)
        self.assertEqual(os.path.getsize(path), self.size)
        self.assertEqual(support.sha256_file(path), self.sha)
        leftovers = [f for f in os.listdir(os.path.dirname(path)) if ".part." in f]
        self.assertEqual(leftovers, [])

    def test_dropped_connection_is_resumed_with_a_range_request(self):
        cut = self.size // 3
        self.server.set_faults({self.path: {"drop_after": cut, "times": 1}})
        res = self.mirror()
        self.assert_mirrored()
        log = self.server.log(self.path)
        self.assertEqual([e["range"] for e in log], [None, f"bytes={cut}-"], log)
        # Every byte crossed the wire once: the second request sent only the rest.
        self.assertEqual(sum(e["bytes_sent"] for e in log), self.size, log)
        self.assertIn("retrying in", res.stderr)

    def test_a_killed_run_is_resumed_by_the_next_run(self):
        # Slow the body down after a first part, so the kill lands mid-download.
        self.server.set_faults({self.path: {"stall_after": self.size // 2 + 1, "stall_seconds": 30}})
        env = dict(CLEAN_ENV, REDIST_DEBUG_PAUSE="mid-download")
        first = support.BackgroundTool("redist", *self.args(), env=env)
        try:
            self.assertTrue(first.wait_for_stderr("paused at mid-download", timeout=60), first.stderr)
        finally:
            first.kill()
        parts = [f for f in os.listdir(os.path.dirname(os.path.join(self.redist, self.rel))) if ".part." in f]
        self.assertEqual(len(parts), 1, parts)
        kept = os.path.getsize(os.path.join(os.path.dirname(os.path.join(self.redist, self.rel)), parts[0]))
        self.assertGreater(kept, 0)
        self.assertLess(kept, self.size)

        self.server.log()  # waits until the killed run's request has settled
        self.server.set_faults({})
        self.server.reset()
        self.mirror()
        self.assert_mirrored()
        log = self.server.log(self.path)
        self.assertEqual([e["range"] for e in log], [f"bytes={kept}-"], log)
        self.assertEqual(log[0]["status"], 206)
        self.assertEqual(log[0]["bytes_sent"], self.size - kept, log)

    def test_retry_after_is_honoured(self):
        self.server.set_faults({self.path: {"status": 503, "retry_after": 1, "times": 1}})
        started = time.monotonic()
        res = self.mirror()
        self.assertGreaterEqual(time.monotonic() - started, 1.0)
        self.assert_mirrored()
        self.assertEqual([e["status"] for e in self.server.log(self.path)], [503, 200])
        self.assertIn("Retry-After", res.stderr)

    def test_a_missing_mirror_falls_back_to_the_base(self):
        # /m1 does not exist on the server: every request there is a 404.
        res = self.mirror("--mirror", self.server.url("/m1"))
        self.assert_mirrored()
        paths = [(e["path"], e["status"]) for e in self.server.log() if e["path"].endswith(self.rel)]
        self.assertEqual(paths, [("/m1/cudnn/redist/" + self.rel, 404), (self.path, 200)])
        self.assertIn("trying the next source", res.stderr)

    def test_wrong_bytes_leave_no_part_file(self):
        self.server.set_faults({self.path: {"corrupt_byte_at": 100}})
        res = self.mirror(check=5)
        self.assertIn("sha256 mismatch", res.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.redist, self.rel)))
        leftovers = [f for f in os.listdir(os.path.dirname(os.path.join(self.redist, self.rel))) if ".part." in f]
        self.assertEqual(leftovers, [])

    def test_jobs_keeps_several_artifacts_in_flight(self):
        every = selected()
        self.assertGreaterEqual(len(every), 2, every)
        slow = "/base/cudnn/redist/" + every[0][0]
        # The first artifact stalls for 3 s. One at a time, it finishes first;
        # with --jobs 2 another artifact finishes while it stalls.
        self.server.set_faults({slow: {"stall_after": 1000, "stall_seconds": 3}})
        self.mirror("--jobs", "2", cuda=None, component=None)
        done = [e["path"] for e in self.server.log() if e["path"].startswith("/base/cudnn/redist/")
                and not e["path"].endswith((".json", "/"))]
        self.assertEqual(sorted(done), sorted("/base/cudnn/redist/" + r for r, _, _ in every))
        self.assertNotEqual(done[0], slow, done)
        for rel, size, sha in every:
            path = os.path.join(self.redist, rel)
            self.assertEqual(os.path.getsize(path), size, rel)
            self.assertEqual(support.sha256_file(path), sha, rel)

        # The control: --jobs 1 into a fresh mirror finishes the slow one first.
        self.dest = os.path.join(self.scratch, "mirror-serial")
        self.server.set_faults({slow: {"stall_after": 1000, "stall_seconds": 3}})
        self.server.reset()
        self.mirror("--jobs", "1", cuda=None, component=None)
        done = [e["path"] for e in self.server.log() if e["path"].startswith("/base/cudnn/redist/")
                and not e["path"].endswith((".json", "/"))]
        self.assertEqual(done[0], slow, done)


if __name__ == "__main__":
    unittest.main()
