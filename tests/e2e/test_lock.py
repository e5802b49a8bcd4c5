"""Lock files: `redist lock` then `redist fetch --locked`, drift detection, --manifest-sha256."""

import hashlib
import json
import os
import unittest

import support


class LockFiles(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cudnn"])
        self.base = support.file_base_url(self.mirror)
        self.lock = os.path.join(self.dir, "redist.lock")

    def make_lock(self):
        support.run_tool("redist", "lock", "cudnn", "9.27", "--base-url", self.base, "--platform", "linux-x86_64",
                         "--platform", "linux-sbsa", "--component", "cudnn", "-o", self.lock, check=0)
        return support.load_json(self.lock)

    def test_round_trip_installs_exactly_the_lock(self):
        lock = self.make_lock()
        manifest = support.load_manifest("cudnn", "9.27.0", self.mirror)
        with open(support.manifest_path("cudnn", "9.27.0", self.mirror), "rb") as f:
            self.assertEqual(lock["manifest_sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(lock["release_label"], "9.27.0")
        expected = {(p, v, rec["sha256"], int(rec["size"]))
                    for c, p, v, rec in support.iter_artifacts(manifest)
                    if c == "cudnn" and p in ("linux-x86_64", "linux-sbsa")}
        self.assertEqual({(a["platform"], a["variant"], a["sha256"], a["size"]) for a in lock["artifacts"]}, expected)
        # Stable: locking again gives the same bytes.
        with open(self.lock) as f:
            first = f.read()
        self.make_lock()
        with open(self.lock) as f:
            self.assertEqual(f.read(), first)

        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix, "--cuda", "12",
                               "--platform", "linux-x86_64", "--no-cache", "--json", "--base-url", self.base, check=0)
        report = json.loads(res.stdout)
        want = support.find_artifact(manifest, "cudnn", "linux-x86_64", "cuda12")
        self.assertEqual([c["sha256"] for c in report["components"]], [want["sha256"]])
        receipt = support.load_json(os.path.join(prefix, ".redist", "receipts", "cudnn", "cudnn.json"))
        self.assertEqual(receipt["archive_sha256"], want["sha256"])
        self.assertEqual(receipt["release_label"], "9.27.0")

    def test_manifest_drift_warns_and_changed_artifact_fails(self):
        self.make_lock()
        path = support.manifest_path("cudnn", "9.27.0", self.mirror)
        manifest = support.load_manifest("cudnn", "9.27.0", self.mirror)
        # Harmless drift: the manifest's bytes change, the locked artifacts do not.
        manifest["release_date"] = "2099-01-01"
        support.save_json(path, manifest)
        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix, "--cuda", "12",
                               "--platform", "linux-x86_64", "--no-cache", "--base-url", self.base, check=0)
        self.assertIn("changed since it was locked", res.stderr)
        # Real drift: a locked artifact's hash changed upstream -> hard error, nothing installed.
        manifest["cudnn"]["linux-x86_64"]["cuda13"]["sha256"] = "0" * 64
        support.save_json(path, manifest)
        prefix2 = os.path.join(self.dir, "prefix2")
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix2, "--cuda", "13",
                               "--platform", "linux-x86_64", "--no-cache", "--base-url", self.base)
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("changed the locked artifact", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 2)  # the drift warning, then the error
        self.assertFalse(os.path.exists(os.path.join(prefix2, "include")))

    def test_lock_for_a_platform_it_does_not_hold(self):
        self.make_lock()
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", os.path.join(self.dir, "p"),
                               "--platform", "windows-x86_64", "--no-cache", "--base-url", self.base)
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("linux-x86_64", res.stderr)

    def test_manifest_sha256_pin(self):
        with open(support.manifest_path("cudnn", "9.27.0", self.mirror), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        support.run_tool("redist", "show", "cudnn", "9.27.0", "--base-url", self.base, "--manifest-sha256", digest,
                         check=0)
        res = support.run_tool("redist", "show", "cudnn", "9.27.0", "--base-url", self.base,
                               "--manifest-sha256", "ab" * 32)
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn(digest, res.stderr)

    def test_a_local_file_in_a_lock_is_refused_and_never_kept(self):
        secret = os.path.join(self.dir, "secret.txt")  # outside the mirror the command line names
        marker = b"NOT-FOR-THE-CACHE-" + os.urandom(8).hex().encode()
        with open(secret, "wb") as f:
            f.write(marker)
        doc = self.make_lock()
        doc["manifest_url"] = "file://" + secret
        support.save_json(self.lock, doc)
        cache = os.path.join(self.dir, "cache")
        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix, "--cuda", "12",
                               "--platform", "linux-x86_64", "--cache-dir", cache, "--base-url", self.base)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        self.assertIn(self.lock, res.stderr)
        self.assertIn("manifest_url", res.stderr)
        self.assertFalse(os.path.exists(os.path.join(prefix, "include")))
        for root, _dirs, files in os.walk(cache):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(marker, f.read(), os.path.join(root, name))
        # A lock made from a local base needs that base named again: the lock alone is not enough.
        self.make_lock()
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix, "--cuda", "12",
                               "--platform", "linux-x86_64", "--no-cache")
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("manifest_url", res.stderr)

    def test_locked_falls_back_from_a_dead_mirror_to_the_base(self):
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror2"), products=["cudnn"])
        mirror_url = support.file_base_url(mirror)
        support.run_tool("redist", "lock", "cudnn", "9.27", "--base-url", self.base, "--mirror", mirror_url,
                         "--platform", "linux-x86_64", "--component", "cudnn", "-o", self.lock, check=0)
        # The lock names the base, not the mirror that served the manifest.
        self.assertTrue(support.load_json(self.lock)["manifest_url"].startswith(self.base), self.lock)
        support.rm_tree(mirror)  # the mirror is gone; the base still serves
        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", prefix, "--cuda", "12",
                               "--platform", "linux-x86_64", "--no-cache", "--json", "--base-url", self.base,
                               "--mirror", mirror_url, "--retries", "1", check=0)
        report = json.loads(res.stdout)
        self.assertEqual([c["status"] for c in report["components"]], ["installed"])
        self.assertNotIn("cannot re-read the locked manifest", res.stderr)
        receipt = support.load_json(os.path.join(prefix, ".redist", "receipts", "cudnn", "cudnn.json"))
        self.assertTrue(receipt["url"].startswith(self.base), receipt["url"])

    def test_corrupt_lock_file(self):
        with open(self.lock, "w") as f:
            f.write('{"lock_version": 1, "product": "cudnn", "artifacts": [{"component": "cudnn"}]}')
        res = support.run_tool("redist", "fetch", "--locked", self.lock, "--prefix", os.path.join(self.dir, "p"))
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(self.lock, res.stderr)
        self.assertIn("artifacts[0]", res.stderr)


class CudaMajorPicksTheToolkit(unittest.TestCase):
    """The cuda product's releases are CUDA versions: a CUDA major makes
    "latest" the newest N.x, in `redist lock` and `redist sync` as in
    `redist fetch cuda latest --cuda N` (the demo mirror: 12.9.1 and 13.0.0)."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.project = os.path.join(self.dir, "redist.toml")
        self.lock = os.path.join(self.dir, "redist.lock")
        self.source = ["--base-url", support.file_base_url(), "--no-cache"]

    def write(self, project_cuda, product):
        with open(self.project, "w") as f:
            f.write('[project]\nprefix = "prefix"\nplatforms = ["linux-x86_64"]\n'
                    + (f'cuda = "{project_cuda}"\n' if project_cuda else "") + "\n[products]\n" + product + "\n")

    def lock_project(self, check=0):
        return support.run_tool("redist", "lock", "--file", self.project, *self.source, check=check)

    def locked(self):
        (product,) = support.load_json(self.lock)["products"]
        return product["release_label"], product.get("cuda")

    def test_project_and_product_cuda_pick_the_newest_of_that_major(self):
        self.write(None, 'cuda = { version = "latest", components = ["cuda_cudart"] }')
        self.lock_project()
        self.assertEqual(self.locked(), ("13.0.0", None))
        self.write("12", 'cuda = { version = "latest", components = ["cuda_cudart"] }')
        self.lock_project()
        self.assertEqual(self.locked(), ("12.9.1", None))
        # The product's own cuda wins over the project's, and is part of the
        # lock's inputs: changing it re-resolves (a stale lock otherwise).
        self.write("13", 'cuda = { version = "latest", cuda = 12, components = ["cuda_cudart"] }')
        self.lock_project()
        self.assertEqual(self.locked(), ("12.9.1", 12))
        self.write("13", 'cuda = { version = "latest", cuda = 13, components = ["cuda_cudart"] }')
        res = support.run_tool("redist", "sync", "--file", self.project, "--locked", "--platform", "linux-x86_64",
                               *self.source)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("products.cuda.cuda is 13 in the project file, 12 in the lock", res.stderr)
        self.lock_project()
        self.assertEqual(self.locked(), ("13.0.0", 13))
        # A version of another major contradicts the file: one line, exit 4.
        self.write(None, 'cuda = { version = "12.9", cuda = 13 }')
        res = self.lock_project(check=None)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("products.cuda.version", res.stderr)
        self.assertIn("is not a CUDA 13 release, but cuda = 13 asks for one", res.stderr)

    def test_sync_installs_the_newest_release_of_the_projects_major(self):
        self.write("12", 'cuda = { version = "latest", components = ["cuda_cudart"] }')
        support.run_tool("redist", "sync", "--file", self.project, "--platform", "linux-x86_64", *self.source,
                         "--quiet", check=0)
        receipt = support.load_json(os.path.join(self.dir, "prefix", ".redist", "receipts", "cuda",
                                                 "cuda_cudart.json"))
        self.assertEqual(receipt["release_label"], "12.9.1")

    def test_single_release_lock_with_one_cuda(self):
        out = os.path.join(self.dir, "cuda.lock")
        support.run_tool("redist", "lock", "cuda", "latest", "--cuda", "12", "--component", "cuda_cudart",
                         "--platform", "linux-x86_64", "-o", out, *self.source, check=0)
        self.assertEqual(support.load_json(out)["release_label"], "12.9.1")


class PlantedNames(unittest.TestCase):
    """A checkout may hold a symlink at `redist.lock`, at the old fixed temp
    name `redist.lock.tmp`, or anywhere a writer might open: `redist lock` and
    `redist sync` run as root must never write through one (the victim stands
    for /etc/shadow). They replace the symlink at the lock's own name."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cudnn"])
        self.base = support.file_base_url(self.mirror)
        self.lock = os.path.join(self.dir, "redist.lock")
        self.victim = os.path.join(self.dir, "victim")

    def assert_victim_untouched_and_lock_written(self, res, planted, version):
        self.assertEqual(res.returncode, 0, support.describe(res))
        with open(self.victim) as f:
            self.assertEqual(f.read(), "precious\n")
        self.assertFalse(os.path.islink(self.lock))
        self.assertEqual(support.load_json(self.lock)["lock_version"], version)
        if planted != self.lock:
            self.assertTrue(os.path.islink(planted), "what we did not create is left alone")
        self.assertEqual([n for n in os.listdir(self.dir) if ".tmp." in n], [], "no temp file is left")

    def plant(self, name):
        with open(self.victim, "w") as f:
            f.write("precious\n")
        for old in (self.lock, self.lock + ".tmp"):
            if os.path.lexists(old):
                os.unlink(old)
        os.symlink(self.victim, name)

    def test_redist_lock_never_writes_through_a_symlink(self):
        for planted in (self.lock + ".tmp", self.lock):
            with self.subTest(planted=os.path.basename(planted)):
                self.plant(planted)
                res = support.run_tool("redist", "lock", "cudnn", "9.27.0", "--base-url", self.base, "--platform",
                                       "linux-x86_64", "--component", "cudnn", "-o", self.lock, "--no-cache")
                self.assert_victim_untouched_and_lock_written(res, planted, 1)

    def test_redist_sync_never_writes_through_a_symlink(self):
        project = os.path.join(self.dir, "redist.toml")
        with open(project, "w") as f:
            f.write("[project]\nprefix = \"prefix\"\nplatforms = [\"linux-x86_64\"]\ncuda = \"12\"\n"
                    f"base-url = \"{self.base}\"\n\n[products.cudnn]\nversion = \"9.27.0\"\n"
                    "components = [\"cudnn\"]\n")
        for planted in (self.lock + ".tmp", self.lock):
            with self.subTest(planted=os.path.basename(planted)):
                self.plant(planted)
                res = support.run_tool("redist", "sync", "--file", project, "--platform", "linux-x86_64",
                                       "--no-cache", "--quiet")
                self.assert_victim_untouched_and_lock_written(res, planted, 2)


if __name__ == "__main__":
    unittest.main()
