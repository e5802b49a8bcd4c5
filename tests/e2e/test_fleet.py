"""A fleet's mirror with recompressed copies, through the real tools: for a
registry (oci+http://), an OCI image layout (oci-layout:DIR) and a directory
served by nginx, `redist mirror ... --recompress zstd --sign-key KEY` then `cudnn-fetch
--mirror X --trusted-key KEY.pub` with an unreachable upstream installs the
copies (and without the key, the originals): the tree is
the one the original archives give (files, modes, symlinks), and each
receipt names the copy's SHA-256 and the tar's. A tampered copy blob in the
registry is discarded: the original is installed, with one line saying so."""

import json
import os
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.27.0"
PLATFORM = ["--platform", "linux-x86_64", "--cuda", "12"]
UNREACHABLE = "http://127.0.0.1:9/unreachable"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None, "REDIST_OCI_AUTH": None, "DOCKER_CONFIG": None}


class FleetBase(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.key, self.pub = support.make_key_pair(self.scratch)

    def mirror(self, to):
        """Mirrors the demo release to `to` with copies, signed; the copies it reports."""
        res = support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", to, "--base-url",
                               support.file_base_url(), *PLATFORM, "--recompress", "zstd", "--json",
                               "--sign-key", self.key, env=self.env, check=0)
        release = json.loads(res.stdout)["releases"][0]
        self.assertTrue(release["copies"], res.stdout)
        self.assertEqual(release["signed_by"], support.key_fingerprint(self.pub))
        return release["copies"]

    def install(self, mirror, prefix, trust=True):
        keys = ("--trusted-key", self.pub) if trust else ()
        return support.run_tool("cudnn-fetch", LABEL, "--mirror", mirror, "--base-url", UNREACHABLE,
                                "--prefix", prefix, *PLATFORM, "--no-cache", "--retries", "1", *keys,
                                env=self.env, check=0)

    def receipts(self, prefix):
        d = os.path.join(prefix, ".redist", "receipts", "cudnn")
        return [support.load_json(os.path.join(d, n)) for n in sorted(os.listdir(d))]

    def reference_tree(self):
        reference = os.path.join(self.scratch, "reference")
        support.run_tool("cudnn-fetch", LABEL, "--base-url", support.file_base_url(), "--prefix", reference,
                         *PLATFORM, "--no-cache", env=self.env, check=0)
        return support.tree_snapshot(reference, ignore=r"^\.redist(/|$)")

    def tree(self, prefix):
        return support.tree_snapshot(prefix, ignore=r"^\.redist(/|$)")

    def assert_copies_installed(self, mirror, install_from=None):
        """Mirrors to `mirror`, installs from `install_from` (default the same)."""
        copies = self.mirror(mirror)
        prefix = os.path.join(self.scratch, "prefix")
        res = self.install(install_from or mirror, prefix)
        self.assertNotIn("failed", res.stderr)
        by_original = {c["original_sha256"]: c for c in copies}
        used = 0
        for r in self.receipts(prefix):
            c = by_original.get(r["archive_sha256"])
            if c is None:
                self.assertNotIn("copy_sha256", r)
                continue
            used += 1
            self.assertEqual(r["copy_sha256"], c["sha256"], r)
            self.assertEqual(r["tar_sha256"], c["tar_sha256"], r)
        self.assertGreater(used, 0)  # cudnn-fetch installs cudnn; cudnn_jit is mirrored, not installed
        self.assertEqual(self.tree(prefix), self.reference_tree(), support.diff_snapshots(
            self.tree(prefix), self.reference_tree()))
        # Without the operator's key, the same mirror is transport only: the originals, with one line.
        plain = os.path.join(self.scratch, "untrusting")
        res = self.install(install_from or mirror, plain, trust=False)
        lines = [l for l in res.stderr.splitlines() if "not using the mirror's recompressed copies" in l and "no key is trusted" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertTrue(all("copy_sha256" not in r for r in self.receipts(plain)))
        self.assertEqual(self.tree(plain), self.reference_tree())


class DirectoryOverHttp(FleetBase):
    def test_copies_from_a_directory_served_by_nginx(self):
        # nginx serves <nginx>/own/<test>/ as <base>/_own/ (tests/fixtures/nginx_fixture.py).
        name = self.id().rsplit(".", 1)[-1]
        own = os.path.join(support.nginx_dir(), "own", support.test_id() or "manual", name)
        support.rm_tree(own)
        self.addCleanup(support.rm_tree, own)
        self.assert_copies_installed(own, f"{support.nginx_base_url()}/_own/{name}")


class ImageLayout(FleetBase):
    def test_copies_from_an_image_layout(self):
        self.assert_copies_installed("oci-layout:" + os.path.join(self.scratch, "layout"))


@unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                     "docker-registry is not installed (scripts/install-deps.sh)")
class Registry(FleetBase):
    def setUp(self):
        super().setUp()
        self.registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"))
        self.registry.__enter__()
        self.addCleanup(self.registry.__exit__)

    def test_copies_from_a_registry(self):
        self.assert_copies_installed(self.registry.url)

    def test_a_tampered_copy_blob_installs_the_original(self):
        copies = self.mirror(self.registry.url)
        victim = copies[0]
        with open(self.registry.blob_data_path(victim["sha256"]), "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        prefix = os.path.join(self.scratch, "prefix")
        res = self.install(self.registry.url, prefix)
        lines = [l for l in res.stderr.splitlines() if "copy of" in l and "failed" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn("installing the original", lines[0])
        receipt = next(r for r in self.receipts(prefix) if r["archive_sha256"] == victim["original_sha256"])
        self.assertNotIn("copy_sha256", receipt)
        self.assertNotIn("tar_sha256", receipt)
        self.assertEqual(self.tree(prefix), self.reference_tree())
        self.assertEqual(os.listdir(os.path.join(prefix, ".redist", "staging")), [])


if __name__ == "__main__":
    unittest.main()
