"""Hostile input aimed at the prefix: component keys
that are paths, lock files and receipts that point outside, planted journals,
file/directory clashes between components, percent-encoded relative paths,
one component key in two products, and directory modes that must be kept.

Every case runs in its own sandbox directory. The prefix lies deep inside
it (sandbox/a/b/c/prefix), so a "../" escape from the prefix or from a stage
still lands in the sandbox, where the test sees it. For each case the test
checks the exit code, the one-line message, that the prefix is byte for byte
as it was (support.tree_snapshot, modes included), and that nothing else in
the sandbox changed, including the modes of the directories above the
prefix (one of them carries the sticky bit, as /tmp does)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import unittest

import support
from test_fetch import fetch, one_line_error, rewrite_artifact, staging_leftovers, tar_xz

LABEL, OLD, PLATFORM, CUDA = "9.27.0", "9.10.1", "linux-x86_64", "12"
TOP = f"cudnn-{PLATFORM}-9.27.0.42_cuda{CUDA}-archive"
# The prefix lock and the staging area change on every run by design.
BOOKKEEPING = r"^\.redist/(lock|staging)$"
PREFIX_REL = "a/b/c/prefix"
OUTSIDE_VICTIMS = ("/tmp/victim", "/tmp/victim.json", "/x", "/x.json")


def setUpModule():
    os.umask(0o022)


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


class HostilePrefix(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.mirror_src = support.copy_mirror(os.path.join(cls.root, "mirror-src"), ["cudnn"])
        # The prior install, made once and copied for each case.
        cls.pristine = os.path.join(cls.root, "pristine")
        fetch(OLD, "--prefix", cls.pristine, "--base-url", support.file_base_url(cls.mirror_src),
              "--platform", PLATFORM, "--cuda", CUDA, tool="cudnn-fetch", check=0)

    def setUp(self):
        name = self.id().rsplit(".", 1)[1]
        self.case = os.path.join(self.root, name)
        support.rm_tree(self.case)
        os.makedirs(self.case)
        # A mirror per case, inside the sandbox (so reads outside it are visible as escapes too).
        self.mirror = os.path.join(self.case, "m", "mirror")
        os.makedirs(os.path.dirname(self.mirror))
        shutil.copytree(self.mirror_src, self.mirror, symlinks=True)
        self.base = support.file_base_url(self.mirror)
        self.outside = os.path.join(self.case, "outside")
        os.makedirs(self.outside)
        with open(os.path.join(self.outside, "victim"), "w") as f:
            f.write("precious\n")
        self.prefix = os.path.join(self.case, PREFIX_REL)
        shutil.copytree(self.pristine, self.prefix, symlinks=True)
        # Directories above the prefix with modes a careless chmod would change.
        os.chmod(os.path.join(self.case, "a", "b", "c"), 0o1777)
        os.chmod(os.path.join(self.case, "a", "b"), 0o2775)
        self.cwd = os.path.join(self.case, "cwd")
        os.makedirs(self.cwd)
        self.outside_victims = {p: os.path.lexists(p) for p in OUTSIDE_VICTIMS}
        self.tmp_mode = mode_of("/tmp")

    # -- snapshots ---------------------------------------------------------------

    def prefix_state(self):
        return support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)

    def sandbox_state(self):
        """Everything in the sandbox but the prefix (the mirror included),
        with the modes of every directory above the prefix."""
        snap = support.tree_snapshot(self.case, ignore=r"^a/b/c/prefix(/|$)")
        snap["."] = support.Node("dir", mode_of(self.case), 0, None)
        return snap

    def run_hostile(self, *args, tool="redist", code, needles=(), stdin=None):
        """Runs a tool, expects `code` and a one-line error containing each of
        `needles`; the prefix and the sandbox must be unchanged."""
        prefix_before, sandbox_before = self.prefix_state(), self.sandbox_state()
        res = support.run_tool(tool, *args, cwd=self.cwd, input=stdin)
        self.assertEqual(res.returncode, code, support.describe(res))
        line = one_line_error(self, res, *needles)
        self.assertUnchanged(prefix_before, sandbox_before)
        return res, line

    def assertUnchanged(self, prefix_before, sandbox_before):
        prefix_after = self.prefix_state()
        self.assertEqual(prefix_after, prefix_before, support.diff_snapshots(prefix_before, prefix_after))
        sandbox_after = self.sandbox_state()
        self.assertEqual(sandbox_after, sandbox_before, support.diff_snapshots(sandbox_before, sandbox_after))
        self.assertEqual(staging_leftovers(self.prefix), [])
        for path, existed in self.outside_victims.items():
            self.assertEqual(os.path.lexists(path), existed, f"{path} was created or removed")
        self.assertEqual(mode_of("/tmp"), self.tmp_mode, "the mode of /tmp changed")

    def assertHealthy(self):
        """The prefix is not wedged: verify passes and a later fetch works."""
        res = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))

    def fetch_args(self, *extra, label=LABEL):
        return ("fetch", "cudnn", label, "--prefix", self.prefix, "--base-url", self.base, "--platform", PLATFORM,
                "--cuda", CUDA, "--no-cache", *extra)

    def edit_manifest(self, mutate, label=LABEL, product="cudnn"):
        path = support.manifest_path(product, label, self.mirror)
        doc = support.load_json(path)
        mutate(doc)
        support.save_json(path, doc)

    # -- names in a manifest -------------------------------------------------------

    def hostile_component_key(self, key):
        def mutate(doc):
            doc[key] = doc.pop("cudnn")
        self.edit_manifest(mutate)
        _, line = self.run_hostile(*self.fetch_args(), code=4, needles=("not a valid name", "redistrib_9.27.0.json"))
        self.assertNotIn("\x1b", line)
        self.assertHealthy()

    def test_component_key_dotdot(self):
        self.hostile_component_key("../../../../x")

    def test_component_key_absolute(self):
        self.hostile_component_key("/tmp/victim")

    def test_component_key_with_slash(self):
        self.hostile_component_key("sub/comp")

    def test_component_key_with_escape_sequence(self):
        self.hostile_component_key("cudnn\x1b[2J")

    def test_release_label_is_a_name(self):
        def mutate(doc):
            doc["release_label"] = "../../x"
        self.edit_manifest(mutate)
        self.run_hostile(*self.fetch_args(), code=4, needles=("release_label",))

    # -- relative_path, percent-encoded -------------------------------------------

    def test_percent_encoded_relative_path(self):
        # The decoded path exists outside the mirror: a naive check lets it
        # through and libcurl decodes it into the parent directory.
        data = tar_xz([(TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""),
                       (f"{TOP}/lib/libevil.so", "file", 0o644, b"evil\n")])
        evil = os.path.join(self.case, "m", "evil.tar.xz")
        with open(evil, "wb") as f:
            f.write(data)

        def mutate(doc):
            rec = support.find_artifact(doc, "cudnn", PLATFORM, f"cuda{CUDA}")
            rec["relative_path"] = "..%2f..%2f..%2fevil.tar.xz"
            rec["size"], rec["sha256"] = str(len(data)), hashlib.sha256(data).hexdigest()
        self.edit_manifest(mutate)
        self.run_hostile(*self.fetch_args(), code=4, needles=("relative_path", "percent"))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libevil.so")))

    # -- lock files -----------------------------------------------------------------

    def write_lock(self, component):
        res = support.run_tool("redist", "lock", "cudnn", LABEL, "--base-url", self.base, "--platform", PLATFORM,
                               "--cuda", CUDA, "--component", "cudnn", "--output",
                               os.path.join(self.cwd, "redist.lock"), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        path = os.path.join(self.cwd, "redist.lock")
        doc = support.load_json(path)
        doc["artifacts"][0]["component"] = component
        support.save_json(path, doc)
        return path

    def test_lock_file_component_key_dotdot(self):
        lock = self.write_lock("../../../../x")
        self.run_hostile("fetch", "--locked", lock, "--prefix", self.prefix, "--no-cache", code=4,
                         needles=(lock, "artifacts[0].component"))

    def test_lock_file_component_key_absolute(self):
        lock = self.write_lock("/tmp/victim")
        self.run_hostile("fetch", "--locked", lock, "--prefix", self.prefix, "--no-cache", code=4,
                         needles=(lock, "artifacts[0].component"))

    def test_lock_file_component_key_with_slash(self):
        lock = self.write_lock("sub/comp")
        self.run_hostile("fetch", "--locked", lock, "--prefix", self.prefix, "--no-cache", code=4,
                         needles=(lock, "artifacts[0].component"))

    # -- receipts -------------------------------------------------------------------

    def plant_receipt(self, rel, files, product="cudnn", component="evil"):
        path = os.path.join(self.prefix, ".redist", "receipts", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        doc = {"schema": 1, "product": product, "release_label": LABEL, "component": component,
               "component_version": "1", "platform": PLATFORM, "variant": None, "url": "file:///x",
               "archive_sha256": "0" * 64, "archive_size": 1, "installed_at": "2026-01-01T00:00:00Z",
               "files": [{"path": p, "type": "file", "size": 9, "sha256": "0" * 64, "mode": 420} for p in files]}
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_planted_receipt_pointing_outside(self):
        victim = os.path.join(self.outside, "victim")
        receipt = self.plant_receipt("cudnn/evil.json", [os.path.relpath(victim, self.prefix)])
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(receipt, "files[0].path"))
        self.run_hostile("remove", "--prefix", self.prefix, "--component", "evil", code=4,
                         needles=(receipt, "files[0].path"))
        self.run_hostile("verify", "--prefix", self.prefix, code=4, needles=(receipt,))
        # It blocks only its own component: fetching another one works, and
        # nothing the planted receipt names is touched.
        sandbox_before = self.sandbox_state()
        res = support.run_tool("redist", *self.fetch_args(), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(self.sandbox_state(), sandbox_before)
        self.assertTrue(os.path.exists(receipt))

    def test_unreadable_receipt_blocks_only_its_component(self):
        # A receipt that is not JSON (a raw Latin-1 byte, as a receipt of an
        # entry name that is not UTF-8 was): verify checks the others, another
        # component installs and goes, this one is refused with the repair.
        good = os.path.join(self.prefix, ".redist", "receipts", "cudnn", "cudnn.json")
        bad = os.path.join(self.prefix, ".redist", "receipts", "cudnn", "cudnn_jit.json")
        with open(good, "rb") as f:
            text = f.read()
        with open(bad, "wb") as f:
            f.write(text.replace(b'"component": "cudnn"', b'"component": "cudnn_jit"')
                    .replace(b'"files": [', b'"files": [{"path": "lib/caf\xe9.so", "type": "file"}, ', 1))
        res, line = self.run_hostile("verify", "--prefix", self.prefix, code=4, needles=(bad, "fetch it again"))
        self.assertIn("all match their receipts", res.stdout)  # the readable ones were checked
        self.run_hostile("remove", "--prefix", self.prefix, "--component", "cudnn_jit", code=4,
                         needles=(bad, "cudnn_jit", "fetch it again"))
        res = support.run_tool("redist", *self.fetch_args("--component", "cudnn"), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--component", "cudnn", cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertFalse(os.path.exists(good))
        # The repair the message names: fetching the component again.
        res = support.run_tool("redist", *self.fetch_args("--component", "cudnn_jit"), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertHealthy()
        with open(bad, "rb") as f:
            self.assertNotIn(b"\xe9", f.read())

    def test_planted_receipt_with_absolute_path(self):
        receipt = self.plant_receipt("evil.json", [os.path.join(self.outside, "victim")])
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(receipt, "files[0].path"))

    def test_planted_receipt_aimed_at_redist_state(self):
        receipt = self.plant_receipt("evil.json", [".redist/receipts/cudnn/cudnn.json"])
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(receipt, "files[0].path"))

    def test_receipt_name_must_match_its_content(self):
        receipt = self.plant_receipt("cudnn/other.json", ["lib/x"], component="../../x")
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(receipt, "component"))

    def test_symlinked_receipt_is_not_followed(self):
        target = os.path.join(self.outside, "receipt.json")
        shutil.copy(os.path.join(self.prefix, ".redist", "receipts", "cudnn", "cudnn.json"), target)
        link = os.path.join(self.prefix, ".redist", "receipts", "cudnn", "linked.json")
        os.symlink(target, link)
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(link, "not a regular file"))

    def test_symlinked_state_directory_is_not_followed(self):
        # .redist/receipts pointing elsewhere: nothing may be created or read there.
        elsewhere = os.path.join(self.outside, "receipts")
        receipts = os.path.join(self.prefix, ".redist", "receipts")
        shutil.move(receipts, elsewhere)
        os.symlink(elsewhere, receipts)
        self.run_hostile(*self.fetch_args(), code=4, needles=(receipts, "not a directory"))

    # -- the journal ----------------------------------------------------------------

    def plant_journal(self, doc):
        path = os.path.join(self.prefix, ".redist", "transaction.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_planted_journal_with_absolute_paths(self):
        victim = os.path.join(self.outside, "victim")
        journal = self.plant_journal({
            "journal_version": 2, "mkdirs": [{"path": os.path.join(self.outside, "made"), "mode": 511}],
            "moves": [{"from": victim, "to": os.path.join(self.outside, "moved")}],
            "deletes": [victim], "prune": [self.outside], "stages": [self.outside]})
        self.run_hostile(*self.fetch_args(), code=4, needles=(journal, "corrupt commit journal"))
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(journal, "corrupt commit journal"))
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")

    def test_planted_journal_of_the_old_format(self):
        # Absolute paths in arrays, as redist 0.1 wrote them.
        journal = self.plant_journal({"mkdirs": [[self.outside, 511]], "moves": [],
                                      "deletes": [os.path.join(self.outside, "victim")],
                                      "prune": [], "stages": [self.outside]})
        self.run_hostile(*self.fetch_args(), code=4, needles=(journal, "corrupt commit journal"))

    def test_planted_journal_with_dotdot_and_state_paths(self):
        journal = self.plant_journal({"journal_version": 2, "mkdirs": [], "moves": [],
                                      "deletes": ["../../../../outside/victim", ".redist/lock"],
                                      "prune": [], "stages": [".redist/staging/../../../outside"]})
        self.run_hostile("remove", "--prefix", self.prefix, code=4, needles=(journal, "deletes[0]"))

    # -- file/directory clashes ---------------------------------------------------------

    def two_components(self, first, second):
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", tar_xz(first))
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn_jit", PLATFORM, f"cuda{CUDA}", tar_xz(second))
        return self.fetch_args("--component", "cudnn,cudnn_jit")

    def test_file_in_one_component_directory_in_another(self):
        jit_top = TOP.replace("cudnn-", "cudnn_jit-")
        args = self.two_components(
            [(TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/foo", "file", 0o644, b"f\n")],
            [(jit_top, "dir", 0o755, b""), (f"{jit_top}/lib", "dir", 0o755, b""),
             (f"{jit_top}/lib/foo", "dir", 0o755, b""), (f"{jit_top}/lib/foo/bar", "file", 0o644, b"b\n")])
        self.run_hostile(*args, code=9, needles=("lib/foo",))
        self.assertHealthy()
        # Not wedged: the next, sane fetch works.
        res = support.run_tool("redist", *self.fetch_args(label=OLD), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))

    def test_directory_where_the_prefix_has_a_user_file(self):
        with open(os.path.join(self.prefix, "include", "mine"), "w") as f:
            f.write("user\n")
        args = self.two_components(
            [(TOP, "dir", 0o755, b""), (f"{TOP}/include", "dir", 0o755, b""),
             (f"{TOP}/include/mine", "dir", 0o755, b""), (f"{TOP}/include/mine/x.h", "file", 0o644, b"x\n")],
            [(TOP.replace("cudnn-", "cudnn_jit-"), "dir", 0o755, b""),
             (TOP.replace("cudnn-", "cudnn_jit-") + "/j.h", "file", 0o644, b"j\n")])
        self.run_hostile(*args, code=9, needles=("include/mine",))
        self.assertHealthy()

    # -- .redist/ is reserved --------------------------------------------------------------

    def test_archive_entry_in_redist_state(self):
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", tar_xz([
            (TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/ok.so", "file", 0o644, b"ok\n"),
            (f"{TOP}/.redist", "dir", 0o755, b""), (f"{TOP}/.redist/receipts", "dir", 0o755, b""),
            (f"{TOP}/.redist/receipts/evil.json", "file", 0o644, b"{}")]))
        self.run_hostile(*self.fetch_args(), code=7, needles=(".redist",))
        self.assertHealthy()

    def test_entry_name_not_utf8(self):
        # A Latin-1 byte in a file name: receipts are JSON (UTF-8 only), so the
        # archive is refused before anything is staged, and the prefix works.
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", tar_xz([
            (TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/ok.so", "file", 0o644, b"ok\n"),
            (f"{TOP}/lib/caf\udce9.so", "file", 0o644, b"latin-1\n")]))
        self.run_hostile(*self.fetch_args(), code=7, needles=("UTF-8", "caf\\xe9"))
        self.assertHealthy()
        res = support.run_tool("redist", *self.fetch_args(label=OLD), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))

    def test_symlink_target_not_utf8(self):
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}", tar_xz([
            (TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/ok.so", "file", 0o644, b"ok\n"),
            (f"{TOP}/lib/link.so", "symlink", 0o777, "caf\udce9.so")]))
        self.run_hostile(*self.fetch_args(), code=7, needles=("UTF-8",))
        self.assertHealthy()

    # -- modes ----------------------------------------------------------------------------

    def test_existing_directory_modes_are_kept(self):
        lib = os.path.join(self.prefix, "lib")
        include = os.path.join(self.prefix, "include")
        os.chmod(lib, 0o3775)
        os.chmod(include, 0o2750)
        sandbox_before = self.sandbox_state()
        res = support.run_tool("redist", *self.fetch_args(), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(mode_of(lib), 0o3775)
        self.assertEqual(mode_of(include), 0o2750)
        self.assertEqual(self.sandbox_state(), sandbox_before)
        self.assertEqual(mode_of("/tmp"), self.tmp_mode)
        self.assertHealthy()

    # -- one component key in two products ---------------------------------------------------

    def test_same_component_key_in_two_products(self):
        # A second product whose manifest has a component also called "cudnn",
        # shipping other files.
        other = os.path.join(self.mirror, "othercudnn")
        shutil.copytree(os.path.join(self.mirror, "cudnn"), other, symlinks=True)

        def rename(doc):
            doc["release_product"] = "othercudnn"
        self.edit_manifest(rename, product="othercudnn")
        rewrite_artifact(self.mirror, "othercudnn", LABEL, "cudnn", PLATFORM, f"cuda{CUDA}",
                         tar_xz([(TOP, "dir", 0o755, b""), (f"{TOP}/lib", "dir", 0o755, b""),
                                 (f"{TOP}/lib/libother.so", "file", 0o644, b"other\n")]))
        res = support.run_tool("redist", *self.fetch_args("--component", "cudnn"), cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        args = list(self.fetch_args("--component", "cudnn"))
        args[1] = "othercudnn"
        res = support.run_tool("redist", *args, cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        receipts = os.path.join(self.prefix, ".redist", "receipts")
        self.assertTrue(os.path.isfile(os.path.join(receipts, "cudnn", "cudnn.json")))
        self.assertTrue(os.path.isfile(os.path.join(receipts, "othercudnn", "cudnn.json")))
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, "include", "cudnn.h")))
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, "lib", "libother.so")))
        # Ambiguous without --product: refused, nothing removed.
        self.run_hostile("remove", "--prefix", self.prefix, "--component", "cudnn", code=2,
                         needles=("--product",))
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--product", "othercudnn",
                               "--component", "cudnn", cwd=self.cwd)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libother.so")))
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, "include", "cudnn.h")))
        self.assertFalse(os.path.exists(os.path.join(receipts, "othercudnn")))
        self.assertHealthy()


if __name__ == "__main__":
    unittest.main()
