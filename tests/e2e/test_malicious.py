"""Hostile archives: each one is built here with Python's tarfile, put into a
copy of the demo mirror with a CORRECT sha256 and size (so only the unpacker
stands between it and the disk), and fetched over a prefix that already holds
an install. Each must fail with exit code 7 and a one-line error naming the
entry, write nothing outside the stage, leave the prefix exactly as it was,
and leave no stage behind."""

from __future__ import annotations

import os
import shutil
import unittest

import support
from test_fetch import BOOKKEEPING, fetch, installed, one_line_error, rewrite_artifact, staging_leftovers, tar_xz

LABEL, OLD, PLATFORM, CUDA = "9.27.0", "9.10.1", "linux-x86_64", "12"
TOP = f"cudnn-{PLATFORM}-9.27.0.42_cuda{CUDA}-archive"


def setUpModule():
    os.umask(0o022)


class MaliciousArchives(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.mirror = support.copy_mirror(os.path.join(cls.root, "mirror"), ["cudnn"])
        cls.base = support.file_base_url(cls.mirror)
        # The prior install, made once and copied for each case.
        cls.pristine = os.path.join(cls.root, "pristine")
        fetch(OLD, "--prefix", cls.pristine, "--base-url", support.nginx_base_url(), "--platform", PLATFORM,
              "--cuda", CUDA, tool="cudnn-fetch", check=0)

    def setUp(self):
        # The prefix sits deep in the case's directory, so any "../" escape
        # (from the prefix or from the stage in prefix/.redist/staging/<x>/)
        # still lands inside `self.case`, where the test can look for it.
        name = self.id().rsplit(".", 1)[1]
        self.case = os.path.join(self.root, name)
        support.rm_tree(self.case)
        self.outside = os.path.join(self.case, "outside")  # targets of escapes
        os.makedirs(self.outside)
        self.prefix = os.path.join(self.case, "a", "b", "c", "prefix")
        os.makedirs(os.path.dirname(self.prefix))
        shutil.copytree(self.pristine, self.prefix, symlinks=True)
        self.cwd = os.path.join(self.case, "cwd")
        os.makedirs(self.cwd)

    def fetch_members(self, members):
        data = tar_xz(members)
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", data)
        before = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)
        outside_before = self.outside_files()
        res = fetch(LABEL, "--prefix", self.prefix, "--base-url", self.base, "--platform", PLATFORM,
                    "--cuda", CUDA, tool="cudnn-fetch", cwd=self.cwd)
        return res, before, outside_before

    def outside_files(self):
        """Every path under the case directory that is not the prefix."""
        out = set()
        for dirpath, dirnames, filenames in os.walk(self.case):
            if os.path.abspath(dirpath) == os.path.abspath(self.prefix):
                dirnames[:] = []
                continue
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                if os.path.abspath(p) != os.path.abspath(self.prefix):
                    out.add(os.path.relpath(p, self.case))
        return out

    def assertRejected(self, members, entry, forbidden=()):
        res, before, outside_before = self.fetch_members(members)
        self.assertEqual(res.returncode, 7, support.describe(res))
        one_line_error(self, res, entry)
        after = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)
        self.assertEqual(after, before, support.diff_snapshots(before, after))
        self.assertEqual(staging_leftovers(self.prefix), [])
        self.assertEqual(self.outside_files() - outside_before, set(), "written outside the prefix")
        for path in forbidden:
            self.assertFalse(os.path.lexists(path), f"{path} was written")
        # The prior install is intact by its own receipts too.
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)
        return res

    def base_members(self):
        return [(TOP, "dir", 0o755, b""), (f"{TOP}/LICENSE", "file", 0o644, b"license\n"),
                (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/libok.so.1", "file", 0o755, b"ok\n")]

    # -- a benign control: the harness itself lets a good archive through ----

    def test_control_benign_archive_installs(self):
        members = self.base_members() + [(f"{TOP}/lib/libok.so", "symlink", 0o777, "libok.so.1"),
                                         (f"{TOP}/lib/libok.so.1.hard", "hardlink", 0o755, f"{TOP}/lib/libok.so.1")]
        res, _, _ = self.fetch_members(members)
        self.assertEqual(res.returncode, 0, support.describe(res))
        got = installed(self.prefix)
        self.assertEqual(got["lib/libok.so"].digest, "libok.so.1")
        self.assertEqual(got["lib/libok.so.1.hard"].digest, got["lib/libok.so.1"].digest)
        self.assertNotIn("lib/libcudnn.so.9.10.1", got)  # the old release was replaced

    # -- path traversal -------------------------------------------------------

    def test_dotdot_entry(self):
        self.assertRejected(self.base_members() + [("../evil_dotdot", "file", 0o644, b"x")], "../evil_dotdot")

    def test_absolute_entry(self):
        target = os.path.join(self.outside, "evil_absolute")
        self.assertRejected(self.base_members() + [(target, "file", 0o644, b"x")], target, [target])

    def test_dotdot_inside_top(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/../../evil_inner", "file", 0o644, b"x")],
                            f"{TOP}/../../evil_inner")

    # -- symlinks ---------------------------------------------------------------

    def test_absolute_symlink(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/lib/passwd", "symlink", 0o777, "/etc/passwd")],
                            f"{TOP}/lib/passwd")

    def test_relative_symlink_escaping(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/lib/link", "symlink", 0o777, "../../../outside")],
                            f"{TOP}/lib/link")

    def test_write_through_absolute_symlink(self):
        somewhere = os.path.join(self.outside, "somewhere")
        os.makedirs(somewhere)
        members = self.base_members() + [(f"{TOP}/link", "symlink", 0o777, somewhere),
                                         (f"{TOP}/link/file", "file", 0o644, b"through the link\n")]
        self.assertRejected(members, f"{TOP}/link", [os.path.join(somewhere, "file")])

    def test_write_through_relative_symlink(self):
        # From the stage (prefix/.redist/staging/<x>/lib/) eight levels up is
        # the case directory: a naive unpacker would write into `outside`.
        members = self.base_members() + [(f"{TOP}/lib/up", "symlink", 0o777, "../../../../../../../../outside"),
                                         (f"{TOP}/lib/up/evil_through", "file", 0o644, b"x")]
        self.assertRejected(members, f"{TOP}/lib/up", [os.path.join(self.outside, "evil_through")])

    # -- hard links -------------------------------------------------------------

    def test_hardlink_to_absolute_path_outside(self):
        victim = os.path.join(self.outside, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        members = self.base_members() + [(f"{TOP}/lib/hl", "hardlink", 0o644, victim)]
        self.assertRejected(members, f"{TOP}/lib/hl")
        self.assertEqual(os.stat(victim).st_nlink, 1)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")

    def test_hardlink_to_relative_path_outside(self):
        members = self.base_members() + [(f"{TOP}/lib/hl", "hardlink", 0o644, "../../../../etc/passwd")]
        self.assertRejected(members, f"{TOP}/lib/hl")

    def test_hardlink_to_a_member_not_in_the_archive(self):
        members = self.base_members() + [(f"{TOP}/lib/hl", "hardlink", 0o644, f"{TOP}/lib/not_there")]
        res, before, _ = self.fetch_members(members)
        self.assertIn(res.returncode, (7, 8), support.describe(res))
        one_line_error(self, res, f"{TOP}/lib/hl")
        self.assertEqual(support.tree_snapshot(self.prefix, ignore=BOOKKEEPING), before)
        self.assertEqual(staging_leftovers(self.prefix), [])

    # -- special files ------------------------------------------------------------

    def test_character_device(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/lib/null", "chr", 0o666, (1, 3))], f"{TOP}/lib/null")

    def test_block_device(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/lib/sda", "blk", 0o660, (8, 0))], f"{TOP}/lib/sda")

    def test_fifo(self):
        self.assertRejected(self.base_members() + [(f"{TOP}/lib/pipe", "fifo", 0o644, b"")], f"{TOP}/lib/pipe")

    # -- layout -----------------------------------------------------------------

    def test_two_top_level_directories(self):
        other = "another-archive"
        members = self.base_members() + [(other, "dir", 0o755, b""),
                                         (f"{other}/include", "dir", 0o755, b""),
                                         (f"{other}/include/x.h", "file", 0o644, b"x")]
        self.assertRejected(members, other)


if __name__ == "__main__":
    unittest.main()
