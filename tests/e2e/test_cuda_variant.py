"""The CUDA variant: one rule for `redist fetch`, `redist lock` and
`redist sync`, from a toolkit's files only (its version.json, else its
include/cuda.h), never by running its nvcc; and variant keys that name a
minor (`cuda13.2`, as CUDA 13.2's cuda_compat is keyed), carried exactly
as keyed into receipts, --json, `show` and the summary."""

import json
import os
import unittest

import support

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


class OneRuleFromFiles(unittest.TestCase):
    """cudnn 9.27.0 offers cuda12 and cuda13: a CUDA 12 toolkit must make all
    three commands pick cuda12 (the newest, cuda13, otherwise)."""

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
