"""`redist diff PRODUCT V1 V2` against the generated demo mirror: components,
versions, platforms, variants, sizes, text and --json, and a renamed
component (cuda_cccl -> cccl)."""

import json
import os
import unittest

import support


def facts(manifest):
    """Components (key -> version), platforms, variants and total size, read
    with Python's json module only (independent of the C++ parser)."""
    comps = {k: v.get("version", "") for k, v in manifest.items() if isinstance(v, dict)}
    platforms, variants, total = set(), set(), 0
    for _comp, platform, variant, rec in support.iter_artifacts(manifest):
        platforms.add(platform)
        if variant:
            variants.add(variant)
        total += int(rec["size"])
    return comps, platforms, variants, total


class Diff(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir("test_diff.Diff")
        cls.mirror = support.copy_mirror(os.path.join(cls.dir, "mirror"), products=["cudnn", "cuda"])
        cls.base = support.file_base_url(cls.mirror)

    def diff(self, *args, check=0, base=None):
        return support.run_tool("redist", "diff", *args, "--base-url", base or self.base, "--no-cache", check=check)

    def test_json_matches_an_independent_reading(self):
        old = support.load_manifest("cudnn", "9.8.0", self.mirror)
        new = support.load_manifest("cudnn", "9.27.0", self.mirror)
        d = json.loads(self.diff("cudnn", "9.8.0", "9.27.0", "--json").stdout)
        (oc, op, ov, ot), (nc, np_, nv, nt) = facts(old), facts(new)
        self.assertEqual(d["old_label"], "9.8.0")
        self.assertEqual(d["new_label"], "9.27.0")
        self.assertTrue(d["changed"])
        self.assertEqual(set(d["components_added"]), set(nc) - set(oc))
        self.assertEqual(set(d["components_removed"]), set(oc) - set(nc))
        self.assertEqual(d["components_renamed"], [])
        self.assertEqual({v["component"]: (v["from"], v["to"]) for v in d["versions_changed"]},
                         {k: (oc[k], nc[k]) for k in set(oc) & set(nc) if oc[k] != nc[k]})
        self.assertEqual(set(d["platforms_added"]), np_ - op)
        self.assertEqual(set(d["platforms_removed"]), op - np_)
        self.assertEqual(set(d["variants_added"]), nv - ov)
        self.assertEqual(set(d["variants_removed"]), ov - nv)
        self.assertIn("cuda11", d["variants_removed"])  # the demo's 9.8.0 has cuda11 on linux-x86_64
        self.assertEqual((d["old_total_size"], d["new_total_size"]), (ot, nt))
        # Every artifact of both releases is accounted for: changed, added or removed.
        old_keys = {(c, p, v) for c, p, v, _ in support.iter_artifacts(old) if c in nc}
        new_keys = {(c, p, v) for c, p, v, _ in support.iter_artifacts(new) if c in oc}
        arts = {(a["component"], a["platform"], a["variant"]): a["change"] for a in d["artifacts"]}
        for key in old_keys - new_keys:
            self.assertEqual(arts[key], "removed", key)
        for key in new_keys - old_keys:
            self.assertEqual(arts[key], "added", key)
        self.assertNotIn("replaced_in_place", arts.values())

    def test_text(self):
        out = self.diff("cudnn", "9.8.0", "9.27.0").stdout
        self.assertIn("cudnn 9.8.0 -> 9.27.0", out)
        self.assertIn("components added: cudnn_jit", out)
        self.assertIn("version: cudnn 9.8.0.87 -> 9.27.0.42", out)
        self.assertIn("variants removed: cuda11", out)
        self.assertIn("total size:", out)

    def test_same_release_through_version_specs_over_http(self):
        res = self.diff("cudnn", "9", "latest", base=support.nginx_base_url())
        self.assertIn("cudnn 9.27.0 -> 9.27.0", res.stdout)
        self.assertIn("no component, version or artifact differs", res.stdout)
        self.assertFalse(json.loads(self.diff("cudnn", "9.27", "9.27.0", "--json").stdout)["changed"])

    def test_renamed_component(self):
        mirror = support.copy_mirror(os.path.join(self.dir, "renamed"), products=["cuda"])
        path = support.manifest_path("cuda", "13.0.0", mirror)
        m = support.load_manifest("cuda", "13.0.0", mirror)
        m["cccl"] = m.pop("cuda_cccl")
        support.save_json(path, m)
        base = support.file_base_url(mirror)
        d = json.loads(self.diff("cuda", "12.9.1", "13.0.0", "--json", base=base).stdout)
        self.assertEqual(d["components_renamed"], [{"from": "cuda_cccl", "to": "cccl"}])
        self.assertNotIn("cccl", d["components_added"])
        self.assertNotIn("cuda_cccl", d["components_removed"])
        self.assertIn("cccl", [v["component"] for v in d["versions_changed"]])
        out = self.diff("cuda", "12.9.1", "13.0.0", base=base).stdout
        self.assertIn("component renamed: cuda_cccl -> cccl", out)

    def test_manifest_strings_are_escaped(self):
        mirror = support.copy_mirror(os.path.join(self.dir, "escapes"), products=["cudnn"])
        path = support.manifest_path("cudnn", "9.27.0", mirror)
        m = support.load_manifest("cudnn", "9.27.0", mirror)
        m["cudnn"]["version"] = "9.27\u001b[31m\u0007red"
        support.save_json(path, m)
        res = self.diff("cudnn", "9.8.0", "9.27.0", base=support.file_base_url(mirror))
        out = res.stdout.encode() + res.stderr.encode()
        self.assertIn(b"9.27\\x1b[31m\\x07red", out)
        self.assertNotIn(b"\x1b", out)
        self.assertNotIn(b"\x07", out)

    def test_unknown_release(self):
        res = self.diff("cudnn", "9.8.0", "7.0.0", check=None)
        self.assertEqual(res.returncode, 3, support.describe(res))


if __name__ == "__main__":
    unittest.main()
