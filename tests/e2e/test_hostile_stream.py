"""Hostile sources, seen from the download/stream/unpack side: a
FIFO behind a file:// mirror, "%2f" traversal through a file:// mirror, an
https -> http redirect, an xz bomb of the right size but the wrong hash (and
one with the right hash), an archive entry under .redist/, a pax hardlink
that carries data, and oversized manifests and indexes.

Each case runs over a prefix that already holds an install, inside a case
directory of its own (the sandbox). It checks the exit code, the one-line
message, that the prefix is byte-for-byte unchanged, that nothing else in
the sandbox changed (files, and the modes of every directory above the
prefix), and that no stage is left behind."""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
import unittest

import support
from test_fetch import BOOKKEEPING, fetch, installed, one_line_error, rewrite_artifact, staging_leftovers, tar_xz

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import nginx_fixture  # noqa: E402  (terminate)
import test_https  # noqa: E402  (certificates, free ports)

LABEL, OLD, PLATFORM, CUDA = "9.27.0", "9.10.1", "linux-x86_64", "12"
VARIANT = f"cuda{CUDA}"
TOP = f"cudnn-{PLATFORM}-9.27.0.42_cuda{CUDA}-archive"
MiB = 1 << 20
# What a tool run may take at most here: a FIFO must not hang it.
RUN_TIMEOUT = 60


def setUpModule():
    os.umask(0o022)


# ---------------------------------------------------------------------------
# Archives
# ---------------------------------------------------------------------------

def _xz(data: bytes, preset: int = 0) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ, preset=preset)


def xz_bomb(size: int = 1 << 30) -> bytes:
    """A .tar.xz of TOP/zeros, `size` bytes of zeros (a multiple of 64 MiB;
    default 1 GiB), in ~10 KB per 64 MiB: concatenated xz streams (the
    decoder reads them as one), so it is built in well under a second."""
    info = tarfile.TarInfo(f"{TOP}/zeros")
    info.size, info.mode, info.mtime = size, 0o644, 1735689600
    header = tarfile.TarInfo(TOP)
    header.type, header.mode, header.mtime = tarfile.DIRTYPE, 0o755, 1735689600
    head = header.tobuf(tarfile.GNU_FORMAT) + info.tobuf(tarfile.GNU_FORMAT)
    zeros64 = _xz(bytes(64 * MiB))
    return _xz(head) + zeros64 * (size // (64 * MiB)) + _xz(bytes(1024))


def pad_xz(data: bytes, size: int) -> bytes:
    """xz stream padding: NUL bytes in multiples of four after a stream."""
    assert size >= len(data) and (size - len(data)) % 4 == 0, (size, len(data))
    return data + bytes(size - len(data))


def pax_tar_xz(members) -> bytes:
    """(name, kind, payload[, linkname]) members as a pax tar, xz'd. A
    "hardlink" with a payload carries data, which pax allows and tarfile
    writes as asked."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, payload, *link in members:
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime = 0o755 if kind == "dir" else 0o644, 1735689600
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
                continue
            if kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, link[0]
                ti.pax_headers = {"comment": "hardlink with data"}
            ti.size = len(payload)
            tf.addfile(ti, io.BytesIO(payload))
    return _xz(buf.getvalue(), preset=6)


def good_members(text: bytes = b"good\n"):
    return [(TOP, "dir", 0o755, b""), (f"{TOP}/LICENSE", "file", 0o644, b"license\n"),
            (f"{TOP}/lib", "dir", 0o755, b""), (f"{TOP}/lib/libgood.so.1", "file", 0o755, text)]


def set_record(mirror, size, sha256):
    """Points the 9.27.0 cudnn artifact's manifest record at size/sha256."""
    mpath = support.manifest_path("cudnn", LABEL, mirror)
    doc = support.load_json(mpath)
    rec = support.find_artifact(doc, "cudnn", PLATFORM, VARIANT)
    rec["size"], rec["sha256"] = str(size), sha256
    support.save_json(mpath, doc)
    return rec


def write_artifact(mirror, data: bytes):
    rec = support.find_artifact(support.load_manifest("cudnn", LABEL, mirror), "cudnn", PLATFORM, VARIANT)
    path = support.artifact_path("cudnn", rec["relative_path"], mirror)
    support.rm_tree(path)
    with open(path, "wb") as f:
        f.write(data)
    return path


# ---------------------------------------------------------------------------
# The sandbox
# ---------------------------------------------------------------------------

class HostileStream(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.pristine = os.path.join(cls.root, "pristine")
        fetch(OLD, "--prefix", cls.pristine, "--base-url", support.nginx_base_url(), "--platform", PLATFORM,
              "--cuda", CUDA, tool="cudnn-fetch", check=0)

    def setUp(self):
        name = self.id().rsplit(".", 1)[1]
        self.case = os.path.join(self.root, name)
        support.rm_tree(self.case)
        os.makedirs(self.case)
        # Deep, so that an escape from the prefix or its stage still lands in the case directory.
        self.prefix = os.path.join(self.case, "a", "b", "prefix")
        os.makedirs(os.path.dirname(self.prefix))
        shutil.copytree(self.pristine, self.prefix, symlinks=True)
        self.mirror = support.copy_mirror(os.path.join(self.case, "mirror"), ["cudnn"])
        self.outside = os.path.join(self.case, "outside")
        os.makedirs(self.outside)
        self.cwd = os.path.join(self.case, "cwd")
        os.makedirs(self.cwd)
        # Servers' own files (logs, pid files) live beside the sandbox, not in it.
        self.aux = self.case + ".aux"
        support.rm_tree(self.aux)
        os.makedirs(self.aux)

    def sandbox(self):
        """Everything in the case directory but the prefix (kinds, modes,
        contents), plus the modes of every directory from the prefix up to /."""
        rel_prefix = os.path.relpath(self.prefix, self.case).replace(os.sep, "/")
        snap = support.tree_snapshot(self.case, ignore="^" + rel_prefix.replace(".", r"\.") + "$")
        modes, d = [], os.path.dirname(self.prefix)
        while True:
            st = os.lstat(d)
            modes.append((d, stat.S_IMODE(st.st_mode), st.st_uid))
            if d == "/":
                break
            d = os.path.dirname(d)
        return snap, modes

    def run_hostile(self, *args, tool="cudnn-fetch", label=LABEL):
        """Runs a fetch of `label` into the prefix; returns the result after
        checking that neither the prefix nor the sandbox changed."""
        before = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)
        sandbox_before = self.sandbox()
        argv = [label, "--prefix", self.prefix, "--platform", PLATFORM, "--cuda", CUDA, *args]
        started = time.monotonic()
        res = fetch(*argv, tool=tool, cwd=self.cwd, timeout=RUN_TIMEOUT)
        self.elapsed = time.monotonic() - started
        after = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)
        self.assertEqual(after, before, "the prefix changed\n" + support.diff_snapshots(before, after) +
                         "\n" + support.describe(res))
        self.assertEqual(staging_leftovers(self.prefix), [], support.describe(res))
        sandbox_after = self.sandbox()
        self.assertEqual(sandbox_after[0], sandbox_before[0],
                         "the sandbox changed\n" + support.diff_snapshots(sandbox_before[0], sandbox_after[0]))
        self.assertEqual(sandbox_after[1], sandbox_before[1], "a directory above the prefix changed")
        return res

    def fetch_with_file_size_limit(self, limit, *args, sigxfsz_kills=True, cache=None):
        """A cudnn-fetch that may write no file larger than `limit` bytes. With
        sigxfsz_kills, a larger write kills it (SIGXFSZ: proof that a cap held);
        otherwise the write fails with EFBIG, as on a full disk. Without a
        cache directory, it runs with --no-cache."""
        def limit_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            if not sigxfsz_kills:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited across exec
        argv = [support.tool_path("cudnn-fetch"), LABEL, "--prefix", self.prefix, "--platform", PLATFORM,
                "--cuda", CUDA, *(["--cache-dir", cache] if cache else ["--no-cache"]), *args]
        return subprocess.run(argv, env=support.tool_env(), cwd=self.cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                              timeout=RUN_TIMEOUT, preexec_fn=limit_files)

    def assertFails(self, res, code, *needles):
        self.assertEqual(res.returncode, code, support.describe(res))
        line = one_line_error(self, res, *needles)
        self.assertNotIn("\x1b", line)
        return line

    # -- file:// sources ------------------------------------------------------

    def test_fifo_behind_a_file_mirror_fails_at_once(self):
        path = write_artifact(self.mirror, b"")
        os.unlink(path)
        os.mkfifo(path)
        url = support.file_base_url(self.mirror)
        res = self.run_hostile("--base-url", url, "--stall-timeout", "5")
        self.assertFails(res, 6, "refusing a FIFO", url + "/cudnn/redist/")
        self.assertLess(self.elapsed, 15, "a FIFO must be refused, not waited on")

    def test_fifo_mirror_moves_on_to_the_next_source(self):
        path = write_artifact(self.mirror, b"")
        os.unlink(path)
        os.mkfifo(path)
        good = support.copy_mirror(os.path.join(self.case, "good"), ["cudnn"])
        before = support.tree_snapshot(self.prefix, ignore=BOOKKEEPING)
        res = fetch(LABEL, "--prefix", self.prefix, "--platform", PLATFORM, "--cuda", CUDA,
                    "--mirror", support.file_base_url(self.mirror), "--base-url", support.file_base_url(good),
                    tool="cudnn-fetch", cwd=self.cwd, timeout=RUN_TIMEOUT)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertNotEqual(installed(self.prefix), before)
        verify = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(verify.returncode, 0, support.describe(verify))

    def test_percent_encoded_traversal_in_a_file_mirror(self):
        # A real archive with the right hash waits outside the mirror; the
        # manifest's relative_path reaches for it with "..%2f". Whoever
        # refuses it first -- the manifest parser (exit 4) or the file reader
        # (exit 6) -- nothing may be read, installed or described.
        data = tar_xz(good_members(b"from outside\n"))
        secret = os.path.join(self.outside, "x.tar.xz")
        with open(secret, "wb") as f:
            f.write(data)
        digest = hashlib.sha256(data).hexdigest()
        rec = set_record(self.mirror, len(data), digest)
        depth = os.path.relpath(self.outside, os.path.join(self.mirror, "cudnn", "redist")).count("..")
        rec["relative_path"] = "..%2f" * depth + "outside%2fx.tar.xz"
        mpath = support.manifest_path("cudnn", LABEL, self.mirror)
        doc = support.load_json(mpath)
        support.find_artifact(doc, "cudnn", PLATFORM, VARIANT)["relative_path"] = rec["relative_path"]
        support.save_json(mpath, doc)
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertIn(res.returncode, (4, 6), support.describe(res))
        line = one_line_error(self, res)
        self.assertNotIn(digest, line)
        self.assertNotIn(str(len(data)) + " bytes", line)

    # -- TLS downgrade --------------------------------------------------------

    def test_https_to_http_redirect_is_refused(self):
        tls = TlsRedirector(os.path.join(self.aux, "tls"), self.mirror)
        try:
            # Control: a redirect from https to https is followed.
            res = fetch(LABEL, "--prefix", os.path.join(self.case, "control"), "--platform", PLATFORM,
                        "--cuda", CUDA, "--base-url", tls.base + "/moved", "--ca-file", tls.ca,
                        tool="cudnn-fetch", cwd=self.cwd, timeout=RUN_TIMEOUT)
            self.assertEqual(res.returncode, 0, support.describe(res))
            support.rm_tree(os.path.join(self.case, "control"))

            res = self.run_hostile("--base-url", tls.base + "/downgrade", "--ca-file", tls.ca)
            line = self.assertFails(res, 6, "refusing a redirect from https to http://",
                                    tls.base + "/downgrade/cudnn/redist/")
            self.assertIn(".tar.xz", line)
        finally:
            tls.stop()

    # -- unverified bytes -----------------------------------------------------

    def bomb_and_good(self):
        bomb = xz_bomb()
        good = tar_xz(good_members())
        size = (max(len(bomb), len(good)) + 3) // 4 * 4
        return pad_xz(bomb, size), pad_xz(good, size)

    def test_bomb_with_the_wrong_hash_is_an_integrity_failure(self):
        bomb, good = self.bomb_and_good()
        write_artifact(self.mirror, bomb)
        set_record(self.mirror, len(good), hashlib.sha256(good).hexdigest())
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 5, "sha256")
        # No file beyond the cap was written: a 1 GiB one would be killed by SIGXFSZ.
        res = self.fetch_with_file_size_limit(128 * MiB, "--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 5, "sha256")

    def test_unpack_failure_before_the_hash_is_known_lets_the_hash_decide(self):
        # The stage's writes fail (EFBIG, as ENOSPC would) long before the
        # cap; the download still runs to its end, the hash says the bytes
        # are wrong, and the next source is tried.
        bomb, good = self.bomb_and_good()
        base = support.copy_mirror(os.path.join(self.case, "base"), ["cudnn"])
        write_artifact(self.mirror, bomb)
        write_artifact(base, good)
        for m in (self.mirror, base):
            set_record(m, len(good), hashlib.sha256(good).hexdigest())
        res = self.fetch_with_file_size_limit(8 * MiB, "--base-url", support.file_base_url(self.mirror),
                                              sigxfsz_kills=False)
        self.assertFails(res, 5, "sha256")
        res = self.fetch_with_file_size_limit(8 * MiB, "--mirror", support.file_base_url(self.mirror),
                                              "--base-url", support.file_base_url(base), sigxfsz_kills=False)
        self.assertEqual(res.returncode, 0, support.describe(res))
        self.assertIn("lib/libgood.so.1", installed(self.prefix))

    def test_bomb_with_the_wrong_hash_moves_on_to_the_next_source(self):
        bomb, good = self.bomb_and_good()
        base = support.copy_mirror(os.path.join(self.case, "base"), ["cudnn"])
        write_artifact(self.mirror, bomb)
        write_artifact(base, good)
        for m in (self.mirror, base):
            set_record(m, len(good), hashlib.sha256(good).hexdigest())
        server = support.FaultServer(self.mirror, os.path.join(self.aux, "server"))
        try:
            res = fetch(LABEL, "--prefix", self.prefix, "--platform", PLATFORM, "--cuda", CUDA,
                        "--mirror", server.base, "--base-url", support.file_base_url(base),
                        tool="cudnn-fetch", cwd=self.cwd, timeout=RUN_TIMEOUT)
            self.assertEqual(res.returncode, 0, support.describe(res))
            self.assertTrue(any(e["path"].endswith(".tar.xz") and e["status"] == 200 for e in server.log()),
                            "the mirror was not asked first")
        finally:
            server.stop()
        got = installed(self.prefix)
        self.assertIn("lib/libgood.so.1", got)
        self.assertNotIn("zeros", got)
        verify = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(verify.returncode, 0, support.describe(verify))

    def test_bomb_with_the_right_hash_is_unsafe(self):
        bomb = xz_bomb()
        write_artifact(self.mirror, bomb)
        set_record(self.mirror, len(bomb), hashlib.sha256(bomb).hexdigest())
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 7, "expands to more than 64 MiB", "--max-expansion")

    def test_max_expansion_zero_lifts_the_cap(self):
        # 128 MiB of zeros in ~20 KB: refused by default, installed when the
        # user says the archive is genuine.
        bomb = xz_bomb(128 * MiB)
        write_artifact(self.mirror, bomb)
        set_record(self.mirror, len(bomb), hashlib.sha256(bomb).hexdigest())
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 7, "expands to more than 64 MiB")
        res = fetch(LABEL, "--prefix", self.prefix, "--platform", PLATFORM, "--cuda", CUDA,
                    "--base-url", support.file_base_url(self.mirror), "--max-expansion", "0",
                    tool="cudnn-fetch", cwd=self.cwd, timeout=RUN_TIMEOUT)
        self.assertEqual(res.returncode, 0, support.describe(res))
        got = installed(self.prefix)
        self.assertEqual([n.size for p, n in got.items() if p.rsplit("/", 1)[-1] == "zeros"], [128 * MiB])
        verify = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(verify.returncode, 0, support.describe(verify))

    def test_a_failed_cache_write_gives_up_the_cache_copy_not_the_download(self):
        # The compressed archive (9 MiB of noise) cannot be written to the
        # cache's .part file (EFBIG at 4 MiB, as ENOSPC would), while every
        # file it holds can. The hash must still decide: the right bytes
        # install (uncached), wrong ones are an integrity failure.
        members = good_members() + [(f"{TOP}/lib/noise{i}.bin", "file", 0o644, os.urandom(3 * MiB))
                                    for i in range(3)]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for name, kind, mode, payload in members:
                ti = tarfile.TarInfo(name)
                ti.mode, ti.mtime = mode, 1735689600
                if kind == "dir":
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                else:
                    ti.size = len(payload)
                    tf.addfile(ti, io.BytesIO(payload))
        data = _xz(buf.getvalue())
        rec = rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, VARIANT, data)
        cache = os.path.join(self.aux, "cache")
        res = self.fetch_with_file_size_limit(4 * MiB, "--base-url", support.file_base_url(self.mirror),
                                              sigxfsz_kills=False, cache=cache)
        self.assertEqual(res.returncode, 0, support.describe(res))
        # Said, as for a split download: the archive is not cached.
        self.assertIn("cudnn: warning: downloading without the cache", res.stderr)
        self.assertIn("lib/noise2.bin", installed(self.prefix))
        blobs = os.path.join(cache, "blobs", "sha256")
        self.assertEqual([n for n in os.listdir(blobs) if n.startswith(rec["sha256"])] if os.path.isdir(blobs)
                         else [], [], "a partial blob must not be kept, let alone published")
        verify = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(verify.returncode, 0, support.describe(verify))

        # The same bytes under a wrong hash: integrity, not a filesystem error.
        # A fresh cache: the old one would (rightly) report the rewritten
        # manifest as upstream drift, on lines of its own.
        set_record(self.mirror, len(data), "0" * 64)
        res = self.fetch_with_file_size_limit(4 * MiB, "--base-url", support.file_base_url(self.mirror),
                                              "--force", sigxfsz_kills=False, cache=cache + "-2")
        self.assertEqual(res.returncode, 5, support.describe(res))
        errors = [l for l in res.stderr.splitlines() if l.strip() and "warning: downloading without the cache" not in l]
        self.assertEqual(len(errors), 1, support.describe(res))
        self.assertIn("sha256", errors[0])

    # -- unpacking ------------------------------------------------------------

    def test_entry_under_dot_redist_is_unsafe(self):
        receipt = b'{"component": "cudnn", "files": [{"path": "../../../outside/victim"}]}\n'
        data = tar_xz(good_members() + [(f"{TOP}/.redist", "dir", 0o755, b""),
                                        (f"{TOP}/.redist/receipts", "dir", 0o755, b""),
                                        (f"{TOP}/.redist/receipts/evil.json", "file", 0o644, receipt)])
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, VARIANT, data)
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 7, "reserved", f"{TOP}/.redist")
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "receipts", "evil.json")))

    def test_hardlink_with_data_is_unsafe(self):
        data = pax_tar_xz([(TOP, "dir", b""), (f"{TOP}/lib", "dir", b""),
                           (f"{TOP}/lib/a.so", "file", b"original\n"),
                           (f"{TOP}/lib/b.so", "hardlink", b"rewritten!\n", f"{TOP}/lib/a.so")])
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, VARIANT, data)
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 7, "hardlink entry carries data", f"{TOP}/lib/b.so")

    def test_control_characters_in_entry_names_are_escaped(self):
        data = tar_xz(good_members() + [(f"{TOP}/\x1b]2;pwned\x07/../../x", "file", 0o644, b"x")])
        rewrite_artifact(self.mirror, "cudnn", LABEL, "cudnn", PLATFORM, VARIANT, data)
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 7, "\\x1b]2;pwned\\x07")

    # -- oversized documents --------------------------------------------------

    def test_huge_manifest_is_a_bad_manifest(self):
        mpath = support.manifest_path("cudnn", LABEL, self.mirror)
        with open(mpath, "r+b") as f:
            f.truncate(100 * MiB)  # sparse: costs no disk
        res = self.run_hostile("--base-url", support.file_base_url(self.mirror))
        self.assertFails(res, 4, "manifest larger than 64 MiB")
        res = self.run_hostile("--manifest", mpath)
        self.assertFails(res, 4, "manifest larger than 64 MiB")

        server = support.FaultServer(self.mirror, os.path.join(self.aux, "server"))
        try:
            res = self.run_hostile("--base-url", server.base)
            self.assertFails(res, 4, "manifest larger than 64 MiB", server.base)
            # Without a Content-Length the cap holds while the body streams in.
            server.set_faults({f"/cudnn/redist/redistrib_{LABEL}.json": {"no_content_length": True}})
            res = self.run_hostile("--base-url", server.base)
            self.assertFails(res, 4, "manifest larger than 64 MiB")
        finally:
            server.stop()

    def test_huge_index_is_a_bad_manifest(self):
        big = os.path.join(self.mirror, "big-index.html")
        with open(big, "wb") as f:
            f.truncate(20 * MiB)
        server = support.FaultServer(self.mirror, os.path.join(self.aux, "server"))
        try:
            server.set_faults({"/cudnn/redist/": {"serve": "/big-index.html"}})
            res = self.run_hostile("--base-url", server.base, label="latest")
            self.assertFails(res, 4, "index larger than 16 MiB", server.base + "/cudnn/redist/")
            res = support.run_tool("redist", "versions", "cudnn", "--base-url", server.base, "--no-cache")
            self.assertFails(res, 4, "index larger than 16 MiB")
        finally:
            server.stop()


class TlsRedirector:
    """nginx with TLS on loopback serving `root` under /moved/ (reached by an
    https -> https redirect from /moved-from/...) and answering everything
    under /downgrade/ with the manifest, but every .tar.xz with a redirect
    to the same path on the plain-http demo nginx."""

    def __init__(self, d: str, root: str):
        os.makedirs(d, exist_ok=True)
        test_https.make_certificates(d)
        self.ca = os.path.join(d, "ca.pem")
        plain = support.nginx_base_url()
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(d, "temp", sub), exist_ok=True)
        self.pid = None

        def conf_for_port(port: int) -> str:
            conf = os.path.join(d, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""# generated by tests/e2e/test_hostile_stream.py
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
daemon on;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    default_type application/octet-stream;
    access_log {d}/access.log;
    client_body_temp_path {d}/temp/client_body;
    proxy_temp_path {d}/temp/proxy;
    fastcgi_temp_path {d}/temp/fastcgi;
    uwsgi_temp_path {d}/temp/uwsgi;
    scgi_temp_path {d}/temp/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {d}/server.pem;
        ssl_certificate_key {d}/server.key;
        location ~ ^/downgrade(/.*\\.tar\\.xz)$ {{ return 302 {plain}$1; }}
        location ~ ^/downgrade(/.*)$ {{ alias {root}$1; }}
        location ~ ^/moved(/.*)$ {{ return 302 https://127.0.0.1:{port}/served$1; }}
        location ~ ^/served(/.*)$ {{ alias {root}$1; }}
    }}
}}
""")
            return conf

        port = nginx_fixture.start_on_free_port(d, os.path.join(d, "error.log"), conf_for_port)
        self.pid = nginx_fixture.wait_pid_file(os.path.join(d, "nginx.pid"))
        self.base = f"https://127.0.0.1:{port}"

    def stop(self):
        if self.pid:
            nginx_fixture.terminate(self.pid)
            self.pid = None


if __name__ == "__main__":
    unittest.main()
