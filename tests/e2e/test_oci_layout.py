"""OCI image layouts (oci-layout:DIR) as a mirror target and a source, through
the real tools: `redist mirror --to oci-layout:DIR` writes a layout that the
OCI image-spec accepts, `cudnn-fetch --mirror oci-layout:DIR` with an
unreachable base installs the same tree, a second mirror run writes nothing,
and a tampered blob, a planted symlink or a garbage index.json is refused."""

import hashlib
import json
import os
import shutil
import unittest

import support

LABEL = "9.27.0"
PLATFORM = ["--platform", "linux-x86_64", "--cuda", "12"]
UNREACHABLE = "http://127.0.0.1:1/unreachable"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None}
REF_NAME = "org.opencontainers.image.ref.name"


def selected_artifacts():
    """What PLATFORM selects from cudnn LABEL."""
    return support.selected_artifacts("cudnn", LABEL, "linux-x86_64", "cuda12")


def file_states(root):
    """(inode, mtime_ns, size) of every file under root: what a rewrite changes."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            out[os.path.relpath(os.path.join(dirpath, n), root)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


class LayoutBase(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.root = os.path.join(self.scratch, "layout")
        self.layout = os.path.join(self.root, "cudnn")
        self.url = "oci-layout:" + self.root

    def mirror(self, *extra, check=0, cwd=None, to=None):
        return support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", to or self.url,
                                "--base-url", support.file_base_url(), *PLATFORM, *extra,
                                env=self.env, check=check, cwd=cwd)

    def install(self, prefix, check=None):
        return support.run_tool("cudnn-fetch", LABEL, "--mirror", self.url, "--base-url", UNREACHABLE,
                                "--prefix", prefix, *PLATFORM, "--no-cache", "--retries", "1",
                                env=self.env, check=check)

    def blob(self, sha256):
        return os.path.join(self.layout, "blobs", "sha256", sha256)

    def assert_prefix_empty(self, prefix):
        self.assertEqual(support.tree_snapshot(prefix, ignore=r"^\.redist") if os.path.exists(prefix) else {}, {})

    def check_layout(self):
        """The image-spec's image-layout rules, checked independently of redist."""
        with open(os.path.join(self.layout, "oci-layout"), encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"imageLayoutVersion": "1.0.0"})
        with open(os.path.join(self.layout, "index.json"), encoding="utf-8") as f:
            index = json.load(f)
        self.assertEqual(index["schemaVersion"], 2)
        self.assertEqual(index["mediaType"], "application/vnd.oci.image.index.v1+json")

        def check_descriptor(d):
            algo, hex_digest = d["digest"].split(":")
            self.assertEqual(algo, "sha256")
            path = self.blob(hex_digest)
            self.assertTrue(os.path.isfile(path) and not os.path.islink(path), path)
            self.assertEqual(os.path.getsize(path), d["size"], path)
            self.assertEqual(support.sha256_file(path), hex_digest, path)
            return path

        self.assertEqual(len(index["manifests"]), 1)
        entry = index["manifests"][0]
        self.assertEqual(entry["mediaType"], "application/vnd.oci.image.manifest.v1+json")
        self.assertEqual(entry["annotations"][REF_NAME], LABEL)
        with open(check_descriptor(entry), encoding="utf-8") as f:
            manifest = json.load(f)
        self.assertEqual(manifest["schemaVersion"], 2)
        self.assertEqual(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json")
        check_descriptor(manifest["config"])
        titles = {}
        for layer in manifest["layers"]:
            check_descriptor(layer)
            titles[layer["annotations"]["org.opencontainers.image.title"]] = layer["digest"][7:]
        upstream = support.manifest_path("cudnn", LABEL)
        self.assertEqual(titles.pop(f"redistrib_{LABEL}.json"), support.sha256_file(upstream))
        self.assertEqual(titles, {rel: rec["sha256"] for rel, rec in selected_artifacts().items()})
        # Nothing else is left in the layout (no scratch, no temporary files).
        self.assertEqual(sorted(os.listdir(self.layout)), ["blobs", "index.json", "oci-layout"])


class MirrorAndInstall(LayoutBase):
    def test_mirror_into_a_layout_then_install_from_it_alone(self):
        os.makedirs(self.scratch, exist_ok=True)
        out = json.loads(self.mirror("--json", cwd=self.scratch, to="oci-layout:layout").stdout)
        self.assertEqual({f["relative_path"] for f in out["releases"][0]["files"]}, set(selected_artifacts()))
        self.check_layout()

        prefix = os.path.join(self.scratch, "prefix")
        self.install(prefix, check=0)
        reference = os.path.join(self.scratch, "reference")
        support.run_tool("cudnn-fetch", LABEL, "--base-url", support.file_base_url(), "--prefix", reference,
                         *PLATFORM, "--no-cache", env=self.env, check=0)
        a = support.tree_snapshot(prefix, ignore=r"^\.redist")
        b = support.tree_snapshot(reference, ignore=r"^\.redist")
        self.assertTrue(a)
        self.assertEqual(a, b, support.diff_snapshots(a, b))

        # --offline still reads a layout: it is on this machine's disk.
        offline = os.path.join(self.scratch, "offline")
        support.run_tool("cudnn-fetch", LABEL, "--mirror", self.url, "--base-url", UNREACHABLE, "--prefix", offline,
                         *PLATFORM, "--offline", env=self.env, check=0)
        self.assertEqual(support.tree_snapshot(offline, ignore=r"^\.redist"), b)

        versions = support.run_tool("redist", "versions", "cudnn", "--base-url", self.url, "--json",
                                    env=self.env, check=0)
        self.assertEqual(json.loads(versions.stdout), [LABEL])

        # Incremental: a second run writes nothing.
        before = file_states(self.layout)
        again = json.loads(self.mirror("--json").stdout)
        self.assertEqual({f["status"] for f in again["releases"][0]["files"]}, {"up_to_date"})
        self.assertEqual(again["releases"][0]["manifest_status"], "up_to_date")
        self.assertEqual(file_states(self.layout), before)


class Usage(LayoutBase):
    def test_a_layout_needs_a_directory(self):
        res = self.mirror(check=2, to="oci-layout:")
        self.assertIn("needs a directory", res.stderr)


class LockFiles(LayoutBase):
    def test_a_lock_names_the_layout_and_installs_only_where_the_user_named_it(self):
        self.mirror("--quiet")
        lock = os.path.join(self.scratch, "redist.lock")
        support.run_tool("redist", "lock", "cudnn", LABEL, "--base-url", self.url, *PLATFORM, "--no-cache",
                         "-o", lock, env=self.env, check=0)
        with open(lock, encoding="utf-8") as f:
            self.assertIn(f'"oci-layout:{self.layout}/blobs/sha256:', f.read())
        # A lock is input: a local path it names must lie under one given on the command line.
        refused = support.run_tool("redist", "fetch", "--locked", lock, "--prefix", os.path.join(self.scratch, "p1"),
                                   "--no-cache", env=self.env, check=4)
        self.assertIn("outside the local mirrors", refused.stderr)
        prefix = os.path.join(self.scratch, "p2")
        support.run_tool("redist", "fetch", "--locked", lock, "--prefix", prefix, "--no-cache",
                         "--mirror", self.url, env=self.env, check=0)
        self.assertTrue(support.tree_snapshot(prefix, ignore=r"^\.redist"))


class HostileLayout(LayoutBase):
    def setUp(self):
        super().setUp()
        self.mirror("--quiet")
        self.rec = max(selected_artifacts().values(), key=lambda r: int(r["size"]))
        self.prefix = os.path.join(self.scratch, "prefix")

    def test_tampered_blob_is_refused(self):
        with open(self.blob(self.rec["sha256"]), "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        res = self.install(self.prefix, check=5)
        self.assertIn(self.rec["sha256"][:12], res.stderr + res.stdout)
        self.assert_prefix_empty(self.prefix)

    def test_symlinked_blob_is_not_followed(self):
        # The link points at an intact copy: following it would install.
        elsewhere = os.path.join(self.scratch, "elsewhere")
        os.makedirs(elsewhere)
        copy = os.path.join(elsewhere, self.rec["sha256"])
        os.replace(self.blob(self.rec["sha256"]), copy)
        os.symlink(copy, self.blob(self.rec["sha256"]))
        res = self.install(self.prefix)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assertIn("symlink", res.stderr)
        self.assert_prefix_empty(self.prefix)

    def test_symlinked_blobs_directory_is_not_followed(self):
        elsewhere = os.path.join(self.scratch, "elsewhere")
        shutil.move(os.path.join(self.layout, "blobs"), elsewhere)
        os.symlink(elsewhere, os.path.join(self.layout, "blobs"))
        res = self.install(self.prefix)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assert_prefix_empty(self.prefix)
        # The mirror refuses to write through it too.
        before = file_states(elsewhere)
        res = self.mirror(check=None)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(file_states(elsewhere), before)

    def test_garbage_index_is_one_line_naming_the_file(self):
        with open(os.path.join(self.layout, "index.json"), "wb") as f:
            f.write(b'{"schemaVersion": 2, "manifests": [{"digest": "sha256:zz"')
        res = support.run_tool("redist", "versions", "cudnn", "--base-url", self.url, env=self.env)
        self.assertNotEqual(res.returncode, 0)
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn(os.path.join(self.layout, "index.json"), lines[0])

    def test_manifest_blob_that_does_not_match_its_digest_is_refused(self):
        with open(os.path.join(self.layout, "index.json"), encoding="utf-8") as f:
            digest = json.load(f)["manifests"][0]["digest"][7:]
        with open(self.blob(digest), "rb") as f:
            body = f.read()
        with open(self.blob(digest), "wb") as f:
            f.write(body + b" ")  # still the same JSON, no longer the named bytes
        res = self.install(self.prefix)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assert_prefix_empty(self.prefix)


if __name__ == "__main__":
    unittest.main()


class IndexRewrite(LayoutBase):
    """index.json's read-modify-rename: one writer at a time, so two
    `redist mirror` runs into one layout at once lose no release (the first
    pauses with the index read; the second must wait for it); and what other
    tools recorded in it is kept."""

    def test_concurrent_runs_lose_no_release(self):
        first = support.BackgroundTool("redist", "mirror", "cudnn", LABEL, "--to", self.url, "--base-url",
                                       support.file_base_url(), *PLATFORM,
                                       env=dict(self.env, REDIST_DEBUG_PAUSE="layout-index",
                                                REDIST_DEBUG_PAUSE_SECONDS="3"))
        try:
            self.assertTrue(first.wait_for_stderr("paused at layout-index", timeout=60), first.stderr)
            second = support.run_tool("redist", "mirror", "cudnn", "9.8.0", "--to", self.url, "--base-url",
                                      support.file_base_url(), *PLATFORM, env=self.env, check=None, timeout=120)
            done = first.wait(timeout=120)
        finally:
            first.kill()
        self.assertEqual(done.returncode, 0, support.describe(done))
        self.assertEqual(second.returncode, 0, support.describe(second))
        with open(os.path.join(self.layout, "index.json"), encoding="utf-8") as f:
            names = sorted(m["annotations"][REF_NAME] for m in json.load(f)["manifests"])
        self.assertEqual(names, sorted([LABEL, "9.8.0"]))

    def test_a_rewrite_keeps_what_other_tools_recorded(self):
        support.run_tool("redist", "mirror", "cudnn", "9.8.0", "--to", self.url, "--base-url",
                         support.file_base_url(), *PLATFORM, env=self.env, check=0)
        index_path = os.path.join(self.layout, "index.json")
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        entry = index["manifests"][0]
        entry["platform"] = {"architecture": "amd64", "os": "linux"}
        entry["artifactType"] = "application/x-other-tool"
        entry["annotations"]["com.example.note"] = "kept"
        index["annotations"] = {"com.example.index": "mine"}
        with open(index_path, "w", encoding="utf-8") as f:
            json.dump(index, f)
        self.mirror()  # another release: the index is rewritten
        with open(index_path, encoding="utf-8") as f:
            after = json.load(f)
        self.assertEqual(after["annotations"], {"com.example.index": "mine"})
        kept = [m for m in after["manifests"] if m["annotations"][REF_NAME] == "9.8.0"]
        self.assertEqual(kept, [entry])
        self.assertEqual(sorted(m["annotations"][REF_NAME] for m in after["manifests"]), sorted([LABEL, "9.8.0"]))
