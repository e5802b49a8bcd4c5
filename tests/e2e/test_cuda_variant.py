"""The CUDA variant: one rule for `redist fetch`, `redist lock` and
`redist sync`, from a toolkit's files only (its version.json, else its
include/cuda.h), never by running its nvcc; with no toolkit, what the
system's driver supports (a fake libcuda.so.1, asked in the check's child);
and variant keys that name a minor (`cuda13.2`, as CUDA 13.2's cuda_compat
is keyed), carried exactly as keyed into receipts, --json, `show` and the
summary."""

import json
import os
import subprocess
import unittest

import support
from test_check import CC, fake_libcuda

PLATFORM = "linux-x86_64"


def fake_toolkit(root, version_json=None, cuda_h=None):
    """A toolkit directory whose bin/nvcc would leave a marker file if it
    were ever run. Returns (toolkit, marker)."""
    marker = os.path.join(root, "nvcc-ran")
    os.makedirs(os.path.join(root, "bin"))
    nvcc = os.path.join(root, "bin", "nvcc")
    with open(nvcc, "w") as f:
        f.write(f"#!/bin/sh\ntouch '{marker}'\n"
                "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    os.chmod(nvcc, 0o755)
    if version_json:
        support.save_json(os.path.join(root, "version.json"),
                          {"cuda": {"name": "CUDA SDK", "version": version_json}})
    if cuda_h:
        os.makedirs(os.path.join(root, "include"))
        with open(os.path.join(root, "include", "cuda.h"), "w") as f:
            f.write(f"#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n#define CUDA_VERSION {cuda_h}\n#endif\n")
    return root, marker


class ThreeCommands(unittest.TestCase):
    """fetch, lock and sync of cudnn 9.27.0's cudnn, which offers cuda12 and cuda13."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.base = support.file_base_url()

    def fetch_variant(self, env):
        prefix = os.path.join(self.dir, "fetched")
        res = support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--component", "cudnn", "--base-url", self.base,
                               "--platform", PLATFORM, "--prefix", prefix, "--no-cache", "--no-check", env=env,
                               check=0)
        receipt = support.load_json(os.path.join(prefix, ".redist", "receipts", "cudnn", "cudnn.json"))
        return receipt["variant"], res

    def write_project(self, name):
        project_dir = os.path.join(self.dir, name)
        os.makedirs(project_dir)
        project = os.path.join(project_dir, "redist.toml")
        with open(project, "w") as f:
            f.write(f'[project]\nprefix = "prefix"\nplatforms = ["{PLATFORM}"]\n\n'
                    '[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\n')
        return project_dir, project

    def lock_variant(self, env):
        project_dir, project = self.write_project("locked")
        res = support.run_tool("redist", "lock", "--file", project, "--base-url", self.base, "--no-cache", env=env, check=0)
        (product,) = support.load_json(os.path.join(project_dir, "redist.lock"))["products"]
        variants = {a["variant"] for a in product["artifacts"]}
        self.assertEqual(len(variants), 1, product)
        return variants.pop(), product, res

    def sync_variant(self, env):
        project_dir, project = self.write_project("synced")
        res = support.run_tool("redist", "sync", "--file", project, "--platform", PLATFORM, "--base-url", self.base, "--no-cache",
                               env=env, check=0)
        receipt = support.load_json(os.path.join(project_dir, "prefix", ".redist", "receipts", "cudnn",
                                                 "cudnn.json"))
        return receipt["variant"], res



class OneRuleFromFiles(ThreeCommands):
    """A CUDA 12 toolkit must make all three commands pick cuda12 (the
    newest, cuda13, otherwise)."""

    def assert_one_rule(self, env, marker, source):
        fetched, fetch_res = self.fetch_variant(env)
        locked, product, lock_res = self.lock_variant(env)
        synced, _ = self.sync_variant(env)
        self.assertFalse(os.path.exists(marker), "the toolkit's nvcc was run")
        self.assertEqual((fetched, locked, synced), ("cuda12", "cuda12", "cuda12"))
        # Each says which variant and why: the summary line, the lock's note and its record.
        self.assertRegex(fetch_res.stdout, rf"(?m)^cudnn 9\.27\.0 .* for {PLATFORM}, cuda12: detected CUDA 12\.4")
        self.assertIn(source, fetch_res.stdout)
        self.assertRegex(fetch_res.stdout, r"(?m)^installed cudnn 9\.27\.0 into .*, variant cuda12$")
        self.assertNotIn("no CUDA toolkit found", lock_res.stdout + lock_res.stderr)
        self.assertIn(f"locking cuda12 for {PLATFORM} (detected CUDA 12.4", lock_res.stdout + lock_res.stderr)
        self.assertIn(f"locked cudnn 9.27.0, {PLATFORM} cuda12: detected CUDA 12.4", lock_res.stdout)
        reason = {r["platform"]: r["reason"] for r in product["cuda_reasons"]}[PLATFORM]
        self.assertTrue(reason.startswith("cuda12: detected CUDA 12.4"), reason)
        self.assertIn(source, reason)

    def test_version_json_in_cuda_home(self):
        toolkit, marker = fake_toolkit(os.path.join(self.dir, "cuda-12.4"), version_json="12.4.1",
                                       cuda_h="13000")  # version.json decides
        self.assert_one_rule({"CUDA_HOME": toolkit}, marker, "version.json")

    def test_cuda_h_in_cuda_path(self):
        toolkit, marker = fake_toolkit(os.path.join(self.dir, "cuda-12.4"), cuda_h="12040")
        self.assert_one_rule({"CUDA_PATH": toolkit}, marker, "include/cuda.h")

    def test_the_nvcc_on_path_is_found_and_never_run(self):
        # Its toolkit comes after /usr/local/cuda: where this machine has one,
        # that one decides, for all three alike.
        toolkit, marker = fake_toolkit(os.path.join(self.dir, "cuda-12.4"), cuda_h="12040")
        env = {"PATH": os.path.join(toolkit, "bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin")}
        if os.path.exists("/usr/local/cuda"):
            fetched, _ = self.fetch_variant(env)
            locked, _, _ = self.lock_variant(env)
            synced, _ = self.sync_variant(env)
            self.assertFalse(os.path.exists(marker), "the toolkit's nvcc was run")
            self.assertEqual(len({fetched, locked, synced}), 1, (fetched, locked, synced))
        else:
            self.assert_one_rule(env, marker, "nvcc on PATH in " + os.path.join(toolkit, "bin"))

    def test_fetch_and_lock_agree_on_whatever_this_machine_has(self):
        fetched, _ = self.fetch_variant(None)
        locked, product, _ = self.lock_variant(None)
        self.assertEqual(fetched, locked)
        self.assertTrue(product["cuda_reasons"][0]["reason"].startswith(locked + ": "), product)


def machine_has_a_driver():
    """Whether the loader finds a libcuda.so.1 without LD_LIBRARY_PATH."""
    cache = subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return "libcuda.so.1" in cache or any(
        os.path.exists(os.path.join(d, "libcuda.so.1"))
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"))


@unittest.skipUnless(CC, "no C compiler")
class TheDriverWithoutAToolkit(ThreeCommands):
    """No toolkit: the newest variant the system's driver runs (read from a
    fake libcuda.so.1 on LD_LIBRARY_PATH, asked in the check's child), else
    the newest."""

    def setUp(self):
        super().setUp()
        self.driver = os.path.join(self.dir, "driver")
        os.makedirs(self.driver)
        # No toolkit anywhere: neither the variables, nor /usr/local/cuda (a
        # test-build seam moves it), nor an nvcc on PATH.
        path = [d for d in os.environ.get("PATH", "/usr/bin:/bin").split(":")
                if d and not os.path.exists(os.path.join(d, "nvcc"))]
        self.env = {"CUDA_HOME": None, "CUDA_PATH": None, "PATH": ":".join(path), "CUDA_VISIBLE_DEVICES": None,
                    "REDIST_TEST_DEFAULT_TOOLKIT": os.path.join(self.dir, "no-toolkit"),
                    "LD_LIBRARY_PATH": self.driver}

    def fake_driver(self, encoded):
        fake_libcuda(os.path.join(self.driver, "libcuda.so.1"), encoded)

    def test_a_cuda_12_driver_makes_all_three_pick_cuda12_and_say_why(self):
        self.fake_driver(12080)
        fetched, fetch_res = self.fetch_variant(self.env)
        locked, product, lock_res = self.lock_variant(self.env)
        synced, _ = self.sync_variant(self.env)
        self.assertEqual((fetched, locked, synced), ("cuda12", "cuda12", "cuda12"))
        why = "no CUDA toolkit found; the system driver supports CUDA 12.8 (" + self.driver + "/libcuda.so.1)"
        self.assertRegex(fetch_res.stdout, rf"(?m)^cudnn 9\.27\.0 .* for {PLATFORM}, cuda12: ")
        self.assertIn(f", cuda12: {why}\n", fetch_res.stdout)
        self.assertIn(f"locking cuda12 for {PLATFORM} ({why})", lock_res.stdout + lock_res.stderr)
        self.assertIn(f"locked cudnn 9.27.0, {PLATFORM} cuda12: {why}", lock_res.stdout)
        reason = {r["platform"]: r["reason"] for r in product["cuda_reasons"]}[PLATFORM]
        self.assertEqual(reason, "cuda12: " + why)

    def test_fetch_asks_on_its_own_when_nothing_else_would(self):
        # --quiet --no-check starts no driver query ahead: the variant asks for itself.
        self.fake_driver(12080)
        prefix = os.path.join(self.dir, "quiet")
        support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--component", "cudnn", "--base-url", self.base,
                         "--platform", PLATFORM, "--prefix", prefix, "--no-cache", "--no-check", "--quiet",
                         env=self.env, check=0)
        receipt = support.load_json(os.path.join(prefix, ".redist", "receipts", "cudnn", "cudnn.json"))
        self.assertEqual(receipt["variant"], "cuda12")

    def test_a_newer_driver_takes_the_newest(self):
        self.fake_driver(13020)
        fetched, res = self.fetch_variant(self.env)
        self.assertEqual(fetched, "cuda13")
        self.assertIn(", cuda13: no CUDA toolkit found; the system driver supports CUDA 13.2 (", res.stdout)

    def test_a_toolkit_wins_over_the_driver(self):
        self.fake_driver(12080)
        toolkit, marker = fake_toolkit(os.path.join(self.dir, "cuda-13.0"), version_json="13.0.1")
        env = dict(self.env, CUDA_HOME=toolkit)
        fetched, fetch_res = self.fetch_variant(env)
        locked, product, _ = self.lock_variant(env)
        synced, _ = self.sync_variant(env)
        self.assertEqual((fetched, locked, synced), ("cuda13", "cuda13", "cuda13"))
        self.assertFalse(os.path.exists(marker), "the toolkit's nvcc was run")
        self.assertIn(", cuda13: detected CUDA 13.0.1 (CUDA_HOME=", fetch_res.stdout)
        self.assertNotIn("system driver", fetch_res.stdout)
        self.assertTrue(product["cuda_reasons"][0]["reason"].startswith("cuda13: detected CUDA 13.0.1"), product)

    @unittest.skipIf(machine_has_a_driver(), "this machine has an NVIDIA driver of its own")
    def test_no_driver_takes_the_newest(self):
        env = dict(self.env, LD_LIBRARY_PATH=None)
        fetched, fetch_res = self.fetch_variant(env)
        locked, product, _ = self.lock_variant(env)
        synced, _ = self.sync_variant(env)
        self.assertEqual((fetched, locked, synced), ("cuda13", "cuda13", "cuda13"))
        why = "no CUDA toolkit found; using the newest variant every selected component offers (offered: 12, 13)"
        self.assertIn(f", cuda13: {why}\n", fetch_res.stdout)
        self.assertEqual(product["cuda_reasons"][0]["reason"], "cuda13: " + why)


class MinorKeyedVariants(unittest.TestCase):
    """A cuda_compat keyed "cuda13.2" added to the demo CUDA 13.0.0 release."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.dir, "prefix")
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cuda"])
        path = support.manifest_path("cuda", "13.0.0", mirror)
        manifest = support.load_json(path)
        cudart = manifest["cuda_cudart"]
        manifest["cuda_compat"] = {"name": "CUDA compat L4T", "license": cudart.get("license", "CUDA Toolkit"),
                                   "version": cudart["version"], PLATFORM: {"cuda13.2": cudart[PLATFORM]}}
        support.save_json(path, manifest)
        self.base = support.file_base_url(mirror)

    def fetch(self, *args, check=None):
        return support.run_tool("redist", "fetch", "cuda", "13.0.0", *args, "--base-url", self.base,
                                "--prefix", self.prefix, "--platform", PLATFORM, "--no-cache", "--no-check",
                                check=check)

    def receipt_variant(self):
        return support.load_json(os.path.join(self.prefix, ".redist", "receipts", "cuda", "cuda_compat.json"))["variant"]

    def test_major_minor_and_none_select_the_minor_key(self):
        for cuda in ([], ["--cuda", "13"], ["--cuda", "13.2"], ["--cuda", "13.0"]):
            with self.subTest(cuda=cuda):
                support.rm_tree(self.prefix)
                res = self.fetch("--component", "cuda_compat", *cuda, "--json", check=0)
                (component,) = json.loads(res.stdout)["components"]
                self.assertEqual(component["variant"], "cuda13.2")
                self.assertEqual(self.receipt_variant(), "cuda13.2")
        res = self.fetch("--component", "cuda_compat", "--force", check=0)
        self.assertRegex(res.stdout, r"(?m)^  cuda_compat +\S+ \(cuda13\.2\) ")
        self.assertRegex(res.stdout, r"(?m)^installed cuda 13\.0\.0 into .*, variant cuda13\.2$")
        res = support.run_tool("redist", "show", "cuda", "13.0.0", "--component", "cuda_compat", "--json",
                               "--base-url", self.base, "--platform", PLATFORM, check=0)
        self.assertEqual([a["variant"] for a in json.loads(res.stdout)["artifacts"]], ["cuda13.2"])

    def test_plain_artifacts_name_the_cuda_version_asked(self):
        res = self.fetch("--component", "cuda_cudart", "--cuda", "13.0", check=0)
        self.assertRegex(res.stdout, rf"(?m)^cuda 13\.0\.0 .* for {PLATFORM}, CUDA 13\.0: --cuda 13\.0$")

    def test_another_major_is_refused_in_plain_words(self):
        # --manifest: no cuda release spec to contradict --cuda 12.
        path = support.manifest_path("cuda", "13.0.0", self.base[len("file://"):])
        res = support.run_tool("redist", "fetch", "--manifest", path, "--component", "cuda_compat", "--cuda", "12",
                               "--prefix", self.prefix, "--platform", PLATFORM, "--no-cache", "--no-check")
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertEqual(len(res.stderr.splitlines()), 1, res.stderr)
        self.assertIn("component 'cuda_compat' has no cuda12 artifact", res.stderr)
        self.assertIn("(available variants: cuda13.2)", res.stderr)
        self.assertNotIn("no a ", res.stderr)

    def test_all_leaves_the_compat_libraries_out_and_says_so(self):
        res = self.fetch("--all", "--json", check=0)
        installed = {c["component"] for c in json.loads(res.stdout)["components"]}
        self.assertNotIn("cuda_compat", installed)
        self.assertIn("cuda_cudart", installed)
        self.assertIn("--all leaves out the driver's components (cuda_compat)", res.stderr)


if __name__ == "__main__":
    unittest.main()
