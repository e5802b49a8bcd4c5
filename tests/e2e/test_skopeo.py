"""OCI conformance with a real third-party client: what `redist mirror`
pushes to a registry (a release with signed recompressed copies), `skopeo
inspect` accepts, and `skopeo copy` carries to an image layout and to a
second registry whole, signature layer included; runners then install from
each copy with the origin unreachable: the tree is the original's, and the
copy is used exactly when its signer is trusted."""

import json
import os
import shutil
import subprocess
import sys
import unittest

import support
from test_fleet import LABEL, FleetBase

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

SKOPEO = shutil.which("skopeo")


@unittest.skipUnless(SKOPEO and os.access(registry_fixture.REGISTRY, os.X_OK),
                     "skopeo or docker-registry is not installed (scripts/install-deps.sh)")
class SkopeoCopies(FleetBase):
    """The fleet's helpers (test_fleet.FleetBase): a signed mirror, installs, receipts, the reference tree."""

    def setUp(self):
        super().setUp()
        self.registry = self.start_registry("registry")
        self.copies = self.mirror(self.registry.url)

    def start_registry(self, name):
        registry = registry_fixture.Registry(os.path.join(self.scratch, name))
        registry.__enter__()
        self.addCleanup(registry.__exit__)
        return registry

    def docker_ref(self, registry):
        return f"docker://127.0.0.1:{registry.port}/nvidia/cudnn:{LABEL}"

    def skopeo(self, *args):
        res = subprocess.run([SKOPEO, "--insecure-policy", *args], capture_output=True, text=True, timeout=120)
        self.assertEqual(res.returncode, 0, f"skopeo {' '.join(args)}\n{res.stderr}")
        return res.stdout

    def assert_installs_the_copy(self, mirror):
        prefix = os.path.join(self.scratch, "prefix-" + str(len(os.listdir(self.scratch))))
        res = self.install(mirror, prefix)
        self.assertNotIn("recompressed copies", res.stderr)
        by_original = {c["original_sha256"]: c for c in self.copies}
        used = [r for r in self.receipts(prefix) if r["archive_sha256"] in by_original]
        self.assertTrue(used)
        for r in used:
            self.assertEqual(r["copy_sha256"], by_original[r["archive_sha256"]]["sha256"], r)
        self.assertEqual(self.tree(prefix), self.reference_tree(),
                         support.diff_snapshots(self.tree(prefix), self.reference_tree()))
        # Without the signer's key, the same copy of the registry is transport only: the originals.
        plain = prefix + "-untrusting"
        res = self.install(mirror, plain, trust=False)
        self.assertIn("not using the mirror's recompressed copies", res.stderr)
        self.assertTrue(all("copy_sha256" not in r for r in self.receipts(plain)))

    def test_skopeo_inspects_what_redist_pushed(self):
        raw = json.loads(self.skopeo("inspect", "--tls-verify=false", "--raw", self.docker_ref(self.registry)))
        titles = [l["annotations"]["org.opencontainers.image.title"] for l in raw["layers"]]
        self.assertEqual(titles[0], f"redistrib_{LABEL}.json")
        self.assertEqual(titles[-2:], [f"recompressed_{LABEL}.json", f"recompressed_{LABEL}.json.sig"])
        info = json.loads(self.skopeo("inspect", "--tls-verify=false", self.docker_ref(self.registry)))
        self.assertEqual(len(info["Layers"]), len(raw["layers"]))

    def test_a_skopeo_copy_to_an_image_layout_installs(self):
        layout = os.path.join(self.scratch, "layout")
        os.makedirs(layout)
        self.skopeo("copy", "--src-tls-verify=false", self.docker_ref(self.registry),
                    f"oci:{os.path.join(layout, 'cudnn')}:{LABEL}")
        self.assert_installs_the_copy("oci-layout:" + layout)

    def test_a_skopeo_copy_to_a_second_registry_installs(self):
        second = self.start_registry("second")
        self.skopeo("copy", "--src-tls-verify=false", "--dest-tls-verify=false", self.docker_ref(self.registry),
                    self.docker_ref(second))
        self.assert_installs_the_copy(second.url)


if __name__ == "__main__":
    unittest.main()
