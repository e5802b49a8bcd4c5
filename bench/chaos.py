#!/usr/bin/env python3
"""SIGKILL chaos harness: kill redist's writers at random moments, then check
that the next writer leaves every prefix and every mirror consistent.

    python3 bench/chaos.py --build build --rounds 40 --seconds 1500

Each scenario measures its operation once unkilled, then runs N rounds: set
up the state before (an empty prefix, an older release, a half-filled
mirror), start the operation in its own process group, SIGKILL the group
after a delay drawn uniformly over the measured run time (or, in about a
third of the rounds, once the tool prints "redist-debug: paused at <point>"
for a REDIST_DEBUG_PAUSE point), check what the kill left, run the next
writer unkilled and check the result against a reference made without kills.
Scenarios, checks and options: bench/README.md ("Chaos harness").

Only 127.0.0.1 is contacted: the demo mirror (scripts/make_demo_mirror.py) is
served by a thread of this process (http.server, with Range and a per
connection rate limit) and read over file://; the registry scenario runs
Debian's /usr/bin/docker-registry on loopback (tests/fixtures/registry_fixture.py).
Exit status: 0 when every round was consistent, 1 on any inconsistency, 2 on
a setup error. Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
PAUSED = "redist-debug: paused at "
PLATFORM = "linux-x86_64"
CUDA = "12"
OLD, MID, NEW = "9.8.0", "9.10.1", "9.27.0"
CUDA_LABEL = "12.9.1"
CUDA_COMPONENTS = "cuda_cudart,cuda_nvrtc"
SCRUBBED = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_HOME", "http_proxy", "https_proxy", "all_proxy",
            "ftp_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY", "CURL_CA_BUNDLE", "SSL_CERT_FILE",
            "SSL_CERT_DIR", "REDIST_TRUSTED_KEYS", "REDIST_MIRRORS", "REDIST_CACHE_DIR", "REDIST_BASE_URL",
            "REDIST_DEBUG_PAUSE", "REDIST_DEBUG_PAUSE_SECONDS", "REDIST_DEBUG_FAIL", "REDIST_OCI_AUTH",
            "DOCKER_CONFIG")
ALL_SCENARIOS = ("fetch-cold", "fetch-warm", "sync", "remove", "upgrade", "mirror-dir", "mirror-zstd",
                 "mirror-layout", "mirror-registry")


class Inconsistent(Exception):
    """A check failed: the state after a kill (or after the next writer) is wrong."""


# ---------------------------------------------------------------------------
# Loopback HTTP server: the demo mirror, Range requests, a rate limit
# ---------------------------------------------------------------------------

def make_handler(root: str, rate: int):
    class Handler(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.serve(True)

        def do_HEAD(self):
            self.serve(False)

        def serve(self, body: bool):
            path = self.translate_path(self.path)
            if os.path.isdir(path):
                path = os.path.join(path, "index.html")
            if not os.path.isfile(path):
                self.send_error(404)
                return
            size = os.path.getsize(path)
            start, end = 0, size - 1
            status = 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                if start >= size or start > end:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "text/html" if path.endswith(".html") else "application/octet-stream")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if not body:
                return
            left = end - start + 1
            chunk = 16384
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    t0 = time.monotonic()
                    sent = 0
                    while left > 0:
                        data = f.read(min(chunk, left))
                        if not data:
                            break
                        self.wfile.write(data)
                        left -= len(data)
                        sent += len(data)
                        if rate > 0 and not path.endswith((".json", ".html")):
                            ahead = sent / rate - (time.monotonic() - t0)
                            if ahead > 0:
                                time.sleep(ahead)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


class QuietServer(http.server.ThreadingHTTPServer):
    """A killed client resets its connection, often before its request line
    is read (outside the handler's own guard): that is the scenario, not an
    error worth a traceback in the log."""

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class Server:
    def __init__(self, root: str, rate: int):
        self.httpd = QuietServer(("127.0.0.1", 0), make_handler(root, rate))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port() -> int:
    """A loopback port nobody listens on (connection refused): the unreachable origin."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------

def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def snapshot(root: str, ignore=r"^\.redist(/|$)") -> dict:
    """path -> (kind, mode, size, sha256 or link target) of every entry under
    root, .redist/ left out (as tests/e2e/support.py's tree_snapshot)."""
    pat = re.compile(ignore) if ignore else None
    out = {}
    if not os.path.isdir(root):
        return out

    def walk(d, rel):
        for name in sorted(os.listdir(d)):
            full, r = os.path.join(d, name), f"{rel}/{name}" if rel else name
            if pat and pat.search(r):
                continue
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[r] = ("symlink", mode, st.st_size, os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[r] = ("dir", mode, 0, None)
                walk(full, r)
            elif stat.S_ISREG(st.st_mode):
                out[r] = ("file", mode, st.st_size, sha256_file(full))
            else:
                out[r] = ("other", mode, st.st_size, None)

    walk(root, "")
    return out


def diff(a: dict, b: dict, limit: int = 20) -> str:
    lines = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            lines.append(f"- {k} {a[k]}")
        elif k not in a:
            lines.append(f"+ {k} {b[k]}")
        elif a[k] != b[k]:
            lines.append(f"~ {k} {a[k]} -> {b[k]}")
    more = f"\n... {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def rm_tree(path: str) -> None:
    def onerror(func, target, _exc):
        try:
            os.chmod(os.path.dirname(target), 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=onerror)
        else:
            os.unlink(path)


def leftovers(root: str) -> list[str]:
    """Files under root whose names say an interrupted writer left them."""
    found = []
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            if ".part" in name or "scratch" in name or name.endswith(".tmp") or ".redist-tmp" in name:
                found.append(os.path.relpath(os.path.join(d, name), root))
    return found


# ---------------------------------------------------------------------------
# Running the tools
# ---------------------------------------------------------------------------

class Tools:
    def __init__(self, build: str, home: str):
        self.build = os.path.abspath(build)
        if not os.access(self.path("redist"), os.X_OK) and os.access(os.path.join(self.build, "bin", "redist"),
                                                                      os.X_OK):
            self.build = os.path.join(self.build, "bin")  # scripts/build.sh puts the tools in build/bin
        self.home = home
        for name in ("redist", "cudnn-fetch"):
            if not os.access(self.path(name), os.X_OK):
                raise SystemExit(f"chaos: {self.path(name)} is missing: build the tools first (bench/README.md)")

    def path(self, name: str) -> str:
        return os.path.join(self.build, name)

    def env(self, extra: dict | None = None) -> dict:
        out = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        out["NO_PROXY"] = out["no_proxy"] = "127.0.0.1,localhost,::1"
        out["HOME"] = os.path.join(self.home, "home")
        out["XDG_CACHE_HOME"] = os.path.join(self.home, "cache")
        out["XDG_CONFIG_HOME"] = os.path.join(self.home, "config")
        out["XDG_DATA_HOME"] = os.path.join(self.home, "data")
        out["LC_ALL"] = "C.UTF-8"
        out.update(extra or {})
        return out

    def argv(self, cmd: list) -> list:
        return [self.path(cmd[0]), *[str(a) for a in cmd[1:]]]

    def run(self, cmd: list, cwd=None, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(cmd), cwd=cwd, env=self.env(env), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                              timeout=timeout)

    def must(self, cmd: list, cwd=None, ok=(0,)) -> subprocess.CompletedProcess:
        res = self.run(cmd, cwd=cwd)
        if res.returncode not in ok:
            raise Inconsistent(f"exit {res.returncode} (want {ok}): {describe(res)}")
        return res


def describe(res) -> str:
    return (f"$ {' '.join(str(a) for a in res.args)}\nexit {res.returncode}\n"
            f"--- stdout ---\n{res.stdout[-3000:]}\n--- stderr ---\n{res.stderr[-3000:]}")


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_killed(tools: Tools, cmd: list, logdir: str, delay: float | None, point: str | None,
               cwd=None, limit: float = 120) -> dict:
    """Starts cmd in its own process group; SIGKILLs the group after `delay`
    seconds, or once it printed that it paused at `point`. Returns what
    happened: landed ("mid-run" or "after-exit"), the exit code, the output."""
    out_path, err_path = os.path.join(logdir, "killed.out"), os.path.join(logdir, "killed.err")
    env = {"REDIST_DEBUG_PAUSE": point} if point else {}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(tools.argv(cmd), cwd=cwd, env=tools.env(env), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True)
    t0 = time.monotonic()
    reached = None
    try:
        if point:
            want = (PAUSED + point).encode()
            while time.monotonic() - t0 < limit and proc.poll() is None:
                with open(err_path, "rb") as f:
                    if want in f.read():
                        reached = True
                        break
                time.sleep(0.005)
            else:
                reached = False
        else:
            while time.monotonic() - t0 < delay and proc.poll() is None:
                time.sleep(min(0.002, max(0.0, delay - (time.monotonic() - t0))))
        at = time.monotonic() - t0
        kill_group(proc)
    except BaseException:
        kill_group(proc)
        raise
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    # The exit status says where the kill landed: one that lands as the tool exits finds it gone.
    return {"landed": "mid-run" if proc.returncode == -signal.SIGKILL else "after-exit", "rc": proc.returncode,
            "at": at,
            "reached": reached, "stderr": stderr}


def measure(sc, rng: random.Random, runs: int = 3) -> dict:
    """Median wall time of the operation unkilled, per base it reads from
    (loopback HTTP is rate-limited, file:// is not): {base URL: seconds}."""
    typical = {}
    bases = [sc.env.server.url, sc.env.file_url] if sc.uses_base else [sc.env.server.url]
    for base in bases:
        times = []
        sc.env.force_base = base
        try:
            for _ in range(runs):
                ctx = sc.setup(-1, rng)
                t0 = time.monotonic()
                res = sc.tools.run(sc.cmd(ctx), cwd=ctx.get("cwd"))
                times.append(time.monotonic() - t0)
                if res.returncode != 0:
                    raise SystemExit(f"chaos: the unkilled operation failed:\n{describe(res)}")
        finally:
            sc.env.force_base = None
        times.sort()
        typical[base] = times[len(times) // 2]
    return typical


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def check_prefix(tools: Tools, prefix: str, ref: dict, allowed_state: set, what: str) -> None:
    """The prefix after the next writer: verify exits 0, the tree equals the
    reference, no journal, no stages, nothing unexpected in .redist/ or beside
    the prefix, no .part leftovers."""
    res = tools.run(["redist", "verify", "--prefix", prefix])
    if res.returncode != 0:
        raise Inconsistent(f"{what}: redist verify failed:\n{describe(res)}")
    got = snapshot(prefix)
    if got != ref:
        raise Inconsistent(f"{what}: tree differs from the reference:\n{diff(ref, got)}")
    state = os.path.join(prefix, ".redist")
    if os.path.exists(os.path.join(state, "transaction.json")):
        raise Inconsistent(f"{what}: .redist/transaction.json left behind")
    staging = os.path.join(state, "staging")
    if os.path.isdir(staging) and os.listdir(staging):
        raise Inconsistent(f"{what}: .redist/staging not empty: {os.listdir(staging)}")
    extra = sorted(set(os.listdir(state)) - allowed_state) if os.path.isdir(state) else []
    if extra:
        raise Inconsistent(f"{what}: unexpected entries in .redist/: {extra}")
    beside = sorted(set(os.listdir(os.path.dirname(prefix))) - {os.path.basename(prefix), "redist.toml",
                                                                 "redist.lock"})
    if beside:
        raise Inconsistent(f"{what}: left beside the prefix: {beside}")
    left = leftovers(prefix)
    if left:
        raise Inconsistent(f"{what}: leftovers in the prefix: {left[:10]}")


def check_after_kill(prefix: str, states: list, what: str) -> str:
    """Right after the kill, before the next writer: with no journal the tree
    is one of `states` (before or after the operation); with one, the next
    writer rolls it forward. Returns which."""
    if os.path.exists(os.path.join(prefix, ".redist", "transaction.json")):
        return "journal"
    got = snapshot(prefix)
    for name, ref in states:
        if got == ref:
            return name
    raise Inconsistent(f"{what}: after the kill, without a journal, the tree is neither "
                       f"{' nor '.join(n for n, _ in states)}:\n" + diff(states[0][1], got))


def check_layout(layout: str, product: str, finished: bool = True) -> None:
    """Every descriptor in index.json and in the manifests it names exists
    under blobs/sha256 with the right digest and size."""
    pdir = os.path.join(layout, product)
    index = os.path.join(pdir, "index.json")
    with open(index) as f:
        idx = json.load(f)

    def blob(desc, where):
        digest = desc.get("digest", "")
        if not digest.startswith("sha256:"):
            raise Inconsistent(f"layout {where}: digest {digest!r}")
        path = os.path.join(pdir, "blobs", "sha256", digest[7:])
        if not os.path.isfile(path):
            raise Inconsistent(f"layout {where}: names a missing blob {digest}")
        if os.path.getsize(path) != desc.get("size") or sha256_file(path) != digest[7:]:
            raise Inconsistent(f"layout {where}: blob {digest} has the wrong size or digest")
        return path

    for i, m in enumerate(idx.get("manifests", [])):
        ref = m.get("annotations", {}).get("org.opencontainers.image.ref.name", i)
        with open(blob(m, f"index.json[{ref}]")) as f:
            man = json.load(f)
        if "config" in man:
            blob(man["config"], f"{ref}.config")
        for j, layer in enumerate(man.get("layers", [])):
            blob(layer, f"{ref}.layers[{j}]")
    left = [n for n in os.listdir(pdir) if n.startswith(".redist-scratch") or ".part" in n]
    if left and finished:  # a killed run's scratch is the next run's to resume and remove
        raise Inconsistent(f"layout: leftovers in {pdir}: {left}")


def registry_get(url: str, accept: str | None = None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json,application/vnd.oci.image.index.v1+json,"
                  "application/vnd.docker.distribution.manifest.v2+json")


def check_registry(port: int, repo: str) -> list:
    """Every tag of repo names a manifest whose config and layers are there
    with the right digest. Returns the tags."""
    base = f"http://127.0.0.1:{port}/v2/{repo}"
    status, _, body = registry_get(base + "/tags/list")
    if status == 404:
        return []  # nothing pushed yet
    if status != 200:
        raise Inconsistent(f"registry {repo}: tags/list HTTP {status}")
    tags = json.loads(body).get("tags") or []
    for tag in tags:
        status, _, body = registry_get(f"{base}/manifests/{tag}", MANIFEST_TYPES)
        if status != 200:
            raise Inconsistent(f"registry {repo}:{tag}: manifest HTTP {status}")
        man = json.loads(body)
        for desc in ([man["config"]] if "config" in man else []) + man.get("layers", []):
            status, _, data = registry_get(f"{base}/blobs/{desc['digest']}")
            if status != 200:
                raise Inconsistent(f"registry {repo}:{tag}: names a missing blob {desc['digest']} (HTTP {status})")
            if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"] or len(data) != desc["size"]:
                raise Inconsistent(f"registry {repo}:{tag}: blob {desc['digest']} has the wrong bytes")
    return tags


def check_dir_mirror(dest: str, labels: list, finished: bool = True) -> None:
    """Every artifact the mirrored manifests name is there with its size and
    SHA-256. Not finished (right after a kill): a manifest may be missing
    and so may artifacts, but whatever is at a manifest's or an artifact's
    path is whole (files are renamed into place once verified)."""
    for label in labels:
        path = os.path.join(dest, "cudnn", "redist", f"redistrib_{label}.json")
        if not finished and not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                man = json.load(f)
        except ValueError as e:
            raise Inconsistent(f"mirror {label}: {path} is not whole JSON: {e}") from None
        for comp, entry in man.items():
            if not isinstance(entry, dict) or not isinstance(entry.get(PLATFORM), dict):
                continue
            recs = entry[PLATFORM]
            recs = [recs] if "relative_path" in recs else [r for r in recs.values() if isinstance(r, dict)]
            for rec in recs:
                if "relative_path" not in rec:
                    continue
                f = os.path.normpath(os.path.join(dest, "cudnn", "redist", rec["relative_path"]))
                if not os.path.isfile(f):
                    if not finished:
                        continue
                    raise Inconsistent(f"mirror {label}: {rec['relative_path']} is missing")
                if os.path.getsize(f) != int(rec["size"]) or sha256_file(f) != rec["sha256"]:
                    raise Inconsistent(f"mirror {label}: {rec['relative_path']} has the wrong size or digest")
    left = leftovers(dest)
    if left and finished:
        raise Inconsistent(f"mirror: leftovers {left[:10]}")


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

class Env:
    """What every scenario shares: tools, URLs, references, the work tree."""

    def __init__(self, args, tools: Tools, work: str, server: Server, mirror: str):
        self.args, self.tools, self.work, self.server, self.mirror = args, tools, work, server, mirror
        self.file_url = "file://" + urllib.request.pathname2url(mirror)
        self.dead = f"http://127.0.0.1:{closed_port()}"
        self.refs: dict = {}
        self.ref_state: set = {"lock", "receipts", "staging"}
        self.registry = None
        self.force_base = None  # set while an operation is measured

    def base(self, rng: random.Random) -> str:
        """Loopback HTTP in 3 rounds of 4, file:// in the others."""
        return self.file_url if rng.random() < 0.25 else self.server.url

    def fetch_cmd(self, label: str, prefix: str, cache: str | None, base: str, *extra) -> list:
        return ["redist", "fetch", "cudnn", label, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", prefix,
                "--base-url", base, *(["--cache-dir", cache] if cache else ["--no-cache"]), "--quiet", *extra]

    def cuda_cmd(self, prefix: str, cache: str | None, base: str) -> list:
        return ["redist", "fetch", "cuda", CUDA_LABEL, "--component", CUDA_COMPONENTS, "--platform", PLATFORM,
                "--prefix", prefix, "--base-url", base, *(["--cache-dir", cache] if cache else ["--no-cache"]),
                "--quiet"]

    def ref(self, name: str, make) -> dict:
        """A reference tree, installed once without kills."""
        if name not in self.refs:
            d = os.path.join(self.work, "refs", name)
            rm_tree(d)
            os.makedirs(d)
            prefix = make(d)
            self.refs[name] = snapshot(prefix)
            state = os.path.join(prefix, ".redist")
            if os.path.isdir(state):
                self.ref_state |= set(os.listdir(state))
        return self.refs[name]

    def cudnn_ref(self, label: str) -> dict:
        def make(d):
            p = os.path.join(d, "prefix")
            self.tools.must(self.fetch_cmd(label, p, None, self.server.url))
            return p
        return self.ref("cudnn-" + label, make)

    def cuda_ref(self) -> dict:
        def make(d):
            p = os.path.join(d, "prefix")
            self.tools.must(self.cuda_cmd(p, None, self.server.url))
            return p
        return self.ref("cuda", make)

    def both_ref(self) -> dict:
        def make(d):
            p = os.path.join(d, "prefix")
            self.tools.must(self.cuda_cmd(p, None, self.server.url))
            self.tools.must(self.fetch_cmd(NEW, p, None, self.server.url))
            return p
        return self.ref("cuda+cudnn", make)


class Scenario:
    name = ""
    points: tuple = ()
    uses_base = True  # reads the demo mirror over HTTP or file:// (ctx["base"])

    def __init__(self, env: Env):
        self.env, self.tools = env, env.tools

    # setup(ctx) prepares the state before; cmd(ctx) is the killed operation;
    # after_kill(ctx, killed) checks what the kill left; next_writer(ctx) and
    # check(ctx) finish and judge the round.
    def fresh(self, rnd: int, rng: random.Random) -> dict:
        d = os.path.join(self.env.work, "rounds", self.name, str(rnd))
        rm_tree(d)
        os.makedirs(d)
        return {"dir": d, "rng": rng, "base": self.env.force_base or self.env.base(rng)}

    def after_kill(self, ctx, killed):
        return ""

    def next_writer(self, ctx):
        return self.tools.must(self.cmd(ctx), cwd=ctx.get("cwd"))


class FetchCold(Scenario):
    """An install into an empty prefix with an empty cache (or --no-cache);
    the next writer is the same command."""
    name = "fetch-cold"
    points = ("mid-download", "after-unpack", "before-commit", "mid-commit")

    def setup(self, rnd, rng):
        ctx = self.fresh(rnd, rng)
        os.makedirs(os.path.join(ctx["dir"], "p"))
        ctx["prefix"] = os.path.join(ctx["dir"], "p", "prefix")
        ctx["cache"] = None if rng.random() < 0.2 else os.path.join(ctx["dir"], "cache")
        return ctx

    def cmd(self, ctx):
        return self.env.fetch_cmd(NEW, ctx["prefix"], ctx["cache"], ctx["base"])

    def after_kill(self, ctx, killed):
        return check_after_kill(ctx["prefix"], [("empty", {}), ("new", self.env.cudnn_ref(NEW))], self.name)

    def check(self, ctx):
        check_prefix(self.tools, ctx["prefix"], self.env.cudnn_ref(NEW), self.env.ref_state, self.name)


class FetchWarm(FetchCold):
    """The same install with a cache that earlier rounds filled (archives
    and extracted trees), shared by every round: a kill may also hit the
    cache, which the next round's install then uses."""
    name = "fetch-warm"
    points = ("before-commit", "mid-commit")  # nothing is downloaded or unpacked

    def setup(self, rnd, rng):
        ctx = self.fresh(rnd, rng)
        os.makedirs(os.path.join(ctx["dir"], "p"))
        ctx["prefix"] = os.path.join(ctx["dir"], "p", "prefix")
        ctx["cache"] = os.path.join(self.env.work, "warm-cache")
        if not os.path.isdir(ctx["cache"]):
            warm = os.path.join(self.env.work, "warm-prefix")
            self.tools.must(self.env.fetch_cmd(NEW, warm, ctx["cache"], self.env.server.url))
            self.tools.must(self.env.fetch_cmd(NEW, warm, ctx["cache"], self.env.server.url, "--reinstall"))
            rm_tree(warm)
        return ctx


class Upgrade(FetchCold):
    """cudnn 9.8.0 installed, then 9.27.0 over it (killed); the next writer
    is the 9.27.0 install again. Killed before the commit, the 9.8.0 tree
    must be there untouched."""
    name = "upgrade"

    def setup(self, rnd, rng):
        ctx = FetchCold.setup(self, rnd, rng)
        old_cache = os.path.join(self.env.work, "old-cache")
        self.tools.must(self.env.fetch_cmd(OLD, ctx["prefix"], old_cache, self.env.server.url))
        return ctx

    def after_kill(self, ctx, killed):
        return check_after_kill(ctx["prefix"], [("old", self.env.cudnn_ref(OLD)), ("new", self.env.cudnn_ref(NEW))],
                                self.name)


class Remove(Scenario):
    """cuda (2 components) and cudnn installed; `redist remove --product
    cudnn` killed; the next writer is the same remove (exit 3 accepted when
    the killed one had finished); the cuda tree alone must remain."""
    name = "remove"
    points = ()  # a removal moves nothing into place: it passes no pause point
    uses_base = False

    def setup(self, rnd, rng):
        ctx = self.fresh(rnd, rng)
        os.makedirs(os.path.join(ctx["dir"], "p"))
        ctx["prefix"] = p = os.path.join(ctx["dir"], "p", "prefix")
        cache = os.path.join(self.env.work, "remove-cache")
        self.tools.must(self.env.cuda_cmd(p, cache, self.env.server.url))
        self.tools.must(self.env.fetch_cmd(NEW, p, cache, self.env.server.url))
        return ctx

    def cmd(self, ctx):
        return ["redist", "remove", "--prefix", ctx["prefix"], "--product", "cudnn", "--quiet"]

    def after_kill(self, ctx, killed):
        return check_after_kill(ctx["prefix"], [("both", self.env.both_ref()), ("cuda", self.env.cuda_ref())],
                                self.name)

    def next_writer(self, ctx):
        res = self.tools.run(self.cmd(ctx))
        if res.returncode not in (0, 3):
            raise Inconsistent(f"the next remove failed: {describe(res)}")
        return res

    def check(self, ctx):
        check_prefix(self.tools, ctx["prefix"], self.env.cuda_ref(), self.env.ref_state, self.name)


SYNC_OLD = """[project]
prefix = "prefix"
platforms = ["linux-x86_64"]
cuda = "12"
base-url = "{base}"

[products.cudnn]
version = "9.10"

[products.cuda]
version = "12.9"
components = ["cuda_cudart"]
"""

SYNC_NEW = """[project]
prefix = "prefix"
platforms = ["linux-x86_64"]
cuda = "12"
base-url = "{base}"

[products.cudnn]
version = "9.27"

[products.cuda]
version = "12.9"
components = ["cuda_cudart", "cuda_nvrtc"]
"""


class Sync(Scenario):
    """`redist sync` of a two-product project (cudnn 9.27, two cuda
    components), from nothing or, in half the rounds, over the project's
    older state (cudnn 9.10, one cuda component; the file then edited).
    The next writer is `redist sync`, then `redist sync --frozen` must
    accept the lock it wrote."""
    name = "sync"
    points = ("mid-download", "after-unpack", "before-commit", "mid-commit")
    uses_base = False  # a project's base-url is http(s) or a directory inside the project: HTTP only

    def project(self, d, text, base):
        with open(os.path.join(d, "redist.toml"), "w") as f:
            f.write(text.format(base=base))

    def ref_sync(self, which: str) -> dict:
        def make(d):
            self.project(d, SYNC_OLD if which == "old" else SYNC_NEW, self.env.server.url)
            self.tools.must(["redist", "sync", "--quiet", "--no-cache"], cwd=d)
            return os.path.join(d, "prefix")
        return self.env.ref("sync-" + which, make)

    def setup(self, rnd, rng):
        ctx = self.fresh(rnd, rng)
        d = ctx["cwd"] = os.path.join(ctx["dir"], "project")
        os.makedirs(d)
        ctx["prefix"] = os.path.join(d, "prefix")
        ctx["cache"] = os.path.join(ctx["dir"], "cache")
        base = self.env.server.url  # a project's base-url is http(s) or a directory inside it
        ctx["from_old"] = rng.random() < 0.5
        if ctx["from_old"]:
            self.project(d, SYNC_OLD, base)
            self.tools.must(self.cmd(ctx), cwd=d)
        self.project(d, SYNC_NEW, base)
        return ctx

    def cmd(self, ctx):
        return ["redist", "sync", "--quiet", "--cache-dir", ctx["cache"]]

    def after_kill(self, ctx, killed):
        before = ("old", self.ref_sync("old")) if ctx["from_old"] else ("empty", {})
        return check_after_kill(ctx["prefix"], [before, ("new", self.ref_sync("new"))], self.name)

    def check(self, ctx):
        check_prefix(self.tools, ctx["prefix"], self.ref_sync("new"), self.env.ref_state, self.name)
        res = self.tools.run(["redist", "sync", "--frozen", "--quiet", "--cache-dir", ctx["cache"]], cwd=ctx["cwd"])
        if res.returncode != 0:
            raise Inconsistent(f"sync: the lock the next writer left is refused by --frozen:\n{describe(res)}")
        if snapshot(ctx["prefix"]) != self.ref_sync("new"):
            raise Inconsistent("sync: --frozen changed the prefix")


class MirrorDir(Scenario):
    """`redist mirror cudnn 9.10.1,9.27.0` into a directory, new or holding
    9.10.1 already; the next writer is the same mirror. Then every
    artifact of the mirrored manifests is checked, and a fresh fetch of one
    release from the mirror (the origin unreachable) must equal the reference."""
    name = "mirror-dir"
    points = ("mid-download",)
    labels = (MID, NEW)

    def target(self, ctx):
        return ctx["dest"]

    def setup(self, rnd, rng):
        ctx = self.fresh(rnd, rng)
        ctx["dest"] = os.path.join(ctx["dir"], "mirror")
        ctx["cache"] = os.path.join(ctx["dir"], "cache")
        self.prepare(ctx)
        if rng.random() < 0.5:
            self.tools.must(self.cmd(ctx, [MID]))
        return ctx

    def prepare(self, ctx):
        pass

    def cmd(self, ctx, labels=None):
        return ["redist", "mirror", "cudnn", ",".join(labels or self.labels), *self.to_args(ctx),
                "--base-url", ctx["base"], "--platform", PLATFORM, "--quiet"]

    def to_args(self, ctx):
        return ["--dest", ctx["dest"]]

    def mirror_url(self, ctx):
        return "file://" + urllib.request.pathname2url(ctx["dest"])

    def after_kill(self, ctx, killed):
        check_dir_mirror(ctx["dest"], list(self.labels), finished=False)
        return ""

    def check_target(self, ctx):
        check_dir_mirror(ctx["dest"], list(self.labels))

    def check(self, ctx):
        self.check_target(ctx)
        label = ctx["rng"].choice(self.labels)
        prefix = os.path.join(ctx["dir"], "q", "prefix")
        os.makedirs(os.path.dirname(prefix))
        res = self.tools.run(["redist", "fetch", "cudnn", label, "--cuda", CUDA, "--platform", PLATFORM,
                              "--prefix", prefix, "--mirror", self.mirror_url(ctx), "--base-url", self.env.dead,
                              "--no-cache", "--quiet", "--retries", "1"])
        if res.returncode != 0:
            raise Inconsistent(f"{self.name}: a fetch of {label} from the mirror failed:\n{describe(res)}")
        check_prefix(self.tools, prefix, self.env.cudnn_ref(label), self.env.ref_state,
                     f"{self.name}: fetch of {label} from the mirror")


class MirrorZstd(MirrorDir):
    """The same with `--recompress zstd --sign-key`: beside each .tar.xz a
    zstd copy, and a signed record per release naming the tree each copy
    unpacks to, which the mirror learns by unpacking the copy once in the
    cache's scratch/. After the next writer that scratch is empty, and a
    fetch from the mirror with the key trusted installs the copies (the
    receipts name them) and equals the reference."""
    name = "mirror-zstd"
    points = ("mid-download", "copy-tree")
    key = pub = ""

    def prepare(self, ctx):
        if not MirrorZstd.key:
            MirrorZstd.key = os.path.join(self.env.work, "mirror-zstd.key")
            MirrorZstd.pub = os.path.join(self.env.work, "mirror-zstd.pub")
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", self.key], check=True)
            subprocess.run(["openssl", "pkey", "-in", self.key, "-pubout", "-out", self.pub], check=True)

    def cmd(self, ctx, labels=None):
        return [*super().cmd(ctx, labels), "--recompress", "zstd", "--sign-key", self.key, "--cache-dir",
                ctx["cache"]]

    def check(self, ctx):
        self.check_target(ctx)
        scratch = os.path.join(ctx["cache"], "scratch")
        left = os.listdir(scratch) if os.path.isdir(scratch) else []
        if left:
            raise Inconsistent(f"{self.name}: the cache's scratch/ is not empty after the next writer: {left}")
        label = ctx["rng"].choice(self.labels)
        prefix = os.path.join(ctx["dir"], "q", "prefix")
        os.makedirs(os.path.dirname(prefix))
        res = self.tools.run(["redist", "fetch", "cudnn", label, "--cuda", CUDA, "--platform", PLATFORM,
                              "--prefix", prefix, "--mirror", self.mirror_url(ctx), "--base-url", self.env.dead,
                              "--no-cache", "--quiet", "--retries", "1", "--trusted-key", self.pub])
        if res.returncode != 0 or "copy" in res.stderr:
            raise Inconsistent(f"{self.name}: a fetch of {label} from the copies failed:\n{describe(res)}")
        receipts = os.path.join(prefix, ".redist", "receipts", "cudnn")
        for name in os.listdir(receipts):
            with open(os.path.join(receipts, name)) as f:
                if "copy_sha256" not in json.load(f):
                    raise Inconsistent(f"{self.name}: {label}: {name} was not installed from its copy")
        check_prefix(self.tools, prefix, self.env.cudnn_ref(label), self.env.ref_state,
                     f"{self.name}: fetch of {label} from the copies")


class MirrorLayout(MirrorDir):
    """The same into an OCI image layout (oci-layout:DIR): index.json and
    the manifests it names must only name blobs that are there."""
    name = "mirror-layout"
    points = ("mid-download", "layout-index")

    def to_args(self, ctx):
        return ["--to", "oci-layout:" + ctx["dest"]]

    def mirror_url(self, ctx):
        return "oci-layout:" + ctx["dest"]

    def after_kill(self, ctx, killed):
        if os.path.exists(os.path.join(ctx["dest"], "cudnn", "index.json")):
            check_layout(ctx["dest"], "cudnn", finished=False)  # a reader never sees a release with missing blobs
        return ""

    def check_target(self, ctx):
        check_layout(ctx["dest"], "cudnn")
        with open(os.path.join(ctx["dest"], "cudnn", "index.json")) as f:
            refs = {m.get("annotations", {}).get("org.opencontainers.image.ref.name")
                    for m in json.load(f).get("manifests", [])}
        if not set(self.labels) <= refs:
            raise Inconsistent(f"layout: index.json names {sorted(r for r in refs if r)}, not {self.labels}")


class MirrorRegistry(MirrorDir):
    """The same pushed to Debian's docker-registry on loopback, one
    repository namespace per round: every tag must name a manifest whose
    blobs are all there."""
    name = "mirror-registry"
    points = ("mid-download",)

    def scratch(self):
        return os.path.join(self.env.tools.home, "cache", "redist", "scratch")

    def prepare(self, ctx):
        ctx["ns"] = "r" + os.path.basename(ctx["dir"]).replace("-", "m") + "x" + os.urandom(3).hex()
        rm_tree(self.scratch())  # an earlier failing round's leftovers are not this round's

    def to_args(self, ctx):
        return ["--to", self.mirror_url(ctx)]

    def mirror_url(self, ctx):
        return f"oci+http://127.0.0.1:{self.env.registry.port}/{ctx['ns']}"

    def after_kill(self, ctx, killed):
        check_registry(self.env.registry.port, f"{ctx['ns']}/cudnn")
        return ""

    def check_target(self, ctx):
        tags = check_registry(self.env.registry.port, f"{ctx['ns']}/cudnn")
        if not set(self.labels) <= set(tags):
            raise Inconsistent(f"registry: tags {tags}, not {self.labels}")
        left = os.listdir(self.scratch()) if os.path.isdir(self.scratch()) else []
        if left:
            raise Inconsistent(f"registry: run directories left in the cache's scratch: {left[:5]}")


SCENARIOS = {c.name: c for c in (FetchCold, FetchWarm, Sync, Remove, Upgrade, MirrorDir, MirrorZstd,
                                  MirrorLayout, MirrorRegistry)}


# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------

def new_stats() -> dict:
    return {"rounds": 0, "mid-run": 0, "after-exit": 0, "paused": 0, "journal": 0, "failures": 0,
            "first": None, "typical": 0.0, "typical_file": "-", "seconds": 0.0}


def run_scenario(sc: Scenario, args, rng: random.Random, deadline: float, logroot: str, stats: dict) -> dict:
    """Fills `stats` as rounds finish (an interrupted run still reports them)."""
    sc_deadline = min(deadline, time.monotonic() + args.scenario_seconds) if args.scenario_seconds else deadline
    typical = measure(sc, rng)
    stats["typical"] = typical[sc.env.server.url]
    stats["typical_file"] = f"{typical[sc.env.file_url]:.2f}" if sc.env.file_url in typical else "-"
    for rnd in range(args.rounds):
        if time.monotonic() >= sc_deadline:
            break
        seed = rng.randrange(1 << 32)
        r = random.Random(seed)
        killed = None
        how = "setup"
        try:
            ctx = sc.setup(rnd, r)
            logdir = ctx["dir"]
            point = r.choice(sc.points) if sc.points and r.random() < args.pause_share else None
            usual = typical.get(ctx["base"], typical[sc.env.server.url])
            delay = None if point else r.uniform(0, usual * 1.1)
            src = "file" if ctx["base"].startswith("file:") else "http"
            how = f"{src}, pause {point}" if point else f"{src}, delay {delay:.3f}s of ~{usual:.3f}s"
            killed = run_killed(sc.tools, sc.cmd(ctx), logdir, delay, point, cwd=ctx.get("cwd"))
            stats[killed["landed"]] += 1
            if point and killed["reached"]:
                stats["paused"] += 1
            if killed["landed"] == "after-exit" and killed["rc"] != 0:
                raise Inconsistent(f"the operation exited {killed['rc']} before the kill:\n{killed['stderr']}")
            state = sc.after_kill(ctx, killed)
            if state == "journal":
                stats["journal"] += 1
            sc.next_writer(ctx)
            sc.check(ctx)
            status = "ok"
        except (Inconsistent, OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as e:
            stats["failures"] += 1
            status = "FAIL"
            text = str(e) if isinstance(e, Inconsistent) else traceback.format_exc()
            detail = (f"scenario {sc.name}, round {rnd}, round seed {seed}, {how}, "
                      f"kill landed {killed['landed'] if killed else '-'}"
                      f"{'' if not killed else ' at %.3f s' % killed['at']}\n{text}")
            keep = os.path.join(logroot, f"{sc.name}-round{rnd}")
            rm_tree(keep)
            d = os.path.join(sc.env.work, "rounds", sc.name, str(rnd))
            if os.path.isdir(d):
                shutil.copytree(d, keep, symlinks=True)
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, "FAILURE.txt"), "w") as f:
                f.write(detail + "\n")
            if stats["first"] is None:
                stats["first"] = detail + f"\n(state kept in {keep})"
                print(f"\n{sc.name}: FAILURE in round {rnd}\n{detail}\n(state kept in {keep})", flush=True)
        stats["rounds"] += 1
        if args.verbose:
            print(f"  {sc.name} round {rnd}: {how}: "
                  f"{killed['landed'] + ' rc=' + str(killed['rc']) + ' at %.3fs' % killed['at'] if killed else '-'}"
                  f": {status}", flush=True)
        if status == "ok" and not args.keep:
            rm_tree(os.path.join(sc.env.work, "rounds", sc.name, str(rnd)))
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="directory holding redist and cudnn-fetch (default build/)")
    ap.add_argument("--rounds", type=int, default=40, help="rounds per scenario (default 40)")
    ap.add_argument("--seconds", type=float, default=1500, help="total time budget (default 1500)")
    ap.add_argument("--scenario-seconds", type=float, default=0,
                    help="time budget per scenario (default: none; --seconds still bounds the whole run)")
    ap.add_argument("--scenarios", default=",".join(ALL_SCENARIOS), help="comma-separated subset")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    ap.add_argument("--pause-share", type=float, default=0.3,
                    help="share of rounds killed at a REDIST_DEBUG_PAUSE point (default 0.3)")
    ap.add_argument("--rate", type=int, default=1 << 20,
                    help="bytes/s per HTTP connection for archives (default 1 MiB/s; 0: unlimited)")
    ap.add_argument("--work", default=None, help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--log-dir", default=None, help="where failing rounds are kept (default WORK/failures)")
    ap.add_argument("--keep", action="store_true", help="keep every round's directory")
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per round")
    args = ap.parse_args()

    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios {unknown} (known: {', '.join(ALL_SCENARIOS)})")
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (1 << 31)
    work = os.path.abspath(args.work) if args.work else None
    if work is None:
        import tempfile
        work = tempfile.mkdtemp(prefix="redist-chaos-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    logroot = os.path.abspath(args.log_dir) if args.log_dir else os.path.join(work, "failures")
    os.makedirs(logroot, exist_ok=True)
    tools = Tools(args.build, os.path.join(work, "home"))

    def on_term(signum, _frame):
        raise KeyboardInterrupt  # stop the server and the registry as Ctrl-C does
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # also where a background shell left SIGINT ignored
    start = time.monotonic()
    deadline = start + args.seconds

    mirror = os.path.join(work, "mirror")
    if not os.path.isfile(os.path.join(mirror, "mirror-info.json")):
        subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "make_demo_mirror.py"), "--dest", mirror,
                        "--products", "cudnn,cuda", "--quiet", "--force"], check=True)
    server = Server(mirror, args.rate)
    env = Env(args, tools, work, server, mirror)
    registry = None
    print(f"chaos: seed {seed}, build {tools.build}, work {work}, server {server.url}, "
          f"rounds {args.rounds}, budget {args.seconds:.0f} s", flush=True)
    results = {}
    interrupted = False
    try:
        if "mirror-registry" in names:
            if os.access("/usr/bin/docker-registry", os.X_OK):
                sys.path.insert(0, os.path.join(SOURCE, "tests", "fixtures"))
                import registry_fixture
                registry = registry_fixture.Registry(os.path.join(work, "registry")).__enter__()
                env.registry = registry
            else:
                print("chaos: /usr/bin/docker-registry is not installed: mirror-registry skipped", flush=True)
                names.remove("mirror-registry")
        # References first, without kills.
        env.cudnn_ref(OLD), env.cudnn_ref(MID), env.cudnn_ref(NEW), env.cuda_ref(), env.both_ref()
        rng = random.Random(seed)
        for i, name in enumerate(names):
            if time.monotonic() >= deadline:
                break
            sc = SCENARIOS[name](env)
            # Each scenario gets an even share of what is left, unless told otherwise.
            if not args.scenario_seconds:
                args_share = argparse.Namespace(**vars(args))
                args_share.scenario_seconds = (deadline - time.monotonic()) / (len(names) - i)
            else:
                args_share = args
            t0 = time.monotonic()
            print(f"chaos: {name} ...", flush=True)
            results[name] = new_stats()
            try:
                run_scenario(sc, args_share, random.Random(rng.randrange(1 << 32)), deadline, logroot, results[name])
            finally:
                results[name]["seconds"] = time.monotonic() - t0
    except KeyboardInterrupt:
        interrupted = True
        print("chaos: interrupted (the last scenario's round in progress is not counted)", flush=True)
    except Exception:
        traceback.print_exc()
        print("chaos: setup error", flush=True)
        return 2
    finally:
        server.stop()
        if registry:
            registry.__exit__(None, None, None)

    head = f"{'scenario':<16} {'rounds':>6} {'mid-run':>7} {'after-exit':>10} {'at-pause':>8} " \
           f"{'journal':>7} {'failures':>8} {'http s':>6} {'file s':>6} {'time s':>6}"
    print("\n" + head)
    print("-" * len(head))
    total = {"rounds": 0, "mid-run": 0, "after-exit": 0, "paused": 0, "journal": 0, "failures": 0}
    for name, s in results.items():
        print(f"{name:<16} {s['rounds']:>6} {s['mid-run']:>7} {s['after-exit']:>10} {s['paused']:>8} "
              f"{s['journal']:>7} {s['failures']:>8} {s['typical']:>6.2f} {s['typical_file']:>6} "
              f"{s['seconds']:>6.0f}")
        for k in total:
            total[k] += s[k]
    print(f"{'total':<16} {total['rounds']:>6} {total['mid-run']:>7} {total['after-exit']:>10} "
          f"{total['paused']:>8} {total['journal']:>7} {total['failures']:>8}")
    print(f"\nseed {seed}; {time.monotonic() - start:.0f} s; mid-run: SIGKILL while the tool ran "
          f"(at-pause: of them, at a REDIST_DEBUG_PAUSE point; journal: a commit journal was left for the "
          f"next writer); after-exit: the tool had finished before the kill")
    for name, s in results.items():
        if s["first"]:
            print(f"\nfirst failure of {name}:\n{s['first']}")
    if total["failures"]:
        print(f"\nchaos: {total['failures']} inconsistent round(s); kept in {logroot}")
        return 1
    if interrupted:
        return 130
    if not args.keep:
        rm_tree(os.path.join(work, "rounds"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
