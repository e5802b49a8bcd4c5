"""`redist init`: a commented starter redist.toml that validates, never
overwritten without --force; `redist init --check` names the line and key
of an error."""

import os
import unittest

import support


class Init(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())

    def test_starter_file_round_trip(self):
        res = support.run_tool("redist", "init", "--platform", "linux-sbsa", "--platform", "linux-x86_64",
                               cwd=self.dir, check=0)
        path = os.path.join(self.dir, "redist.toml")
        self.assertIn("wrote redist.toml", res.stdout)
        with open(path) as f:
            text = f.read()
        self.assertIn('platforms = ["linux-sbsa", "linux-x86_64"]', text)
        self.assertGreater(sum(1 for line in text.splitlines() if line.startswith("#")), 10)  # commented
        res = support.run_tool("redist", "init", "--check", cwd=self.dir, check=0)
        self.assertIn(f"prefix {os.path.join(self.dir, 'nvidia')}", res.stdout)
        self.assertIn("cuda 12.9: cuda_nvcc cuda_cudart libcublas", res.stdout)
        self.assertIn("cudnn 9: every component", res.stdout)
        # Never overwritten without --force.
        res = support.run_tool("redist", "init", cwd=self.dir)
        self.assertEqual(res.returncode, 2, support.describe(res))
        self.assertIn("already exists", res.stderr)
        support.run_tool("redist", "init", "--force", cwd=self.dir, check=0)

    def test_check_names_line_and_key(self):
        path = os.path.join(self.dir, "redist.toml")
        with open(path, "w") as f:
            f.write('[project]\nprefix = "p"\nplatforms = ["linux-x86_64"]\n\n'
                    '[products.cuda]\nversion = "12.9"\ncomponent = ["cuda_nvcc"]\n')
        res = support.run_tool("redist", "init", "--check", "--file", path)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(f"{path}:7:1: products.cuda.component: unknown key", res.stderr)


if __name__ == "__main__":
    unittest.main()
