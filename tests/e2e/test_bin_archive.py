"""NVIDIA's bin-archive shape: classic manifests at
<base>/<product>/redist/redistrib_<label>.json (base ".../bin-archive/release")
whose relative_paths climb into a content-addressed pool,
"../../../pool/<platform>/<uuid>/<file>" (".../bin-archive/pool/...").

Served by nginx on loopback from the test's own tree: such a release installs
(`redist fetch`), locks (`redist lock`, `fetch --locked` uses the lock's
resolved URLs), mirrors to a directory (the manifest byte for byte, the pool at
<mirror>/pool/...), to an image layout and to a registry, and installs from
each with the origin gone. A relative_path that would leave the origin is refused naming its
JSON path. With no base named, the default sources are NVIDIA's classic host,
then the bin-archive (never contacted here: --offline)."""

import json
import os
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.0.0"
UUID = "5B515474-7E78-11F1-8656-C51E4F4B317F"
TOP = "cudnn-linux-x86_64-9.0.0.1_cuda12-archive"
IN_POOL = f"pool/linux-x86_64/{UUID}/{TOP}.tar.xz"
CLIMB = "../../../" + IN_POOL
PLATFORM = ["--platform", "linux-x86_64", "--cuda", "12"]
UNREACHABLE = "http://127.0.0.1:1/unreachable"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None}
JSON_PATH = "cudnn.linux-x86_64.cuda12.relative_path"
FILES = {"include/cudnn.h": b"#define CUDNN_MAJOR 9\n", "lib/libcudnn.so.9": b"\x7fELF pool bytes\n"}


def make_tree(root: str, relative_path: str = CLIMB, archive_at: str = IN_POOL, product: str = "cudnn",
              files: dict = FILES) -> str:
    """root/bin-archive/{release/<product>/redist/redistrib_LABEL.json, <archive_at>};
    returns the manifest's path."""
    data = support.write_xz_archive(os.path.join(root, "bin-archive"), archive_at, TOP, files)
    manifest = {
        "release_date": "2026-07-01",
        "release_label": LABEL,
        "release_product": product,
        "cudnn": {
            "name": "NVIDIA CUDA Deep Neural Network library",
            "license": "cudnn",
            "version": "9.0.0.1",
            "linux-x86_64": {"cuda12": support.artifact_entry(relative_path, data)},
        },
    }
    path = os.path.join(root, "bin-archive", "release", product, "redist", f"redistrib_{LABEL}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    support.save_json(path, manifest)
    return path


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class BinArchiveBase(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        # nginx serves <nginx>/own/<test>/ as <base>/_own/ (tests/fixtures/nginx_fixture.py).
        name = self.id().rsplit(".", 1)[-1]
        self.origin = os.path.join(support.nginx_dir(), "own", support.test_id() or "manual", name)
        support.rm_tree(self.origin)
        self.addCleanup(support.rm_tree, self.origin)
        self.root_url = f"{support.nginx_base_url()}/_own/{name}"
        self.base = self.root_url + "/bin-archive/release"
        self.pool_url = self.root_url + "/bin-archive/" + IN_POOL
        self.prefix = os.path.join(self.scratch, "prefix")

    def run_redist(self, *args, check=None):
        return support.run_tool("redist", *args, env=self.env, check=check)

    def fetch(self, *source, prefix=None, check=0):
        return self.run_redist("fetch", "cudnn", LABEL, *source, "--prefix", prefix or self.prefix, *PLATFORM,
                               "--no-cache", "--retries", "1", check=check)

    def assert_installed(self, prefix=None):
        prefix = prefix or self.prefix
        for rel, data in FILES.items():
            self.assertEqual(read_bytes(os.path.join(prefix, rel)), data, rel)

    def assert_refused(self, res, *needles):
        self.assertEqual(res.returncode, 4, support.describe(res))
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, res.stderr)
        for needle in needles:
            self.assertIn(needle, lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libcudnn.so.9")))


class FromTheOrigin(BinArchiveBase):
    def test_fetch_installs_from_the_pool(self):
        make_tree(self.origin)
        mark = support.access_log_mark()
        self.fetch("--base-url", self.base)
        self.assert_installed()
        uris = [e["uri"] for e in support.access_log_since(mark)]
        self.assertTrue(any(u.endswith("/bin-archive/" + IN_POOL) for u in uris), uris)
        self.assertFalse(any("/../" in u or "/redist/pool/" in u for u in uris), uris)
        receipts = os.path.join(self.prefix, ".redist", "receipts", "cudnn")
        urls = [support.load_json(os.path.join(receipts, n))["url"] for n in os.listdir(receipts)]
        self.assertEqual(urls, [self.pool_url])

    def test_show_names_the_resolved_url(self):
        make_tree(self.origin)
        res = self.run_redist("show", "cudnn", LABEL, "--base-url", self.base, *PLATFORM, "--json", check=0)
        artifacts = json.loads(res.stdout)["artifacts"]
        self.assertEqual([(a["relative_path"], a["url"]) for a in artifacts], [(CLIMB, self.pool_url)])

    def test_lock_records_the_resolved_url_and_a_locked_fetch_uses_it(self):
        make_tree(self.origin)
        lock = os.path.join(self.scratch, "redist.lock")
        self.run_redist("lock", "cudnn", LABEL, "--base-url", self.base, "--platform", "linux-x86_64", "-o", lock,
                        check=0)
        doc = support.load_json(lock)
        self.assertEqual([a["url"] for a in doc["artifacts"]], [self.pool_url])
        self.assertEqual([a["relative_path"] for a in doc["artifacts"]], [CLIMB])
        # The lock's URL is used as recorded, never resolved again: move the
        # archive and point the lock there; the relative_path no longer leads to it.
        moved = "elsewhere/" + TOP + ".tar.xz"
        os.makedirs(os.path.join(self.origin, "elsewhere"))
        os.rename(os.path.join(self.origin, "bin-archive", IN_POOL), os.path.join(self.origin, moved))
        doc["artifacts"][0]["url"] = self.root_url + "/" + moved
        support.save_json(lock, doc)
        self.run_redist("fetch", "--locked", lock, "--prefix", self.prefix, "--cuda", "12", "--platform",
                        "linux-x86_64", "--no-cache", "--retries", "1", check=0)
        self.assert_installed()


class Projects(BinArchiveBase):
    def test_sync_installs_and_locks_the_resolved_url(self):
        make_tree(self.origin)
        project = os.path.join(self.scratch, "redist.toml")
        with open(project, "w") as f:
            f.write(f'[project]\nprefix = "nvidia"\nplatforms = ["linux-x86_64"]\ncuda = "12"\n'
                    f'base-url = "{self.base}"\n\n[products.cudnn]\nversion = "9"\n')
        self.run_redist("sync", "--file", project, "--platform", "linux-x86_64", "--no-cache", check=0)
        self.assert_installed(os.path.join(self.scratch, "nvidia"))
        lock = support.load_json(os.path.join(self.scratch, "redist.lock"))
        self.assertEqual([a["url"] for p in lock["products"] for a in p["artifacts"]], [self.pool_url])


class Mirrors(BinArchiveBase):
    def mirror(self, to):
        return self.run_redist("mirror", "cudnn", LABEL, "--to", to, "--base-url", self.base, *PLATFORM, check=0)

    def test_directory_mirror_keeps_the_manifest_and_the_pool_and_installs_alone(self):
        manifest = make_tree(self.origin)
        dest = os.path.join(self.scratch, "mirror")
        self.mirror(dest)
        self.assertEqual(read_bytes(os.path.join(dest, "cudnn", "redist", f"redistrib_{LABEL}.json")),
                         read_bytes(manifest))
        pooled = os.path.join(dest, *IN_POOL.split("/"))
        self.assertEqual(read_bytes(pooled), read_bytes(os.path.join(self.origin, "bin-archive", IN_POOL)))
        # Nothing written outside the mirror, nothing under the product's redist/ but the manifest and listing.
        self.assertFalse(os.path.exists(os.path.join(self.scratch, "pool")))
        self.assertEqual(sorted(os.listdir(os.path.join(dest, "cudnn", "redist"))),
                         ["index.html", f"redistrib_{LABEL}.json"])
        # Again: nothing to do.
        again = json.loads(self.run_redist("mirror", "cudnn", LABEL, "--to", dest, "--base-url", self.base,
                                           *PLATFORM, "--json", check=0).stdout)
        self.assertEqual({f["status"] for f in again["releases"][0]["files"]}, {"up_to_date"})

        support.rm_tree(self.origin)  # the origin is gone
        self.fetch("--base-url", support.file_base_url(dest))
        self.assert_installed()
        second = os.path.join(self.scratch, "prefix2")
        self.fetch("--mirror", dest, "--base-url", UNREACHABLE, prefix=second)
        self.assert_installed(second)
        versions = self.run_redist("versions", "cudnn", "--base-url", dest, "--json", check=0)
        self.assertEqual(json.loads(versions.stdout), [LABEL])

    def test_another_product_never_overwrites_a_pool_file(self):
        make_tree(self.origin)
        dest = os.path.join(self.scratch, "mirror")
        self.mirror(dest)
        pooled = os.path.join(dest, *IN_POOL.split("/"))
        before = read_bytes(pooled)
        # Another product's release (from another origin) names the same pool file with other bytes.
        other = os.path.join(self.origin, "other")
        make_tree(other, product="cudss", files={"include/cudss.h": b"other bytes\n"})
        res = self.run_redist("mirror", "cudss", LABEL, "--to", dest, "--base-url",
                              self.root_url + "/other/bin-archive/release", *PLATFORM)
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn(JSON_PATH, res.stderr)
        self.assertIn("cudnn/redist/redistrib_9.0.0.json", res.stderr)
        self.assertEqual(read_bytes(pooled), before)

    def test_image_layout_mirror_installs_alone(self):
        make_tree(self.origin)
        layout = "oci-layout:" + os.path.join(self.scratch, "layout")
        self.mirror(layout)
        index = support.load_json(os.path.join(self.scratch, "layout", "cudnn", "index.json"))
        image = support.load_json(os.path.join(self.scratch, "layout", "cudnn", "blobs", "sha256",
                                               index["manifests"][0]["digest"][7:]))
        titles = {layer["annotations"]["org.opencontainers.image.title"] for layer in image["layers"]}
        self.assertEqual(titles, {f"redistrib_{LABEL}.json", IN_POOL})  # a title is never a "../" path

        support.rm_tree(self.origin)
        self.fetch("--mirror", layout, "--base-url", UNREACHABLE)
        self.assert_installed()
        second = os.path.join(self.scratch, "prefix2")
        self.fetch("--base-url", layout, prefix=second)
        self.assert_installed(second)


@unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                     "docker-registry is not installed (scripts/install-deps.sh)")
class RegistryMirror(BinArchiveBase):
    def test_registry_mirror_installs_alone(self):
        make_tree(self.origin)
        registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"))
        registry.__enter__()
        self.addCleanup(registry.__exit__)
        self.run_redist("mirror", "cudnn", LABEL, "--to", registry.url, "--base-url", self.base, *PLATFORM, check=0)
        support.rm_tree(self.origin)
        self.fetch("--mirror", registry.url, "--base-url", UNREACHABLE)
        self.assert_installed()
        second = os.path.join(self.scratch, "prefix2")
        self.fetch("--base-url", registry.url, prefix=second)
        self.assert_installed(second)


class LeavingTheOrigin(BinArchiveBase):
    def test_relative_paths_that_would_leave_are_refused_naming_the_json_path(self):
        for rel in ("../../../../" + IN_POOL, "../%2e%2e/../" + IN_POOL, "%2e%2e/%2e%2e/%2e%2e/" + IN_POOL,
                    "..%2f..%2f..%2f" + IN_POOL, "//127.0.0.1:1/" + IN_POOL, "http://127.0.0.1:1/" + IN_POOL,
                    "../a/../../" + IN_POOL, "../../../" + IN_POOL + "?x=1"):
            with self.subTest(rel=rel):
                support.rm_tree(self.origin)
                make_tree(self.origin, relative_path=rel)
                self.assert_refused(self.fetch("--base-url", self.base, check=None), JSON_PATH)

    def test_a_climb_above_the_hosts_root_is_refused(self):
        # Served at the root of its own port: "<root>/cudnn/redist/../../../" is above "/".
        root = os.path.join(self.scratch, "served")
        make_tree(root)
        server = support.FaultServer(os.path.join(root, "bin-archive", "release"), os.path.join(self.scratch, "fs"))
        self.addCleanup(server.stop)
        res = self.fetch("--base-url", server.base, check=None)
        self.assert_refused(res, JSON_PATH, "climbs above the root")
        self.assertEqual([e for e in server.log() if "pool" in e.get("path", "")], [])


class DefaultSources(BinArchiveBase):
    def test_no_base_named_tries_the_classic_host_then_the_bin_archive(self):
        # --offline with an empty cache: both hosts are named, neither is contacted.
        res = self.run_redist("versions", "cudnn", "--offline", check=None)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("https://packages.nvidia.com/bin-archive/release/cudnn/redist/", res.stderr)
        help_text = self.run_redist("fetch", "--help", check=0).stdout
        self.assertIn("https://developer.download.nvidia.com/compute, then "
                      "https://packages.nvidia.com/bin-archive/release", " ".join(help_text.split()))

    def test_a_named_base_is_the_only_base(self):
        res = support.run_tool("redist", "versions", "cudnn", "--offline", check=None,
                               env=dict(self.env, REDIST_BASE_URL=UNREACHABLE))
        self.assertNotEqual(res.returncode, 0)
        self.assertNotIn("packages.nvidia.com", res.stderr)
        res = self.run_redist("versions", "cudnn", "--offline", "--base-url", UNREACHABLE, check=None)
        self.assertNotIn("packages.nvidia.com", res.stderr)


if __name__ == "__main__":
    unittest.main()
