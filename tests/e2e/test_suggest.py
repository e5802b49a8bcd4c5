"""Typos end in one line that names the likely intent, as cargo and uv do:
subcommands, flags, products, components, platforms; `--cuda 12.4` means
variant 12; a bare `redist` prints help."""

import os
import unittest

import support

USAGE = 2
NOT_FOUND = 3


def cudnn_manifest():
    return os.path.join(support.data_dir(), "manifests", "cudnn", "redistrib_9.27.0.json")


def cuda_manifest():
    return os.path.join(support.data_dir(), "manifests", "cuda", "redistrib_12.9.1.json")


class Suggestions(unittest.TestCase):
    def one_line_error(self, res, code):
        self.assertEqual(res.returncode, code, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertTrue(lines[0].startswith("redist: error: "), lines[0])
        return lines[0]

    def test_subcommand_typo(self):
        line = self.one_line_error(support.run_tool("redist", "fecth", "cudnn", "9", check=None), USAGE)
        self.assertIn("unknown command 'fecth'", line)
        self.assertIn("did you mean 'fetch'?", line)

    def test_flag_typo_of_a_required_flag(self):
        # CLI11 alone says "--prefix is required" here.
        res = support.run_tool("redist", "fetch", "cudnn", "9", "--prefx", "/nonexistent/p", check=None)
        line = self.one_line_error(res, USAGE)
        self.assertIn("unknown option '--prefx'", line)
        self.assertIn("did you mean '--prefix'?", line)

    def test_flag_typo_with_value(self):
        res = support.run_tool("redist", "show", "--manifest", cudnn_manifest(), "--platfrom=linux-sbsa", check=None)
        line = self.one_line_error(res, USAGE)
        self.assertIn("did you mean '--platform'?", line)

    def test_other_usage_errors_are_one_line(self):
        res = support.run_tool("redist", "fetch", "cudnn", "9", check=None)
        line = self.one_line_error(res, USAGE)
        self.assertIn("--prefix", line)

    def test_product_typo(self):
        res = support.run_tool("redist", "versions", "cudnnn", "--base-url", support.nginx_base_url(), check=None)
        line = self.one_line_error(res, NOT_FOUND)
        self.assertIn("did you mean 'cudnn'?", line)

    def test_component_without_lib_prefix(self):
        res = support.run_tool("redist", "show", "--manifest", cuda_manifest(), "--platform", "linux-x86_64",
                               "--component", "cublas", check=None)
        line = self.one_line_error(res, NOT_FOUND)
        self.assertIn("unknown component 'cublas' (did you mean 'libcublas'?)", line)
        self.assertNotIn("cuda_nvcc", line)  # the suggestion replaces the list of 40-odd names

    def test_component_without_cuda_prefix(self):
        res = support.run_tool("redist", "show", "--manifest", cuda_manifest(), "--platform", "linux-x86_64",
                               "--component", "nvcc", check=None)
        self.assertIn("did you mean 'cuda_nvcc'?", self.one_line_error(res, NOT_FOUND))

    def test_platform_alias(self):
        for typed in ("aarch64", "arm64"):
            with self.subTest(platform=typed):
                res = support.run_tool("redist", "show", "--manifest", cudnn_manifest(), "--platform", typed,
                                       "--component", "cudnn", check=None)
                # Refused as a usage error before anything is read (platform_problem).
        self.assertIn("did you mean 'linux-sbsa'?", self.one_line_error(res, USAGE))

    def test_platform_alias_in_fetch(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        res = support.run_tool("redist", "fetch", "--manifest", cudnn_manifest(), "--platform", "aarch64",
                               "--component", "cudnn", "--prefix", prefix, "--no-cache", check=None)
        # Refused as a usage error before anything is read (platform_problem).
        self.assertIn("did you mean 'linux-sbsa'?", self.one_line_error(res, USAGE))
        self.assertFalse(os.path.exists(os.path.join(prefix, "include")))

    def test_cuda_minor_means_major(self):
        res = support.run_tool("redist", "show", "--manifest", cudnn_manifest(), "--platform", "linux-x86_64",
                               "--component", "cudnn", "--cuda", "12.4", "--json", check=0)
        self.assertIn('"cuda12"', res.stdout)
        self.assertNotIn('"cuda13"', res.stdout)
        res = support.run_tool("redist", "show", "--manifest", cudnn_manifest(), "--cuda", "twelve", check=None)
        self.assertIn("expected a CUDA version", self.one_line_error(res, USAGE))

    def test_bare_redist_prints_help(self):
        res = support.run_tool("redist", check=None)
        self.assertEqual(res.returncode, USAGE)
        self.assertIn("Subcommands:", res.stdout)
        self.assertIn("fetch", res.stdout)


if __name__ == "__main__":
    unittest.main()
