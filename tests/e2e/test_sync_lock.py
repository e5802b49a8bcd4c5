"""The project lock is authoritative, as uv's and pixi's: a plain `redist sync`
installs the locked releases (no index or manifest request) and changes the
lock only where redist.toml changed; `--upgrade [--product P]` moves on;
`--locked` refuses a lock out of date with redist.toml, `--frozen` installs it
unchecked; an artifact replaced in place upstream is an integrity failure
until accepted with `--upgrade --product P`; `redist lock` locks the project
without installing and `redist lock PRODUCT VERSION` never overwrites a
project lock; `sync --strict` fails on manifest drift; the project file is
found in parent directories."""

import hashlib
import os
import re
import unittest

import support
from test_sync import NCCL_LABEL, SyncCase


class AuthoritativeLock(SyncCase):
    def index_path(self):
        return os.path.join(self.mirror, "cudnn", "redist", "index.html")

    def unpublish_cudnn_9_27(self):
        """The index lists 9.8.0 and 9.10.1 only (as before 9.27 was published); returns a function that
        publishes 9.27.0 again."""
        with open(self.index_path()) as f:
            html = f.read()
        with open(self.index_path(), "w") as f:
            f.write(re.sub(r"<a href='redistrib_9\.27\.0\.json'>[^\n]*\n", "", html))

        def publish():
            with open(self.index_path(), "w") as f:
                f.write(html)
        return publish

    def lock_bytes(self):
        with open(self.lock, "rb") as f:
            return f.read()

    def labels(self):
        return {p["name"]: p["release_label"] for p in support.load_json(self.lock)["products"]}

    def paths(self):
        return [e["path"] for e in self.server.log()]

    def test_plain_sync_keeps_the_locked_release_until_upgrade(self):
        publish = self.unpublish_cudnn_9_27()
        self.sync(check=0)
        self.assertEqual(self.labels()["cudnn"], "9.10.1")
        publish()  # cudnn 9.27 is out; the project still says "9"
        locked = self.lock_bytes()

        self.server.reset()
        res = self.sync(check=0)
        self.assertIn("0 components installed, 4 unchanged", res.stdout)
        self.assertNotIn("wrote", res.stdout)
        self.assertEqual(self.lock_bytes(), locked)
        self.assertEqual(self.paths(), [], "the lock answers: no index, no manifest, no archive")
        self.assertEqual(self.receipts()[("cudnn", "cudnn")]["release_label"], "9.10.1")

        # --upgrade names the products it may move; the others keep their locked release.
        self.server.reset()
        self.sync("--upgrade", "--product", "nccl", check=0)
        self.assertNotIn("/cudnn/redist/", self.paths())
        self.assertEqual(self.lock_bytes(), locked)
        res = self.sync("--upgrade", "--product", "cudnn", check=0)
        self.assertIn("1 component installed, 3 unchanged", res.stdout)
        self.assertEqual(self.labels()["cudnn"], "9.27.0")
        self.assertEqual(self.receipts()[("cudnn", "cudnn")]["release_label"], "9.27.0")

        res = self.sync("--upgrade", "--product", "cudnnn")
        self.assertEqual(res.returncode, 2, support.describe(res))
        self.assertIn("did you mean 'cudnn'", res.stderr)
        res = self.sync("--product", "cudnn")
        self.assertEqual(res.returncode, 2, support.describe(res))
        self.assertIn("--upgrade", res.stderr)

    def test_only_what_changed_in_the_project_is_resolved(self):
        publish = self.unpublish_cudnn_9_27()
        self.sync(check=0)
        publish()
        # nccl leaves the project, and the platforms change: every product is selected again for the
        # new platforms, at its locked release (cudnn stays 9.10.1 though "9" now means 9.27.0).
        self.write_project(products=("cuda", "cudnn"), platforms=("linux-x86_64",))
        self.server.reset()
        res = self.sync(check=0)
        self.assertIn("wrote", res.stdout)
        paths = self.paths()
        self.assertIn("/cudnn/redist/redistrib_9.10.1.json", paths)
        self.assertNotIn("/cudnn/redist/", paths, "a locked release needs no index")
        lock = support.load_json(self.lock)
        self.assertEqual(lock["platforms"], ["linux-x86_64"])
        self.assertEqual(self.labels(), {"cuda": "12.9.1", "cudnn": "9.10.1"})
        self.assertEqual({a["platform"] for p in lock["products"] for a in p["artifacts"]}, {"linux-x86_64"})
        self.assertNotIn(("nccl", "nccl"), self.receipts())
        self.sync("--locked", check=0)

    def test_locked_needs_a_lock_and_neither_mode_writes_it(self):
        for mode in ("--locked", "--frozen"):
            res = self.sync(mode)
            self.assertEqual(res.returncode, 4, support.describe(res))
            self.assertIn("no lock file", res.stderr)
            self.assertIn("redist lock", res.stderr)
            self.assertFalse(os.path.exists(self.lock))
            self.assertFalse(os.path.exists(self.prefix))
        self.sync(check=0)
        res = self.sync("--locked", "--upgrade")
        self.assertEqual(res.returncode, 2, support.describe(res))

    def test_a_lock_that_cannot_be_read_is_never_replaced(self):
        self.write_project(products=("nccl",))
        with open(self.lock, "w") as f:
            f.write('{"lock_version": 2, "platforms": ["linux-x86_64"], "products": [}\n')
        for args in ((), ("--upgrade",), ("--frozen",)):
            res = self.sync(*args)
            self.assertEqual(res.returncode, 4, support.describe(res))
            self.assertIn(self.lock, res.stderr)
            with open(self.lock) as f:
                self.assertIn("[}", f.read())
        # Never read through a symlink at its name: --frozen refuses it, a plain sync replaces it.
        victim = os.path.join(self.dir, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        os.unlink(self.lock)
        os.symlink(victim, self.lock)
        res = self.sync("--frozen")
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("not a regular file", res.stderr)
        res = self.sync(check=0)
        self.assertIn("not a regular file", res.stderr)
        self.assertFalse(os.path.islink(self.lock))
        self.assertEqual(support.load_json(self.lock)["lock_version"], 2)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")

    def replace_cudnn_in_place(self):
        """cudnn 9.27.0's linux-x86_64 cuda12 archive gets other bytes, under its old name, and the manifest
        says so. Returns (old sha256, new sha256)."""
        path = support.manifest_path("cudnn", "9.27.0", self.mirror)
        manifest = support.load_manifest("cudnn", "9.27.0", self.mirror)
        old = support.find_artifact(manifest, "cudnn", "linux-x86_64", "cuda12")
        rel = old["relative_path"]
        top = os.path.basename(rel)[:-len(".tar.xz")]
        data = support.write_xz_archive(os.path.join(self.mirror, "cudnn", "redist"), rel, top,
                                        {"LICENSE": b"license\n", "include/cudnn_replaced.h": b"// replaced\n"})
        manifest["cudnn"]["linux-x86_64"]["cuda12"] = support.artifact_entry(rel, data)
        support.save_json(path, manifest)
        return old["sha256"], hashlib.sha256(data).hexdigest()

    def test_an_artifact_replaced_in_place_is_an_integrity_failure_until_accepted(self):
        self.write_project(products=("cudnn",))
        self.sync(check=0)
        locked = self.lock_bytes()
        old, new = self.replace_cudnn_in_place()

        # The installed prefix holds the locked bytes: nothing to do, nothing rewritten.
        res = self.sync(check=0)
        self.assertIn("1 unchanged", res.stdout)
        self.assertEqual(self.lock_bytes(), locked)
        # Downloading it again: the archive does not match the lock.
        res = self.sync("--prefix", os.path.join(self.dir, "fresh"), "--no-cache", "--retries", "1")
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn(old, res.stderr)
        self.assertIn("redist sync --upgrade --product cudnn", res.stderr)
        # Resolving the locked release again (the components changed): the manifest names other bytes.
        self.write_project(products=("cudnn",), cudnn_components='["cudnn", "cudnn_jit"]')
        res = self.sync()
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("cudnn cudnn linux-x86_64 cuda12", res.stderr)
        self.assertIn("replaced upstream", res.stderr)
        self.assertIn(old, res.stderr)
        self.assertIn(new, res.stderr)
        self.assertIn("redist sync --upgrade --product cudnn", res.stderr)
        self.assertEqual(self.lock_bytes(), locked, "the lock's hash is never rewritten silently")
        self.assertEqual(self.receipts()[("cudnn", "cudnn")]["archive_sha256"], old)

        res = self.sync("--upgrade", "--product", "cudnn", check=0)
        self.assertIn("replaced upstream", res.stderr)
        shas = {a["sha256"] for p in support.load_json(self.lock)["products"] for a in p["artifacts"]}
        self.assertIn(new, shas)
        self.assertNotIn(old, shas)
        self.assertEqual(self.receipts()[("cudnn", "cudnn")]["archive_sha256"], new)

    def test_redist_lock_locks_the_project_without_installing(self):
        publish = self.unpublish_cudnn_9_27()
        below = os.path.join(self.dir, "src", "deeper")
        os.makedirs(below)
        lock = ("redist", "lock", "--cache-dir", self.cache)
        res = support.run_tool(*lock, cwd=below, check=0)
        self.assertIn("locked cudnn 9.10.1", res.stdout)
        self.assertEqual(self.labels(), {"cuda": "12.9.1", "cudnn": "9.10.1", "nccl": NCCL_LABEL})
        self.assertFalse(os.path.exists(self.prefix), "redist lock installs nothing")
        publish()
        locked = self.lock_bytes()
        res = support.run_tool(*lock, cwd=below, check=0)
        self.assertNotIn("wrote", res.stdout)
        self.assertEqual(self.lock_bytes(), locked)
        support.run_tool(*lock, "--upgrade", "--product", "cudnn", cwd=below, check=0)
        self.assertEqual(self.labels()["cudnn"], "9.27.0")
        self.assertFalse(os.path.exists(self.prefix))

        # A single-release lock never replaces the project's.
        locked = self.lock_bytes()
        single = ("redist", "lock", "nccl", NCCL_LABEL, "--base-url", self.server.url(), "--cache-dir", self.cache,
                  "--platform", "linux-x86_64")
        res = support.run_tool(*single, cwd=self.dir)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("project lock", res.stderr)
        self.assertEqual(self.lock_bytes(), locked)
        other = os.path.join(self.dir, "nccl.lock")
        support.run_tool(*single, "-o", other, cwd=self.dir, check=0)
        self.assertEqual(support.load_json(other)["lock_version"], 1)
        res = support.run_tool(*single, "--upgrade", cwd=self.dir)
        self.assertEqual(res.returncode, 2, support.describe(res))

    def test_sync_finds_the_project_file_in_a_parent_directory(self):
        self.write_project(products=("nccl",))
        below = os.path.join(self.dir, "repo", "build")
        os.makedirs(below)
        sync = ("redist", "sync", "--platform", "linux-x86_64", "--cache-dir", self.cache)
        support.run_tool(*sync, cwd=below, check=0)
        self.assertIn(("nccl", "nccl"), self.receipts())  # the prefix is the project's, beside redist.toml
        self.assertTrue(os.path.isfile(self.lock))
        # The search stops at a repository's root.
        os.makedirs(os.path.join(self.dir, "repo", ".git"))
        res = support.run_tool(*sync, cwd=below)
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("no redist.toml", res.stderr)

    def test_strict_sync_fails_on_manifest_drift(self):
        self.write_project(products=("nccl",))
        self.sync(check=0)  # the cache remembers the manifest
        locked = self.lock_bytes()
        path = support.manifest_path("nccl", NCCL_LABEL, self.mirror)
        manifest = support.load_manifest("nccl", NCCL_LABEL, self.mirror)
        manifest["release_date"] = "2099-01-01"
        support.save_json(path, manifest)
        res = self.sync("--upgrade", "--strict")
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("drift", res.stderr)
        self.assertEqual(self.lock_bytes(), locked)
        res = self.sync("--upgrade", check=0)
        self.assertIn("upstream drift", res.stderr)


if __name__ == "__main__":
    unittest.main()
