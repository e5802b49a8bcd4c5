"""A cache that somebody else may control, and terminal escapes. The tests
run as root, like redist in CI: a cache owned by `nobody` (uid 65534) or
writable by group/others is refused unless --shared-cache is given; a shared
cache is re-verified; planted .part and
lock symlinks are never followed; the first prefix shares no inode with the
cache; HOME unset never means a fixed /tmp path; holes survive the tree
cache; and no control character reaches stdout/stderr raw. Every case checks
the exit code, the one-line message, and that nothing outside the sandbox
changed (the victim file, and the modes of the directories above it)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tarfile
import time
import unittest

import support
from test_fetch import one_line_error, rewrite_artifact, tar_xz

LABEL, PLATFORM, CUDA = "9.27.0", "linux-x86_64", "12"
TOP = f"cudnn-{PLATFORM}-9.27.0.42_cuda{CUDA}-archive"
IGNORE = r"^\.redist(/|$)"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
NOBODY = 65534
EXIT_FILESYSTEM = 10


def setUpModule():
    os.umask(0o022)


def snapshot(path):
    return support.tree_snapshot(path, ignore=IGNORE) if os.path.isdir(path) else {}


def ancestors_state(path):
    """Mode and owner of every directory from `path` up to /: an escape that
    chmods or chowns above the sandbox shows here."""
    out = []
    path = os.path.abspath(path)
    while True:
        st = os.lstat(path)
        out.append((path, st.st_mode, st.st_uid, st.st_gid))
        parent = os.path.dirname(path)
        if parent == path:
            return out
        path = parent


def inodes_under(root):
    found = set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found


class HostileCache(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rec = support.find_artifact(support.load_manifest("cudnn", LABEL), "cudnn", PLATFORM, "cuda" + CUDA)
        cls.sha256 = rec["sha256"]
        cls.base = support.nginx_base_url()
        root = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        ref = os.path.join(root, "reference")
        support.run_tool("cudnn-fetch", LABEL, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", ref,
                         "--base-url", cls.base, "--no-cache", "--quiet", env=CLEAN_ENV, check=0)
        cls.ref = snapshot(ref)
        assert any(k.endswith("include/cudnn.h") for k in cls.ref), cls.ref

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.cache = os.path.join(self.scratch, "cache")
        self.blobs = os.path.join(self.cache, "blobs", "sha256")
        self.tree = os.path.join(self.cache, "trees", self.sha256)
        self.outside = os.path.join(self.scratch, "outside")
        os.makedirs(self.outside)
        self.victim = os.path.join(self.outside, "victim")
        with open(self.victim, "w") as f:
            f.write("precious\n")
        os.chmod(self.victim, 0o644)
        self.outside_before = (snapshot(self.outside), ancestors_state(self.outside))

    def tearDown(self):
        # Nothing outside the sandbox changed, whatever the case did.
        self.assertEqual((snapshot(self.outside), ancestors_state(self.outside)), self.outside_before)

    def fetch(self, name, *extra, cache=None):
        return support.run_tool("cudnn-fetch", LABEL, "--cuda", CUDA, "--platform", PLATFORM,
                                "--prefix", os.path.join(self.scratch, name), "--base-url", self.base,
                                "--cache-dir", cache or self.cache, *extra, env=CLEAN_ENV)

    def assert_installed(self, name, res):
        self.assertEqual(res.returncode, 0, support.describe(res))
        got = snapshot(os.path.join(self.scratch, name))
        self.assertEqual(got, self.ref, support.diff_snapshots(self.ref, got))

    def assert_refused(self, res, name, *needles):
        self.assertEqual(res.returncode, EXIT_FILESYSTEM, support.describe(res))
        line = one_line_error(self, res, "refusing the cache", "--shared-cache", *needles)
        self.assertFalse(os.path.exists(os.path.join(self.scratch, name, "include")), "nothing installed")
        return line

    def fill(self, *extra, name="first"):
        # The tree is kept by the cold install; a second install uses it (and
        # records its files anew: the commit's renames moved their ctime).
        self.assert_installed(name, self.fetch(name, *extra))
        self.assertTrue(os.path.isdir(self.tree), "the cold install keeps an extracted tree")
        self.assert_installed(name + "-again", self.fetch(name + "-again", *extra))
        self.assertTrue(os.path.isdir(self.tree), "the cache keeps an extracted tree")

    # ---- ownership ----------------------------------------------------------------------

    def test_cache_owned_by_another_user_is_refused(self):
        self.fill()
        for sub in ("", "blobs", "trees"):
            with self.subTest(dir=sub or "root"):
                path = os.path.join(self.cache, sub) if sub else self.cache
                os.chown(path, NOBODY, -1)
                before = snapshot(self.cache)
                res = self.fetch("second")
                self.assert_refused(res, "second", "owned by uid 65534", "chown")
                self.assertEqual(snapshot(self.cache), before, "the refused cache is not touched")
                self.assertEqual(os.lstat(path).st_uid, NOBODY, "never chown'ed back")
                os.chown(path, 0, -1)

    def test_group_or_other_writable_cache_is_refused(self):
        self.fill()
        for sub, mode in (("", 0o775), ("blobs/sha256", 0o757), ("documents", 0o777), ("locks", 0o1777)):
            with self.subTest(dir=sub or "root", mode=oct(mode)):
                path = os.path.join(self.cache, sub) if sub else self.cache
                os.chmod(path, mode)
                res = self.fetch("second")
                self.assert_refused(res, "second", "writable by group or others", "chmod go-w")
                self.assertEqual(stat.S_IMODE(os.lstat(path).st_mode), mode, "never chmod'ed behind the user's back")
                os.chmod(path, 0o755)
        self.assert_installed("third", self.fetch("third"))

    def test_symlinked_cache_subdirectory_is_refused_even_shared(self):
        os.makedirs(self.cache)
        os.symlink(self.outside, os.path.join(self.cache, "blobs"))
        for extra in ((), ("--shared-cache",)):
            res = self.fetch("second", *extra)
            self.assert_refused(res, "second", "symlink or not a directory")

    def test_new_cache_is_ours_even_with_a_group_writable_umask(self):
        old = os.umask(0o002)
        try:
            res = self.fetch("first")
        finally:
            os.umask(old)
        # (The prefix's own new directories follow the umask: that is the user's business.)
        self.assertEqual(res.returncode, 0, support.describe(res))
        for sub in ("", "blobs", "blobs/sha256", "trees", "documents", "locks"):
            st = os.lstat(os.path.join(self.cache, sub))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o755, sub)
        self.assert_installed("second", self.fetch("second"))

    # ---- --shared-cache -----------------------------------------------------------------

    def make_shared(self):
        for dirpath, dirs, _files in os.walk(self.cache):
            if dirpath == self.tree or dirpath.startswith(self.tree + os.sep):
                continue
            os.chmod(dirpath, 0o1777)
        os.chown(self.cache, NOBODY, -1)

    def test_shared_cache_is_used_and_reverified(self):
        self.fill("--shared-cache")
        self.make_shared()
        res = self.fetch("second", "--shared-cache", "--json")
        self.assert_installed("second", res)
        self.assertTrue(json.loads(res.stdout)["components"][0]["from_cache"])

    def edit_keeping_size_and_mtime(self, path):
        st = os.lstat(path)
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(data.replace(b"cudnn", b"CUDNN", 1))  # same size, new content
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = os.lstat(path)
        self.assertEqual((after.st_size, after.st_mtime_ns), (st.st_size, st.st_mtime_ns))

    def test_edited_tree_file_is_not_installed(self):
        for shared in (False, True):
            with self.subTest(shared=shared):
                extra = ("--shared-cache",) if shared else ()
                shutil.rmtree(self.cache, ignore_errors=True)
                self.fill(*extra, name=f"first-{shared}")
                if shared:
                    self.make_shared()
                self.edit_keeping_size_and_mtime(os.path.join(self.tree, "include", "cudnn.h"))
                name = f"edited-{shared}"
                self.assert_installed(name, self.fetch(name, *extra))

    def test_bad_symlink_target_in_tree_list_is_not_installed(self):
        self.fill()
        list_path = os.path.join(self.tree, ".redist-tree.json")
        with open(list_path) as f:
            doc = json.load(f)
        links = [e for e in doc["files"] if e["type"] == "symlink"]
        self.assertTrue(links, "the demo archive has symlinks")
        links[0]["target"] = os.path.relpath(self.victim, os.path.join(self.scratch, "x", "y"))
        for extra in ((), ("--shared-cache",)):
            # Planted before each run: a refused tree is rebuilt from the archive.
            if os.path.lexists(list_path):
                os.unlink(list_path)
            with open(list_path, "w") as f:
                json.dump(doc, f)
            name = "second" + "".join(extra)
            self.assert_installed(name, self.fetch(name, *extra))

    # ---- files in the cache --------------------------------------------------------------

    def test_planted_part_and_lock_symlinks_are_not_followed(self):
        os.makedirs(self.blobs)
        os.makedirs(os.path.join(self.cache, "locks"))
        os.makedirs(os.path.join(self.cache, "trees"))
        os.makedirs(os.path.join(self.cache, "documents"))
        part = os.path.join(self.blobs, self.sha256 + ".part")
        os.symlink(self.victim, part)
        dangling = os.path.join(self.outside, "created-through-lock")
        os.symlink(dangling, os.path.join(self.cache, "locks", self.sha256 + ".lock"))
        res = self.fetch("first")
        # The lock symlink is refused (one line, exit 10); nothing was written through either link.
        self.assertEqual(res.returncode, EXIT_FILESYSTEM, support.describe(res))
        one_line_error(self, res, "lock file")
        os.unlink(os.path.join(self.cache, "locks", self.sha256 + ".lock"))
        self.assert_installed("second", self.fetch("second"))
        self.assertFalse(os.path.lexists(part), "the .part was replaced by a file of ours, then published")
        blob = os.path.join(self.blobs, self.sha256)
        self.assertTrue(stat.S_ISREG(os.lstat(blob).st_mode))
        self.assertEqual(support.sha256_file(blob), self.sha256)

    def test_planted_blob_symlink_is_not_read(self):
        os.makedirs(self.blobs)
        fifo = os.path.join(self.outside, "fifo")
        os.mkfifo(fifo)
        os.symlink(fifo, os.path.join(self.blobs, self.sha256))
        self.outside_before = (snapshot(self.outside), ancestors_state(self.outside))
        self.assert_installed("first", self.fetch("first"))  # no hang on the FIFO
        self.assertTrue(stat.S_ISREG(os.lstat(os.path.join(self.blobs, self.sha256)).st_mode))

    def test_only_the_prefix_that_recorded_the_tree_shares_its_inodes(self):
        self.fill()
        # The cold install recorded the tree by hard links to its stage: no
        # byte copied. An edit there moves the ctime, and the tree is then
        # re-hashed before use (test_cache: an edit in the first prefix).
        self.assertTrue(inodes_under(os.path.join(self.scratch, "first")) & inodes_under(self.tree))
        prefix_inodes = inodes_under(os.path.join(self.scratch, "first-again"))  # from the tree
        self.assertTrue(prefix_inodes)
        self.assertEqual(prefix_inodes & inodes_under(self.cache), set())
        for mode in ("auto", "copy"):
            name = "warm-" + mode
            self.assert_installed(name, self.fetch(name, "--link-mode", mode))
            self.assertEqual(inodes_under(os.path.join(self.scratch, name)) & inodes_under(self.cache), set())
        # Only when asked for.
        self.assert_installed("linked", self.fetch("linked", "--link-mode", "hardlink"))
        self.assertTrue(inodes_under(os.path.join(self.scratch, "linked")) & inodes_under(self.tree))

    def test_home_unset_is_never_a_fixed_tmp_path(self):
        env = dict(CLEAN_ENV, HOME=None, XDG_CACHE_HOME=None)
        res = support.run_tool("redist", "cache", "dir", env=env)
        self.assertEqual(res.returncode, 0, support.describe(res))
        home = pwd.getpwuid(os.geteuid()).pw_dir
        self.assertEqual(res.stdout.strip(), os.path.join(home, ".cache", "redist"))
        self.assertFalse(res.stdout.startswith("/tmp"), res.stdout)
        self.assertFalse(os.path.exists("/tmp/redist-cache"))

    # ---- holes -------------------------------------------------------------------------

    def test_sparse_file_keeps_its_holes_through_the_tree_cache(self):
        mirror = support.copy_mirror(os.path.join(self.scratch, "mirror"), ["cudnn"])
        src = os.path.join(self.scratch, "src")
        size = 32 << 20
        os.makedirs(os.path.join(src, TOP, "lib"))
        with open(os.path.join(src, TOP, "lib", "sparse.bin"), "wb") as f:
            f.write(b"head")
            f.seek(size - 4)
            f.write(b"tail")
        with open(os.path.join(src, TOP, "LICENSE"), "w") as f:
            f.write("license\n")
        tar = subprocess.run(["tar", "-C", src, "--sparse", "--format=gnu", "-cf", "-", TOP],
                             stdout=subprocess.PIPE, check=True).stdout
        data = subprocess.run(["xz", "-1", "-T1", "-c"], input=tar, stdout=subprocess.PIPE, check=True).stdout
        rewrite_artifact(mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", data)
        base = support.file_base_url(mirror)

        def fetch(name, *extra):
            res = support.run_tool("cudnn-fetch", LABEL, "--cuda", CUDA, "--platform", PLATFORM, "--prefix",
                                   os.path.join(self.scratch, name), "--base-url", base, "--cache-dir", self.cache,
                                   *extra, env=CLEAN_ENV)
            self.assertEqual(res.returncode, 0, support.describe(res))
            st = os.lstat(os.path.join(self.scratch, name, "lib", "sparse.bin"))
            self.assertEqual(st.st_size, size)
            return st.st_blocks * 512

        if fetch("cold") >= size // 2:
            self.skipTest("the unpacker writes this sparse entry densely (not the cache's doing)")
        self.assertLess(fetch("again"), size // 2)  # from the blob; keeps the tree
        self.assertTrue(os.path.isdir(self.tree.replace(self.sha256, hashlib.sha256(data).hexdigest())))
        for mode in ("auto", "copy"):
            self.assertLess(fetch("warm-" + mode, "--link-mode", mode), size // 2, mode)
        self.assertLess(fetch("warm-shared", "--shared-cache"), size // 2)


class TerminalEscapes(unittest.TestCase):
    """No control character from a manifest, an archive or a URL reaches
    the terminal raw, whatever the exit code."""

    EVIL = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e"

    @classmethod
    def setUpClass(cls):
        cls.root = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.mirror = support.copy_mirror(os.path.join(cls.root, "mirror"), ["cudnn"])

    def assert_inert(self, res):
        for stream in (res.stdout, res.stderr):
            for ch in stream:
                if ch in "\n":
                    continue
                self.assertFalse(ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f or ch in "\u202e\ufffd",
                                 f"raw control character {ch!r}\n{support.describe(res)}")
        self.assertTrue(res.stdout.strip() or res.stderr.strip(), "the run says something")

    def test_component_name_with_escapes(self):
        mirror = support.copy_mirror(os.path.join(self.root, "m-component"), ["cudnn"])
        path = support.manifest_path("cudnn", LABEL, mirror)
        doc = support.load_json(path)
        doc["samples" + self.EVIL] = doc.pop("cudnn_samples")
        support.save_json(path, doc)
        for args in (["fetch", "cudnn", LABEL], ["show", "cudnn", LABEL]):
            res = support.run_tool("redist", *args, "--platform", PLATFORM, "--cuda", CUDA, "--base-url",
                                   support.file_base_url(mirror),
                                   *(["--prefix", os.path.join(self.root, "p-component"), "--no-cache"]
                                     if args[0] == "fetch" else []), env=CLEAN_ENV)
            self.assert_inert(res)

    def test_archive_entry_name_with_escapes(self):
        mirror = support.copy_mirror(os.path.join(self.root, "m-entry"), ["cudnn"])
        data = tar_xz([(f"{TOP}/../{self.EVIL}x", "file", 0o644, b"x"), (f"{TOP}/LICENSE", "file", 0o644, b"l")])
        rewrite_artifact(mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", data)
        res = support.run_tool("cudnn-fetch", LABEL, "--platform", PLATFORM, "--cuda", CUDA, "--base-url",
                               support.file_base_url(mirror), "--prefix", os.path.join(self.root, "p-entry"),
                               "--no-cache", env=CLEAN_ENV)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assert_inert(res)
        one_line_error(self, res)

    def test_url_with_escapes(self):
        res = support.run_tool("cudnn-fetch", LABEL, "--platform", PLATFORM, "--cuda", CUDA, "--base-url",
                               "file:///nonexistent/" + self.EVIL, "--prefix", os.path.join(self.root, "p-url"),
                               "--no-cache", env=CLEAN_ENV)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assert_inert(res)
        one_line_error(self, res)


if __name__ == "__main__":
    unittest.main()
