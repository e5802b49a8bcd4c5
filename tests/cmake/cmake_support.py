"""Helpers for the CMake package tests (tests/cmake/*_test.py).

Each test script takes the same arguments (see tests/cmake/CMakeLists.txt):
    --build-dir   the redist build tree (has bin/redist, is `cmake --install`ed)
    --source-dir  the redist source tree
    --state       the test state directory (scratch lives in <state>/cmake/)
    --cmake, --generator, --make-program, --cxx, --cc, --libdir
                  how the redist build itself was configured; the consumer
                  projects use the same generator and compilers.
and a subcommand. Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

# Environment variables that would make a run depend on the machine.
_SCRUBBED = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_HOME", "REDIST_BASE_URL",
             "http_proxy", "https_proxy", "all_proxy", "ftp_proxy",
             "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY",
             "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "CMAKE_PREFIX_PATH",
             "CMAKE_GENERATOR", "CMAKE_BUILD_TYPE", "CXXFLAGS", "CFLAGS", "LDFLAGS")


class Failure(AssertionError):
    pass


class Skip(Exception):
    """The test cannot run here (a missing tool, no root): main() says why
    and exits 77, which CTest reports as skipped (SKIP_RETURN_CODE)."""


def parse_args(subcommands):
    p = argparse.ArgumentParser()
    p.add_argument("subcommand", choices=subcommands)
    for name in ("build-dir", "source-dir", "state", "cmake", "generator", "cxx", "cc"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--make-program", default="")
    p.add_argument("--libdir", default="lib")
    return p.parse_args()


def scratch(args, name: str, clean: bool = True) -> str:
    d = os.path.join(os.path.abspath(args.state), "cmake", name)
    if clean:
        rm_tree(d)
    os.makedirs(d, exist_ok=True)
    return d


def install_dir(args) -> str:
    """Where the cmake.install test installs the package (fixture
    redist_installed)."""
    return os.path.join(os.path.abspath(args.state), "cmake", "install")


def env(extra: dict | None = None, xdg_root: str | None = None) -> dict:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    out["NO_PROXY"] = out["no_proxy"] = "127.0.0.1,localhost,::1"
    out.setdefault("LC_ALL", "C.UTF-8")
    if xdg_root:
        # The tool's download cache: never the real ~/.cache.
        for k, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"),
                       ("XDG_DATA_HOME", "data"), ("HOME", "home")):
            out[k] = os.path.join(xdg_root, sub)
    for k, v in (extra or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = str(v)
    return out


def run(cmd, *, check=True, env_=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_ if env_ is not None else env(), cwd=cwd, timeout=timeout)
    res.elapsed = time.monotonic() - t0  # type: ignore[attr-defined]
    if check and res.returncode != 0:
        raise Failure(f"command failed with {res.returncode}: {' '.join(cmd)}\n"
                      f"--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}")
    return res


def configure_args(args, source: str, build: str, *defs: str):
    cmd = [args.cmake, "-S", source, "-B", build, "-G", args.generator,
           f"-DCMAKE_CXX_COMPILER={args.cxx}", f"-DCMAKE_C_COMPILER={args.cc}",
           "-DCMAKE_BUILD_TYPE=Release",
           # Only what the test names: no ~/.cmake/packages, no system registry.
           "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF",
           "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF"]
    if args.make_program:
        cmd.append(f"-DCMAKE_MAKE_PROGRAM={args.make_program}")
    return cmd + list(defs)


def read_cache(build: str) -> dict:
    out = {}
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith(("#", "//")) or "=" not in line:
                continue
            key, value = line.split("=", 1)
            out[key.split(":", 1)[0]] = value
    return out


def check(cond, message: str):
    if not cond:
        raise Failure(message)


def rm_tree(path: str) -> None:
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            def onerror(func, target, _exc):
                os.chmod(os.path.dirname(target), 0o755)
                func(target)
            shutil.rmtree(path, onerror=onerror)
        else:
            os.unlink(path)


def expected_artifact_count(args, manifest: str) -> int:
    """The cross-check: what `redist show --json` says about the manifest."""
    res = run([os.path.join(args.build_dir, "bin", "redist"), "show", "--manifest", manifest,
               "--json"])
    return len(json.loads(res.stdout)["artifacts"])


def needed_libs(binary: str) -> list[str]:
    """DT_NEEDED entries of an ELF file (readelf, from binutils)."""
    res = run(["readelf", "-d", binary])
    out = []
    for line in res.stdout.splitlines():
        if "(NEEDED)" in line and "[" in line:
            out.append(line.split("[", 1)[1].split("]", 1)[0])
    return out


# ---------------------------------------------------------------------------
# A tiny cuDNN stand-in: real shared libraries in an NVIDIA-style archive
# ---------------------------------------------------------------------------

CUDNN_VERSION = "9.99.0"
CUDNN_BUILD = "9.99.0.1"
# cudnnGetVersion() encodes MAJOR*10000 + MINOR*100 + PATCH, as cuDNN 9 does.
CUDNN_VERSION_NUMBER = 99900

_CUDNN_H = """/* Stand-in cudnn.h for the redist CMake tests (not NVIDIA's). */
#ifndef CUDNN_H_
#define CUDNN_H_
#include <stddef.h>
#define CUDNN_MAJOR 9
#define CUDNN_MINOR 99
#define CUDNN_PATCHLEVEL 0
#ifdef __cplusplus
extern "C" {
#endif
size_t cudnnGetVersion(void);
#ifdef __cplusplus
}
#endif
#endif
"""

_LIBS = {
    # name: C source
    "cudnn": f"#include <stddef.h>\nsize_t cudnnGetVersion(void) {{ return {CUDNN_VERSION_NUMBER}; }}\n",
    "cudnn_graph": "int cudnnGraphStandIn(void) { return 1; }\n",
}


def make_cudnn_mirror(args, work: str, root: str) -> dict:
    """Builds <root>/cudnn/redist/{redistrib_9.99.0.json, cudnn/linux-x86_64/
    cudnn-linux-x86_64-9.99.0.1_cuda12-archive.tar.xz} with real libraries
    compiled here. Returns facts the tests check against."""
    top = f"cudnn-linux-x86_64-{CUDNN_BUILD}_cuda12-archive"
    tree = os.path.join(work, "tree", top)
    rm_tree(os.path.join(work, "tree"))
    os.makedirs(os.path.join(tree, "include"))
    os.makedirs(os.path.join(tree, "lib"))
    with open(os.path.join(tree, "LICENSE"), "w") as f:
        f.write("Stand-in license for the redist CMake tests.\n")
    with open(os.path.join(tree, "include", "cudnn.h"), "w") as f:
        f.write(_CUDNN_H)
    for name, source in _LIBS.items():
        src = os.path.join(work, f"{name}.c")
        with open(src, "w") as f:
            f.write(source)
        real = f"lib{name}.so.{CUDNN_VERSION}"
        run([args.cc, "-shared", "-fPIC", "-O2", f"-Wl,-soname,lib{name}.so.9", "-o",
             os.path.join(tree, "lib", real), src])
        os.symlink(real, os.path.join(tree, "lib", f"lib{name}.so.9"))
        os.symlink(f"lib{name}.so.9", os.path.join(tree, "lib", f"lib{name}.so"))
    # A static-only library, to exercise the STATIC IMPORTED rule.
    obj = os.path.join(work, "adv.o")
    with open(os.path.join(work, "adv.c"), "w") as f:
        f.write("int cudnnAdvStandIn(void) { return 2; }\n")
    run([args.cc, "-c", "-fPIC", "-o", obj, os.path.join(work, "adv.c")])
    run(["ar", "rcs", os.path.join(tree, "lib", "libcudnn_adv_static.a"), obj])

    # Pack NVIDIA-style: one top-level *-archive/ directory, symlinks kept.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        tar.add(tree, arcname=top)
    data = buf.getvalue()
    redist = os.path.join(root, "cudnn", "redist")
    rel = f"cudnn/linux-x86_64/{top}.tar.xz"
    os.makedirs(os.path.join(redist, os.path.dirname(rel)), exist_ok=True)
    with open(os.path.join(redist, rel), "wb") as f:
        f.write(data)
    manifest = {
        "release_date": "2030-01-01",
        "release_label": CUDNN_VERSION,
        "release_product": "cudnn",
        "cudnn": {
            "name": "NVIDIA CUDA Deep Neural Network library (stand-in)",
            "license": "cudnn",
            "license_path": "cudnn/LICENSE.txt",
            "version": CUDNN_BUILD,
            "cuda_variant": ["12"],
            "linux-x86_64": {
                "cuda12": {
                    "relative_path": rel,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "md5": hashlib.md5(data).hexdigest(),
                    "size": str(len(data)),
                },
            },
        },
    }
    with open(os.path.join(redist, f"redistrib_{CUDNN_VERSION}.json"), "w") as f:
        json.dump(manifest, f, indent=4)
    return {"top": top, "archive_size": len(data)}


def main(tests: dict) -> int:
    args = parse_args(sorted(tests))
    try:
        tests[args.subcommand](args)
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    print("PASS")
    return 0
