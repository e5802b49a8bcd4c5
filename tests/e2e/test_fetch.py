"""`cudnn-fetch` and `redist fetch` end to end, against nginx on loopback and
file:// mirrors: the installed tree must equal the tree computed here from
the archive itself (Python's tarfile/zipfile, independent of the C++ code);
failures (integrity, conflicts) must leave the prefix exactly as it was; the
install lifecycle (no-op re-run, --force, upgrade/downgrade, verify, remove,
--json, --quiet, CUDA detection)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import tarfile
import threading
import unittest
import zipfile

import support
from support import Node

# Directories the tool creates itself (prefix/share/licenses/<component>, ...)
# get 0777 & ~umask; pin the umask so expected modes are well defined.
UMASK = 0o022
DEFAULT_DIR_MODE = 0o777 & ~UMASK
REDIST_DIR = r"^\.redist(/|$)"
# The lock file and the staging area (checked separately: staging_leftovers).
BOOKKEEPING = r"^\.redist/(lock|staging)$"


def setUpModule():
    os.umask(UMASK)


# ---------------------------------------------------------------------------
# The expected tree, computed from the archive with Python only
# ---------------------------------------------------------------------------

def _archive_members(path: str):
    """(name, kind, mode, data, target) for every member of a tar.* or zip."""
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            for zi in zf.infolist():
                mode = (zi.external_attr >> 16) & 0o7777
                if zi.is_dir():
                    yield zi.filename.rstrip("/"), "dir", mode or 0o755, b"", ""
                else:
                    yield zi.filename, "file", mode or 0o644, zf.read(zi), ""
        return
    with tarfile.open(path, "r:*") as tf:
        for m in tf.getmembers():
            name = m.name.rstrip("/")
            if m.isdir():
                yield name, "dir", m.mode, b"", ""
            elif m.issym():
                yield name, "symlink", 0o777, b"", m.linkname
            elif m.islnk():
                yield name, "file", tf.getmember(m.linkname).mode, tf.extractfile(m.linkname).read(), ""
            elif m.isfile():
                yield name, "file", m.mode, tf.extractfile(m).read(), ""
            else:
                raise AssertionError(f"{path}: unexpected member type for {m.name}")


@functools.lru_cache(maxsize=None)
def _expected_cached(path: str, component: str, mtime: float, size: int):
    out: dict[str, Node] = {}

    def add_dir(rel, mode):
        out[rel] = Node("dir", mode & 0o1777, 0, None)

    def ensure_parents(rel):
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p not in out:
                add_dir(p, DEFAULT_DIR_MODE)

    tops = set()
    for name, kind, mode, data, target in _archive_members(path):
        parts = [p for p in name.split("/") if p not in ("", ".")]
        tops.add(parts[0])
        rel_parts = parts[1:]
        if not rel_parts:
            continue  # the top-level directory itself
        if len(rel_parts) == 1 and kind != "dir":
            # Top-level files (LICENSE, ...) go to share/licenses/<component>/.
            rel = f"share/licenses/{component}/{rel_parts[0]}"
        else:
            rel = "/".join(rel_parts)
        ensure_parents(rel)
        if kind == "dir":
            add_dir(rel, mode)
        elif kind == "symlink":
            out[rel] = Node("symlink", 0o777, len(target.encode()), target)
        else:
            # Permission bits kept, setuid/setgid dropped.
            out[rel] = Node("file", mode & 0o1777, len(data), hashlib.sha256(data).hexdigest())
    if len(tops) != 1:
        raise AssertionError(f"{path}: expected one top-level directory, found {sorted(tops)}")
    return out


def expected_tree(archive: str, component: str) -> dict[str, Node]:
    st = os.stat(archive)
    return dict(_expected_cached(os.path.abspath(archive), component, st.st_mtime, st.st_size))


def merge_trees(*trees) -> dict[str, Node]:
    """Union of several components' trees; an overlap must be identical."""
    out: dict[str, Node] = {}
    for t in trees:
        for k, v in t.items():
            if k in out and out[k] != v:
                raise AssertionError(f"components disagree at {k}: {out[k]} vs {v}")
            out[k] = v
    return out


def artifact_file(product, label, component, platform, variant=None, mirror=None):
    rec = support.find_artifact(support.load_manifest(product, label, mirror), component, platform, variant)
    return support.artifact_path(product, rec["relative_path"], mirror), rec


def installed(prefix: str) -> dict[str, Node]:
    return support.tree_snapshot(prefix, ignore=REDIST_DIR)


def staging_leftovers(prefix: str) -> list[str]:
    d = os.path.join(prefix, ".redist", "staging")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


# ---------------------------------------------------------------------------
# Running the tools
# ---------------------------------------------------------------------------

def fetch(*args, tool="redist", cache=False, **kw):
    """Runs `redist fetch ...` (or cudnn-fetch). By default without the
    download cache, so every run really downloads (tests count requests and
    serve corrupted copies whose manifest sha256 the cache already holds)."""
    argv = (["fetch"] if tool == "redist" else []) + [str(a) for a in args]
    if not cache:
        argv.append("--no-cache")
    return support.run_tool(tool, *argv, **kw)


def one_line_error(test, res, *needles):
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    test.assertEqual(len(lines), 1, support.describe(res))
    for n in needles:
        test.assertIn(n, lines[0], support.describe(res))
    return lines[0]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that stops reading (size mismatch) is expected here


class LocalHttp:
    """A plain HTTP server on loopback (in a thread) for a mirror copy: the
    shared nginx serves only the pristine demo mirror."""

    def __init__(self, root):
        handler = functools.partial(QuietHandler, directory=root)
        self.server = QuietServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def rewrite_artifact(mirror, product, label, component, platform, variant, data: bytes,
                     size=None, sha256=None):
    """Replaces an artifact of a mirror copy and records its size/sha256 (or
    the given, deliberately wrong, ones) in the manifest copy."""
    mpath = support.manifest_path(product, label, mirror)
    doc = support.load_json(mpath)
    rec = support.find_artifact(doc, component, platform, variant)
    with open(support.artifact_path(product, rec["relative_path"], mirror), "wb") as f:
        f.write(data)
    rec["size"] = str(len(data) if size is None else size)
    rec["sha256"] = hashlib.sha256(data).hexdigest() if sha256 is None else sha256
    rec["md5"] = hashlib.md5(data).hexdigest()
    support.save_json(mpath, doc)
    return rec


def tar_xz(members) -> bytes:
    """members: (name, kind, mode, payload): kind "file" (payload: bytes),
    "dir", "symlink"/"hardlink" (payload: link target), "chr"/"blk"
    (payload: (major, minor)), "fifo". Names are written verbatim (tarfile
    does not sanitize on writing). Compressed with the xz CLI."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, mode, payload in members:
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime, ti.uid, ti.gid = mode, 1735689600, 0, 0
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, payload
                tf.addfile(ti)
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, payload
                tf.addfile(ti)
            elif kind in ("chr", "blk"):
                ti.type = tarfile.CHRTYPE if kind == "chr" else tarfile.BLKTYPE
                ti.devmajor, ti.devminor = payload
                tf.addfile(ti)
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
                tf.addfile(ti)
            else:
                ti.size = len(payload)
                tf.addfile(ti, io.BytesIO(payload))
    return subprocess.run(["xz", "-6", "-T1", "-c"], input=buf.getvalue(), stdout=subprocess.PIPE,
                          check=True).stdout


def xz_blocks(path: str) -> int:
    out = subprocess.run(["xz", "--robot", "--list", path], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "totals":
            return int(f[2])
    raise AssertionError(out)


# ---------------------------------------------------------------------------
# Layout: the installed tree equals the archive's
# ---------------------------------------------------------------------------

class InstalledTreeEqualsArchive(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.http = support.nginx_base_url()
        self.file = support.file_base_url()

    def assertTree(self, prefix, expected):
        got = installed(prefix)
        self.assertEqual(got, expected, "installed tree differs from the archive:\n"
                         + support.diff_snapshots(expected, got))

    def test_cudnn_fetch_every_linux_variant_http_and_file(self):
        cases = [("9.27.0", "linux-x86_64", 12, self.http), ("9.27.0", "linux-x86_64", 13, self.file),
                 ("9.8.0", "linux-x86_64", 11, self.http), ("9.10.1", "linux-sbsa", 13, self.file)]
        for label, platform, cuda, base in cases:
            with self.subTest(label=label, platform=platform, cuda=cuda, base=base):
                prefix = os.path.join(self.dir, f"{label}-{platform}-{cuda}-{base[:4]}")
                res = fetch(label, "--prefix", prefix, "--base-url", base, "--platform", platform,
                            "--cuda", cuda, tool="cudnn-fetch", check=0)
                archive, rec = artifact_file("cudnn", label, "cudnn", platform, f"cuda{cuda}")
                self.assertTree(prefix, expected_tree(archive, "cudnn"))
                # The summary names the release and the component's version (URLs are in --json only).
                self.assertRegex(res.stdout, rf"(?m)^installed cudnn {re.escape(label)} into .*: 1 component, ")
                version = support.load_manifest("cudnn", label)["cudnn"]["version"]
                self.assertRegex(res.stdout, rf"(?m)^  cudnn +{re.escape(version)} ")
                self.assertEqual(staging_leftovers(prefix), [])
                # Sanity of the expectation itself: the shapes we care about are there.
                exp = expected_tree(archive, "cudnn")
                self.assertEqual(exp["lib/libcudnn.so"].digest, "libcudnn.so.9")
                self.assertEqual(exp["bin/cudnn-info"].mode, 0o755)
                self.assertEqual(exp["share/licenses/cudnn/LICENSE"].mode, 0o444)

    def test_multi_block_and_single_block_xz(self):
        info = support.mirror_info()
        multi = info["multi_block"]
        self.assertGreaterEqual(len(multi), 2)
        cases = []
        for rel in multi:
            product = rel.split("/", 1)[0]
            cases.append((product, os.path.join(support.mirror_dir(), rel)))
        # Single-block counterparts: same components, other variant / platform.
        single = [("cudnn", artifact_file("cudnn", "9.27.0", "cudnn", "linux-x86_64", "cuda13")[0]),
                  ("cuda", artifact_file("cuda", "12.9.1", "libcublas", "linux-sbsa")[0])]
        for product, path in single:
            self.assertEqual(xz_blocks(path), 1, path)
        for product, path in cases:
            self.assertGreater(xz_blocks(path), 1, f"{path} should be multi-block")
        for product, path in cases + single:
            with self.subTest(archive=os.path.basename(path)):
                label, comp, platform, variant = self.locate(product, path)
                prefix = os.path.join(self.dir, os.path.basename(path))
                args = [product, label, "--prefix", prefix, "--base-url", self.http,
                        "--component", comp, "--platform", platform]
                if variant:
                    args += ["--cuda", variant[len("cuda"):]]
                fetch(*args, check=0)
                self.assertTree(prefix, expected_tree(path, comp))

    @staticmethod
    def locate(product, path):
        for label in support.mirror_info()["products"][product]["labels"]:
            for comp, platform, variant, rec in support.iter_artifacts(support.load_manifest(product, label)):
                if os.path.samefile(support.artifact_path(product, rec["relative_path"]), path):
                    return label, comp, platform, variant
        raise AssertionError(f"{path} is in no manifest")

    def test_windows_zip(self):
        prefix = os.path.join(self.dir, "win")
        archive, _ = artifact_file("cudnn", "9.27.0", "cudnn", "windows-x86_64", "cuda12")
        self.assertTrue(archive.endswith(".zip"))
        fetch("9.27.0", "--prefix", prefix, "--base-url", self.http, "--platform", "windows-x86_64",
              "--cuda", "12", tool="cudnn-fetch", check=0)
        exp = expected_tree(archive, "cudnn")
        self.assertIn("bin/cudnn64_9.dll", exp)
        self.assertTree(prefix, exp)

    def test_cuda_components_merge_into_one_prefix(self):
        prefix = os.path.join(self.dir, "cuda")
        fetch("cuda", "12.9.1", "--component", "cuda_nvcc,cuda_cudart", "--prefix", prefix,
              "--base-url", self.http, "--platform", "linux-x86_64", check=0)
        trees = {c: expected_tree(artifact_file("cuda", "12.9.1", c, "linux-x86_64")[0], c)
                 for c in support.load_manifest("cuda", "12.9.1") if c.startswith(("cuda_", "lib"))}
        self.assertEqual(len(trees), 8)
        self.assertTree(prefix, merge_trees(trees["cuda_nvcc"], trees["cuda_cudart"]))
        self.assertEqual(sorted(os.listdir(os.path.join(prefix, ".redist", "receipts", "cuda"))),
                         ["cuda_cudart.json", "cuda_nvcc.json"])
        # Then every component into the same prefix (two already there).
        res = fetch("cuda", "12.9.1", "--all", "--prefix", prefix, "--base-url", self.file,
                    "--platform", "linux-x86_64", check=0)
        self.assertTree(prefix, merge_trees(*trees.values()))
        self.assertEqual(len(os.listdir(os.path.join(prefix, ".redist", "receipts", "cuda"))), 8)
        self.assertIn("already installed", res.stdout)

    def test_identical_overlap_is_accepted(self):
        info = support.mirror_info()["identical_overlap"]["cudnn"]
        prefix = os.path.join(self.dir, "overlap")
        fetch("cudnn", "9.27.0", "--component", ",".join(info["components"]), "--cuda", "12",
              "--platform", "linux-x86_64", "--prefix", prefix, "--base-url", self.http, check=0)
        trees = [expected_tree(artifact_file("cudnn", "9.27.0", c, "linux-x86_64", "cuda12")[0], c)
                 for c in info["components"]]
        shared = set(trees[0]) & set(trees[1])
        self.assertIn("include/cudnn_version.h", shared)  # a real overlap, not a vacuous one
        self.assertTree(prefix, merge_trees(*trees))

    def test_setuid_setgid_dropped_exec_bits_kept(self):
        mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cudnn"])
        top = "cudnn-linux-x86_64-9.27.0.42_cuda12-archive"
        data = tar_xz([(top, "dir", 0o755, b""), (f"{top}/LICENSE", "file", 0o444, b"license\n"),
                       (f"{top}/bin", "dir", 0o2755, b""),
                       (f"{top}/bin/suid", "file", 0o4755, b"#!/bin/sh\n"),
                       (f"{top}/bin/sgid", "file", 0o2711, b"#!/bin/sh\necho\n"),
                       (f"{top}/bin/plain", "file", 0o700, b"x"),
                       (f"{top}/lib", "dir", 0o755, b""),
                       (f"{top}/lib/libx.so.1", "file", 0o755, b"elf"),
                       (f"{top}/lib/libx.so", "symlink", 0o777, "libx.so.1")])
        rewrite_artifact(mirror, "cudnn", "9.27.0", "cudnn", "linux-x86_64", "cuda12", data)
        prefix = os.path.join(self.dir, "prefix")
        fetch("9.27.0", "--cuda", "12", "--platform", "linux-x86_64", "--prefix", prefix,
              "--base-url", support.file_base_url(mirror), tool="cudnn-fetch", check=0)
        got = installed(prefix)
        self.assertEqual(got["bin/suid"].mode, 0o755)
        self.assertEqual(got["bin/sgid"].mode, 0o711)
        self.assertEqual(got["bin/plain"].mode, 0o700)
        self.assertEqual(got["bin"].mode & 0o6000, 0)
        self.assertEqual(got["lib/libx.so"], Node("symlink", 0o777, 9, "libx.so.1"))
        archive, _ = artifact_file("cudnn", "9.27.0", "cudnn", "linux-x86_64", "cuda12", mirror)
        exp = expected_tree(archive, "cudnn")
        exp["bin"] = exp["bin"]._replace(mode=0o755)  # setgid on a directory: dropped too
        self.assertTree(prefix, exp)


# ---------------------------------------------------------------------------
# Conflicts between components
# ---------------------------------------------------------------------------

def make_cudart_clash_with_nvcc(mirror, platform="linux-x86_64"):
    """CUDA 12.9.1's cuda_cudart in `mirror` rewritten to also ship
    include/crt/host_config.h, which cuda_nvcc ships with other content."""
    path, _ = artifact_file("cuda", "12.9.1", "cuda_cudart", platform, mirror=mirror)
    members = []
    with tarfile.open(path, "r:xz") as tf:
        for m in tf.getmembers():
            if m.isdir():
                members.append((m.name, "dir", m.mode, b""))
            elif m.issym():
                members.append((m.name, "symlink", m.mode, m.linkname))
            else:
                members.append((m.name, "file", m.mode, tf.extractfile(m).read()))
    top = members[0][0].split("/")[0]
    members += [(f"{top}/include/crt", "dir", 0o755, b""),
                (f"{top}/include/crt/host_config.h", "file", 0o644, b"/* not nvcc's */\n")]
    rewrite_artifact(mirror, "cuda", "12.9.1", "cuda_cudart", platform, None, tar_xz(members))


class Conflicts(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), ["cuda"])
        make_cudart_clash_with_nvcc(self.mirror)
        self.base = support.file_base_url(self.mirror)

    def check_conflict(self, res):
        self.assertEqual(res.returncode, 9, support.describe(res))
        line = one_line_error(self, res, "cuda_nvcc", "cuda_cudart", "include/crt/host_config.h")
        return line

    def test_conflict_in_one_run_installs_nothing(self):
        prefix = os.path.join(self.dir, "prefix")
        os.makedirs(prefix)
        before = installed(prefix)
        res = fetch("cuda", "12.9.1", "--component", "cuda_nvcc,cuda_cudart,cuda_cccl", "--prefix", prefix,
                    "--base-url", self.base, "--platform", "linux-x86_64")
        self.check_conflict(res)
        self.assertEqual(installed(prefix), before, support.diff_snapshots(before, installed(prefix)))
        self.assertFalse(os.path.isdir(os.path.join(prefix, ".redist", "receipts"))
                         and os.listdir(os.path.join(prefix, ".redist", "receipts")))
        self.assertEqual(staging_leftovers(prefix), [], "a failed commit left its stages behind")

    def test_conflict_with_an_installed_component(self):
        prefix = os.path.join(self.dir, "prefix")
        fetch("cuda", "12.9.1", "--component", "cuda_nvcc", "--prefix", prefix, "--base-url", self.base,
              "--platform", "linux-x86_64", check=0)
        before = support.tree_snapshot(prefix, ignore=BOOKKEEPING)
        res = fetch("cuda", "12.9.1", "--component", "cuda_cudart", "--prefix", prefix,
                    "--base-url", self.base, "--platform", "linux-x86_64")
        self.check_conflict(res)
        after = support.tree_snapshot(prefix, ignore=BOOKKEEPING)
        self.assertEqual(after, before, support.diff_snapshots(before, after))
        self.assertEqual(staging_leftovers(prefix), [], "a failed commit left its stages behind")
        # --force does not override a conflict with another component.
        before = support.tree_snapshot(prefix, ignore=BOOKKEEPING)
        res = fetch("cuda", "12.9.1", "--component", "cuda_cudart", "--prefix", prefix, "--force",
                    "--base-url", self.base, "--platform", "linux-x86_64")
        self.check_conflict(res)
        self.assertEqual(support.tree_snapshot(prefix, ignore=BOOKKEEPING), before)

    def test_archive_directory_where_the_prefix_has_a_file(self):
        prefix = os.path.join(self.dir, "prefix")
        os.makedirs(prefix)
        with open(os.path.join(prefix, "lib"), "w") as f:  # the archive needs lib/ as a directory
            f.write("a user's file\n")
        before = installed(prefix)
        res = fetch("cuda", "12.9.1", "--component", "cuda_nvcc,cuda_cudart", "--prefix", prefix,
                    "--base-url", support.nginx_base_url(), "--platform", "linux-x86_64")
        self.assertEqual(res.returncode, 9, support.describe(res))
        one_line_error(self, res, os.path.join(prefix, "lib"))
        after = installed(prefix)
        self.assertEqual(after, before, support.diff_snapshots(before, after))
        self.assertEqual(staging_leftovers(prefix), [], "a failed commit left its stages behind")


# ---------------------------------------------------------------------------
# Integrity failures leave the prefix untouched
# ---------------------------------------------------------------------------

class IntegrityFailures(unittest.TestCase):
    LABEL, OLD = "9.27.0", "9.10.1"
    PLATFORM, CUDA = "linux-x86_64", "12"

    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.servers = []

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.close()

    def make_mirror(self, name, mutate):
        mirror = support.copy_mirror(os.path.join(self.dir, name), ["cudnn"])
        path, rec = artifact_file("cudnn", self.LABEL, "cudnn", self.PLATFORM, f"cuda{self.CUDA}", mirror)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        mutate(mirror, path, rec, data)
        server = LocalHttp(mirror)
        self.servers.append(server)
        url_tail = "/cudnn/redist/" + rec["relative_path"]
        return [support.file_base_url(mirror), server.base], url_tail

    def run_case(self, name, mutate, needle):
        bases, url_tail = self.make_mirror(name, mutate)
        for base in bases:
            for prior in (False, True):
                with self.subTest(case=name, base=base.split(":")[0], prior_install=prior):
                    prefix = os.path.join(self.dir, f"{name}-{base.split(':')[0]}-{int(prior)}")
                    support.rm_tree(prefix)
                    os.makedirs(prefix)
                    if prior:
                        fetch(self.OLD, "--prefix", prefix, "--base-url", support.nginx_base_url(),
                              "--platform", self.PLATFORM, "--cuda", self.CUDA, tool="cudnn-fetch", check=0)
                        before = support.tree_snapshot(prefix)
                    else:
                        before = {}
                    res = fetch(self.LABEL, "--prefix", prefix, "--base-url", base, "--platform",
                                self.PLATFORM, "--cuda", self.CUDA, tool="cudnn-fetch")
                    self.assertEqual(res.returncode, 5, support.describe(res))
                    line = one_line_error(self, res, base + url_tail)
                    self.assertIn(needle, line.lower())
                    if prior:
                        after = support.tree_snapshot(prefix)
                    else:
                        after = installed(prefix)
                        receipts = os.path.join(prefix, ".redist", "receipts")
                        self.assertEqual(os.listdir(receipts) if os.path.isdir(receipts) else [], [])
                    self.assertEqual(after, before, support.diff_snapshots(before, after))
                    self.assertEqual(staging_leftovers(prefix), [])
                    if prior:  # the old install is still intact
                        support.run_tool("redist", "verify", "--prefix", prefix, check=0)

    def test_flipped_byte(self):
        def mutate(mirror, path, rec, data):
            data[len(data) // 2] ^= 0x01
            with open(path, "wb") as f:
                f.write(data)
        self.run_case("flipped", mutate, "sha256")

    def test_truncated_archive(self):
        def mutate(mirror, path, rec, data):
            with open(path, "wb") as f:
                f.write(data[: len(data) * 2 // 3])
        self.run_case("truncated", mutate, "size")

    def test_manifest_size_wrong(self):
        def mutate(mirror, path, rec, data):
            mpath = support.manifest_path("cudnn", self.LABEL, mirror)
            doc = support.load_json(mpath)
            support.find_artifact(doc, "cudnn", self.PLATFORM, f"cuda{self.CUDA}")["size"] = str(len(data) - 1)
            support.save_json(mpath, doc)
        self.run_case("size", mutate, "size")

    def test_manifest_sha256_wrong_size_right(self):
        def mutate(mirror, path, rec, data):
            mpath = support.manifest_path("cudnn", self.LABEL, mirror)
            doc = support.load_json(mpath)
            r = support.find_artifact(doc, "cudnn", self.PLATFORM, f"cuda{self.CUDA}")
            r["sha256"] = hashlib.sha256(b"something else").hexdigest()
            self.assertEqual(int(r["size"]), len(data))
            support.save_json(mpath, doc)
        self.run_case("sha", mutate, "sha256")


# ---------------------------------------------------------------------------
# The install lifecycle
# ---------------------------------------------------------------------------

class Lifecycle(unittest.TestCase):
    PLATFORM = "linux-x86_64"

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.dir, "prefix")
        self.base = support.nginx_base_url()

    def cudnn(self, label, *extra, **kw):
        return fetch(label, "--prefix", self.prefix, "--base-url", self.base, "--platform", self.PLATFORM,
                     "--cuda", "12", *extra, tool="cudnn-fetch", **kw)

    def expected(self, label):
        return expected_tree(artifact_file("cudnn", label, "cudnn", self.PLATFORM, "cuda12")[0], "cudnn")

    def artifact_requests(self, mark):
        return [r for r in support.access_log_since(mark) if r["uri"].endswith((".tar.xz", ".zip"))]

    def test_noop_rerun_and_force(self):
        self.cudnn("9.27.0", check=0)
        mark = support.access_log_mark()
        res = self.cudnn("9.27.0", check=0)
        self.assertIn("already installed", res.stdout + res.stderr)
        self.assertEqual(self.artifact_requests(mark), [])
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))

        # --force downloads again (no cache here) and yields the same tree,
        # also after a local modification.
        os.chmod(os.path.join(self.prefix, "include/cudnn.h"), 0o600)
        with open(os.path.join(self.prefix, "include/cudnn.h"), "a") as f:
            f.write("local change\n")
        mark = support.access_log_mark()
        res = self.cudnn("9.27.0", "--force", check=0)
        self.assertNotIn("already installed", res.stdout)
        reqs = self.artifact_requests(mark)
        self.assertEqual(len(reqs), 1, reqs)
        self.assertTrue(reqs[0]["uri"].endswith("cudnn-linux-x86_64-9.27.0.42_cuda12-archive.tar.xz"))
        self.assertEqual(reqs[0]["status"], "200")
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))

    def test_reinstall_and_overwrite_are_separate_intents(self):
        # A file of the user's where the archive puts one: a conflict that names the flag for it.
        os.makedirs(os.path.join(self.prefix, "include"))
        mine = os.path.join(self.prefix, "include/cudnn.h")
        with open(mine, "w") as f:
            f.write("the user's own header\n")
        res = self.cudnn("9.27.0", check=9)
        self.assertIn("--overwrite", res.stderr)
        res = self.cudnn("9.27.0", "--reinstall", check=9)  # reinstalling replaces only redist's own files
        with open(mine) as f:
            self.assertEqual(f.read(), "the user's own header\n")
        self.cudnn("9.27.0", "--overwrite", check=0)
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))
        mark = support.access_log_mark()
        res = self.cudnn("9.27.0", "--overwrite", check=0)  # receipts match: nothing to do
        self.assertIn("already installed", res.stdout + res.stderr)
        self.assertIn("--reinstall", res.stdout + res.stderr)
        self.assertEqual(self.artifact_requests(mark), [])
        os.chmod(mine, 0o600)
        with open(mine, "a") as f:
            f.write("local change\n")
        mark = support.access_log_mark()
        self.cudnn("9.27.0", "--reinstall", check=0)
        self.assertEqual(len(self.artifact_requests(mark)), 1)
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))

    def test_force_with_cache_reinstalls_from_cache(self):
        cache = os.path.join(self.dir, "cache")
        self.cudnn("9.27.0", "--cache-dir", cache, cache=True, check=0)
        mark = support.access_log_mark()
        res = self.cudnn("9.27.0", "--cache-dir", cache, "--force", "--json", cache=True, check=0)
        report = json.loads(res.stdout)
        self.assertTrue(report["components"][0]["from_cache"], res.stdout)
        self.assertEqual(report["components"][0]["status"], "installed")
        self.assertEqual(self.artifact_requests(mark), [])
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))

    def test_upgrade_and_downgrade_leave_no_stale_files(self):
        vanishing = support.mirror_info()["vanishing"]["cudnn"]
        seq = ["9.8.0", "9.10.1", "9.27.0", "9.8.0", "9.27.0", "9.10.1"]
        prev = None
        for label in seq:
            with self.subTest(step=f"{prev} -> {label}"):
                self.cudnn(label, check=0)
                exp = self.expected(label)
                self.assertTree(exp)
                if prev in vanishing:
                    for path in vanishing[prev]:
                        if path not in exp:
                            self.assertFalse(os.path.lexists(os.path.join(self.prefix, path)), path)
                receipt = support.load_json(os.path.join(self.prefix, ".redist/receipts/cudnn/cudnn.json"))
                self.assertEqual(receipt["release_label"], label)
                self.assertEqual(staging_leftovers(self.prefix), [])
            prev = label
        # The vanishing lists are real: they exist in their release only.
        self.assertIn("include/cudnn_deprecated.h", self.expected("9.8.0"))
        self.assertNotIn("include/cudnn_deprecated.h", self.expected("9.10.1"))

    def assertTree(self, exp):
        got = installed(self.prefix)
        self.assertEqual(got, exp, support.diff_snapshots(exp, got))

    def test_receipt_describes_the_install(self):
        res = self.cudnn("9.27.0", check=0)
        archive, rec = artifact_file("cudnn", "9.27.0", "cudnn", self.PLATFORM, "cuda12")
        receipt = support.load_json(os.path.join(self.prefix, ".redist", "receipts", "cudnn", "cudnn.json"))
        self.assertEqual(receipt["product"], "cudnn")
        self.assertEqual(receipt["release_label"], "9.27.0")
        self.assertEqual(receipt["component"], "cudnn")
        self.assertEqual(receipt["platform"], self.PLATFORM)
        self.assertEqual(receipt["variant"], "cuda12")
        self.assertEqual(receipt["url"], f"{self.base}/cudnn/redist/{rec['relative_path']}")
        self.assertEqual(receipt["archive_sha256"], rec["sha256"])
        self.assertEqual(int(receipt["archive_size"]), int(rec["size"]))
        exp = self.expected("9.27.0")
        listed = {}
        for f in receipt["files"]:
            node = exp.get(f["path"])
            self.assertIsNotNone(node, f"receipt lists {f['path']}, which the archive does not install")
            self.assertEqual(f["type"], node.kind, f)
            if node.kind == "file":
                self.assertEqual((f["size"], f["sha256"], f["mode"]), (node.size, node.digest, node.mode), f)
            else:
                self.assertEqual(f["target"], node.digest, f)
            listed[f["path"]] = f
        self.assertEqual(set(listed), {k for k, v in exp.items() if v.kind != "dir"})
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, ".redist", "lock")))
        self.assertTrue(os.path.isdir(os.path.join(self.prefix, ".redist", "staging")))

    def test_verify_detects_modified_and_deleted(self):
        self.cudnn("9.27.0", check=0)
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)
        files = sum(1 for v in self.expected("9.27.0").values() if v.kind != "dir")
        self.assertIn(f"1 components, {files} files: all match their receipts", res.stdout)
        modified, deleted, relinked = "include/cudnn_graph.h", "lib/libcudnn_graph.so.9.27.0", "lib/libcudnn.so"
        path = os.path.join(self.prefix, modified)
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:  # same size, one byte different
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 1]))
        os.unlink(os.path.join(self.prefix, deleted))
        os.unlink(os.path.join(self.prefix, relinked))
        os.symlink("elsewhere", os.path.join(self.prefix, relinked))
        res = support.run_tool("redist", "verify", "--prefix", self.prefix)
        self.assertEqual(res.returncode, 5, support.describe(res))
        out = res.stdout + res.stderr
        for p in (modified, deleted, relinked):
            self.assertIn(p, out)
        self.assertIn(f"3 of {files} files differ from their receipts", res.stdout)
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, "--json")
        self.assertEqual(res.returncode, 5, support.describe(res))
        report = json.loads(res.stdout)
        self.assertEqual((report["ok"], report["components"], report["files"]), (False, 1, files))
        self.assertEqual(sorted(p["path"] for p in report["problems"]), sorted((modified, deleted, relinked)))
        self.assertNotIn("include/cudnn.h:", out)  # untouched files are not listed
        self.assertNotIn("include/cudnn.h ", out)

    def test_remove_removes_exactly_what_was_installed(self):
        fetch("cudnn", "9.27.0", "--component", "cudnn,cudnn_jit", "--prefix", self.prefix, "--base-url",
              self.base, "--platform", self.PLATFORM, "--cuda", "12", check=0)
        jit = expected_tree(artifact_file("cudnn", "9.27.0", "cudnn_jit", self.PLATFORM, "cuda12")[0], "cudnn_jit")
        cud = self.expected("9.27.0")
        # The user's own files.
        with open(os.path.join(self.prefix, "lib", "my_plugin.so"), "w") as f:
            f.write("mine\n")
        os.makedirs(os.path.join(self.prefix, "notes"))
        with open(os.path.join(self.prefix, "notes", "README"), "w") as f:
            f.write("mine too\n")
        user = {k: v for k, v in installed(self.prefix).items() if k.startswith(("notes", "lib/my_plugin"))}
        self.assertEqual(len(user), 3)

        support.run_tool("redist", "remove", "--prefix", self.prefix, "--component", "cudnn_jit", check=0)
        got = installed(self.prefix)
        # cudnn's tree is whole (include/cudnn_version.h, shared with cudnn_jit, stays).
        self.assertEqual({k: v for k, v in got.items() if k in cud}, cud)
        self.assertEqual(set(got) - set(cud) - set(user), set(),
                         support.diff_snapshots(merge_trees(cud, user), got))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist/receipts/cudnn/cudnn_jit.json")))
        self.assertTrue(set(jit) - set(cud))  # something was really removed

        support.run_tool("redist", "remove", "--prefix", self.prefix, check=0)
        got = installed(self.prefix)
        leftover_dirs = {k for k, v in got.items() if v.kind == "dir"} - {"lib", "notes"}
        self.assertEqual({k: v for k, v in got.items() if k not in leftover_dirs}, {
            "lib": got.get("lib"), **user})
        self.assertEqual(leftover_dirs, set(), "empty directories of the install remain")

    def test_json_report(self):
        prefix = self.prefix
        res = fetch("cudnn", "9.27.0", "--component", "cudnn,cudnn_jit", "--prefix", prefix, "--base-url",
                    self.base, "--platform", self.PLATFORM, "--cuda", "12", "--json", check=0)
        report = json.loads(res.stdout)  # stdout is exactly one JSON document
        self.assertEqual(report["prefix"], os.path.abspath(prefix))
        self.assertEqual((report["product"], report["release_label"]), ("cudnn", "9.27.0"))
        manifest = support.load_manifest("cudnn", "9.27.0")
        self.assertEqual([c["component"] for c in report["components"]], ["cudnn", "cudnn_jit"])
        for c in report["components"]:
            rec = support.find_artifact(manifest, c["component"], self.PLATFORM, "cuda12")
            self.assertEqual(c["version"], manifest[c["component"]]["version"])
            self.assertEqual((c["platform"], c["variant"]), (self.PLATFORM, "cuda12"))
            self.assertEqual(c["url"], f"{self.base}/cudnn/redist/{rec['relative_path']}")
            self.assertEqual(c["sha256"], rec["sha256"])
            self.assertEqual(c["size"], int(rec["size"]))
            exp = expected_tree(support.artifact_path("cudnn", rec["relative_path"]), c["component"])
            self.assertEqual(c["files"], sum(1 for n in exp.values() if n.kind != "dir"))
            self.assertIsInstance(c["seconds"], (int, float))
            self.assertFalse(c["from_cache"])
            self.assertEqual(c["status"], "installed")
        res = fetch("cudnn", "9.27.0", "--component", "cudnn,cudnn_jit", "--prefix", prefix, "--base-url",
                    self.base, "--platform", self.PLATFORM, "--cuda", "12", "--json", check=0)
        self.assertEqual([c["status"] for c in json.loads(res.stdout)["components"]], ["unchanged"] * 2)

    def test_plain_progress_and_quiet(self):
        res = self.cudnn("9.27.0", check=0)
        out = res.stdout + res.stderr
        self.assertTrue(out.strip())
        for ch in ("\x1b", "\r", "\b"):
            self.assertNotIn(ch, out, f"control character {ch!r} in non-TTY output:\n{out!r}")
        self.assertIsNone(re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out), repr(out))
        support.rm_tree(self.prefix)
        res = self.cudnn("9.27.0", "--quiet", check=0)
        self.assertEqual((res.stdout, res.stderr), ("", ""))
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))
        res = self.cudnn("9.27.0", "--quiet", check=0)  # no-op, still silent
        self.assertEqual((res.stdout, res.stderr), ("", ""))

    def test_concurrent_fetches_into_one_prefix(self):
        """Two processes, two releases, one prefix: the lock serializes them;
        the result is exactly one of the two releases, never a mix."""
        env = support.tool_env()
        procs = []
        for label in ("9.10.1", "9.27.0"):
            argv = [support.tool_path("cudnn-fetch"), label, "--prefix", self.prefix, "--base-url", self.base,
                    "--platform", self.PLATFORM, "--cuda", "12", "--no-cache", "--quiet"]
            procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        for p in procs:
            out, err = p.communicate(timeout=support.DEFAULT_TIMEOUT)
            self.assertEqual(p.returncode, 0, f"{p.args}\n{out}\n{err}")
        label = support.load_json(os.path.join(self.prefix, ".redist/receipts/cudnn/cudnn.json"))["release_label"]
        self.assertIn(label, ("9.10.1", "9.27.0"))
        self.assertTree(self.expected(label))
        self.assertEqual(staging_leftovers(self.prefix), [])
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)

    def test_cuda_variant_follows_detected_toolkit(self):
        cuda_home = os.path.join(self.dir, "fake-cuda-12")
        os.makedirs(cuda_home)
        support.save_json(os.path.join(cuda_home, "version.json"),
                          {"cuda": {"name": "CUDA SDK", "version": "12.8.1"}})
        res = fetch("9.27.0", "--prefix", self.prefix, "--base-url", self.base, "--platform", self.PLATFORM,
                    tool="cudnn-fetch", env={"CUDA_HOME": cuda_home}, check=0)
        out = res.stdout + res.stderr
        self.assertIn("CUDA_HOME", out)
        self.assertIn("12.8.1", out)
        self.assertIn(cuda_home, out)
        self.assertEqual(support.load_json(os.path.join(self.prefix, ".redist/receipts/cudnn/cudnn.json"))["variant"],
                         "cuda12")
        self.assertEqual(installed(self.prefix), self.expected("9.27.0"))
        # --cuda wins over the detected toolkit.
        res = fetch("9.27.0", "--prefix", self.prefix, "--base-url", self.base, "--platform", self.PLATFORM,
                    "--cuda", "13", "--json", tool="cudnn-fetch", env={"CUDA_HOME": cuda_home}, check=0)
        self.assertEqual(json.loads(res.stdout)["components"][0]["variant"], "cuda13")


if __name__ == "__main__":
    unittest.main()
