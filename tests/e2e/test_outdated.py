"""`redist outdated --prefix DIR`: installed releases vs the wanted one (the
project's spec, else the installed major) and the newest overall; exit 1
only when a wanted update exists. Releases are listed from the sources the
receipts name, never from a default base the prefix did not come from."""

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
            "spec": "9", "wanted": "9.27.0", "latest": "9.27.0", "outdated": True}])
        res = self.outdated(prefix, base=support.nginx_base_url())  # the HTML index, over HTTP
        self.assertEqual(res.returncode, 1, support.describe(res))
        self.assertRegex(res.stdout, r"PRODUCT\s+INSTALLED\s+WANTED\s+LATEST\s+COMPONENTS")
        self.assertRegex(res.stdout, r"cudnn\s+9\.8\.0\s+9\.27\.0\s+9\.27\.0\s+cudnn")

    def test_current_in_major_but_a_newer_major_exists(self):
        prefix = self.install("cuda12", "cuda", "12.9.1", "cuda_cudart")
        res = self.outdated(prefix, "--json")
        self.assertEqual(res.returncode, 0, support.describe(res))  # 13.0.0 is not wanted
        row = json.loads(res.stdout)[0]
        self.assertEqual((row["installed"], row["wanted"], row["latest"], row["outdated"]),
                         ("12.9.1", "12.9.1", "13.0.0", False))

    def test_project_pinned_to_a_minor_is_current(self):
        # A project asking for cuda 12.9 (and cudnn 9.8) is up to date with
        # 12.9.1 even though 13.0.0 exists; a wanted update (cudnn 9 ->
        # 9.27.0) is what makes it outdated.
        scratch = support.make_scratch_dir(self.id())
        prefix = os.path.join(scratch, "nvidia")
        for product, label, component, extra in (("cuda", "12.9.1", "cuda_cudart", ()),
                                                 ("cudnn", "9.8.0", "cudnn", ("--cuda", "12"))):
            support.run_tool("redist", "fetch", product, label, "--base-url", self.base, "--prefix", prefix,
                             "--platform", "linux-x86_64", "--component", component, "--no-cache", "--quiet",
                             *extra, check=0)
        project = os.path.join(scratch, "redist.toml")

        def write(cudnn_spec):
            with open(project, "w") as f:
                f.write('[project]\nprefix = "nvidia"\nplatforms = ["linux-x86_64"]\n'
                        f'[products.cuda]\nversion = "12.9"\n[products.cudnn]\nversion = "{cudnn_spec}"\n')

        write("9.8")
        # In the project's directory or below it, without --prefix: the
        # project's prefix and specs (found upward, as `redist sync` finds it).
        below = os.path.join(scratch, "src", "deeper")
        os.makedirs(below)
        for cwd in (scratch, below):
            res = support.run_tool("redist", "outdated", "--base-url", self.base, "--no-cache", "--json", cwd=cwd)
            self.assertEqual(res.returncode, 0, support.describe(res))
            rows = {r["product"]: r for r in json.loads(res.stdout)}
            self.assertEqual((rows["cuda"]["spec"], rows["cuda"]["wanted"], rows["cuda"]["latest"]),
                             ("12.9", "12.9.1", "13.0.0"))
            self.assertEqual(rows["cudnn"]["wanted"], "9.8.0")
        write("9")
        res = support.run_tool("redist", "outdated", "--file", project, "--base-url", self.base, "--no-cache")
        self.assertEqual(res.returncode, 1, support.describe(res))
        self.assertRegex(res.stdout, r"cudnn\s+9\.8\.0\s+9\.27\.0\s+9\.27\.0\s+cudnn\n")
        self.assertRegex(res.stdout, r"cuda\s+12\.9\.1\s+12\.9\.1\s+13\.0\.0\s+cuda_cudart\s+\(up to date\)")

    def test_sources_come_from_the_receipts(self):
        # Installed from the loopback mirror; the default base is unreachable
        # ($REDIST_BASE_URL on a closed port), and nothing names the mirror
        # now: the receipts do.
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        support.run_tool("redist", "fetch", "cudnn", "9.8.0", "--base-url", support.nginx_base_url(),
                         "--prefix", prefix, "--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn",
                         "--no-cache", "--quiet", check=0)
        res = support.run_tool("redist", "outdated", "--prefix", prefix, "--no-cache", "--retries", "1", "--json",
                               env={"REDIST_BASE_URL": "http://127.0.0.1:9/unreachable"})
        self.assertEqual(res.returncode, 1, support.describe(res))
        self.assertEqual(json.loads(res.stdout)[0]["wanted"], "9.27.0")

    def test_up_to_date(self):
        prefix = self.install("new", "cudnn", "9.27.0", "cudnn", "--cuda", "12")
        res = self.outdated(prefix)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertIn("(up to date)", res.stdout)

    def test_a_fifo_named_redist_toml_fails_at_once(self):
        # The project file is read as `redist sync` reads it: a regular file
        # only. A FIFO (found, or named by --file) is one error naming it,
        # never a read that waits for a writer.
        scratch = support.make_scratch_dir(self.id())
        fifo = os.path.join(scratch, "redist.toml")
        os.mkfifo(fifo)
        below = os.path.join(scratch, "sub")
        os.makedirs(below)
        for cwd, extra in ((scratch, []), (below, []), (self.dir, ["--file", fifo])):
            with self.subTest(cwd=cwd, extra=extra):
                res = support.run_tool("redist", "outdated", "--base-url", self.base, "--no-cache", *extra, cwd=cwd,
                                       timeout=20)
                self.assertEqual(res.returncode, 10, support.describe(res))
                self.assertIn(f"{fifo}: cannot read the project file: not a regular file", res.stderr)
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))

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
