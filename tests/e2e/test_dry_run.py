"""--dry-run and conflicts, through the real tools: the install refused
with exit 9 names every file in the way, not only the first; --dry-run
lists every conflict the install would refuse and fails as the install
would: an archive whose files the cache does not list yet is read into the
cache first (the prefix untouched); only with --no-cache, where nothing can
hold it, does it say which components it could not check."""

import json
import os
import tarfile
import unittest

import support
from test_fetch import make_cudart_clash_with_nvcc

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
CUDA = "12"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
EXIT_CONFLICT = 9
BOOKKEEPING = r"^\.redist(/|$)"


def archive_files(path, component):
    """The prefix-relative paths of the archive's files and symlinks, as
    installed: its top directory stripped, its top-level files in
    share/licenses/<component>/."""
    out = []
    with tarfile.open(path, "r:*") as tf:
        for m in tf.getmembers():
            parts = [p for p in m.name.split("/") if p not in ("", ".")]
            if m.isdir() or len(parts) < 2:
                continue
            out.append("/".join(parts[1:]) if len(parts) > 2 else f"share/licenses/{component}/{parts[1]}")
    return sorted(out)


class DryRunConflicts(unittest.TestCase):
    N = 9  # the user's own files where the archive puts its own

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.dir, "prefix")
        self.cache = os.path.join(self.dir, "cache")
        self.base = support.nginx_base_url()
        rec = support.find_artifact(support.load_manifest("cudnn", LABEL), "cudnn", PLATFORM, "cuda" + CUDA)
        self.artifact = rec["relative_path"]
        files = archive_files(support.artifact_path("cudnn", self.artifact), "cudnn")
        self.assertGreaterEqual(len(files), self.N, files)
        self.mine = files[: self.N]
        for rel in self.mine:
            path = os.path.join(self.prefix, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(f"the user's own {rel}\n")
        self.before = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)

    def cudnn(self, *extra, cache=None, **kw):
        return support.run_tool("cudnn-fetch", LABEL, "--cuda", CUDA, "--platform", PLATFORM, "--prefix",
                                self.prefix, "--base-url", self.base, "--cache-dir", cache or self.cache,
                                "--no-check", *extra, env=CLEAN_ENV, **kw)

    def downloads(self, mark):
        return [r for r in support.access_log_since(mark) if r["uri"].endswith(self.artifact.split("/")[-1])]

    def assert_untouched(self, res):
        self.assertEqual(support.tree_snapshot(self.prefix, ignore=BOOKKEEPING), self.before, support.describe(res))

    def test_the_refused_install_names_every_conflicting_file(self):
        res = self.cudnn(check=EXIT_CONFLICT)
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, support.describe(res))
        self.assertIn(f"{self.N} paths conflict", lines[0])
        self.assertIn("--overwrite", lines[0])
        for rel in self.mine:
            self.assertIn(rel, lines[0], support.describe(res))
        self.assert_untouched(res)

    def test_dry_run_lists_every_conflict_the_install_would_refuse(self):
        # A cold cache: the archive is read into the cache (once), and every
        # conflict is listed, as the install would refuse them.
        mark = support.access_log_mark()
        res = self.cudnn("--dry-run", check=EXIT_CONFLICT)
        self.assertRegex(res.stdout, r"(?m)^download +cudnn +cudnn ")
        self.assertRegex(res.stdout, r"(?m)^read 1 archive \(.*\) into the cache to list its files$")
        listed = [line.split()[1].rstrip(":") for line in res.stdout.splitlines() if line.startswith("conflict ")]
        self.assertEqual(listed, self.mine, support.describe(res))
        self.assertIn("would overwrite a file that redist did not install", res.stdout)
        self.assertRegex(res.stdout, rf"(?m)^conflicts: {self.N} \(listed above\)$")
        self.assertIn(f"the install would fail (exit {EXIT_CONFLICT}): {self.N} paths conflict", res.stderr)
        self.assertEqual(len(self.downloads(mark)), 1)
        self.assert_untouched(res)
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist")), "the dry run wrote into the prefix")
        scratch = os.path.join(self.cache, "scratch")
        self.assertEqual(os.listdir(scratch) if os.path.isdir(scratch) else [], [], "the throwaway prefix stayed")

        # From then on the cache's tree answers: nothing is downloaded again.
        mark = support.access_log_mark()
        res = self.cudnn("--dry-run", "--json", check=EXIT_CONFLICT)
        plan = json.loads(res.stdout)
        self.assertEqual([c["path"] for c in plan["conflicts"]], self.mine)
        self.assertTrue(plan["conflicts_complete"])
        self.assertTrue(plan["plan"][0]["files_known"])
        self.assertEqual(plan["plan"][0]["action"], "cached-tree")
        self.assertEqual(plan["archives_read"], 0)
        self.assertEqual(self.downloads(mark), [])
        self.assert_untouched(res)

        # The install agrees with the forecast.
        res = self.cudnn(check=EXIT_CONFLICT)
        for rel in self.mine:
            self.assertIn(rel, res.stderr)

        # --overwrite is the intent that allows them: no conflict left, and the install agrees.
        res = self.cudnn("--dry-run", "--overwrite", check=0)
        self.assertRegex(res.stdout, r"(?m)^conflicts: none$")
        self.assert_untouched(res)
        self.cudnn("--overwrite", check=0)
        res = self.cudnn("--dry-run", check=0)
        self.assertRegex(res.stdout, r"(?m)^unchanged +cudnn +cudnn ")
        self.assertRegex(res.stdout, r"(?m)^conflicts: none$")

    def test_without_a_cache_the_unknown_archives_are_named(self):
        mark = support.access_log_mark()
        res = self.cudnn("--dry-run", "--no-cache", check=0)
        self.assertRegex(res.stdout, r"(?m)^conflicts: none; not checked: the files of cudnn/cudnn \(")
        res = self.cudnn("--dry-run", "--no-cache", "--json", check=0)
        plan = json.loads(res.stdout)
        self.assertFalse(plan["conflicts_complete"])
        self.assertFalse(plan["plan"][0]["files_known"])
        self.assertEqual(self.downloads(mark), [], "--dry-run --no-cache downloaded the archive")
        self.assert_untouched(res)

    def test_dry_run_of_a_reinstall_knows_the_files_from_the_receipt(self):
        # No cache at all: the receipt of the installed archive lists its files.
        for rel in self.mine:
            os.remove(os.path.join(self.prefix, rel))
        self.cudnn("--no-cache", check=0)
        res = self.cudnn("--no-cache", "--dry-run", "--reinstall", check=0)
        self.assertRegex(res.stdout, r"(?m)^download +cudnn +cudnn ")
        self.assertRegex(res.stdout, r"(?m)^conflicts: none$")


class DryRunComponentClash(unittest.TestCase):
    """Two components of one run with different files at one path: the
    dry run finds the clash once both trees are in the cache."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cuda"])
        make_cudart_clash_with_nvcc(self.mirror, PLATFORM)
        self.prefix = os.path.join(self.dir, "prefix")

    def fetch(self, *extra, **kw):
        return support.run_tool("redist", "fetch", "cuda", "12.9.1", "--component", "cuda_nvcc,cuda_cudart",
                                "--prefix", self.prefix, "--base-url", support.file_base_url(self.mirror),
                                "--platform", PLATFORM, "--cache-dir", os.path.join(self.dir, "cache"),
                                "--no-check", *extra, env=CLEAN_ENV, **kw)

    def test_a_clash_between_components_is_listed(self):
        res = self.fetch("--dry-run", "--no-cache", check=0)
        self.assertIn("not checked: the files of cuda/cuda_cudart, cuda/cuda_nvcc", res.stdout)
        res = self.fetch("--dry-run", check=EXIT_CONFLICT)
        self.assertRegex(res.stdout, r"(?m)^read 2 archives \(.*\) into the cache to list their files$")
        self.assertRegex(res.stdout, r"(?m)^conflict +include/crt/host_config.h: components cuda_cudart and "
                                     r"cuda_nvcc ship different files at the same path$")
        self.assertRegex(res.stdout, r"(?m)^conflicts: 1 \(listed above\)$")
        # --overwrite is about files no receipt owns: the clash stays.
        self.fetch("--dry-run", "--overwrite", check=EXIT_CONFLICT)


if __name__ == "__main__":
    unittest.main()
