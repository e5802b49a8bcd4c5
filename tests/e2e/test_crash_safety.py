"""Crash safety end to end: SIGKILL at each REDIST_DEBUG_PAUSE point of an
upgrade (9.8.0 -> 9.27.0), two fetches into one prefix, and a full disk.
A killed run leaves the old tree exactly (or, killed mid-commit, a journal
the next writer rolls forward); the next run gives exactly the new tree and
leaves no stages or journal behind."""

import os
import subprocess
import unittest

import support

PLATFORM = "linux-x86_64"
CUDA = "12"
OLD, NEW = "9.8.0", "9.27.0"
IGNORE = r"^\.redist(/|$)"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
PAUSED = "redist-debug: paused at "


def snapshot(prefix):
    return support.tree_snapshot(prefix, ignore=IGNORE) if os.path.isdir(prefix) else {}


def fetch_args(label, prefix, cache, *extra):
    return [label, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", prefix,
            "--base-url", support.nginx_base_url(), "--cache-dir", cache, *extra]


class CrashCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.refs = {}
        for label in (OLD, NEW):
            p = os.path.join(d, label)
            support.run_tool("cudnn-fetch", *fetch_args(label, p, "/nonexistent", "--no-cache", "--quiet"),
                             env=CLEAN_ENV, check=0)
            cls.refs[label] = snapshot(p)
        assert cls.refs[OLD] != cls.refs[NEW]
        rec = support.find_artifact(support.load_manifest("cudnn", NEW), "cudnn", PLATFORM, "cuda" + CUDA)
        cls.new_uri = "/cudnn/redist/" + rec["relative_path"]

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.cache = os.path.join(self.scratch, "cache")

    def fetch(self, label, *extra, check=None):
        return support.run_tool("cudnn-fetch", *fetch_args(label, self.prefix, self.cache, *extra),
                                env=CLEAN_ENV, check=check)

    def start(self, label, *extra, pause=None):
        env = dict(CLEAN_ENV)
        if pause:
            env["REDIST_DEBUG_PAUSE"] = pause
        tool = support.BackgroundTool("cudnn-fetch", *fetch_args(label, self.prefix, self.cache, *extra), env=env)
        self.addCleanup(tool.kill)
        return tool

    def assert_tree(self, label):
        got = snapshot(self.prefix)
        self.assertEqual(got, self.refs[label], f"expected the {label} tree:\n" +
                         support.diff_snapshots(self.refs[label], got))

    def assert_clean_state_dir(self):
        """No journal, no stages left in .redist/, nothing beside the prefix."""
        state = os.path.join(self.prefix, ".redist")
        self.assertFalse(os.path.exists(os.path.join(state, "transaction.json")))
        staging = os.path.join(state, "staging")
        self.assertEqual(os.listdir(staging) if os.path.isdir(staging) else [], [])
        self.assertEqual(sorted(set(os.listdir(state)) - {"lock", "receipts", "staging"}), [],
                         os.listdir(state))
        self.assertEqual(sorted(os.listdir(os.path.dirname(self.prefix))), ["cache", "prefix"])

    def install_old(self):
        self.fetch(OLD, "--quiet", check=0)
        self.assert_tree(OLD)

    def kill_at(self, point):
        tool = self.start(NEW, pause=point)
        self.assertTrue(tool.wait_for_stderr(PAUSED + point, timeout=60),
                        f"never paused at {point}:\n{tool.stderr}")
        tool.kill()
        self.assertEqual(tool.proc.returncode, -9)


class KillDuringUpgrade(CrashCase):
    def check_kill_leaves_old_tree(self, point):
        self.install_old()
        self.kill_at(point)
        self.assert_tree(OLD)
        res = self.fetch(NEW)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assert_tree(NEW)
        self.assert_clean_state_dir()

    def test_mid_download(self):
        self.check_kill_leaves_old_tree("mid-download")

    def test_after_unpack(self):
        self.check_kill_leaves_old_tree("after-unpack")

    def test_before_commit(self):
        self.check_kill_leaves_old_tree("before-commit")

    def test_mid_commit_is_rolled_forward_by_the_next_fetch(self):
        self.install_old()
        self.kill_at("mid-commit")
        self.assertTrue(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))
        mid = snapshot(self.prefix)
        self.assertNotEqual(mid, self.refs[OLD], "mid-commit: half of the renames should be done")
        self.assertNotEqual(mid, self.refs[NEW], "mid-commit: half of the renames should be done")
        # Rolled forward, the receipts say 9.27.0 is installed: nothing to download
        # (no cache either, so a roll-back plus a new install would show up).
        mark = support.access_log_mark()
        res = self.fetch(NEW, "--no-cache")
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assert_tree(NEW)
        self.assert_clean_state_dir()
        self.assertEqual([e for e in support.access_log_since(mark) if e["uri"] == self.new_uri], [])
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, env=CLEAN_ENV)
        self.assertEqual(res.returncode, 0, support.describe(res))

    def test_mid_commit_is_rolled_forward_by_remove(self):
        self.install_old()
        self.kill_at("mid-commit")
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--quiet", env=CLEAN_ENV)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(snapshot(self.prefix), {})
        self.assert_clean_state_dir()
        self.assertEqual(os.listdir(os.path.join(self.prefix, ".redist", "receipts")), [])


class FailedCommit(CrashCase):
    """A commit that fails as on a full disk (REDIST_DEBUG_FAIL makes one
    step fail with ENOSPC): before anything was moved the old state is back
    at once; after, the next writer completes it without help."""

    def fail_at(self, point, label=NEW):
        res = support.run_tool("cudnn-fetch", *fetch_args(label, self.prefix, self.cache),
                               env=dict(CLEAN_ENV, REDIST_DEBUG_FAIL=point))
        self.assertEqual(res.returncode, 10, support.describe(res))
        self.assertIn("no space", res.stderr.lower())
        return res

    def verify(self, code):
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, env=CLEAN_ENV)
        self.assertEqual(res.returncode, code, support.describe(res))
        return res

    def test_journal_write_fails(self):
        self.install_old()
        self.fail_at("journal-write")
        self.assert_tree(OLD)
        self.assert_clean_state_dir()
        self.assertNotIn("interrupted commit", self.verify(0).stderr)
        self.fetch(NEW, "--quiet", check=0)
        self.assert_tree(NEW)
        self.assert_clean_state_dir()

    def test_mkdir_fails(self):
        # Into an empty prefix: the commit's first step creates directories.
        self.fail_at("commit-mkdir")
        self.assertEqual(snapshot(self.prefix), {})
        self.assert_clean_state_dir()
        self.assertEqual(os.listdir(os.path.join(self.prefix, ".redist", "receipts")), [])
        self.fetch(NEW, "--quiet", check=0)
        self.assert_tree(NEW)
        self.assert_clean_state_dir()

    def test_move_fails_half_way(self):
        self.install_old()
        self.fail_at("mid-commit")
        self.assertTrue(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, env=CLEAN_ENV)
        self.assertIn(res.returncode, (0, 5), support.describe(res))  # files moved so far differ
        self.assertIn("interrupted commit", res.stderr)
        # The next writer completes it: the receipts then say NEW is installed.
        self.fetch(NEW, "--quiet", check=0)
        self.assert_tree(NEW)
        self.assert_clean_state_dir()
        self.verify(0)


class MountInPrefix(CrashCase):
    """A directory of the prefix on another file system: rename(2) cannot
    move files there, so the commit is refused before its journal exists."""

    def test_mount_point_inside_the_prefix(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a tmpfs")
        include = os.path.join(self.prefix, "include")
        os.makedirs(include)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", include],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs: {res.stdout.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", include], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
        res = self.fetch(NEW)
        self.assertEqual(res.returncode, 10, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn(include, lines[0])
        self.assertIn("file system", lines[0])
        self.assertEqual(snapshot(self.prefix), {"include": snapshot(self.prefix)["include"]})
        self.assertEqual(os.listdir(include), [])
        self.assert_clean_state_dir()
        self.assertEqual(os.listdir(os.path.join(self.prefix, ".redist", "receipts")), [])
        # Not wedged: with the mount gone, the same fetch works.
        subprocess.run(["umount", include], check=True)
        self.fetch(NEW, "--quiet", check=0)
        self.assert_tree(NEW)
        self.assert_clean_state_dir()


class PrefixLock(CrashCase):
    def test_second_fetch_waits_for_the_first(self):
        self.install_old()
        first = self.start(NEW, pause="before-commit")
        self.assertTrue(first.wait_for_stderr(PAUSED + "before-commit", timeout=60), first.stderr)
        second = self.start(NEW)
        self.assertTrue(second.wait_for_stderr("waiting for lock", timeout=30), second.stderr)
        self.assertIsNone(second.proc.poll(), "the second fetch must block while the first holds the lock")
        self.assert_tree(OLD)
        first.kill()
        res = second.wait(timeout=60)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(res.stderr.count("waiting for lock"), 1, res.stderr)
        self.assert_tree(NEW)
        self.assert_clean_state_dir()


class FullDisk(CrashCase):
    """The prefix on a tiny tmpfs, the cache elsewhere: an archive that does
    not fit fails with exit 10 and leaves the prefix as it was."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        self.small = os.path.join(self.scratch, "small")
        os.makedirs(self.small)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", self.small],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs: {res.stdout.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", self.small], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
        self.prefix = os.path.join(self.small, "prefix")

    def cuda(self, component, *extra):
        return support.run_tool("redist", "fetch", "cuda", "12.9.1", "--component", component,
                                "--platform", PLATFORM, "--prefix", self.prefix,
                                "--base-url", support.nginx_base_url(), "--cache-dir", self.cache,
                                *extra, env=CLEAN_ENV)

    def test_disk_full(self):
        manifest = support.load_manifest("cuda", "12.9.1")
        big = support.find_artifact(manifest, "libcublas", PLATFORM)
        # Sanity: the archive does not fit in what is left, its unpacked size
        # (xz -l) being larger than the whole file system.
        res = self.cuda("cuda_cccl", "--quiet")
        self.assertEqual(res.returncode, 0, support.describe(res))
        before = support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$")
        self.assertIn("include/cuda/std/version", before)
        st = os.statvfs(self.small)
        xz = subprocess.run(["xz", "--robot", "-l", support.artifact_path("cuda", big["relative_path"])],
                            stdout=subprocess.PIPE, text=True, check=True).stdout
        unpacked = int(next(l for l in xz.splitlines() if l.startswith("totals")).split("\t")[4])
        self.assertGreater(unpacked, st.f_bavail * st.f_frsize, "the test needs an archive that does not fit")

        res = self.cuda("libcublas", "--quiet")
        self.assertEqual(res.returncode, 10, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        # The free-space preflight (at least 3/2 of the archive once
        # unpacked) refuses it before any byte is fetched; an archive that
        # passes it and still fills the disk while unpacking fails with
        # ENOSPC ("no space") the same way.
        self.assertIn("not enough free space", lines[0].lower())
        self.assertIn(self.prefix, lines[0])
        after = support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$")
        self.assertEqual(after, before, support.diff_snapshots(before, after))
        staging = os.path.join(self.prefix, ".redist", "staging")
        self.assertEqual(os.listdir(staging) if os.path.isdir(staging) else [], [])
        self.assertEqual(os.listdir(self.small), ["prefix"])
        # Refused before downloading: nothing of it reached the cache.
        self.assertFalse(os.path.exists(os.path.join(self.cache, "blobs", "sha256", big["sha256"])))


if __name__ == "__main__":
    unittest.main()
