"""Helpers for the end-to-end tests (tests/e2e/test_*.py).

The tests run the real tools against a demo mirror (scripts/make_demo_mirror.py)
served by nginx on loopback (tests/fixtures/nginx_fixture.py) and through
file:// URLs. CTest passes the locations in the environment (see
tests/CMakeLists.txt); outside CTest, export the same variables and run
`nginx_fixture.py start` first.

Tests run at the same time. CTest names each one in REDIST_E2E_TEST (its
script's name), and everything a test could share with another is its own:
its URLs on the shared nginx live under /t/<test>/ (access_log_since() sees
only those), and its scratch directories, HOME and XDG_* live under
$REDIST_TEST_STATE/e2e/<test>/. Without REDIST_E2E_TEST (a script run by
hand) the tests use the un-namespaced URLs and $REDIST_TEST_STATE/e2e/.

Python 3 standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pty
import re
import shutil
import stat
import struct
import subprocess
import tarfile
import tempfile
import termios
import urllib.error
import urllib.request
from typing import NamedTuple

_HERE = os.path.dirname(os.path.abspath(__file__))

# Seconds one tool run may take before the test fails (instead of hanging).
DEFAULT_TIMEOUT = 120


# ---------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------

def _env_path(name: str, fallback: str | None = None) -> str:
    value = os.environ.get(name) or fallback
    if not value:
        raise RuntimeError(f"{name} is not set: run the e2e tests through ctest, "
                           "or export it (see tests/CMakeLists.txt)")
    return os.path.abspath(value)


def source_dir() -> str:
    return _env_path("REDIST_SOURCE_DIR", os.path.dirname(os.path.dirname(_HERE)))


def data_dir() -> str:
    return _env_path("REDIST_TEST_DATA", os.path.join(source_dir(), "tests", "data"))


def bin_dir() -> str:
    return _env_path("REDIST_BIN_DIR")


def state_dir() -> str:
    return _env_path("REDIST_TEST_STATE")


def mirror_dir() -> str:
    """The generated demo mirror that nginx serves (do not modify it: use
    copy_mirror() for tests that need to)."""
    return os.path.join(state_dir(), "mirror")


def nginx_dir() -> str:
    return os.path.join(state_dir(), "nginx")


_TEST_ID = re.compile(r"[A-Za-z0-9_]+")


def test_id() -> str | None:
    """The running test's name from REDIST_E2E_TEST (CTest sets it per test),
    or None outside CTest."""
    value = os.environ.get("REDIST_E2E_TEST")
    if not value:
        return None
    if not _TEST_ID.fullmatch(value):
        raise RuntimeError(f"REDIST_E2E_TEST={value!r}: expected [A-Za-z0-9_]+")
    return value


def test_state_dir() -> str:
    """$REDIST_TEST_STATE/e2e/<test>: this test's directories (scratch, HOME,
    XDG_*), shared with no other test; $REDIST_TEST_STATE/e2e outside CTest."""
    tid = test_id()
    return os.path.join(state_dir(), "e2e", tid) if tid else os.path.join(state_dir(), "e2e")


def nginx_namespace() -> str:
    """The path prefix of this test's URLs on the shared nginx: "/t/<test>",
    or "" outside CTest (tests/fixtures/nginx_fixture.py serves both)."""
    tid = test_id()
    return f"/t/{tid}" if tid else ""


def tool_path(name: str) -> str:
    return os.path.join(bin_dir(), name)


# ---------------------------------------------------------------------------
# Base URLs
# ---------------------------------------------------------------------------

def nginx_base_url(style: str = "autoindex") -> str:
    """Base URL of the mirror over HTTP, in this test's namespace, without a
    trailing slash.
    style="autoindex": directory URLs get nginx's autoindex listing;
    style="nvidia":    directory URLs get the generated NVIDIA-style index.html.
    Both serve the same files."""
    path = os.path.join(nginx_dir(), "base_url")
    try:
        with open(path) as f:
            base = f.read().strip() + nginx_namespace()
    except FileNotFoundError:
        raise RuntimeError(f"{path} is missing: the nginx fixture is not running "
                           "(tests/fixtures/nginx_fixture.py start)") from None
    if style == "autoindex":
        return base
    if style == "nvidia":
        return base + "/nvidia"
    raise ValueError(f"unknown listing style {style!r}")


def file_base_url(mirror: str | None = None) -> str:
    """file:// URL of a mirror directory (default: the shared demo mirror)."""
    path = os.path.abspath(mirror or mirror_dir())
    return "file://" + urllib.request.pathname2url(path)


def http_get(url: str, headers: dict | None = None, timeout: float = 10):
    """GET without proxies (loopback must stay local). Returns (status, headers,
    body bytes); HTTP errors are returned, not raised."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# ---------------------------------------------------------------------------
# nginx access log (one JSON object per request)
# ---------------------------------------------------------------------------

def access_log_path() -> str:
    return os.path.join(nginx_dir(), "access.log")


# The path of log_barrier()'s requests; access_log_since() leaves them out.
_BARRIER = "/__access_log_barrier__"


def log_barrier() -> None:
    """Returns once every request this test made so far is in the access log.
    nginx writes a request's line after the last byte went out, so a client
    can finish (and a test read the log) before it is there. nginx runs one
    worker, which handles its events one after another: once a request made
    now is logged, every earlier one is too."""
    if not os.path.exists(os.path.join(nginx_dir(), "base_url")):
        return  # no nginx, no log to wait for
    base = nginx_base_url()
    import time
    token = f"{_BARRIER}?{os.getpid()}.{time.monotonic_ns()}"
    start = _log_size()
    http_get(base + token)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(access_log_path(), "rb") as f:
                f.seek(start)
                if token.encode() in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"nginx did not log {token} within 30 s")


def access_log_mark() -> int:
    """Current end of the access log, once this test's requests so far are
    in it; pass it to access_log_since()."""
    log_barrier()
    return _log_size()


def _log_size() -> int:
    try:
        return os.path.getsize(access_log_path())
    except FileNotFoundError:
        return 0


def access_log_since(mark: int) -> list[dict]:
    """This test's requests logged after mark, oldest first. Keys: request,
    method, uri, request_uri, status, bytes_sent, body_bytes_sent, range,
    user_agent, request_time (all strings, as nginx writes them). "uri" is
    the path as if the test had no namespace (/cudnn/redist/...); the raw
    "request_uri" names the test. nginx writes each line as the request
    finishes; log_barrier() waits for it. Other tests' requests are left out
    (under CTest, nginx refuses any request outside a namespace with 421, so
    a request escaping this test's namespace fails instead of going
    uncounted)."""
    log_barrier()
    try:
        with open(access_log_path(), "rb") as f:
            f.seek(mark)
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    # Only whole lines: a line is written in one write(), but a read may
    # still catch another test's line half written.
    entries = [e for e in (json.loads(line) for line in data.split("\n")[:-1] if line.strip())
               if e["uri"] != _BARRIER]
    ns = nginx_namespace()
    return [e for e in entries if not ns or in_namespace(e["request_uri"], ns)]


def in_namespace(request_uri: str, ns: str) -> bool:
    """True when a raw request target lies under the path prefix ns."""
    return request_uri == ns or request_uri.startswith((ns + "/", ns + "?"))


# ---------------------------------------------------------------------------
# Running tools
# ---------------------------------------------------------------------------

# Variables that would make a run depend on the machine it runs on.
_SCRUBBED = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_HOME",
             "http_proxy", "https_proxy", "all_proxy", "ftp_proxy",
             "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY",
             "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "REDIST_TRUSTED_KEYS")


def tool_env(env: dict | None = None) -> dict:
    """The environment tools run with: the current one without CUDA and proxy
    variables, NO_PROXY for loopback, HOME and XDG_* under this test's state
    directory (shared by the cases of one test script: a case that counts
    downloads or needs a cold cache passes its own XDG_CACHE_HOME), then
    `env` on top (a value of None removes that variable)."""
    out = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    out["NO_PROXY"] = out["no_proxy"] = "127.0.0.1,localhost,::1"
    xdg = os.path.join(test_state_dir(), "xdg")
    out["XDG_CACHE_HOME"] = os.path.join(xdg, "cache")
    out["XDG_CONFIG_HOME"] = os.path.join(xdg, "config")
    out["XDG_DATA_HOME"] = os.path.join(xdg, "data")
    out["HOME"] = os.path.join(xdg, "home")  # never the real ~/.cache
    out.setdefault("LC_ALL", "C.UTF-8")
    for k, v in (env or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = str(v)
    return out


class ToolFailure(AssertionError):
    pass


def describe(res: subprocess.CompletedProcess) -> str:
    """A readable account of a run for assertion messages."""
    cmd = " ".join(str(a) for a in res.args)
    return (f"$ {cmd}\nexit code {res.returncode}\n"
            f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}")


def run_tool(name: str, *args, env: dict | None = None, check=None,
             timeout: float = DEFAULT_TIMEOUT, cwd: str | None = None,
             input: str | None = None) -> subprocess.CompletedProcess:
    """Runs $REDIST_BIN_DIR/<name> with args; returns a CompletedProcess with
    text stdout/stderr. check: None accepts any exit code; True requires 0;
    an int requires exactly that code (raises ToolFailure with the output).
    A run longer than `timeout` seconds raises subprocess.TimeoutExpired."""
    path = tool_path(name)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"tool {path} is missing: build it first")
    res = subprocess.run([path, *[str(a) for a in args]], env=tool_env(env), cwd=cwd,
                         input=input, stdin=None if input is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", timeout=timeout)
    if check is not None:
        want = 0 if check is True else int(check)
        if res.returncode != want:
            raise ToolFailure(f"expected exit code {want}\n{describe(res)}")
    return res


def run_in_pty(name: str, *args, columns: int | None = None, env: dict | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> subprocess.CompletedProcess:
    """Runs $REDIST_BIN_DIR/<name> with a pseudo-terminal as stdout (of
    `columns` columns, also in $COLUMNS, when given), so the tool sees a TTY;
    returns a CompletedProcess with what it wrote there (the pty turns "\n"
    into "\r\n") and its stderr, as text."""
    master, slave = pty.openpty()
    if columns is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        env = {**(env or {}), "COLUMNS": columns}
    cmd = [tool_path(name), *[str(a) for a in args]]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=slave, stderr=err, stdin=subprocess.DEVNULL, env=tool_env(env))
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=timeout)
        os.close(master)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, b"".join(chunks).decode(errors="replace"),
                                           err.read().decode(errors="replace"))


# ---------------------------------------------------------------------------
# Trees and files
# ---------------------------------------------------------------------------

class Node(NamedTuple):
    kind: str          # "file" | "dir" | "symlink" | "other"
    mode: int          # permission bits (S_IMODE)
    size: int          # bytes (0 for directories; link length for symlinks)
    digest: str | None  # sha256 of a file, target of a symlink, None otherwise


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_snapshot(root: str, ignore=None) -> dict[str, Node]:
    """Every entry under root (not root itself), keyed by '/'-separated path
    relative to root, without following symlinks. `ignore` is an optional
    regex; matching relative paths (and, for directories, their contents)
    are left out. Compare two snapshots with ==; diff_snapshots() explains."""
    pat = re.compile(ignore) if ignore else None
    out: dict[str, Node] = {}

    def walk(d: str, rel: str):
        for name in sorted(os.listdir(d)):
            full = os.path.join(d, name)
            r = f"{rel}/{name}" if rel else name
            if pat and pat.search(r):
                continue
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[r] = Node("symlink", mode, st.st_size, os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[r] = Node("dir", mode, 0, None)
                walk(full, r)
            elif stat.S_ISREG(st.st_mode):
                out[r] = Node("file", mode, st.st_size, sha256_file(full))
            else:
                out[r] = Node("other", mode, st.st_size, None)

    walk(root, "")
    return out


def diff_snapshots(a: dict, b: dict) -> str:
    """Human-readable differences between two snapshots ('' if equal)."""
    lines = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            lines.append(f"- {k} {a[k]}")
        elif k not in a:
            lines.append(f"+ {k} {b[k]}")
        elif a[k] != b[k]:
            lines.append(f"~ {k} {a[k]} -> {b[k]}")
    return "\n".join(lines)


def rm_tree(path: str) -> None:
    """Removes a tree even where it holds read-only directories."""
    def onerror(func, target, _exc):
        parent = os.path.dirname(target)
        try:
            os.chmod(parent, stat.S_IMODE(os.lstat(parent).st_mode) | 0o700)
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


def make_scratch_dir(test_id: str) -> str:
    """A fresh, empty directory for one test case under this test's state
    directory (test_id is usually self.id()). It is emptied at the start of
    the case and kept afterwards for post-mortems."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id).strip("._") or "scratch"
    path = os.path.join(test_state_dir(), "scratch", safe)
    rm_tree(path)
    os.makedirs(path)
    return path


def copy_mirror(dest: str, products=None) -> str:
    """Copies the demo mirror (or only the given products' trees) to dest, for
    tests that corrupt or edit it. Returns dest. Symlinks are copied as links."""
    src = mirror_dir()
    if not os.path.isfile(os.path.join(src, "mirror-info.json")):
        raise RuntimeError(f"{src} holds no demo mirror: start the nginx fixture first")
    rm_tree(dest)
    if products is None:
        shutil.copytree(src, dest, symlinks=True)
    else:
        os.makedirs(dest)
        shutil.copy2(os.path.join(src, "mirror-info.json"), dest)
        for product in products:
            shutil.copytree(os.path.join(src, product), os.path.join(dest, product),
                            symlinks=True)
    return dest


def load_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_json(path: str, value) -> None:
    """Writes JSON like the generator does (indent 4, trailing newline)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=4)
        f.write("\n")


# ---------------------------------------------------------------------------
# The demo mirror's contents
# ---------------------------------------------------------------------------

def mirror_info(mirror: str | None = None) -> dict:
    """mirror-info.json: labels per product, multi-block archives, files that
    vanish between releases, identical overlaps between components."""
    return load_json(os.path.join(mirror or mirror_dir(), "mirror-info.json"))


def write_xz_archive(root: str, rel: str, top: str, files: dict[str, bytes], preset: int | None = None) -> bytes:
    """Writes <root>/<rel>: a tar.xz (GNU format) of `files` ({path: bytes}
    under the top-level directory `top`, mode 0644). Returns its bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.GNU_FORMAT, preset=preset) as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
    data = buf.getvalue()
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return data


def _vli(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _pad4(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def xz_with_blocks(pieces: list[bytes]) -> bytes:
    """One .xz stream (CRC32 check) with one LZMA2 block per piece, each block
    header carrying both sizes (as xz -T writes them); an empty piece makes an
    empty block, as a multi-block writer that flushes with nothing buffered
    writes. Python's lzma module has no block API, so the container is built
    here (https://tukaani.org/xz/xz-file-format.txt)."""
    import lzma
    import zlib
    le32 = lambda v: v.to_bytes(4, "little")  # noqa: E731
    flags = b"\0\x01"  # CRC32
    out = bytearray(b"\xfd7zXZ\0" + flags + le32(zlib.crc32(flags)))
    records = []
    for piece in pieces:
        enc = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 20}])
        comp = enc.compress(piece) + enc.flush()
        # Flags 0xC0: both sizes present, one filter; LZMA2 (0x21), 1 property byte: a 1 MiB dictionary (16).
        body = b"\xc0" + _vli(len(comp)) + _vli(len(piece)) + b"\x21\x01\x10"
        header = _pad4(bytes([(len(body) + 1 + 4) // 4]) + body)  # +4: the CRC32 below
        header = bytes([len(header) // 4]) + header[1:]  # header size = (first byte + 1) * 4, CRC32 included
        header += le32(zlib.crc32(header))
        out += header + _pad4(comp) + le32(zlib.crc32(piece))
        records.append((len(header) + len(comp) + 4, len(piece)))
    index = b"\0" + _vli(len(records)) + b"".join(_vli(u) + _vli(n) for u, n in records)
    index = _pad4(index)
    index += le32(zlib.crc32(index))
    backward = le32(len(index) // 4 - 1) + flags
    out += index + le32(zlib.crc32(backward)) + backward + b"YZ"
    return bytes(out)


def write_xz_archive_blocks(root: str, rel: str, top: str, files: dict[str, bytes], cut: list[int]) -> bytes:
    """Like write_xz_archive, but the tar is cut into xz blocks at the byte
    offsets `cut` (sorted; a repeated offset makes an empty block)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
    tar = buf.getvalue()
    edges = [0, *cut, len(tar)]
    data = xz_with_blocks([tar[a:b] for a, b in zip(edges, edges[1:])])
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return data


def artifact_entry(rel: str, data: bytes) -> dict:
    """A manifest's artifact record for the archive bytes `data` at `rel`."""
    return {"relative_path": rel, "sha256": hashlib.sha256(data).hexdigest(),
            "md5": hashlib.md5(data).hexdigest(), "size": str(len(data))}


def manifest_path(product: str, label: str, mirror: str | None = None) -> str:
    return os.path.join(mirror or mirror_dir(), product, "redist", f"redistrib_{label}.json")


def load_manifest(product: str, label: str, mirror: str | None = None) -> dict:
    return load_json(manifest_path(product, label, mirror))


def artifact_path(product: str, relative_path: str, mirror: str | None = None) -> str:
    return os.path.join(mirror or mirror_dir(), product, "redist", relative_path)


def iter_artifacts(manifest: dict):
    """Yields (component, platform, variant or None, record) for every
    artifact in a manifest; record holds relative_path/sha256/md5/size.
    Handles a platform holding one artifact, a map of variants, or both."""
    for comp, entry in manifest.items():
        if not isinstance(entry, dict):
            continue
        for platform, value in entry.items():
            if not isinstance(value, dict):
                continue
            if "relative_path" in value:
                yield comp, platform, None, value
            for variant, rec in value.items():
                if isinstance(rec, dict) and "relative_path" in rec:
                    yield comp, platform, variant, rec


def selected_artifacts(product: str, label: str, platform: str, variant: str) -> dict:
    """relative_path -> record of what `--platform PLATFORM --cuda N` selects
    from a fixture release (variant "cudaN", plus artifacts without one)."""
    out = {}
    for _, plat, var, rec in iter_artifacts(load_manifest(product, label)):
        if plat == platform and var in (None, variant):
            out[rec["relative_path"]] = rec
    return out


def find_artifact(manifest: dict, component: str, platform: str, variant: str | None = None):
    """The record for one artifact (variant like "cuda12"), or KeyError."""
    value = manifest[component][platform]
    return value[variant] if variant else value


# ---------------------------------------------------------------------------
# Reliability tests: the fault-injecting server and tools run in the background
# ---------------------------------------------------------------------------

class FaultServer:
    """tests/fixtures/fault_server.py serving `root` on 127.0.0.1 (see its
    docstring for the fault specs). Faults are set per URL path through a
    file the server re-reads on every request; log() is the server's own
    request log (method, path, range, status, bytes_sent)."""

    def __init__(self, root: str, work: str, max_seconds: float = 600, port: int = 0):
        import sys
        import time
        self.root, self.work = os.path.abspath(root), os.path.abspath(work)
        os.makedirs(self.work, exist_ok=True)
        self.faults_file = os.path.join(self.work, "faults.json")
        port_file = os.path.join(self.work, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.set_faults({})
        script = os.path.join(source_dir(), "tests", "fixtures", "fault_server.py")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--root", self.root, "--port-file", port_file,
             "--faults", self.faults_file, "--max-seconds", str(max_seconds), "--port", str(port)],
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with open(port_file) as f:
                    self.port = int(f.read().strip())
                break
            except (FileNotFoundError, ValueError):
                if self.proc.poll() is not None:
                    raise RuntimeError("fault_server.py exited during startup")
                time.sleep(0.02)
        else:
            self.stop()
            raise RuntimeError("fault_server.py did not publish its port")
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "") -> str:
        return self.base + path

    def set_faults(self, faults: dict) -> None:
        """Replaces the faults ({"/url/path": spec}); "times" counters restart."""
        tmp = self.faults_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(faults, f)
        os.replace(tmp, self.faults_file)

    def reset(self) -> None:
        """Clears the request log and the "times" counters."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(self.url("/__control/reset"), data=b"", method="POST")
        with opener.open(req, timeout=10) as r:
            r.read()

    def log(self, path: str | None = None) -> list[dict]:
        """The request log (oldest first), optionally only requests for `path`."""
        status, _, body = http_get(self.url("/__control/log"), timeout=20)
        if status != 200:
            raise RuntimeError(f"fault server log: HTTP {status}")
        entries = json.loads(body)
        return [e for e in entries if path is None or e["path"] == path]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class BackgroundTool:
    """A tool started with Popen whose stderr is read by a thread, so a test
    can wait for a line (e.g. "redist-debug: paused at ...") while it runs."""

    def __init__(self, name: str, *args, env: dict | None = None):
        import threading
        path = tool_path(name)
        self.args = [path, *[str(a) for a in args]]
        self.proc = subprocess.Popen(self.args, env=tool_env(env), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self._lock = threading.Condition()
        self._err: list[str] = []
        self._out: list[str] = []
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stderr, self._err), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stdout, self._out), daemon=True)]
        for t in self._threads:
            t.start()

    def _pump(self, stream, sink):
        for line in stream:
            with self._lock:
                sink.append(line)
                self._lock.notify_all()
        with self._lock:
            self._lock.notify_all()

    @property
    def stderr(self) -> str:
        with self._lock:
            return "".join(self._err)

    @property
    def stdout(self) -> str:
        with self._lock:
            return "".join(self._out)

    def wait_for_stderr(self, text: str, timeout: float = 30, count: int = 1) -> bool:
        """True once `text` appeared on stderr (`count` times); False on
        timeout or exit."""
        import time
        deadline = time.monotonic() + timeout
        with self._lock:
            while "".join(self._err).count(text) < count:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not any(t.is_alive() for t in self._threads)):
                    return "".join(self._err).count(text) >= count
                self._lock.wait(min(left, 0.1))
            return True

    def kill(self) -> None:
        """SIGKILL (no chance to clean up), then reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> subprocess.CompletedProcess:
        """Waits for the exit; returns a CompletedProcess like run_tool()."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._close()
        return subprocess.CompletedProcess(self.args, self.proc.returncode, self.stdout, self.stderr)

    def _close(self) -> None:
        for t in self._threads:
            t.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


# ---- Ed25519 keys that sign a mirror's recompressed copies (openssl, as an operator would) ----

def make_key_pair(directory: str, name: str = "mirror") -> tuple[str, str]:
    """`openssl genpkey -algorithm ed25519` into <directory>/<name>.key and its
    public half (`openssl pkey -pubout`) into <name>.pub."""
    os.makedirs(directory, exist_ok=True)
    key, pub = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".pub")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
    return key, pub


def sign_file(key: str, path: str) -> str:
    """The detached signature <path>.sig, as `openssl pkeyutl -sign -rawin` writes it."""
    subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", key, "-rawin", "-in", path, "-out", path + ".sig"],
                   check=True, capture_output=True)
    return path + ".sig"


def verify_signature(pub: str, path: str, sig: str) -> bool:
    """Whether openssl accepts `sig` as pub's signature of the file at `path`."""
    return subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub, "-rawin", "-in", path,
                           "-sigfile", sig], capture_output=True).returncode == 0


def key_fingerprint(pub: str) -> str:
    """What redist names a key by: the SHA-256 of its DER public key."""
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub, "-outform", "DER"], check=True,
                         capture_output=True).stdout
    return hashlib.sha256(der).hexdigest()


def hash_list(data: bytes, piece: int) -> str:
    """A hash list as receipts and recompressed copies record one (archive/sha256.hpp): the
    SHA-256 of the raw SHA-256 digests of the consecutive `piece`-byte pieces; with one
    piece (or none), the plain SHA-256."""
    pieces = [hashlib.sha256(data[at:at + piece]).digest() for at in range(0, len(data), piece)]
    return pieces[0].hex() if len(pieces) == 1 else hashlib.sha256(b"".join(pieces)).hexdigest()


RECEIPT_PIECE = 8 << 20  # archive/sha256.hpp receipt_piece_bytes


def _tar_time(member: tarfile.TarInfo, key: str) -> str:
    """An entry's mtime or atime as tree_digest writes it: "<seconds>.<nanoseconds>" as libarchive
    reads it (a pax record's decimal fraction, else the header's whole seconds; a GNU or ustar
    header as Python writes one has no atime), or "-" when the archive sets none."""
    pax = member.pax_headers.get(key)
    if pax is not None:
        whole, _, frac = pax.partition(".")
        return f"{int(whole)}.{int((frac + '0' * 9)[:9])}"
    return f"{int(member.mtime)}.0" if key == "mtime" else "-"


def tree_digest(tar: bytes) -> str:
    """The digest a recompressed copy's record states of the tree it unpacks to (tree_sha256;
    archive/unpack.hpp tree_digest), computed from the tar alone: every entry below the top-level
    directory, sorted by path, as nine NUL-terminated fields: kind, path, mode (octal), size,
    piece size, content digest (as receipts record it), link target, mtime, atime. A hardlink
    takes its target's mode, size and digest, and sets no times."""
    entries, files = [], {}
    rel = lambda name: "/".join([p for p in name.split("/") if p not in ("", ".")][1:])
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        for m in t.getmembers():
            path = rel(m.name)
            if not path:
                continue
            times = (_tar_time(m, "mtime"), _tar_time(m, "atime"))
            mode = m.mode & 0o777
            if m.islnk():
                target = rel(m.linkname)
                size, digest, piece, mode = files[target]
                entries.append(("hardlink", path, mode, size, piece, digest, target, "-", "-"))
            elif m.isfile():
                data = t.extractfile(m).read()
                piece = RECEIPT_PIECE if len(data) > RECEIPT_PIECE else 0
                digest = hash_list(data, piece) if piece else hashlib.sha256(data).hexdigest()
                files[path] = (len(data), digest, piece, mode)
                entries.append(("file", path, mode, len(data), piece, digest, "", *times))
            elif m.isdir():
                entries.append(("dir", path, mode, 0, 0, "", "", *times))
            elif m.issym():
                entries.append(("symlink", path, mode, 0, 0, "", m.linkname, *times))
    entries.sort(key=lambda e: e[1].encode())
    h = hashlib.sha256()
    for kind, path, mode, size, piece, digest, link, mtime, atime in entries:
        for field in (kind, path, format(mode, "o"), str(size), str(piece), digest, link, mtime, atime):
            h.update(field.encode() + b"\0")
    return h.hexdigest()
