"""Checks the test infrastructure itself: the generated demo mirror and the
nginx fixture that serves it. If these fail, every other e2e test is suspect."""

import hashlib
import http.client
import io
import os
import socket
import subprocess
import sys
import tarfile
import unittest
import urllib.parse
import zipfile

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import nginx_fixture  # noqa: E402  (start_on_free_port, free_port, terminate)


def xz_block_count(path: str) -> int:
    """Number of blocks in an .xz file, from `xz -l --robot` (the 'file' line's
    third field)."""
    res = subprocess.run(["xz", "-l", "--robot", path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, check=True)
    for line in res.stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "file":
            return int(fields[2])
    raise AssertionError(f"no 'file' line in xz -l output for {path}:\n{res.stdout}")


def tar_members(path: str) -> dict:
    """Archive member name -> (TarInfo, bytes or None)."""
    out = {}
    with tarfile.open(path, "r:xz") as tar:
        for m in tar.getmembers():
            data = tar.extractfile(m).read() if m.isfile() else None
            out[m.name] = (m, data)
    return out


def strip_top(members: dict) -> dict:
    out = {}
    for name, v in members.items():
        _, _, rest = name.partition("/")
        if rest:
            out[rest] = v
    return out


class MirrorLayout(unittest.TestCase):
    """The mirror on disk: manifests, artifacts, archive contents."""

    @classmethod
    def setUpClass(cls):
        cls.mirror = support.mirror_dir()
        cls.info = support.mirror_info()

    def manifests(self):
        for product, p in self.info["products"].items():
            for label in p["labels"]:
                yield product, label, support.load_manifest(product, label)

    def test_expected_releases(self):
        self.assertEqual(self.info["products"]["cudnn"]["labels"], ["9.8.0", "9.10.1", "9.27.0"])
        self.assertEqual(self.info["products"]["cuda"]["labels"], ["12.9.1", "13.0.0"])
        for product, p in self.info["products"].items():
            listed = sorted(f for f in os.listdir(os.path.join(self.mirror, product, "redist"))
                            if f.startswith("redistrib_"))
            self.assertEqual(listed, sorted(f"redistrib_{l}.json" for l in p["labels"]))

    def test_manifest_shape(self):
        for product, label, m in self.manifests():
            with self.subTest(product=product, label=label):
                self.assertEqual(m["release_label"], label)
                self.assertEqual(m["release_product"], product)
                self.assertRegex(m["release_date"], r"^\d{4}-\d\d-\d\d$")
                comps = {k: v for k, v in m.items() if isinstance(v, dict)}
                self.assertTrue(comps)
                for name, c in comps.items():
                    for key in ("name", "license", "license_path", "version"):
                        self.assertIsInstance(c[key], str, f"{name}.{key}")
                    self.assertTrue(os.path.isfile(os.path.join(
                        self.mirror, product, "redist", c["license_path"])), c["license_path"])
        m = support.load_manifest("cudnn", "9.27.0")
        self.assertEqual(set(k for k, v in m.items() if isinstance(v, dict)),
                         {"cudnn", "cudnn_jit", "cudnn_samples"})
        self.assertEqual(m["cudnn"]["cuda_variant"], ["12", "13"])
        self.assertEqual(set(m["cudnn"]["linux-x86_64"]), {"cuda12", "cuda13"})
        self.assertTrue(m["cudnn"]["windows-x86_64"]["cuda12"]["relative_path"].endswith(".zip"))
        self.assertIn("relative_path", m["cudnn_samples"]["source"])
        # cuda11 is named in cuda_variant but only linux-x86_64 has it.
        old = support.load_manifest("cudnn", "9.8.0")
        self.assertIn("11", old["cudnn"]["cuda_variant"])
        self.assertIn("cuda11", old["cudnn"]["linux-x86_64"])
        self.assertNotIn("cuda11", old["cudnn"]["linux-sbsa"])
        self.assertNotIn("cudnn_jit", old)
        cuda = support.load_manifest("cuda", "12.9.1")
        for comp in ("cuda_nvcc", "cuda_cudart", "cuda_nvrtc", "libcublas", "cuda_cccl",
                     "cuda_cupti", "libnvjitlink", "cuda_sanitizer_api"):
            self.assertIn("relative_path", cuda[comp]["linux-x86_64"], comp)
            self.assertIn("relative_path", cuda[comp]["linux-sbsa"], comp)

    def test_every_artifact_matches_its_manifest(self):
        count = 0
        for product, label, m in self.manifests():
            for comp, platform, variant, rec in support.iter_artifacts(m):
                with self.subTest(product=product, label=label, comp=comp, platform=platform,
                                  variant=variant):
                    path = support.artifact_path(product, rec["relative_path"])
                    self.assertTrue(os.path.isfile(path), path)
                    with open(path, "rb") as f:
                        data = f.read()
                    self.assertIsInstance(rec["size"], str)  # as upstream
                    self.assertEqual(len(data), int(rec["size"]))
                    self.assertEqual(hashlib.sha256(data).hexdigest(), rec["sha256"])
                    self.assertEqual(hashlib.md5(data).hexdigest(), rec["md5"])
                    count += 1
        self.assertGreater(count, 50)

    def test_block_counts(self):
        multi = self.info["multi_block"]
        self.assertIn("cudnn/redist/cudnn/linux-x86_64/"
                      "cudnn-linux-x86_64-9.27.0.42_cuda12-archive.tar.xz", multi)
        for rel in multi:
            self.assertGreater(xz_block_count(os.path.join(self.mirror, rel)), 1, rel)
        single = support.artifact_path(
            "cudnn", support.find_artifact(support.load_manifest("cudnn", "9.27.0"),
                                           "cudnn", "linux-x86_64", "cuda13")["relative_path"])
        self.assertEqual(xz_block_count(single), 1)

    def test_cudnn_archive_layout(self):
        m = support.load_manifest("cudnn", "9.27.0")
        rel = support.find_artifact(m, "cudnn", "linux-x86_64", "cuda12")["relative_path"]
        members = tar_members(support.artifact_path("cudnn", rel))
        top = os.path.basename(rel)[: -len(".tar.xz")]
        self.assertEqual(top, "cudnn-linux-x86_64-9.27.0.42_cuda12-archive")
        for name, (info, _) in members.items():
            self.assertTrue(name == top or name.startswith(top + "/"), name)
            self.assertNotIn("..", name.split("/"))
            self.assertEqual((info.uid, info.gid), (0, 0), name)
        files = strip_top(members)
        lic, _ = files["LICENSE"]
        self.assertTrue(lic.isfile())
        self.assertEqual(lic.mode, 0o444)
        info, data = files["bin/cudnn-info"]
        self.assertEqual(info.mode, 0o755)
        self.assertTrue(data.startswith(b"#!/bin/sh"))
        self.assertTrue(files["include/cudnn.h"][0].isfile())
        self.assertIn(b"#define CUDNN_MINOR 27", files["include/cudnn_version.h"][1])
        so, _ = files["lib/libcudnn.so"]
        so9, _ = files["lib/libcudnn.so.9"]
        real, data = files["lib/libcudnn.so.9.27.0"]
        self.assertTrue(so.issym() and so.linkname == "libcudnn.so.9")
        self.assertTrue(so9.issym() and so9.linkname == "libcudnn.so.9.27.0")
        self.assertTrue(real.isfile())
        self.assertGreater(len(data), 4096)
        self.assertTrue(files["lib"][0].isdir())
        # Big enough to span several 16 KiB xz blocks.
        self.assertGreater(sum(len(d) for _, d in files.values() if d), 128 * 1024)

    def test_content_differs_between_versions_and_variants(self):
        def lib(label, variant):
            m = support.load_manifest("cudnn", label)
            rel = support.find_artifact(m, "cudnn", "linux-x86_64", variant)["relative_path"]
            files = strip_top(tar_members(support.artifact_path("cudnn", rel)))
            v3 = label
            return files[f"lib/libcudnn.so.{v3}"][1], files["include/cudnn.h"][1]
        a = lib("9.10.1", "cuda12")
        b = lib("9.27.0", "cuda12")
        c = lib("9.27.0", "cuda13")
        self.assertNotEqual(a[0], b[0])
        self.assertNotEqual(b[0], c[0])
        self.assertNotEqual(a[1], b[1])
        self.assertNotEqual(b[1], c[1])

    def test_files_vanish_between_releases(self):
        vanishing = self.info["vanishing"]["cudnn"]
        labels = self.info["products"]["cudnn"]["labels"]

        def names(label):
            m = support.load_manifest("cudnn", label)
            rel = support.find_artifact(m, "cudnn", "linux-x86_64", "cuda12")["relative_path"]
            return strip_top(tar_members(support.artifact_path("cudnn", rel)))

        self.assertTrue(vanishing)
        for label, paths in vanishing.items():
            nxt = labels[labels.index(label) + 1]
            here, there = names(label), names(nxt)
            for p in paths:
                self.assertIn(p, here, f"{p} in {label}")
                self.assertNotIn(p, there, f"{p} gone in {nxt}")

    def test_jit_overlaps_cudnn_identically(self):
        m = support.load_manifest("cudnn", "9.27.0")
        overlap = self.info["identical_overlap"]["cudnn"]["paths"]
        for platform in ("linux-x86_64", "linux-sbsa"):
            for variant in ("cuda12", "cuda13"):
                main = strip_top(tar_members(support.artifact_path("cudnn", support.find_artifact(
                    m, "cudnn", platform, variant)["relative_path"])))
                jit = strip_top(tar_members(support.artifact_path("cudnn", support.find_artifact(
                    m, "cudnn_jit", platform, variant)["relative_path"])))
                common = {p for p in set(main) & set(jit) if not jit[p][0].isdir()}
                self.assertEqual(common, set(overlap), (platform, variant))
                for p in common:
                    self.assertEqual(main[p][1], jit[p][1], p)
                    self.assertEqual(main[p][0].mode, jit[p][0].mode, p)

    def test_windows_zip(self):
        m = support.load_manifest("cudnn", "9.27.0")
        rel = support.find_artifact(m, "cudnn", "windows-x86_64", "cuda13")["relative_path"]
        with zipfile.ZipFile(support.artifact_path("cudnn", rel)) as zf:
            self.assertIsNone(zf.testzip())
            names = zf.namelist()
        top = "cudnn-windows-x86_64-9.27.0.42_cuda13-archive/"
        self.assertTrue(all(n.startswith(top) for n in names), names)
        self.assertIn(top + "bin/cudnn64_9.dll", names)
        self.assertIn(top + "include/cudnn.h", names)

    def test_cuda_component_layout(self):
        m = support.load_manifest("cuda", "12.9.1")
        rel = m["cuda_cudart"]["linux-x86_64"]["relative_path"]
        files = strip_top(tar_members(support.artifact_path("cuda", rel)))
        self.assertEqual(files["lib/libcudart.so"][0].linkname, "libcudart.so.12")
        self.assertEqual(files["lib/libcudart.so.12"][0].linkname, "libcudart.so.12.9.79")
        self.assertTrue(files["lib/libcudart.so.12.9.79"][0].isfile())
        rel = m["cuda_nvcc"]["linux-x86_64"]["relative_path"]
        files = strip_top(tar_members(support.artifact_path("cuda", rel)))
        self.assertEqual(files["bin/nvcc"][0].mode, 0o755)
        self.assertIn(b"V12.9.86", files["bin/nvcc"][1])

    def test_generation_is_deterministic(self):
        scratch = support.make_scratch_dir(self.id())
        gen = os.path.join(support.source_dir(), "scripts", "make_demo_mirror.py")
        subprocess.run([sys.executable, gen, "--dest", scratch, "--products", "cudnn",
                        "--labels", "9.10.1", "--quiet"], check=True)
        m = support.load_manifest("cudnn", "9.10.1", mirror=scratch)
        self.assertEqual(m, support.load_manifest("cudnn", "9.10.1"))
        for _, _, _, rec in support.iter_artifacts(m):
            with open(support.artifact_path("cudnn", rec["relative_path"], scratch), "rb") as f:
                fresh = f.read()
            with open(support.artifact_path("cudnn", rec["relative_path"]), "rb") as f:
                self.assertEqual(fresh, f.read(), rec["relative_path"])

    def test_tree_snapshot_and_copy(self):
        scratch = support.make_scratch_dir(self.id())
        copy = support.copy_mirror(os.path.join(scratch, "m"), products=["cudnn"])
        a = support.tree_snapshot(os.path.join(support.mirror_dir(), "cudnn"))
        b = support.tree_snapshot(os.path.join(copy, "cudnn"))
        self.assertEqual(a, b, support.diff_snapshots(a, b))
        # A snapshot sees a one-byte change and a mode change.
        target = os.path.join(copy, "cudnn", "redist", "redistrib_9.27.0.json")
        with open(target, "ab") as f:
            f.write(b" ")
        os.chmod(os.path.join(copy, "cudnn", "redist", "index.html"), 0o600)
        c = support.tree_snapshot(os.path.join(copy, "cudnn"))
        diff = support.diff_snapshots(a, c)
        self.assertIn("redist/redistrib_9.27.0.json", diff)
        self.assertIn("redist/index.html", diff)
        self.assertEqual(len(diff.splitlines()), 2, diff)


class NginxFixture(unittest.TestCase):
    """The mirror as nginx serves it on loopback."""

    def test_base_url_is_loopback(self):
        self.assertRegex(support.nginx_base_url(), r"^http://127\.0\.0\.1:\d+(/t/[A-Za-z0-9_]+)?$")
        self.assertTrue(support.nginx_base_url().endswith(support.nginx_namespace()))
        self.assertEqual(support.file_base_url(), "file://" + support.mirror_dir())

    def test_autoindex_lists_manifests(self):
        status, headers, body = support.http_get(support.nginx_base_url() + "/cudnn/redist/")
        self.assertEqual(status, 200)
        html = body.decode()
        for label in ("9.8.0", "9.10.1", "9.27.0"):
            self.assertIn(f'<a href="redistrib_{label}.json">', html)
        self.assertIn(f"Index of {support.nginx_namespace()}/cudnn/redist/", html)  # autoindex, not index.html

    def test_nvidia_style_listing(self):
        status, _, body = support.http_get(support.nginx_base_url("nvidia") + "/cudnn/redist/")
        self.assertEqual(status, 200)
        html = body.decode()
        self.assertIn("<a href='redistrib_9.27.0.json'>", html)
        self.assertLess(html.index("redistrib_9.10.1.json"), html.index("redistrib_9.8.0.json"))

    def test_manifests_over_http_equal_disk(self):
        for style in ("autoindex", "nvidia"):
            for product, p in support.mirror_info()["products"].items():
                for label in p["labels"]:
                    url = f"{support.nginx_base_url(style)}/{product}/redist/redistrib_{label}.json"
                    status, headers, body = support.http_get(url)
                    self.assertEqual(status, 200, url)
                    self.assertEqual(headers.get("Content-Type"), "application/json")
                    with open(support.manifest_path(product, label), "rb") as f:
                        self.assertEqual(body, f.read(), url)

    def test_artifact_range_request_is_logged(self):
        m = support.load_manifest("cudnn", "9.27.0")
        rec = support.find_artifact(m, "cudnn", "linux-x86_64", "cuda12")
        url = f"{support.nginx_base_url()}/cudnn/redist/{rec['relative_path']}"
        mark = support.access_log_mark()
        status, _, body = support.http_get(url, headers={"Range": "bytes=100-1099"})
        self.assertEqual(status, 206)
        with open(support.artifact_path("cudnn", rec["relative_path"]), "rb") as f:
            self.assertEqual(body, f.read()[100:1100])
        status, _, body = support.http_get(url)
        self.assertEqual(status, 200)
        self.assertEqual(hashlib.sha256(body).hexdigest(), rec["sha256"])
        log = support.access_log_since(mark)
        self.assertEqual([(e["status"], e["range"]) for e in log],
                         [("206", "bytes=100-1099"), ("200", "")])
        self.assertEqual(int(log[1]["body_bytes_sent"]), int(rec["size"]))

    def test_missing_file_is_404(self):
        status, _, _ = support.http_get(support.nginx_base_url() + "/cudnn/redist/redistrib_0.0.0.json")
        self.assertEqual(status, 404)


class StartOnFreePort(unittest.TestCase):
    """nginx_fixture.start_on_free_port, which every nginx of the tests starts through."""

    def setUp(self):
        if not os.access(nginx_fixture.NGINX, os.X_OK):
            self.skipTest(f"{nginx_fixture.NGINX} is missing")
        self.dir = support.make_scratch_dir(self.id())
        self.error_log = os.path.join(self.dir, "error.log")
        self.confs = []  # the ports a configuration was written for

    def conf_for_port(self, port: int, broken: bool = False) -> str:
        self.confs.append(port)
        conf = os.path.join(self.dir, "nginx.conf")
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "".join(f"    {t}_temp_path {self.dir}/{t};\n"
                        for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(conf, "w") as f:
            f.write(f"""{user}worker_processes 1;
daemon on;
pid {self.dir}/nginx.pid;
error_log {self.error_log} info;
events {{ worker_connections 16; }}
http {{
    access_log off;
{temps}    server {{ listen 127.0.0.1:{port}; {"no_such_directive on;" if broken else ""} return 204; }}
}}
""")
        return conf

    def test_a_taken_port_is_replaced_by_a_free_one(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = taken.getsockname()[1]
            real_free_port = nginx_fixture.free_port
            picks = [busy]  # the first pick is taken by the time nginx binds it
            nginx_fixture.free_port = lambda: picks.pop() if picks else real_free_port()
            try:
                port = nginx_fixture.start_on_free_port(self.dir, self.error_log, self.conf_for_port)
            finally:
                nginx_fixture.free_port = real_free_port
        pid = nginx_fixture.wait_pid_file(os.path.join(self.dir, "nginx.pid"))
        try:
            self.assertEqual(self.confs[0], busy)
            self.assertEqual(len(self.confs), 2)
            self.assertEqual(port, self.confs[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/")
            self.assertEqual(conn.getresponse().status, 204)
            conn.close()
        finally:
            nginx_fixture.terminate(pid)

    def test_any_other_failure_is_not_retried(self):
        with self.assertRaisesRegex(RuntimeError, r"(?s)nginx failed to start:.*no_such_directive"):
            nginx_fixture.start_on_free_port(self.dir, self.error_log,
                                             lambda port: self.conf_for_port(port, broken=True))
        self.assertEqual(len(self.confs), 1)


class Namespaces(unittest.TestCase):
    """Tests run at the same time against the one nginx: each in its own
    /t/<test>/ namespace, which access_log_since() keeps to."""

    def as_test(self, name: str) -> None:
        """Makes support.* act as test `name` until the case ends."""
        saved = os.environ.get("REDIST_E2E_TEST")

        def restore():
            if saved is None:
                os.environ.pop("REDIST_E2E_TEST", None)
            else:
                os.environ["REDIST_E2E_TEST"] = saved
        self.addCleanup(restore)
        os.environ["REDIST_E2E_TEST"] = name

    def test_a_test_sees_only_its_own_requests(self):
        # The second name starts with the first: a namespace is a whole path segment.
        me = support.test_id() or "manual"
        wants = {f"{me}_ns": "/cudnn/redist/redistrib_9.27.0.json",
                 f"{me}_ns2": "/nvidia/cudnn/redist/redistrib_9.10.1.json"}
        mark = support.access_log_mark()
        for name, uri in wants.items():
            self.as_test(name)
            self.assertEqual(support.nginx_namespace(), f"/t/{name}")
            path = uri.removeprefix("/nvidia")
            style = "nvidia" if uri.startswith("/nvidia/") else "autoindex"
            status, _, body = support.http_get(support.nginx_base_url(style) + path)
            self.assertEqual(status, 200)
            with open(os.path.join(support.mirror_dir(), path.lstrip("/")), "rb") as f:
                self.assertEqual(body, f.read())
        for name, uri in wants.items():
            self.as_test(name)
            log = support.access_log_since(mark)
            # "uri" as without namespaces (tests compare it), "request_uri" as sent.
            self.assertEqual([(e["uri"], e["request_uri"], e["status"]) for e in log],
                             [(uri, f"/t/{name}{uri}", "200")], name)

    def test_own_tree_is_served_in_its_namespace_only(self):
        me = support.test_id() or "manual"
        own = os.path.join(support.nginx_dir(), "own", f"{me}_own")
        support.rm_tree(own)
        os.makedirs(os.path.join(own, "d"))
        self.addCleanup(support.rm_tree, own)
        with open(os.path.join(own, "d", "f.txt"), "wb") as f:
            f.write(b"own tree\n")
        self.as_test(f"{me}_own")
        self.assertEqual(support.http_get(support.nginx_base_url() + "/_own/d/f.txt")[::2], (200, b"own tree\n"))
        self.as_test(f"{me}_other")
        self.assertEqual(support.http_get(support.nginx_base_url() + "/_own/d/f.txt")[0], 404)

    def test_directory_redirect_stays_in_namespace(self):
        # nginx answers a directory URL without its trailing slash with a 301
        # built from the URI it serves: the namespace must be part of it.
        for style in ("autoindex", "nvidia"):
            base = support.nginx_base_url(style)
            url = urllib.parse.urlsplit(base + "/cudnn/redist")
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
            try:
                conn.request("GET", url.path)
                res = conn.getresponse()
                res.read()
            finally:
                conn.close()
            self.assertEqual(res.status, 301, style)
            self.assertEqual(res.getheader("Location"), base + "/cudnn/redist/", style)

    def test_request_outside_every_namespace_is_refused(self):
        if support.test_id() is None:
            self.skipTest("only CTest starts nginx with --namespaced-only")
        root = support.nginx_base_url().removesuffix(support.nginx_namespace())
        for path in ("/mirror-info.json", "/cudnn/redist/", "/nvidia/cudnn/redist/", "/t/", "/t/x"):
            self.assertEqual(support.http_get(root + path)[0], 421, path)


class Support(unittest.TestCase):
    def test_run_tool_reports_missing_tool(self):
        with self.assertRaises(RuntimeError):
            support.run_tool("no-such-tool-here")

    def test_tool_env_scrubs_host_state(self):
        os.environ["CUDA_HOME"] = "/opt/cuda-should-not-leak"
        try:
            env = support.tool_env({"EXTRA": 1, "PATH": None})
        finally:
            del os.environ["CUDA_HOME"]
        self.assertNotIn("CUDA_HOME", env)
        self.assertNotIn("PATH", env)
        self.assertEqual(env["EXTRA"], "1")
        self.assertTrue(env["XDG_CACHE_HOME"].startswith(support.state_dir()))

    def test_directories_are_the_tests_own(self):
        own = support.test_state_dir() + os.sep
        if support.test_id():
            self.assertEqual(own, os.path.join(support.state_dir(), "e2e", support.test_id(), ""))
        env = support.tool_env()
        for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
            self.assertTrue(env[name].startswith(own), (name, env[name]))
        self.assertTrue(support.make_scratch_dir(self.id()).startswith(own))


if __name__ == "__main__":
    unittest.main()
