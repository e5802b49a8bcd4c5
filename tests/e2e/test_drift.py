"""Drift watching: serve a release, fetch it, then replace one artifact in
place and regenerate the manifest. The next run prints a short structured
diff; under --strict (or with a lock file) it fails with exit 5."""

import hashlib
import os
import shutil
import unittest

import support


class Drift(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cudnn"])
        self.base = support.file_base_url(self.mirror)
        self.cache = os.path.join(self.dir, "cache")  # private: the history starts empty

    def fetch(self, prefix, *extra, check=None):
        return support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--base-url", self.base, "--prefix",
                                os.path.join(self.dir, prefix), "--platform", "linux-x86_64", "--cuda", "12",
                                "--component", "cudnn", "--cache-dir", self.cache, *extra, check=check)

    def replace_in_place(self):
        """Swaps the bytes of cudnn linux-x86_64 cuda12 (another valid archive,
        same file name) and regenerates the manifest for it; bumps cudnn_jit's
        version and drops cudnn_samples, as a regenerated manifest might."""
        path = support.manifest_path("cudnn", "9.27.0", self.mirror)
        m = support.load_manifest("cudnn", "9.27.0", self.mirror)
        target = support.find_artifact(m, "cudnn", "linux-x86_64", "cuda12")
        donor = support.find_artifact(m, "cudnn", "linux-x86_64", "cuda13")
        dest = support.artifact_path("cudnn", target["relative_path"], self.mirror)
        shutil.copyfile(support.artifact_path("cudnn", donor["relative_path"], self.mirror), dest)
        with open(dest, "rb") as f:
            data = f.read()
        old = dict(target)
        target["sha256"] = hashlib.sha256(data).hexdigest()
        target["md5"] = hashlib.md5(data).hexdigest()
        target["size"] = str(len(data))
        m["cudnn_jit"]["version"] = "9.27.0.43"
        del m["cudnn_samples"]
        support.save_json(path, m)
        return old, target

    def history_files(self):
        d = os.path.join(self.cache, "history", "urls")
        return [f for f in os.listdir(d) if f.endswith(".json")] if os.path.isdir(d) else []

    def test_drift_is_reported_and_fails_under_strict(self):
        first = self.fetch("p1", check=0)
        self.assertNotIn("drift", first.stderr)
        # The manifest and the artifact were remembered, per URL.
        self.assertEqual(len(self.history_files()), 2)

        old, new = self.replace_in_place()
        strict = self.fetch("p2", "--strict")
        self.assertEqual(strict.returncode, 5, support.describe(strict))
        err = strict.stderr
        self.assertIn("upstream drift: the manifest at", err)
        self.assertIn(f"REPLACED IN PLACE: cudnn linux-x86_64 cuda12 {old['relative_path']}", err)
        self.assertIn(f"sha256 {old['sha256']} -> {new['sha256']}", err)
        self.assertIn("version: cudnn_jit 9.27.0.42 -> 9.27.0.43", err)
        self.assertIn("components removed: cudnn_samples", err)
        self.assertIn("upstream manifest drifted (an error under --strict", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "p2", "include")))  # nothing installed

        # Still failing: a strict run does not accept the change.
        again = self.fetch("p2", "--strict")
        self.assertEqual(again.returncode, 5, support.describe(again))

        # Without --strict: a warning with the same diff, and the install goes on.
        lenient = self.fetch("p2", check=0)
        self.assertIn("warning: upstream drift", lenient.stderr)
        self.assertIn("REPLACED IN PLACE", lenient.stderr)
        # Accepted now: the next strict run is quiet.
        quiet = self.fetch("p3", "--strict", check=0)
        self.assertNotIn("drift", quiet.stderr)

    def test_no_cache_remembers_nothing(self):
        self.fetch("p1", "--no-cache", check=0)
        self.replace_in_place()
        res = self.fetch("p2", "--no-cache", "--strict", check=0)
        self.assertNotIn("drift", res.stderr)
        self.assertEqual(self.history_files(), [])

    def test_lock_file_makes_drift_an_error(self):
        lock = os.path.join(self.dir, "redist.lock")
        support.run_tool("redist", "lock", "cudnn", "9.27.0", "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", lock, check=0)
        locked = ["--locked", lock, "--prefix", os.path.join(self.dir, "locked"), "--platform", "linux-x86_64",
                  "--cuda", "12", "--cache-dir", self.cache, "--base-url", self.base]
        support.run_tool("redist", "fetch", *locked, check=0)
        self.replace_in_place()
        res = support.run_tool("redist", "fetch", *locked)
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("REPLACED IN PLACE: cudnn linux-x86_64 cuda12", res.stderr)

    def test_corrupt_history_is_replaced_not_fatal(self):
        self.fetch("p1", check=0)
        for name in self.history_files():
            with open(os.path.join(self.cache, "history", "urls", name), "w") as f:
                f.write('{"history_version": 1, "seen": [{"sha256": 12}]')
        res = self.fetch("p2", "--strict", check=0)
        self.assertIn("unreadable; starting it over", res.stderr)
        res = self.fetch("p3", "--strict", check=0)
        self.assertNotIn("unreadable", res.stderr)

    # ---- the history is part of the cache ------------------------------------------------

    def make_outside(self):
        outside = os.path.join(self.dir, "outside")
        os.makedirs(outside)
        return outside

    def test_symlinked_history_directory_is_never_written_through(self):
        for link in ("history", os.path.join("history", "urls"), os.path.join("history", "documents")):
            for extra in ((), ("--shared-cache",)):
                with self.subTest(link=link, extra=extra):
                    shutil.rmtree(self.cache, ignore_errors=True)
                    shutil.rmtree(os.path.join(self.dir, "outside"), ignore_errors=True)
                    outside = self.make_outside()
                    os.makedirs(os.path.dirname(os.path.join(self.cache, link)), exist_ok=True)
                    os.symlink(outside, os.path.join(self.cache, link))
                    res = self.fetch("p-" + link.replace(os.sep, "-") + "-" + str(len(extra)), *extra)
                    self.assertEqual(res.returncode, 10, support.describe(res))
                    self.assertIn("refusing the cache", res.stderr)
                    self.assertIn("symlink or not a directory", res.stderr)
                    self.assertEqual(os.listdir(outside), [], "nothing written outside the cache")

    def test_refused_cache_gets_no_history(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the cache to another user")
        lock = os.path.join(self.dir, "redist.lock")
        support.run_tool("redist", "lock", "cudnn", "9.27.0", "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", lock, "--no-cache", check=0)
        os.makedirs(self.cache)
        os.chown(self.cache, 65534, -1)  # another user's, as in test_hostile_cache.py
        locked = ("--locked", lock, "--prefix", os.path.join(self.dir, "locked"), "--platform", "linux-x86_64",
                  "--cuda", "12", "--cache-dir", self.cache, "--base-url", self.base)
        for args in (locked, None):
            with self.subTest(locked=args is not None):
                res = support.run_tool("redist", "fetch", *args) if args else self.fetch("plain")
                self.assertEqual(res.returncode, 10, support.describe(res))
                self.assertIn("refusing the cache", res.stderr)
                self.assertEqual(os.listdir(self.cache), [], "a refused cache is not written to")

    def test_only_manifests_are_kept(self):
        lock = os.path.join(self.dir, "redist.lock")
        support.run_tool("redist", "lock", "cudnn", "9.27.0", "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", lock, "--no-cache", check=0)
        # Upstream now serves something that is not a manifest at the locked URL.
        with open(support.manifest_path("cudnn", "9.27.0", self.mirror), "w") as f:
            f.write("<html>502 Bad Gateway</html>\n")
        res = support.run_tool("redist", "fetch", "--locked", lock, "--prefix", os.path.join(self.dir, "locked"),
                               "--platform", "linux-x86_64", "--cuda", "12", "--cache-dir", self.cache,
                               "--base-url", self.base, check=0)
        self.assertIn("cannot re-read the locked manifest", res.stderr)  # and keeps nothing of it
        documents = os.path.join(self.cache, "history", "documents")
        self.assertEqual(os.listdir(documents), [], "no document that is not a manifest")
        # Only the installed artifact's URL is in the history, not the manifest's.
        self.assertEqual(len(self.history_files()), 1)

    # ---- what reaches the terminal -------------------------------------------------------

    def test_drift_warning_escapes_manifest_strings(self):
        self.fetch("p1", check=0)
        path = support.manifest_path("cudnn", "9.27.0", self.mirror)
        m = support.load_manifest("cudnn", "9.27.0", self.mirror)
        m["cudnn_jit"]["version"] = "9.27\u001b[31m\u0007red"
        support.save_json(path, m)
        res = self.fetch("p2", check=0)
        err = res.stderr.encode()
        self.assertIn(b"upstream drift", err)
        self.assertIn(b"version: cudnn_jit 9.27.0.42 -> 9.27\\x1b[31m\\x07red", err)
        self.assertNotIn(b"\x1b", err)
        self.assertNotIn(b"\x07", err)
        self.assertNotIn(b"\x1b", res.stdout.encode())


if __name__ == "__main__":
    unittest.main()
