"""Dependencies: what a release needs of the CUDA toolkit that NVIDIA's
manifests do not say (redist/dependencies.hpp: cuDNN needs cuda_cudart,
libcublas and cuda_nvrtc of the `cuda` product at its variant's CUDA major,
and cuda_crt for CUDA 13). `fetch --with-deps` installs them in the same
transaction; without it the summary names what is missing and the command
that adds it; `deps = true` in redist.toml locks and installs them with the
project."""

import json
import os
import re
import shlex
import unittest

import support

PLATFORM = "linux-x86_64"
DEPS_12 = ["cuda_cudart", "libcublas", "cuda_nvrtc"]


def receipts(prefix, product):
    d = os.path.join(prefix, ".redist", "receipts", product)
    if not os.path.isdir(d):
        return {}
    return {name[:-5]: support.load_json(os.path.join(d, name)) for name in sorted(os.listdir(d))}


class FetchWithDeps(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.base = support.file_base_url()
        self.prefix = os.path.join(self.dir, "prefix")

    def fetch(self, *args, check=True, base=None):
        return support.run_tool("cudnn-fetch", "9.27.0", "--cuda", "12", "--platform", PLATFORM,
                                "--base-url", base or self.base, "--prefix", self.prefix, "--no-check",
                                *args, check=check)

    def test_with_deps_installs_the_newest_cuda_release_of_the_major(self):
        res = self.fetch("--with-deps")
        self.assertIn("with its dependencies: cuda 12.9.1 (the newest CUDA 12.x release): "
                      "cuda_cudart, libcublas, cuda_nvrtc", res.stdout)
        self.assertIn("installed cuda 12.9.1", res.stdout)
        self.assertNotIn("missing dependencies", res.stdout)
        cuda = receipts(self.prefix, "cuda")
        self.assertEqual(sorted(cuda), sorted(DEPS_12))
        self.assertEqual({r["release_label"] for r in cuda.values()}, {"12.9.1"})
        self.assertEqual(sorted(receipts(self.prefix, "cudnn")), ["cudnn"])
        for path in ("include/cuda_runtime_api.h", "include/cublasLt.h", "include/nvrtc.h", "lib/libcudart.so",
                     "lib/libcublasLt.so", "include/cudnn.h"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, path)), path)
        # Verified like the rest: redist verify finds every file as its receipt says.
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=True)
        # Again: nothing to do, nothing missing.
        again = self.fetch("--with-deps")
        self.assertNotIn("with its dependencies", again.stdout)
        self.assertNotIn("missing dependencies", again.stdout)

    def test_without_deps_the_summary_names_them_and_the_command_works(self):
        res = self.fetch()
        line = [l for l in res.stdout.splitlines() if l.startswith("missing dependencies:")]
        self.assertEqual(len(line), 1, support.describe(res))
        self.assertIn("cudnn 9.27.0 (CUDA 12) needs cuda_cudart, libcublas, cuda_nvrtc of the cuda product", line[0])
        self.assertEqual(receipts(self.prefix, "cuda"), {})
        command = re.search(r"`(redist fetch [^`]+)`", line[0]).group(1)
        self.assertIn(f"redist fetch cuda 12 --component {','.join(DEPS_12)} --prefix {self.prefix}", command)
        argv = shlex.split(command)[1:]
        support.run_tool("redist", *argv, "--no-check", check=True)
        self.assertEqual(sorted(receipts(self.prefix, "cuda")), sorted(DEPS_12))
        self.assertNotIn("missing dependencies", self.fetch("--force").stdout)

    def test_the_suggested_command_carries_no_credentials(self):
        base = support.nginx_base_url().replace("http://", "http://someone:hunter2@", 1)
        res = self.fetch(base=base)
        line = [l for l in res.stdout.splitlines() if l.startswith("missing dependencies:")]
        self.assertEqual(len(line), 1, support.describe(res))
        self.assertIn("--base-url http://", line[0])
        self.assertNotIn("hunter2", res.stdout + res.stderr)

    def test_check_names_missing_dependencies(self):
        self.fetch()
        res = support.run_tool("redist", "check", "--prefix", self.prefix, "--quick")
        expected = (f"WARN deps: cudnn 9.27.0 (CUDA 12) needs cuda_cudart, libcublas, cuda_nvrtc of the cuda product, "
                    f"which this prefix lacks")
        self.assertIn(expected, res.stdout, support.describe(res))
        self.assertIn(f"redist fetch cuda 12 --component cuda_cudart,libcublas,cuda_nvrtc --prefix {self.prefix}",
                      res.stdout)
        self.fetch("--with-deps")
        res = support.run_tool("redist", "check", "--prefix", self.prefix, "--quick")
        self.assertNotIn("deps:", res.stdout, support.describe(res))

    def test_json_names_missing_and_added_dependencies(self):
        missing = json.loads(self.fetch("--json").stdout)
        self.assertEqual(missing["missing_dependencies"],
                         {"product": "cuda", "cuda_major": 12, "components": DEPS_12})
        self.assertNotIn("dependencies", missing)
        added = json.loads(self.fetch("--json", "--with-deps").stdout)
        self.assertNotIn("missing_dependencies", added)
        self.assertEqual(len(added["dependencies"]), 1)
        self.assertEqual(added["dependencies"][0]["product"], "cuda")
        self.assertEqual(added["dependencies"][0]["release_label"], "12.9.1")
        self.assertEqual(sorted(c["component"] for c in added["dependencies"][0]["components"]), sorted(DEPS_12))

    def test_one_transaction_a_bad_dependency_installs_nothing(self):
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cudnn", "cuda"])
        manifest = support.load_manifest("cuda", "12.9.1", mirror)
        rel = manifest["libcublas"][PLATFORM]["relative_path"]
        path = support.artifact_path("cuda", rel, mirror)
        with open(path, "r+b") as f:  # same size, other bytes: the manifest's SHA-256 refuses it
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        res = self.fetch("--with-deps", "--no-cache", check=None, base=support.file_base_url(mirror))
        self.assertEqual(res.returncode, 5, support.describe(res))  # integrity
        self.assertEqual(receipts(self.prefix, "cudnn"), {})
        self.assertEqual(receipts(self.prefix, "cuda"), {})

    def test_a_dependency_the_release_lacks_is_an_error_naming_it(self):
        # A CUDA 13.0.0 without cuda_crt, which cuDNN for CUDA 13 needs.
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cudnn", "cuda"])
        manifest = support.load_manifest("cuda", "13.0.0", mirror)
        del manifest["cuda_crt"]
        support.save_json(support.manifest_path("cuda", "13.0.0", mirror), manifest)
        res = support.run_tool("cudnn-fetch", "9.27.0", "--cuda", "13", "--platform", PLATFORM, "--base-url",
                               support.file_base_url(mirror), "--prefix", self.prefix, "--no-check", "--with-deps",
                               check=None)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("the dependencies of cudnn 9.27.0 (cuda 13)", res.stderr)
        self.assertIn("cuda_crt", res.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "receipts")))

    def test_the_cuda_release_already_in_the_prefix_is_kept(self):
        # A second CUDA 12 release, older than 12.9.1, with the same archives.
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cudnn", "cuda"])
        manifest = support.load_manifest("cuda", "12.9.1", mirror)
        manifest["release_label"] = "12.8.0"
        support.save_json(support.manifest_path("cuda", "12.8.0", mirror), manifest)
        index = os.path.join(mirror, "cuda", "redist", "index.html")
        if os.path.exists(index):
            os.remove(index)  # a file:// base lists the directory instead
        base = support.file_base_url(mirror)
        support.run_tool("redist", "fetch", "cuda", "12.8.0", "--component", "cuda_cudart", "--platform", PLATFORM,
                         "--base-url", base, "--prefix", self.prefix, "--no-check", check=True)
        res = self.fetch("--with-deps", base=base)
        self.assertIn("with its dependencies: cuda 12.8.0 (the cuda release in the prefix): libcublas, cuda_nvrtc",
                      res.stdout)
        self.assertEqual({r["release_label"] for r in receipts(self.prefix, "cuda").values()}, {"12.8.0"})
        self.assertEqual(sorted(receipts(self.prefix, "cuda")), sorted(DEPS_12))

    def test_cuda_13_adds_cuda_crt(self):
        # cuda_crt holds the crt/ headers cuda_runtime.h includes from CUDA 13 on.
        res = support.run_tool("cudnn-fetch", "9.27.0", "--cuda", "13", "--platform", PLATFORM, "--base-url",
                               self.base, "--prefix", self.prefix, "--no-check", "--with-deps", check=True)
        self.assertIn("cuda 13.0.0 (the newest CUDA 13.x release): cuda_cudart, cuda_crt, libcublas, cuda_nvrtc",
                      res.stdout)
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, "include", "crt", "host_defines.h")))
        self.assertEqual(receipts(self.prefix, "cudnn")["cudnn"]["variant"], "cuda13")

    def test_deps_cuda_version_of_another_major_is_a_usage_error(self):
        res = self.fetch("--deps-cuda-version", "13.0.0", check=2)
        self.assertIn("--deps-cuda-version 13.0.0 is not a CUDA 12 release", res.stderr)
        res = self.fetch("--deps-cuda-version", "12.9", check=True)
        self.assertEqual({r["release_label"] for r in receipts(self.prefix, "cuda").values()}, {"12.9.1"})

    def test_with_deps_and_locked_is_a_usage_error(self):
        res = support.run_tool("redist", "fetch", "--locked", os.path.join(self.dir, "none.lock"), "--with-deps",
                               "--prefix", self.prefix, check=2)
        self.assertIn("--with-deps needs PRODUCT [VERSION]", res.stderr)

    def test_a_release_without_dependencies_says_nothing(self):
        res = support.run_tool("redist", "fetch", "cuda", "12.9.1", "--component", "cuda_cudart", "--platform",
                               PLATFORM, "--base-url", self.base, "--prefix", self.prefix, "--no-check",
                               "--with-deps", check=True)
        self.assertNotIn("with its dependencies", res.stdout)
        self.assertNotIn("missing dependencies", res.stdout)
        self.assertEqual(sorted(receipts(self.prefix, "cuda")), ["cuda_cudart"])


class ProjectDeps(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.base = support.file_base_url()
        self.project = os.path.join(self.dir, "redist.toml")
        self.prefix = os.path.join(self.dir, "prefix")

    def write(self, body):
        with open(self.project, "w") as f:
            f.write(f'[project]\nprefix = "prefix"\nplatforms = ["{PLATFORM}"]\ncuda = "12"\n\n' + body)

    def sync(self, *args, check=True):
        return support.run_tool("redist", "sync", "--file", self.project, "--base-url", self.base,
                                "--platform", PLATFORM, *args, check=check)

    def test_deps_true_locks_and_installs_the_cuda_release(self):
        self.write('[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\ndeps = true\n')
        self.sync()
        lock = support.load_json(os.path.join(self.dir, "redist.lock"))
        by_name = {p["name"]: p for p in lock["products"]}
        self.assertEqual(sorted(by_name), ["cuda", "cudnn"])
        self.assertTrue(by_name["cudnn"]["deps"])
        self.assertEqual(by_name["cuda"]["dependency_of"], ["cudnn"])
        self.assertEqual(by_name["cuda"]["release_label"], "12.9.1")
        self.assertEqual(by_name["cuda"]["components"], DEPS_12)
        self.assertEqual(sorted(receipts(self.prefix, "cuda")), sorted(DEPS_12))
        # The lock is current: --locked accepts it, and nothing changes.
        before = support.tree_snapshot(self.prefix)
        self.sync("--locked")
        self.assertEqual(support.tree_snapshot(self.prefix), before)
        # deps = true removed: the lock is stale, and a sync removes the dependencies.
        self.write('[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\n')
        res = self.sync("--locked", check=None)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("deps is false in the project file, true in the lock", res.stderr)
        self.sync()
        self.assertEqual(receipts(self.prefix, "cuda"), {})
        lock = support.load_json(os.path.join(self.dir, "redist.lock"))
        self.assertEqual([p["name"] for p in lock["products"]], ["cudnn"])

    def test_a_named_cuda_product_must_list_the_dependencies(self):
        self.write('[products.cuda]\nversion = "12.9.1"\ncomponents = ["cuda_cudart"]\n\n'
                   '[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\ndeps = true\n')
        res = self.sync(check=4)
        self.assertIn("needs libcublas, cuda_nvrtc from products.cuda: add them to its components", res.stderr)
        self.write('[products.cuda]\nversion = "12.9.1"\ncomponents = ["cuda_cudart", "libcublas", "cuda_nvrtc"]\n\n'
                   '[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\ndeps = true\n')
        self.sync()
        lock = support.load_json(os.path.join(self.dir, "redist.lock"))
        cuda = [p for p in lock["products"] if p["name"] == "cuda"][0]
        self.assertNotIn("dependency_of", cuda)


if __name__ == "__main__":
    unittest.main()
