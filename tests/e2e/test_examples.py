"""The programs in examples/ build by default and work against the demo mirror."""

import os
import subprocess
import unittest

import support


def example(name):
    return os.path.join(os.path.dirname(support.bin_dir()), "examples", name)


class Examples(unittest.TestCase):
    def run_example(self, *args):
        return subprocess.run([str(a) for a in args], env=support.tool_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)

    def test_fetch_cudnn_end_to_end(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        res = self.run_example(example("fetch_cudnn"), support.nginx_base_url(), "9.10", prefix)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("cudnn 9.10.1", res.stdout)
        self.assertIn("cudnn: done", res.stdout)  # the progress callback ran
        self.assertTrue(os.path.isfile(os.path.join(prefix, "include", "cudnn.h")))
        res = self.run_example(example("fetch_cudnn"), support.nginx_base_url(), "7", prefix)
        self.assertEqual(res.returncode, 3)
        self.assertIn("9.27.0", res.stderr)

    def test_list_artifacts(self):
        path = support.manifest_path("cudnn", "9.27.0")
        res = self.run_example(example("list_artifacts"), path)
        self.assertEqual(res.returncode, 0, res.stderr)
        count = sum(1 for _ in support.iter_artifacts(support.load_manifest("cudnn", "9.27.0")))
        self.assertEqual(len([l for l in res.stdout.splitlines() if l.strip()]), count)


if __name__ == "__main__":
    unittest.main()
