#!/usr/bin/env python3
"""Side-by-side benchmark: redist's tools against the floor and a careful shell.

    python3 bench/run.py --build build            full run (3 runs per contender)
    python3 bench/run.py --build build --quick    one run per contender
    python3 bench/run.py --prepare                only build/cache the archives

Payload: the real cuDNN 9 installed on this machine (/usr/local/cuda/include/
cudnn*.h, /usr/local/cuda/lib64/libcudnn*, ~470 MB), packed NVIDIA-style as
cudnn-linux-x86_64-<ver>_cuda13-archive/{include,lib,LICENSE} with symlinks
kept, twice (single-block `xz -6 -T1`, multi-block `xz -6 -T2`), plus one
archive per component for a CUDA-like multi-component manifest. Compressing
takes minutes, so archives are cached OUTSIDE the repo (default
/var/tmp/redist-bench), keyed by the payload's file list, sizes and mtimes.
Without cuDNN, a generated payload of similar size and compressibility is used
(the results say so).

nginx (Debian's /usr/sbin/nginx) serves the mirror on 127.0.0.1 and is always
stopped at the end, also on Ctrl-C and errors. Every contender of a scenario
runs in the same round, alternating (the order rotates each round), and the
medians are compared. See bench/README.md for the scenarios and goals.

Python 3 standard library plus xz, curl, sha256sum, tar and nginx.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

# Bump when the archive layout or the generator changes: it is part of the
# cache key, so stale archives are never reused.
GENERATOR_VERSION = 2
NGINX = "/usr/sbin/nginx"
CUDA_ROOT = "/usr/local/cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))
import nginx_fixture  # noqa: E402  (start_on_free_port, terminate: as the tests start and stop it)
REPO = os.path.dirname(HERE)

SINGLE_LABEL = "9.19.0"       # replaced by the installed cuDNN's label when found
SPLIT_PRODUCT = "cudnn_split"  # the CUDA-like multi-component product
SPLIT_LABEL = "9.19.0"
CUDA_MAJOR = "13"
PLATFORM = "linux-x86_64"
# Components at or above this uncompressed size are compressed multi-block
# (xz -T2, 24 MiB blocks at -6), like NVIDIA's big archives; the rest single-block.
MULTI_BLOCK_THRESHOLD = 64 << 20


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class BenchError(Exception):
    pass


# ---------------------------------------------------------------------------
# Payload
# ---------------------------------------------------------------------------

class Payload:
    """The files to pack: (relative path in the archive, source path)."""

    def __init__(self, version, files, description, real):
        self.version = version          # e.g. 9.19.0.56
        self.files = files              # [(rel, src)] sorted by rel
        self.description = description
        self.real = real

    @property
    def label(self) -> str:
        return ".".join(self.version.split(".")[:3])

    def key(self) -> str:
        rows = []
        for rel, src in self.files:
            st = os.lstat(src)
            target = os.readlink(src) if os.path.islink(src) else ""
            rows.append([rel, st.st_mode, st.st_size, st.st_mtime_ns, target])
        blob = json.dumps([GENERATOR_VERSION, self.version, rows], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def regular_bytes(self) -> int:
        return sum(os.path.getsize(src) for _, src in self.files if not os.path.islink(src))


def installed_cudnn_version() -> str | None:
    for d in glob.glob(f"{CUDA_ROOT}/dist-info/nvidia_cudnn_cu*-*.dist-info"):
        ver = os.path.basename(d).split("-", 1)[1].rsplit(".dist-info", 1)[0]
        if ver.count(".") == 3:
            return ver
    try:
        with open(f"{CUDA_ROOT}/include/cudnn_version.h") as f:
            vals = {}
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "#define" and parts[1] in (
                        "CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"):
                    vals[parts[1]] = parts[2]
        return f"{vals['CUDNN_MAJOR']}.{vals['CUDNN_MINOR']}.{vals['CUDNN_PATCHLEVEL']}.0"
    except (OSError, KeyError):
        return None


def real_payload() -> Payload | None:
    headers = sorted(glob.glob(f"{CUDA_ROOT}/include/cudnn*.h"))
    libs = sorted(glob.glob(f"{CUDA_ROOT}/lib64/libcudnn*"))
    version = installed_cudnn_version()
    if not headers or not libs or version is None:
        return None
    files = [(f"include/{os.path.basename(h)}", h) for h in headers]
    files += [(f"lib/{os.path.basename(l)}", l) for l in libs]
    lic = glob.glob(f"{CUDA_ROOT}/dist-info/nvidia_cudnn_cu*.dist-info/licenses/License.txt")
    if lic:
        files.append(("LICENSE", lic[0]))
    files.sort()
    p = Payload(version, files, "", True)
    nlinks = sum(1 for _, s in files if os.path.islink(s))
    p.description = (f"real cuDNN {version} from {CUDA_ROOT} ({len(files) - nlinks} files, "
                     f"{nlinks} symlinks, {p.regular_bytes() / 2**20:.0f} MiB uncompressed)")
    return p


# Sizes modelled on cuDNN 9's libraries (bytes).
GENERATED_LIBS = {
    "libcudnn": 129240, "libcudnn_adv": 109169104, "libcudnn_cnn": 4203904,
    "libcudnn_engines_precompiled": 245391920, "libcudnn_engines_runtime_compiled": 29386400,
    "libcudnn_graph": 4451728, "libcudnn_heuristic": 60822040, "libcudnn_ops": 39855888,
}


def generated_payload(root: str) -> Payload:
    """A stand-in of similar size and compressibility (xz ratio about 0.65:
    random runs mixed with repeated runs) when cuDNN is not installed."""
    version = "9.19.0.0"
    d = os.path.join(root, f"generated-payload-v{GENERATOR_VERSION}")
    stamp = os.path.join(d, ".complete")
    if not os.path.exists(stamp):
        log(f"cuDNN not found under {CUDA_ROOT}: generating a stand-in payload in {d}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "include"))
        os.makedirs(os.path.join(d, "lib"))
        for name, size in GENERATED_LIBS.items():
            rng = random.Random(name)
            path = os.path.join(d, "lib", f"{name}.so.9")
            with open(path, "wb") as f:
                left = size
                while left > 0:
                    chunk = rng.randbytes(1280) + bytes([rng.randrange(256)]) * 768
                    chunk = chunk[:left]
                    f.write(chunk)
                    left -= len(chunk)
            os.chmod(path, 0o644)
            os.symlink(f"{name}.so.9", os.path.join(d, "lib", f"{name}.so"))
        for h in ("cudnn", "cudnn_adv", "cudnn_cnn", "cudnn_graph", "cudnn_ops", "cudnn_version"):
            with open(os.path.join(d, "include", f"{h}.h"), "w") as f:
                f.write(f"/* generated stand-in for {h}.h */\n" * 800)
        with open(os.path.join(d, "LICENSE"), "w") as f:
            f.write("Generated benchmark payload; not NVIDIA software.\n")
        open(stamp, "w").close()
    files = []
    for dirpath, _dirs, names in os.walk(d):
        for n in names:
            if n == ".complete":
                continue
            src = os.path.join(dirpath, n)
            files.append((os.path.relpath(src, d), src))
    files.sort()
    p = Payload(version, files, "", False)
    p.description = (f"GENERATED stand-in payload (cuDNN not found under {CUDA_ROOT}): "
                     f"{p.regular_bytes() / 2**20:.0f} MiB in {len(files)} entries")
    return p


# ---------------------------------------------------------------------------
# Archives (cached outside the repo)
# ---------------------------------------------------------------------------

def component_of(rel: str) -> str:
    """Multi-component split: headers+LICENSE, and one component per library."""
    if rel.startswith("lib/"):
        base = os.path.basename(rel)
        return base.split(".so", 1)[0]
    return "cudnn_headers"


def write_tar(fileobj, top: str, files) -> None:
    """Streams an NVIDIA-style tar: <top>/ then its parents-first entries,
    uid/gid 0, modes and mtimes from the payload, symlinks kept."""
    dirs = set()
    for rel, _ in files:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    entries = [(d, None) for d in sorted(dirs)] + list(files)
    entries.sort(key=lambda e: e[0])
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        top_info = tarfile.TarInfo(top)
        # Directories get the newest payload mtime: deterministic output.
        newest = max(int(os.lstat(src).st_mtime) for _, src in files)
        top_info.type, top_info.mode, top_info.mtime = tarfile.DIRTYPE, 0o755, newest
        top_info.uname = top_info.gname = "root"
        tar.addfile(top_info)
        for rel, src in entries:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if src is None:
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, top_info.mtime
                tar.addfile(info)
                continue
            st = os.lstat(src)
            info.mtime = int(st.st_mtime)
            if os.path.islink(src):
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(src)
                tar.addfile(info)
            else:
                info.mode = st.st_mode & 0o7777
                info.size = st.st_size
                with open(src, "rb") as f:
                    tar.addfile(info, f)


def xz_blocks(path: str) -> int:
    res = subprocess.run(["xz", "--robot", "-l", path], stdout=subprocess.PIPE, text=True, check=True)
    for line in res.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "file":
            return int(f[2])
    return 0


def digest(path: str) -> dict:
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
    return {"sha256": sha.hexdigest(), "md5": md5.hexdigest(), "size": os.path.getsize(path),
            "blocks": xz_blocks(path)}


def first_member(archive: str) -> str:
    p = subprocess.Popen(["tar", "-tJf", archive], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    p.kill()
    p.wait()
    return line


def tar_listing_matches(archive: str, payload: Payload) -> str | None:
    """Checks that an archive to import holds the payload (LICENSE aside)
    under one top-level *-archive/ directory, sizes and symlink targets
    included. Returns the top directory, or None. Costs one decode."""
    res = subprocess.run(["tar", "--numeric-owner", "-tvJf", archive], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        return None
    seen, tops = {}, set()
    for line in res.stdout.splitlines():
        f = line.split(None, 5)
        if len(f) < 6:
            return None
        name, target = f[5], ""
        if f[0].startswith("l"):
            name, target = name.split(" -> ", 1)
        top, _, rel = name.rstrip("/").partition("/")
        tops.add(top)
        if rel and not f[0].startswith("d"):
            seen[rel] = (int(f[2]), target)
    if len(tops) != 1 or not next(iter(tops)).endswith("-archive"):
        return None
    for rel, src in payload.files:
        if rel == "LICENSE":
            continue
        want = (0, os.readlink(src)) if os.path.islink(src) else (os.path.getsize(src), "")
        if seen.get(rel) != want:
            log(f"  {archive}: {rel} differs ({seen.get(rel)} != {want})")
            return None
    return next(iter(tops))


def prepare_archives(payload: Payload, cache_root: str, imports: dict, component_preset: int) -> dict:
    """Returns the archive set, building (or importing) what the cache lacks.
    Every file is written under a temporary name and renamed when complete."""
    key = payload.key()
    adir = os.path.join(cache_root, "archives", key)
    meta_path = os.path.join(adir, "meta.json")
    # The component archives are cached per xz preset (component_sets), beside
    # the single- and multi-block archives, which do not depend on it.
    cset_dir = f"components-xz{component_preset}"

    def present(arcs):
        return all(os.path.isfile(os.path.join(adir, a["file"]))
                   and os.path.getsize(os.path.join(adir, a["file"])) == a["size"] for a in arcs)

    old_meta = None
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            old_meta = json.load(f)
        if "component_sets" not in old_meta and "components" in old_meta:  # the layout before per-preset sets
            old_meta["component_sets"] = {str(old_meta.get("component_preset", 1)): old_meta.pop("components")}
    have_main = bool(old_meta) and "component_sets" in old_meta and present([old_meta["single"], old_meta["multi"]])
    cset = old_meta.get("component_sets", {}).get(str(component_preset)) if have_main else None
    if have_main and cset and present(cset.values()):
        old_meta.update(dir=adir, components=cset, component_preset=component_preset)
        return old_meta
    if old_meta and not have_main:
        log("cached archive set incomplete; rebuilding")
    if have_main:
        imports = {}  # the single- and multi-block archives are there already
    os.makedirs(os.path.join(adir, cset_dir), exist_ok=True)
    # Remove stale archive sets of other payloads (each is ~1 GB).
    for other in glob.glob(os.path.join(cache_root, "archives", "*")):
        if other != adir:
            shutil.rmtree(other, ignore_errors=True)

    ver = payload.version
    top = f"cudnn-{PLATFORM}-{ver}_cuda{CUDA_MAJOR}-archive"
    started = time.monotonic()
    notes = []
    jobs = []  # (Popen, tmp, final, cmd, stdin temp file to delete)

    def spawn(cmd, stdin_path, final, remove_input):
        tmp = final + ".tmp"
        with open(stdin_path, "rb") as src, open(tmp, "wb") as dst:
            p = subprocess.Popen(cmd, stdin=src, stdout=dst)
        jobs.append((p, tmp, final, cmd, stdin_path if remove_input else None))

    finals = {"single": os.path.join(adir, f"{top}.T1.tar.xz"),
              "multi": os.path.join(adir, f"{top}.T2.tar.xz")}
    tops = {"single": top, "multi": top}
    # Imports: validated in parallel (one decode each), then hard-linked.
    checks = {}
    for flavour, src in imports.items():
        if not src:
            continue
        if os.path.exists(finals[flavour]) and os.path.samefile(src, finals[flavour]):
            # Linked by an interrupted earlier preparation, after validation.
            tops[flavour] = first_member(src).split("/")[0]
            notes.append(f"{flavour}-block archive imported from {src} (top dir "
                         f"{tops[flavour]}/, validated against the payload; without LICENSE)")
            continue
        blocks = xz_blocks(src)
        if (flavour == "single") != (blocks == 1):
            raise BenchError(f"{src}: {blocks} xz block(s), wrong for --import-{flavour}")
        log(f"validating {src} against the payload (one decode)")
        checks[flavour] = src
    if checks:
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(len(checks)) as ex:
            found = dict(zip(checks, ex.map(lambda s: tar_listing_matches(s, payload),
                                            checks.values())))
        for flavour, src in checks.items():
            if found[flavour] is None:
                raise BenchError(f"{src} does not hold this payload in an NVIDIA-style layout")
            tops[flavour] = found[flavour]
            try:
                os.link(src, finals[flavour])
            except OSError:
                shutil.copyfile(src, finals[flavour])
            notes.append(f"{flavour}-block archive imported from {src} (top dir "
                         f"{found[flavour]}/, validated against the payload; without LICENSE)"
)
    need = [] if have_main else [f for f in ("single", "multi")
                                 if not (imports.get(f) and os.path.exists(finals[f]))]
    if need:
        log(f"building archives in {adir} (minutes; cached afterwards)")
        tar_tmp = os.path.join(adir, f".{top}.tar.tmp")
        with open(tar_tmp, "wb") as f:
            write_tar(f, top, payload.files)
        for i, flavour in enumerate(need):
            spawn(["xz", "-6", "-T1" if flavour == "single" else "-T2", "-c"], tar_tmp,
                  finals[flavour], i == len(need) - 1)

    groups: dict[str, list] = {}
    for rel, src in payload.files:
        groups.setdefault(component_of(rel), []).append((rel, src))
    lic = [e for e in payload.files if e[0] == "LICENSE"]
    comp_info = {}
    log(f"building {len(groups)} component archives (xz -{component_preset})")
    # Largest first: the longest compression starts first.
    order = sorted(groups.items(), key=lambda kv: -sum(
        os.path.getsize(s) for _, s in kv[1] if not os.path.islink(s)))
    for comp, files in order:
        if comp != "cudnn_headers":
            files = files + lic  # every CUDA component carries the same LICENSE
        ctop = f"{comp}-{PLATFORM}-{ver}-archive"
        size = sum(os.path.getsize(s) for _, s in files if not os.path.islink(s))
        threads = "-T2" if size >= MULTI_BLOCK_THRESHOLD else "-T1"
        ctar = os.path.join(adir, cset_dir, f".{ctop}.tar.tmp")
        with open(ctar, "wb") as f:
            write_tar(f, ctop, sorted(files))
        final = os.path.join(adir, cset_dir, f"{ctop}.tar.xz")
        spawn(["xz", f"-{component_preset}", threads, "-c"], ctar, final, True)
        comp_info[comp] = (final, size)

    for p, tmp, final, cmd, remove_input in jobs:
        if p.wait() != 0:
            raise BenchError(f"{' '.join(cmd)} failed for {final}")
        os.rename(tmp, final)
        if remove_input:
            os.unlink(remove_input)

    if have_main:
        meta = old_meta
    else:
        desc = payload.description + ("; " + "; ".join(notes) if notes else "")
        meta = {"key": key, "version": ver, "tops": tops, "description": desc,
                "real": payload.real, "built_seconds": round(time.monotonic() - started, 1),
                "single": {"file": os.path.basename(finals["single"]), **digest(finals["single"])},
                "multi": {"file": os.path.basename(finals["multi"]), **digest(finals["multi"])},
                "component_sets": {}}
    cset = {}
    for comp, (final, size) in sorted(comp_info.items()):
        cset[comp] = {"file": os.path.join(cset_dir, os.path.basename(final)), "uncompressed": size, **digest(final)}
    meta["component_sets"][str(component_preset)] = cset
    meta["component_preset"] = component_preset
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.rename(meta_path + ".tmp", meta_path)
    log(f"archives ready in {round(time.monotonic() - started, 1)} s")
    meta.update(dir=adir, components=cset)
    return meta


# ---------------------------------------------------------------------------
# Mirror + nginx
# ---------------------------------------------------------------------------

def record(a: dict, relative_path: str) -> dict:
    return {"relative_path": relative_path, "sha256": a["sha256"], "md5": a["md5"],
            "size": str(a["size"])}


def write_mirror(www: str, meta: dict) -> None:
    """www/single and www/multi: the cudnn product with the single- or
    multi-block archive; www/multi also holds the multi-component product.
    Archives are symlinks into the archive cache (nginx follows them)."""
    ver, adir = meta["version"], meta["dir"]
    label = ".".join(ver.split(".")[:3])
    for flavour in ("single", "multi"):
        base = os.path.join(www, flavour)
        redist = os.path.join(base, "cudnn", "redist")
        rel = f"cudnn/{PLATFORM}/cudnn-{PLATFORM}-{ver}_cuda{CUDA_MAJOR}-archive.tar.xz"
        os.makedirs(os.path.dirname(os.path.join(redist, rel)), exist_ok=True)
        os.symlink(os.path.join(adir, meta[flavour]["file"]), os.path.join(redist, rel))
        manifest = {
            "release_date": "2026-01-01", "release_label": label, "release_product": "cudnn",
            "cudnn": {"name": "NVIDIA CUDA Deep Neural Network library", "license": "cudnn",
                      "license_path": "cudnn/LICENSE.txt", "version": ver,
                      PLATFORM: {f"cuda{CUDA_MAJOR}": record(meta[flavour], rel)},
                      "cuda_variant": [CUDA_MAJOR]},
        }
        with open(os.path.join(redist, f"redistrib_{label}.json"), "w") as f:
            json.dump(manifest, f, indent=4)
    redist = os.path.join(www, "multi", SPLIT_PRODUCT, "redist")
    manifest = {"release_date": "2026-01-01", "release_label": SPLIT_LABEL,
                "release_product": SPLIT_PRODUCT}
    # The same release as a file:// mirror (file:// takes regular files only:
    # hard links to the cached archives, copies across file systems).
    local = os.path.join(www, "multi-local", SPLIT_PRODUCT, "redist")
    for comp, a in meta["components"].items():
        rel = f"{comp}/{PLATFORM}/{os.path.basename(a['file'])}"
        os.makedirs(os.path.join(redist, comp, PLATFORM), exist_ok=True)
        os.symlink(os.path.join(adir, a["file"]), os.path.join(redist, rel))
        os.makedirs(os.path.join(local, comp, PLATFORM), exist_ok=True)
        try:
            os.link(os.path.join(adir, a["file"]), os.path.join(local, rel))
        except OSError:
            shutil.copyfile(os.path.join(adir, a["file"]), os.path.join(local, rel))
        manifest[comp] = {"name": f"benchmark component {comp}", "license": "cudnn",
                          "license_path": f"{comp}/LICENSE.txt", "version": ver,
                          PLATFORM: record(a, rel)}
    for d in (redist, local):
        with open(os.path.join(d, f"redistrib_{SPLIT_LABEL}.json"), "w") as f:
            json.dump(manifest, f, indent=4)


class Nginx:
    def __init__(self, scratch: str, root: str):
        self.dir = os.path.join(scratch, "nginx")
        self.root = root
        self.conf = os.path.join(self.dir, "nginx.conf")
        self.pidfile = os.path.join(self.dir, "nginx.pid")
        self.pid = None
        self.base = None

    def start(self) -> str:
        if not os.access(NGINX, os.X_OK):
            raise BenchError(f"{NGINX} not found (apt-get install nginx-light)")
        os.makedirs(os.path.join(self.dir, "temp"), exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""

        def conf_for_port(port: int) -> str:
            t = os.path.join(self.dir, "temp")
            with open(self.conf, "w") as f:
                f.write(f"""{user}worker_processes 1;
daemon on;
pid {self.pidfile};
error_log {self.dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {t}/cb; proxy_temp_path {t}/p; fastcgi_temp_path {t}/f;
    uwsgi_temp_path {t}/u; scgi_temp_path {t}/s;
    sendfile on;
    server_tokens off;
    server {{
        listen 127.0.0.1:{port};
        root {self.root};
        autoindex on;
    }}
}}
""")
            return self.conf

        try:
            port = nginx_fixture.start_on_free_port(self.dir, f"{self.dir}/error.log", conf_for_port)
            self.pid = nginx_fixture.wait_pid_file(self.pidfile)
        except RuntimeError as e:
            raise BenchError(str(e)) from None
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return self.base
            except OSError:
                time.sleep(0.05)
        raise BenchError("nginx did not answer")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the master and its workers so far."""
        pids = {self.pid}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.pid:  # field 4: ppid
                            pids.add(int(entry))
                except (OSError, IndexError, ValueError):
                    pass  # gone meanwhile
        ticks = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # fields 14 and 15: utime, stime
            except (OSError, IndexError, ValueError):
                pass
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """QUIT, then TERM, then KILL: only the master we started (by pid)."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        nginx_fixture.terminate(pid)


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------

class Sample:
    def __init__(self, wall, cpu, rss_kib):
        self.wall, self.cpu, self.rss = wall, cpu, rss_kib


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith("REDIST_")}
    env["LC_ALL"] = "C"
    return env


ENV = clean_env()


# ru_maxrss from os.wait4 on a child forked by this Python process includes the
# RSS the child had BEFORE exec (Linux keeps the pre-exec high-water mark in
# signal->maxrss), i.e. Python's own ~25 MiB: small tools would all read
# "27 MiB". GNU time forks the command from a ~2 MiB process and reports its
# wait4 ru_maxrss (%M), so the peak RSS comes from there when it is installed.
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def kill_group(p: subprocess.Popen) -> None:
    """TERM then KILL the process group led by p (our own child), and reap p."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(p.pid, signal.SIGKILL)  # stragglers after the leader exited
    except ProcessLookupError:
        pass
    if p.returncode is None:
        p.wait()


def timed(cmd, cwd=None, shell=False) -> Sample:
    """Runs cmd and measures it with os.wait4: wall time, user+sys CPU of the
    process and every descendant it waited for, and the peak RSS (ru_maxrss:
    the largest single process of that tree; through GNU time, see above)."""
    out = subprocess.DEVNULL
    err = tempfile.TemporaryFile()
    rss_file = None
    if GNU_TIME:
        rss_file = tempfile.NamedTemporaryFile("r", prefix="bench-rss-")
        argv = ["/bin/sh", "-c", cmd] if shell else list(cmd)
        cmd, shell = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *argv], False
    t0 = time.perf_counter()
    # Own process group: on Ctrl-C/SIGTERM/errors the whole tree (GNU time,
    # the shell, curl, tar, xz, the tool) is stopped, never left running.
    p = subprocess.Popen(cmd, cwd=cwd, shell=shell, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=err, env=ENV, process_group=0)
    try:
        _, status, ru = os.wait4(p.pid, 0)
    except BaseException:
        kill_group(p)
        raise
    # Descendants that outlive the measured process (none expected).
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        err.seek(0)
        msg = err.read().decode(errors="replace")[-2000:]
        raise BenchError(f"command failed (exit {p.returncode}): "
                         f"{cmd if isinstance(cmd, str) else shlex.join(cmd)}\n{msg}")
    rss = ru.ru_maxrss
    if rss_file is not None:
        rss = int(rss_file.read().strip().splitlines()[-1])
        rss_file.close()
    return Sample(wall, ru.ru_utime + ru.ru_stime, rss)


class Contender:
    """One command in a scenario. prepare/cleanup run untimed around it."""

    def __init__(self, name, cmd, prepare=None, cleanup=None, shell=False, cwd=None,
                 check=None):
        self.name, self.cmd, self.shell, self.cwd = name, cmd, shell, cwd
        self.prepare, self.cleanup, self.check = prepare, cleanup, check
        self.samples: list[Sample] = []

    def median(self, attr):
        return statistics.median(getattr(s, attr) for s in self.samples)


def run_rounds(contenders, runs, warm_files, drop_caches):
    """Alternates contenders within each round; the starting contender
    rotates each round so no one always runs first after a cleanup."""
    for i in range(runs):
        order = contenders[i % len(contenders):] + contenders[:i % len(contenders)]
        for c in order:
            if c.prepare:
                c.prepare()
            page_cache(warm_files, drop_caches)
            cmd = c.cmd() if callable(c.cmd) else c.cmd
            s = timed(cmd, cwd=c.cwd, shell=c.shell)
            c.samples.append(s)
            if c.check and len(c.samples) == 1:
                c.check()
            if c.cleanup:
                c.cleanup()
            log(f"  {c.name:<44} run {i + 1}/{runs}: {s.wall:7.3f} s wall, "
                f"{s.cpu:7.3f} s CPU, {s.rss / 1024:6.1f} MiB RSS")


def page_cache(files, drop):
    if drop:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    for path in files:  # warm: every contender starts with the archive in RAM
        with open(path, "rb") as f:
            while f.read(1 << 22):
                pass


def try_drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def rmtree(path):
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=False)


def check_tree(prefix, payload: Payload, strip_license=False):
    """Sanity check of an install: every payload file is there, with its size
    (symlinks as symlinks). LICENSE may be relocated by the tool."""
    missing = []
    for rel, src in payload.files:
        if rel == "LICENSE":
            continue
        dst = os.path.join(prefix, rel)
        if os.path.islink(src):
            if not os.path.islink(dst) or os.readlink(dst) != os.readlink(src):
                missing.append(rel)
        elif not os.path.isfile(dst) or os.path.getsize(dst) != os.path.getsize(src):
            missing.append(rel)
    if missing:
        raise BenchError(f"install in {prefix} is incomplete or wrong: {missing[:5]}")


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

class Row:
    def __init__(self, scenario, ours, theirs, ratio, goal, passed, rss, note=""):
        self.scenario, self.ours, self.theirs, self.ratio = scenario, ours, theirs, ratio
        self.goal, self.passed, self.rss, self.note = goal, passed, rss, note


def fmt_s(c: Contender) -> str:
    return f"{c.median('wall'):.2f} s (CPU {c.median('cpu'):.2f} s)"


def fmt_mib(kib) -> str:
    return f"{kib / 1024:.1f} MiB"


class Bench:
    def __init__(self, args, payload, meta):
        self.args, self.payload, self.meta = args, payload, meta
        self.work = args.work
        self.cudnn_fetch = os.path.join(args.build, "bin", "cudnn-fetch")
        self.redist = os.path.join(args.build, "bin", "redist")
        for tool in (self.cudnn_fetch, self.redist):
            if not os.access(tool, os.X_OK):
                alt = os.path.join(args.build, os.path.basename(tool))
                if os.access(alt, os.X_OK):
                    continue
                raise BenchError(f"{tool} not found: build first (see bench/README.md)")
        if not os.access(self.cudnn_fetch, os.X_OK):
            self.cudnn_fetch = os.path.join(args.build, "cudnn-fetch")
            self.redist = os.path.join(args.build, "redist")
        self.label = ".".join(meta["version"].split(".")[:3])
        self.cores = len(os.sched_getaffinity(0))
        self.rows: list[Row] = []
        self.details: list[Contender] = []
        self.notes: list[str] = []
        help_text = subprocess.run([self.cudnn_fetch, "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True).stdout
        self.has_link_mode = "--link-mode" in help_text
        # --against: this build's tools -> the other build's (twin()).
        self.against_tools = {}
        if args.against:
            self.against_tools = {self.cudnn_fetch: os.path.join(args.against, "bin", "cudnn-fetch"),
                                  self.redist: os.path.join(args.against, "bin", "redist")}

    def twin(self, c: Contender) -> list:
        """With --against: [B], the same command run by the other build's tool, with the same
        preparation, check and cleanup, to run in the same rounds as `c` (paired_rows). Else []."""
        if not self.against_tools:
            return []
        cmd = [self.against_tools.get(a, a) for a in c.cmd]
        if cmd == c.cmd:
            raise BenchError(f"--against: {c.name} runs none of this build's tools")
        b = Contender("B: " + c.name, cmd, c.prepare, c.cleanup, c.shell, c.cwd, c.check)
        c.twin = b
        return [b]

    def paired_rows(self, scenario: str, contenders) -> None:
        """One row per contender that has a twin: the median of the per-round ratios of its wall time
        to its twin's (the two ran back to back in each round, so the load they saw was alike)."""
        for a in contenders:
            b = getattr(a, "twin", None)
            if b is None or not b.samples:
                continue
            ratios = [x.wall / y.wall for x, y in zip(a.samples, b.samples)]
            self.rows.append(Row(f"{scenario}. Paired: {a.name} vs the same from --against", fmt_s(a),
                                 f"{b.name}: {fmt_s(b)}; per round {' '.join(f'{x:.3f}' for x in ratios)}",
                                 statistics.median(ratios), "(paired)", None,
                                 f"{fmt_mib(a.median('rss'))} / {fmt_mib(b.median('rss'))}"))

    def archive(self, flavour):
        return os.path.join(self.meta["dir"], self.meta[flavour]["file"])

    def fetch_cmd(self, flavour, prefix, cache, extra=()):
        return [self.cudnn_fetch, self.label, "--prefix", prefix,
                "--base-url", f"{self.base}/{flavour}", "--cache-dir", cache,
                "--cuda", CUDA_MAJOR, "--platform", PLATFORM, "--quiet", *extra]

    def d(self, *parts):
        return os.path.join(self.work, *parts)

    # -- 1 and 2: cold fetch ------------------------------------------------
    def cold(self, flavour, floor_threads, title, goal_ratio, writing_goal=None):
        """goal_ratio: the goal against the bare decode (None: info); writing_goal: the goal against
        the best shell pipeline that writes the files (None: info)."""
        arc = self.archive(flavour)
        sha = self.meta[flavour]["sha256"]
        prefix, cache = self.d("cold-prefix"), self.d("cold-cache")
        shell_prefix, shell_file = self.d("shell-prefix"), self.d("shell-download.tar.xz")
        url = (f"{self.base}/{flavour}/cudnn/redist/cudnn/{PLATFORM}/"
               f"cudnn-{PLATFORM}-{self.meta['version']}_cuda{CUDA_MAJOR}-archive.tar.xz")

        def fresh():
            rmtree(prefix)
            rmtree(cache)
            os.makedirs(cache)

        def clean():
            rmtree(prefix)
            rmtree(cache)

        def shell_fresh():
            rmtree(shell_prefix)
            if os.path.exists(shell_file):
                os.unlink(shell_file)
            os.makedirs(shell_prefix)

        def shell_clean():
            rmtree(shell_prefix)
            if os.path.exists(shell_file):
                os.unlink(shell_file)

        f = shlex.quote(shell_file)
        pipeline = (f"curl -s --fail --noproxy '*' -o {f} {shlex.quote(url)} && "
                    f"echo \"{sha}  {shell_file}\" | sha256sum -c --quiet && "
                    f"tar -xJf {f} --strip-components=1 -C {shlex.quote(shell_prefix)}")
        ours = Contender(f"cudnn-fetch (cold, {flavour}-block)",
                         self.fetch_cmd(flavour, prefix, cache), fresh, clean,
                         check=lambda: check_tree(prefix, self.payload))
        floor = Contender(f"xz -T{floor_threads} -dc (floor, {flavour}-block)",
                          ["xz", f"-T{floor_threads}", "-dc", arc])
        shell = Contender(f"curl+sha256sum+tar -xJf ({flavour}-block)", pipeline, shell_fresh,
                          shell_clean, shell=True, cwd=self.work,
                          check=lambda: check_tree(shell_prefix, self.payload))
        # The decode writing the files, with no hash and no download: what any
        # installer pays at least, which the bare decode leaves out.
        writer = Contender(f"xz -T{floor_threads} -dc into tar -x, no hash ({flavour}-block)",
                           f"xz -T{floor_threads} -dc {shlex.quote(arc)} | tar -xf - --strip-components=1 "
                           f"-C {shlex.quote(shell_prefix)}", shell_fresh, shell_clean, shell=True,
                           check=lambda: check_tree(shell_prefix, self.payload))
        mine = [ours, *self.twin(ours)]
        # The check runs after the first run, before cleanup: wrap cleanup order.
        for c in (*mine, shell, writer):
            chk, cl = c.check, c.cleanup
            c.check, c.cleanup = None, (lambda chk=chk, cl=cl, c=c:
                                        (chk() if len(c.samples) == 1 else None, cl()))
        everyone = [*mine, floor, shell, writer]
        log(f"{title}: {self.args.runs} round(s) of {' | '.join(c.name for c in everyone)}")
        run_rounds(everyone, self.args.runs, [arc], self.args.drop_caches)
        self.details += everyone
        r = ours.median("wall") / floor.median("wall")
        self.rows.append(Row(title + " vs floor", fmt_s(ours), f"{floor.name}: {fmt_s(floor)}",
                             r, f"<= {goal_ratio:.2f}x" if goal_ratio else "(info)",
                             r <= goal_ratio if goal_ratio else None, fmt_mib(ours.median("rss"))))
        r2 = ours.median("wall") / shell.median("wall")
        self.rows.append(Row(title + " vs shell", fmt_s(ours), f"{shell.name}: {fmt_s(shell)}",
                             r2, "(info)", None, f"shell {fmt_mib(shell.median('rss'))}"))
        best = min((shell, writer), key=lambda c: c.median("wall"))
        r3 = ours.median("wall") / best.median("wall")
        self.rows.append(Row(title + " vs the best shell pipeline writing the files", fmt_s(ours),
                             f"{best.name}: {fmt_s(best)} (= {best.median('wall') / floor.median('wall'):.2f}x "
                             f"the floor)", r3, f"<= {writing_goal:.2f}x" if writing_goal else "(info)",
                             r3 <= writing_goal if writing_goal else None, fmt_mib(ours.median("rss"))))
        self.paired_rows(title.split(".")[0], mine)
        return ours, floor

    # -- 3 and 4: warm re-install and no-op --------------------------------
    def warm(self, cold_ours):
        cache = self.d("warm-cache")
        rmtree(cache)
        os.makedirs(cache)
        prime = self.d("warm-prime")
        log("warm: priming the cache with one untimed fetch (single-block)")
        timed(self.fetch_cmd("single", prime, cache))
        rmtree(prime)
        # The extracted tree is recorded by the download (hard links to its
        # stage); the commit's renames move its files' ctime, so the first
        # re-install re-hashes the tree once and records it anew. "Warm" below
        # is every re-install after that one; the first one is timed and shown
        # as its own row, so that its cost is not hidden.
        log("warm: the first re-install (the tree, verified once by its digests)")
        first = Contender("cudnn-fetch first re-install (tree verified by its digests)",
                          self.fetch_cmd("single", prime, cache))
        first.samples.append(timed(first.cmd))
        rmtree(prime)
        self.details.append(first)
        r = first.median("wall") / cold_ours.median("wall")
        self.rows.append(Row("3. First re-install (tree verified by its digests)", fmt_s(first),
                             f"cold cudnn-fetch: {cold_ours.median('wall'):.2f} s", r, "(info)", None,
                             fmt_mib(first.median("rss"))))
        modes = [("default", [])]
        if self.has_link_mode:
            modes += [("hardlink", ["--link-mode", "hardlink"]), ("copy", ["--link-mode", "copy"])]
        else:
            self.notes.append("cudnn-fetch has no --link-mode: warm re-install measured with "
                              "the default behaviour only.")
        # Each mode on a cache of its own (hard links make the prefix's files
        # the cache's, and removing such a prefix changes their ctime: the
        # next install that copies from that tree re-hashes it), settled as
        # the default one was: a copied cache's first install re-records the
        # tree, and the one after it re-hashes it once (the first re-install
        # above). Neither is what "warm" measures.
        caches = {"default": cache}
        for name, extra in modes:
            if name == "default":
                continue
            caches[name] = self.d(f"warm-cache-{name}")
            rmtree(caches[name])
            subprocess.run(["cp", "-a", cache, caches[name]], check=True)
            for _ in range(2):
                timed(self.fetch_cmd("single", prime, caches[name], extra))
                rmtree(prime)
        subprocess.run(["sync"], check=False)  # the copies' dirty pages written back before the timed runs
        contenders = []
        for name, extra in modes:
            prefix = self.d(f"warm-prefix-{name}")

            def fresh(prefix=prefix):
                rmtree(prefix)

            c = Contender(f"cudnn-fetch warm ({name})",
                          self.fetch_cmd("single", prefix, caches[name], extra), fresh,
                          check=lambda prefix=prefix: check_tree(prefix, self.payload))
            contenders.append(c)
        runs = max(self.args.runs, 3) if not self.args.quick else 1
        mine = contenders
        contenders = [x for c in mine for x in (c, *self.twin(c))]
        # One untimed run of each first: a mode's first install into its
        # prefix re-hashes the cached tree once (1-2 s here, whichever build
        # runs it), which is not what "warm" measures.
        for c in contenders:
            c.prepare()
            timed(c.cmd)
        log(f"warm re-install: {runs} round(s) of {' | '.join(c.name for c in contenders)}")
        run_rounds(contenders, runs, [], False)
        self.details += contenders
        self.paired_rows("3", mine)
        cold = cold_ours.median("wall")
        for c in mine:
            r = c.median("wall") / cold
            self.rows.append(Row(f"3. Warm re-install, {c.name.split('(')[1][:-1]}", fmt_s(c),
                                 f"cold cudnn-fetch: {cold:.2f} s", r, "<= 0.05x", r <= 0.05,
                                 fmt_mib(c.median("rss"))))
        # -- 4: no-op on the installed prefix (the last warm install).
        prefix = self.d("warm-prefix-default")
        noop = Contender("cudnn-fetch no-op (installed prefix)",
                         self.fetch_cmd("single", prefix, cache))
        n = 1 if self.args.quick else max(5, self.args.runs)
        log(f"no-op: {n} run(s)")
        mine = [noop, *self.twin(noop)]
        run_rounds(mine, n, [], False)
        self.details += mine
        self.paired_rows("4", [noop])
        ms = noop.median("wall") * 1000
        self.rows.append(Row("4. No-op (already installed)", f"{ms:.0f} ms (CPU "
                             f"{noop.median('cpu') * 1000:.0f} ms)", "-", None, "<= 50 ms",
                             ms <= 50, fmt_mib(noop.median("rss"))))
        self.check_time(prefix)
        for name, _ in modes:
            rmtree(self.d(f"warm-prefix-{name}"))
        for name, _ in modes:
            rmtree(caches[name])

    # -- 7: the first restore from a CI cache ------------------------------
    def ci_restore(self, cold_ours):
        """A CI job installs cold and saves its cache; the next job restores
        it (cp -a, as actions/cache's tar would: new inodes and ctimes, the
        same bytes and mtimes) and installs into a fresh prefix. Timed: that
        install, against the cold one of this run."""
        saved, restored, prefix = self.d("ci-saved"), self.d("ci-restored"), self.d("ci-prefix")
        rmtree(saved)
        os.makedirs(saved)
        log("ci restore: one untimed cold fetch saves the cache")
        timed(self.fetch_cmd("single", prefix, saved))
        rmtree(prefix)  # the job ends: its prefix is gone, the cache is saved

        def fresh():
            rmtree(prefix)
            rmtree(restored)
            subprocess.run(["cp", "-a", saved, restored], check=True)

        def clean():
            rmtree(prefix)
            rmtree(restored)

        fresh()
        # Once, untimed: the restored tree is what serves the install.
        res = subprocess.run([a for a in self.fetch_cmd("single", prefix, restored, ["--json"]) if a != "--quiet"],
                             stdout=subprocess.PIPE, text=True, check=True)
        if not json.loads(res.stdout)["components"][0].get("from_tree"):
            raise BenchError("ci restore: the restored cache's tree was not used")
        c = Contender("cudnn-fetch first install from a restored CI cache",
                      self.fetch_cmd("single", prefix, restored), fresh, clean,
                      check=lambda: check_tree(prefix, self.payload))
        runs = max(self.args.runs, 3) if not self.args.quick else 1
        log(f"ci restore: {runs} round(s) of {c.name}")
        mine = [c, *self.twin(c)]
        run_rounds(mine, runs, [], False)
        self.details += mine
        self.paired_rows("7", [c])
        cold = cold_ours.median("wall")
        r = c.median("wall") / cold
        self.rows.append(Row("7. First restore from a CI cache saved after one cold install", fmt_s(c),
                             f"cold cudnn-fetch: {cold:.2f} s", r, "<= 0.10x", r <= 0.10,
                             fmt_mib(c.median("rss"))))
        clean()
        rmtree(saved)

    # -- 8: a zstd-recompressed mirror (directory and registry) -------------
    def zstd_mirror(self):
        """The fleet case: a cache warmer ran `redist mirror --recompress zstd`
        once; runners install the zstd copy of the single-block archive from
        that mirror (a directory behind nginx, and a docker-registry), with an
        unreachable base URL. Compared, in the same rounds: `xz -T1 -dc` of
        the original (the floor every runner pays without the copy) and
        `zstd -dc` of the copy (the floor with it)."""
        if shutil.which("zstd") is None:
            self.notes.append("8. skipped: the zstd command is not installed")
            return
        sha = self.meta["single"]["sha256"]
        mirror_dir = os.path.join(self.meta["dir"], f"zstd-mirror-{sha[:16]}")
        # The operator's key signs the copies' records, and the runners trust it: kept beside the
        # mirror, so that a later run reuses the copies it signed rather than making them again.
        key, self.zstd_trusted_key = mirror_dir + ".key", mirror_dir + ".pub"
        if not os.path.exists(self.zstd_trusted_key):
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True)
            subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", self.zstd_trusted_key], check=True)
        mirror_args = ["cudnn", self.label, "--base-url", f"{self.base}/single", "--platform", PLATFORM,
                       "--cuda", CUDA_MAJOR, "--recompress", "zstd", "--sign-key", key, "--quiet"]
        log("zstd: redist mirror --recompress zstd into a directory (incremental across runs)")
        t0 = time.monotonic()
        subprocess.run([self.redist, "mirror", *mirror_args, "--to", mirror_dir], check=True)
        self.notes.append(f"8. Building the directory mirror's copy took {time.monotonic() - t0:.1f} s "
                          "(0 when it was already there: the mirror is incremental).")
        redist_dir = os.path.join(mirror_dir, "cudnn", "redist")
        with open(os.path.join(redist_dir, f"recompressed_{self.label}.json")) as f:
            copies = json.load(f)["copies"]
        copy = next(c for c in copies if c["original_sha256"] == sha)
        copy_path = os.path.join(redist_dir, copy["relative_path"])
        os.symlink(mirror_dir, os.path.join(self.d("www"), "zstd"))
        import registry_fixture  # docker-registry on a free loopback port, as the tests start it
        registry = None
        if os.access(registry_fixture.REGISTRY, os.X_OK):
            registry = registry_fixture.Registry(self.d("registry")).__enter__()
        try:
            sources = [("directory", f"{self.base}/zstd")]
            if registry is not None:
                log("zstd: redist mirror --recompress zstd into a docker-registry")
                subprocess.run([self.redist, "mirror", *mirror_args, "--to", registry.url], check=True)
                sources.append(("registry", registry.url))
            else:
                self.notes.append("8. registry rows skipped: /usr/bin/docker-registry is not installed")
            self._zstd_rounds(sources, copy, copy_path)
        finally:
            if registry is not None:
                registry.stop()

    def _zstd_rounds(self, sources, copy, copy_path):
        contenders = []
        for name, url in sources:
            prefix, cache = self.d(f"zstd-prefix-{name}"), self.d(f"zstd-cache-{name}")
            cmd = [self.cudnn_fetch, self.label, "--prefix", prefix, "--mirror", url,
                   "--base-url", "http://127.0.0.1:9/unreachable", "--cache-dir", cache,
                   "--cuda", CUDA_MAJOR, "--platform", PLATFORM, "--trusted-key", self.zstd_trusted_key, "--quiet"]

            def fresh(prefix=prefix, cache=cache):
                rmtree(prefix)
                rmtree(cache)
                os.makedirs(cache)

            def clean(prefix=prefix, cache=cache):
                rmtree(prefix)
                rmtree(cache)

            # Once, untimed: the copy is what gets installed, and the tree is the original's.
            fresh()
            subprocess.run(cmd, check=True)
            check_tree(prefix, self.payload)
            receipts = subprocess.run(["grep", "-rl", copy["sha256"], os.path.join(prefix, ".redist")],
                                      stdout=subprocess.PIPE, text=True)
            if receipts.returncode != 0:
                raise BenchError(f"zstd ({name}): the receipt does not name the copy; the original was installed")
            clean()
            contenders.append(Contender(f"cudnn-fetch from the zstd copy ({name} mirror)", cmd, fresh, clean))
        against = [b for c in contenders for b in self.twin(c)]
        xz_floor = Contender("xz -T1 -dc (the original, single-block)", ["xz", "-T1", "-dc", self.archive("single")])
        zstd_floor = Contender("zstd -dc (the copy)", ["zstd", "-dc", copy_path])
        untar_dir = self.d("zstd-untar")
        untar = Contender("zstd -dc the copy into tar -x", f"zstd -dc {shlex.quote(copy_path)} | tar -xf - -C "
                          f"{shlex.quote(untar_dir)}", lambda: (rmtree(untar_dir), os.makedirs(untar_dir)),
                          lambda: rmtree(untar_dir), shell=True)
        # What the checks cost before a file is written: every byte the copy
        # decodes to hashed once (a copy's recorded tree is that hash cut into
        # its files, which the receipt digests anyway; neither the tar nor
        # the copy's own bytes are hashed then, only counted).
        q = shlex.quote(copy_path)
        verified = Contender("the verification floor: zstd -dc into SHA-256 (no file written)",
                             f"zstd -dc {q} | openssl dgst -sha256 > /dev/null", shell=True)
        everyone = contenders + against + [xz_floor, zstd_floor, untar, verified]
        log(f"zstd: {self.args.runs} round(s) of " + " | ".join(c.name for c in everyone))
        run_rounds(everyone, self.args.runs, [self.archive("single"), copy_path], self.args.drop_caches)
        self.details += everyone
        for c in contenders:
            r = c.median("wall") / xz_floor.median("wall")
            self.rows.append(Row(f"8. {c.name} vs the xz floor", fmt_s(c), f"{xz_floor.name}: {fmt_s(xz_floor)}",
                                 r, "<= 0.12x", r <= 0.12, fmt_mib(c.median("rss"))))
            r = c.median("wall") / zstd_floor.median("wall")
            self.rows.append(Row(f"8. {c.name} vs the zstd floor", fmt_s(c),
                                 f"{zstd_floor.name}: {fmt_s(zstd_floor)}; {untar.name}: {fmt_s(untar)}",
                                 r, "<= 1.30x", r <= 1.30, fmt_mib(c.median("rss"))))
            r = c.median("wall") / verified.median("wall")
            self.rows.append(Row(f"8. {c.name} vs the verification floor", fmt_s(c), f"{verified.name}: {fmt_s(verified)}",
                                 r, "(info)", None, fmt_mib(c.median("rss"))))
            rss = c.median("rss") / 1024
            self.rows.append(Row(f"8. Peak RSS, {c.name}", fmt_mib(c.median("rss")),
                                 f"zstd -dc: {fmt_mib(zstd_floor.median('rss'))}", None, "<= 64 MiB", rss <= 64,
                                 fmt_mib(c.median("rss"))))

        self.paired_rows("8", contenders)
        r = verified.median("wall") / zstd_floor.median("wall")
        self.rows.append(Row("8. The verification floor vs zstd -dc", fmt_s(verified), f"{zstd_floor.name}: "
                             f"{fmt_s(zstd_floor)}", r, "(info)", None, "-"))

    # -- 6: the post-install check on the cuDNN tree -----------------------
    def check_time(self, prefix):
        """What `fetch` adds after an install: the quick check (the goal: under
        200 ms on the cuDNN tree), timed on the installed prefix as `redist
        check --quick` (its own `seconds`, without starting the tool), and
        the full `redist check` beside it for information. The files were
        written moments ago by the warm re-installs."""
        help_text = subprocess.run([self.redist, "check", "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True).stdout
        if "--quick" not in help_text:
            self.notes.append("redist check has no --quick: post-install check time not measured.")
            return
        n = 1 if self.args.quick else 5
        tools = [("", self.redist)] + [("B: ", b) for a, b in self.against_tools.items() if a == self.redist]
        for depth, extra, goal in (("quick", ["--quick"], 0.200), ("full", [], None)):
            inner = {tag: [] for tag, _ in tools}
            samples = {tag: [] for tag, _ in tools}
            for i in range(n):
                for tag, tool in tools[::-1] if i % 2 else tools:  # two builds: each goes first in turn
                    cmd = [tool, "check", "--prefix", prefix, "--json", *extra]
                    samples[tag].append(timed(cmd))
                    out = subprocess.run(cmd, stdout=subprocess.PIPE, env=ENV, text=True)
                    inner[tag].append(json.loads(out.stdout)["seconds"])
            for tag, tool in reversed(tools):  # `c` ends as this build's
                c = Contender(f"{tag}redist check --prefix (cuDNN tree, {depth})",
                              [tool, "check", "--prefix", prefix, "--json", *extra])
                c.samples = samples[tag]
                self.details.append(c)
            if len(tools) > 1:
                ratios = [a / b for a, b in zip(inner[""], inner["B: "])]
                self.rows.append(Row(f"6. Paired: redist check, {depth}, internal seconds vs --against",
                                     f"{statistics.median(inner['']) * 1000:.0f} ms",
                                     f"B: {statistics.median(inner['B: ']) * 1000:.0f} ms; per round "
                                     + " ".join(f"{x:.3f}" for x in ratios), statistics.median(ratios),
                                     "(paired)", None, "-"))
            inner = inner[""]
            ms = statistics.median(inner) * 1000
            self.rows.append(Row(f"6. Post-install check, {depth}" + (" (what fetch runs)" if goal else
                                                                      " (redist check, fetch --check)"),
                                 f"{ms:.0f} ms (internal; wall {c.median('wall') * 1000:.0f} ms)",
                                 "-", None, f"<= {goal * 1000:.0f} ms" if goal else "(info)",
                                 (ms <= goal * 1000) if goal else None, fmt_mib(c.median("rss"))))

    # -- 5: multi-component ------------------------------------------------
    def multi_component(self):
        comps = self.meta["components"]
        prefix, cache = self.d("multi-prefix"), self.d("multi-cache")

        def fresh():
            rmtree(prefix)
            rmtree(cache)
            os.makedirs(cache)

        def clean_check_once(c):
            def f():
                if len(c.samples) == 1:
                    check_tree(prefix, self.payload)
                rmtree(prefix)
                rmtree(cache)
            return f

        def fetch_from(name, base_url):
            c = Contender(name, [self.redist, "fetch", SPLIT_PRODUCT, SPLIT_LABEL, "--prefix", prefix,
                                 "--base-url", base_url, "--cache-dir", cache, "--platform", PLATFORM, "--quiet"],
                          fresh)
            c.cleanup = clean_check_once(c)
            return c

        ours = fetch_from(f"redist fetch {SPLIT_PRODUCT} ({len(comps)} components)", f"{self.base}/multi")
        # How much of the time is HTTP, which the floor (xz reading a local
        # file) does not pay: nginx's own CPU per fetch (it runs on the same
        # cores), and the same fetch from a file:// mirror of the same
        # archives (no server, no socket).
        local = fetch_from(f"redist fetch {SPLIT_PRODUCT} from file:// (no server)",
                           f"file://{self.d('www')}/multi-local")
        served = []  # nginx's CPU seconds during each HTTP fetch
        checked_cleanup = ours.cleanup
        ours.prepare = lambda: (fresh(), served.append(-self.nginx.cpu_seconds()))
        ours.cleanup = lambda: (served.append(served.pop() + self.nginx.cpu_seconds()), checked_cleanup())
        decoders = [Contender(f"xz -T1 -dc {name}",
                              ["xz", "-T1", "-dc", os.path.join(self.meta["dir"], a["file"])])
                    for name, a in comps.items()]
        files = [os.path.join(self.meta["dir"], a["file"]) for a in comps.values()]
        # What the machine allows right now: the same decodes, `cores` at a
        # time, largest first (a shell could do this; shown for information).
        largest_first = sorted(files, key=os.path.getsize, reverse=True)
        xargs = Contender(f"xargs -P{self.cores} xz -T1 -dc (largest first)",
                          "printf '%s\\n' " + " ".join(shlex.quote(f) for f in largest_first)
                          + f" | xargs -P{self.cores} -n1 xz -T1 -dc", shell=True)
        # The same decodes writing the files (tar -x, no hash, no cache copy):
        # what writing 471 MiB costs on this machine, which the floor above
        # leaves out and every installer pays.
        files_dir = self.d("multi-floor-files")
        assert "'" not in files_dir
        with_files = Contender(f"xargs -P{self.cores} xz -T1 -dc, each into tar -x (largest first)",
                               "printf '%s\\n' " + " ".join(shlex.quote(f) for f in largest_first)
                               + f" | xargs -P{self.cores} -I{{}} sh -c "
                               + f"'d={files_dir}/$(basename {{}}) && mkdir -p \"$d\" && "
                               + "xz -T1 -dc {} | tar -xf - -C \"$d\"'", shell=True,
                               prepare=lambda: (rmtree(files_dir), os.makedirs(files_dir)),
                               cleanup=lambda: rmtree(files_dir))
        # --against: the other build's fetches, each right after this build's (its nginx CPU is not counted).
        mine = [x for c in (ours, local) for x in (c, *self.twin(c))]
        log(f"multi-component: {self.args.runs} round(s) of {' | '.join(c.name for c in mine)} | "
            f"{len(decoders)} single-threaded decodes | {xargs.name}")
        for i in range(self.args.runs):
            # Alternate: the fetches, then every decode (order flips each round).
            seq = (mine + decoders + [xargs, with_files] if i % 2 == 0
                   else [with_files, xargs] + decoders + mine[::-1])
            for c in seq:
                run_rounds([c], 1, files if c in (*mine, xargs, with_files) else [], self.args.drop_caches)
        self.details += mine
        self.details += decoders
        self.details += [xargs, with_files]
        # Per round: sum of single-threaded decodes; median over rounds.
        sums = [sum(d.samples[i].wall for d in decoders) for i in range(self.args.runs)]
        cpu_sums = [sum(d.samples[i].cpu for d in decoders) for i in range(self.args.runs)]
        ideal = statistics.median(sums) / self.cores
        r = ours.median("wall") / ideal
        sizes = sorted((a["uncompressed"] for a in comps.values()), reverse=True)
        self.rows.append(Row(f"5. Multi-component ({len(comps)} archives, "
                             f"{sum(1 for a in comps.values() if a['blocks'] > 1)} multi-block)",
                             fmt_s(ours),
                             f"sum of xz -T1 -dc {statistics.median(sums):.2f} s "
                             f"(CPU {statistics.median(cpu_sums):.2f} s) / {self.cores} cores "
                             f"= {ideal:.2f} s", r, "(info)", None,
                             fmt_mib(ours.median("rss")),
                             note=f"largest component {sizes[0] / 2**20:.0f} MiB of "
                                  f"{sum(sizes) / 2**20:.0f} MiB"))
        r_local = local.median("wall") / ideal
        self.rows.append(Row("5. Multi-component from a file:// mirror (no server on the same cores)",
                             fmt_s(local), f"the same floor, {ideal:.2f} s; nginx's CPU per HTTP fetch "
                             f"above: {statistics.median(served):.2f} s", r_local, "(info)", None,
                             fmt_mib(local.median("rss"))))
        r2 = ours.median("wall") / xargs.median("wall")
        self.rows.append(Row("5. Multi-component vs parallel shell decode", fmt_s(ours),
                             f"{xargs.name}: {fmt_s(xargs)}", r2, "(info)", None,
                             f"xargs {fmt_mib(xargs.median('rss'))}"))
        r3 = ours.median("wall") / with_files.median("wall")
        # The goal: the best shell pipeline that writes the files (no hash, no download, no cache).
        self.rows.append(Row("5. Multi-component vs parallel decode writing the files", fmt_s(ours),
                             f"{with_files.name}: {fmt_s(with_files)} "
                             f"(= {with_files.median('wall') / ideal:.2f}x the floor above)", r3, "<= 1.00x",
                             r3 <= 1.00, f"tar {fmt_mib(with_files.median('rss'))}"))
        self.paired_rows("5", [ours, local])

    def run(self):
        www = self.d("www")
        write_mirror(www, self.meta)
        ng = Nginx(self.work, www)
        self.nginx = ng
        try:
            self.base = ng.start()
            log(f"nginx serving {www} at {self.base}")
            want = set(self.args.scenarios)
            cold_single = None
            if want & {"1", "3", "4", "7"}:
                cold_single, floor1 = self.cold("single", 1, "1. Cold fetch, single-block", 1.10)
                r = cold_single.median("rss") / 1024
                self.rows.append(Row("1. Peak RSS, cold single-block", fmt_mib(cold_single.median("rss")),
                                     f"xz -T1 -dc: {fmt_mib(floor1.median('rss'))}", None,
                                     "<= 64 MiB", r <= 64, fmt_mib(cold_single.median("rss"))))
            if "2" in want:
                ours, floor = self.cold("multi", 0, "2. Cold fetch, multi-block", None, writing_goal=1.00)
                r = ours.median("rss") / floor.median("rss")
                self.rows.append(Row("2. Peak RSS, cold multi-block", fmt_mib(ours.median("rss")),
                                     f"xz -T0 -dc: {fmt_mib(floor.median('rss'))}", r,
                                     "<= 1.30x", r <= 1.30, fmt_mib(ours.median("rss"))))
            if want & {"3", "4"}:
                self.warm(cold_single)
            if "7" in want:
                self.ci_restore(cold_single)
            if "5" in want:
                self.multi_component()
            if "8" in want:
                self.zstd_mirror()
        finally:
            ng.stop()


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def report(bench: Bench, start_info: dict, args) -> str:
    end_load = os.getloadavg()
    lines = ["# redist benchmark results", "",
             f"- Date: {start_info['date']}",
             f"- Machine: {bench.cores} cores ({cpu_model()}), {platform.system()} "
             f"{platform.release()}",
             f"- Load average at start: {start_info['load'][0]:.2f} / {start_info['load'][1]:.2f} / "
             f"{start_info['load'][2]:.2f} (1/5/15 min); at end: {end_load[0]:.2f} / "
             f"{end_load[1]:.2f} / {end_load[2]:.2f}",
             f"- Payload: {bench.meta['description']}",
             f"- Archives: single-block `xz -6 -T1` {bench.meta['single']['size'] / 2**20:.1f} MiB "
             f"({bench.meta['single']['blocks']} block); multi-block `xz -6 -T2` "
             f"{bench.meta['multi']['size'] / 2**20:.1f} MiB ({bench.meta['multi']['blocks']} blocks); "
             f"{len(bench.meta['components'])} component archives (`xz -{bench.meta['component_preset']}`)",
             f"- Served by nginx on 127.0.0.1 (sendfile); tools from `{args.build}`",
             f"- Page cache: {start_info['cache_note']}",
             f"- Runs per contender: {args.runs} (alternating in the same rounds; medians shown)",
             f"- Total bench time: {time.monotonic() - start_info['t0']:.0f} s",
             "",
             "| scenario | redist | comparison | ratio | goal | peak RSS (redist) | result |",
             "|---|---|---|---|---|---|---|"]
    for r in bench.rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}x"
        res = "info" if r.passed is None else ("PASS" if r.passed else "**MISS**")
        scen = r.scenario + (f" ({r.note})" if r.note else "")
        lines.append(f"| {scen} | {r.ours} | {r.theirs} | {ratio} | {r.goal} | {r.rss} | {res} |")
    lines += ["", "CPU = user+sys of the process and the children it waited for (os.wait4). "
              "Peak RSS = ru_maxrss, the largest single process of the command's tree "
              "(for the shell pipeline: usually xz under tar), "
              + ("taken through GNU time (%M), because wait4 on a child of Python reports "
                 "Python's pre-exec RSS (~27 MiB) as a floor." if GNU_TIME else
                 "from os.wait4 (GNU time missing: values below ~27 MiB are Python's "
                 "pre-exec RSS, not the tool's)."), ""]
    for n in bench.notes:
        lines.append(f"- Note: {n}")
    lines += ["", "## All runs", "", "| contender | wall (s) | CPU (s) | peak RSS (MiB) |",
              "|---|---|---|---|"]
    for c in bench.details:
        lines.append(f"| {c.name} | {' '.join(f'{s.wall:.3f}' for s in c.samples)} | "
                     f"{' '.join(f'{s.cpu:.2f}' for s in c.samples)} | "
                     f"{' '.join(f'{s.rss / 1024:.1f}' for s in c.samples)} |")
    return "\n".join(lines) + "\n"


HAND_WRITTEN = "## Where the goals stand (by hand)"


def hand_written_part(path: str) -> str:
    """The section people keep by hand (goals from other machines, notes):
    carried over from the previous report, at most a screen of it."""
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        return ""
    at = old.find(HAND_WRITTEN)
    return "\n" + old[at:] if at >= 0 else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory with bin/cudnn-fetch "
                    "and bin/redist (default: ./build)")
    ap.add_argument("--runs", type=int, default=3, help="runs per contender (default 3)")
    ap.add_argument("--quick", action="store_true", help="one run per contender")
    ap.add_argument("--cache-dir", default=os.environ.get("REDIST_BENCH_CACHE",
                                                          "/var/tmp/redist-bench"),
                    help="archive cache, outside the repo (default /var/tmp/redist-bench, "
                         "or $REDIST_BENCH_CACHE)")
    ap.add_argument("--work", help="scratch dir for prefixes, caches, nginx "
                    "(default <cache-dir>/work; wiped)")
    ap.add_argument("--scenarios", default="1,2,3,4,5,7,8", help="subset, e.g. 1,5 (default all)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="drop the page cache before every timed cold run (root; disturbs "
                         "other work on the machine). Default: warm the archive for everyone")
    ap.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"),
                    help="Markdown report (default bench/RESULTS.md)")
    ap.add_argument("--prepare", action="store_true", help="only build/cache the archives")
    ap.add_argument("--import-single", metavar="TAR_XZ",
                    help="use this existing single-block archive of the same payload instead of "
                         "compressing (validated by listing it; only when the cache lacks it)")
    ap.add_argument("--import-multi", metavar="TAR_XZ", help="same for the multi-block archive")
    ap.add_argument("--against", metavar="BUILD_DIR",
                    help="a second build (the code before a change) whose tools run in the same "
                         "rounds, alternating with --build's, in every scenario; a Paired row per "
                         "redist contender gives the median of the per-round ratios")
    ap.add_argument("--component-preset", type=int, default=1, choices=range(0, 10),
                    help="xz preset of the component archives (default 1: compressing is "
                         "several times faster than -6 on a busy machine; both contenders "
                         "decode the same files)")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs = 1
    args.build = os.path.abspath(args.build)
    if args.against:
        args.against = os.path.abspath(args.against)
        if not os.access(os.path.join(args.against, "bin", "cudnn-fetch"), os.X_OK):
            ap.error(f"--against {args.against}: no bin/cudnn-fetch there")
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    args.cache_dir = os.path.abspath(args.cache_dir)
    args.work = os.path.abspath(args.work or os.path.join(args.cache_dir, "work"))
    if os.path.commonpath([args.cache_dir, REPO]) == REPO:
        ap.error("--cache-dir must be outside the repository")
    for tool in ("xz", "curl", "sha256sum", "tar"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} is required")

    # Ctrl-C and SIGTERM unwind through the finally blocks (nginx is stopped).
    # SIGINT explicitly too: a shell may start us with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    start = {"t0": time.monotonic(), "load": os.getloadavg(),
             "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}
    log(f"load average at start: {start['load'][0]:.2f} {start['load'][1]:.2f} "
        f"{start['load'][2]:.2f} on {len(os.sched_getaffinity(0))} cores")
    os.makedirs(args.cache_dir, exist_ok=True)
    payload = real_payload() or generated_payload(args.cache_dir)
    log(f"payload: {payload.description}")
    try:
        meta = prepare_archives(payload, args.cache_dir,
                                {"single": args.import_single, "multi": args.import_multi},
                                args.component_preset)
        if args.prepare:
            log(f"archives ready in {meta['dir']}")
            return 0
        if args.drop_caches and not try_drop_caches():
            log("cannot drop the page cache: warming the archives instead")
            args.drop_caches = False
        start["cache_note"] = ("dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every "
                               "timed cold run" if args.drop_caches else
                               "warm: the archive(s) are read once before every timed cold run, "
                               "for every contender (nginx serves from RAM)")
        rmtree(args.work)
        os.makedirs(args.work)
        bench = Bench(args, payload, meta)
        bench.run()
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        if not args.prepare and os.path.isdir(args.work):
            shutil.rmtree(args.work, ignore_errors=True)
    text = report(bench, start, args) + hand_written_part(args.output)
    with open(args.output, "w") as f:
        f.write(text)
    print()
    print(text)
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
