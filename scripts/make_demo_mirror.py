#!/usr/bin/env python3
"""Generate a small demo mirror of NVIDIA's redist layout.

    DIR/<product>/redist/index.html                       listing (NVIDIA style)
    DIR/<product>/redist/redistrib_<label>.json           manifest
    DIR/<product>/redist/<component>/LICENSE.txt          license_path
    DIR/<product>/redist/<relative_path>                  real archives
    DIR/mirror-info.json                                  facts for tests

The archives are real (tar.xz, and .zip for Windows) but tiny, and the
manifests carry their real sha256, md5 and size, in the same shape as the
upstream manifests in tests/data/manifests/. Output is deterministic: the same
inputs give byte-identical archives (fixed mtimes, uid/gid 0, sorted entries,
seeded pseudo-random content, xz CLI with fixed settings).

Shapes worth testing are built in on purpose and listed in mirror-info.json:
  - cudnn labels 9.8.0, 9.10.1, 9.27.0 (numeric ordering: 9.10 > 9.8), and a
    listing sorted lexically, as a web server would sort it;
  - 9.8.0 names cuda11 in cuda_variant but only linux-x86_64 has it;
  - symlink chains (libcudnn.so -> libcudnn.so.9 -> libcudnn.so.<ver>),
    a read-only file (LICENSE, 0444) and executables (0755);
  - files that vanish in the next release (stale-file removal on upgrade);
  - cudnn_jit (9.27.0) shares identical files with cudnn (identical overlap);
  - some archives are multi-block xz (threaded decoding), the rest one block.

Usage: make_demo_mirror.py --dest DIR [--products cudnn,cuda] [--labels L,...]
Python 3 standard library plus the xz command line tool.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

GENERATOR_VERSION = 1
# Fixed timestamp for every archive member: 2025-01-01T00:00:00Z.
MTIME = 1735689600
ZIP_DATE = (2025, 1, 1, 0, 0, 0)
INFO_NAME = "mirror-info.json"

# xz settings. Single-threaded xz writes exactly one block; a block size with
# -T2 splits the stream into independent blocks (what NVIDIA's big archives
# look like, and what lets liblzma decode in parallel). Output of threaded xz
# is deterministic for a given block size.
XZ_SINGLE = ["xz", "-6", "-T1", "-c"]
XZ_MULTI = ["xz", "-6", "-T2", "--block-size=16KiB", "-c"]


# ---------------------------------------------------------------------------
# Archive content model
# ---------------------------------------------------------------------------

class Entry:
    """One archive member: a regular file, a directory or a symlink."""

    __slots__ = ("path", "kind", "mode", "data", "target")

    def __init__(self, path, kind, mode=0o644, data=b"", target=""):
        self.path, self.kind, self.mode, self.data, self.target = path, kind, mode, data, target


def blob(seed: str, size: int) -> bytes:
    """Deterministic pseudo-binary content: random runs mixed with repeated
    runs, so xz has real work to do but the data still compresses a bit.
    random.Random(str) seeds through SHA-512: stable across runs and Python
    versions, independent of PYTHONHASHSEED."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += rng.randbytes(1536)
        out += bytes([rng.randrange(256)]) * 512
    return bytes(out[:size])


def text(seed: str, header: str, lines: int) -> bytes:
    """Deterministic text file content (a header plus filler lines)."""
    rng = random.Random(seed)
    words = ["cudnn", "tensor", "kernel", "stream", "handle", "descriptor", "graph",
             "engine", "workspace", "convolution", "matmul", "layout", "stride"]
    body = [header]
    for i in range(lines):
        body.append(f"/* {i:04d} " + " ".join(rng.choice(words) for _ in range(8)) + " */")
    return ("\n".join(body) + "\n").encode()


class Tree:
    """Collects entries under the archive's single top-level directory."""

    def __init__(self, top: str):
        self.top = top
        self.entries: dict[str, Entry] = {}
        self._dir("")

    def _dir(self, rel: str):
        path = f"{self.top}/{rel}".rstrip("/")
        if path not in self.entries:
            self.entries[path] = Entry(path, "dir", 0o755)

    def _parents(self, rel: str):
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self._dir("/".join(parts[:i]))

    def file(self, rel: str, data: bytes, mode: int = 0o644):
        self._parents(rel)
        self.entries[f"{self.top}/{rel}"] = Entry(f"{self.top}/{rel}", "file", mode, data)

    def symlink(self, rel: str, target: str):
        self._parents(rel)
        self.entries[f"{self.top}/{rel}"] = Entry(f"{self.top}/{rel}", "symlink", 0o777, target=target)

    def solib(self, libdir: str, name: str, full: str, major: str, seed: str, size: int,
              mode: int = 0o755):
        """lib/<name>.so.<full> plus the chain <name>.so -> .so.<major> -> .so.<full>."""
        self.file(f"{libdir}/{name}.so.{full}", blob(seed + name, size), mode)
        if major != full:
            self.symlink(f"{libdir}/{name}.so.{major}", f"{name}.so.{full}")
            self.symlink(f"{libdir}/{name}.so", f"{name}.so.{major}")
        else:
            self.symlink(f"{libdir}/{name}.so", f"{name}.so.{full}")

    def sorted(self):
        return [self.entries[k] for k in sorted(self.entries)]


def make_tar(tree: Tree) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for e in tree.sorted():
            info = tarfile.TarInfo(e.path)
            info.mtime = MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def make_zip(tree: Tree) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for e in tree.sorted():
            if e.kind == "symlink":
                continue  # Windows archives carry no symlinks
            name = e.path + ("/" if e.kind == "dir" else "")
            zi = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            zi.create_system = 3  # unix, so external_attr carries the mode
            if e.kind == "dir":
                zi.external_attr = (0o040000 | e.mode) << 16 | 0x10
                zf.writestr(zi, b"")
            else:
                zi.external_attr = (0o100000 | e.mode) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(zi, e.data)
    return buf.getvalue()


def xz_compress(data: bytes, multi_block: bool) -> bytes:
    cmd = XZ_MULTI if multi_block else XZ_SINGLE
    res = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.decode(errors='replace')}")
    return res.stdout


# ---------------------------------------------------------------------------
# Product definitions
# ---------------------------------------------------------------------------

class Artifact:
    """One archive to build: where it goes and how to make its bytes."""

    def __init__(self, product, relative_path, tree, kind, multi_block=False):
        self.product, self.relative_path, self.tree = product, relative_path, tree
        self.kind, self.multi_block = kind, multi_block  # kind: "tar.xz" | "zip"
        self.data = b""

    def build(self):
        if self.kind == "zip":
            self.data = make_zip(self.tree)
        else:
            self.data = xz_compress(make_tar(self.tree), self.multi_block)
        return self

    def record(self):
        return {
            "relative_path": self.relative_path,
            "sha256": hashlib.sha256(self.data).hexdigest(),
            "md5": hashlib.md5(self.data).hexdigest(),
            "size": str(len(self.data)),
        }


def cudnn_license(label: str) -> bytes:
    return (f"NVIDIA cuDNN demo license, release {label}.\n"
            "This text stands in for the real license in a generated test mirror.\n").encode()


def cudnn_version_h(version: str) -> bytes:
    major, minor, patch = version.split(".")[:3]
    return (f"/* cudnn_version.h: generated demo header for cuDNN {version} */\n"
            "#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n"
            f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
            f"#define CUDNN_PATCHLEVEL {patch}\n"
            "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n"
            "#endif\n").encode()


# Release label -> facts. Versions and dates follow the real manifests where
# they exist (9.8.0, 9.27.0); 9.10.1 sits between them.
CUDNN_RELEASES = {
    "9.8.0": {"version": "9.8.0.87", "date": "2025-03-04", "jit": False,
              # cuda11 only on linux-x86_64: cuda_variant names a variant
              # that other platforms lack (as real manifests do).
              "variants": {"linux-x86_64": ["11", "12", "13"], "linux-sbsa": ["12", "13"],
                           "windows-x86_64": ["12", "13"]}},
    "9.10.1": {"version": "9.10.1.4", "date": "2025-05-13", "jit": False,
               "variants": {"linux-x86_64": ["12", "13"], "linux-sbsa": ["12", "13"],
                            "windows-x86_64": ["12", "13"]}},
    "9.27.0": {"version": "9.27.0.42", "date": "2026-09-29", "jit": True,
               "variants": {"linux-x86_64": ["12", "13"], "linux-sbsa": ["12", "13"],
                            "windows-x86_64": ["12", "13"]}},
}

# Files present in a release and gone in the next one (stale-file removal).
CUDNN_VANISHING = {
    "9.8.0": ["include/cudnn_deprecated.h"],
    "9.10.1": ["lib/libcudnn_ops_legacy.so.{v3}", "lib/libcudnn_ops_legacy.so.9",
               "lib/libcudnn_ops_legacy.so"],
}

# The one multi-block cuDNN archive (label, component, platform, variant).
CUDNN_MULTI_BLOCK = ("9.27.0", "cudnn", "linux-x86_64", "12")


def cudnn_tree(label, rel, platform, cuda):
    """cudnn-<platform>-<ver>_cuda<N>-archive/ in NVIDIA's layout."""
    version = rel["version"]
    v3 = ".".join(version.split(".")[:3])
    seed = f"cudnn/{version}/{platform}/cuda{cuda}/"
    top = f"cudnn-{platform}-{version}_cuda{cuda}-archive"
    t = Tree(top)
    big = (label, "cudnn", platform, cuda) == CUDNN_MULTI_BLOCK
    t.file("LICENSE", cudnn_license(label), 0o444)
    t.file("include/cudnn.h", text(seed + "cudnn.h",
           f"/* cudnn.h: cuDNN {version} for CUDA {cuda} ({platform}) */", 40 + int(cuda)))
    t.file("include/cudnn_version.h", cudnn_version_h(version))
    t.file("include/cudnn_graph.h", text(seed + "graph.h", f"/* cudnn_graph.h {version} */", 30))
    if platform.startswith("windows"):
        t.file(f"bin/cudnn64_9.dll", blob(seed + "dll", 40 * 1024), 0o755)
        t.file("bin/cudnn_graph64_9.dll", blob(seed + "gdll", 12 * 1024), 0o755)
        t.file("lib/x64/cudnn.lib", blob(seed + "lib", 6 * 1024))
        return t
    t.file("bin/cudnn-info", (f"#!/bin/sh\necho 'cuDNN {version} for CUDA {cuda} "
                              f"({platform})'\n").encode(), 0o755)
    t.solib("lib", "libcudnn", v3, "9", seed, 24 * 1024)
    t.solib("lib", "libcudnn_graph", v3, "9", seed, 16 * 1024)
    t.solib("lib", "libcudnn_engines_precompiled", v3, "9", seed,
            (192 if big else 64) * 1024 + 1024 * int(cuda))
    if label == "9.8.0":
        t.file("include/cudnn_deprecated.h", text(seed + "dep", "/* deprecated API */", 12))
    if label in ("9.8.0", "9.10.1"):
        t.solib("lib", "libcudnn_ops_legacy", v3, "9", seed, 8 * 1024)
    return t


def cudnn_jit_tree(label, rel, platform, cuda):
    """cudnn_jit shares LICENSE and include/cudnn_version.h, byte for byte and
    mode for mode, with the cudnn archive of the same release: installing both
    into one prefix must accept these identical overlaps."""
    version = rel["version"]
    v3 = ".".join(version.split(".")[:3])
    seed = f"cudnn_jit/{version}/{platform}/cuda{cuda}/"
    t = Tree(f"cudnn_jit-{platform}-{version}_cuda{cuda}-archive")
    t.file("LICENSE", cudnn_license(label), 0o444)
    t.file("include/cudnn_version.h", cudnn_version_h(version))
    t.file("include/cudnn_jit.h", text(seed + "jit.h", f"/* cudnn_jit.h {version} */", 20))
    t.solib("lib", "libcudnn_engines_runtime_compiled", v3, "9", seed, 20 * 1024)
    return t


def cudnn_samples_tree(label, rel):
    version = rel["version"]
    seed = f"cudnn_samples/{version}/"
    t = Tree(f"cudnn_samples-source-{version}-archive")
    t.file("LICENSE", cudnn_license(label), 0o444)
    for sample in ("conv_sample", "mnistCUDNN", "multiHeadAttention"):
        t.file(f"src/cudnn_samples_v9/{sample}/Makefile",
               f"# {sample} for cuDNN {version}\nall:\n\t@echo build {sample}\n".encode())
        t.file(f"src/cudnn_samples_v9/{sample}/{sample}.cpp",
               text(seed + sample, f"// {sample}.cpp cuDNN {version}", 60))
    t.file("src/cudnn_samples_v9/run_all.sh",
           b"#!/bin/sh\nfor d in */; do make -C \"$d\"; done\n", 0o755)
    return t


def cudnn_artifacts(labels):
    """Yields (label, manifest-dict-without-records, artifacts) per release."""
    for label, rel in CUDNN_RELEASES.items():
        if labels and label not in labels:
            continue
        version = rel["version"]
        arts = []
        comps = {}
        components = [("cudnn", "NVIDIA CUDA Deep Neural Network library", cudnn_tree)]
        if rel["jit"]:
            components.append(("cudnn_jit", "NVIDIA CUDA Deep Neural Network Graph JIT library",
                               cudnn_jit_tree))
        for comp, name, make in components:
            entry = {"name": name, "license": "cudnn", "license_path": f"{comp}/LICENSE.txt",
                     "version": version}
            all_variants = sorted({v for vs in rel["variants"].values() for v in vs}, key=int)
            first = True
            for platform, variants in rel["variants"].items():
                if comp == "cudnn_jit" and platform.startswith("windows"):
                    continue  # like the real manifests: no Windows JIT package
                ext = "zip" if platform.startswith("windows") else "tar.xz"
                pmap = {}
                for cuda in variants:
                    rp = (f"{comp}/{platform}/{comp}-{platform}-{version}_cuda{cuda}"
                          f"-archive.{ext}")
                    multi = (label, comp, platform, cuda) == CUDNN_MULTI_BLOCK
                    art = Artifact("cudnn", rp, make(label, rel, platform, cuda), ext, multi)
                    arts.append(art)
                    pmap[f"cuda{cuda}"] = art
                entry[platform] = pmap
                if first:
                    # Real manifests put cuda_variant right after the first platform.
                    entry["cuda_variant"] = all_variants
                    first = False
            comps[comp] = entry
        rp = f"cudnn_samples/source/cudnn_samples-source-{version}-archive.tar.xz"
        art = Artifact("cudnn", rp, cudnn_samples_tree(label, rel), "tar.xz")
        arts.append(art)
        comps["cudnn_samples"] = {"name": "NVIDIA cuDNN samples", "license": "cudnn",
                                  "license_path": "cudnn_samples/LICENSE.txt",
                                  "version": version, "source": art}
        yield label, rel["date"], comps, arts


# CUDA: component -> (display name, versions per label). Versions are the
# real ones from tests/data/manifests/cuda/.
CUDA_RELEASES = {
    "12.9.1": {"date": "2025-06-05", "platforms": ["linux-x86_64", "linux-sbsa", "linux-aarch64"]},
    "13.0.0": {"date": "2025-08-04", "platforms": ["linux-x86_64", "linux-sbsa"]},
}
# A component missing from a label's versions is not in that release
# (cuda_crt: the crt/ headers left cuda_nvcc for a component of their own in 13.0).
CUDA_COMPONENTS = {
    "cuda_cccl": ("CXX Core Compute Libraries", {"12.9.1": "12.9.27", "13.0.0": "13.0.50"}),
    "cuda_crt": ("CUDA CRT", {"13.0.0": "13.0.48"}),
    "cuda_cudart": ("CUDA Runtime (cudart)", {"12.9.1": "12.9.79", "13.0.0": "13.0.48"}),
    "cuda_cupti": ("CUPTI", {"12.9.1": "12.9.79", "13.0.0": "13.0.48"}),
    "cuda_nvcc": ("CUDA NVCC", {"12.9.1": "12.9.86", "13.0.0": "13.0.48"}),
    "cuda_nvrtc": ("CUDA NVRTC", {"12.9.1": "12.9.86", "13.0.0": "13.0.48"}),
    "cuda_sanitizer_api": ("CUDA Compute Sanitizer API", {"12.9.1": "12.9.79", "13.0.0": "13.0.48"}),
    "libcublas": ("CUDA cuBLAS", {"12.9.1": "12.9.1.4", "13.0.0": "13.0.0.19"}),
    "libnvjitlink": ("NVIDIA compiler library for JIT LTO functionality",
                     {"12.9.1": "12.9.86", "13.0.0": "13.0.39"}),
}
CUDA_MULTI_BLOCK = ("12.9.1", "libcublas", "linux-x86_64")


def cuda_license(label):
    return (f"CUDA Toolkit demo license, release {label}.\n"
            "Every component of a CUDA release ships this same file.\n").encode()


def cuda_tree(label, comp, version, platform):
    seed = f"cuda/{comp}/{version}/{platform}/"
    major = version.split(".")[0]
    t = Tree(f"{comp}-{platform}-{version}-archive")
    # Identical in every component of a release, as upstream: merging several
    # components into one prefix overlaps on LICENSE.
    t.file("LICENSE", cuda_license(label))
    h = lambda name, n: t.file(f"include/{name}", text(seed + name, f"/* {name} {version} */", n))
    if comp == "cuda_nvcc":
        t.file("bin/nvcc", (f"#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                            f"echo 'Cuda compilation tools, release {major}, V{version}'\n").encode(),
               0o755)
        t.file("bin/ptxas", blob(seed + "ptxas", 20 * 1024), 0o755)
        t.file("nvvm/bin/cicc", blob(seed + "cicc", 28 * 1024), 0o755)
        t.solib("nvvm/lib64", "libnvvm", "4.0.0", "4", seed, 24 * 1024)
        if int(major) < 13:  # from 13.0 on, cuda_crt ships them
            h("crt/host_config.h", 30)
        h("fatbinary_section.h", 10)
    elif comp == "cuda_crt":
        h("crt/host_config.h", 30)
        h("crt/host_defines.h", 40)
    elif comp == "cuda_cudart":
        h("cuda_runtime.h", 60)
        h("cuda_runtime_api.h", 80)
        t.solib("lib", "libcudart", version, major, seed, 12 * 1024)
        t.file("lib/libcudart_static.a", blob(seed + "static", 16 * 1024))
        t.file("lib/stubs/libcuda.so", blob(seed + "stub", 2 * 1024), 0o755)
    elif comp == "cuda_nvrtc":
        h("nvrtc.h", 40)
        t.solib("lib", "libnvrtc", version, major, seed, 40 * 1024)
        t.solib("lib", "libnvrtc-builtins", version, ".".join(version.split(".")[:2]), seed,
                16 * 1024)
    elif comp == "libcublas":
        h("cublas_v2.h", 20)
        h("cublas_api.h", 120)
        h("cublasLt.h", 80)
        big = (label, comp, platform) == CUDA_MULTI_BLOCK
        t.solib("lib", "libcublas", version, major, seed, 48 * 1024)
        t.solib("lib", "libcublasLt", version, major, seed, (160 if big else 72) * 1024)
    elif comp == "cuda_cccl":
        h("cuda/std/version", 12)
        h("cub/version.cuh", 10)
        h("thrust/version.h", 10)
        for i in range(12):
            h(f"cuda/std/__detail/part_{i:02d}.h", 25)
        t.file("lib/cmake/cccl/cccl-config.cmake",
               f"set(CCCL_VERSION {version})\n".encode())
    elif comp == "cuda_cupti":
        t.file("extras/CUPTI/include/cupti.h", text(seed + "cupti.h", f"/* cupti.h {version} */", 30))
        t.solib("extras/CUPTI/lib64", "libcupti", version, major, seed, 32 * 1024)
    elif comp == "libnvjitlink":
        h("nvJitLink.h", 30)
        t.solib("lib", "libnvJitLink", version, major, seed, 36 * 1024)
    elif comp == "cuda_sanitizer_api":
        t.file("compute-sanitizer/compute-sanitizer", blob(seed + "cs", 20 * 1024), 0o755)
        t.file("compute-sanitizer/include/sanitizer.h",
               text(seed + "san", f"/* sanitizer.h {version} */", 20))
        t.file("compute-sanitizer/libsanitizer-public.so", blob(seed + "pub", 12 * 1024), 0o755)
    return t


def cuda_artifacts(labels):
    for label, rel in CUDA_RELEASES.items():
        if labels and label not in labels:
            continue
        arts = []
        comps = {}
        for comp, (name, versions) in CUDA_COMPONENTS.items():
            if label not in versions:
                continue
            version = versions[label]
            entry = {"name": name, "license": "CUDA Toolkit",
                     "license_path": f"{comp}/LICENSE.txt", "version": version}
            for platform in rel["platforms"]:
                rp = f"{comp}/{platform}/{comp}-{platform}-{version}-archive.tar.xz"
                multi = (label, comp, platform) == CUDA_MULTI_BLOCK
                art = Artifact("cuda", rp, cuda_tree(label, comp, version, platform), "tar.xz",
                               multi)
                arts.append(art)
                entry[platform] = art
            comps[comp] = entry
        yield label, rel["date"], comps, arts


PRODUCTS = {"cudnn": cudnn_artifacts, "cuda": cuda_artifacts}


# ---------------------------------------------------------------------------
# Writing the mirror
# ---------------------------------------------------------------------------

def resolve(obj):
    """Replaces Artifact objects in a manifest dict by their records."""
    if isinstance(obj, Artifact):
        return obj.record()
    if isinstance(obj, dict):
        return {k: resolve(v) for k, v in obj.items()}
    return obj


def index_html(product, labels, components):
    """A listing in the style of developer.download.nvidia.com: single-quoted
    hrefs, lexical order (so "9.10.1" comes before "9.8.0")."""
    names = [f"{c}/" for c in sorted(components)] + [f"redistrib_{l}.json" for l in sorted(labels)]
    rows = "\n".join(f"<a href='{n}'>{n}</a><br>" for n in names)
    return (f"<html>\n<head><title>Index of /compute/{product}/redist</title></head>\n"
            f"<body>\n<h1>Index of /compute/{product}/redist</h1>\n"
            f"<a href='../'>Parent Directory</a><br>\n{rows}\n</body>\n</html>\n")


def write_file(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def generate(dest, products, labels, jobs):
    releases = []  # (product, label, date, comps, arts)
    for product in products:
        for label, date, comps, arts in PRODUCTS[product](labels):
            releases.append((product, label, date, comps, arts))
    all_arts = [a for r in releases for a in r[4]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(Artifact.build, all_arts))

    info = {"generator_version": GENERATOR_VERSION, "products": {}, "multi_block": [],
            "vanishing": {}, "identical_overlap": {}}
    for product in products:
        prel = [r for r in releases if r[0] == product]
        if not prel:
            continue
        redist = os.path.join(dest, product, "redist")
        comp_names = set()
        for _, label, date, comps, arts in prel:
            manifest = {"release_date": date, "release_label": label, "release_product": product}
            manifest.update(resolve(comps))
            write_file(os.path.join(redist, f"redistrib_{label}.json"),
                       (json.dumps(manifest, indent=4) + "\n").encode())
            for art in arts:
                write_file(os.path.join(redist, art.relative_path), art.data)
                if art.multi_block:
                    info["multi_block"].append(f"{product}/redist/{art.relative_path}")
            for comp, entry in comps.items():
                comp_names.add(comp)
                lic = cudnn_license(label) if product == "cudnn" else cuda_license(label)
                write_file(os.path.join(redist, entry["license_path"]), lic)
        write_file(os.path.join(redist, "index.html"),
                   index_html(product, [r[1] for r in prel], comp_names).encode())
        info["products"][product] = {"labels": [r[1] for r in prel]}
    if "cudnn" in info["products"]:
        info["vanishing"] = {"cudnn": {l: [p.replace("{v3}", ".".join(
            CUDNN_RELEASES[l]["version"].split(".")[:3])) for p in ps]
            for l, ps in CUDNN_VANISHING.items() if l in info["products"]["cudnn"]["labels"]}}
        info["identical_overlap"] = {"cudnn": {"components": ["cudnn", "cudnn_jit"],
                                               "paths": ["LICENSE", "include/cudnn_version.h"]}}
    write_file(os.path.join(dest, INFO_NAME), (json.dumps(info, indent=2) + "\n").encode())
    return releases


def prepare_dest(dest, products, force):
    """Removes the parts of an earlier demo mirror that are about to be
    regenerated; refuses to touch a non-empty directory that is not one."""
    if os.path.isdir(dest) and os.listdir(dest):
        if not os.path.exists(os.path.join(dest, INFO_NAME)) and not force:
            sys.exit(f"make_demo_mirror: {dest} is not empty and holds no {INFO_NAME}; "
                     "pass --force to write into it anyway")
        for product in products:
            shutil.rmtree(os.path.join(dest, product), ignore_errors=True)
    os.makedirs(dest, exist_ok=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", required=True, help="output directory (the mirror's base)")
    ap.add_argument("--products", default="cudnn,cuda",
                    help="comma-separated products (default: cudnn,cuda)")
    ap.add_argument("--labels", default="",
                    help="comma-separated release labels to generate (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compressions (default: 2)")
    ap.add_argument("--force", action="store_true",
                    help="write into a non-empty directory that is not a demo mirror")
    ap.add_argument("--quiet", action="store_true", help="no summary")
    args = ap.parse_args(argv)

    products = [p for p in args.products.split(",") if p]
    for p in products:
        if p not in PRODUCTS:
            ap.error(f"unknown product {p!r} (known: {', '.join(PRODUCTS)})")
    labels = {l for l in args.labels.split(",") if l}
    known = set(CUDNN_RELEASES) | set(CUDA_RELEASES)
    if labels - known:
        ap.error(f"unknown label(s) {', '.join(sorted(labels - known))} "
                 f"(known: {', '.join(sorted(known))})")
    if shutil.which("xz") is None:
        sys.exit("make_demo_mirror: the xz command is required")

    start = time.monotonic()
    dest = os.path.abspath(args.dest)
    prepare_dest(dest, products, args.force)
    releases = generate(dest, products, labels, max(1, args.jobs))
    if not args.quiet:
        total = 0
        for product, label, _, comps, arts in releases:
            size = sum(len(a.data) for a in arts)
            total += size
            print(f"{product} {label}: {len(comps)} components, {len(arts)} archives, "
                  f"{size / 1024:.0f} KiB")
        print(f"wrote {dest} ({total / 1024:.0f} KiB) in {time.monotonic() - start:.1f}s")
        print(f"base URL: file://{dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
