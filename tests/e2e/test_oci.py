"""OCI registries as a mirror target and a source, against a real registry
(Debian's docker-registry, CNCF distribution 2.8; tests/fixtures/registry_fixture.py):
push with `redist mirror --to oci+http://...`, install with `--mirror
oci+http://...` and an unreachable base URL, incremental pushes, ranged
reads, a tampered blob, token auth, and credentials that never leave the
registry's host or reach the output."""

import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.27.0"
PLATFORM = ["--platform", "linux-x86_64", "--cuda", "12"]
UNREACHABLE = "http://127.0.0.1:1/unreachable"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None, "REDIST_OCI_AUTH": None, "DOCKER_CONFIG": None}


def needs_registry(cls):
    return unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                               "docker-registry is not installed (scripts/install-deps.sh)")(cls)


def selected_artifacts():
    """What PLATFORM selects from cudnn LABEL."""
    return support.selected_artifacts("cudnn", LABEL, "linux-x86_64", "cuda12")


class OciBase(unittest.TestCase):
    users = None

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"), users=self.users)
        self.registry.__enter__()
        self.addCleanup(self.registry.__exit__)

    def push(self, *extra, env=None, check=0):
        return support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", self.registry.url,
                                "--base-url", support.file_base_url(), *PLATFORM, *extra,
                                env=dict(self.env, **(env or {})), check=check)

    def install(self, prefix, *extra, env=None, check=0):
        return support.run_tool("cudnn-fetch", LABEL, "--mirror", self.registry.url, "--base-url", UNREACHABLE,
                                "--prefix", prefix, *PLATFORM, "--no-cache", "--retries", "1", *extra,
                                env=dict(self.env, **(env or {})), check=check)

    def reference_tree(self):
        reference = os.path.join(self.scratch, "reference")
        support.run_tool("cudnn-fetch", LABEL, "--base-url", support.file_base_url(), "--prefix", reference,
                         *PLATFORM, "--no-cache", env=self.env, check=0)
        return support.tree_snapshot(reference, ignore=r"^\.redist")


@needs_registry
class PushAndPull(OciBase):
    def test_push_then_install_from_the_registry_alone(self):
        out = json.loads(self.push("--json").stdout)
        files = out["releases"][0]["files"]
        self.assertEqual({f["relative_path"] for f in files}, set(selected_artifacts()))
        # Every archive is a blob named by NVIDIA's SHA-256.
        for rec in selected_artifacts().values():
            self.assertTrue(os.path.exists(self.registry.blob_data_path(rec["sha256"])), rec["relative_path"])

        prefix = os.path.join(self.scratch, "prefix")
        self.install(prefix)
        a = support.tree_snapshot(prefix, ignore=r"^\.redist")
        self.assertTrue(a)
        self.assertEqual(a, self.reference_tree(), support.diff_snapshots(a, self.reference_tree()))

        # The registry lists the release as a version.
        versions = support.run_tool("redist", "versions", "cudnn", "--base-url", self.registry.url, "--json",
                                    env=self.env, check=0)
        self.assertEqual(json.loads(versions.stdout), [LABEL])

        # Incremental: nothing is sent again.
        again = json.loads(self.push("--json").stdout)
        self.assertEqual({f["status"] for f in again["releases"][0]["files"]}, {"up_to_date"})
        self.assertEqual(again["releases"][0]["manifest_status"], "up_to_date")

    def test_ranged_reads_of_a_blob(self):
        self.push("--quiet")
        tool = support.tool_path("segmented_get")
        if not os.access(tool, os.X_OK):
            self.skipTest("segmented_get is not built")
        rec = max(selected_artifacts().values(), key=lambda r: int(r["size"]))
        url = f"{self.registry.url}/cudnn/blobs/sha256:{rec['sha256']}"
        part = os.path.join(self.scratch, "blob.part")
        res = subprocess.run([tool, url, str(rec["size"]), "--part", part, "--connections", "4", "--min-total", "1",
                              "--min-segment", "16384", "--max-segment", "32768"],
                             env=support.tool_env(self.env), capture_output=True, text=True, timeout=120)
        self.assertEqual(res.returncode, 0, res.stderr)
        out = json.loads(res.stdout)
        self.assertTrue(out["segmented"])
        self.assertGreater(out["requests"], 1)
        self.assertEqual(support.sha256_file(part), rec["sha256"])

    def test_tampered_blob_is_refused(self):
        self.push("--quiet")
        rec = next(iter(selected_artifacts().values()))
        data = self.registry.blob_data_path(rec["sha256"])
        with open(data, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        prefix = os.path.join(self.scratch, "prefix")
        res = self.install(prefix, check=5)
        self.assertIn(rec["sha256"][:12], res.stderr + res.stdout)
        self.assertEqual(support.tree_snapshot(prefix, ignore=r"^\.redist") if os.path.exists(prefix) else {}, {})


@needs_registry
class TokenAuth(OciBase):
    users = {"ci": "s3cret-pass"}

    def test_token_flow_and_no_credentials_in_output(self):
        creds = {"REDIST_OCI_AUTH": f"oci+http://{self.registry.authority}=ci:s3cret-pass"}
        # Credentials for another registry are not sent to this one.
        other = self.push(env={"REDIST_OCI_AUTH": "oci+http://127.0.0.1:1=ci:s3cret-pass"}, check=6)
        self.assertIn("authentication", other.stderr)
        # Nor those given for the same host and port over https (a bare
        # REGISTRY is https): they never go over plain http.
        https_only = self.push(env={"REDIST_OCI_AUTH": f"{self.registry.authority}=ci:s3cret-pass"}, check=6)
        self.assertIn("authentication", https_only.stderr)
        self.assertFalse([auth for _path, auth in self.registry.tokens.seen if auth])
        # Without credentials the registry refuses the push (no token).
        refused = self.push(check=6)
        self.assertIn("authentication", refused.stderr)
        pushed = self.push(env=creds)
        prefix = os.path.join(self.scratch, "prefix")
        installed = self.install(prefix, env=creds)
        self.assertEqual(support.tree_snapshot(prefix, ignore=r"^\.redist"), self.reference_tree())
        # The password went to the token server only, as Basic credentials.
        b64 = base64.b64encode(b"ci:s3cret-pass").decode()
        self.assertTrue(self.registry.tokens.seen)
        self.assertTrue(all(auth == "Basic " + b64 for _path, auth in self.registry.tokens.seen if auth))
        for res in (refused, pushed, installed):
            for secret in ("s3cret-pass", b64, "Bearer", "eyJ"):
                self.assertNotIn(secret, res.stdout + res.stderr)

    def docker_config(self, key):
        docker = os.path.join(self.scratch, "docker-" + key.replace("/", "_").replace(":", "_"))
        os.makedirs(docker)
        with open(os.path.join(docker, "config.json"), "w") as f:
            json.dump({"auths": {key: {"auth": base64.b64encode(b"ci:s3cret-pass").decode()}}}, f)
        return docker

    def test_docker_config_credentials(self):
        # What `docker login HOST:PORT` stores is for https: not sent over plain http.
        for key in (self.registry.authority, f"https://{self.registry.authority}"):
            refused = self.push(env={"DOCKER_CONFIG": self.docker_config(key)}, check=6)
            self.assertIn("authentication", refused.stderr)
        self.assertFalse([auth for _path, auth in self.registry.tokens.seen if auth])
        docker = self.docker_config(f"http://{self.registry.authority}")
        self.push(env={"DOCKER_CONFIG": docker})
        self.install(os.path.join(self.scratch, "prefix"), env={"DOCKER_CONFIG": docker})


@needs_registry
class RealmElsewhere(OciBase):
    """A token realm on another port than the registry's gets no password."""
    users = {"ci": "s3cret-pass"}

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"), users=self.users,
                                                  realm_elsewhere=True)
        self.registry.__enter__()
        self.addCleanup(self.registry.__exit__)

    def test_realm_on_another_port_gets_no_password(self):
        docker = os.path.join(self.scratch, "docker")
        os.makedirs(docker)
        auth = {"auth": base64.b64encode(b"ci:s3cret-pass").decode()}
        with open(os.path.join(docker, "config.json"), "w") as f:  # the registry's, under every name
            json.dump({"auths": {self.registry.authority: auth, f"http://{self.registry.authority}": auth}}, f)
        refused = self.push(env={"DOCKER_CONFIG": docker}, check=6)
        self.assertIn("authentication", refused.stderr)
        self.assertTrue(self.registry.tokens.seen)
        self.assertEqual([auth for _path, auth in self.registry.tokens.seen], [None])


@needs_registry
class PushRetries(OciBase):
    """A push meets a 503, a 429 with Retry-After, a reset and a 503 on the
    manifest: each request is retried under the one policy (--retries,
    Retry-After), and the release lands whole."""

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"), front=True)
        self.registry.__enter__()
        self.addCleanup(self.registry.__exit__)

    def test_transient_failures_of_a_push_are_retried(self):
        self.registry.faults.extend([
            {"method": "HEAD", "path": "/blobs/sha256:", "reset": True},
            {"method": "POST", "path": "/blobs/uploads/", "status": 429, "retry_after": 1},
            {"method": "PUT", "path": "/blobs/uploads/", "status": 503},
            {"method": "PUT", "path": "/manifests/", "status": 503},
        ])
        import time
        started = time.monotonic()
        pushed = self.push("--retries", "4", check=None)
        self.assertEqual(pushed.returncode, 0, support.describe(pushed))
        self.assertGreaterEqual(time.monotonic() - started, 1.0)  # the Retry-After was honoured
        self.assertEqual(self.registry.faults, [])  # every fault was met
        self.assertIn("retrying in", pushed.stderr)
        statuses = [status for _m, _p, status in self.registry.front.log]
        for status in ("reset", 429, 503):
            self.assertIn(status, statuses)
        prefix = os.path.join(self.scratch, "prefix")
        self.install(prefix)
        self.assertEqual(support.tree_snapshot(prefix, ignore=r"^\.redist"), self.reference_tree())

    def test_a_registry_that_stops_answering_is_retried_after_the_stall_timeout(self):
        self.registry.faults.append({"method": "PUT", "path": "/manifests/", "hang_seconds": 30})
        import time
        started = time.monotonic()
        pushed = self.push("--retries", "3", "--stall-timeout", "2", check=None)
        self.assertEqual(pushed.returncode, 0, support.describe(pushed))
        self.assertLess(time.monotonic() - started, 25)
        self.assertIn("stalled", pushed.stderr)
        self.assertEqual(self.registry.faults, [])

    def test_retries_are_bounded(self):
        self.registry.faults.extend([{"method": "PUT", "path": "/manifests/", "status": 503}] * 5)
        failed = self.push("--retries", "2", check=None)
        self.assertEqual(failed.returncode, 6, support.describe(failed))
        self.assertIn("HTTP 503", failed.stderr)
        self.assertEqual(len([1 for m, p, status in self.registry.front.log if m == "PUT" and "/manifests/" in p]),
                         2)


class BadRealm(unittest.TestCase):
    """A registry mirror whose token realm answers 200 with an HTML page (a
    login portal), or with no token: the registry failed as a source, the
    base URL serves the release, and the realm is asked once in the run."""

    def serve(self, token_body):
        seen = []

        class Registry(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                seen.append(self.path)
                port = self.server.server_address[1]
                if self.path.startswith("/token"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(token_body)))
                    self.end_headers()
                    self.wfile.write(token_body)
                    return
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://127.0.0.1:{port}/token",service="x"')
                self.send_header("Content-Length", "0")
                self.end_headers()

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return f"oci+http://127.0.0.1:{server.server_address[1]}/nvidia", seen

    def test_a_realm_without_a_token_is_a_source_failure(self):
        for body in (b"<html><body>Sign in</body></html>", b'{"token":""}'):
            scratch = support.make_scratch_dir(self.id() + str(len(body)))
            mirror, seen = self.serve(body)
            prefix = os.path.join(scratch, "prefix")
            res = support.run_tool("cudnn-fetch", LABEL, "--mirror", mirror, "--base-url", support.nginx_base_url(),
                                   "--prefix", prefix, *PLATFORM, "--no-cache", "--json", env=ENV, check=None)
            self.assertEqual(res.returncode, 0, support.describe(res))
            components = json.loads(res.stdout)["components"]
            self.assertTrue(components)
            for c in components:
                self.assertTrue(c["url"].startswith(support.nginx_base_url()), c)
            self.assertEqual(len([p for p in seen if p.startswith("/token")]), 1, seen)


def strict_proxy(registry_port):
    """A proxy in front of the registry that refuses, as some registries do,
    an image manifest with media types outside the image-spec (400
    MANIFEST_INVALID). Everything else passes through, Host included, so the
    registry's upload locations name the proxy."""

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        refused = []

        def log_message(self, *args):
            pass

        def relay(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "PUT" and "/manifests/" in self.path and b"vnd.nvidia" in body:
                type(self).refused.append(self.path)
                err = b'{"errors":[{"code":"MANIFEST_INVALID","message":"media type not allowed"}]}'
                self.send_response(400)
                self.send_header("Content-Length", str(len(err)))
                self.end_headers()
                self.wfile.write(err)
                return
            registry_fixture.relay_to(self, registry_port, body)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = relay

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, Proxy.refused


@needs_registry
class StrictRegistry(OciBase):
    def test_custom_media_types_refused_falls_back_to_standard_ones(self):
        proxy, refused = strict_proxy(self.registry.port)
        self.addCleanup(proxy.server_close)
        self.addCleanup(proxy.shutdown)
        url = f"oci+http://127.0.0.1:{proxy.server_address[1]}/nvidia"
        support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", url, "--base-url", support.file_base_url(),
                         *PLATFORM, "--quiet", env=self.env, check=0)
        self.assertEqual(refused, [f"/v2/nvidia/cudnn/manifests/{LABEL}"])
        manifest = json.loads(support.http_get(
            f"http://127.0.0.1:{self.registry.port}/v2/nvidia/cudnn/manifests/{LABEL}",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})[2])
        self.assertEqual({l["mediaType"] for l in manifest["layers"]}, {"application/vnd.oci.image.layer.v1.tar"})
        prefix = os.path.join(self.scratch, "prefix")
        support.run_tool("cudnn-fetch", LABEL, "--mirror", url, "--base-url", UNREACHABLE, "--prefix", prefix,
                         *PLATFORM, "--no-cache", "--retries", "1", env=self.env, check=0)
        self.assertEqual(support.tree_snapshot(prefix, ignore=r"^\.redist"), self.reference_tree())


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Serves one blob; records the Authorization header of every request."""
    seen = None
    body = b""

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


class CredentialsStayOnTheRegistryHost(unittest.TestCase):
    """A registry that answers a blob with a redirect to storage on another
    port: the storage never sees the registry's Authorization header."""

    def test_redirect_drops_authorization(self):
        scratch = support.make_scratch_dir(self.id())
        body = b"hello blob\n"
        digest = hashlib.sha256(body).hexdigest()
        storage_seen, registry_seen = [], []
        storage_handler = type("S", (_Recorder,), {"seen": storage_seen, "body": body})
        storage = http.server.ThreadingHTTPServer(("127.0.0.1", 0), storage_handler)

        class Registry(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                auth = self.headers.get("Authorization")
                registry_seen.append((self.path, auth))
                if auth != "Basic " + base64.b64encode(b"u:pw").decode():
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="test"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/v2/":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{storage.server_address[1]}/storage/{digest}")
                self.send_header("Content-Length", "0")
                self.end_headers()

        registry = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
        for s in (storage, registry):
            threading.Thread(target=s.serve_forever, daemon=True).start()
            self.addCleanup(s.server_close)
            self.addCleanup(s.shutdown)
        tool = support.tool_path("segmented_get")
        if not os.access(tool, os.X_OK):
            self.skipTest("segmented_get is not built")
        url = f"oci+http://127.0.0.1:{registry.server_address[1]}/ns/cudnn/blobs/sha256:{digest}"
        part = os.path.join(scratch, "blob.part")
        res = subprocess.run([tool, url, str(len(body)), "--part", part],
                             env=support.tool_env(dict(ENV, REDIST_OCI_AUTH=f"oci+http://127.0.0.1:{registry.server_address[1]}=u:pw")),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(support.sha256_file(part), digest)
        self.assertTrue(any(p.startswith("/v2/ns/cudnn/blobs/") and a for p, a in registry_seen), registry_seen)
        self.assertEqual([p for p, _ in storage_seen], [f"/storage/{digest}"])
        self.assertEqual([a for _, a in storage_seen], [None], "Authorization was forwarded to the storage host")


if __name__ == "__main__":
    unittest.main()
