"""The prefix lock: `redist verify` takes it shared, so beside a running
commit it waits for the writer (which holds it exclusively) instead of
reading half a commit and calling a live commit interrupted; and the next
writer, holding it exclusively, removes the temp files killed runs left in
.redist/ without following a symlink."""

import os
import unittest

import support

PLATFORM = "linux-x86_64"
OLD, NEW = "9.8.0", "9.27.0"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
PAUSE_SECONDS = 15  # long enough for verify to start and meet the lock on a loaded machine


class VerifyBesideACommit(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.cache = os.path.join(self.scratch, "cache")

    def fetch_args(self, label):
        return [label, "--cuda", "12", "--platform", PLATFORM, "--prefix", self.prefix, "--base-url",
                support.nginx_base_url(), "--cache-dir", self.cache, "--quiet"]

    def test_verify_waits_for_the_commit_then_reports_clean(self):
        support.run_tool("cudnn-fetch", *self.fetch_args(OLD), env=CLEAN_ENV, check=0)
        env = dict(CLEAN_ENV, REDIST_DEBUG_PAUSE="mid-commit", REDIST_DEBUG_PAUSE_SECONDS=str(PAUSE_SECONDS))
        writer = support.BackgroundTool("cudnn-fetch", *self.fetch_args(NEW), env=env)
        self.addCleanup(writer.kill)
        self.assertTrue(writer.wait_for_stderr("redist-debug: paused at mid-commit", timeout=60), writer.stderr)
        # Half of the renames are done and the journal is there.
        self.assertTrue(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))

        verify = support.BackgroundTool("redist", "verify", "--prefix", self.prefix, env=CLEAN_ENV)
        self.addCleanup(verify.kill)
        self.assertTrue(verify.wait_for_stderr("waiting for lock", timeout=PAUSE_SECONDS - 5),
                        "verify did not wait for the commit:\n" + verify.stdout + verify.stderr)
        self.assertIsNone(verify.proc.poll(), "verify must block while the commit holds the lock")

        done = writer.wait(timeout=120)
        self.assertEqual(done.returncode, 0, support.describe(done))
        res = verify.wait(timeout=120)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertIn("all match their receipts", res.stdout)
        self.assertNotIn("interrupted", res.stderr)
        self.assertEqual(res.stderr.count("waiting for lock"), 1, res.stderr)

    def test_a_dead_writers_journal_is_reported_as_interrupted(self):
        support.run_tool("cudnn-fetch", *self.fetch_args(OLD), env=CLEAN_ENV, check=0)
        env = dict(CLEAN_ENV, REDIST_DEBUG_PAUSE="mid-commit")
        writer = support.BackgroundTool("cudnn-fetch", *self.fetch_args(NEW), env=env)
        self.addCleanup(writer.kill)
        self.assertTrue(writer.wait_for_stderr("redist-debug: paused at mid-commit", timeout=60), writer.stderr)
        writer.kill()
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, env=CLEAN_ENV)
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("an interrupted commit is pending", res.stderr)
        self.assertNotIn("waiting for lock", res.stderr)



class LeftoversInThePrefix(unittest.TestCase):
    def test_the_next_writer_removes_dead_temp_files(self):
        scratch = support.make_scratch_dir(self.id())
        prefix = os.path.join(scratch, "prefix")
        args = [OLD, "--cuda", "12", "--platform", PLATFORM, "--prefix", prefix, "--base-url",
                support.nginx_base_url(), "--no-cache", "--quiet"]
        support.run_tool("cudnn-fetch", *args, env=CLEAN_ENV, check=0)
        state = os.path.join(prefix, ".redist")
        # What a run killed while writing its journal leaves, and a symlink
        # under such a name (and a directory) pointing at something that must stay.
        outside = os.path.join(scratch, "outside")
        os.makedirs(os.path.join(outside, "keep"))
        with open(os.path.join(outside, "keep", "file"), "w") as f:
            f.write("mine")
        with open(os.path.join(state, "transaction.json.tmp.999999.0"), "w") as f:
            f.write('{"half a journal"')
        os.symlink(os.path.join(outside, "keep"), os.path.join(state, "transaction.json.tmp.999999.1"))
        os.makedirs(os.path.join(state, "transaction.json.tmp.999999.2"))
        os.symlink(os.path.join(outside, "keep"), os.path.join(state, "transaction.json.tmp.999999.2", "link"))
        support.run_tool("cudnn-fetch", *args, env=CLEAN_ENV, check=0)
        self.assertEqual(sorted(os.listdir(state)), ["lock", "receipts", "staging"])
        with open(os.path.join(outside, "keep", "file")) as f:
            self.assertEqual(f.read(), "mine")


if __name__ == "__main__":
    unittest.main()
