"""`redist sbom`: SPDX 2.3 and CycloneDX 1.5 JSON for a prefix, validated
against the official JSON schemas (tests/data/schemas/), with one entry per
installed file and the licenses named in the manifests."""

import hashlib
import json
import os
import unittest

import jsonschema
from referencing import Registry, Resource

import support


def schema(name):
    return support.load_json(os.path.join(support.data_dir(), "schemas", name))


def spdx_validator():
    s = schema("spdx-2.3.schema.json")
    return jsonschema.Draft201909Validator(s, format_checker=jsonschema.Draft201909Validator.FORMAT_CHECKER)


def cyclonedx_validator():
    bom = schema("bom-1.5.schema.json")
    # bom-1.5 refers to spdx.schema.json and jsf-0.82.schema.json by URI
    # relative to its $id: serve all three from a local registry.
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in (bom, schema("spdx.schema.json"), schema("jsf-0.82.schema.json")))
    return jsonschema.Draft7Validator(bom, registry=registry, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def errors(validator, doc):
    return [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


class Sbom(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir("test_sbom.Sbom")
        cls.mirror = support.copy_mirror(os.path.join(cls.dir, "mirror"), products=["cudnn"])
        cls.base = support.file_base_url(cls.mirror)
        cls.prefix = os.path.join(cls.dir, "prefix")
        support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--base-url", cls.base, "--prefix", cls.prefix,
                         "--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn,cudnn_jit",
                         "--no-cache", "--quiet", check=0)
        cls.receipts = {}
        receipts_dir = os.path.join(cls.prefix, ".redist", "receipts")
        for root, _dirs, files in os.walk(receipts_dir):
            for name in files:
                r = support.load_json(os.path.join(root, name))
                cls.receipts[r["component"]] = r
        assert set(cls.receipts) == {"cudnn", "cudnn_jit"}, cls.receipts.keys()

    def sbom(self, fmt, *extra, check=0):
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", fmt, "--base-url", self.base,
                               "--no-cache", *extra, check=check)
        return json.loads(res.stdout) if check == 0 else res

    def expected_files(self, component):
        """Regular files of a receipt, checked against the disk independently."""
        out = {}
        for f in self.receipts[component]["files"]:
            if f["type"] != "file":
                continue
            path = os.path.join(self.prefix, f["path"])
            if os.path.islink(path):
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            out[f["path"]] = (hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest())
        return out

    def test_spdx_validates_and_lists_every_file(self):
        doc = self.sbom("spdx-json")
        self.assertEqual(errors(spdx_validator(), doc), [])
        self.assertEqual(doc["spdxVersion"], "SPDX-2.3")
        packages = {p["name"]: p for p in doc["packages"]}
        self.assertEqual(set(packages), {"cudnn", "cudnn_jit"})
        manifest = support.load_manifest("cudnn", "9.27.0", self.mirror)
        files_by_id = {f["SPDXID"]: f for f in doc["files"]}
        contains = {}
        for rel in doc["relationships"]:
            if rel["relationshipType"] == "CONTAINS":
                contains.setdefault(rel["spdxElementId"], []).append(files_by_id[rel["relatedSpdxElement"]])
        for name, p in packages.items():
            art = support.find_artifact(manifest, name, "linux-x86_64", "cuda12")
            self.assertEqual(p["versionInfo"], manifest[name]["version"])
            self.assertEqual(p["checksums"], [{"algorithm": "SHA256", "checksumValue": art["sha256"]}])
            self.assertTrue(p["downloadLocation"].endswith("/" + art["relative_path"]), p["downloadLocation"])
            # The demo manifest names the license "cudnn": not an SPDX id, so a LicenseRef.
            self.assertEqual(p["licenseDeclared"], "LicenseRef-cudnn")
            comments = {a["comment"] for a in p["annotations"]}
            self.assertIn("redist:platform=linux-x86_64", comments)
            self.assertIn("redist:variant=cuda12", comments)
            self.assertIn("redist:product=cudnn", comments)
            listed = {f["fileName"][2:]: {c["algorithm"]: c["checksumValue"] for c in f["checksums"]}
                      for f in contains[p["SPDXID"]]}
            want = self.expected_files(name)
            self.assertGreaterEqual(len(want), 3, name)  # the demo archives hold several files each
            self.assertEqual(set(listed), set(want))  # one entry per installed regular file
            for path, (sha256, sha1) in want.items():
                self.assertEqual(listed[path], {"SHA256": sha256, "SHA1": sha1}, path)
        self.assertEqual([e["licenseId"] for e in doc["hasExtractedLicensingInfos"]], ["LicenseRef-cudnn"])

    def test_cyclonedx_validates_and_lists_every_file(self):
        doc = self.sbom("cyclonedx-json")
        self.assertEqual(errors(cyclonedx_validator(), doc), [])
        comps = {c["name"]: c for c in doc["components"]}
        self.assertEqual(set(comps), {"cudnn", "cudnn_jit"})
        for name, c in comps.items():
            props = {p["name"]: p["value"] for p in c["properties"]}
            self.assertEqual(props["redist:platform"], "linux-x86_64")
            self.assertEqual(props["redist:variant"], "cuda12")
            self.assertEqual(props["redist:release"], "9.27.0")
            self.assertEqual(c["group"], "cudnn")
            self.assertEqual(c["licenses"], [{"license": {"name": "cudnn"}}])
            self.assertEqual(c["hashes"][0]["content"], self.receipts[name]["archive_sha256"])
            self.assertEqual(c["externalReferences"][0]["type"], "distribution")
            files = {f["name"]: {h["alg"]: h["content"] for h in f["hashes"]} for f in c["components"]}
            want = self.expected_files(name)
            self.assertEqual(set(files), set(want))
            for path, (sha256, sha1) in want.items():
                self.assertEqual(files[path], {"SHA-256": sha256, "SHA-1": sha1}, path)

    def test_validators_can_fail(self):
        """The schemas really constrain: broken documents are rejected."""
        doc = self.sbom("spdx-json")
        del doc["spdxVersion"]
        doc["packages"][0]["SPDXID"] = "not an id"
        self.assertGreaterEqual(len(errors(spdx_validator(), doc)), 2)
        bom = self.sbom("cyclonedx-json")
        bom["components"][0]["hashes"][0]["alg"] = "SHA-257"
        bom["components"][0]["licenses"] = [{"license": {"id": "not-a-spdx-id"}}]
        self.assertGreaterEqual(len(errors(cyclonedx_validator(), bom)), 2)

    def test_output_file_and_no_license_lookup(self):
        out = os.path.join(self.dir, "bom.json")
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "cyclonedx-json",
                               "--no-license-lookup", "-o", out, check=0)
        self.assertEqual(res.stdout, "")
        doc = support.load_json(out)
        self.assertTrue(all("licenses" not in c for c in doc["components"]))
        self.assertEqual(errors(cyclonedx_validator(), doc), [])
        spdx = json.loads(support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json",
                                           "--no-license-lookup", check=0).stdout)
        self.assertEqual({p["licenseDeclared"] for p in spdx["packages"]}, {"NOASSERTION"})
        self.assertEqual(errors(spdx_validator(), spdx), [])

    def test_output_never_written_through_a_planted_symlink(self):
        # -o names a file in a directory others may write (a checkout, /tmp):
        # neither the name nor the old fixed temp name "<name>.tmp" is followed.
        out_dir = os.path.join(self.dir, "planted")
        os.makedirs(out_dir)
        out = os.path.join(out_dir, "bom.json")
        victim = os.path.join(out_dir, "victim")
        for planted in (out + ".tmp", out):
            with self.subTest(planted=os.path.basename(planted)):
                with open(victim, "w") as f:
                    f.write("precious\n")
                for old in (out, out + ".tmp"):
                    if os.path.lexists(old):
                        os.unlink(old)
                os.symlink(victim, planted)
                res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json",
                                       "--no-license-lookup", "-o", out)
                self.assertEqual(res.returncode, 0, support.describe(res))
                with open(victim) as f:
                    self.assertEqual(f.read(), "precious\n")
                self.assertFalse(os.path.islink(out))
                self.assertEqual(support.load_json(out)["spdxVersion"], "SPDX-2.3")
                self.assertEqual([n for n in os.listdir(out_dir) if ".tmp." in n], [])

    def test_unreadable_manifest_warns_and_leaves_licenses_unknown(self):
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json", "--base-url",
                               support.file_base_url(os.path.join(self.dir, "nowhere")), "--no-cache",
                               "--retries", "1", check=0)
        self.assertIn("warning: cannot read the manifest of cudnn 9.27.0", res.stderr)
        self.assertEqual({p["licenseDeclared"] for p in json.loads(res.stdout)["packages"]}, {"NOASSERTION"})

    def test_bad_format_and_missing_receipts(self):
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx")
        self.assertEqual(res.returncode, 2, support.describe(res))
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty, exist_ok=True)
        res = support.run_tool("redist", "sbom", "--prefix", empty, "--format", "spdx-json", "--no-license-lookup")
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("no redist receipts", res.stderr)


class SbomOfModifiedPrefix(unittest.TestCase):
    def test_modified_file_is_an_integrity_error(self):
        d = support.make_scratch_dir(self.id())
        mirror = support.copy_mirror(os.path.join(d, "mirror"), products=["cudnn"])
        prefix = os.path.join(d, "prefix")
        support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--base-url", support.file_base_url(mirror),
                         "--prefix", prefix, "--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn",
                         "--no-cache", "--quiet", check=0)
        header = os.path.join(prefix, "include", "cudnn_version.h")
        self.assertTrue(os.path.isfile(header))
        os.chmod(header, 0o644)
        with open(header, "a") as f:
            f.write("// edited\n")
        res = support.run_tool("redist", "sbom", "--prefix", prefix, "--format", "spdx-json", "--no-license-lookup")
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("cudnn_version.h", res.stderr)
        self.assertEqual(res.stdout, "")


class SbomSources(unittest.TestCase):
    """A prefix installed from a mirror: the licenses come from the cache,
    else from the source its receipts name, never from a default base it did
    not come from (here $REDIST_BASE_URL on a closed loopback port)."""

    UNREACHABLE = {"REDIST_BASE_URL": "http://127.0.0.1:9/unreachable"}

    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir("test_sbom.SbomSources")
        cls.cache = os.path.join(cls.dir, "cache")
        cls.prefix = os.path.join(cls.dir, "prefix")
        support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--base-url", support.nginx_base_url(),
                         "--prefix", cls.prefix, "--platform", "linux-x86_64", "--cuda", "12",
                         "--component", "cudnn", "--cache-dir", cls.cache, "--quiet", "--no-check", check=0)

    def licenses(self, res):
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertNotIn("warning", res.stderr)
        return {p["licenseDeclared"] for p in json.loads(res.stdout)["packages"]}

    def test_cache_first_no_request(self):
        mark = support.access_log_mark()
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json",
                               "--cache-dir", self.cache, "--retries", "1", env=self.UNREACHABLE)
        self.assertEqual(self.licenses(res), {"LicenseRef-cudnn"})
        self.assertEqual(support.access_log_since(mark), [])

    def test_without_cache_the_receipts_source(self):
        mark = support.access_log_mark()
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json", "--no-cache",
                               "--retries", "1", env=self.UNREACHABLE)
        self.assertEqual(self.licenses(res), {"LicenseRef-cudnn"})
        self.assertEqual([e["uri"] for e in support.access_log_since(mark)],
                         ["/cudnn/redist/redistrib_9.27.0.json"])


if __name__ == "__main__":
    unittest.main()
