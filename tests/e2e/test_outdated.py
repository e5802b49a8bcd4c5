"""`redist outdated --prefix DIR`: installed releases vs the newest in the
same major and overall; exit 1 when anything is newer."""

import json
import os
import unittest

import support


class Outdated(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir("test_outdated.Outdated")
        cls.mirror = support.copy_mirror(os.path.join(cls.dir, "mirror"), products=["cudnn", "cuda"])
        cls.base = support.file_base_url(cls.mirror)

    def install(self, name, product, label, component, *extra):
        prefix = os.path.join(self.dir, name)
        support.run_tool("redist", "fetch", product, label, "--base-url", self.base, "--prefix", prefix,
                         "--platform", "linux-x86_64", "--component", component, "--no-cache", "--quiet", *extra,
                         check=0)
        return prefix

    def outdated(self, prefix, *extra, base=None):
        return support.run_tool("redist", "outdated", "--prefix", prefix, "--base-url", base or self.base,
                                "--no-cache", *extra)

    def test_older_release_in_the_same_major(self):
        prefix = self.install("old", "cudnn", "9.8.0", "cudnn", "--cuda", "12")
        res = self.outdated(prefix, "--json")
        self.assertEqual(res.returncode, 1, support.describe(res))
        self.assertEqual(json.loads(res.stdout), [{
            "product": "cudnn", "installed": "9.8.0", "components": ["cudnn"],
            "latest_in_major": "9.27.0", "latest": "9.27.0", "outdated": True}])
        res = self.outdated(prefix, base=support.nginx_base_url())  # the HTML index, over HTTP
        self.assertEqual(res.returncode, 1, support.describe(res))
        self.assertRegex(res.stdout, r"cudnn\s+9\.8\.0\s+9\.27\.0\s+9\.27\.0\s+cudnn")

    def test_current_in_major_but_a_newer_major_exists(self):
        prefix = self.install("cuda12", "cuda", "12.9.1", "cuda_cudart")
        res = self.outdated(prefix, "--json")
        self.assertEqual(res.returncode, 1, support.describe(res))
        row = json.loads(res.stdout)[0]
        self.assertEqual((row["installed"], row["latest_in_major"], row["latest"]), ("12.9.1", "12.9.1", "13.0.0"))

    def test_up_to_date(self):
        prefix = self.install("new", "cudnn", "9.27.0", "cudnn", "--cuda", "12")
        res = self.outdated(prefix)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertIn("(up to date)", res.stdout)

    def test_errors(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty, exist_ok=True)
        res = self.outdated(empty)
        self.assertEqual(res.returncode, 3, support.describe(res))
        prefix = self.install("unreachable", "cudnn", "9.27.0", "cudnn", "--cuda", "12")
        res = self.outdated(prefix, "--retries", "1", base=support.file_base_url(os.path.join(self.dir, "nowhere")))
        self.assertNotIn(res.returncode, (0, 1), support.describe(res))  # an error, never "up to date"


if __name__ == "__main__":
    unittest.main()
