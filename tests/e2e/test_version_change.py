"""The summaries say what changes: `old -> new` with the variant, as apt and pip do."""
import os
import re
import unittest

import support

PLATFORM = "linux-x86_64"


class SaysWhatChanges(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.base = support.file_base_url()
        self.prefix = os.path.join(self.dir, "prefix")

    def fetch(self, cuda, *extra):
        return support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--component", "cudnn", "--base-url", self.base,
                                "--platform", PLATFORM, "--prefix", self.prefix, "--no-cache", "--no-check",
                                "--cuda", cuda, *extra, check=0)

    def test_new_then_variant_swap(self):
        first = self.fetch("12")
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertRegex(first.stdout, r"(?m)^  cudnn +9\.27\.0\.42 \(cuda12\) \(new\) ")
        plan = self.fetch("13", "--dry-run")
        self.assertEqual(plan.returncode, 0, plan.stderr)
        swap = "9.27.0.42 (cuda12) -> 9.27.0.42 (cuda13) (variant changes cuda12 -> cuda13)"
        self.assertIn(swap, plan.stdout)
        second = self.fetch("13")
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertRegex(second.stdout, r"(?m)^  cudnn +" + re.escape(swap) + " ")


if __name__ == "__main__":
    unittest.main()
