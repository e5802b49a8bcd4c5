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

    def test_what_the_starter_file_says_holds(self):
        # Its comments, run: a prefix outside the directory needs --allow-outside-prefix (or
        # --prefix); `cuda` is a major, picks the cuda product's release ("latest": the newest
        # 12.x) and refuses a version of another major.
        path = os.path.join(self.dir, "redist.toml")
        support.run_tool("redist", "init", "--platform", "linux-x86_64", cwd=self.dir, check=0)
        with open(path) as f:
            starter = f.read()
        base = ["--base-url", support.file_base_url()]
        for words in ("--allow-outside-prefix", "a major only", '"latest"\n# is the newest 12.x',
                      "a version of another major is an error"):
            self.assertIn(words, starter)

        def write(old, new):
            self.assertIn(old, starter)
            with open(path, "w") as f:
                f.write(starter.replace(old, new))

        outside = os.path.join(support.make_scratch_dir(self.id() + ".outside"), "nvidia")
        write('prefix = "nvidia"', f'prefix = "{outside}"')
        res = support.run_tool("redist", "sync", "--dry-run", *base, cwd=self.dir)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("--allow-outside-prefix", res.stderr)
        support.run_tool("redist", "sync", "--dry-run", "--allow-outside-prefix", *base, cwd=self.dir, check=0)
        self.assertFalse(os.path.exists(outside))
        write('cuda = "12"', 'cuda = "12.4"')
        self.assertEqual(support.run_tool("redist", "init", "--check", cwd=self.dir).returncode, 4)
        write('cuda = "12"', 'cuda = "13"')
        res = support.run_tool("redist", "lock", *base, cwd=self.dir)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("not a CUDA 13 release", res.stderr)
        with open(path, "w") as f:
            f.write(starter.replace('version = "12.9"', 'version = "latest"'))
        res = support.run_tool("redist", "lock", *base, cwd=self.dir, check=0)
        self.assertIn("locked cuda 12.9.1", res.stdout)
        self.assertIn("locked cudnn 9.27.0, linux-x86_64 cuda12: project.cuda 12", res.stdout)

    def test_a_fifo_named_redist_toml_fails_at_once(self):
        # A checkout can hold anything: a FIFO must not hang sync, lock or
        # init --check (the project file is read as a regular file only).
        os.mkfifo(os.path.join(self.dir, "redist.toml"))
        for args in (["sync"], ["lock"], ["init", "--check"]):
            res = support.run_tool("redist", *args, cwd=self.dir, timeout=20)
            self.assertEqual(res.returncode, 10, support.describe(res))
            self.assertIn("redist.toml: cannot read the project file: not a regular file", res.stderr)
            self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))

    def test_check_names_line_and_key(self):
        path = os.path.join(self.dir, "redist.toml")
        with open(path, "w") as f:
            f.write('[project]\nprefix = "p"\nplatforms = ["linux-x86_64"]\n\n'
                    '[products.cuda]\nversion = "12.9"\ncomponent = ["cuda_nvcc"]\n')
        res = support.run_tool("redist", "init", "--check", "--file", path)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(f"{path}:7:1: products.cuda.component: unknown key", res.stderr)

    def test_check_refuses_an_unknown_platform_with_the_likely_one(self):
        path = os.path.join(self.dir, "redist.toml")
        with open(path, "w") as f:
            f.write('[project]\nprefix = "p"\nplatforms = ["linux-x86-64"]\n\n[products.cuda]\nversion = "12.9"\n')
        res = support.run_tool("redist", "init", "--check", "--file", path)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(f"{path}:3:", res.stderr)
        self.assertIn("project.platforms[0]: unknown platform 'linux-x86-64' (did you mean 'linux-x86_64'?)",
                      res.stderr)
        # --platform, wherever it is taken, is a usage error before anything is read.
        for args in (("init", "--platform", "linux-x86-64"),
                     ("fetch", "cudnn", "--platform", "linux-x86-64", "--prefix", os.path.join(self.dir, "p")),
                     ("mirror", "cudnn", "9", "--dest", os.path.join(self.dir, "m"), "--platform", "linux-x86-64")):
            res = support.run_tool("redist", *args, cwd=self.dir)
            self.assertEqual(res.returncode, 2, support.describe(res))
            self.assertIn("unknown platform 'linux-x86-64' (did you mean 'linux-x86_64'?)", res.stderr)
            self.assertEqual(len(res.stderr.splitlines()), 1, res.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "p")))

    def test_utf8_in_comments_and_strings(self):
        path = os.path.join(self.dir, "redist.toml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# Build of K\u00fchler \u2014 \U0001F680\n[project]\nprefix = \"caf\u00e9\"  # \u00e9\n"
                    "platforms = ['linux-x86_64']\n[products.cuda]\nversion = \"12.9\"  # \u00e9\n")
        res = support.run_tool("redist", "init", "--check", "--file", path, check=0)
        self.assertIn(f"prefix {os.path.join(self.dir, 'caf')}\u00e9,", res.stdout)
        with open(path, "ab") as f:
            f.write(b"# K\xfchler\n")  # Latin-1: not UTF-8
        res = support.run_tool("redist", "init", "--check", "--file", path)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(f"{path}:7: invalid UTF-8", res.stderr)


if __name__ == "__main__":
    unittest.main()
