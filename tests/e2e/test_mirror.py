"""`redist mirror`: the upstream layout, verified downloads, incremental
re-runs, repair of a corrupted file, serving the result with a second nginx,
and a corrupted upstream."""

import json
import os
import subprocess
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import nginx_fixture  # noqa: E402  (free_port, wait_ready, stop, log_directives)

PLATFORMS = ("linux-x86_64", "linux-sbsa")
LABELS = ("9.27.0", "9.8.0")
ARCHIVE_SUFFIXES = (".tar.xz", ".tar.gz", ".tar.zst", ".zip")


def expected_artifacts(label, platforms=PLATFORMS, components=None, cuda=None):
    """{relative_path: record} selected from the demo mirror's manifest,
    computed with Python's json module only."""
    out = {}
    for comp, platform, variant, rec in support.iter_artifacts(support.load_manifest("cudnn", label)):
        if platform not in platforms or (components and comp not in components):
            continue
        if cuda and variant and variant not in {f"cuda{n}" for n in cuda}:
            continue
        out[rec["relative_path"]] = rec
    return out


def files_under(root):
    out = set()
    for d, _dirs, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def mirror(dest, *extra, base=None, check=0, versions=",".join(LABELS), platforms=PLATFORMS):
    args = ["mirror", "cudnn", versions, "--dest", dest, "--base-url", base or support.nginx_base_url()]
    for p in platforms:
        args += ["--platform", p]
    return support.run_tool("redist", *args, *extra, check=check)


def artifact_requests(log):
    return [r for r in log if r["uri"].endswith(ARCHIVE_SUFFIXES)]


class MirrorFromNginx(unittest.TestCase):
    """One flow, in order: first mirror, no-op re-run, repair, then serve it."""

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.dest = os.path.join(self.scratch, "mirror")
        self.redist = os.path.join(self.dest, "cudnn", "redist")
        self.second_nginx = None

    def tearDown(self):
        if self.second_nginx:
            nginx_fixture.stop(self.second_nginx)

    def check_mirror_contents(self):
        wanted = {}
        for label in LABELS:
            wanted.update(expected_artifacts(label))
        manifests = {f"redistrib_{l}.json" for l in LABELS}
        # Exactly the selected artifacts, the manifests and the index: no
        # other platform, no leftover .part file.
        self.assertEqual(files_under(self.redist), set(wanted) | manifests | {"index.html"})
        for rel, rec in wanted.items():
            path = os.path.join(self.redist, rel)
            self.assertEqual(os.path.getsize(path), int(rec["size"]), rel)
            self.assertEqual(support.sha256_file(path), rec["sha256"], rel)
        for label in LABELS:
            with open(os.path.join(self.redist, f"redistrib_{label}.json"), "rb") as f:
                mine = f.read()
            with open(support.manifest_path("cudnn", label), "rb") as f:
                self.assertEqual(mine, f.read(), f"manifest {label} differs from upstream")
        with open(os.path.join(self.redist, "index.html")) as f:
            index = f.read()
        for label in LABELS:
            self.assertIn(f"href='redistrib_{label}.json'", index)
        return wanted

    def start_second_nginx(self, root):
        """A plain static file server for the mirror, as a user would deploy
        it (index.html as the directory index). Returns its base URL."""
        ng = os.path.join(self.scratch, "nginx2")
        os.makedirs(os.path.join(ng, "temp"), exist_ok=True)
        p = {"nginx": ng, "conf": os.path.join(ng, "nginx.conf"), "pid": os.path.join(ng, "nginx.pid"),
             "error_log": os.path.join(ng, "error.log"), "access_log": os.path.join(ng, "access.log")}
        user = "user root;\n" if os.geteuid() == 0 else ""

        def conf_for_port(port: int) -> str:
            with open(p["conf"], "w") as f:
                f.write(f"""{user}worker_processes 1;
daemon on;
pid {p['pid']};
error_log {p['error_log']} info;
events {{ worker_connections 64; }}
http {{
    types {{ text/html html; application/json json; application/x-xz xz; application/zip zip; }}
    default_type application/octet-stream;
    {nginx_fixture.log_directives(p['access_log'])}
    client_body_temp_path {ng}/temp/client_body;
    proxy_temp_path {ng}/temp/proxy;
    fastcgi_temp_path {ng}/temp/fastcgi;
    uwsgi_temp_path {ng}/temp/uwsgi;
    scgi_temp_path {ng}/temp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
    }}
}}
""")
            return p["conf"]

        try:
            port = nginx_fixture.start_on_free_port(ng, p["error_log"], conf_for_port)
        except RuntimeError as e:
            self.fail(f"second nginx: {e}")
        self.second_nginx = p
        base = f"http://127.0.0.1:{port}"
        self.assertTrue(nginx_fixture.wait_ready(base + "/cudnn/redist/", 10), nginx_fixture.tail(p["error_log"]))
        return base, p["access_log"]

    def test_mirror_rerun_repair_and_serve(self):
        # 1. First run: everything downloaded, verified, in the upstream layout.
        mark = support.access_log_mark()
        res = mirror(self.dest, "--json")
        report = json.loads(res.stdout)
        wanted = self.check_mirror_contents()
        self.assertEqual([r["label"] for r in report["releases"]], list(LABELS))
        statuses = [f["status"] for r in report["releases"] for f in r["files"]]
        self.assertEqual(len(statuses), len(wanted))
        self.assertEqual(set(statuses), {"downloaded"})
        self.assertEqual(report["bytes_downloaded"], sum(int(r["size"]) for r in wanted.values()))
        fetched = artifact_requests(support.access_log_since(mark))
        self.assertEqual(sorted(r["uri"].rsplit("/redist/", 1)[1] for r in fetched), sorted(wanted))
        versions = support.run_tool("redist", "versions", "cudnn", "--base-url", self.dest, "--json", check=0)
        self.assertEqual(json.loads(versions.stdout), list(LABELS))

        # 2. Re-run: nothing fetched, everything reported up to date.
        mark = support.access_log_mark()
        res = mirror(self.dest)
        self.assertEqual(artifact_requests(support.access_log_since(mark)), [])
        self.assertEqual(res.stdout.count("  up to date  "), len(wanted) + len(LABELS), res.stdout)
        self.check_mirror_contents()

        # 3. A corrupted file (same size, one byte flipped) is replaced, and
        # only that one is fetched.
        victim = sorted(wanted)[0]
        path = os.path.join(self.redist, victim)
        with open(path, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        mark = support.access_log_mark()
        report = json.loads(mirror(self.dest, "--json").stdout)
        status = {f["relative_path"]: f["status"] for r in report["releases"] for f in r["files"]}
        self.assertEqual(status.pop(victim), "replaced")
        self.assertEqual(set(status.values()), {"up_to_date"})
        self.assertEqual([r["uri"].rsplit("/redist/", 1)[1] for r in artifact_requests(support.access_log_since(mark))],
                         [victim])
        self.check_mirror_contents()

        # 4. Serve the mirror with a second nginx; install from it alone.
        base2, log2 = self.start_second_nginx(self.dest)
        versions = support.run_tool("redist", "versions", "cudnn", "--base-url", base2, "--json", check=0)
        self.assertEqual(json.loads(versions.stdout), list(LABELS))
        prefix = os.path.join(self.scratch, "prefix")
        mark = support.access_log_mark()
        env = {"XDG_CACHE_HOME": os.path.join(self.scratch, "cache"), "REDIST_MIRRORS": None,
               "REDIST_BASE_URL": None}
        support.run_tool("cudnn-fetch", "9.27.0", "--base-url", base2, "--prefix", prefix,
                         "--platform", "linux-x86_64", "--cuda", "12", env=env, check=0)
        self.assertEqual(support.access_log_since(mark), [], "the upstream was used")
        with open(log2) as f:
            served = [json.loads(l) for l in f if l.strip()]
        self.assertTrue(artifact_requests(served), "the second nginx served no artifact")
        # The same tree as an install straight from upstream.
        reference = os.path.join(self.scratch, "reference")
        support.run_tool("cudnn-fetch", "9.27.0", "--base-url", support.file_base_url(), "--prefix", reference,
                         "--platform", "linux-x86_64", "--cuda", "12", env=env, check=0)
        a = support.tree_snapshot(prefix, ignore=r"^\.redist")
        b = support.tree_snapshot(reference, ignore=r"^\.redist")
        self.assertTrue(a)
        self.assertEqual(a, b, support.diff_snapshots(a, b))


class MirrorSelection(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.dest = os.path.join(self.scratch, "mirror")
        self.redist = os.path.join(self.dest, "cudnn", "redist")

    def test_component_and_cuda_filters(self):
        mirror(self.dest, "--component", "cudnn", "--cuda", "13", "-q", base=support.file_base_url(),
               versions="9.27.0", platforms=("linux-x86_64",))
        wanted = expected_artifacts("9.27.0", ("linux-x86_64",), {"cudnn"}, [13])
        self.assertEqual(len(wanted), 1)
        self.assertEqual(files_under(self.redist), set(wanted) | {"redistrib_9.27.0.json", "index.html"})

    def test_not_offered_is_not_found(self):
        base = support.file_base_url()
        for extra, versions, needle in (
                (["--component", "nope"], "9.27.0", "cudnn_jit"),        # lists what exists
                (["--cuda", "11"], "9.27.0", "cuda12"),                  # 9.27 has no cuda11
                ([], "7.0.0", "")):
            with self.subTest(extra=extra, versions=versions):
                res = mirror(self.dest, *extra, base=base, versions=versions, platforms=("linux-x86_64",), check=3)
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
                self.assertIn(needle, res.stderr)
        # A platform the release has nothing for, alone, is nothing to mirror; the error lists what exists.
        res = mirror(self.dest, base=base, versions="9.27.0", platforms=("linux-ppc64le",), check=3)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        self.assertIn("linux-sbsa", res.stderr)

    def test_a_missing_platform_beside_others_is_a_warning(self):
        res = mirror(self.dest, "-q", base=support.file_base_url(), versions="9.27.0",
                     platforms=("linux-x86_64", "linux-ppc64le"))
        self.assertIn("warning: cudnn 9.27.0 has nothing for linux-ppc64le", res.stderr)
        wanted = expected_artifacts("9.27.0", ("linux-x86_64",), None, None)
        self.assertTrue(wanted)
        self.assertEqual(files_under(self.redist), set(wanted) | {"redistrib_9.27.0.json", "index.html"})

    def test_usage_errors(self):
        support.run_tool("redist", "mirror", "cudnn", "9.27.0", check=2)           # no --dest
        support.run_tool("redist", "mirror", "../x", "9.27.0", "--dest", self.dest, "--platform", "linux-x86_64",
                         "--base-url", support.file_base_url(), check=2)           # product is a file name
        support.run_tool("redist", "mirror", "a" * 129, "9.27.0", "--dest", self.dest, "--platform", "linux-x86_64",
                         "--base-url", support.file_base_url(), check=2)           # longer than a name may be


class MirrorCorruptUpstream(unittest.TestCase):
    def test_bad_artifact_exits_5_and_leaves_nothing(self):
        scratch = support.make_scratch_dir(self.id())
        upstream = support.copy_mirror(os.path.join(scratch, "upstream"), ["cudnn"])
        rec = support.find_artifact(support.load_manifest("cudnn", "9.27.0"), "cudnn", "linux-x86_64", "cuda12")
        bad = support.artifact_path("cudnn", rec["relative_path"], upstream)
        with open(bad, "rb") as f:
            original = f.read()
        cases = {
            "flipped byte": original[:500] + bytes([original[500] ^ 1]) + original[501:],
            "one byte more": original + b"\0",
            "truncated": original[:-1],
        }
        for what, data in cases.items():
            with self.subTest(what):
                with open(bad, "wb") as f:
                    f.write(data)
                dest = os.path.join(scratch, "mirror-" + what.replace(" ", "-"))
                res = mirror(dest, base=support.file_base_url(upstream), versions="9.27.0",
                             platforms=("linux-x86_64",), check=5)
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
                self.assertIn("mismatch", res.stderr)
                redist = os.path.join(dest, "cudnn", "redist")
                self.assertFalse(os.path.exists(os.path.join(redist, rec["relative_path"])))
                # No partial file, and the release is not advertised.
                self.assertEqual([f for f in files_under(redist) if ".part." in f], [])
                self.assertFalse(os.path.exists(os.path.join(redist, "redistrib_9.27.0.json")))


class MirrorHostilePaths(unittest.TestCase):
    """A release whose artifact path names a file the mirror already holds for
    something else: another release's manifest, the index, another release's
    archive, or a directory where a manifest goes. The mirror refuses it with
    one line naming the manifest and the JSON path, and that file stays as it
    was."""

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.dest = os.path.join(self.scratch, "mirror")
        self.redist = os.path.join(self.dest, "cudnn", "redist")
        mirror(self.dest, "-q", base=support.file_base_url(), versions="9.8.0", platforms=("linux-x86_64",))
        self.before = support.tree_snapshot(self.redist)
        self.assertIn("redistrib_9.8.0.json", self.before)

    def mirror_hostile(self, relative_path, data):
        """Mirrors release 9.99.0 from a second upstream whose one artifact is
        `data` at `relative_path`, with a correct size and SHA-256."""
        upstream = os.path.join(self.scratch, "hostile")
        support.rm_tree(upstream)
        redist = os.path.join(upstream, "cudnn", "redist")
        os.makedirs(redist)
        path = os.path.join(redist, relative_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        support.save_json(os.path.join(redist, "redistrib_9.99.0.json"), {
            "release_date": "2030-01-01", "release_label": "9.99.0", "release_product": "cudnn",
            "cudnn": {"name": "cuDNN", "license": "cudnn", "version": "9.99.0.1",
                      "linux-x86_64": support.artifact_entry(relative_path, data)}})
        return mirror(self.dest, base="file://" + upstream, versions="9.99.0", platforms=("linux-x86_64",),
                      check=None)

    def assert_refused(self, res, needle):
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        self.assertIn("redistrib_9.99.0.json", res.stderr)
        self.assertIn("cudnn.linux-x86_64", res.stderr)
        self.assertIn(needle, res.stderr)
        after = support.tree_snapshot(self.redist)
        self.assertEqual(after, self.before, support.diff_snapshots(self.before, after))

    def test_an_artifact_named_like_a_manifest_or_the_index_is_refused(self):
        # A directory named like a manifest would block that release's manifest later.
        for rel in ("redistrib_9.8.0.json", "index.html", "redistrib_9.100.0.json/x.tar.xz",
                    "index.html/x.tar.xz"):
            with self.subTest(rel):
                res = self.mirror_hostile(rel, b'{"cudnn": "hostile"}\n')
                self.assert_refused(res, rel)

    def test_another_releases_archive_is_not_overwritten(self):
        rec = support.find_artifact(support.load_manifest("cudnn", "9.8.0"), "cudnn", "linux-x86_64", "cuda12")
        res = self.mirror_hostile(rec["relative_path"], b"not the archive of 9.8.0")
        self.assert_refused(res, "redistrib_9.8.0.json")
        # The same bytes under the same path are no conflict: shared, not replaced.
        with open(os.path.join(self.redist, rec["relative_path"]), "rb") as f:
            res = self.mirror_hostile(rec["relative_path"], f.read())
        self.assertEqual(res.returncode, 0, support.describe(res))


class MirrorFromCache(unittest.TestCase):
    """`redist mirror --from-cache` seeds a mirror from what a fetch left in the cache."""

    def test_seed_from_cache_without_the_upstream(self):
        scratch = support.make_scratch_dir(self.id())
        cache = os.path.join(scratch, "cache")
        base = support.nginx_base_url()
        support.run_tool("cudnn-fetch", "9.27.0", "--base-url", base, "--prefix", os.path.join(scratch, "p"),
                         "--cache-dir", cache, "--cuda", "12", "--platform", "linux-x86_64", "--quiet", check=0)
        dest = os.path.join(scratch, "mirror")
        mark = support.access_log_mark()
        support.run_tool("redist", "mirror", "cudnn", "9.27.0", "--dest", dest, "--from-cache", "--cache-dir", cache,
                         "--base-url", base, "--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn",
                         check=0)
        self.assertEqual(support.access_log_since(mark), [], "the upstream was used")
        manifest = support.load_manifest("cudnn", "9.27.0")
        rec = support.find_artifact(manifest, "cudnn", "linux-x86_64", "cuda12")
        copied = os.path.join(dest, "cudnn", "redist", rec["relative_path"])
        self.assertEqual(support.sha256_file(copied), rec["sha256"])
        with open(support.manifest_path("cudnn", "9.27.0"), "rb") as a, \
                open(os.path.join(dest, "cudnn", "redist", "redistrib_9.27.0.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # Something the cache does not hold: a clear not-found naming it, and nothing under its final name.
        res = support.run_tool("redist", "mirror", "cudnn", "9.27.0", "--dest", dest, "--from-cache",
                               "--cache-dir", cache, "--base-url", base, "--platform", "linux-sbsa",
                               "--component", "cudnn")
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertIn("not in the cache", res.stderr)
        sbsa = support.find_artifact(manifest, "cudnn", "linux-sbsa", "cuda12")
        self.assertFalse(os.path.exists(os.path.join(dest, "cudnn", "redist", sbsa["relative_path"])))

    def test_a_cache_filled_through_a_mirror_seeds_without_the_base(self):
        # The fetch went through a mirror ($REDIST_MIRRORS): the cache keeps
        # the manifest under the mirror's URL. --from-cache looks it up there
        # (offline: no request at all), never waiting on the base, which is
        # unreachable here as NVIDIA's is on an air-gapped machine.
        scratch = support.make_scratch_dir(self.id())
        cache = os.path.join(scratch, "cache")
        unreachable = "http://127.0.0.1:9/unreachable"
        via = {"REDIST_MIRRORS": support.nginx_base_url(), "REDIST_BASE_URL": unreachable}
        support.run_tool("cudnn-fetch", "9.27.0", "--prefix", os.path.join(scratch, "p"), "--cache-dir", cache,
                         "--cuda", "12", "--platform", "linux-x86_64", "--component", "cudnn", "--no-check",
                         "--quiet", env=via, check=0)
        dest = os.path.join(scratch, "mirror")
        args = ["mirror", "cudnn", "9.27.0", "--from-cache", "--cache-dir", cache, "--platform", "linux-x86_64",
                "--cuda", "12", "--component", "cudnn", "--retries", "1"]
        mark = support.access_log_mark()
        res = support.run_tool("redist", *args, "--dest", dest, env=via)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(support.access_log_since(mark), [], "--from-cache made a request")
        with open(support.manifest_path("cudnn", "9.27.0"), "rb") as a, \
                open(os.path.join(dest, "cudnn", "redist", "redistrib_9.27.0.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        rec = support.find_artifact(support.load_manifest("cudnn", "9.27.0"), "cudnn", "linux-x86_64", "cuda12")
        self.assertEqual(support.sha256_file(os.path.join(dest, "cudnn", "redist", rec["relative_path"])),
                         rec["sha256"])
        # Without the mirror that filled it, the cache still knows the release
        # (by what the manifest is, whichever source served it): no request.
        mark = support.access_log_mark()
        res = support.run_tool("redist", *args, "--dest", os.path.join(scratch, "other"),
                               env={"REDIST_BASE_URL": unreachable})
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertEqual(support.access_log_since(mark), [], "--from-cache made a request")
        with open(support.manifest_path("cudnn", "9.27.0"), "rb") as a, \
                open(os.path.join(scratch, "other", "cudnn", "redist", "redistrib_9.27.0.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # A release the cache never saw: one line naming where it looked and what to do (exit 3).
        other = [a if a != "9.27.0" else "9.10.1" for a in args]
        res = support.run_tool("redist", *other, "--dest", os.path.join(scratch, "third"),
                               env={"REDIST_BASE_URL": unreachable})
        self.assertEqual(res.returncode, 3, support.describe(res))
        self.assertEqual(len(res.stderr.splitlines()), 1, res.stderr)
        self.assertIn("no manifest of cudnn in the cache from http://127.0.0.1:9/unreachable", res.stderr)
        self.assertIn("--mirror", res.stderr)


if __name__ == "__main__":
    unittest.main()
