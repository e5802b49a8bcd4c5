"""Segmented downloads (lib/segmented_download, issue 11 item 3) against the
real nginx of the e2e fixture, through tests/tools/segmented_get (fetch's
integration is separate). The biggest archive of the demo mirror is cut into
small segments, so that a few hundred KiB exercise many ranges. Each test
checks the SHA-256 of the in-order stream and of the spool, and nginx's own
count of the body bytes it sent ($body_bytes_sent in the access log).
The range-ignoring fallback and injected faults are covered against the
fault server in tests/segmented_download_test.cpp."""

import glob
import hashlib
import json
import os
import subprocess
import time
import unittest

import support

SEGMENTS = ["--connections", "4", "--min-total", "1", "--min-segment", "16384", "--max-segment", "32768"]


def largest_archive():
    paths = glob.glob(os.path.join(support.mirror_dir(), "**", "*.tar.xz"), recursive=True)
    return max(paths, key=os.path.getsize)


class SegmentedNginx(unittest.TestCase):
    def setUp(self):
        self.tool = support.tool_path("segmented_get")
        if not os.access(self.tool, os.X_OK):
            self.skipTest("segmented_get is not built")
        self.dir = support.make_scratch_dir(self.id())
        self.archive = largest_archive()
        with open(self.archive, "rb") as f:
            self.data = f.read()
        self.sha = hashlib.sha256(self.data).hexdigest()
        rel = os.path.relpath(self.archive, support.mirror_dir())
        self.url = support.nginx_base_url() + "/" + rel
        self.part = os.path.join(self.dir, "blob.part")

    def get(self, *extra):
        res = subprocess.run([self.tool, self.url, str(len(self.data)), "--part", self.part, *SEGMENTS, *extra],
                             env=support.tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=120)
        return res

    def entries(self, mark):
        path = "/" + self.url.split("/", 3)[3]
        return [e for e in support.access_log_since(mark) if e["uri"] == path]

    def test_reassembly(self):
        mark = support.access_log_mark()
        res = self.get()
        self.assertEqual(res.returncode, 0, res.stderr)
        out = json.loads(res.stdout)
        self.assertTrue(out["segmented"])
        self.assertEqual(out["sha256"], self.sha)
        self.assertEqual(support.sha256_file(self.part), self.sha)
        self.assertFalse(os.path.exists(self.part + ".segments"))
        log = self.entries(mark)
        self.assertEqual(len(log), out["requests"])
        self.assertGreater(len(log), 4)
        self.assertTrue(all(e["status"] == "206" and e["range"].startswith("bytes=") for e in log), log)
        # Every byte was sent exactly once.
        self.assertEqual(sum(int(e["body_bytes_sent"]) for e in log), len(self.data))

    def test_kill_then_resume(self):
        mark = support.access_log_mark()
        # Killed at the first byte delivered: on this unthrottled loopback the
        # network is far ahead of delivery, so later kills often find the
        # whole file fetched (the fault-server unit test pins a partial state).
        killed = self.get("--abort-after", "1")
        self.assertEqual(killed.returncode, 9, killed.stderr)  # _exit(9) in the middle: no cleanup ran
        self.assertTrue(os.path.exists(self.part + ".segments"))
        time.sleep(0.5)  # nginx logs the requests the dead process left
        first = sum(int(e["body_bytes_sent"]) for e in self.entries(mark))
        mark = support.access_log_mark()
        res = self.get()
        self.assertEqual(res.returncode, 0, res.stderr)
        out = json.loads(res.stdout)
        self.assertEqual(out["sha256"], self.sha)
        self.assertEqual(support.sha256_file(self.part), self.sha)
        self.assertGreaterEqual(out["reused"], 16384)  # at least the first segment
        sent = sum(int(e["body_bytes_sent"]) for e in self.entries(mark))
        # The resumed run transferred only what the first one had not kept.
        self.assertLess(sent, len(self.data))
        self.assertEqual(sent + out["reused"], len(self.data))
        self.assertGreater(first, 0)
        self.assertFalse(os.path.exists(self.part + ".segments"))

    def test_one_connection(self):
        mark = support.access_log_mark()
        res = self.get("--connections", "1")
        self.assertEqual(res.returncode, 0, res.stderr)
        out = json.loads(res.stdout)
        self.assertFalse(out["segmented"])
        self.assertEqual(out["sha256"], self.sha)
        log = self.entries(mark)
        self.assertEqual(len(log), 1)
        self.assertEqual(log[0]["status"], "200")


if __name__ == "__main__":
    unittest.main()
