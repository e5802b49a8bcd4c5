"""`redist sync` and a mirror's recompressed copies, as `redist fetch`: a
project whose base-url is a file:// mirror with recompressed_<label>.json
installs the .tar.zst copy signed by a key the project trusts (its
trusted-keys; the receipt names both digests) and its
redist.lock pins the decoded tar (tar_sha256); `sync --locked` on a fresh
prefix uses the copy again; a copy whose tar is not the one locked is
discarded with one line and the original installed; --no-recompressed always
installs the original. The copies are written by hand (test_recompressed.py)."""

from __future__ import annotations

import hashlib
import os
import unittest

import support
import test_recompressed as fetch_tests
from test_recompressed import LABEL, PRODUCT, tar_with_extra


class SyncRecompressedCopies(fetch_tests.RecompressedCopies):
    """The mirror and copy helpers of the fetch tests; the project lives beside the mirror."""

    def setUp(self):
        super().setUp()
        self.project = os.path.join(self.dir, "redist.toml")
        self.lock_path = os.path.join(self.dir, "redist.lock")
        with open(self.project, "w") as f:
            f.write("\n".join([
                "[project]", 'prefix = "prefix"', 'platforms = ["linux-x86_64"]', 'cuda = "12"',
                f'base-url = "{self.base}"', f'trusted-keys = ["{os.path.basename(self.pub)}"]', "",
                f"[products.{PRODUCT}]", f'version = "{LABEL}"',
                'components = ["cudnn"]', ""]))

    def sync(self, prefix: str, *extra, check=0):
        return support.run_tool("redist", "sync", "--file", self.project, "--platform", "linux-x86_64",
                                "--prefix", prefix, "--no-cache", *extra, check=check)

    def locked_tar(self) -> list:
        return [a.get("tar_sha256") for p in support.load_json(self.lock_path)["products"]
                for a in p["artifacts"] if a["sha256"] == self.original["sha256"]]

    def test_sync_installs_the_copy_and_locks_its_tar(self):
        entry = self.write_copy()
        good_tar = hashlib.sha256(self.tar).hexdigest()
        prefix = os.path.join(self.dir, "prefix")
        res = self.sync(prefix)
        self.assertNotIn("copy", res.stderr)
        r = self.receipt(prefix)
        self.assertEqual(r["archive_sha256"], self.original["sha256"])
        self.assertEqual(r["copy_sha256"], entry["sha256"])
        self.assertEqual(r["tar_sha256"], good_tar)
        self.assertEqual(self.locked_tar(), [good_tar])
        self.assertEqual(self.tree(prefix), self.reference_tree())
        # The lock as written: a fresh prefix gets the copy again.
        fresh = os.path.join(self.dir, "fresh")
        res = self.sync(fresh, "--locked")
        self.assertNotIn("copy", res.stderr)
        self.assertEqual(self.receipt(fresh)["copy_sha256"], entry["sha256"])
        self.assertEqual(self.receipt(fresh)["tar_sha256"], good_tar)

    def test_copy_of_another_tar_than_the_locked_one_installs_the_original(self):
        self.write_copy()
        self.sync(os.path.join(self.dir, "first"))
        self.assertEqual(self.locked_tar(), [hashlib.sha256(self.tar).hexdigest()])
        # A copy of another tar, with a record consistent with it: the lock refuses it.
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil)
        prefix = os.path.join(self.dir, "prefix")
        res = self.sync(prefix, "--locked")
        self.assert_original_installed(prefix, res, "locked")
        self.assertFalse(any("evil" in p for p in self.tree(prefix)))

    def test_a_project_key_outside_its_directory_is_refused(self):
        with open(self.project) as f:
            text = f.read()
        with open(self.project, "w") as f:
            f.write(text.replace(f'trusted-keys = ["{os.path.basename(self.pub)}"]', 'trusted-keys = ["../x.pub"]'))
        res = self.sync(os.path.join(self.dir, "prefix"), check=None)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("project.trusted-keys[0]", res.stderr)

    def test_no_recompressed_installs_the_original(self):
        self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        res = self.sync(prefix, "--no-recompressed")
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))
        self.assertEqual(self.tree(prefix), self.reference_tree())
        # The lock still pins the tar (it describes the sources), and a locked sync honours the flag too.
        self.assertEqual(self.locked_tar(), [hashlib.sha256(self.tar).hexdigest()])
        fresh = os.path.join(self.dir, "fresh")
        res = self.sync(fresh, "--locked", "--no-recompressed")
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(fresh))


# Only sync's tests here: the inherited fetch tests run in test_recompressed.
for _name in [n for n in dir(fetch_tests.RecompressedCopies) if n.startswith("test_")]:
    if _name not in SyncRecompressedCopies.__dict__:
        setattr(SyncRecompressedCopies, _name, None)

if __name__ == "__main__":
    unittest.main()
