"""`redist show`, `redist versions`: every shared manifest, malformed input,
nginx (autoindex and NVIDIA-style listings) and file:// mirrors."""

import glob
import json
import os
import unittest

import support


def independent_artifacts(doc):
    """Every artifact of a manifest, read with Python's json module only
    (independent of the C++ parser): (component, platform, variant, record)."""
    return list(support.iter_artifacts(doc))


class ShowEverySharedManifest(unittest.TestCase):
    def test_every_manifest_lists_every_artifact(self):
        files = sorted(glob.glob(os.path.join(support.data_dir(), "manifests", "*", "redistrib_*.json")))
        self.assertGreaterEqual(len(files), 30)
        for path in files:
            with self.subTest(manifest=os.path.relpath(path, support.data_dir())):
                res = support.run_tool("redist", "show", "--manifest", path, "--json", check=0)
                shown = json.loads(res.stdout)
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                expected = independent_artifacts(doc)
                self.assertEqual(len(shown["artifacts"]), len(expected))
                self.assertEqual({a["sha256"] for a in shown["artifacts"]},
                                 {rec["sha256"].lower() for *_, rec in expected})
                # Every field of every artifact, keyed by (component, platform, variant).
                by_key = {(a["component"], a["platform"], a["variant"]): a for a in shown["artifacts"]}
                for comp, platform, variant, rec in expected:
                    a = by_key[(comp, platform, variant)]
                    self.assertEqual(a["relative_path"], rec["relative_path"])
                    self.assertEqual(a["size"], int(rec["size"]))
                    self.assertIsInstance(a["size"], int)
                    self.assertEqual(a["md5"], rec.get("md5", "").lower())
                    self.assertEqual(a["version"], doc[comp].get("version", ""))
                    self.assertTrue(a["url"].endswith("/" + rec["relative_path"]))
                self.assertEqual(shown["release_date"], doc.get("release_date", ""))
                if "release_label" in doc:
                    self.assertEqual(shown["release_label"], doc["release_label"])

    def test_table_and_filters(self):
        path = os.path.join(support.data_dir(), "manifests", "cudnn", "redistrib_9.27.0.json")
        res = support.run_tool("redist", "show", "--manifest", path, "--platform", "linux-x86_64",
                               "--cuda", "12", "--component", "cudnn", check=0)
        lines = [l for l in res.stdout.splitlines() if l.startswith("cudnn ") and "linux-x86_64" in l]
        self.assertEqual(len(lines), 1, res.stdout)
        self.assertIn("linux-x86_64", lines[0])
        self.assertIn("cuda12", lines[0])
        self.assertIn("966 MiB", lines[0])  # 1012666264 bytes, human-readable
        res = support.run_tool("redist", "show", "--manifest", path, "--platform", "windows-arm64", "--json", check=0)
        variants = sorted(str(a["variant"]) for a in json.loads(res.stdout)["artifacts"] if a["component"] == "cudnn")
        self.assertEqual(variants, ["None", "cuda13"])  # one plain artifact and one variant, side by side

    def test_unknown_component_lists_available(self):
        path = os.path.join(support.data_dir(), "manifests", "cudnn", "redistrib_9.27.0.json")
        res = support.run_tool("redist", "show", "--manifest", path, "--component", "nope", check=3)
        self.assertIn("cudnn_jit", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1)


class MalformedManifests(unittest.TestCase):
    """Each bad input: one line on stderr naming the file and the JSON path, exit code 4."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        with open(os.path.join(support.data_dir(), "manifests", "cudnn", "redistrib_9.27.0.json")) as f:
            self.good = json.load(f)

    def run_bad(self, text, expected_json_path, expect_in_message=""):
        path = os.path.join(self.dir, "redistrib_9.27.0.json")
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(text))
        res = support.run_tool("redist", "show", "--manifest", path, "--json")
        self.assertEqual(res.returncode, 4, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn(path, lines[0])
        if expected_json_path:
            self.assertIn(expected_json_path, lines[0])
        if expect_in_message:
            self.assertIn(expect_in_message, lines[0].lower())
        self.assertEqual(res.stdout, "")
        return lines[0]

    def mutate(self, fn):
        doc = json.loads(json.dumps(self.good))
        fn(doc)
        return doc

    def test_broken_json(self):
        self.run_bad('{"release_label": "9.27.0", "cudnn": {', "")
        self.run_bad("", "")
        self.run_bad("[1, 2, 3]", "")

    def test_wrong_type(self):
        doc = self.mutate(lambda d: d["cudnn"]["linux-x86_64"]["cuda12"].__setitem__("size", {"a": 1}))
        self.run_bad(doc, "cudnn.linux-x86_64.cuda12.size")
        doc = self.mutate(lambda d: d["cudnn"]["linux-x86_64"]["cuda12"].__setitem__("sha256", 12))
        self.run_bad(doc, "cudnn.linux-x86_64.cuda12.sha256")

    def test_missing_fields(self):
        doc = self.mutate(lambda d: d["cudnn"]["linux-x86_64"]["cuda12"].pop("relative_path"))
        self.run_bad(doc, "cudnn.linux-x86_64.cuda12.relative_path")
        doc = self.mutate(lambda d: d["cudnn"]["linux-x86_64"]["cuda13"].pop("sha256"))
        self.run_bad(doc, "cudnn.linux-x86_64.cuda13.sha256")

    def test_malformed_hash_and_size(self):
        doc = self.mutate(lambda d: d["cudnn"]["linux-sbsa"]["cuda12"].__setitem__("sha256", "abc"))
        self.run_bad(doc, "cudnn.linux-sbsa.cuda12.sha256")
        doc = self.mutate(lambda d: d["cudnn"]["linux-sbsa"]["cuda12"].__setitem__("size", "12x"))
        self.run_bad(doc, "cudnn.linux-sbsa.cuda12.size")
        doc = self.mutate(lambda d: d["cudnn"]["linux-sbsa"]["cuda12"].__setitem__("size", "99999999999999999999999"))
        self.run_bad(doc, "cudnn.linux-sbsa.cuda12.size")

    def test_unsafe_relative_paths(self):
        for bad in ["/etc/passwd", "cudnn/../../x.tar.xz", "cudnn\\x.tar.xz", ""]:
            with self.subTest(relative_path=bad):
                doc = self.mutate(lambda d: d["cudnn"]["linux-x86_64"]["cuda12"].__setitem__("relative_path", bad))
                self.run_bad(doc, "cudnn.linux-x86_64.cuda12.relative_path")


class VersionsAndShowOverHttpAndFile(unittest.TestCase):
    def check_versions(self, base):
        res = support.run_tool("redist", "versions", "cudnn", "--base-url", base, check=0)
        labels = res.stdout.split()
        expected = support.mirror_info()["products"]["cudnn"]["labels"]
        self.assertEqual(set(labels), set(expected))
        self.assertEqual(labels[0], "9.27.0")
        self.assertLess(labels.index("9.10.1"), labels.index("9.8.0"))  # numeric, newest first

    def check_show(self, base):
        for spec, label in [("9.27.0", "9.27.0"), ("9.10", "9.10.1"), ("9", "9.27.0"), ("latest", "9.27.0")]:
            with self.subTest(base=base, spec=spec):
                res = support.run_tool("redist", "show", "cudnn", spec, "--base-url", base, "--json", check=0)
                shown = json.loads(res.stdout)
                self.assertEqual(shown["release_label"], label)
                manifest = support.load_manifest("cudnn", label)
                self.assertEqual({a["sha256"] for a in shown["artifacts"]},
                                 {rec["sha256"] for *_, rec in support.iter_artifacts(manifest)})
                for a in shown["artifacts"]:
                    self.assertTrue(a["url"].startswith(base + "/cudnn/redist/"), a["url"])

    def test_nginx_autoindex(self):
        base = support.nginx_base_url("autoindex")
        self.check_versions(base)
        self.check_show(base)

    def test_nginx_nvidia_style_index(self):
        self.check_versions(support.nginx_base_url("nvidia"))

    def test_file_mirror(self):
        base = support.file_base_url()
        self.check_versions(base)
        self.check_show(base)

    def test_base_url_from_environment(self):
        res = support.run_tool("redist", "versions", "cuda", env={"REDIST_BASE_URL": support.nginx_base_url()},
                               check=0)
        self.assertEqual(res.stdout.split()[0], "13.0.0")

    def test_not_found(self):
        base = support.nginx_base_url()
        res = support.run_tool("redist", "show", "cudnn", "7", "--base-url", base, check=3)
        self.assertIn("9.27.0", res.stderr)  # lists what is available
        res = support.run_tool("redist", "versions", "nosuchproduct", "--base-url", base, check=3)
        self.assertIn("nosuchproduct", res.stderr)

    def test_help_and_version(self):
        for args in (["--help"], ["show", "--help"], ["versions", "--help"], ["fetch", "--help"]):
            res = support.run_tool("redist", *args, check=0)
            self.assertIn("Exit codes", res.stdout)
        res = support.run_tool("redist", "--version", check=0)
        self.assertRegex(res.stdout, r"redist \d+\.\d+\.\d+")
        res = support.run_tool("cudnn-fetch", "--help", check=0)
        self.assertIn("--prefix", res.stdout)
        res = support.run_tool("redist", "bogus-command")
        self.assertEqual(res.returncode, 2)


if __name__ == "__main__":
    unittest.main()
