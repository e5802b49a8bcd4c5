"""`redist sync`: a redist.toml with three products and two platforms against
a generated mirror served over HTTP (the fault server, for its request log):
the union is installed in one transaction, a second sync is a no-op,
--locked makes no index or manifest requests and refuses a stale lock,
--exclude skips entries (receipts record them, verify passes), a renamed
component (cuda_cccl -> cccl) keeps working, the free-space preflight
fails before any download on a small tmpfs, and the prefix holds exactly what
the project names: components dropped from it (or put there by `redist fetch`)
are removed in the same journal as the installs, unless --keep-unlisted."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import unittest

import support

NCCL_LABEL = "2.27.3"
PLATFORMS = ("linux-x86_64", "linux-sbsa")


def make_nccl(mirror, big=0):
    """A third product, `nccl`, with one plain artifact per platform:
    include/nccl.h, lib/libnccl.so.2, lib/libnccl_static.a (+ `big` random,
    incompressible bytes in lib/libnccl_big.bin) and a LICENSE."""
    root = os.path.join(mirror, "nccl", "redist")
    doc = {"release_date": "2026-01-01", "release_label": NCCL_LABEL, "release_product": "nccl",
           "nccl": {"name": "NCCL", "license": "test", "version": NCCL_LABEL}}
    for platform in PLATFORMS:
        top = f"nccl-{platform}-{NCCL_LABEL}-archive"
        rel = f"nccl/{platform}/{top}.tar.xz"
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        files = {"LICENSE": b"license\n", "include/nccl.h": b"#define NCCL 2\n",
                 "lib/libnccl.so.2": platform.encode() * 100, "lib/libnccl_static.a": b"!<arch>\n" + b"s" * 500}
        if big:
            files["lib/libnccl_big.bin"] = os.urandom(big)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.GNU_FORMAT) as tf:
            for d in (top, f"{top}/include", f"{top}/lib"):
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            for name, data in files.items():
                ti = tarfile.TarInfo(f"{top}/{name}")
                ti.size, ti.mode = len(data), 0o644
                tf.addfile(ti, io.BytesIO(data))
            ti = tarfile.TarInfo(f"{top}/lib/libnccl.so")
            ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, "libnccl.so.2", 0o777
            tf.addfile(ti)
        data = buf.getvalue()
        with open(path, "wb") as f:
            f.write(data)
        doc["nccl"][platform] = {"relative_path": rel, "sha256": hashlib.sha256(data).hexdigest(),
                                 "md5": hashlib.md5(data).hexdigest(), "size": str(len(data))}
    support.save_json(os.path.join(root, f"redistrib_{NCCL_LABEL}.json"), doc)


def make_product(mirror, product, label, components):
    """A product with plain artifacts (one per platform) for each component:
    components = {component: {path: bytes}} (paths inside the archive's
    top-level directory; a top-level file becomes share/licenses/<component>/)."""
    root = os.path.join(mirror, product, "redist")
    doc = {"release_date": "2026-01-01", "release_label": label, "release_product": product}
    for component, files in components.items():
        doc[component] = {"name": component, "license": "test", "version": label}
        for platform in PLATFORMS:
            top = f"{component}-{platform}-{label}-archive"
            rel = f"{component}/{platform}/{top}.tar.xz"
            data = support.write_xz_archive(root, rel, top, files)
            doc[component][platform] = support.artifact_entry(rel, data)
    support.save_json(os.path.join(root, f"redistrib_{label}.json"), doc)


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class OneTransaction:
    """`sync` and `fetch` are two front ends of one install(): the same
    receipts, the same --profile stages, the same thread budget, and the same
    --dry-run plan. Mixed into Sync (its fixture and helpers)."""

    def fetch(self, prefix, product, version, *args, cache=None):
        return support.run_tool("redist", "fetch", product, version, "--prefix", prefix, "--platform", "linux-x86_64",
                                "--base-url", self.server.url(), "--cache-dir", cache or self.cache, "--no-check",
                                *args, check=True)

    def comparable_receipts(self, prefix):
        out = self.receipts(prefix)
        for r in out.values():
            r.pop("installed_at", None)
        return out

    def profile_stages(self, stderr):
        lines = [line for line in stderr.splitlines() if line.startswith("profile: ")]
        self.assertTrue(lines, stderr)
        return lines[0], {line.split()[1] for line in lines[1:]}

    def test_sync_and_fetch_write_identical_receipts(self):
        self.write_project(products=("cudnn", "nccl"))
        self.sync(check=True)
        fetched = os.path.join(self.dir, "fetched")
        self.fetch(fetched, "cudnn", "9", "--component", "cudnn", "--cuda", "12",
                   cache=os.path.join(self.dir, "cache-fetch"))
        self.fetch(fetched, "nccl", NCCL_LABEL, cache=os.path.join(self.dir, "cache-fetch"))
        synced = self.comparable_receipts(self.prefix)
        self.assertEqual(set(synced), {("cudnn", "cudnn"), ("nccl", "nccl")})
        self.assertEqual(synced, self.comparable_receipts(fetched))

    def test_profile_stages_and_thread_budget_are_fetchs(self):
        self.write_project(products=("cudnn",))
        res = self.sync("--no-cache", "--threads", "2", "--profile", check=True)
        sync_head, sync_stages = self.profile_stages(res.stderr)
        self.assertTrue(sync_head.startswith("profile: 2 threads,"), sync_head)
        res = self.fetch(os.path.join(self.dir, "fetched"), "cudnn", "9", "--component", "cudnn", "--cuda", "12",
                         "--no-cache", "--threads", "2", "--profile")
        fetch_head, fetch_stages = self.profile_stages(res.stderr)
        self.assertTrue(fetch_head.startswith("profile: 2 threads,"), fetch_head)
        self.assertEqual(sync_stages, fetch_stages)
        self.assertIn("committed", sync_stages)

    def threads_at_mid_download(self, *args):
        tool = support.BackgroundTool("redist", *args, env={"REDIST_DEBUG_PAUSE": "mid-download"})
        try:
            self.assertTrue(tool.wait_for_stderr("redist-debug: paused at mid-download"), tool.stderr)
            return len(os.listdir(f"/proc/{tool.proc.pid}/task"))
        finally:
            tool.kill()

    def test_sync_runs_under_the_thread_budget(self):
        make_nccl(self.mirror, big=24 << 20)  # large enough to pause half-way
        self.write_project(products=("nccl",))
        synced = self.threads_at_mid_download(*self.sync_args("--no-cache", "--threads", "1", "-q"))
        fetched = self.threads_at_mid_download(
            "fetch", "nccl", NCCL_LABEL, "--prefix", os.path.join(self.dir, "fetched"), "--platform", "linux-x86_64",
            "--base-url", self.server.url(), "--no-cache", "--no-check", "--threads", "1", "-q")
        # The main thread, one job (--threads 1), and the budget's one decoder/writer thread: never one per core.
        # ThreadSanitizer's runtime adds a background thread of its own (the tsan preset sets TSAN_OPTIONS).
        sanitizer_threads = 1 if "TSAN_OPTIONS" in os.environ else 0
        self.assertLessEqual(synced, fetched)
        self.assertLessEqual(synced, 1 + 1 + 2 + sanitizer_threads, f"{synced} threads under --threads 1")

    def test_dry_run_prints_each_plan_kind_and_changes_nothing(self):
        self.write_project(products=("cuda",))  # cuda_nvcc and cuda_cudart
        self.server.reset()
        res = self.sync("--dry-run", check=True)
        self.assertFalse(os.path.exists(self.prefix), "--dry-run created the prefix")
        self.assertFalse(os.path.exists(self.lock), "--dry-run wrote the lock file")
        # Their files are not known yet: the archives are read into the cache (each once) to check them.
        self.assertEqual(len([e for e in self.server.log() if e["path"].endswith(".tar.xz")]), 2)
        self.assertRegex(res.stdout, r"(?m)^download +cuda +cuda_nvcc ")
        self.assertIn("plan: 2 to download", res.stdout)
        self.assertRegex(res.stdout, r"(?m)^read 2 archives \(.*\) into the cache to list their files$")
        self.assertRegex(res.stdout, r"(?m)^conflicts: none$")
        self.server.reset()
        self.sync(check=True)  # from the cache's extracted trees
        self.assertEqual([e for e in self.server.log() if e["path"].endswith(".tar.xz")], [])
        shutil.rmtree(self.prefix)
        self.assertRegex(self.sync("--dry-run", check=True).stdout, r"(?m)^cached-tree +cuda +cuda_nvcc ")
        shutil.rmtree(os.path.join(self.cache, "trees"))  # the archives alone
        res = self.sync("--dry-run", check=True)
        self.assertRegex(res.stdout, r"(?m)^cached-archive +cuda +cuda_nvcc ")
        self.sync(check=True)
        self.write_project(products=("cuda",), cuda_components='["cuda_nvcc"]')
        before = support.tree_snapshot(self.prefix)
        res = self.sync("--dry-run", check=True)
        self.assertRegex(res.stdout, r"(?m)^unchanged +cuda +cuda_nvcc ")
        self.assertRegex(res.stdout, r"(?m)^remove +cuda +cuda_cudart ")
        self.assertIn("1 unchanged, 1 to remove", res.stdout)
        self.assertEqual(support.tree_snapshot(self.prefix), before)
        # fetch prints the same plan
        fetched = os.path.join(self.dir, "fetched")
        res = self.fetch(fetched, "cuda", "12.9.1", "--component", "cuda_nvcc", "--dry-run",
                         cache=os.path.join(self.dir, "empty-cache"))
        self.assertRegex(res.stdout, r"(?m)^download +cuda +cuda_nvcc ")
        self.assertFalse(os.path.exists(fetched), "fetch --dry-run created the prefix")
        self.fetch(fetched, "cuda", "12.9.1", "--component", "cuda_nvcc")
        res = self.fetch(fetched, "cuda", "12.9.1", "--component", "cuda_nvcc", "--dry-run")
        self.assertRegex(res.stdout, r"(?m)^unchanged +cuda +cuda_nvcc ")


class SyncCase(unittest.TestCase):
    """A project of three products over the fault server, and its helpers (no tests)."""

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=["cuda", "cudnn"])
        make_nccl(self.mirror)
        self.server = support.FaultServer(self.mirror, os.path.join(self.dir, "server"))
        self.addCleanup(self.server.stop)
        # Directory URLs get the NVIDIA-style index (cudnn "9" is resolved through it).
        self.server.set_faults({"/cudnn/redist/": {"serve": "/cudnn/redist/index.html"}})
        self.project = os.path.join(self.dir, "redist.toml")
        self.lock = os.path.join(self.dir, "redist.lock")
        self.prefix = os.path.join(self.dir, "prefix")
        self.cache = os.path.join(self.dir, "cache")
        self.write_project()

    def write_project(self, cudnn_components='["cudnn"]', exclude=None, prefix="prefix", cuda_version="12.9.1",
                      cuda_components='["cuda_nvcc", "cuda_cudart"]', products=("cuda", "cudnn", "nccl"),
                      platforms=PLATFORMS, cuda="12", base=None, extra=""):
        lines = ["[project]", f'prefix = "{prefix}"',
                 "platforms = [" + ", ".join(f'"{p}"' for p in platforms) + "]",
                 f'cuda = "{cuda}"', f'base-url = "{base or self.server.url()}"']
        if exclude is not None:
            lines.append("exclude = [" + ", ".join(f'"{g}"' for g in exclude) + "]")
        if "cuda" in products:
            lines += ["", "[products.cuda]", f'version = "{cuda_version}"', f"components = {cuda_components}"]
        if "cudnn" in products:
            lines += ["", "[products.cudnn]", 'version = "9"', f"components = {cudnn_components}"]
        if "nccl" in products:
            lines += ["", "[products.nccl]", f'version = "{NCCL_LABEL}"']
        if extra:
            lines += ["", extra]
        with open(self.project, "w") as f:
            f.write("\n".join(lines) + "\n")

    def sync_args(self, *args):
        return ["sync", "--file", self.project, "--platform", "linux-x86_64", "--cache-dir", self.cache, *args]

    def sync(self, *args, check=None, env=None):
        return support.run_tool("redist", *self.sync_args(*args), check=check, env=env)

    def installed(self):
        """Every file and symlink in the prefix (not .redist/), with its content."""
        return {p: n for p, n in support.tree_snapshot(self.prefix, ignore=r"^\.redist").items() if n.kind != "dir"}

    def files_of(self, product, component):
        return {f["path"] for f in self.receipts()[(product, component)]["files"]}

    def receipts(self, prefix=None):
        root = os.path.join(prefix or self.prefix, ".redist", "receipts")
        out = {}
        for product in sorted(os.listdir(root)):
            for name in sorted(os.listdir(os.path.join(root, product))):
                out[(product, name[:-5])] = support.load_json(os.path.join(root, product, name))
        return out

    def expected(self, platform):
        """(product, component) -> the manifest's artifact record on `platform`."""
        cuda = support.load_manifest("cuda", "12.9.1", self.mirror)
        cudnn = support.load_manifest("cudnn", "9.27.0", self.mirror)
        nccl = support.load_manifest("nccl", NCCL_LABEL, self.mirror)
        return {("cuda", "cuda_nvcc"): support.find_artifact(cuda, "cuda_nvcc", platform),
                ("cuda", "cuda_cudart"): support.find_artifact(cuda, "cuda_cudart", platform),
                ("cudnn", "cudnn"): support.find_artifact(cudnn, "cudnn", platform, "cuda12"),
                ("nccl", "nccl"): support.find_artifact(nccl, "nccl", platform)}



class Sync(OneTransaction, SyncCase):
    def test_union_noop_locked_and_frozen(self):
        self.server.reset()
        res = self.sync(check=0)
        # Exactly the union of the three products, for this platform, from one transaction.
        receipts = self.receipts()
        want = self.expected("linux-x86_64")
        self.assertEqual(set(receipts), set(want))
        for key, rec in want.items():
            self.assertEqual(receipts[key]["archive_sha256"], rec["sha256"], key)
        self.assertIn("3 products for linux-x86_64: 4 components installed, 0 unchanged", res.stdout)
        # ... and nothing else: every file in the prefix belongs to one of those receipts.
        on_disk = {p for p, n in support.tree_snapshot(self.prefix, ignore=r"^\.redist").items() if n.kind != "dir"}
        self.assertEqual(on_disk, {f["path"] for r in receipts.values() for f in r["files"]})
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)
        # The resolution did read the index and the manifests (so the --locked check below can fail).
        paths = [e["path"] for e in self.server.log()]
        self.assertIn("/cudnn/redist/", paths)
        self.assertIn("/cuda/redist/redistrib_12.9.1.json", paths)

        # The lock: every product, both platforms, URLs, hashes, sizes, manifest hashes.
        lock = support.load_json(self.lock)
        self.assertEqual(lock["lock_version"], 2)
        self.assertEqual(lock["platforms"], sorted(PLATFORMS))
        self.assertEqual([p["name"] for p in lock["products"]], ["cuda", "cudnn", "nccl"])
        labels = {p["name"]: p["release_label"] for p in lock["products"]}
        self.assertEqual(labels, {"cuda": "12.9.1", "cudnn": "9.27.0", "nccl": NCCL_LABEL})
        for p in lock["products"]:
            self.assertEqual(p["manifest_sha256"],
                             file_sha256(support.manifest_path(p["name"], p["release_label"], self.mirror)))
        for platform in PLATFORMS:
            locked = {(p["name"], a["component"]): a for p in lock["products"] for a in p["artifacts"]
                      if a["platform"] == platform}
            want = self.expected(platform)
            self.assertEqual(set(locked), set(want), platform)
            for key, rec in want.items():
                self.assertEqual((locked[key]["sha256"], locked[key]["size"]), (rec["sha256"], int(rec["size"])))
                self.assertTrue(locked[key]["url"].startswith(self.server.url(f"/{key[0]}/redist/")))
        with open(self.lock, "rb") as f:
            lock_bytes = f.read()
        lock_mtime = os.stat(self.lock).st_mtime_ns

        # A second sync is a no-op: nothing installed, the lock untouched, the prefix unchanged.
        before = support.tree_snapshot(self.prefix)
        res = self.sync(check=0)
        self.assertIn("0 components installed, 4 unchanged", res.stdout)
        self.assertNotIn("wrote", res.stdout)
        self.assertEqual(os.stat(self.lock).st_mtime_ns, lock_mtime)
        self.assertEqual(support.diff_snapshots(before, support.tree_snapshot(self.prefix)), "")

        # --locked into a fresh prefix, without the cache: archives only, no index, no manifest.
        fresh = os.path.join(self.dir, "fresh")
        self.write_project(prefix="fresh")
        self.server.reset()
        support.run_tool("redist", "sync", "--file", self.project, "--platform", "linux-x86_64", "--locked",
                         "--no-cache", check=0)
        log = self.server.log()
        self.assertEqual(len(log), 4, log)  # one GET per archive
        for e in log:
            self.assertFalse(e["path"].endswith("/") or e["path"].endswith(".json"), e)
        self.assertEqual({k: r["archive_sha256"] for k, r in self.receipts(fresh).items()},
                         {k: r["archive_sha256"] for k, r in receipts.items()})
        with open(self.lock, "rb") as f:
            self.assertEqual(f.read(), lock_bytes)

        # The project changes: --locked refuses the stale lock (exit 4), --frozen installs the lock as is.
        self.write_project(cudnn_components='["cudnn", "cudnn_jit"]')
        res = self.sync("--locked")
        self.assertEqual(res.returncode, 4, support.describe(res))
        self.assertIn("out of date", res.stderr)
        self.assertIn("products.cudnn.components", res.stderr)
        self.assertIn("redist lock", res.stderr)
        res = self.sync("--frozen", check=0)
        self.assertNotIn("out of date", res.stderr)
        self.assertIn("4 unchanged", res.stdout)
        with open(self.lock, "rb") as f:
            self.assertEqual(f.read(), lock_bytes)
        # A plain sync resolves what changed, rewrites the lock, and adds cudnn_jit.
        res = self.sync(check=0)
        self.assertIn("1 component installed, 4 unchanged", res.stdout)
        self.assertIn(("cudnn", "cudnn_jit"), self.receipts())
        self.sync("--locked", check=0)

    def test_all_or_nothing(self):
        # One bad archive (nccl's bytes do not match the manifest): nothing of any product lands.
        nccl = support.load_manifest("nccl", NCCL_LABEL, self.mirror)
        path = "/nccl/redist/" + support.find_artifact(nccl, "nccl", "linux-x86_64")["relative_path"]
        self.server.set_faults({"/cudnn/redist/": {"serve": "/cudnn/redist/index.html"},
                                path: {"corrupt_byte_at": 100}})
        res = self.sync("--retries", "1")
        self.assertEqual(res.returncode, 5, support.describe(res))
        receipts = os.path.join(self.prefix, ".redist", "receipts")
        self.assertFalse(os.path.exists(receipts) and os.listdir(receipts), "nothing may be committed")
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "bin")))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib")))

    def test_other_platform_and_unlisted_platform(self):
        res = support.run_tool("redist", "sync", "--file", self.project, "--platform", "linux-sbsa",
                               "--cache-dir", self.cache, check=0)
        receipts = self.receipts()
        want = self.expected("linux-sbsa")
        self.assertEqual({k: r["archive_sha256"] for k, r in receipts.items()},
                         {k: r["sha256"] for k, r in want.items()})
        self.assertIn("4 components installed", res.stdout)
        res = support.run_tool("redist", "sync", "--file", self.project, "--platform", "windows-x86_64")
        self.assertEqual(res.returncode, 2, support.describe(res))
        self.assertIn("not in project.platforms", res.stderr)

    def test_exclude(self):
        self.write_project(exclude=["lib/*_static*.a"])
        self.sync("--exclude", "include", check=0)
        nccl = self.receipts()[("nccl", "nccl")]
        self.assertEqual(nccl["exclude"], ["lib/*_static*.a", "include"])
        self.assertEqual(nccl["excluded"], ["include/nccl.h", "lib/libnccl_static.a"])
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libnccl_static.a")))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "include", "nccl.h")))
        self.assertTrue(os.path.exists(os.path.join(self.prefix, "lib", "libnccl.so.2")))
        self.assertNotIn("lib/libnccl_static.a", [f["path"] for f in nccl["files"]])
        res = support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)
        self.assertIn("all match their receipts", res.stdout)
        # Other globs: the components are reinstalled (from the cache), the files come back.
        res = self.sync(check=0)
        self.assertIn("4 components installed", res.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.prefix, "include", "nccl.h")))
        self.assertNotIn("include/nccl.h", self.receipts()[("nccl", "nccl")].get("excluded", []))
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)

    def test_exclude_glob_matching_nothing_warns(self):
        self.write_project(exclude=["lib/*_static*.a", "lib/*statik*"])
        res = self.sync("--exclude", "no/such/dir", check=0)
        warnings = [line for line in res.stderr.splitlines() if "warning: exclude glob" in line]
        self.assertEqual(warnings, [
            "redist: warning: exclude glob 'lib/*statik*' matched no file in the installed archives",
            "redist: warning: exclude glob 'no/such/dir' matched no file in the installed archives"], res.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libnccl_static.a")))

    def test_renamed_component_keeps_working(self):
        # CUDA 13 calls cuda_cccl `cccl`: a project that names the old key still installs it.
        path = support.manifest_path("cuda", "13.0.0", self.mirror)
        manifest = support.load_manifest("cuda", "13.0.0", self.mirror)
        manifest["cccl"] = manifest.pop("cuda_cccl")
        support.save_json(path, manifest)
        self.write_project(cuda_version="13.0.0", cuda_components='["cuda_cccl"]', products=("cuda",),
                           platforms=("linux-x86_64",), cuda="13")
        res = self.sync(check=0)
        self.assertIn("'cuda_cccl' is called 'cccl'", res.stderr)
        self.assertEqual(set(self.receipts()), {("cuda", "cccl")})
        lock = support.load_json(self.lock)
        self.assertEqual(lock["products"][0]["components"], ["cuda_cccl"])  # as written, for the stale check
        self.assertEqual([a["component"] for a in lock["products"][0]["artifacts"]], ["cccl"])
        res = self.sync("--frozen", check=0)
        self.assertIn("1 unchanged", res.stdout)

    def test_cache_prune_max_size(self):
        self.sync(check=0)
        listed = json.loads(support.run_tool("redist", "cache", "list", "--cache-dir", self.cache, "--json",
                                             check=0).stdout)
        self.assertEqual(len(listed), 4)
        sizes = sorted(e["size"] for e in listed)
        res = support.run_tool("redist", "cache", "prune", "--max-size", "0", "--cache-dir", self.cache, check=0)
        self.assertIn("freed", res.stdout)
        self.assertEqual(json.loads(support.run_tool("redist", "cache", "list", "--cache-dir", self.cache, "--json",
                                                     check=0).stdout), [])
        self.assertGreater(sum(sizes), 0)
        res = support.run_tool("redist", "cache", "prune", "--max-size", "12X", "--cache-dir", self.cache)
        self.assertEqual(res.returncode, 2, support.describe(res))

    def test_cmake_redist_fetch_file(self):
        """redist_fetch(FILE redist.toml): one sync, targets per product from its own receipts."""
        src = os.path.join(self.dir, "cmake-src")
        os.makedirs(src)
        result = os.path.join(self.dir, "cmake-result.txt")
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(f"""cmake_minimum_required(VERSION 3.19)
project(p LANGUAGES NONE)
include({support.source_dir()}/cmake/RedistFetch.cmake)
redist_fetch(FILE {self.project} PLATFORM linux-x86_64)
set(out "products=${{REDIST_PROJECT_PRODUCTS}}\nprefix=${{REDIST_PROJECT_PREFIX}}\n")
foreach(ns CUDA CUDNN NCCL)
  string(APPEND out "${{ns}}=${{${{ns}}_TARGETS}}\n${{ns}}_VERSION=${{${{ns}}_VERSION}}\n")
endforeach()
get_target_property(loc NCCL::nccl IMPORTED_LOCATION)
string(APPEND out "nccl_location=${{loc}}\n")
file(WRITE "{result}" "${{out}}")
""")
        build = os.path.join(self.dir, "cmake-build")
        env = support.tool_env({"REDIST_CACHE_DIR": self.cache})
        cmd = ["cmake", "-S", src, "-B", build, f"-DREDIST_EXECUTABLE={support.tool_path('redist')}"]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        with open(result) as f:
            out = dict(line.split("=", 1) for line in f.read().splitlines())
        self.assertEqual(out["products"], "cuda;cudnn;nccl")
        self.assertEqual(out["prefix"], self.prefix)
        self.assertEqual(out["NCCL"], "NCCL::nccl;NCCL::nccl_static")  # lib/libnccl.so and lib/libnccl_static.a
        self.assertEqual(out["nccl_location"], os.path.join(self.prefix, "lib", "libnccl.so.2"))
        self.assertEqual(out["CUDNN_VERSION"], "9.27.0")
        self.assertNotIn("NCCL::", out["CUDNN"])  # a product's targets are its own libraries only
        self.assertIn("CUDNN::cudnn", out["CUDNN"].split(";"))
        self.assertTrue(os.path.exists(self.lock))
        # Re-configure: the stamp holds, the tool does not run.
        self.server.reset()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        self.assertIn("up to date", res.stdout)
        self.assertEqual(self.server.log(), [])

    def test_free_space_preflight_on_a_small_tmpfs(self):
        small = os.path.join(self.dir, "small")
        os.makedirs(small)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", small],
                                 capture_output=True).returncode == 0
        env = None
        if mounted:
            self.addCleanup(subprocess.run, ["umount", small])
        else:  # not root: the documented test-only stand-in for statvfs
            env = {"REDIST_TEST_FREE_BYTES": str(2 << 20)}
        make_nccl(self.mirror, big=3 << 20)  # incompressible: the archive alone is over 3 MiB
        self.write_project(prefix=os.path.join(small, "prefix"), products=("nccl",))
        self.server.reset()
        res = self.sync(env=env)
        self.assertEqual(res.returncode, 10, support.describe(res))
        self.assertIn("not enough free space", res.stderr)
        self.assertIn("MiB", res.stderr)
        # It failed before downloading anything.
        self.assertEqual([e for e in self.server.log() if e["path"].endswith(".tar.xz")], [])
        self.assertFalse(os.path.exists(os.path.join(small, "prefix", "lib")))

    def test_free_space_preflight_counts_the_unpacked_size(self):
        make_nccl(self.mirror, big=3 << 20)  # incompressible: unpacked, a little more than the archive
        self.write_project(products=("nccl",))
        size = int(support.load_manifest("nccl", NCCL_LABEL, self.mirror)["nccl"]["linux-x86_64"]["size"])
        # Room for the archive, not for what unpacking needs (at least 3/2 of it, see sync.hpp).
        env = {"REDIST_TEST_FREE_BYTES": str(size * 5 // 4)}
        self.server.reset()
        res = self.sync("--no-cache", env=env)
        self.assertEqual(res.returncode, 10, support.describe(res))
        self.assertIn(f"({size + (size + 1) // 2} bytes) needed", res.stderr)
        self.assertEqual([e for e in self.server.log() if e["path"].endswith(".tar.xz")], [])

    # ---- the project's prefix and the lock's URLs are input ---------------------------------

    def test_prefix_outside_the_project_is_refused_unless_the_command_line_says_so(self):
        outside = self.dir + "-outside"  # a sibling of the project's directory
        os.makedirs(outside)
        self.addCleanup(support.rm_tree, outside)
        os.symlink(outside, os.path.join(self.dir, "link"))
        os.symlink(os.path.join(outside, "missing"), os.path.join(self.dir, "dangling"))
        for prefix in ("../" + os.path.basename(outside), outside, os.path.join(outside, "x"), "link/prefix",
                       "dangling/prefix"):
            self.write_project(products=("nccl",), prefix=prefix)
            res = self.sync()
            self.assertEqual(res.returncode, 4, (prefix, support.describe(res)))
            self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
            self.assertIn("project.prefix", res.stderr)
            self.assertIn("--prefix", res.stderr)
            self.assertEqual(os.listdir(outside), [], prefix)
            self.assertFalse(os.path.exists(self.lock), prefix)
            self.assertFalse(os.path.exists(self.cache), prefix)
        # The command line decides: --prefix, or --allow-outside-prefix for the project's own.
        given = os.path.join(outside, "given")
        self.sync("--prefix", given, check=0)
        self.assertIn(("nccl", "nccl"), self.receipts(given))
        self.write_project(products=("nccl",), prefix="../" + os.path.basename(outside) + "/allowed")
        self.sync("--allow-outside-prefix", check=0)
        self.assertIn(("nccl", "nccl"), self.receipts(os.path.join(outside, "allowed")))

    def test_flags_that_would_be_ignored_are_refused(self):
        # Accepted and silently ignored before: each is now exit 2 with one
        # line naming it and saying why, before anything is read or written.
        self.write_project(products=("nccl",))
        manifest = os.path.join(self.mirror, "nccl", "redist", f"redistrib_{NCCL_LABEL}.json")
        given = os.path.join(self.dir, "given")
        cases = [(self.sync_args("--manifest", manifest), "--manifest"),
                 (self.sync_args("--manifest-sha256", "0" * 64), "--manifest-sha256"),
                 (self.sync_args("--locked", "--strict"), "--strict"),
                 (self.sync_args("--frozen", "--strict"), "--frozen reads no manifest"),
                 (self.sync_args("--prefix", given, "--allow-outside-prefix"), "--allow-outside-prefix"),
                 (["lock", "--file", self.project, "--manifest", manifest], "--manifest")]
        for args, needle in cases:
            with self.subTest(args=args):
                res = support.run_tool("redist", *args)
                self.assertEqual(res.returncode, 2, support.describe(res))
                lines = res.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, support.describe(res))
                self.assertIn(needle, lines[0])
                self.assertFalse(os.path.exists(self.lock), support.describe(res))
                self.assertFalse(os.path.exists(self.prefix) or os.path.exists(given), support.describe(res))
        # sync does not offer what it refuses.
        self.assertNotIn("--manifest", support.run_tool("redist", "sync", "--help", check=0).stdout)
        # fetch --locked: the lock pins the release and its components.
        self.sync(check=0)
        fetched = os.path.join(self.dir, "fetched")
        single = os.path.join(self.dir, "single.lock")
        support.run_tool("redist", "lock", "nccl", NCCL_LABEL, "--base-url", self.server.url(), "-o", single,
                         "--platform", "linux-x86_64", check=0)
        base = ["fetch", "--locked", single, "--prefix", fetched, "--platform", "linux-x86_64",
                "--base-url", self.server.url(), "--no-check"]
        for extra, needle in ((["--manifest", manifest], "--manifest"), (["--all"], "--all"),
                              (["cudnn"], "cudnn disagrees with --locked"), (["--check", "--no-check"], "give one")):
            with self.subTest(extra=extra):
                res = support.run_tool("redist", *base, *extra)
                self.assertEqual(res.returncode, 2, support.describe(res))
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))
                self.assertIn(needle, res.stderr)
                self.assertFalse(os.path.exists(fetched), support.describe(res))
        support.run_tool("redist", *base, check=0)

    def test_a_lock_url_naming_a_local_file_is_refused(self):
        secret = os.path.join(self.dir, "secret.txt")
        marker = b"NOT-FOR-THE-CACHE-" + os.urandom(8).hex().encode()
        with open(secret, "wb") as f:
            f.write(marker)
        self.write_project(products=("nccl",))
        self.sync(check=0)
        lock = support.load_json(self.lock)
        for key in ("manifest_url", "artifacts"):
            doc = json.loads(json.dumps(lock))
            if key == "manifest_url":
                doc["products"][0]["manifest_url"] = "file://" + secret
                where = "products[0].manifest_url"
            else:
                doc["products"][0]["artifacts"][0]["url"] = "file:///etc/passwd"
                where = "products[0].artifacts[0].url"
            support.save_json(self.lock, doc)
            for mode in ("--locked", "--frozen"):
                res = self.sync(mode, "--force")
                self.assertEqual(res.returncode, 4, support.describe(res))
                self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
                self.assertIn(self.lock, res.stderr)
                self.assertIn(where, res.stderr)
        for root, _dirs, files in os.walk(self.cache):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(marker, f.read(), os.path.join(root, name))

    def test_locked_falls_back_from_a_dead_mirror_to_the_base(self):
        mirror = os.path.join(self.dir, "mirror2")
        shutil.copytree(self.mirror, mirror)
        self.write_project(products=("nccl",))
        self.sync("--mirror", mirror, check=0)  # the manifest and the archive come from the mirror
        lock = support.load_json(self.lock)
        # The lock names the base; mirrors are the reader's own, tried first.
        self.assertTrue(lock["products"][0]["manifest_url"].startswith(self.server.url()), lock)
        shutil.rmtree(mirror)  # the mirror is gone; the base still serves
        fresh = os.path.join(self.dir, "fresh")
        self.server.reset()
        for mode in ("--locked", "--frozen"):
            support.rm_tree(fresh)
            support.run_tool("redist", "sync", "--file", self.project, "--platform", "linux-x86_64", mode,
                             "--no-cache", "--mirror", mirror, "--prefix", fresh, "--retries", "1", check=0)
            self.assertIn(("nccl", "nccl"), self.receipts(fresh))
        got = [e for e in self.server.log() if e["path"].endswith(".tar.xz")]
        self.assertEqual([e["status"] for e in got], [200, 200], got)

    # ---- exact syncs: what the project no longer names goes --------------------------------

    def test_dropped_component_goes_in_the_same_journal_and_survives_a_crash(self):
        self.write_project(products=("cuda",))  # cuda_nvcc and cuda_cudart
        self.sync(check=0)
        gone = self.files_of("cuda", "cuda_cudart")
        self.assertIn("share/licenses/cuda_cudart/LICENSE", gone)
        before = self.installed()
        self.assertTrue(gone <= set(before))
        kept = {p: n for p, n in before.items() if p in self.files_of("cuda", "cuda_nvcc")}
        self.assertTrue(kept)
        # Drop cuda_cudart, add cuda_cccl: one journal does both. Killed in the middle of it,
        # the journal on disk lists the new receipt's move and the old receipt's deletion.
        self.write_project(products=("cuda",), cuda_components='["cuda_nvcc", "cuda_cccl"]')
        tool = support.BackgroundTool("redist", *self.sync_args(), env={"REDIST_DEBUG_PAUSE": "mid-commit"})
        self.addCleanup(tool.kill)
        self.assertTrue(tool.wait_for_stderr("redist-debug: paused at mid-commit", timeout=120), tool.stderr)
        journal = support.load_json(os.path.join(self.prefix, ".redist", "transaction.json"))
        self.assertIn(".redist/receipts/cuda/cuda_cccl.json", [m["to"] for m in journal["moves"]])
        self.assertIn(".redist/receipts/cuda/cuda_cudart.json", journal["deletes"])
        self.assertTrue(gone <= set(journal["deletes"]), gone - set(journal["deletes"]))
        tool.kill()
        # The next sync rolls the journal forward: nothing is left to install or remove.
        res = self.sync(check=0)
        self.assertIn("0 components installed, 2 unchanged, 0 removed", res.stdout)
        self.assertEqual(set(self.receipts()), {("cuda", "cuda_nvcc"), ("cuda", "cuda_cccl")})
        after = self.installed()
        self.assertEqual(set(after) & gone, set())
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "share", "licenses", "cuda_cudart")))
        self.assertEqual({p: n for p, n in after.items() if p in kept}, kept)  # untouched
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "transaction.json")))
        self.assertEqual(os.listdir(os.path.join(self.prefix, ".redist", "staging")), [])
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)

    def test_keep_unlisted_then_exact_with_json(self):
        self.write_project(products=("cuda",))
        self.sync(check=0)
        gone = self.files_of("cuda", "cuda_cudart")
        version = self.receipts()[("cuda", "cuda_cudart")]["component_version"]
        # A component that `redist fetch` put into the same prefix is unlisted too.
        support.run_tool("redist", "fetch", "nccl", NCCL_LABEL, "--platform", "linux-x86_64", "--prefix",
                         self.prefix, "--base-url", self.server.url(), "--cache-dir", self.cache, "--quiet", check=0)
        self.assertIn(("nccl", "nccl"), self.receipts())
        self.write_project(products=("cuda",), cuda_components='["cuda_nvcc"]')
        before = support.tree_snapshot(self.prefix)
        res = self.sync("--keep-unlisted", check=0)
        self.assertIn("0 components installed, 1 unchanged, 0 removed", res.stdout)
        self.assertNotIn("removed cuda", res.stdout)
        self.assertEqual(support.diff_snapshots(before, support.tree_snapshot(self.prefix)), "")
        # Without it, the prefix holds exactly the project; --json lists what went.
        res = self.sync("--json", check=0)
        out = json.loads(res.stdout)
        removed = sorted(out["removed"], key=lambda r: (r["product"], r["component"]))
        self.assertEqual([(r["product"], r["component"]) for r in removed], [("cuda", "cuda_cudart"), ("nccl", "nccl")])
        self.assertEqual(removed[0]["version"], version)
        self.assertEqual(removed[0]["files"], len(gone))
        self.assertEqual(set(self.receipts()), {("cuda", "cuda_nvcc")})
        self.assertEqual(set(self.installed()), self.files_of("cuda", "cuda_nvcc"))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, ".redist", "receipts", "nccl")))
        # Exact again: a no-op.
        res = self.sync(check=0)
        self.assertIn("0 components installed, 1 unchanged, 0 removed", res.stdout)

    def test_dropped_product_is_removed(self):
        res = self.sync(check=0)
        self.assertIn("0 removed", res.stdout)
        nccl = self.files_of("nccl", "nccl")
        self.assertIn("lib/libnccl.so.2", nccl)
        self.write_project(products=("cuda", "cudnn"))
        res = self.sync(check=0)
        self.assertIn(f"removed nccl nccl {NCCL_LABEL}: {len(nccl)} files", res.stdout)
        self.assertIn("2 products for linux-x86_64: 0 components installed, 3 unchanged, 1 removed", res.stdout)
        self.assertEqual(set(self.receipts()), set(self.expected("linux-x86_64")) - {("nccl", "nccl")})
        self.assertEqual(set(self.installed()) & nccl, set())
        for rel in ("lib/libnccl.so", "include/nccl.h", "share/licenses/nccl", ".redist/receipts/nccl"):
            self.assertFalse(os.path.lexists(os.path.join(self.prefix, rel)), rel)
        self.assertEqual(set(self.installed()), {f["path"] for r in self.receipts().values() for f in r["files"]})
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)

    def test_a_file_shared_with_a_kept_component_stays(self):
        make_product(self.mirror, "shared", "1.0.0", {
            "alpha": {"LICENSE": b"alpha\n", "include/shared.h": b"#define SHARED 1\n", "lib/libalpha.so": b"a" * 64},
            "beta": {"LICENSE": b"beta\n", "include/shared.h": b"#define SHARED 1\n", "lib/libbeta.so": b"b" * 64}})
        section = '[products.shared]\nversion = "1.0.0"\ncomponents = '
        self.write_project(products=(), extra=section + '["alpha", "beta"]')
        self.sync(check=0)
        self.assertIn("include/shared.h", self.files_of("shared", "alpha"))
        self.assertIn("include/shared.h", self.files_of("shared", "beta"))
        self.write_project(products=(), extra=section + '["beta"]')
        res = self.sync(check=0)
        self.assertIn("removed shared alpha 1.0.0: 3 files", res.stdout)
        self.assertEqual(set(self.receipts()), {("shared", "beta")})
        with open(os.path.join(self.prefix, "include", "shared.h"), "rb") as f:
            self.assertEqual(f.read(), b"#define SHARED 1\n")
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "lib", "libalpha.so")))
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "share", "licenses", "alpha")))
        self.assertTrue(os.path.exists(os.path.join(self.prefix, "share", "licenses", "beta", "LICENSE")))
        self.assertEqual(set(self.installed()), self.files_of("shared", "beta"))
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)

    def test_a_failed_install_removes_nothing(self):
        self.write_project(products=("cuda",))
        self.sync(check=0)
        before = support.tree_snapshot(self.prefix)
        # Drop cuda_cudart and add cuda_cccl, whose archive arrives corrupt: nothing changes.
        cuda = support.load_manifest("cuda", "12.9.1", self.mirror)
        path = "/cuda/redist/" + support.find_artifact(cuda, "cuda_cccl", "linux-x86_64")["relative_path"]
        self.server.set_faults({"/cudnn/redist/": {"serve": "/cudnn/redist/index.html"},
                                path: {"corrupt_byte_at": 100}})
        self.write_project(products=("cuda",), cuda_components='["cuda_nvcc", "cuda_cccl"]')
        res = self.sync("--retries", "1")
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertNotIn("removed", res.stdout)
        self.assertEqual(support.diff_snapshots(before, support.tree_snapshot(self.prefix)), "")
        self.assertIn(("cuda", "cuda_cudart"), self.receipts())
        support.run_tool("redist", "verify", "--prefix", self.prefix, check=0)


if __name__ == "__main__":
    unittest.main()

