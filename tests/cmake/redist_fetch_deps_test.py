#!/usr/bin/env python3
"""The docs/cmake.md snippet, `redist_fetch(cudnn ... WITH_DEPS)` +
`target_link_libraries(app PRIVATE CUDNN::cudnn)`, against the real cuDNN and
CUDA headers of this machine, with no CUDA toolkit on the include path.

    redist_fetch_deps_test.py real   packs what /usr/local/cuda holds of cuDNN,
                                     cuda_cudart, cuda_crt (CUDA 13 and later),
                                     libcublas and cuda_nvrtc into NVIDIA-style
                                     archives with two manifests (cudnn and
                                     cuda) in a file:// mirror, then configures
                                     a project made of the snippet as the docs
                                     write it (VERSION and CUDA set to this
                                     machine's, BASE_URL the mirror), builds a
                                     program that includes cudnn.h and calls
                                     cudnnGetVersion() and
                                     cudaRuntimeGetVersion(), and runs it.
    redist_fetch_deps_test.py demo   WITH_DEPS over the e2e demo mirror
                                     (fixture "nginx" generates it; read over
                                     file://), cudnn 9.27.0 for CUDA 12: the
                                     dependencies' libraries are CUDA::
                                     targets, CUDNN::cudnn carries CUDA::cudart,
                                     cublas, cublasLt and nvrtc; re-configuring
                                     does not run the tool, a removed
                                     dependency receipt does; and
                                     redist_fetch(FILE redist.toml) with
                                     `deps = true` links the same targets.

Which file belongs to which component: the pip wheels' RECORDs that
/usr/local/cuda was assembled from (/usr/local/cuda/dist-info/nvidia_*),
nvidia/<dir>/include/X -> include/X, nvidia/<dir>/lib/X -> lib/X, with the
lib<name>.so link NVIDIA's archives carry. Every header is packed; libraries
over 16 MiB (cuBLAS(Lt), NVRTC, cuDNN's engines: hundreds of MiB) are left
out to keep the test small, so the program links the real libcudnn.so.9 and
libcudart.so.<major>. Exits 77 (skipped) where /usr/local/cuda lacks them.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import platform
import re
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cmake_support as cs  # noqa: E402

CUDA = os.environ.get("REDIST_TEST_REAL_CUDA", "/usr/local/cuda")
SKIP = 77
MAX_LIBRARY = 16 << 20

# component -> (product, the wheel's distribution name)
COMPONENTS = {
    "cudnn": ("cudnn", "nvidia_cudnn_cu{major}"),
    "cuda_cudart": ("cuda", "nvidia_cuda_runtime"),
    "cuda_crt": ("cuda", "nvidia_cuda_crt"),
    "libcublas": ("cuda", "nvidia_cublas"),
    "cuda_nvrtc": ("cuda", "nvidia_cuda_nvrtc"),
}

MAIN_CPP = """#include <cudnn.h>
#include <cstdio>

int main() {
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) return 2;
    std::printf("cudnn %zu header %d runtime %d\\n", cudnnGetVersion(), CUDNN_VERSION, runtime);
    return 0;
}
"""


class Skip(Exception):
    pass


def define(path: str, name: str) -> int:
    with open(path, errors="replace") as f:
        m = re.search(rf"^#define {name} (\d+)", f.read(), re.M)
    if not m:
        raise Skip(f"{path} defines no {name}")
    return int(m.group(1))


def record_files(dist: str) -> list[tuple[str, str]]:
    """(archive path, file under CUDA) of one wheel's headers and libraries."""
    out = []
    with open(os.path.join(dist, "RECORD")) as f:
        for line in f:
            path = line.split(",", 1)[0]
            m = re.match(r"nvidia/[^/]+/(include|lib)/(.+)$", path)
            if not m:
                continue
            kind, rel = m.groups()
            src = os.path.join(CUDA, "include" if kind == "include" else "lib64", rel)
            if not os.path.isfile(src):
                raise Skip(f"{src} (listed in {dist}/RECORD) is missing")
            if kind == "lib" and os.path.getsize(src) > MAX_LIBRARY:
                continue
            out.append((f"{kind}/{rel}", src))
    return out


def pack(root: str, product: str, component: str, plat: str, version: str, files, variant: str | None):
    """One NVIDIA-style tar.xz; returns its manifest record."""
    top = f"{component}-{plat}-{version}" + (f"_{variant}" if variant else "") + "-archive"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.GNU_FORMAT, preset=1) as tar:
        links = {}
        for rel, src in sorted(files):
            tar.add(src, arcname=f"{top}/{rel}", recursive=False)
            m = re.match(r"(lib/lib[^/]+\.so)\.\d+$", rel)
            if m:
                links[m.group(1)] = os.path.basename(rel)
        for link, target in sorted(links.items()):
            info = tarfile.TarInfo(f"{top}/{link}")
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
        info = tarfile.TarInfo(f"{top}/LICENSE")
        text = b"Packed from this machine's CUDA for the redist CMake tests.\n"
        info.size, info.mode = len(text), 0o644
        tar.addfile(info, io.BytesIO(text))
    data = buf.getvalue()
    rel = f"{component}/{plat}/{top}.tar.xz"
    path = os.path.join(root, product, "redist", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return {"relative_path": rel, "sha256": hashlib.sha256(data).hexdigest(),
            "md5": hashlib.md5(data).hexdigest(), "size": str(len(data))}


def make_mirror(root: str) -> dict:
    """The mirror of this machine's cuDNN and CUDA; facts for the test."""
    for header in ("cudnn.h", "cudnn_version.h", "cuda.h", "cuda_runtime_api.h"):
        if not os.path.isfile(os.path.join(CUDA, "include", header)):
            raise Skip(f"{CUDA}/include/{header} is missing")
    cuda_version = define(os.path.join(CUDA, "include", "cuda.h"), "CUDA_VERSION")
    major, minor = cuda_version // 1000, cuda_version % 1000 // 10
    version_h = os.path.join(CUDA, "include", "cudnn_version.h")
    cudnn = [define(version_h, n) for n in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")]
    cudnn_label = ".".join(map(str, cudnn))
    cuda_label = f"{major}.{minor}.0"
    plat = {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}.get(platform.machine())
    if not plat:
        raise Skip(f"no platform for {platform.machine()}")
    wanted = ["cudnn", "cuda_cudart", "libcublas", "cuda_nvrtc"] + (["cuda_crt"] if major >= 13 else [])
    manifests = {"cudnn": {}, "cuda": {}}
    for component in wanted:
        product, dist_name = COMPONENTS[component]
        dists = glob.glob(os.path.join(CUDA, "dist-info", dist_name.format(major=major) + "-*.dist-info"))
        if len(dists) != 1:
            raise Skip(f"{CUDA}/dist-info has no single {dist_name.format(major=major)}")
        version = os.path.basename(dists[0])[len(dist_name.format(major=major)) + 1:-len(".dist-info")]
        variant = f"cuda{major}" if product == "cudnn" else None
        record = pack(root, product, component, plat, version, record_files(dists[0]), variant)
        entry = {"name": component, "license": "NVIDIA", "version": version}
        if variant:
            entry["cuda_variant"] = [str(major)]
            entry[plat] = {variant: record}
        else:
            entry[plat] = record
        manifests[product][component] = entry
    for product, label in (("cudnn", cudnn_label), ("cuda", cuda_label)):
        doc = {"release_date": "2030-01-01", "release_label": label, "release_product": product,
               **manifests[product]}
        with open(os.path.join(root, product, "redist", f"redistrib_{label}.json"), "w") as f:
            json.dump(doc, f, indent=4)
    return {"major": major, "minor": minor, "cudnn": cudnn_label, "cuda": cuda_label,
            "cudnn_number": cudnn[0] * 10000 + cudnn[1] * 100 + cudnn[2],  # cuDNN 9's CUDNN_VERSION
            "runtime": cuda_version}


def snippet(source_dir: str) -> list[str]:
    """The docs' redist_fetch(cudnn ...) and target_link_libraries lines."""
    with open(os.path.join(source_dir, "docs", "cmake.md")) as f:
        text = f.read()
    block = re.search(r"```cmake\n(find_package\(redist CONFIG REQUIRED\)[^\n]*\nredist_fetch\(cudnn .*?)```",
                      text, re.S)
    cs.check(block is not None, "docs/cmake.md has no redist_fetch(cudnn ...) snippet")
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    fetch = [line for line in lines if line.startswith("redist_fetch(cudnn ")]
    link = [line for line in lines if line.startswith("target_link_libraries(app ")]
    cs.check(len(fetch) == 1 and len(link) == 1, f"unexpected snippet: {block.group(1)!r}")
    return [fetch[0], link[0]]


def test_real(args):
    work = cs.scratch(args, "redist_fetch_deps")
    mirror = os.path.join(work, "mirror")
    try:
        facts = make_mirror(mirror)
    except Skip as e:
        print(f"SKIP: {e}")
        sys.exit(SKIP)
    fetch, link = snippet(args.source_dir)
    # The docs' release and CUDA major become this machine's; the mirror is the base.
    fetch = re.sub(r"VERSION \S+", f"VERSION {facts['cudnn']}", fetch)
    fetch = re.sub(r"CUDA \d+", f"CUDA {facts['major']}", fetch)
    fetch = fetch[:-1] + f" BASE_URL \"file://{mirror}\")"
    project = os.path.join(work, "project")
    os.makedirs(project)
    with open(os.path.join(project, "main.cpp"), "w") as f:
        f.write(MAIN_CPP)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.19)\nproject(real_cudnn CXX)\n"
                f"include(\"{args.source_dir}/cmake/RedistFetch.cmake\")\n"
                "add_executable(app main.cpp)\n" + fetch + "\n" + link + "\n"
                "get_target_property(links CUDNN::cudnn INTERFACE_LINK_LIBRARIES)\n"
                "file(WRITE \"${CMAKE_BINARY_DIR}/links.txt\" \"${links}\")\n")
    build = os.path.join(work, "build")
    env = cs.env({"CPATH": None, "CPLUS_INCLUDE_PATH": None, "C_INCLUDE_PATH": None, "LIBRARY_PATH": None,
                  "LD_LIBRARY_PATH": None}, xdg_root=os.path.join(work, "xdg"))
    tool = os.path.join(args.build_dir, "bin", "redist")
    cs.run(cs.configure_args(args, project, build, f"-DREDIST_EXECUTABLE={tool}"), env_=env)
    prefix = os.path.join(build, "_redist", "cudnn")
    deps = ["cuda_cudart", "libcublas", "cuda_nvrtc"] + (["cuda_crt"] if facts["major"] >= 13 else [])
    for component in deps:
        receipt = os.path.join(prefix, ".redist", "receipts", "cuda", f"{component}.json")
        cs.check(os.path.isfile(receipt), f"WITH_DEPS did not install {component} ({receipt})")
        with open(receipt) as f:
            cs.check(json.load(f)["release_label"] == facts["cuda"], f"{receipt}: another release")
    with open(os.path.join(build, "links.txt")) as f:
        links = f.read().split(";")
    cs.check("CUDA::cudart" in links, f"CUDNN::cudnn does not carry CUDA::cudart: {links}")
    cs.run([args.cmake, "--build", build, "--verbose"], env_=env)
    # Every header came from the prefix: none from this machine's CUDA.
    if args.generator == "Ninja":
        res = cs.run([args.make_program or "ninja", "-C", build, "-t", "deps"], env_=env)
        headers = [os.path.normpath(os.path.join(build, line.strip()))  # ninja writes them relative to the build
                   for line in res.stdout.splitlines() if line.startswith(" ")]
        for h in ("cudnn.h", "cuda_runtime_api.h", "crt/host_defines.h" if facts["major"] >= 13 else "driver_types.h"):
            cs.check(os.path.join(prefix, "include", h) in headers, f"{h} not read from the prefix: {headers}")
        real_cuda = os.path.realpath(CUDA)
        stray = [h for h in headers if h.startswith((CUDA + "/", real_cuda + "/"))]
        cs.check(not stray, f"headers from {CUDA}: {stray}")
    exe = os.path.join(build, "app")
    needed = cs.needed_libs(exe)
    cs.check("libcudnn.so.9" in needed and f"libcudart.so.{facts['major']}" in needed,
             f"app should need libcudnn.so.9 and libcudart.so.{facts['major']}: {needed}")
    res = cs.run([exe], env_=env)
    expected = f"cudnn {facts['cudnn_number']} header {facts['cudnn_number']} runtime {facts['runtime']}\n"
    cs.check(res.stdout == expected, f"app printed {res.stdout!r}, expected {expected!r}")


DEMO_PROJECT = """cmake_minimum_required(VERSION 3.19)
project(demo_deps NONE)
include("{source}/cmake/RedistFetch.cmake")
redist_fetch(cudnn VERSION 9.27.0 CUDA 12 COMPONENTS cudnn WITH_DEPS BASE_URL "file://{mirror}")
get_target_property(links CUDNN::cudnn INTERFACE_LINK_LIBRARIES)
set(cuda_targets "")
foreach(t IN ITEMS CUDA::cudart CUDA::cublas CUDA::cublasLt CUDA::nvrtc)
  if(TARGET ${{t}})
    list(APPEND cuda_targets ${{t}})
  endif()
endforeach()
file(WRITE "${{CMAKE_BINARY_DIR}}/result.txt" "links=${{links}}\ncudnn=${{CUDNN_TARGETS}}\ncuda=${{cuda_targets}}\n")
"""


def test_demo(args):
    work = cs.scratch(args, "redist_fetch_deps_demo")
    mirror = os.path.join(os.path.abspath(args.state), "mirror")
    cs.check(os.path.isfile(os.path.join(mirror, "mirror-info.json")), f"no demo mirror in {mirror}")
    project = os.path.join(work, "project")
    os.makedirs(project)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write(DEMO_PROJECT.format(source=args.source_dir, mirror=mirror))
    log = os.path.join(work, "calls.log")
    wrapper = os.path.join(work, "redist")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\necho \"$*\" >> '{log}'\nexec '{os.path.join(args.build_dir, 'bin', 'redist')}' \"$@\"\n")
    os.chmod(wrapper, 0o755)
    build = os.path.join(work, "build")
    env = cs.env(xdg_root=os.path.join(work, "xdg"))
    configure = cs.configure_args(args, project, build, f"-DREDIST_EXECUTABLE={wrapper}")

    def result():
        with open(os.path.join(build, "result.txt")) as f:
            return dict(line.split("=", 1) for line in f.read().splitlines())

    def calls():
        with open(log) as f:
            return f.read().splitlines()

    cs.run(configure, env_=env)
    cs.check(len(calls()) == 1 and "--with-deps" in calls()[0], f"one fetch --with-deps expected: {calls()}")
    got = result()
    cs.check(got["links"] == "CUDA::cudart;CUDA::cublas;CUDA::cublasLt;CUDA::nvrtc",
             f"CUDNN::cudnn links {got['links']}")
    cs.check(got["cuda"] == "CUDA::cudart;CUDA::cublas;CUDA::cublasLt;CUDA::nvrtc", f"CUDA targets: {got['cuda']}")
    cs.check("CUDNN::cudnn" in got["cudnn"].split(";") and "cudart" not in got["cudnn"]
             and "cublas" not in got["cudnn"], f"CUDNN_TARGETS holds the dependencies' libraries: {got['cudnn']}")
    cs.run(configure, env_=env)
    cs.check(len(calls()) == 1, f"re-configure ran the tool: {calls()}")
    prefix = os.path.join(build, "_redist", "cudnn")
    os.unlink(os.path.join(prefix, ".redist", "receipts", "cuda", "libcublas.json"))
    cs.run(configure, env_=env)
    cs.check(len(calls()) == 2, f"a removed dependency receipt did not run the tool: {calls()}")
    cs.check(os.path.isfile(os.path.join(prefix, ".redist", "receipts", "cuda", "libcublas.json")),
             "libcublas was not installed again")

    # The same through a project file: deps = true.
    project = os.path.join(work, "file_project")
    os.makedirs(project)
    with open(os.path.join(project, "redist.toml"), "w") as f:
        f.write('[project]\nprefix = "nvidia"\nplatforms = ["linux-x86_64"]\ncuda = "12"\n\n'
                '[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\ndeps = true\n')
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write(DEMO_PROJECT.format(source=args.source_dir, mirror=mirror).replace(
            f'redist_fetch(cudnn VERSION 9.27.0 CUDA 12 COMPONENTS cudnn WITH_DEPS BASE_URL "file://{mirror}")',
            "redist_fetch(FILE redist.toml)"))
    build = os.path.join(work, "file_build")
    file_env = cs.env({"REDIST_BASE_URL": f"file://{mirror}"}, xdg_root=os.path.join(work, "xdg"))
    cs.run(cs.configure_args(args, project, build, f"-DREDIST_EXECUTABLE={wrapper}"), env_=file_env)
    got = result()
    cs.check(got["links"] == "CUDA::cudart;CUDA::cublas;CUDA::cublasLt;CUDA::nvrtc",
             f"redist_fetch(FILE): CUDNN::cudnn links {got['links']}")
    cs.check(got["cuda"] == "CUDA::cudart;CUDA::cublas;CUDA::cublasLt;CUDA::nvrtc",
             f"redist_fetch(FILE): CUDA targets {got['cuda']}")


if __name__ == "__main__":
    sys.exit(cs.main({"real": test_real, "demo": test_demo}))
