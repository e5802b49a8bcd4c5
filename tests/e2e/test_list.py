"""`redist list`: what a prefix holds, one row per component, from its
receipts: product, release, the component's version, the CUDA variant as the
manifest keys it, platform, files and bytes; `--json`; a variant change shows
at once; the project's prefix by default; no receipts is exit 3 and creates
nothing."""

import json
import os
import unittest

import support

PLATFORM = "linux-x86_64"
EXIT_NOT_FOUND = 3
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}


class List(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.base = support.file_base_url()

    def fetch(self, product, label, *extra):
        support.run_tool("redist", "fetch", product, label, "--prefix", self.prefix, "--platform", PLATFORM,
                         "--base-url", self.base, "--no-cache", "--no-check", "-q", *extra, env=CLEAN_ENV, check=0)

    def receipts(self):
        root = os.path.join(self.prefix, ".redist", "receipts")
        out = {}
        for product in sorted(os.listdir(root)):
            for name in sorted(os.listdir(os.path.join(root, product))):
                out[(product, name[:-5])] = support.load_json(os.path.join(root, product, name))
        return out

    def list_json(self, *args, cwd=None):
        res = support.run_tool("redist", "list", *args, "--json", env=CLEAN_ENV, cwd=cwd, check=0)
        return json.loads(res.stdout)

    def table(self):
        res = support.run_tool("redist", "list", "--prefix", self.prefix, env=CLEAN_ENV, check=0)
        lines = res.stdout.splitlines()
        self.assertEqual(lines[0].split(),
                         ["PRODUCT", "RELEASE", "COMPONENT", "VERSION", "VARIANT", "PLATFORM", "FILES", "SIZE"])
        return {tuple(line.split()[:3]): line.split() for line in lines[1:]}

    def test_rows_name_versions_variants_files_and_sizes(self):
        self.fetch("cudnn", "9.27.0", "--cuda", "12", "--component", "cudnn,cudnn_jit")
        self.fetch("cuda", "12.9.1", "--component", "cuda_cudart")  # a plain artifact: no variant
        cudnn = support.load_manifest("cudnn", "9.27.0")
        cuda = support.load_manifest("cuda", "12.9.1")
        receipts = self.receipts()
        self.assertEqual(set(receipts), {("cudnn", "cudnn"), ("cudnn", "cudnn_jit"), ("cuda", "cuda_cudart")})

        doc = self.list_json("--prefix", self.prefix)
        self.assertEqual(doc["prefix"], self.prefix)
        rows = {(c["product"], c["component"]): c for c in doc["components"]}
        self.assertEqual(set(rows), set(receipts))
        for key, rec in receipts.items():
            with self.subTest(component=key):
                row = rows[key]
                manifest = cudnn if key[0] == "cudnn" else cuda
                self.assertEqual(row["version"], manifest[key[1]]["version"])
                self.assertEqual(row["release_label"], manifest["release_label"])
                self.assertEqual(row["variant"], "cuda12" if key[0] == "cudnn" else None)
                self.assertEqual(row["platform"], PLATFORM)
                artifact = support.find_artifact(manifest, key[1], PLATFORM, row["variant"])
                self.assertEqual(row["sha256"], artifact["sha256"])
                self.assertTrue(row["source"].endswith("/" + artifact["relative_path"]), row["source"])
                self.assertEqual(row["files"], len(rec["files"]))
                self.assertEqual(row["size"], sum(f.get("size", 0) for f in rec["files"]
                                                  if f.get("type", "file") == "file"))
                self.assertGreater(row["size"], 0)
                self.assertEqual(row["installed_at"], rec["installed_at"])

        table = self.table()
        jit = table[("cudnn", "9.27.0", "cudnn_jit")]
        self.assertEqual(jit[3:7], [cudnn["cudnn_jit"]["version"], "cuda12", PLATFORM, str(rows[("cudnn",
                                                                                                 "cudnn_jit")]["files"])])
        self.assertEqual(table[("cuda", "12.9.1", "cuda_cudart")][4], "-")

        # A variant swap shows at once, exactly as keyed.
        self.fetch("cudnn", "9.27.0", "--cuda", "13", "--component", "cudnn,cudnn_jit")
        self.assertEqual(self.table()[("cudnn", "9.27.0", "cudnn")][4], "cuda13")

    def test_quiet_project_default_and_no_receipts(self):
        self.fetch("cudnn", "9.27.0", "--cuda", "12", "--component", "cudnn")
        res = support.run_tool("redist", "list", "--prefix", self.prefix, "-q", env=CLEAN_ENV)
        self.assertEqual((res.returncode, res.stdout), (0, ""), support.describe(res))
        # In a project: its prefix.
        project = os.path.join(self.scratch, "project")
        os.makedirs(project)
        with open(os.path.join(project, "redist.toml"), "w") as f:
            f.write(f'[project]\nprefix = "{self.prefix}"\nplatforms = ["linux-x86_64"]\n\n'
                    '[products.cudnn]\nversion = "9.27.0"\n')
        doc = self.list_json(cwd=project)
        self.assertEqual([c["component"] for c in doc["components"]], ["cudnn"])
        # Below it: the nearest parent's, as `redist sync` finds it.
        below = os.path.join(project, "src", "deeper")
        os.makedirs(below)
        doc = self.list_json(cwd=below)
        self.assertEqual((doc["prefix"], [c["component"] for c in doc["components"]]), (self.prefix, ["cudnn"]))
        # Outside one, --prefix is needed.
        res = support.run_tool("redist", "list", env=CLEAN_ENV, cwd=self.scratch)
        self.assertEqual(res.returncode, 2, support.describe(res))
        # No receipts: exit 3, naming the prefix, creating nothing.
        typo = os.path.join(self.scratch, "typo")
        for args in (["--prefix", typo], ["--prefix", typo, "-q"], ["--prefix", typo, "--json"]):
            res = support.run_tool("redist", "list", *args, env=CLEAN_ENV)
            self.assertEqual(res.returncode, EXIT_NOT_FOUND, support.describe(res))
            self.assertIn(typo, res.stderr)
            self.assertEqual(res.stdout, "")
            self.assertFalse(os.path.lexists(typo))

    def test_a_fifo_named_redist_toml_fails_at_once(self):
        # The project file is read as `redist sync` reads it: a regular file
        # only. A FIFO (found, or named by --file) is one error naming it,
        # never a read that waits for a writer.
        fifo = os.path.join(self.scratch, "redist.toml")
        os.mkfifo(fifo)
        below = os.path.join(self.scratch, "sub")
        os.makedirs(below)
        for cwd, extra in ((self.scratch, []), (below, []), (None, ["--file", fifo])):
            with self.subTest(cwd=cwd, extra=extra):
                res = support.run_tool("redist", "list", *extra, env=CLEAN_ENV, cwd=cwd, timeout=20)
                self.assertEqual(res.returncode, 10, support.describe(res))
                self.assertIn(f"{fifo}: cannot read the project file: not a regular file", res.stderr)
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))
                self.assertEqual(res.stdout, "")

    def test_a_corrupt_receipt_is_named(self):
        self.fetch("cudnn", "9.27.0", "--cuda", "12", "--component", "cudnn")
        receipt = os.path.join(self.prefix, ".redist", "receipts", "cudnn", "cudnn.json")
        with open(receipt, "w") as f:
            f.write("{not json")
        res = support.run_tool("redist", "list", "--prefix", self.prefix, env=CLEAN_ENV)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(receipt, res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))


if __name__ == "__main__":
    unittest.main()
