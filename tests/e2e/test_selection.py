"""What `redist fetch` installs when the command line says little: the CUDA
toolkit wants --component or --all (never the driver by default), --cuda N
picks the newest N.x release of the cuda product, and a VERSION beside
--manifest or --locked must name the release they hold."""

import json
import os
import unittest

import support

USAGE = 2


class Selection(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.dir, "prefix")
        self.base = support.file_base_url()

    def fetch(self, *args, check=None):
        return support.run_tool("redist", "fetch", *args, "--base-url", self.base, "--prefix", self.prefix,
                                "--platform", "linux-x86_64", "--no-cache", "--no-check", check=check)

    def receipts(self):
        out = {}
        for root, _dirs, files in os.walk(os.path.join(self.prefix, ".redist", "receipts")):
            for name in files:
                r = support.load_json(os.path.join(root, name))
                out[r["component"]] = r
        return out

    def one_line_usage_error(self, res):
        self.assertEqual(res.returncode, USAGE, support.describe(res))
        self.assertEqual(len(res.stderr.splitlines()), 1, res.stderr)
        return res.stderr

    def with_driver_components(self):
        """The demo toolkit with driver components added (as the real ones have)."""
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cuda"])
        path = support.manifest_path("cuda", "12.9.1", mirror)
        manifest = support.load_json(path)
        for name in ("nvidia_driver", "fabricmanager"):
            manifest[name] = dict(manifest["cuda_cudart"], name=name)
        support.save_json(path, manifest)
        self.base = support.file_base_url(mirror)

    def test_cuda_without_component_or_all_is_refused(self):
        self.with_driver_components()
        err = self.one_line_usage_error(self.fetch("cuda", "12.9.1"))
        self.assertIn("this release has 10 components", err)
        self.assertRegex(err, r"largest: \w+ [\d.]+ [KMG]iB, ")
        self.assertIn("--component a,b", err)
        self.assertIn("--all", err)
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "receipts")))

    def test_a_small_bundle_without_a_driver_installs_whole(self):
        # The demo toolkit as published: 8 small components, no driver.
        res = self.fetch("cuda", "12.9.1", "--json", check=0)
        installed = {c["component"] for c in json.loads(res.stdout)["components"]}
        self.assertEqual(len(installed), 8, installed)

    def test_all_installs_everything_but_the_driver(self):
        self.with_driver_components()
        err = self.one_line_usage_error(self.fetch("cuda", "12.9.1"))
        self.assertIn("this release has 10 components", err)
        res = self.fetch("cuda", "12.9.1", "--all", "--json", check=0)
        installed = {c["component"] for c in json.loads(res.stdout)["components"]}
        self.assertEqual(len(installed), 8, installed)
        self.assertFalse(installed & {"nvidia_driver", "fabricmanager"})
        # --all and --component do not go together.
        self.one_line_usage_error(self.fetch("cuda", "12.9.1", "--all", "--component", "cuda_nvcc"))

    def test_a_library_family_keeps_every_component_by_default(self):
        self.fetch("cudnn", "9.27.0", "--cuda", "12", "--quiet", check=0)
        self.assertEqual(set(self.receipts()), {"cudnn", "cudnn_jit"})

    def test_cuda_major_picks_the_newest_release_of_the_cuda_product(self):
        res = self.fetch("cuda", "--component", "cuda_cudart", "--cuda", "12", "--json", check=0)
        self.assertEqual(json.loads(res.stdout)["release_label"], "12.9.1")
        self.assertEqual(self.receipts()["cuda_cudart"]["release_label"], "12.9.1")
        res = self.fetch("cuda", "12", "--component", "cuda_cudart", "--cuda", "12", "--json", check=0)
        self.assertEqual(json.loads(res.stdout)["release_label"], "12.9.1")
        err = self.one_line_usage_error(self.fetch("cuda", "13.0.0", "--component", "cuda_cudart", "--cuda", "12"))
        self.assertIn("version '13.0.0' is not a CUDA 12 release, but --cuda 12 asks for one", err)

    def test_version_beside_manifest_or_lock_must_agree(self):
        manifest = support.manifest_path("cudnn", "9.27.0")
        err = self.one_line_usage_error(
            self.fetch("cudnn", "9.8.0", "--manifest", manifest, "--component", "cudnn", "--cuda", "12"))
        self.assertIn("VERSION 9.8.0 disagrees with --manifest " + manifest + ", which holds release 9.27.0", err)
        self.fetch("cudnn", "9.27", "--manifest", manifest, "--component", "cudnn", "--cuda", "12", "--quiet",
                   check=0)
        self.assertEqual(self.receipts()["cudnn"]["release_label"], "9.27.0")

        lock = os.path.join(self.dir, "redist.lock")
        support.run_tool("redist", "lock", "cudnn", "9.27.0", "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", lock, check=0)
        err = self.one_line_usage_error(self.fetch("cudnn", "9.8", "--locked", lock, "--cuda", "12"))
        self.assertIn("VERSION 9.8 disagrees with --locked " + lock + ", which holds release 9.27.0", err)
        self.fetch("cudnn", "9.27.0", "--locked", lock, "--cuda", "12", "--quiet", "--force", check=0)


if __name__ == "__main__":
    unittest.main()
