"""The download cache end to end: reuse across prefixes, corrupt blobs,
resumed .part files, --offline, `redist cache list|prune|dir`, and single
flight between concurrent processes. Traffic is counted from the servers'
own logs (nginx's access log, the fault server's request log)."""

import fcntl
import json
import os
import subprocess
import time
import unittest

import support

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
CUDA = "12"
IGNORE = r"^\.redist(/|$)"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
DAY = 86400


def snapshot(prefix):
    return support.tree_snapshot(prefix, ignore=IGNORE) if os.path.isdir(prefix) else {}


def support_edit_keeping_size_and_mtime(path):
    """Rewrites a byte of `path` in place and puts its mtime back: only the
    ctime (or the content's digest) can tell."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0x20]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def human(n):
    """The tools' human_size (tools/common/cli.cpp)."""
    value, unit = float(n), 0
    while value >= 1024 and unit < 4:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{n} B"
    return f"{value:.1f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}" if value < 10 else \
        f"{value:.0f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"


def artifact_record():
    return support.find_artifact(support.load_manifest("cudnn", LABEL), "cudnn", PLATFORM, "cuda" + CUDA)


def fetch_args(prefix, base, cache, *extra):
    return [LABEL, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", prefix,
            "--base-url", base, "--cache-dir", cache, *extra]


class CacheCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rec = artifact_record()
        cls.rel, cls.size, cls.sha256 = rec["relative_path"], int(rec["size"]), rec["sha256"]
        cls.base = support.nginx_base_url()
        cls.uri = "/cudnn/redist/" + cls.rel  # as nginx logs it
        # The reference tree: an install without any cache.
        ref = os.path.join(support.make_scratch_dir(cls.__module__ + "." + cls.__name__), "reference")
        support.run_tool("cudnn-fetch", *fetch_args(ref, cls.base, "/nonexistent", "--no-cache", "--quiet"),
                         env=CLEAN_ENV, check=0)
        cls.ref = snapshot(ref)
        assert any(k.endswith("include/cudnn.h") for k in cls.ref), cls.ref

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.cache = os.path.join(self.scratch, "cache")
        self.blob = os.path.join(self.cache, "blobs", "sha256", self.sha256)
        self.part = self.blob + ".part"

    def fetch(self, name, *extra, base=None, check=None, cache=None):
        return support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, name), base or self.base,
                                                           cache or self.cache, *extra),
                                env=CLEAN_ENV, check=check)

    def assert_tree(self, name, res=None):
        if res is not None:
            self.assertEqual(res.returncode, 0, support.describe(res))
        got = snapshot(os.path.join(self.scratch, name))
        self.assertEqual(got, self.ref, support.diff_snapshots(self.ref, got))

    def artifact_requests(self, mark):
        return [e for e in support.access_log_since(mark) if e["uri"] == self.uri]

    def report(self, res):
        self.assertEqual(res.returncode, 0, support.describe(res))
        return json.loads(res.stdout)["components"][0]

    def assert_no_unverified_blob(self):
        """Every file under a final blob name hashes to its name."""
        blobs = os.path.join(self.cache, "blobs", "sha256")
        for name in os.listdir(blobs) if os.path.isdir(blobs) else []:
            if not name.endswith(".part"):
                self.assertEqual(support.sha256_file(os.path.join(blobs, name)), name)

    def drop_trees(self):
        # Extracted trees (if the cache keeps them) would let an install skip
        # the blob; these tests are about the blob.
        support.rm_tree(os.path.join(self.cache, "trees"))


class Reuse(CacheCase):
    def test_second_prefix_is_served_from_cache(self):
        mark = support.access_log_mark()
        first = self.report(self.fetch("a", "--json"))
        self.assertFalse(first["from_cache"])
        self.assertEqual(len(self.artifact_requests(mark)), 1)
        self.assertEqual(support.sha256_file(self.blob), self.sha256)
        mark = support.access_log_mark()
        res = self.fetch("b", "--json")
        second = self.report(res)
        self.assertTrue(second["from_cache"], second)
        self.assertEqual(second["requests"], 0, second)
        self.assertEqual(self.artifact_requests(mark), [])
        self.assert_tree("a")
        self.assert_tree("b")

    def test_corrupt_blob_is_detected_deleted_and_downloaded_again(self):
        self.fetch("a", check=0)
        self.drop_trees()
        with open(self.blob, "r+b") as f:
            f.seek(self.size // 2)
            byte = f.read(1)
            f.seek(self.size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
        self.assertNotEqual(support.sha256_file(self.blob), self.sha256)
        mark = support.access_log_mark()
        res = self.fetch("b", "--json")
        report = self.report(res)
        self.assertFalse(report["from_cache"], report)
        self.assert_tree("b")
        requests = self.artifact_requests(mark)
        self.assertEqual(len(requests), 1, requests)
        self.assertEqual(requests[0]["range"], "", "a corrupt blob is not resumed from")
        self.assertEqual(int(requests[0]["body_bytes_sent"]), self.size)
        self.assertEqual(support.sha256_file(self.blob), self.sha256)
        self.assert_no_unverified_blob()

    def test_tree_is_kept_from_the_first_install(self):
        # The cold install (download) keeps the tree, by hard links to its
        # stage (no byte copied); the second install needs neither the blob
        # nor the network.
        trees = os.path.join(self.cache, "trees", self.sha256)
        self.assertFalse(self.report(self.fetch("a", "--json"))["from_cache"])
        self.assertTrue(os.path.isdir(trees), "the download keeps the tree")
        os.unlink(self.blob)
        mark = support.access_log_mark()
        second = self.report(self.fetch("b", "--json"))
        self.assertTrue(second["from_tree"], second)
        self.assertEqual(self.artifact_requests(mark), [])
        self.assertFalse(os.path.exists(self.blob), "served from the tree, not downloaded again")
        for name in "ab":
            self.assert_tree(name)

    def test_an_edit_in_the_first_prefix_never_reaches_the_next(self):
        # The first prefix shares its files with the tree. An edit there that
        # keeps size and mtime moves the ctime: the tree is re-hashed, found
        # wrong, and the next prefix is made from the blob.
        self.fetch("a", check=0)
        victim = os.path.join(self.scratch, "a", "include", "cudnn.h")
        support_edit_keeping_size_and_mtime(victim)
        report = self.report(self.fetch("b", "--json"))
        self.assertFalse(report["from_tree"], report)
        self.assertTrue(report["from_cache"], report)
        self.assert_tree("b")

    def test_tampered_cached_tree_is_not_installed(self):
        self.fetch("a", check=0)
        self.fetch("a2", check=0)  # from the blob: keeps the tree
        trees = os.path.join(self.cache, "trees", self.sha256)
        self.assertTrue(os.path.isdir(trees))
        victim = os.path.join(trees, "include", "cudnn.h")
        with open(victim, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(data.replace(b"cudnn", b"CUDNN", 1))  # same size, new content and mtime
        os.utime(victim, (time.time() + 5, time.time() + 5))
        res = self.fetch("b")
        self.assert_tree("b", res)

    def test_part_file_is_resumed_with_range(self):
        half = self.size // 2
        os.makedirs(os.path.dirname(self.part))
        with open(support.artifact_path("cudnn", self.rel), "rb") as src, open(self.part, "wb") as dst:
            dst.write(src.read(half))
        mark = support.access_log_mark()
        res = self.fetch("a", "--json")
        self.assert_tree("a", res)
        requests = self.artifact_requests(mark)
        self.assertEqual(len(requests), 1, requests)
        self.assertEqual(requests[0]["range"], f"bytes={half}-")
        self.assertEqual(requests[0]["status"], "206")
        self.assertEqual(int(requests[0]["body_bytes_sent"]), self.size - half)
        self.assertFalse(os.path.exists(self.part))
        self.assertEqual(support.sha256_file(self.blob), self.sha256)

    def test_part_file_with_wrong_bytes_is_dropped_and_downloaded_again(self):
        # A .part of the right length prefix whose bytes are wrong (a disk
        # error, another user of a shared cache): the source serves the right
        # bytes, so the mismatch is the .part's. It is dropped and the archive
        # comes again from byte 0, in the same run: exit 0, not an integrity
        # failure blamed on the URL.
        half = self.size // 2
        os.makedirs(os.path.dirname(self.part))
        with open(support.artifact_path("cudnn", self.rel), "rb") as src, open(self.part, "wb") as dst:
            good = src.read(half)
            dst.write(good[:1000] + bytes([good[1000] ^ 0xFF]) + good[1001:])
        mark = support.access_log_mark()
        res = self.fetch("a", "--json")
        self.assert_tree("a", res)
        requests = self.artifact_requests(mark)
        self.assertEqual([(r["range"], r["status"]) for r in requests], [(f"bytes={half}-", "206"), ("", "200")],
                         requests)
        self.assertEqual(int(requests[1]["body_bytes_sent"]), self.size)
        self.assertFalse(os.path.exists(self.part))
        self.assertEqual(support.sha256_file(self.blob), self.sha256)
        self.assert_no_unverified_blob()

    def test_complete_part_file_with_wrong_bytes_is_downloaded_again(self):
        # As above, with the whole length: no request resumes it, the hash
        # refuses it, and one full download follows.
        os.makedirs(os.path.dirname(self.part))
        with open(self.part, "wb") as dst:
            dst.write(b"\0" * self.size)
        mark = support.access_log_mark()
        res = self.fetch("a", "--json")
        self.assert_tree("a", res)
        requests = self.artifact_requests(mark)
        self.assertEqual([(r["range"], r["status"]) for r in requests], [("", "200")], requests)
        self.assertEqual(support.sha256_file(self.blob), self.sha256)

    def test_part_file_left_by_a_killed_process_is_resumed(self):
        mark = support.access_log_mark()
        tool = support.BackgroundTool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "a"), self.base,
                                                                 self.cache),
                                      env={**CLEAN_ENV, "REDIST_DEBUG_PAUSE": "mid-download"})
        try:
            self.assertTrue(tool.wait_for_stderr("redist-debug: paused at mid-download"), tool.stderr)
        finally:
            tool.kill()
        self.assertTrue(os.path.exists(self.part), "the interrupted download must stay as .part")
        self.assertFalse(os.path.exists(self.blob))
        have = os.path.getsize(self.part)
        self.assertGreater(have, 0)
        self.assertLess(have, self.size)
        first = self.artifact_requests(mark)
        self.assertEqual(len(first), 1, first)
        mark = support.access_log_mark()
        res = self.fetch("b", "--json")
        self.assert_tree("b", res)
        requests = self.artifact_requests(mark)
        self.assertEqual(len(requests), 1, requests)
        self.assertEqual(requests[0]["range"], f"bytes={have}-")
        self.assertEqual(int(requests[0]["body_bytes_sent"]), self.size - have)
        self.assertEqual(support.sha256_file(self.blob), self.sha256)


class CiRestore(CacheCase):
    """A CI job saves the cache after one cold install; the next job restores
    it (new inodes and ctimes, mtimes kept: what actions/cache's tar or cp -a
    give) and installs from its extracted tree, decoding and downloading
    nothing."""

    def restore(self):
        restored = os.path.join(self.scratch, "restored")
        subprocess.run(["cp", "-a", self.cache, restored], check=True)
        return restored

    def test_first_install_from_a_restored_cache_uses_the_tree(self):
        self.assertFalse(self.report(self.fetch("a", "--json"))["from_cache"])
        restored = self.restore()
        mark = support.access_log_mark()
        res = self.fetch("b", "--offline", "--json", cache=restored)
        report = self.report(res)
        self.assertTrue(report["from_tree"], report)
        self.assertEqual(report["requests"], 0, report)
        self.assertEqual(support.access_log_since(mark), [])
        self.assert_tree("b")
        # Verified once by its digests, the tree's new identity is recorded:
        # the next install takes it as well (and says so).
        res = self.fetch("c", "--offline", cache=restored)
        self.assert_tree("c", res)
        self.assertRegex(res.stdout, r"(?m)^  cudnn .*\(cache tree\)$")

    def test_a_restored_tree_with_an_edited_file_is_not_used(self):
        self.fetch("a", check=0)
        restored = self.restore()
        support_edit_keeping_size_and_mtime(os.path.join(restored, "trees", self.sha256, "include", "cudnn.h"))
        report = self.report(self.fetch("b", "--offline", "--json", cache=restored))
        self.assertFalse(report["from_tree"], report)
        self.assertTrue(report["from_cache"], report)  # the blob, re-verified
        self.assert_tree("b")


class Offline(CacheCase):
    def test_offline_after_online_run_with_server_gone(self):
        # The base URL must be the same one the online run used (documents
        # are cached by URL), so it is a fault server that is then stopped.
        root = support.copy_mirror(os.path.join(self.scratch, "root"), products=["cudnn"])
        server = support.FaultServer(root, os.path.join(self.scratch, "server"))
        try:
            base = server.base
            self.fetch("online", base=base, check=0)
        finally:
            server.stop()
        # Its process is gone (not "its port is closed": a test running in
        # parallel may bind the freed port at once); requests == 0 below says
        # the offline run did not try.
        self.assertIsNotNone(server.proc.poll(), "the server must be gone")
        res = self.fetch("offline", "--offline", "--json", base=base)
        report = self.report(res)
        self.assertTrue(report["from_cache"], report)
        self.assertEqual(report["requests"], 0)
        self.assert_tree("offline")

    def test_offline_finds_a_release_a_mirror_served(self):
        # Installed through a mirror; offline, without the mirror, the base's
        # URL was never asked: the cache still has the release, and says
        # which source served its manifest.
        root = support.copy_mirror(os.path.join(self.scratch, "root"), products=["cudnn"])
        server = support.FaultServer(root, os.path.join(self.scratch, "server"))
        try:
            mirror = server.base
            server.set_faults({"/cudnn/redist/": {"serve": "/cudnn/redist/index.html"}})
            # "9": the mirror's index is read too.
            args = fetch_args(os.path.join(self.scratch, "online"), "http://127.0.0.1:9/never", self.cache,
                              "--mirror", mirror)
            args[0] = LABEL.split(".")[0]
            support.run_tool("cudnn-fetch", *args, env=CLEAN_ENV, check=0)
        finally:
            server.stop()
        self.assertIsNotNone(server.proc.poll(), "the server must be gone")
        for spec in (LABEL, LABEL.split(".")[0]):  # an exact label, and a version spec the index answers
            with self.subTest(spec=spec):
                args = fetch_args(os.path.join(self.scratch, "offline-" + spec), self.base, self.cache, "--offline",
                                  "--json")
                args[0] = spec
                res = support.run_tool("cudnn-fetch", *args, env=CLEAN_ENV, check=None)
                report = self.report(res)
                self.assertTrue(report["from_cache"], report)
                self.assertEqual(report["requests"], 0)
                self.assertIn(f"offline: using cudnn {LABEL}'s manifest as {mirror}/cudnn/redist/redistrib_{LABEL}.json "
                              "served it (cached)", res.stderr)
                self.assert_tree("offline-" + spec)

    def test_offline_makes_no_requests(self):
        self.fetch("online", check=0)
        mark = support.access_log_mark()
        res = self.fetch("offline", "--offline")
        self.assert_tree("offline", res)
        self.assertEqual(support.access_log_since(mark), [])

    def test_offline_without_cache_says_what_is_missing(self):
        base = "http://127.0.0.1:9"  # nothing listens there
        res = self.fetch("p", "--offline", "--quiet", base=base)
        self.assertEqual(res.returncode, 3, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn(base + "/cudnn/redist/", lines[0])
        self.assertIn("offline", lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.scratch, "p", "include")))


class CacheCommand(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.cache = os.path.join(self.scratch, "cache")
        rec = artifact_record()
        self.sha256, self.size = rec["sha256"], int(rec["size"])
        self.blob_rel = rec["relative_path"]
        self.blob = os.path.join(self.cache, "blobs", "sha256", self.sha256)

    def cache_cmd(self, *args, check=0):
        return support.run_tool("redist", "cache", *args, "--cache-dir", self.cache, env=CLEAN_ENV, check=check)

    def listed(self):
        return json.loads(self.cache_cmd("list", "--json").stdout)

    def test_dir(self):
        self.assertEqual(self.cache_cmd("dir").stdout.strip(), os.path.abspath(self.cache))
        env = {**CLEAN_ENV, "XDG_CACHE_HOME": os.path.join(self.scratch, "xdg")}
        res = support.run_tool("redist", "cache", "dir", env=env, check=0)
        self.assertEqual(res.stdout.strip(), os.path.join(self.scratch, "xdg", "redist"))
        env["REDIST_CACHE_DIR"] = os.path.join(self.scratch, "env")
        res = support.run_tool("redist", "cache", "dir", env=env, check=0)
        self.assertEqual(res.stdout.strip(), os.path.join(self.scratch, "env"))

    def test_list_and_prune(self):
        self.assertEqual(self.listed(), [])
        for name in ("p", "p2"):  # the second install keeps the extracted tree
            support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, name), support.nginx_base_url(),
                                                        self.cache, "--quiet"), env=CLEAN_ENV, check=0)
        self.assertTrue(os.listdir(os.path.join(self.cache, "trees")))
        # A second blob, half downloaded.
        other = "ab" * 32
        with open(os.path.join(self.cache, "blobs", "sha256", other + ".part"), "wb") as f:
            f.write(b"x" * 1000)
        entries = {e["sha256"]: e for e in self.listed()}
        self.assertEqual(set(entries), {self.sha256, other})
        self.assertEqual((entries[self.sha256]["size"], entries[self.sha256]["partial"]), (self.size, False))
        self.assertTrue(entries[other]["partial"])
        text = self.cache_cmd("list").stdout
        self.assertIn(self.sha256, text)

        # Everything was used just now: nothing is older than a day.
        self.cache_cmd("prune", "--older-than", "1d")
        self.assertEqual({e["sha256"] for e in self.listed()}, {self.sha256, other})
        # Aged by three days, the .part goes; the blob is too old as well...
        old = time.time() - 3 * DAY
        for name in (self.sha256, other + ".part"):
            os.utime(os.path.join(self.cache, "blobs", "sha256", name), (old, old))
        self.cache_cmd("prune", "--older-than", "1d")
        self.assertEqual(self.listed(), [])
        self.assertFalse(os.path.exists(self.blob))

        # A bare prune names no criterion: refused (exit 2, naming the
        # criteria and `cache clean`), and nothing is removed.
        base = support.nginx_base_url()
        support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "q"), base, self.cache, "--quiet"),
                         env=CLEAN_ENV, check=0)
        before = self.listed()
        self.assertTrue(before)
        res = self.cache_cmd("prune", check=2)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        for needle in ("--older-than", "--max-size", "cache clean"):
            self.assertIn(needle, res.stderr)
        self.assertEqual(self.listed(), before)
        # clean --dry-run says how much, and removes nothing.
        res = self.cache_cmd("clean", "--dry-run")
        self.assertRegex(res.stdout, r"^would free \S+ \S+ \(1 entry\) in ")
        self.assertEqual(self.listed(), before)
        # clean empties the cache: blobs and extracted trees alike, so the
        # next install downloads again.
        res = self.cache_cmd("clean")
        self.assertIn(self.cache, res.stdout)
        self.assertEqual(self.listed(), [])
        self.assertEqual(os.listdir(os.path.join(self.cache, "blobs", "sha256")), [])
        trees = os.path.join(self.cache, "trees")
        self.assertEqual(os.listdir(trees) if os.path.isdir(trees) else [], [],
                         "prune left extracted trees behind")
        mark = support.access_log_mark()
        res = support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "r"), base,
                                                          self.cache, "--json"), env=CLEAN_ENV, check=0)
        self.assertFalse(json.loads(res.stdout)["components"][0]["from_cache"])
        self.assertEqual(len([e for e in support.access_log_since(mark)
                              if e["uri"].endswith(os.path.basename(self.blob_rel))]), 1)

    def test_list_sizes_are_what_du_counts(self):
        support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "p"), support.nginx_base_url(),
                                                    self.cache, "--quiet"), env=CLEAN_ENV, check=0)
        other = "ab" * 32
        with open(os.path.join(self.cache, "blobs", "sha256", other + ".part"), "wb") as f:
            f.write(b"x" * 1000)
        blobs = os.path.join(self.cache, "blobs", "sha256")

        def du(*paths):  # bytes on disk, each inode once across the paths (du -c)
            res = subprocess.run(["du", "-s", "-B1", "-c", *paths], check=True, capture_output=True, text=True)
            return int(res.stdout.splitlines()[-1].split()[0])

        entries = {e["sha256"]: e for e in self.listed()}
        tree = os.path.join(self.cache, "trees", self.sha256)
        self.assertTrue(os.path.isdir(tree))
        self.assertEqual(entries[self.sha256]["disk_bytes"], du(os.path.join(blobs, self.sha256), tree))
        self.assertEqual(entries[other]["disk_bytes"], du(os.path.join(blobs, other + ".part")))
        self.assertEqual(entries[self.sha256]["size"], self.size)
        total = sum(e["disk_bytes"] for e in entries.values())
        self.assertIn(f"2 entries, {human(total)} in", self.cache_cmd("list").stdout)

    def test_using_a_blob_counts_as_use_for_prune(self):
        base = support.nginx_base_url()
        support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "p"), base, self.cache, "--quiet"),
                         env=CLEAN_ENV, check=0)
        old = time.time() - 3 * DAY
        os.utime(self.blob, (old, old))
        support.rm_tree(os.path.join(self.cache, "trees"))
        res = support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "q"), base, self.cache,
                                                          "--json"), env=CLEAN_ENV, check=0)
        self.assertTrue(json.loads(res.stdout)["components"][0]["from_cache"])
        # Used a moment ago: "unused for a day" does not apply.
        self.cache_cmd("prune", "--older-than", "1d")
        self.assertEqual([e["sha256"] for e in self.listed()], [self.sha256],
                         "prune --older-than removed a blob that was just used")

    def test_prune_removes_what_killed_runs_left(self):
        support.run_tool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, "p"), support.nginx_base_url(),
                                                    self.cache, "--quiet"), env=CLEAN_ENV, check=0)
        trees, docs = os.path.join(self.cache, "trees"), os.path.join(self.cache, "documents")
        hist_urls, hist_docs = (os.path.join(self.cache, "history", d) for d in ("urls", "documents"))
        for d in (hist_urls, hist_docs):
            os.makedirs(d, exist_ok=True)
        outside = os.path.join(self.scratch, "outside")
        os.makedirs(outside)
        with open(os.path.join(outside, "keep"), "w") as f:
            f.write("mine")

        def write(path, data=b"x" * 4096):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

        # A tree a killed fetch was storing (its blob lock is free), with a
        # symlink out of it that removal must not follow, and one a killed
        # prune was removing.
        dead = "cd" * 32
        partial = os.path.join(trees, dead + ".partial.999999.0")
        write(os.path.join(partial, "lib", "libdead.so"))
        os.symlink(outside, os.path.join(partial, "lib", "out"))
        stale = os.path.join(trees, dead + ".stale.999999.1")
        write(os.path.join(stale, "include", "dead.h"))
        # A tree being stored right now: its blob lock is held.
        live = os.path.join(trees, "ef" * 32 + ".partial.1.0")
        write(os.path.join(live, "lib", "liblive.so"))
        lock = open(os.path.join(self.cache, "locks", "ef" * 32 + ".lock"), "w")
        self.addCleanup(lock.close)
        fcntl.flock(lock, fcntl.LOCK_EX)
        # A drift history update a killed run left (its URL lock is free).
        history_tmp = os.path.join(hist_urls, "12" * 32 + ".json.tmp.999999.0")
        write(history_tmp, b'{"history_version": 1')
        # Temp files no lock guards: gone once old, kept while fresh.
        old_doc = os.path.join(docs, "34" * 32 + ".tmp.999999.0")
        old_hist_doc = os.path.join(hist_docs, "78" * 32 + ".tmp.999999.0")
        fresh_doc = os.path.join(docs, "56" * 32 + ".tmp.999999.1")
        for p in (old_doc, old_hist_doc, fresh_doc):
            write(p)
        two_hours_ago = time.time() - 7200
        for p in (old_doc, old_hist_doc):
            os.utime(p, (two_hours_ago, two_hours_ago))

        self.cache_cmd("prune", "--older-than", "365d")
        for gone in (partial, stale, history_tmp, old_doc, old_hist_doc):
            self.assertFalse(os.path.lexists(gone), gone)
        for kept in (live, fresh_doc, self.blob):
            self.assertTrue(os.path.exists(kept), kept)
        with open(os.path.join(outside, "keep")) as f:
            self.assertEqual(f.read(), "mine")
        # Once its lock is free, the tree being stored is a leftover too.
        lock.close()
        self.cache_cmd("prune", "--older-than", "365d")
        self.assertFalse(os.path.lexists(live))
        self.assertTrue(os.path.exists(self.blob))

    def test_bad_duration(self):
        res = self.cache_cmd("prune", "--older-than", "soon", check=None)
        self.assertEqual(res.returncode, 2, support.describe(res))


class SingleFlight(unittest.TestCase):
    """8 processes, 8 prefixes, one empty shared cache: one download."""

    N = 8

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        root = support.copy_mirror(os.path.join(self.scratch, "root"), products=["cudnn"])
        self.server = support.FaultServer(root, os.path.join(self.scratch, "server"))
        self.addCleanup(self.server.stop)
        rec = artifact_record()
        self.path = "/cudnn/redist/" + rec["relative_path"]
        self.size = int(rec["size"])

    def test_eight_processes_download_once(self):
        # Throttled: every response pauses 1 s after 1000 bytes, so the
        # processes really overlap while the first one downloads.
        self.server.set_faults({self.path: {"stall_after": 1000, "stall_seconds": 1}})
        self.server.reset()
        cache = os.path.join(self.scratch, "cache")
        tools = [support.BackgroundTool("cudnn-fetch", *fetch_args(os.path.join(self.scratch, f"p{i}"),
                                                                   self.server.base, cache),
                                        env=CLEAN_ENV)
                 for i in range(self.N)]
        results = []
        try:
            for t in tools:
                results.append(t.wait(timeout=90))
        finally:
            for t in tools:
                t.kill()
        for res in results:
            self.assertEqual(res.returncode, 0, support.describe(res))
        trees = [snapshot(os.path.join(self.scratch, f"p{i}")) for i in range(self.N)]
        self.assertTrue(any(k.endswith("include/cudnn.h") for k in trees[0]))
        for i, tree in enumerate(trees[1:], 1):
            self.assertEqual(tree, trees[0], f"p{i}: " + support.diff_snapshots(trees[0], tree))
        log = self.server.log(self.path)
        self.assertEqual(len(log), 1, log)
        self.assertEqual(log[0]["bytes_sent"], self.size)
        waited = [r for r in results if "waiting for another process downloading the same archive" in r.stderr]
        self.assertGreaterEqual(len(waited), 1, "\n".join(r.stderr for r in results))


if __name__ == "__main__":
    unittest.main()
