"""`redist mirror` adds, never replaces, and warms a mirror from locks, through
the real tools:
  - mirroring one platform per run into an image layout or a registry keeps
    the earlier platforms in the release's tag (and their signed copies in
    its sidecar), so that runners of every platform install from it alone;
  - a release that has nothing for one of the platforms asked for is
    mirrored for the others, with a warning naming both;
  - `--from-lock` mirrors exactly what one or several locks pin;
  - copies for a release already in the target are made from the target's
    own originals: upstream's archives are not needed again."""

import json
import os
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.27.0"
UNREACHABLE = "http://127.0.0.1:1/unreachable"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None, "REDIST_TRUSTED_KEYS": None}
TITLE = "org.opencontainers.image.title"


class MirrorBase(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"),
                        XDG_CONFIG_HOME=os.path.join(self.scratch, "config"))

    def mirror(self, to, *args, check=0):
        return support.run_tool("redist", "mirror", *args, "--to", to, "--base-url", support.file_base_url(),
                                env=self.env, check=check)

    def install(self, source, platform, prefix, *extra, check=0):
        return support.run_tool("cudnn-fetch", LABEL, "--mirror", source, "--base-url", UNREACHABLE,
                                "--prefix", prefix, "--platform", platform, "--cuda", "12", "--no-cache",
                                "--retries", "1", *extra, env=self.env, check=check)

    def layout_titles(self, root):
        """The layer titles of the release's tag in the layout at root."""
        layout = os.path.join(root, "cudnn")
        index = support.load_json(os.path.join(layout, "index.json"))
        [entry] = [m for m in index["manifests"]
                   if m["annotations"]["org.opencontainers.image.ref.name"] == LABEL]
        manifest = support.load_json(os.path.join(layout, "blobs", "sha256", entry["digest"][7:]))
        return {layer["annotations"][TITLE] for layer in manifest["layers"]}


class AddsNeverReplaces(MirrorBase):
    def test_a_layout_keeps_every_platform_mirrored_one_run_at_a_time(self):
        root = os.path.join(self.scratch, "layout")
        url = "oci-layout:" + root
        x86 = support.selected_artifacts("cudnn", LABEL, "linux-x86_64", "cuda12")
        sbsa = support.selected_artifacts("cudnn", LABEL, "linux-sbsa", "cuda12")
        self.mirror(url, "cudnn", LABEL, "--platform", "linux-x86_64", "--cuda", "12")
        res = self.mirror(url, "cudnn", LABEL, "--platform", "linux-sbsa", "--cuda", "12")
        self.assertIn(f"{len(x86)} more kept from earlier runs", res.stdout)
        titles = self.layout_titles(root)
        self.assertTrue(set(x86) <= titles, set(x86) - titles)
        self.assertTrue(set(sbsa) <= titles, set(sbsa) - titles)
        # Runners of both platforms install from the layout alone, exactly as from upstream.
        for platform in ("linux-x86_64", "linux-sbsa"):
            prefix = os.path.join(self.scratch, "prefix-" + platform)
            self.install(url, platform, prefix)
            reference = os.path.join(self.scratch, "reference-" + platform)
            support.run_tool("cudnn-fetch", LABEL, "--base-url", support.file_base_url(), "--prefix", reference,
                             "--platform", platform, "--cuda", "12", "--no-cache", env=self.env, check=0)
            a = support.tree_snapshot(prefix, ignore=r"^\.redist")
            b = support.tree_snapshot(reference, ignore=r"^\.redist")
            self.assertTrue(a)
            self.assertEqual(a, b, support.diff_snapshots(a, b))

    def test_signed_copies_of_earlier_runs_stay_in_the_sidecar(self):
        root = os.path.join(self.scratch, "layout")
        url = "oci-layout:" + root
        key, pub = support.make_key_pair(self.scratch)
        common = ["--recompress", "zstd", "--sign-key", key, "--cuda", "12", "--json"]
        first = json.loads(self.mirror(url, "cudnn", LABEL, "--platform", "linux-x86_64", *common).stdout)
        second = json.loads(self.mirror(url, "cudnn", LABEL, "--platform", "linux-sbsa", *common).stdout)
        made_first = {c["original_sha256"] for c in first["releases"][0]["copies"]}
        listed = {c["original_sha256"]: c["status"] for c in second["releases"][0]["copies"]}
        self.assertTrue(made_first)
        # The x86_64 copies are listed again, not made again; the sbsa ones are new.
        self.assertTrue(made_first <= set(listed), made_first - set(listed))
        self.assertEqual({listed[s] for s in made_first}, {"up_to_date"})
        self.assertGreater(len(listed), len(made_first))
        # An x86_64 runner that trusts the key installs the copies.
        prefix = os.path.join(self.scratch, "prefix")
        res = self.install(url, "linux-x86_64", prefix, "--trusted-key", pub)
        self.assertNotIn("not used", res.stderr + res.stdout)
        support.run_tool("redist", "verify", "--prefix", prefix, env=self.env, check=0)

    @unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                         "docker-registry is not installed (scripts/install-deps.sh)")
    def test_a_registry_tag_keeps_every_platform(self):
        registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"))
        registry.__enter__()
        self.addCleanup(registry.__exit__)
        self.mirror(registry.url, "cudnn", LABEL, "--platform", "linux-x86_64", "--cuda", "12")
        self.mirror(registry.url, "cudnn", LABEL, "--platform", "linux-sbsa", "--cuda", "12")
        for platform in ("linux-x86_64", "linux-sbsa"):
            prefix = os.path.join(self.scratch, "prefix-" + platform)
            self.install(registry.url, platform, prefix)
            support.run_tool("redist", "verify", "--prefix", prefix, env=self.env, check=0)


class CopiesFromTheTargetsOriginals(MirrorBase):
    """First the originals, then `--recompress` in a later run, with
    upstream's archives gone (its manifest stays): the copies can only come
    from what the target holds, read back and verified."""

    def copies_later(self, url):
        upstream = support.copy_mirror(os.path.join(self.scratch, "upstream"), ["cudnn"])
        base = support.file_base_url(upstream)
        common = ["cudnn", LABEL, "--to", url, "--base-url", base, "--platform", "linux-x86_64", "--cuda", "12"]
        support.run_tool("redist", "mirror", *common, env=self.env, check=0)
        for rel in support.selected_artifacts("cudnn", LABEL, "linux-x86_64", "cuda12"):
            os.remove(support.artifact_path("cudnn", rel, upstream))
        key, pub = support.make_key_pair(self.scratch)
        res = support.run_tool("redist", "mirror", *common, "--recompress", "zstd", "--sign-key", key, "--json",
                               env=self.env, check=0)
        [release] = json.loads(res.stdout)["releases"]
        self.assertTrue(release["copies"])
        self.assertEqual({c["status"] for c in release["copies"]}, {"recompressed"}, release["copies"])
        self.assertEqual({f["status"] for f in release["files"]}, {"up_to_date"})
        prefix = os.path.join(self.scratch, "prefix")
        res = self.install(url, "linux-x86_64", prefix, "--trusted-key", pub, "--json")
        copies = {c["original_sha256"]: c["sha256"] for c in release["copies"]}
        installed = json.loads(res.stdout)["components"]
        self.assertEqual({c["sha256"]: c.get("copy_sha256") for c in installed},
                         {c["sha256"]: copies[c["sha256"]] for c in installed})
        support.run_tool("redist", "verify", "--prefix", prefix, env=self.env, check=0)

    def test_a_layout(self):
        self.copies_later("oci-layout:" + os.path.join(self.scratch, "layout"))

    @unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                         "docker-registry is not installed (scripts/install-deps.sh)")
    def test_a_registry(self):
        registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"))
        registry.__enter__()
        self.addCleanup(registry.__exit__)
        self.copies_later(registry.url)


class MissingPlatform(MirrorBase):
    def test_a_release_without_a_platform_is_mirrored_for_the_others(self):
        dest = os.path.join(self.scratch, "mirror")
        # cuda 13.0.0 has no linux-aarch64 build; 12.9.1 has.
        res = self.mirror(dest, "cuda", "12.9.1,13.0.0", "--platform", "linux-x86_64,linux-aarch64",
                          "--component", "cuda_cudart")
        self.assertIn("warning: cuda 13.0.0 has nothing for linux-aarch64: mirrored for the other platforms",
                      res.stderr)
        self.assertNotIn("12.9.1 has nothing", res.stderr)
        for label in ("12.9.1", "13.0.0"):
            self.assertTrue(os.path.isfile(os.path.join(dest, "cuda", "redist", f"redistrib_{label}.json")))
        # A runner of a platform no run mirrored is told which archive the mirror lacks.
        layout = "oci-layout:" + os.path.join(self.scratch, "layout")
        self.mirror(layout, "cudnn", LABEL, "--platform", "linux-x86_64", "--cuda", "12")
        res = support.run_tool("cudnn-fetch", LABEL, "--base-url", layout, "--prefix",
                               os.path.join(self.scratch, "prefix"), "--platform", "linux-sbsa", "--cuda", "12",
                               "--no-cache", "--retries", "1", env=self.env)
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("no linux-sbsa cuda12 archive of cudnn at this source", res.stderr)
        # A release with none of the platforms still fails, naming them.
        res = self.mirror(dest, "cuda", "13.0.0", "--platform", "linux-aarch64", check=None)
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("has nothing for platform linux-aarch64", res.stderr)


class FromLock(MirrorBase):
    def test_mirrors_exactly_what_the_locks_pin(self):
        # A single-release lock (x86_64) and a project lock (sbsa, one component): both versions.
        lock_a = os.path.join(self.scratch, "a.lock")
        support.run_tool("redist", "lock", "cudnn", LABEL, "--base-url", support.nginx_base_url(),
                         "--platform", "linux-x86_64", "--cuda", "12", "-o", lock_a, env=self.env, check=0)
        project = os.path.join(self.scratch, "project")
        os.makedirs(project)
        with open(os.path.join(project, "redist.toml"), "w") as f:
            f.write(f'[project]\nprefix = "prefix"\nplatforms = ["linux-sbsa"]\ncuda = "12"\n'
                    f'base-url = "{support.nginx_base_url()}"\n\n'
                    f'[products.cudnn]\nversion = "{LABEL}"\ncomponents = ["cudnn"]\n')
        support.run_tool("redist", "lock", cwd=project, env=self.env, check=0)
        lock_b = os.path.join(project, "redist.lock")
        pinned = {a["relative_path"] for a in support.load_json(lock_a)["artifacts"]}
        [product] = support.load_json(lock_b)["products"]
        sbsa = {a["relative_path"] for a in product["artifacts"]}
        self.assertTrue(sbsa and not sbsa <= pinned)
        pinned |= sbsa
        dest = os.path.join(self.scratch, "mirror")
        out = json.loads(self.mirror(dest, "--from-lock", lock_a, "--from-lock", lock_b, "--json").stdout)
        self.assertEqual(len(out), 1)  # one release, the union of both locks' artifacts
        self.assertEqual({f["relative_path"] for f in out[0]["releases"][0]["files"]}, pinned)
        archives = set()
        redist_dir = os.path.join(dest, "cudnn", "redist")
        for dirpath, _, names in os.walk(redist_dir):
            for n in names:
                rel = os.path.relpath(os.path.join(dirpath, n), redist_dir)
                if not rel.startswith("redistrib_") and rel != "index.html":
                    archives.add(rel)
        self.assertEqual(archives, pinned)
        # A lock then installs from the mirror: nothing of it comes from the lock's own host.
        prefix = os.path.join(self.scratch, "prefix")
        mark = support.access_log_mark()
        support.run_tool("redist", "fetch", "--locked", lock_a, "--mirror", dest, "--prefix", prefix,
                         "--platform", "linux-x86_64", "--no-cache", env=self.env, check=0)
        self.assertEqual([r["uri"] for r in support.access_log_since(mark) if r["uri"].endswith(".tar.xz")], [])
        support.run_tool("redist", "verify", "--prefix", prefix, env=self.env, check=0)

    def test_flags_that_do_not_apply_and_bad_locks_are_refused(self):
        dest = os.path.join(self.scratch, "mirror")
        lock = os.path.join(self.scratch, "a.lock")
        support.run_tool("redist", "lock", "cudnn", LABEL, "--base-url", support.file_base_url(),
                         "--platform", "linux-x86_64", "--cuda", "12", "-o", lock, env=self.env, check=0)
        res = self.mirror(dest, "--from-lock", lock, "--platform", "linux-sbsa", check=2)
        self.assertIn("--from-lock mirrors exactly what the locks pin", res.stderr)
        res = self.mirror(dest, "cudnn", LABEL, "--from-lock", lock, check=2)
        self.assertIn("not both", res.stderr)
        res = self.mirror(dest, check=2)
        self.assertIn("PRODUCT and VERSIONS are required", res.stderr)
        # A lock whose manifest pin does not match what upstream serves: nothing is mirrored.
        data = support.load_json(lock)
        data["manifest_sha256"] = "0" * 64
        support.save_json(lock, data)
        res = self.mirror(dest, "--from-lock", lock, check=None)
        self.assertNotEqual(res.returncode, 0, support.describe(res))
        self.assertFalse(os.path.exists(os.path.join(dest, "cudnn", "redist", f"redistrib_{LABEL}.json")))
        garbage = os.path.join(self.scratch, "garbage.lock")
        with open(garbage, "w") as f:
            f.write("{not json")
        res = self.mirror(dest, "--from-lock", garbage, check=4)
        self.assertIn("garbage.lock", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)


if __name__ == "__main__":
    unittest.main()
